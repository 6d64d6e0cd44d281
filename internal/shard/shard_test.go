package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/table"
)

var t0 = time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// apply returns m with changes written.
func apply(m Map, changes []Assignment) Map {
	out := Map{Shards: map[string]Assignment{}}
	for s, a := range m.Shards {
		out.Shards[s] = a
	}
	for _, c := range changes {
		out.Shards[c.Shard] = c
	}
	return out
}

func counts(m Map, shards, live []string) map[string]int {
	c := map[string]int{}
	for _, l := range live {
		c[l] = 0
	}
	for _, s := range shards {
		c[m.Shards[s].Owner]++
	}
	return c
}

// checkBalanced fails unless every shard has a live owner and the shares
// differ by at most one.
func checkBalanced(t *testing.T, m Map, shards, live []string) {
	t.Helper()
	c := counts(m, shards, live)
	lo, hi := len(shards), 0
	for _, l := range live {
		lo, hi = min(lo, c[l]), max(hi, c[l])
	}
	if len(c) != len(live) || hi-lo > 1 {
		t.Fatalf("unbalanced: %v over live %v", c, live)
	}
}

func TestPlanKeepsSharesEvenWithFewMoves(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		n := 1 + r.IntN(64)
		shards := names("", n)
		pool := names("w", 1+r.IntN(10))
		m := Map{Shards: map[string]Assignment{}}
		var live []string
		for _, p := range pool {
			if r.IntN(3) > 0 {
				live = append(live, p)
			}
		}
		// A map left by earlier memberships: owners live, dead or none.
		for _, s := range shards {
			if r.IntN(5) > 0 {
				m.Shards[s] = Assignment{Shard: s, Owner: pool[r.IntN(len(pool))], Epoch: int64(r.IntN(100))}
			}
		}
		gen := int64(1 + r.IntN(5))
		changes := Plan(m, shards, live, gen, t0)
		if len(live) == 0 {
			if changes != nil {
				t.Fatalf("trial %d: changes without a live member: %v", trial, changes)
			}
			continue
		}
		after := apply(m, changes)
		checkBalanced(t, after, shards, live)
		// Only what the balance needs moves: a shard of a live member
		// moves only when that member was above its larger share.
		before := counts(m, shards, live)
		floor := n / len(live)
		for _, c := range changes {
			old := m.Shards[c.Shard]
			if slices.Contains(live, old.Owner) && before[old.Owner] <= floor {
				t.Fatalf("trial %d: shard %s moved from %s holding %d (no share is below %d)", trial, c.Shard, old.Owner, before[old.Owner], floor)
			}
			if c.Owner != old.Owner && (c.Epoch <= old.Epoch || c.Epoch < gen<<epochShift) {
				t.Fatalf("trial %d: epoch %d after %d in generation %d", trial, c.Epoch, old.Epoch, gen)
			}
		}
		// Stable membership: the next cycles change nothing.
		if again := Plan(after, shards, live, gen, t0); len(again) != 0 {
			t.Fatalf("trial %d: a second plan with the same members moved %v", trial, again)
		}
	}
}

func TestJoinAndLeaveMoveAtMostAShare(t *testing.T) {
	for _, n := range []int{1, 7, 8, 64} {
		shards := names("", n)
		m := Map{Shards: map[string]Assignment{}}
		var live []string
		for k := 1; k <= 9; k++ {
			live = append(live, fmt.Sprintf("w%d", k))
			changes := Plan(m, shards, live, 1, t0)
			if limit := (n + k - 1) / k; k > 1 && ownerChanges(m, changes) > limit {
				t.Errorf("N=%d: member %d joining moved %d shards, more than ceil(N/%d) = %d", n, k, ownerChanges(m, changes), k, limit)
			}
			m = apply(m, changes)
			checkBalanced(t, m, shards, live)
		}
		for len(live) > 1 {
			gone := live[0]
			had := counts(m, shards, live)[gone]
			live = live[1:]
			changes := Plan(m, shards, live, 1, t0)
			if moved := ownerChanges(m, changes); moved != had {
				t.Errorf("N=%d: %s leaving with %d shards moved %d", n, gone, had, moved)
			}
			m = apply(m, changes)
			checkBalanced(t, m, shards, live)
		}
	}
}

// ownerChanges counts the changes that give a shard to another owner.
func ownerChanges(m Map, changes []Assignment) int {
	n := 0
	for _, c := range changes {
		if c.Owner != m.Shards[c.Shard].Owner {
			n++
		}
	}
	return n
}

type fakeRoster struct {
	mu   sync.Mutex
	live []string
}

