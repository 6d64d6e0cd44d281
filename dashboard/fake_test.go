package dashboard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// xss is the payload every text field of the fake carries somewhere.
const xss = `<img src=x onerror=alert(1)>`

// fakeSource is an in-memory Source that counts its calls.
type fakeSource struct {
	mu      sync.Mutex
	now     time.Time
	calls   map[string]int
	pending []schedule.Item
	runs    []leasecrontype.Run
	dead    []queue.DeadLetter
	keys    []blackboard.Entry
	actions []string
	audit   []leasecron.AuditEntry
}

func newFakeSource(now time.Time) *fakeSource {
	return &fakeSource{
		now:   now,
		calls: map[string]int{},
		pending: []schedule.Item{
			{ID: "job-1", Type: "mail", Due: now.Add(time.Minute), Payload: xss},
			{ID: "nightly", Type: "report", Due: now.Add(time.Hour), Recurrence: "0 3 * * *", TZ: "Europe/Amsterdam"},
		},
		runs: []leasecrontype.Run{
			{ID: "done-1", State: leasecrontype.RunSucceeded, Type: "mail", Attempts: 1, Worker: "w1", Started: now.Add(-time.Minute), Finished: now.Add(-50 * time.Second), OutputTail: xss,
				Progress: leasecrontype.RunProgress{Percent: 100, Message: "sent " + xss, At: now.Add(-51 * time.Second)}},
			{ID: "bad-1", State: leasecrontype.RunDead, Type: "mail", Attempts: 5, Worker: "w2", LastError: xss},
			{ID: "nightly@2026-01-01T03:00:00Z", State: leasecrontype.RunFailed, Type: "report", Attempts: 1},
		},
		dead: []queue.DeadLetter{{Reason: xss, Body: `{"payload":"` + xss + `"}`, RunID: "bad-1", Type: "mail", Attempts: 5, At: now}},
		keys: []blackboard.Entry{{Key: "city-" + "a", Interval: time.Hour, Type: "cities", Start: now.Add(-time.Minute), LastError: xss, Runs: 3}},
	}
}

func (f *fakeSource) count(name string) {
	f.mu.Lock()
	f.calls[name]++
	f.mu.Unlock()
}

func (f *fakeSource) called(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeSource) did(a string) {
	f.mu.Lock()
	f.actions = append(f.actions, a)
	f.mu.Unlock()
}

// Search matches the fake's runs by id prefix, type and state.
func (f *fakeSource) Search(ctx context.Context, q leasecron.SearchQuery) (leasecron.SearchResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls["search"]++
	var res leasecron.SearchResult
	for _, r := range f.runs {
		if q.IDPrefix && !strings.HasPrefix(r.ID, q.ID) || q.Run.Type != "" && r.Type != q.Run.Type || q.Run.State != "" && r.State != q.Run.State {
			continue
		}
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

// Audit keeps e, newest first; it is not an action of its own.
func (f *fakeSource) Audit(ctx context.Context, e leasecron.AuditEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.At = f.now
	f.audit = append([]leasecron.AuditEntry{e}, f.audit...)
	return nil
}

func (f *fakeSource) AuditLog(ctx context.Context, q leasecron.AuditQuery) (leasecron.AuditPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return leasecron.AuditPage{Entries: append([]leasecron.AuditEntry(nil), f.audit...)}, nil
}

func (f *fakeSource) done() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.actions...)
}

func (f *fakeSource) Stats(ctx context.Context) (Stats, error) {
	f.count("Stats")
	return Stats{QueueDepth: 3, PoisonDepth: len(f.dead), DueCount: 1, DueLag: 2 * time.Second,
		Leader:   trafficcop.HolderInfo{Holder: "w1", Generation: 4, Acquired: f.now.Add(-time.Hour), State: trafficcop.LeaseLeased, Locked: true},
		Counters: &Counts{Handled: 10, Failed: 2}, Instances: 2, Backpressure: true, MaxDepth: 100, ResumeBelow: 50,
		Limits: []Limit{{Type: "mail", Limit: 2, Held: 1}}}, nil
}

func (f *fakeSource) Throughput(ctx context.Context, since time.Time) ([]Minute, error) {
	f.count("Throughput")
	return []Minute{{Minute: f.now.Add(-2 * time.Minute), Succeeded: 7, Failed: 1}, {Minute: f.now, Succeeded: 3}}, nil
}

func (f *fakeSource) Pending(ctx context.Context, q PendingQuery) (PendingPage, error) {
	f.count("Pending")
	if q.Continue == "bad" {
		return PendingPage{}, fmt.Errorf("%w: continuation %q", schedule.ErrInvalid, q.Continue)
	}
	var out []schedule.Item
	for _, it := range f.pending {
		if (q.Type == "" || it.Type == q.Type) && (!q.Recurring || it.Recurrence != "") {
			out = append(out, it)
		}
	}
	next := ""
	if q.Continue == "" {
		next = "tok+/=&x"
	}
	return PendingPage{Items: out, Continue: next}, nil
}

