package schedule

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// room is how many rows a pass may still move under backpressure: rows < 0
// means no limit; known reports that it comes from a depth probe (not the
// one-batch allowance of an unknown depth). early is how many of their
// messages may go ahead of their due time (< 0: no limit).
type room struct {
	rows  int
	early int
	known bool
}

// holdBack applies backpressure with hysteresis and says how many rows the
// pass may move. Its logs name the term (gen) and the shards: in a sharded
// worker each shard's mover holds back and resumes on its own.
func (m *Mover) holdBack(ctx context.Context, now time.Time, gen int64) (bool, room, error) {
	if m.o.MaxDepth <= 0 {
		return false, room{rows: -1, early: -1}, nil
	}
	depth, err := m.o.Depth(ctx)
	// Messages sent early wait invisibly for their due time: not backlog
	// yet.
	waiting := m.waitingAt(now)
	depth = max(0, depth-waiting)
	m.mu.Lock()
	was := m.stats.HoldingBack
	m.mu.Unlock()
	bar := m.o.MaxDepth
	if was {
		bar = m.o.ResumeBelow
	}
	// Few messages visible: the invisible ones are counted again. This
	// mover knows only of the messages it sent early itself; those the
	// other shards' owners sent wait for their due time too, and would
	// otherwise keep it held back for as long as they keep coming (issue
	// 38, row 188: sim seed 113833). It reads them from those shards'
	// rows (Peers), and up to MaxDepth more invisible ones do not count:
	// messages it cannot tell apart, being worked on or put back for
	// later (a retry's backoff, a pause, a limit), which are backlog;
	// past MaxDepth of them it holds back as before.
	discounted, peers := false, 0
	if err == nil && depth >= bar && m.o.Visible != nil {
		visible, exact, verr := m.o.Visible(ctx, bar)
		if verr != nil {
			m.o.Logger.Debug("cannot count the visible messages; going by the depth", "err", verr)
		}
		if verr == nil && exact {
			discount := m.o.MaxDepth
			if depth-discount > visible && m.o.Peers != nil {
				var perr error
				peers, perr = m.peersWaiting(ctx, now, depth)
				if perr != nil {
					m.o.Logger.Debug("cannot read the other shards' early sends; counting those read", "read", peers, "err", perr)
				}
				discount += peers
			}
			if d := max(visible, depth-discount); d < depth {
				depth, discounted = d, true
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		// Keep the previous state; a failed depth probe is not a reason to
		// flood the queue or to stop moving: send at most one batch's
		// worth, and early only as far as those already waiting leave
		// room under MaxDepth (as if nothing were due), so that passes
		// that cannot read the depth do not pile up early messages.
		m.stats.Errors++
		m.o.Logger.Warn("queue depth unknown", "err", err)
		return m.stats.HoldingBack, room{rows: table.MaxOps, early: max(0, min(table.MaxOps, m.o.MaxDepth)-waiting)}, nil
	}
	switch {
	case !was && depth >= m.o.MaxDepth:
		m.stats.HoldingBack = true
		m.o.Logger.Info("holding back; the queue is deep", "depth", depth, "max_depth", m.o.MaxDepth, "shards", m.o.Shards, "generation", gen)
	case was && depth < m.o.ResumeBelow:
		m.stats.HoldingBack = false
		m.o.Logger.Info("resuming", "depth", depth, "resume_below", m.o.ResumeBelow, "invisible_discounted", discounted, "shards", m.o.Shards, "generation", gen)
	case was:
		m.o.Logger.Debug("still holding back", "depth", depth, "resume_below", m.o.ResumeBelow, "shards", m.o.Shards)
	}
	// Backlog once they come due, though: more go early only while those
	// waiting (the other shards' too, when read) leave room for them, so
	// a burst sent ahead of its due time cannot come due as more than
	// MaxDepth of backlog at once.
	rows := max(0, m.o.MaxDepth-depth)
	early := max(0, rows-waiting-peers)
	if mutate.On(mutate.EarlyPastDepth) {
		early = -1
	}
	return m.stats.HoldingBack, room{rows: rows, early: early, known: true}, nil
}

// peersWaiting counts, up to need, the messages the movers of the other
// shards (Peers) sent early that still wait, invisible, for their due
// time in a queue Depth counts: read from those shards' rows due within
// the early window that carry a mark (PropSent: a one-off's message; a
// series' occurrences from its row's due time to PropSentUntil). One
// query a shard, asked only when the depth would hold this mover back
// and few messages are visible. What it misses (a message whose row has
// been retired or changed since, a peer's longer early window) counts as
// backlog, as before. On an error it returns what it counted.
func (m *Mover) peersWaiting(ctx context.Context, now time.Time, need int) (int, error) {
	n := 0
	for _, s := range m.o.Peers() {
		if n >= need {
			break
		}
		if slices.Contains(m.o.Shards, s) {
			continue
		}
		q := table.Query{Partition: s, From: dueBound(now), To: dueBound(now.Add(m.o.Early)),
			Where: []table.Cond{{Prop: PropSent, Op: table.Gt, Value: ""}}}
		for {
			q.Top = min(need-n, table.MaxPage)
			page, err := m.t.Query(ctx, q)
			if err != nil {
				return n, fmt.Errorf("early sends of shard %s: %w", s, err)
			}
			for _, e := range page.Entities {
				n += m.waitingOf(e, now)
			}
			if page.Continuation == "" || n >= need {
				break
			}
			q.Continuation = page.Continuation
		}
	}
	return n, nil
}

// waitingOf is how many messages row e, read from another shard, says
// its mover sent early that are not due yet and go to a queue Depth
// counts.
func (m *Mover) waitingOf(e table.Entity, now time.Time) int {
	r, err := parseRow(e)
	if err != nil || r.sent == "" {
		return 0
	}
	it := r.item
	env := queue.Envelope{Type: it.Type, Queue: it.Queue, Priority: it.Priority, FairKey: it.FairKey, Payload: it.Payload, PayloadBlob: it.PayloadBlob}
	if m.o.Counts != nil && !m.o.Counts(env) {
		return 0
	}
	if r.rec.IsZero() {
		if it.Due.After(now) {
			return 1
		}
		return 0
	}
	n := 0
	for occ, i := it.Due, 0; !occ.After(r.sentUntil) && i < m.o.MaxOccurrences; i++ {
		if occ.After(now) {
			n++
		}
		next, err := r.rec.Next(occ, occ)
		if err != nil || !next.After(occ) {
			break
		}
		occ = next
	}
	return n
}