func (f *fakeRoster) set(live ...string) {
	f.mu.Lock()
	f.live = live
	f.mu.Unlock()
}

func (f *fakeRoster) Live(context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.live...), nil
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestOwnersFollowTheBalancer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tb := table.NewMemory("ScheduledItems", clock.Real{})
	shards := names("", 8)
	roster := &fakeRoster{}
	roster.set("a", "b")
	log := slog.New(slog.DiscardHandler)
	b := &Balancer{T: tb, Roster: roster, Count: len(shards), Cycle: 10 * time.Millisecond, Clock: clock.Real{}, Logger: log}
	bctx, stopB := context.WithCancel(ctx)
	bdone := make(chan error, 1)
	go func() { bdone <- b.Run(bctx, 3) }()

	// moving records which member moves which shard under which epoch, and
	// fails the test if two members move one shard at once.
	var mu sync.Mutex
	moving := map[string]string{}
	var overlap []string
	owner := func(member string) (*Owner, context.CancelFunc) {
		octx, stop := context.WithCancel(ctx)
		o := &Owner{T: tb, Member: member, Cycle: 10 * time.Millisecond, Clock: clock.Real{}, Logger: log,
			NextDue: func(context.Context, string) (time.Time, bool, error) { return time.Time{}, false, nil },
			Move: func(ctx context.Context, shard string, epoch int64, _ func(context.Context, bool, time.Duration) error) error {
				mu.Lock()
				if other, ok := moving[shard]; ok {
					overlap = append(overlap, fmt.Sprintf("%s: %s and %s", shard, other, member))
				}
				moving[shard] = member
				mu.Unlock()
				<-ctx.Done()
				mu.Lock()
				delete(moving, shard)
				mu.Unlock()
				return nil
			}}
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			if err := o.Run(octx); err != nil {
				t.Errorf("owner %s: %v", member, err)
			}
		}()
		// stop returns once Run has stopped every move (as a dead
		// member's moves have stopped by the time its lease lapses).
		return o, func() { stop(); <-ran }
	}
	oa, _ := owner("a")
	ob, stopB2 := owner("b")
	owned := func(o *Owner) int { return len(o.Owned()) }
	eventually(t, "a and b share 8 shards 4/4", func() bool { return owned(oa) == 4 && owned(ob) == 4 })

	oc, _ := owner("c")
	roster.set("a", "b", "c")
	eventually(t, "c joins: 3/3/2", func() bool {
		s := []int{owned(oa), owned(ob), owned(oc)}
		slices.Sort(s)
		return slices.Equal(s, []int{2, 3, 3})
	})

	stopB2() // b dies: its moves stop, then its lease lapses
	roster.set("a", "c")
	eventually(t, "b's shards go to a and c: 4/4", func() bool { return owned(oa) == 4 && owned(oc) == 4 })
	m, err := Read(ctx, tb)
	if err != nil || m.Generation != 3 || len(m.Shards) != 8 {
		t.Fatalf("map %+v, %v", m, err)
	}
	mu.Lock()
	if len(overlap) > 0 {
		t.Errorf("two members moved a shard at once (in this test a member stops before its shards move on): %v", overlap)
	}
	mu.Unlock()

	// A newer balancer fences this one out.
	stopB()
	<-bdone
	b2 := &Balancer{T: tb, Roster: roster, Count: len(shards), Cycle: 10 * time.Millisecond, Clock: clock.Real{}, Logger: log}
	if err := b2.cycle(ctx, 4, true, log); err != nil {
		t.Fatal(err)
	}
	if err := b.Run(ctx, 3); !errors.Is(err, ErrFenced) {
		t.Fatalf("the deposed balancer: %v, want ErrFenced", err)
	}
}

