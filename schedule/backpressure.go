package schedule

import (
	"context"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/table"
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
	// Few messages visible: up to MaxDepth of the invisible ones do not
	// count. This mover knows only of the messages it sent early itself;
	// those another shard's owner sent would otherwise keep it held back
	// for as long as they keep coming (issue 38, row 188: sim seed
	// 113833). Not all of them: messages a consumer put back for later (a
	// retry's backoff, a pause, a limit) are invisible too, and are
	// backlog; past MaxDepth of them the mover holds back as before.
	discounted := false
	if err == nil && depth >= bar && m.o.Visible != nil {
		visible, exact, verr := m.o.Visible(ctx, bar)
		if verr != nil {
			m.o.Logger.Debug("cannot count the visible messages; going by the depth", "err", verr)
		}
		if verr == nil && exact {
			if d := max(visible, depth-m.o.MaxDepth); d < depth {
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
	// waiting leave room for them, so a burst sent ahead of its due time
	// cannot come due as more than MaxDepth of backlog at once.
	rows := max(0, m.o.MaxDepth-depth)
	early := max(0, rows-waiting)
	if mutate.On(mutate.EarlyPastDepth) {
		early = -1
	}
	return m.stats.HoldingBack, room{rows: rows, early: early, known: true}, nil
}
