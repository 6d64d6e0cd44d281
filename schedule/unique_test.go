package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

func holds(v bool) Live { return func(context.Context, Guard) (bool, error) { return v, nil } }

func TestUniqueGuardsAKeyPerType(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	u := Unique{Key: "customer-7", For: time.Hour}
	first, err := c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0}, u, holds(true), AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rows := len(mt.Rows("00"))
	// Held: nothing written, the holder named.
	dup, err := c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0, Payload: "again"}, u, holds(true), AddOptions{})
	var de *DuplicateError
	if !errors.As(err, &de) || !errors.Is(err, ErrDuplicate) || de.ID != first.ID || dup.ID != first.ID {
		t.Fatalf("second add: %+v, %v; want a duplicate of %s", dup, err, first.ID)
	}
	if n := len(mt.Rows("00")); n != rows {
		t.Fatalf("a duplicate wrote rows: %d, want %d", n, rows)
	}
	// Another type: its own key space.
	if _, err := c.AddUnique(ctx(t), Item{Type: "receipt", Due: t0}, u, holds(true), AddOptions{}); err != nil {
		t.Fatalf("the same key of another type: %v", err)
	}
	// The holder no longer holds it: the next task takes the guard over.
	next, err := c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0.Add(time.Minute)}, u, holds(false), AddOptions{})
	if err != nil || next.ID == first.ID {
		t.Fatalf("after the holder let go: %+v, %v", next, err)
	}
	g, err := c.GuardOf(ctx(t), "invoice", "customer-7")
	if err != nil || g.Task != next.ID || g.For != time.Hour || len(g.States) != len(DefaultUniqueStates) {
		t.Fatalf("guard %+v, %v; want it held by %s", g, err, next.ID)
	}
	if it, err := c.Get(ctx(t), next.ID); err != nil || !it.Due.Equal(t0.Add(time.Minute)) {
		t.Fatalf("the new task: %+v, %v", it, err)
	}
	// The guard is neither a task nor malformed: List and the mover's
	// sweep leave it alone.
	items, _, err := c.List(ctx(t), ListOptions{})
	if err != nil || len(items) != 3 {
		t.Fatalf("list: %d items, %v; want 3 tasks", len(items), err)
	}
	for _, r := range sweepRanges {
		if r[0] <= guardKey("invoice", "x") && (r[1] == "" || guardKey("invoice", "x") < r[1]) {
			t.Fatalf("sweep range %q includes the guards", r)
		}
	}
}

