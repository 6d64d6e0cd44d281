package dashboard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// clientSource adapts a Client to the dashboard's Source: each method is
// the Client method the CLI calls.
type clientSource struct{ c *leasecron.Client }

func (s clientSource) Stats(ctx context.Context) (Stats, error) {
	st, err := s.c.Stats(ctx)
	if err != nil {
		return Stats{}, err
	}
	bp := s.c.Backpressure(st)
	out := Stats{QueueDepth: st.QueueDepth, PoisonDepth: st.PoisonDepth, DueCount: st.Due.Count, DueCapped: st.Due.Capped,
		OldestDue: st.Due.Oldest, DueLag: st.Due.Lag, Leader: st.Leader, Backpressure: bp.Enabled, HoldingBack: bp.HoldingBack,
		MaxDepth: bp.MaxDepth, ResumeBelow: bp.ResumeBelow}
	if st.Counters != nil {
		n := st.Counters.Total
		out.Counters, out.Instances = &n, st.Counters.Instances
	}
	lim, err := s.c.Limits(ctx, st.Counters)
	if err != nil {
		return out, err
	}
	out.Limits = dashLimits(lim)
	ps, err := s.c.Paused(ctx)
	if err != nil {
		return out, err
	}
	for _, p := range ps {
		out.Paused = append(out.Paused, Pause{Type: p.Type, Until: p.Until})
	}
	if out.Queues, err = s.c.Queues(ctx); err != nil {
		return out, err
	}
	return out, nil
}

func dashLimits(ls []leasecron.LimitUsage) []Limit {
	out := make([]Limit, len(ls))
	for i, l := range ls {
		out[i] = Limit(l)
	}
	return out
}

func (s clientSource) Throughput(ctx context.Context, since time.Time) ([]Minute, error) {
	if !s.c.RunRecords() {
		return nil, nil
	}
	mins, err := s.c.Throughput(ctx, since)
	out := make([]Minute, len(mins))
	for i, m := range mins {
		out[i] = Minute{Minute: m.Minute, Succeeded: m.Succeeded, Failed: m.Failed, Retried: m.Retried, Dead: m.Dead, Cancelled: m.Cancelled}
	}
	return out, err
}

func (s clientSource) Pending(ctx context.Context, q PendingQuery) (PendingPage, error) {
	p, err := s.c.List(ctx, &leasecron.ListOptions{Type: q.Type, Recurring: q.Recurring, Limit: q.Limit, Continuation: q.Continue})
	return PendingPage{Items: p.Items, Continue: p.Continue}, err
}

func (s clientSource) Task(ctx context.Context, id string) (Task, error) {
	st, err := s.c.Status(ctx, id)
	if err != nil {
		return Task{}, err
	}
	t := Task{ID: st.ID, Pending: st.Pending, Run: st.Run}
	// Only a one-off task that is flagged, sent or past its row can have
	// tasks waiting for it (one query more).
	if p := st.Pending; p == nil || (p.Recurrence == "" && (p.Waiters || p.Sent)) {
		if t.Children, err = s.c.Dependents(ctx, id); err != nil {
			return t, err
		}
	}
	if p := st.Pending; p != nil {
		// The route its messages take: its own, else its type's; and its
		// fair key, its own or from its payload.
		pending := *p
		r := s.c.RouteOf(pending)
		pending.Queue, pending.Priority, pending.FairKey = r.Queue, r.Priority, s.c.FairKeyOf(pending)
		t.Pending = &pending
		t.Payload = p.Payload
		if p.PayloadBlob != "" {
			b, err := s.c.Payload(ctx, p.PayloadBlob)
			if err != nil {
				b = []byte("(payload blob unreadable: " + err.Error() + ")")
			}
			t.Payload = string(b)
		}
		if p.Recurrence != "" {
			rp, err := s.Runs(ctx, RunQuery{Series: p.ID, Limit: 10})
			if err != nil {
				return t, err
			}
			t.Recent = rp.Runs
		}
	}
	return t, nil
}

func (s clientSource) Runs(ctx context.Context, q RunQuery) (RunPage, error) {
	if !s.c.RunRecords() && q.State != leasecron.RunScheduled {
		return RunPage{Partial: "Run records are off (worker.runs: false): there is no run history."}, nil
	}
	p, err := s.c.Runs(ctx, leasecron.RunQuery{State: q.State, Type: q.Type, Series: q.Series, Batch: q.Batch, Limit: q.Limit, Continue: q.Continue})
	return RunPage{Runs: p.Runs, Continue: p.Continue}, err
}

// BatchMembersShown is the most members the batch page lists.
const BatchMembersShown = 200

func (s clientSource) Batch(ctx context.Context, id string) (Batch, error) {
	st, err := s.c.Batch(ctx, id)
	if err != nil {
		return Batch{}, err
	}
	b := Batch{Status: st}
	ms, err := s.c.BatchMembers(ctx, id)
	if err != nil {
		return b, err
	}
	b.Members = ms[:min(len(ms), BatchMembersShown)]
	if st.Callback != "" {
		if cs, err := s.c.Status(ctx, st.Callback); err == nil {
			b.Callback = cs.State()
		}
	}
	return b, nil
}

func (s clientSource) Recent(ctx context.Context, series string, n int) ([]leasecron.Run, error) {
	return s.c.Recent(ctx, series, n)
}