func (f *fakeSource) Task(ctx context.Context, id string) (Task, error) {
	f.count("Task")
	t := Task{ID: id}
	for _, it := range f.pending {
		if it.ID == id {
			t.Pending = &it
			t.Payload = it.Payload
		}
	}
	for _, r := range f.runs {
		if r.ID == id {
			t.Run = &r
		}
	}
	for _, it := range f.pending {
		if slices.Contains(it.After, id) {
			t.Children = append(t.Children, it.ID)
		}
	}
	if t.Pending == nil && t.Run == nil {
		return t, fmt.Errorf("%w: no pending task or run with id %q", leasecrontype.ErrNotFound, id)
	}
	return t, nil
}

func (f *fakeSource) Runs(ctx context.Context, q RunQuery) (RunPage, error) {
	f.count("Runs")
	var out []leasecrontype.Run
	for _, r := range f.runs {
		if q.State != "" && r.State != q.State {
			continue
		}
		if q.Series != "" && len(r.ID) <= len(q.Series) || q.Series != "" && r.ID[:len(q.Series)+1] != q.Series+"@" {
			continue
		}
		if q.Batch != "" && r.Batch != q.Batch {
			continue
		}
		out = append(out, r)
	}
	return RunPage{Runs: out}, nil
}

// Batch is a batch of the fake's runs and pending tasks that name it.
func (f *fakeSource) Batch(ctx context.Context, id string) (Batch, error) {
	f.count("Batch")
	b := Batch{Status: leasecron.BatchStatus{ID: id, Sealed: true}}
	for _, r := range f.runs {
		if r.Batch != id {
			continue
		}
		st := r.State
		switch st {
		case leasecrontype.RunSucceeded:
			b.Status.Counts.Succeeded++
		case leasecrontype.RunDead:
			b.Status.Counts.Dead++
		case leasecrontype.RunCancelled:
			b.Status.Counts.Cancelled++
		default:
			st = ""
		}
		b.Members = append(b.Members, leasecron.BatchMember{ID: r.ID, State: st})
	}
	for _, it := range f.pending {
		if it.Batch == id && it.Callback {
			b.Status.Callback, b.Callback = it.ID, "waiting"
		} else if it.Batch == id {
			b.Members = append(b.Members, leasecron.BatchMember{ID: it.ID})
		}
	}
	if len(b.Members) == 0 {
		return b, fmt.Errorf("%w: no batch %q", leasecrontype.ErrNotFound, id)
	}
	b.Status.Counts.Total = len(b.Members)
	b.Status.Pending = b.Status.Counts.Total - b.Status.Counts.Ended()
	return b, nil
}

func (f *fakeSource) Recent(ctx context.Context, series string, n int) ([]leasecrontype.Run, error) {
	p, err := f.Runs(ctx, RunQuery{Series: series, Limit: n})
	return p.Runs[:min(n, len(p.Runs))], err
}

func (f *fakeSource) DeadLetters(ctx context.Context, n int) ([]queue.DeadLetter, int, error) {
	f.count("DeadLetters")
	return f.dead, len(f.dead), nil
}

func (f *fakeSource) Blackboard(ctx context.Context) ([]blackboard.Entry, error) {
	f.count("Blackboard")
	return f.keys, nil
}

func (f *fakeSource) Fleet(ctx context.Context) (Fleet, error) {
	f.count("Fleet")
	return Fleet{Leader: trafficcop.HolderInfo{Holder: "w1", Generation: 4, State: trafficcop.LeaseLeased},
		Instances: []Instance{{ID: "w1", Version: "v1", Flushed: f.now.Add(-time.Minute), Counts: Counts{Handled: 7}}, {ID: "w2", Flushed: f.now.Add(-time.Hour)},
			{ID: "w3", Present: true, Started: f.now.Add(-time.Hour), Seen: f.now.Add(-time.Minute)},
			{ID: "w4", Present: true, Started: f.now.Add(-time.Hour), Seen: f.now.Add(-time.Minute), Draining: true, DrainBy: "ops@host", DrainStarted: f.now}},
		Limits: []Limit{{Type: "mail", Limit: 2, Held: 1}},
		Shards: &leasecron.ShardReport{Count: 2, MapCount: 2, Generation: 4, Span: 2,
			Shards: []leasecron.ShardState{
				{Shard: "00", Owner: "w1", Epoch: 4 << 20, Since: f.now.Add(-time.Hour), Pointed: true, Due: 3, Lag: time.Second},
				{Shard: "01", Owner: "w2", Epoch: 4<<20 + 1, Since: f.now.Add(-time.Minute), HandingOverFrom: "w1", Quiet: true, Pointed: true}},
			Members: []leasecron.ShardMember{{Name: "w1", Live: true, Shards: 1}, {Name: "w2", Live: true, Shards: 1}}}}, nil
}