func TestUniqueRefusesBadInput(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	for _, tc := range []struct {
		name string
		it   Item
		u    Unique
		ao   AddOptions
		want string
	}{
		{"empty key", Item{Type: "t", Due: t0}, Unique{}, AddOptions{}, "empty unique key"},
		{"a slash in the key", Item{Type: "t", Due: t0}, Unique{Key: "a/b"}, AddOptions{}, `"a/b"`},
		{"a control character", Item{Type: "t", Due: t0}, Unique{Key: "a\x01"}, AddOptions{}, "U+0001"},
		{"a long key", Item{Type: "t", Due: t0}, Unique{Key: strings.Repeat("k", 201)}, AddOptions{}, "201 bytes"},
		{"a negative window", Item{Type: "t", Due: t0}, Unique{Key: "k", For: -time.Minute}, AddOptions{}, "-1m0s"},
		{"a window over a year", Item{Type: "t", Due: t0}, Unique{Key: "k", For: 400 * 24 * time.Hour}, AddOptions{}, "9600h"},
		{"an unknown state", Item{Type: "t", Due: t0}, Unique{Key: "k", States: []leasecrontype.RunState{"sleeping"}}, AddOptions{}, "sleeping"},
		{"with replace", Item{Type: "t", Due: t0}, Unique{Key: "k"}, AddOptions{Replace: true}, "replace"},
		{"a bad type", Item{Type: "Bad", Due: t0}, Unique{Key: "k"}, AddOptions{}, "Bad"},
		{"no due time", Item{Type: "t"}, Unique{Key: "k"}, AddOptions{}, "due"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AddUnique(ctx(t), tc.it, tc.u, holds(true), tc.ao)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	if n := len(mt.Rows("00")); n != 0 {
		t.Fatalf("refused input wrote %d rows", n)
	}
	if _, err := ParseUniqueStates("queued, running,succeeded"); err != nil {
		t.Fatal(err)
	}
}

// Concurrent schedulers of one key: exactly one wins, each other is told
// the winner's id.
func TestUniqueConcurrentAddsOneWins(t *testing.T) {
	c, _, _ := newMemClient(t, Options{})
	var wg sync.WaitGroup
	ids := make([]string, 40)
	errs := make([]error, 40)
	for i := range ids {
		wg.Go(func() {
			it, err := c.AddUnique(ctx(t), Item{Type: "t", Due: t0, Payload: fmt.Sprint(i)}, Unique{Key: "k"}, holds(true), AddOptions{})
			ids[i], errs[i] = it.ID, err
		})
	}
	wg.Wait()
	won, winner := 0, ""
	for i, err := range errs {
		if err == nil {
			won++
			winner = ids[i]
		} else if !errors.Is(err, ErrDuplicate) {
			t.Fatalf("add %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d adds won, want 1", won)
	}
	for i := range ids {
		if ids[i] != winner {
			t.Fatalf("add %d answered %s, want the winner %s", i, ids[i], winner)
		}
	}
}

// A task row and its guard written by another language, per the table
// contract (one transaction, the guard's RowKey "uq~{type}~{key}"): a
// second writer's transaction fails with 409, and AddUnique names the
// directly written task as the holder while it is pending.
func TestAzureUniqueFromAnotherWriter(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	submit := func(id string) error {
		rk := mustKey(t0.Add(time.Hour), id)
		row, _ := json.Marshal(map[string]any{"PartitionKey": "00", "RowKey": rk, "Message": "from python", "Type": "invoice"})
		guard, _ := json.Marshal(map[string]any{"PartitionKey": "00", "RowKey": "uq~invoice~customer-7", "Task": id,
			"UniqueFor": int64(3600), "UniqueStates": "", "Created": t0.Format(time.RFC3339)})
		_, err := a.raw.SubmitTransaction(ctx(t), []aztables.TransactionAction{
			{ActionType: aztables.TransactionTypeAdd, Entity: row},
			{ActionType: aztables.TransactionTypeAdd, Entity: guard},
		}, nil)
		return err
	}
	if err := submit("py-1"); err != nil {
		t.Fatal(err)
	}
	if err := submit("py-2"); err == nil {
		t.Fatal("a second writer's task and guard were both accepted")
	}
	live := func(ctx context.Context, g Guard) (bool, error) {
		_, err := a.c.Get(ctx, g.Task)
		return err == nil, nil
	}
	_, err := a.c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0}, Unique{Key: "customer-7", For: time.Hour}, live, AddOptions{})
	var de *DuplicateError
	if !errors.As(err, &de) || de.ID != "py-1" {
		t.Fatalf("AddUnique: %v; want a duplicate of the directly written py-1", err)
	}
	if g, err := a.c.GuardOf(ctx(t), "invoice", "customer-7"); err != nil || g.For != time.Hour || len(g.States) != len(DefaultUniqueStates) {
		t.Fatalf("guard read back: %+v, %v", g, err)
	}
	// The sweep's query of due guards on Azurite: a guard due for a check
	// and no longer held goes; one not due (or without CheckAfter, as
	// py-1's) stays.
	if _, err := a.c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0}, Unique{Key: "due"}, holds(true), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0}, Unique{Key: "later", For: time.Hour}, holds(true), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := sweepGuards(ctx(t), a.table, "00", t0.Add(time.Minute), holds(false))
	if err != nil || n != 1 {
		t.Fatalf("sweep removed %d guards, %v; want 1", n, err)
	}
	for key, want := range map[string]bool{"due": false, "later": true, "customer-7": true} {
		if _, err := a.c.GuardOf(ctx(t), "invoice", key); (err == nil) != want {
			t.Errorf("guard %s after the sweep: %v, want present %v", key, err, want)
		}
	}
}