// TestRunPartsGrowWithTheShards: the run records' partition count follows
// the map's span up, never down, and is read by everyone (Next) for
// RunPartsSettle before anyone writes under it.
func TestRunPartsGrowWithTheShards(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	tb := table.NewMemory("ScheduledItems", clk)
	roster := &fakeRoster{}
	roster.set("a")
	log := slog.New(slog.DiscardHandler)
	b := &Balancer{T: tb, Roster: roster, Count: 8, Cycle: time.Second, Clock: clk, Logger: log, RunParts: 4}
	layout := func() (int, []int) {
		t.Helper()
		m, err := Read(ctx, tb)
		if err != nil {
			t.Fatal(err)
		}
		return m.Runs.Layout(4)
	}
	want := func(what string, w int, r ...int) {
		t.Helper()
		gw, gr := layout()
		if gw != w || !slices.Equal(gr, r) {
			t.Fatalf("%s: written under %d, read from %v; want %d, %v", what, gw, gr, w, r)
		}
	}
	cycle := func() {
		t.Helper()
		if err := b.cycle(ctx, 1, true, log); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	want("8 shards, just written", 4, 4, 8)
	cycle() // the settling counts from the first read that shows it
	clk.Advance(RunPartsSettle - time.Second)
	cycle()
	want("a second before it settles", 4, 4, 8)
	clk.Advance(time.Second)
	cycle()
	want("settled", 8, 4, 8)

	// Shrinking keeps eight; growing to 24 starts again.
	done := func(n int) { // every shard done pointing: the change ends
		t.Helper()
		m, _ := Read(ctx, tb)
		for _, a := range m.Sorted() {
			if err := markDone(ctx, tb, a, n); err != nil {
				t.Fatal(err)
			}
		}
		cycle()
	}
	done(8)
	if _, err := SetCount(ctx, tb, 3); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	cycle()
	want("3 shards", 8, 4, 8)
	done(3)
	if _, err := SetCount(ctx, tb, 24); err != nil {
		t.Fatal(err)
	}
	cycle()
	want("24 shards", 8, 4, 8, 24)
	cycle()
	clk.Advance(RunPartsSettle)
	cycle()
	want("24 settled", 24, 4, 8, 24)

	// A map without the property (an earlier release wrote it) reads as
	// the default.
	if w, r := (RunParts{}).Layout(4); w != 4 || !slices.Equal(r, []int{4}) {
		t.Fatalf("no run parts: %d, %v", w, r)
	}
	if got := parseCounts("4, 8,x,-1,,16"); !slices.Equal(got, []int{4, 8, 16}) {
		t.Fatalf("parseCounts = %v", got)
	}
}

// On a fresh account — no schedule table yet, before any worker has run —
// the map reads as none, and a change of the count is refused with what to
// do instead of the table's "not found" (issue 38).
func TestSetCountOnAFreshAccount(t *testing.T) {
	ctx := context.Background()
	tb := table.NewMissingMemory("ScheduledItems", clock.NewFake(t0))
	m, err := Read(ctx, tb)
	if err != nil || m.Count != 0 || len(m.Shards) != 0 {
		t.Fatalf("Read of a missing table: %+v, %v; want no map", m, err)
	}
	_, err = SetCount(ctx, tb, 8)
	if !errors.Is(err, ErrNoMap) {
		t.Fatalf("SetCount(8) on a fresh account: %v; want ErrNoMap", err)
	}
	for _, want := range []string{"shards.count: 8", "worker"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("SetCount(8) on a fresh account: %q does not say %q", err, want)
		}
	}
}

// A pass that found nothing to do while the shard's earliest row is
// already within the early window — a row its mover sent early, waiting
// in the table until it is a pass away — waits the mover's poll before the
// next pass. Pace used to return at once then, and the mover passed over
// the shard without pause until the row left (found by the simulator,
// seed 21: a loop of passes and queries that kept virtual time from
// moving; against Azure, requests as fast as the account answers for up
// to the early window per task).
func TestPaceWaitsWhileARowSentEarlyWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := table.NewMemory("ScheduledItems", nil)
		due := time.Now().Add(10 * time.Second)
		o := &Owner{T: tb, Member: "a", Cycle: time.Second, Clock: clock.Real{}, Logger: slog.New(slog.DiscardHandler), Early: time.Minute,
			NextDue: func(context.Context, string) (time.Time, bool, error) { return due, true, nil }}
		g := newGate(o, Assignment{Shard: "00"})
		start := time.Now()
		if err := g.Pace(t.Context(), false, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 5*time.Second {
			t.Fatalf("Pace returned after %v with a row due in 10 s already sent early; want the mover's 5 s poll", waited)
		}
	})
}