func (s clientSource) DeadLetters(ctx context.Context, n int) ([]queue.DeadLetter, int, error) {
	p, err := s.c.PeekDeadLetters(ctx, n)
	return p.DeadLetters, p.Total, err
}

func (s clientSource) Blackboard(ctx context.Context) ([]blackboard.Entry, error) {
	return s.c.Blackboard(ctx)
}

func (s clientSource) Instances(ctx context.Context) ([]Instance, error) {
	ins, err := s.c.Instances(ctx)
	return dashInstances(ins), err
}

func dashInstances(ins []leasecron.Instance) []Instance {
	out := make([]Instance, 0, len(ins))
	for _, in := range ins {
		out = append(out, Instance{ID: in.ID, Version: in.Version, Present: in.Present, Started: in.Started, Seen: in.Seen, Flushed: in.Flushed, Counts: in.Total,
			Draining: in.Draining, DrainBy: in.DrainBy, DrainStarted: in.DrainStarted, Roles: in.Roles})
	}
	return out
}

func (s clientSource) Fleet(ctx context.Context) (Fleet, error) {
	var f Fleet
	var err error
	if f.Leader, err = s.c.Leader(ctx); err != nil {
		return f, err
	}
	ins, err := s.c.Instances(ctx)
	if err != nil {
		return f, err
	}
	f.Instances = dashInstances(ins)
	sum := &leasecron.Counters{ByType: map[string]leasecron.Counts{}}
	for _, in := range ins {
		for typ, n := range in.ByType {
			x := sum.ByType[typ]
			x.Deferred += n.Deferred
			sum.ByType[typ] = x
		}
	}
	lim, err := s.c.Limits(ctx, sum)
	f.Limits = dashLimits(lim)
	if err != nil {
		return f, err
	}
	if s.c.Sharded() {
		r, err := s.c.Shards(ctx)
		if err != nil {
			return f, err
		}
		f.Shards = &r
	}
	return f, nil
}

func (s clientSource) Schedule(ctx context.Context, it schedule.Item, replace bool) (schedule.Item, error) {
	return s.c.Schedule(ctx, it, &leasecron.ScheduleOptions{Replace: replace})
}

func (s clientSource) Cancel(ctx context.Context, id string) (string, error) {
	res, err := s.c.Cancel(ctx, id)
	if errors.Is(err, leasecron.ErrAlreadyFinished) {
		return "", fmt.Errorf("%w: %w", ErrConflict, err)
	}
	if err != nil {
		return "", err
	}
	return res.String(), nil
}

func (s clientSource) Search(ctx context.Context, q leasecron.SearchQuery) (leasecron.SearchResult, error) {
	return s.c.Search(ctx, q)
}

func (s clientSource) Audit(ctx context.Context, e leasecron.AuditEntry) error {
	return s.c.Audit(ctx, e)
}

func (s clientSource) AuditLog(ctx context.Context, q leasecron.AuditQuery) (leasecron.AuditPage, error) {
	return s.c.AuditLog(ctx, q)
}

func (s clientSource) Disable(ctx context.Context, id string) (schedule.Item, error) {
	return s.c.Disable(ctx, id)
}

func (s clientSource) Enable(ctx context.Context, id string) (schedule.Item, error) {
	return s.c.Enable(ctx, id)
}

func (s clientSource) Reschedule(ctx context.Context, id string, due time.Time) (schedule.Item, error) {
	return s.c.Reschedule(ctx, id, due)
}

func (s clientSource) RunNow(ctx context.Context, id string) (schedule.Item, error) {
	return s.c.RunNow(ctx, id)
}

func (s clientSource) Requeue(ctx context.Context, id string) error {
	return s.c.DeadLetters().Requeue(ctx, id)
}

func (s clientSource) RequeueAll(ctx context.Context) (int, error) {
	return s.c.DeadLetters().RequeueAll(ctx)
}

func (s clientSource) Purge(ctx context.Context) (int, error) { return s.c.DeadLetters().Purge(ctx) }

func (s clientSource) RunKeyNow(ctx context.Context, key string) error {
	return s.c.RunBlackboardKeyNow(ctx, key)
}

func (s clientSource) RemoveKey(ctx context.Context, key string) error {
	return s.c.RemoveBlackboardKey(ctx, key)
}

func (s clientSource) Drain(ctx context.Context, id, by string) ([]string, error) {
	if _, err := s.c.Drain(ctx, id, by); err != nil {
		return nil, err
	}
	ins, err := s.c.Instances(ctx)
	if err != nil {
		return nil, nil // asked: the warnings are a courtesy
	}
	return leasecron.Uncovered(ins, id), nil
}

func (s clientSource) CountBulk(ctx context.Context, op leasecron.BulkOp) (int, error) {
	return s.c.CountBulk(ctx, op)
}

func (s clientSource) StartBulk(ctx context.Context, op leasecron.BulkOp, expect int, by string) (leasecron.Bulk, error) {
	return s.c.StartBulk(ctx, op, expect, by)
}

func (s clientSource) Bulk(ctx context.Context, id string) (leasecron.Bulk, error) {
	return s.c.Bulk(ctx, id)
}

func (s clientSource) Bulks(ctx context.Context) ([]leasecron.Bulk, error) { return s.c.Bulks(ctx) }

func (s clientSource) Latency(ctx context.Context, rng time.Duration, typ string) (leasecron.LatencyReport, error) {
	return s.c.Latency(ctx, rng, typ)
}