// The mover's sweep deletes a guard whose task no longer holds the key —
// reading only guards whose check is due — and moves a live one's next
// check on by GuardRecheck: a guard outlives its window by at most that.
func TestSweepRemovesGuardsPastTheirWindow(t *testing.T) {
	var mu sync.Mutex
	held := true
	asked := 0
	live := func(context.Context, Guard) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return held, nil
	}
	e := newMoverEnv(t, 1, MoverOptions{GuardLive: live})
	if _, err := e.c.AddUnique(ctx(t), Item{Type: "t", Due: t0.Add(24 * time.Hour)}, Unique{Key: "k", For: 10 * time.Minute}, holds(true), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	sweep := func() {
		t.Helper()
		if err := e.m.sweep(ctx(t), 1); err != nil {
			t.Fatal(err)
		}
	}
	guard := func() (Guard, error) { return e.c.GuardOf(ctx(t), "t", "k") }
	sweep() // not due for a check yet
	if _, err := guard(); err != nil || asked != 0 {
		t.Fatalf("before its window: guard %v, asked %d times", err, asked)
	}
	e.fc.Advance(10 * time.Minute)
	sweep() // due; still held: kept, next check in GuardRecheck
	if _, err := guard(); err != nil || asked != 1 {
		t.Fatalf("held: guard %v, asked %d times", err, asked)
	}
	sweep()
	if asked != 1 {
		t.Fatalf("a rechecked guard was read again %d times before GuardRecheck", asked-1)
	}
	mu.Lock()
	held = false
	mu.Unlock()
	e.fc.Advance(GuardRecheck)
	sweep()
	if _, err := guard(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a guard no longer held survived the sweep: %v", err)
	}
	// The task itself stays.
	if items, _, err := e.c.List(ctx(t), ListOptions{}); err != nil || len(items) != 1 {
		t.Fatalf("tasks after the sweep: %d, %v", len(items), err)
	}
}

// A guard whose liveness check fails is kept and reported; the sweep
// goes on with the shard's other guards.
func TestSweepGuardsGoesOnPastAFailedCheck(t *testing.T) {
	c, mt, fc := newMemClient(t, Options{})
	for _, key := range []string{"a", "b"} {
		if _, err := c.AddUnique(ctx(t), Item{ID: "task-" + key, Type: "t", Due: t0.Add(24 * time.Hour)}, Unique{Key: key, For: 10 * time.Minute}, holds(true), AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fc.Advance(10 * time.Minute)
	live := func(_ context.Context, g Guard) (bool, error) {
		if g.Task == "task-a" {
			return false, errors.New("run store down")
		}
		return false, nil
	}
	n, err := sweepGuards(ctx(t), mt, "00", fc.Now(), live)
	if err == nil || !strings.Contains(err.Error(), guardKey("t", "a")) || !strings.Contains(err.Error(), "run store down") {
		t.Fatalf("err = %v; want the failed check of %s", err, guardKey("t", "a"))
	}
	if n != 1 {
		t.Fatalf("deleted %d guards, want 1", n)
	}
	if _, err := c.GuardOf(ctx(t), "t", "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the guard after the failed check survived the sweep: %v", err)
	}
	if _, err := c.GuardOf(ctx(t), "t", "a"); err != nil {
		t.Fatalf("the guard whose check failed: %v", err)
	}
}

// The mover's message of a unique task carries its key's window and
// states, which a requeue once it died takes the key again with (issue
// 38, seed 4772); a row without them (an earlier release's, or another
// program's) sends none, and the requeue falls back.
func TestMovedUniqueTaskCarriesItsWindow(t *testing.T) {
	e := newMoverEnv(t, 1, MoverOptions{})
	u := Unique{Key: "k", For: 45 * time.Second, States: []leasecrontype.RunState{leasecrontype.RunQueued, leasecrontype.RunRunning, leasecrontype.RunDead}}
	it, err := e.c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0.Add(-time.Second)}, u, holds(true), AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	s, ok := e.q.byID(it.ID)
	if !ok || s.env.UniqueKey != "k" || s.env.UniqueFor != 45 || s.env.UniqueStates != "queued,running,dead" {
		t.Fatalf("the moved message: %+v, sent %v; want the key k for 45 s in queued,running,dead", s.env, ok)
	}
}