// A quiet shard passes again — and so sweeps, which its mover does only
// between passes — when a look comes with its sweep due, and not before:
// a row no due query reaches (a malformed one, a guard no longer held)
// in a shard with nothing due was never found (make chaos-shards, bad
// input: a row inserted with RowKey "zzz-not-a-time" was not set aside
// in three minutes).
func TestAQuietShardPassesForItsSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := table.NewMemory("ScheduledItems", nil)
		if _, err := tb.Submit(t.Context(), []table.Op{{Kind: table.Insert, PartitionKey: Partition, RowKey: "00", Props: table.Props{}}}); err != nil {
			t.Fatal(err)
		}
		o := &Owner{T: tb, Member: "a", Cycle: time.Second, Clock: clock.Real{}, Logger: slog.New(slog.DiscardHandler), Early: time.Minute,
			NextDue: func(context.Context, string) (time.Time, bool, error) { return time.Time{}, false, nil }, SweepEvery: time.Minute}
		g := newGate(o, Assignment{Shard: "00"})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var mu sync.Mutex
		passes := 0
		count := func() int { mu.Lock(); defer mu.Unlock(); return passes }
		go func() { // the mover: a pass, then its pace
			for ctx.Err() == nil {
				mu.Lock()
				passes++
				mu.Unlock()
				if g.Pace(ctx, false, time.Second) != nil {
					return
				}
			}
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !g.isQuiet() {
			t.Fatal("a shard with nothing due is not quiet after 10 s")
		}
		quiet := count()
		g.poke()
		synctest.Wait()
		if got := count(); got != quiet {
			t.Fatalf("a look 8 s into the quiet made %d passes; want none before the sweep is due", got-quiet)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := count(); got != quiet {
			t.Fatalf("a quiet shard made %d passes in a minute without a look; want none", got-quiet)
		}
		g.poke()
		synctest.Wait()
		if got := count(); got != quiet+1 {
			t.Fatalf("a look with the sweep due made %d passes; want one", got-quiet)
		}
		if !g.isQuiet() {
			t.Fatal("the shard did not go quiet again after its sweep's pass")
		}
	})
}

// TestSizeRuns: the count run records are written under is recorded once,
// by whoever comes first (a missing map row is inserted, a map written by
// a balancer gains the property), and never changed by a later call;
// a balancer then grows it to what the fleet's queues call for.
func TestSizeRuns(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	tb := table.NewMemory("ScheduledItems", clk)
	if _, err := SizeRuns(ctx, tb, 0); err == nil || !strings.Contains(err.Error(), "0 partitions") {
		t.Fatalf("SizeRuns(0) = %v, want an error naming the count", err)
	}
	rp, err := SizeRuns(ctx, tb, 16)
	if err != nil || !slices.Equal(rp.Written, []int{16}) {
		t.Fatalf("first SizeRuns(16) = %v, %v; want [16]", rp, err)
	}
	if rp, err := SizeRuns(ctx, tb, 4); err != nil || !slices.Equal(rp.Written, []int{16}) {
		t.Fatalf("a later SizeRuns(4) = %v, %v; want the recorded [16] kept", rp, err)
	}
	m, err := Read(ctx, tb)
	if err != nil {
		t.Fatal(err)
	}
	if m.Count != 0 || m.Generation != 0 {
		t.Fatalf("the map row holds count %d, generation %d: SizeRuns wrote more than the run parts", m.Count, m.Generation)
	}
	if l := m.Layout(8); l.Count != 8 || l.PrevCount != 1 {
		t.Fatalf("a map with only the run parts reads as written: layout %+v", l)
	}

	// A balancer takes over the row and leaves the recorded count alone:
	// 16 is what its queues call for, more than its 8 shards.
	roster := &fakeRoster{}
	roster.set("a")
	log := slog.New(slog.DiscardHandler)
	b := &Balancer{T: tb, Roster: roster, Count: 8, Cycle: time.Second, Clock: clk, Logger: log, RunParts: 4, RunPartsFor: 16}
	if err := b.cycle(ctx, 1, true, log); err != nil {
		t.Fatal(err)
	}
	if m, _ := Read(ctx, tb); m.Count != 8 || !slices.Equal(m.Runs.Written, []int{16}) || m.Runs.Next != 0 {
		t.Fatalf("after the balancer's first write: count %d, run parts %+v; want 8, [16]", m.Count, m.Runs)
	}

	// A map a balancer wrote before anything recorded the run parts
	// gains them; one with a count pending keeps it.
	tb2 := table.NewMemory("ScheduledItems", clk)
	b2 := &Balancer{T: tb2, Roster: roster, Count: 2, Cycle: time.Second, Clock: clk, Logger: log}
	if err := b2.cycle(ctx, 1, true, log); err != nil {
		t.Fatal(err)
	}
	if rp, err := SizeRuns(ctx, tb2, 4); err != nil || !slices.Equal(rp.Written, []int{4}) {
		t.Fatalf("SizeRuns on a balancer's map = %v, %v; want [4]", rp, err)
	}
	if m, _ := Read(ctx, tb2); m.Count != 2 || m.Generation != 1 {
		t.Fatalf("SizeRuns changed the balancer's fields: %+v", m)
	}

	// An account whose records are under the default grows to what the
	// queues call for through Next, as with the shards.
	b2.RunParts, b2.RunPartsFor = 4, 12
	if err := b2.cycle(ctx, 1, false, log); err != nil {
		t.Fatal(err)
	}
	m, _ = Read(ctx, tb2)
	if w, r := m.Runs.Layout(4); w != 4 || !slices.Equal(r, []int{4, 12}) || m.Runs.Next != 12 {
		t.Fatalf("4 recorded, 12 called for: written under %d, read from %v, next %d; want 4, [4 12], 12", w, r, m.Runs.Next)
	}
	if rp, err := SizeRuns(ctx, tb2, 64); err != nil || !slices.Equal(rp.Written, []int{4}) || rp.Next != 12 {
		t.Fatalf("SizeRuns while a count is pending = %+v, %v; want it left alone", rp, err)
	}
}