func (f *fakeSource) Instances(ctx context.Context) ([]Instance, error) {
	f.count("Instances")
	fl, _ := f.Fleet(ctx)
	return fl.Instances, nil
}

func (f *fakeSource) Schedule(ctx context.Context, it schedule.Item, replace bool) (schedule.Item, error) {
	f.did("schedule " + it.ID)
	if it.ID == "" {
		it.ID = "generated"
	}
	return it, nil
}

func (f *fakeSource) Cancel(ctx context.Context, id string) (string, error) {
	f.did("cancel " + id)
	return "cancelled " + id, nil
}

func (f *fakeSource) Reschedule(ctx context.Context, id string, due time.Time) (schedule.Item, error) {
	f.did("reschedule " + id + " " + due.Sub(f.now).String())
	return schedule.Item{ID: id, Due: due}, nil
}

func (f *fakeSource) Disable(ctx context.Context, id string) (schedule.Item, error) {
	f.did("disable " + id)
	return schedule.Item{ID: id, Due: f.now, Disabled: f.now}, nil
}

func (f *fakeSource) Latency(ctx context.Context, rng time.Duration, typ string) (leasecron.LatencyReport, error) {
	f.count("Latency")
	rep := leasecron.LatencyReport{Range: rng, Step: time.Minute, Since: f.now.Add(-rng), Type: typ}
	for i := range 60 {
		p := leasecron.LatencyPoint{At: rep.Since.Add(time.Duration(i) * time.Minute), Succeeded: int64(i % 7), Failed: int64(i % 3),
			Wait: leasecron.Percentiles{Count: 5, P50: 0.05, P95: 0.2, P99: 0.9}, Run: leasecron.Percentiles{Count: 5, P50: 1.2, P95: 4, P99: 12}}
		rep.Points = append(rep.Points, p)
		rep.Total.Succeeded += p.Succeeded
	}
	rep.Total.Wait, rep.Total.Run = rep.Points[0].Wait, rep.Points[0].Run
	rep.Types = []leasecron.TypeLatency{{Type: "mail", LatencyPoint: rep.Total}}
	return rep, nil
}

func (f *fakeSource) CountBulk(ctx context.Context, op leasecron.BulkOp) (int, error) {
	f.count("CountBulk")
	return 1000, nil
}

func (f *fakeSource) StartBulk(ctx context.Context, op leasecron.BulkOp, expect int, by string) (leasecron.Bulk, error) {
	f.did(fmt.Sprintf("bulk %s expect %d by %s", op, expect, by))
	return leasecron.Bulk{ID: "bulk-1", Op: op, Expect: expect, By: by, State: "running"}, nil
}

func (f *fakeSource) Bulk(ctx context.Context, id string) (leasecron.Bulk, error) {
	if id != "bulk-1" {
		return leasecron.Bulk{}, fmt.Errorf("%w: no bulk operation %q", leasecron.ErrNotFound, id)
	}
	return leasecron.Bulk{ID: "bulk-1", Op: leasecron.BulkOp{Kind: leasecron.BulkRequeueDead, Filter: leasecron.BulkFilter{Type: "mail"}},
		Expect: 1000, Done: 400, Failed: 2, State: "running", By: "op", Created: f.now.Add(-time.Minute), Updated: f.now, Attempts: 2}, nil
}

func (f *fakeSource) Bulks(ctx context.Context) ([]leasecron.Bulk, error) {
	b, _ := f.Bulk(ctx, "bulk-1")
	return []leasecron.Bulk{b}, nil
}

func (f *fakeSource) Drain(ctx context.Context, id, by string) ([]string, error) {
	f.did("drain " + id + " by " + by)
	if id == "w3" {
		return []string{"no other running instance can lead"}, nil
	}
	return nil, nil
}

func (f *fakeSource) Enable(ctx context.Context, id string) (schedule.Item, error) {
	f.did("enable " + id)
	return schedule.Item{ID: id, Due: f.now}, nil
}

func (f *fakeSource) RunNow(ctx context.Context, id string) (schedule.Item, error) {
	f.did("run-now " + id)
	return schedule.Item{ID: id, Due: f.now}, nil
}

func (f *fakeSource) Requeue(ctx context.Context, id string) error {
	f.did("requeue " + id)
	return nil
}

func (f *fakeSource) RequeueAll(ctx context.Context) (int, error) {
	f.did("requeue-all")
	return 1, nil
}

func (f *fakeSource) Purge(ctx context.Context) (int, error) { f.did("purge"); return 1, nil }

func (f *fakeSource) RunKeyNow(ctx context.Context, key string) error {
	f.did("key-run-now " + key)
	return nil
}

func (f *fakeSource) RemoveKey(ctx context.Context, key string) error {
	f.did("key-remove " + key)
	return nil
}