// A unique task whose transaction committed with its answer lost takes
// the guard it meets for its own — it names this very task, written in
// this very call — instead of answering "already scheduled" for the task
// it wrote (issue 38, the simulator's seed 73349: told refused, the user
// had a task running that it did not know of). Another call's guard of
// the same id still refuses.
func TestAddUniqueTakesItsOwnGuardAfterALostAnswer(t *testing.T) {
	mt := table.NewMemory("", nil)
	clk := clock.NewFake(t0)
	lt := &lostAnswer{Table: mt, lose: itemInsert}
	c, err := newClient(lt, Options{Clock: clk, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	u := Unique{Key: "customer-9", For: time.Minute}
	it, err := c.AddUnique(ctx(t), Item{Type: "invoice", Due: t0.Add(time.Hour), Payload: "p"}, u, holds(true), AddOptions{})
	if err != nil || !lt.lost {
		t.Fatalf("AddUnique after a lost answer: %+v, %v (lost %v); want it scheduled", it, err, lt.lost)
	}
	got, err := c.Get(ctx(t), it.ID)
	if err != nil || got.ETag != it.ETag || got.Payload != "p" {
		t.Fatalf("the task: %+v, %v; want it pending as answered (ETag %q)", got, err, it.ETag)
	}
	// The same id and key from another call, a moment later: refused.
	clk.Advance(time.Second)
	if _, err := c.AddUnique(ctx(t), Item{ID: it.ID, Type: "invoice", Due: t0.Add(time.Hour), Payload: "p"}, u, holds(true), AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
		t.Fatalf("another call of the same id: %v; want already scheduled", err)
	}
}

// Unique states given but naming none (",,", " , ") are refused: read
// as the default states before, they hid a typo behind a key that counts
// states the caller did not ask for.
func TestParseUniqueStatesRefusesAListOfNothing(t *testing.T) {
	for _, s := range []string{",", ",,", " , "} {
		if _, err := ParseUniqueStates(s); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
			t.Errorf("ParseUniqueStates(%q) = %v; want ErrInvalid naming the value", s, err)
		}
	}
	if got, err := ParseUniqueStates(""); err != nil || got != nil {
		t.Errorf(`ParseUniqueStates("") = %v, %v; want nothing (the default states)`, got, err)
	}
	if got, err := ParseUniqueStates(" dead, succeeded ,"); err != nil || len(got) != 2 {
		t.Errorf("ParseUniqueStates with a trailing comma = %v, %v; want two states", got, err)
	}
}

// A requeue's Retake of a key whose guard still names the task writes the
// guard again, as of now and naming the requeue: a take between it and the
// requeue's mark of the run then finds a requeue under way, which the
// key's holder check counts as holding it (issue 38, sweep seed
// 136364: the guard was left as the task's scheduling wrote it, a
// schedule in that gap took the key over, and both tasks ran).
func TestARetakeOfItsOwnGuardTakesItAgainFromNow(t *testing.T) {
	c, mt, fc := newMemClient(t, Options{})
	u := Unique{Key: "k", States: []leasecrontype.RunState{leasecrontype.RunScheduled, leasecrontype.RunQueued, leasecrontype.RunRunning}}
	first, err := c.AddUnique(ctx(t), Item{Type: "t", Due: t0}, u, holds(true), AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Hour) // it ran and died meanwhile
	if err := c.Retake(ctx(t), "t", "k", first.ID, "rq-test", Unique{Key: "k", For: time.Minute}, holds(false)); err != nil {
		t.Fatal(err)
	}
	e, err := mt.Get(ctx(t), first.Shard, guardKey("t", "k"))
	if err != nil {
		t.Fatal(err)
	}
	// (Its own window and states stay: the message's, given here as a
	// minute and the defaults, may be of an earlier scheduling of the id.)
	if g := readGuard("t", "k", e); g.Task != first.ID || !g.Created.Equal(fc.Now()) || len(g.States) != 3 || g.For != 0 || g.Requeue != "rq-test" {
		t.Errorf("guard after the retake: %+v; want %s's, created now (%s), with its own window and states, naming the requeue", g, first.ID, fc.Now())
	}
}