// Every map names, as Open, a count whose open rows stand in each of its
// shards: the first balancer writes them before the map, a change of the
// count writes the new count's before it names it, and a map of an
// earlier release (no Open) gets them at the next cycle.
func TestOpenRowsStandBeforeTheMapNamesThem(t *testing.T) {
	ctx, tb, b, log := oneMemberBalancer(4)
	open := func(what string, n int) {
		t.Helper()
		m, err := Read(ctx, tb)
		if err != nil || m.Open != n {
			t.Fatalf("%s: the map names %d open, %v; want %d", what, m.Open, err, n)
		}
		for _, s := range Names(n) {
			if _, err := tb.Get(ctx, s, OpenRowKey(n)); err != nil {
				t.Fatalf("%s: open row of %d in shard %s: %v", what, n, s, err)
			}
		}
	}
	if err := b.cycle(ctx, 1, true, log); err != nil {
		t.Fatal(err)
	}
	open("the first map", 4)
	m, _ := Read(ctx, tb)
	for _, a := range m.Sorted() { // every shard done: the first change ends
		if err := markDone(ctx, tb, a, 4); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.cycle(ctx, 1, false, log); err != nil {
		t.Fatal(err)
	}
	if _, err := SetCount(ctx, tb, 6); err != nil {
		t.Fatal(err)
	}
	open("a change to 6", 6)
	// An earlier release's change of the count names no open rows.
	if _, err := tb.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow,
		Props: table.Props{PropCount: int64(9), PropPrevCount: int64(6), PropSpan: int64(9)}}}); err != nil {
		t.Fatal(err)
	}
	if m, _ := Read(ctx, tb); m.Layout(4).Open == m.Count {
		t.Fatalf("a count of 9 set without open rows reads as open: %+v", m.Layout(4))
	}
	if err := b.cycle(ctx, 1, false, log); err != nil {
		t.Fatal(err)
	}
	open("the cycle after an earlier release's change", 9)
}

// A mover may read the map's shards (Owner.Shards: a held-back mover
// counting the other shards' early sends) while its owner, taking the
// shard away, waits for it to stop: the read must not wait for the owner
// (issue 38, sim seed 161778: the two waited on each other for good).
func TestAMoverReadsTheShardsWhileItsOwnerStopsIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clock.NewFake(t0)
	read := make(chan []string, 1)
	var o *Owner
	o = &Owner{T: table.NewMemory("ScheduledItems", clk), Member: "a", Cycle: time.Second, Clock: clk, Logger: slog.New(slog.DiscardHandler),
		NextDue: func(context.Context, string) (time.Time, bool, error) { return time.Time{}, false, nil },
		Move: func(ctx context.Context, shard string, epoch int64, _ func(context.Context, bool, time.Duration) error) error {
			<-ctx.Done()
			read <- o.Shards() // as a pass under way does before it sees its context ended
			return nil
		}}
	all := []string{"00", "01"}
	o.all.Store(&all)
	o.moves = map[string]*move{}
	o.apply(ctx, Map{Shards: map[string]Assignment{"00": {Owner: "a", Epoch: 1}, "01": {Owner: "b", Epoch: 1}}})
	if got := o.Owned(); !slices.Equal(got, []string{"00"}) {
		t.Fatalf("owns %v; want [00]", got)
	}
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		o.apply(ctx, Map{Shards: map[string]Assignment{"00": {Owner: "b", Epoch: 2}, "01": {Owner: "b", Epoch: 1}}})
	}()
	select {
	case <-applied:
	case <-time.After(10 * time.Second):
		t.Fatal("taking the shard away waits for its mover, which waits to read the shards")
	}
	if got := <-read; !slices.Equal(got, all) {
		t.Fatalf("the mover read %v; want %v", got, all)
	}
	if got := o.Owned(); len(got) != 0 {
		t.Fatalf("still owns %v", got)
	}
}
