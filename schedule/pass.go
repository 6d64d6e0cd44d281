package schedule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
)

// plan is what the mover intends for one row.
type plan struct {
	e       Entity
	env     queue.Envelope
	due     time.Time
	indexed bool
	id      string         // valid when keyOK
	keyOK   bool           // the RowKey parsed: id is known
	nextRK  string         // recurring: the next occurrence's RowKey
	next    map[string]any // recurring: the next occurrence's properties
	bad     string         // malformed: why
	done    bool           // enqueued, or set aside
}

// pass moves what is due in every shard. full reports that some shard had
// more due rows than MaxPerPass.
//
// Under backpressure (MaxDepth > 0) a pass moves at most MaxDepth − depth
// rows, so one pass cannot push the queue past MaxDepth however many rows
// are due; a pass that fills the queue to MaxDepth starts holding back, and
// moving resumes below ResumeBelow. When the depth is unknown (the probe
// failed) a pass moves at most one batch (MaxOps rows).
func (m *Mover) pass(ctx context.Context, gen int64) (full bool, err error) {
	now := m.o.Clock.Now()
	m.count(func(s *MoverStats) { s.LastPass = now })
	hold, room, err := m.holdBack(ctx)
	if err != nil || hold {
		return false, err
	}
	for _, shard := range m.o.Shards {
		if ctx.Err() != nil {
			return false, nil
		}
		limit := m.o.MaxPerPass
		if room.rows >= 0 {
			limit = min(limit, room.rows)
		}
		if limit <= 0 {
			break
		}
		rows, more, err := m.due(ctx, shard, now.Add(m.o.Early), limit)
		if err != nil {
			return false, err
		}
		full = full || more
		if room.rows >= 0 {
			room.rows -= len(rows)
		}
		if len(rows) == 0 {
			continue
		}
		plans := make([]*plan, 0, len(rows))
		for _, e := range rows {
			plans = append(plans, m.plan(e, now, gen))
		}
		if err := m.move(ctx, shard, gen, now, plans); err != nil {
			return false, err
		}
	}
	if room.known && room.rows <= 0 {
		// The queue is now as deep as MaxDepth allows: hold back until it
		// drains below ResumeBelow rather than trickle rows in one by one.
		m.mu.Lock()
		if !m.stats.HoldingBack {
			m.stats.HoldingBack = true
			m.o.Logger.Info("leasecron mover: holding back; this pass filled the queue", "max_depth", m.o.MaxDepth)
		}
		m.mu.Unlock()
		full = false
	}
	m.count(func(s *MoverStats) { s.Passes++ })
	return full, nil
}

// due reads up to limit (≤ MaxPerPass) rows of shard due at or before
// bound; more reports that rows were left.
func (m *Mover) due(ctx context.Context, shard string, bound time.Time, limit int) ([]Entity, bool, error) {
	q := Query{Partition: shard, To: dueBound(bound)}
	var rows []Entity
	for {
		q.Top = int32(min(1000, limit-len(rows)))
		p, err := m.t.Query(ctx, q)
		if err != nil {
			return nil, false, fmt.Errorf("query due rows of shard %s: %w", shard, err)
		}
		rows = append(rows, p.Entities...)
		if p.Continuation == "" {
			return rows, false, nil
		}
		if len(rows) >= limit {
			return rows, true, nil
		}
		if ctx.Err() != nil {
			return rows, false, nil
		}
		q.Continuation = p.Continuation
	}
}

// plan interprets one row: the envelope to send and, for a recurring row,
// its next occurrence; or why the row is malformed.
func (m *Mover) plan(e Entity, now time.Time, gen int64) *plan {
	r, err := parseRow(e)
	p := &plan{e: e, indexed: r.indexed, id: r.item.ID, due: r.item.Due}
	_, _, kerr := ParseRowKey(e.RowKey)
	p.keyOK = kerr == nil
	if err != nil {
		p.bad = err.Error()
		return p
	}
	it := r.item
	recurring := !r.rec.IsZero()
	p.env = queue.Envelope{
		V:           queue.EnvelopeVersion,
		ID:          runID(it.ID, it.Due, recurring),
		Type:        it.Type,
		Payload:     it.Payload,
		PayloadBlob: it.PayloadBlob,
		Due:         it.Due,
		Enqueued:    now.UTC(),
		Attempt:     it.Attempts,
		MaxAttempts: it.MaxAttempts,
		Recurrence:  it.Recurrence,
		Generation:  gen,
		TraceParent: it.TraceParent,
	}
	if recurring {
		p.env.Series = it.ID
		next, err := r.rec.Next(it.Due, now)
		if err != nil {
			p.bad = fmt.Sprintf("recurrence %q: %v", it.Recurrence, err)
			return p
		}
		_, suffix, _ := ParseRowKey(e.RowKey)
		if p.nextRK, err = RowKey(next, suffix); err != nil {
			p.bad = fmt.Sprintf("recurrence %q: next occurrence: %v", it.Recurrence, err)
			return p
		}
		p.next = copyProps(e.Props)
		delete(p.next, PropAttempts)
		delete(p.next, PropAttempts+"@odata.type")
	}
	if p.env.PayloadBlob == "" && jsonLen(p.env.Payload) > m.o.InlineLimit && m.o.PayloadStore == nil {
		p.bad = fmt.Sprintf("payload is %d bytes as JSON, more than the inline limit %d, and no payload store is configured", jsonLen(p.env.Payload), m.o.InlineLimit)
	}
	return p
}

