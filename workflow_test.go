package leasecron_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron"
)

// flowWorker starts a worker with default settings whose "step" handler
// sleeps briefly and "fail" handler always fails, and returns a client.
func flowWorker(t *testing.T, ctx context.Context, st leasecron.Storage, names leasecron.Names, handle func(w *leasecron.Worker)) *leasecron.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: st, Names: names, InstanceID: "flow"})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("step", func(ctx context.Context, task leasecron.Task) error {
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	w.Handle("fail", func(ctx context.Context, task leasecron.Task) error { return errors.New("it fails") })
	if handle != nil {
		handle(w)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return newClient(t, st, names)
}

// newClient returns a client of the test's account.
func newClient(t *testing.T, st leasecron.Storage, names leasecron.Names) *leasecron.Client {
	t.Helper()
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitEnded polls until every id's run has ended and returns the runs.
func waitEnded(t *testing.T, ctx context.Context, c *leasecron.Client, ids ...string) map[string]leasecron.Run {
	t.Helper()
	out := map[string]leasecron.Run{}
	for _, id := range ids {
		for {
			st, err := c.Status(ctx, id)
			if err == nil && st.Run != nil && st.Run.State.Finished() {
				out[id] = *st.Run
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never ended: %+v %v", id, st, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return out
}

// Chains and a fan-in run in order, each child within 2 s of its last
// parent's success, with default settings; parents scheduled separately
// (already in the queue when the child is scheduled), in the same call,
// and still pending. It does not run in parallel with the package's other
// tests: the 2 s it checks is a latency, which a saturated Azurite
// stretches whatever leasecron does.
func TestWorkflowChainsAndFanIn(t *testing.T) {
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := flowWorker(t, ctx, st, names, nil)
	now := time.Now()
	step := func(id string, after ...string) leasecron.Item {
		return leasecron.Item{ID: id, Type: "step", Due: now, After: after}
	}
	edges := map[string][]string{}
	var last []string
	// Chains scheduled one call at a time: A is in the queue before B
	// waits for it; B waits (pending) when C is scheduled.
	for i := range 5 {
		a, b, cc := fmt.Sprint("a", i), fmt.Sprint("b", i), fmt.Sprint("c", i)
		for _, it := range []leasecron.Item{step(a), step(b, a), step(cc, b)} {
			if _, err := c.Schedule(ctx, it, nil); err != nil {
				t.Fatal(err)
			}
			edges[it.ID] = it.After
		}
		last = append(last, cc)
	}
	// A chain in one call, its head an hour ahead then run now.
	chain := []leasecron.Item{{ID: "x", Type: "step", Due: now.Add(time.Hour)}, step("y", "x"), step("z", "y")}
	if _, err := c.ScheduleMany(ctx, chain, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	edges["y"], edges["z"] = []string{"x"}, []string{"y"}
	// A fan-in: ten parents, then one child waiting for all of them.
	var parents []leasecron.Item
	var pids []string
	for i := range 10 {
		parents = append(parents, step(fmt.Sprint("p", i)))
		pids = append(pids, fmt.Sprint("p", i))
	}
	if _, err := c.ScheduleMany(ctx, parents, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, step("fan", pids...), nil); err != nil {
		t.Fatal(err)
	}
	edges["fan"] = pids
	st0, err := c.Status(ctx, "y")
	if err != nil || st0.Pending == nil || !st0.Pending.Waiting || !slices.Equal(st0.Pending.After, []string{"x"}) {
		t.Fatalf("y before x ran: %+v %v; want waiting for x", st0.Pending, err)
	}
	if _, err := c.RunNow(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	ids := append(append(last, "z", "fan"), pids...)
	for id, ps := range edges {
		ids = append(ids, id)
		ids = append(ids, ps...)
	}
	runs := waitEnded(t, ctx, c, ids...)
	var worst time.Duration
	for child, ps := range edges {
		if len(ps) == 0 {
			continue
		}
		r := runs[child]
		if r.State != leasecron.RunSucceeded {
			t.Errorf("%s ended %s, want succeeded", child, r.State)
		}
		var lastDone time.Time
		for _, p := range ps {
			if pr := runs[p]; pr.Finished.After(lastDone) {
				lastDone = pr.Finished
			}
		}
		if r.Started.Before(lastDone) {
			t.Errorf("%s started at %s, before its last parent finished at %s", child, r.Started.Format(time.RFC3339Nano), lastDone.Format(time.RFC3339Nano))
		}
		if d := r.Started.Sub(lastDone); d > worst {
			worst = d
		}
		t.Logf("%s started %s after its last parent", child, r.Started.Sub(lastDone))
	}
	t.Logf("%d children: the slowest started %s after its last parent finished", len(edges)-5, worst)
	if worst > 2*time.Second {
		t.Errorf("a child started %s after its last parent's success; want within 2 s", worst)
	}
}

// A parent that ends dead cancels what waits for it, transitively, with
// the reason; a task waiting for any end runs.
func TestWorkflowDeadParentCancelsDependents(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := flowWorker(t, ctx, st, names, nil)
	now := time.Now()
	items := []leasecron.Item{
		{ID: "d", Type: "fail", Due: now.Add(time.Hour), MaxAttempts: 1},
		{ID: "e", Type: "step", Due: now, After: []string{"d"}},
		{ID: "g", Type: "step", Due: now, After: []string{"e"}},
		{ID: "h", Type: "step", Due: now, After: []string{"d"}, AfterAny: true},
	}
	if _, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	// Scheduled after d's message is out: watched by the traffic cop.
	if _, err := c.RunNow(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "late", Type: "step", Due: now, After: []string{"d"}}, nil); err != nil {
		t.Fatal(err)
	}
	runs := waitEnded(t, ctx, c, "d", "e", "g", "h", "late")
	want := map[string]string{
		"d": "dead", "e": "cancelled: parent d ended dead", "g": "cancelled: parent e ended cancelled",
		"h": "succeeded", "late": "cancelled: parent d ended dead",
	}
	for id, w := range want {
		r := runs[id]
		got := string(r.State)
		if r.State == leasecron.RunCancelled {
			got = r.LastError
		}
		if got != w {
			t.Errorf("%s: %q, want %q", id, got, w)
		}
	}
	// The pending rows are gone.
	for _, id := range []string{"e", "g", "late"} {
		if s, err := c.Status(ctx, id); err != nil || s.Pending != nil {
			t.Errorf("%s still pending: %+v %v", id, s.Pending, err)
		}
	}
}

// Unknown parents, cycles, waiting for oneself, recurring parents and
// parents already dead are refused, naming the problem, with nothing
// written.
func TestWorkflowRefusals(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, st, names)
	later := time.Now().Add(time.Hour)
	for _, it := range []leasecron.Item{
		{ID: "one", Due: later},
		{ID: "two", Due: later, After: []string{"one"}},
		{ID: "series", Due: later, Recurrence: "@every 1h"},
	} {
		if _, err := c.Schedule(ctx, it, nil); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name string
		do   func() error
		want string
	}{
		{"unknown parent", func() error {
			_, err := c.Schedule(ctx, leasecron.Item{ID: "x", Due: later, After: []string{"nope"}}, nil)
			return err
		}, "unknown parent nope"},
		{"itself", func() error {
			_, err := c.Schedule(ctx, leasecron.Item{ID: "x", Due: later, After: []string{"x"}}, nil)
			return err
		}, "cannot wait for itself"},
		{"cycle through the schedule", func() error {
			_, err := c.Schedule(ctx, leasecron.Item{ID: "one", Due: later, After: []string{"two"}}, &leasecron.ScheduleOptions{Replace: true})
			return err
		}, "cycle (one → two → one)"},
		{"cycle in one call", func() error {
			_, err := c.ScheduleMany(ctx, []leasecron.Item{{ID: "k1", Due: later, After: []string{"k2"}}, {ID: "k2", Due: later, After: []string{"k1"}}}, leasecron.ScheduleManyOptions{})
			return err
		}, "wait for one another in a cycle"},
		{"recurring parent", func() error {
			_, err := c.Schedule(ctx, leasecron.Item{ID: "x", Due: later, After: []string{"series"}}, nil)
			return err
		}, "series is a recurring series"},
		{"recurring child", func() error {
			_, err := c.Schedule(ctx, leasecron.Item{ID: "x", Due: later, Recurrence: "@daily", After: []string{"one"}}, nil)
			return err
		}, "a recurring series cannot wait"},
	}
	for _, tc := range cases {
		err := tc.do()
		if !errors.Is(err, leasecron.ErrInvalidTask) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrInvalidTask naming %q", tc.name, err, tc.want)
		}
	}
	for _, id := range []string{"x", "k1", "k2"} {
		if s, err := c.Status(ctx, id); err == nil && s.Pending != nil {
			t.Errorf("%s was written: %+v", id, s.Pending)
		}
	}
	if s, err := c.Status(ctx, "one"); err != nil || s.Pending == nil || len(s.Pending.After) != 0 {
		t.Errorf("one changed: %+v %v", s.Pending, err)
	}
}

// A batch of 1,000, some of which end dead, completes once: its callback
// runs once with the counts, and Batch shows them.
func TestBatchCallbackOnce(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var calls []leasecron.Task
	c := flowWorker(t, ctx, st, names, func(w *leasecron.Worker) {
		w.Handle("done", func(ctx context.Context, task leasecron.Task) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, task)
			return nil
		})
		w.Handle("quick", func(ctx context.Context, task leasecron.Task) error { return nil })
	})
	now := time.Now()
	const n, failing = 1000, 30
	items := make([]leasecron.Item, n)
	for i := range items {
		// Due just beyond what the client sends itself: the mover moves
		// them, 99 rows to a transaction.
		items[i] = leasecron.Item{ID: fmt.Sprintf("m%04d", i), Type: "quick", Due: now.Add(leasecron.DefaultSendWithin + time.Second)}
		if i >= n-5 {
			items[i].Due = now.Add(time.Hour) // cancelled below
		}
		if i < failing {
			items[i].Type, items[i].MaxAttempts = "fail", 1
		}
	}
	res, err := c.ScheduleMany(ctx, items, leasecron.ScheduleManyOptions{Batch: "b1", OnComplete: &leasecron.Item{Type: "done", Payload: "report"}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Item.Batch != "b1" {
		t.Fatalf("member says batch %q", res[0].Item.Batch)
	}
	// The last five are cancelled before they run.
	for i := n - 5; i < n; i++ {
		if _, err := c.Cancel(ctx, items[i].ID); err != nil {
			t.Fatal(err)
		}
	}
	b, err := c.Batch(ctx, "b1")
	if err != nil || b.Counts.Total != n || b.Counts.Cancelled < 5 || b.Callback != "b1-done" {
		t.Fatalf("batch: %+v %v", b, err)
	}
	runs := waitEnded(t, ctx, c, "b1-done")
	if runs["b1-done"].State != leasecron.RunSucceeded || runs["b1-done"].Attempts != 1 {
		t.Errorf("callback run %+v", runs["b1-done"])
	}
	want := leasecron.BatchCounts{Total: n, Succeeded: n - failing - 5, Dead: failing, Cancelled: 5}
	mu.Lock()
	if len(calls) != 1 || calls[0].Batch != "b1" || calls[0].Completed == nil || *calls[0].Completed != want || string(calls[0].Payload) != "report" {
		t.Errorf("callback calls %+v; want one with %+v", calls, want)
	}
	mu.Unlock()
	b, err = c.Batch(ctx, "b1")
	if err != nil || b.Counts != want || !b.Complete || b.Pending != 0 || b.Finished.IsZero() {
		t.Errorf("batch after: %+v %v", b, err)
	}
	ms, err := c.BatchMembers(ctx, "b1")
	if err != nil || len(ms) != n || ms[0].State != leasecron.RunDead || ms[n-1].State != leasecron.RunCancelled || ms[500].State != leasecron.RunSucceeded {
		t.Errorf("members: %d %v", len(ms), err)
	}
	if _, err := c.Batch(ctx, "nope"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("unknown batch: %v", err)
	}
	if _, err := c.BatchMembers(ctx, "nope"); !errors.Is(err, leasecron.ErrNotFound) {
		t.Errorf("members of an unknown batch: %v", err)
	}
}

// What a dependency and a batch member cost, in storage requests: counted
// exactly, and bounded by what the README documents.
func TestWorkflowRequestCosts(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, st, names)
	later := time.Now().Add(time.Hour)
	var parents []leasecron.Item
	for i := range 10 {
		parents = append(parents, leasecron.Item{ID: fmt.Sprint("par", i), Due: later})
	}
	if _, err := c.ScheduleMany(ctx, parents, leasecron.ScheduleManyOptions{}); err != nil {
		t.Fatal(err)
	}
	cost := func(name string, most int64, f func() error) {
		t.Helper()
		base := c.Requests()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d := c.Requests().Sub(base)
		t.Logf("%s: %d requests %v", name, d.Total, d.ByOp)
		if d.Total > most {
			t.Errorf("%s cost %d requests, want at most %d", name, d.Total, most)
		}
	}
	// (Creating the Runs table on a fresh account, once: the look for it,
	// the schedule table's creation, the map's read and the record of the
	// run records' partition count before the table is made: issue 41.)
	cost("a task after one pending parent (creating the Runs table)", 11, func() error {
		_, err := c.Schedule(ctx, leasecron.Item{ID: "one", Due: later, After: []string{"par0"}}, nil)
		return err
	})
	var ids []string
	for _, p := range parents {
		ids = append(ids, p.ID)
	}
	// (par0 is waited for already: its mark is read again, not trusted,
	// and once the row is written its run record is looked for, two
	// requests for a record not there: its row may have been sent and its
	// run have ended already, issue 38, seed 32048.)
	cost("a task after ten pending parents", 35, func() error {
		_, err := c.Schedule(ctx, leasecron.Item{ID: "fan", Due: later, After: ids}, nil)
		return err
	})
	if err := leasecron.FinishRun(c, ctx, "par0", leasecron.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	cost("the end of a parent, releasing its child (due later)", 10, func() error {
		return leasecron.TaskEnded(c, ctx, "par0", true, "")
	})
	for _, id := range ids[1:] {
		if err := leasecron.FinishRun(c, ctx, id, leasecron.RunSucceeded); err != nil {
			t.Fatal(err)
		}
	}
	cost("the end of one of ten parents, noting it", 6, func() error {
		return leasecron.TaskEnded(c, ctx, "par1", true, "")
	})
	if s, err := c.Status(ctx, "fan"); err != nil || s.Pending == nil || len(s.Pending.Met) != 2 || !s.Pending.Waiting {
		t.Fatalf("fan after two parents: %+v %v", s.Pending, err)
	}
	var members []leasecron.Item
	for i := range 200 {
		members = append(members, leasecron.Item{ID: fmt.Sprint("mem", i), Due: later})
	}
	cost("a batch of 200 with a callback", 10, func() error {
		_, err := c.ScheduleMany(ctx, members, leasecron.ScheduleManyOptions{Batch: "cb", OnComplete: &leasecron.Item{Type: "done"}})
		return err
	})
	if err := leasecron.FinishRun(c, ctx, "mem0", leasecron.RunSucceeded); err != nil {
		t.Fatal(err)
	}
	cost("the end of a batch member", 4, func() error {
		return leasecron.TaskEnded(c, ctx, "mem0", false, "cb")
	})
	cost("the same end again (a second delivery)", 5, func() error {
		return leasecron.TaskEnded(c, ctx, "mem0", false, "cb")
	})
	if b, err := c.Batch(ctx, "cb"); err != nil || b.Counts.Succeeded != 1 || b.Pending != 199 {
		t.Errorf("batch after one member, twice: %+v %v", b, err)
	}
}

// A task that waits written by another program, as the README's table
// contract says: dependency rows, watch rows, then the child's row at the
// hold. The traffic cop watches the parents and releases or cancels it.
func TestWorkflowFromTheTableContract(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := flowWorker(t, ctx, st, names, nil)
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "tp", Type: "step", Due: time.Now().Add(2 * time.Second)}, nil); err != nil {
		t.Fatal(err)
	}
	svc, err := aztables.NewServiceClientFromConnectionString(st.ConnectionString, nil)
	if err != nil {
		t.Fatal(err)
	}
	add := func(table string, e map[string]any) {
		t.Helper()
		b, _ := json.Marshal(e)
		if _, err := svc.NewClient(table).AddEntity(ctx, b, nil); err != nil {
			t.Fatalf("insert into %s: %v", table, err)
		}
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for child, parent := range map[string]string{"tc": "tp", "tu": "ghost"} {
		add(names.RunsTable, map[string]any{"PartitionKey": "~d", "RowKey": parent + "~" + child, "Created": now, "Created@odata.type": "Edm.DateTime"})
		add(names.RunsTable, map[string]any{"PartitionKey": "~l", "RowKey": parent, "Created": now, "Created@odata.type": "Edm.DateTime"})
		add(names.ScheduleTable, map[string]any{"PartitionKey": "00", "RowKey": "3155378975999999999_" + child, "Message": "", "Type": "step", "After": parent, "Waiting": now})
	}
	if s, err := c.Status(ctx, "tc"); err != nil || s.State() != leasecron.StateWaiting {
		t.Fatalf("tc written by hand: %+v %v; want waiting", s, err)
	}
	runs := waitEnded(t, ctx, c, "tp", "tc", "tu")
	if r := runs["tc"]; r.State != leasecron.RunSucceeded || r.Started.Before(runs["tp"].Finished) {
		t.Errorf("tc: %s started %s, its parent finished %s", r.State, r.Started, runs["tp"].Finished)
	}
	if r := runs["tu"]; r.State != leasecron.RunCancelled || r.LastError != "cancelled: parent ghost ended cancelled" {
		t.Errorf("tu: %s %q; want cancelled naming its unknown parent", r.State, r.LastError)
	}
}

// TestScheduleAgainKeepsThePendingChildsDependencies: scheduling an id
// that is pending with --after (a retried request) is refused, and the
// pending child still waits for its parent: the refused call once
// dropped the dependency rows it shares with it, and the child waited
// for good (found by reviewing the HTTP API's retries). Through
// ScheduleMany too.
func TestScheduleAgainKeepsThePendingChildsDependencies(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, st, names)
	later := time.Now().Add(time.Hour)
	for _, it := range []leasecron.Item{{ID: "p1", Due: later}, {ID: "p2", Due: later}, {ID: "c1", Due: later, After: []string{"p1"}}, {ID: "c2", Due: later, After: []string{"p2"}}} {
		if _, err := c.Schedule(ctx, it, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Again a minute later (a retried `in`): the id is taken.
	again := later.Add(time.Minute)
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "c1", Due: again, After: []string{"p1"}}, nil); !errors.Is(err, leasecron.ErrAlreadyScheduled) {
		t.Fatalf("scheduling c1 again: %v, want ErrAlreadyScheduled", err)
	}
	if res, _ := c.ScheduleMany(ctx, []leasecron.Item{{ID: "c2", Due: again, After: []string{"p2"}}}, leasecron.ScheduleManyOptions{}); len(res) != 1 || !errors.Is(res[0].Err, leasecron.ErrAlreadyScheduled) {
		t.Fatalf("scheduling c2 again in a ScheduleMany: %+v", res)
	}
	// A refused child of a parent the pending one does not wait for
	// leaves no row behind.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "c1", Due: again, After: []string{"p2"}}, nil); !errors.Is(err, leasecron.ErrAlreadyScheduled) {
		t.Fatalf("scheduling c1 after p2: %v", err)
	}
	for parent, want := range map[string][]string{"p1": {"c1"}, "p2": {"c2"}} {
		got, err := c.Dependents(ctx, parent)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("tasks waiting for %s: %v (%v), want %v", parent, got, err, want)
		}
	}
}

// TestReplacedMemberKeepsItsBatch: a batch member sent at once (due now)
// and replaced right after by a task outside the batch — the replacement
// supersedes the member's message — still ends the batch: the
// replacement takes the member's place and the callback runs once (issue
// 38, seed 8: the callback waited for good).
func TestReplacedMemberKeepsItsBatch(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var calls atomic.Int32
	c := newClient(t, st, names)
	now := time.Now()
	res, err := c.ScheduleMany(ctx, []leasecron.Item{{ID: "bm1", Type: "step", Due: now}, {ID: "bm2", Type: "step", Due: now}},
		leasecron.ScheduleManyOptions{Batch: "rb", OnComplete: &leasecron.Item{Type: "done", Due: now}})
	if err != nil || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("schedule the batch: %v %+v", err, res)
	}
	// A mover without a consumer retires the members' rows (their
	// messages were sent by the client): the member is in the queue, not
	// pending, when it is replaced.
	mctx, stopMover := context.WithCancel(ctx)
	mover, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: st, Names: names, InstanceID: "mover", NoConsume: true})
	if err != nil {
		t.Fatal(err)
	}
	moved := make(chan struct{})
	go func() { defer close(moved); _ = mover.Run(mctx) }()
	for {
		if _, err := c.Get(ctx, "bm1"); errors.Is(err, leasecron.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the mover never retired bm1's row")
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopMover()
	<-moved
	// Due later, so that the replacement's row stays to be read.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "bm1", Type: "other", Due: time.Now().Add(2 * time.Second)}, &leasecron.ScheduleOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	// Which of the two messages claims the run is a race (the simulator's
	// seed 8 had the replacement's first); either way the replacement is
	// the member now.
	if it, err := c.Get(ctx, "bm1"); err != nil || it.Batch != "rb" {
		t.Errorf("the replacement of a member in the queue: %+v %v, want a member of batch rb", it, err)
	}
	flowWorker(t, ctx, st, names, func(w *leasecron.Worker) {
		w.Handle("done", func(ctx context.Context, task leasecron.Task) error { calls.Add(1); return nil })
		w.Handle("other", func(ctx context.Context, task leasecron.Task) error { return nil })
	})
	for {
		b, err := c.Batch(ctx, "rb")
		if err == nil && b.Complete && calls.Load() == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("batch rb: %+v %v; callback ran %d times", b, err, calls.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