// move enqueues (or sets aside) the planned rows and removes them.
func (m *Mover) move(ctx context.Context, shard string, gen int64, now time.Time, plans []*plan) error {
	m.beforeSend(ctx, plans)
	m.enqueue(ctx, now, plans)
	if ctx.Err() != nil {
		return nil
	}
	for _, p := range plans {
		if p.bad == "" || p.done {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		reason := fmt.Sprintf("malformed row %s/%s: %s", p.e.PartitionKey, p.e.RowKey, p.bad)
		if err := m.o.SetAside.SetAside(ctx, p.e.Raw, reason); err != nil {
			m.count(func(s *MoverStats) { s.Errors++ })
			m.o.Logger.Warn("leasecron mover: cannot set a malformed row aside; it stays", "row", p.e.RowKey, "err", err)
			continue
		}
		m.o.Logger.Warn("leasecron mover: set a malformed row aside", "row", p.e.RowKey, "reason", p.bad)
		p.done = true
	}
	var ready []*plan
	for _, p := range plans {
		if p.done {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil
	}
	if lag := now.Sub(ready[0].due); ready[0].bad == "" {
		m.count(func(s *MoverStats) { s.LastMoveLag = max(0, lag) })
	}
	return m.commit(ctx, shard, gen, ready)
}

// enqueue sends the envelopes of the well-formed plans, at most
// Concurrency at a time. A large payload of a directly inserted row is
// moved to the payload store first.
func (m *Mover) enqueue(ctx context.Context, now time.Time, plans []*plan) {
	sem := make(chan struct{}, m.o.Concurrency)
	var wg sync.WaitGroup
	for _, p := range plans {
		if p.bad != "" {
			continue
		}
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if ctx.Err() != nil {
				return
			}
			env := p.env
			if env.PayloadBlob == "" && jsonLen(env.Payload) > m.o.InlineLimit {
				// Deterministic name: a retry overwrites instead of leaking.
				ref, err := m.o.PayloadStore.Put(ctx, payload.Prefix+p.id+"-"+strconv.FormatInt(Ticks(p.due), 10), []byte(env.Payload))
				if err != nil {
					m.count(func(s *MoverStats) { s.Errors++ })
					m.o.Logger.Warn("leasecron mover: cannot store a large payload; the row stays", "row", p.e.RowKey, "err", err)
					return
				}
				env.PayloadBlob, env.Payload = ref, ""
			}
			delay := max(0, p.due.Sub(now))
			err := m.o.Enqueuer.Enqueue(ctx, env, delay)
			switch {
			case err == nil:
				p.env, p.done = env, true
				m.count(func(s *MoverStats) { s.Enqueued++ })
			case errors.Is(err, storage.ErrBadRequest):
				// The queue refuses this message as such: set it aside
				// rather than retry it forever.
				p.bad = fmt.Sprintf("the queue refused its message: %v", err)
			default:
				if ctx.Err() == nil {
					m.count(func(s *MoverStats) { s.Errors++ })
					m.o.Logger.Warn("leasecron mover: enqueue failed; the row stays for the next poll", "row", p.e.RowKey, "err", err)
				}
			}
		}()
	}
	wg.Wait()
}

// beforeSend hands the well-formed plans' envelopes to BeforeSend and marks
// those it recorded.
func (m *Mover) beforeSend(ctx context.Context, plans []*plan) {
	if m.o.BeforeSend == nil {
		return
	}
	var envs []queue.Envelope
	var good []*plan
	for _, p := range plans {
		if p.bad == "" {
			envs, good = append(envs, p.env), append(good, p)
		}
	}
	if len(envs) == 0 {
		return
	}
	marked := m.o.BeforeSend(ctx, envs)
	for i, p := range good {
		p.env.Marked = i < len(marked) && marked[i]
	}
}
