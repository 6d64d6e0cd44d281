package schedule

import (
	"cmp"
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
		if m.stats.HoldingBack {
			// Held back, it reads again after its poll, not sooner: a
			// failing probe says nothing of the consumers, and a busy
			// account is not pressed harder (a review).
			m.holdReads++
			m.holdEvery = m.o.PollEvery
		}
		return m.stats.HoldingBack, room{rows: table.MaxOps, early: max(0, min(table.MaxOps, m.o.MaxDepth)-waiting)}, nil
	}
	switch {
	case !was && depth >= m.o.MaxDepth:
		m.stats.HoldingBack = true
		m.holdReads = 0
		m.o.Logger.Info("holding back; the queue is deep", "depth", depth, "max_depth", m.o.MaxDepth, "shards", m.o.Shards, "generation", gen)
	case was && depth < m.o.ResumeBelow:
		m.stats.HoldingBack = false
		if m.holdReads == 0 {
			// Drained within one wait: the consumers outpace MaxDepth a
			// wait, so the next hold reads the depth sooner.
			m.holdEvery = max(m.holdEveryMin(), m.holdWait()/2)
		}
		m.o.Logger.Info("resuming", "depth", depth, "resume_below", m.o.ResumeBelow, "invisible_discounted", discounted, "peers_early", peers, "shards", m.o.Shards, "generation", gen)
	case was:
		m.holdReads++
		m.holdEvery = min(m.o.PollEvery, 2*m.holdWait())
		m.o.Logger.Debug("still holding back", "depth", depth, "resume_below", m.o.ResumeBelow, "peers_early", peers, "shards", m.o.Shards)
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

// holdWait is how long a held-back mover waits to read the depth again
// (Mover.holdEvery). The caller holds m.mu.
func (m *Mover) holdWait() time.Duration { return cmp.Or(m.holdEvery, m.o.PollEvery) }

// holdEveryMin is the shortest holdEvery: an eighth of the poll, so that a
// mover whose consumers keep up moves up to eight times MaxDepth a poll,
// at one depth read (a request a queue) each. The caller holds m.mu.
func (m *Mover) holdEveryMin() time.Duration { return m.o.PollEvery / holdSpeedup }

// holdSpeedup bounds how much more often than its poll a held-back mover
// reads the depth.
const holdSpeedup = 8

// peersWaiting counts, up to need, the messages the movers of the other
// shards (Peers) sent early that still wait, invisible, for their due
// time in a queue Depth counts: read from those shards' rows that carry
// a mark (PropSent: a one-off's message; a series' occurrences from its
// row's due time to PropSentUntil), due from an early window ago (a
// held-back peer's series row falls behind while its occurrences sent
// early still wait) to an early window ahead. It is asked only when the
// depth would hold this mover back and more than MaxDepth messages are
// invisible, and reads a shard again only after peerReadEvery (the due
// times read are kept, and those passed since drop out): a query a shard
// (at most peerPages pages) every few seconds while the queue is deep.
// What it misses counts as backlog, as before: a message whose row was
// retired (due within the retire window), changed or cancelled since, or
// that a peer with a longer early window sent further ahead. On an error
// it returns what it counted.
func (m *Mover) peersWaiting(ctx context.Context, now time.Time, need int) (int, error) {
	n := 0
	for _, s := range m.o.Peers() {
		if n >= need {
			break
		}
		if slices.Contains(m.o.Shards, s) {
			continue
		}
		m.mu.Lock()
		read, ok := m.peerDues[s]
		m.mu.Unlock()
		if !ok || now.Sub(read.at) >= peerReadEvery(m.o.PollEvery) || now.Before(read.at) {
			dues, err := m.readPeer(ctx, s, now)
			if err != nil {
				return n, err
			}
			read = peerRead{at: now, dues: dues}
			m.mu.Lock()
			if m.peerDues == nil {
				m.peerDues = map[string]peerRead{}
			}
			m.peerDues[s] = read
			m.mu.Unlock()
		}
		for _, due := range read.dues {
			if due.After(now) {
				n++
			}
		}
	}
	return n, nil
}

// peerRead is what peersWaiting read of a shard: when, and the due times
// of the messages its rows said were sent early.
type peerRead struct {
	at   time.Time
	dues []time.Time
}

// peerReadEvery is how long peersWaiting keeps a shard's read: a poll, and
// at least peerReadMin.
func peerReadEvery(poll time.Duration) time.Duration { return max(poll, peerReadMin) }

// peerReadMin bounds how often a held-back mover reads another shard's
// early sends.
const peerReadMin = 5 * time.Second

// peerPages bounds the pages of a shard one read takes: messages past
// them count as backlog.
const peerPages = 2

// peerProps are the properties a read of a peer's early sends needs:
// parseRow's required ones, the marks, and what routes a message.
var peerProps = []string{PropID, PropMessage, PropPayloadBlob, PropType, PropRecurrence, PropTZ,
	PropSent, PropSentUntil, PropQueue, PropFairKey, PropPriority}

// readPeer reads the due times of the messages shard's rows say were sent
// early and still wait (as of now), in a queue Depth counts.
func (m *Mover) readPeer(ctx context.Context, shard string, now time.Time) ([]time.Time, error) {
	q := table.Query{Partition: shard, From: dueBound(now.Add(-m.o.Early)), To: dueBound(now.Add(m.o.Early)),
		Where: []table.Cond{{Prop: PropSent, Op: table.Gt, Value: ""}}, Select: peerProps}
	var dues []time.Time
	for range peerPages {
		page, err := m.t.Query(ctx, q)
		if err != nil {
			return dues, fmt.Errorf("early sends of shard %s: %w", shard, err)
		}
		for _, e := range page.Entities {
			dues = m.waitingOf(e, now, dues)
		}
		if page.Continuation == "" {
			break
		}
		q.Continuation = page.Continuation
	}
	return dues, nil
}

// waitingOf appends to dues the due times of the messages row e, read
// from another shard, says its mover sent early that are not due yet and
// go to a queue Depth counts.
func (m *Mover) waitingOf(e table.Entity, now time.Time, dues []time.Time) []time.Time {
	r, err := parseRow(e)
	if err != nil || r.sent == "" {
		return dues
	}
	it := r.item
	env := queue.Envelope{Type: it.Type, Queue: it.Queue, Priority: it.Priority, FairKey: it.FairKey, Payload: it.Payload, PayloadBlob: it.PayloadBlob}
	if m.inBlob(env) {
		// Sent with its payload in a blob (sendAll): routed without it.
		env.Payload, env.PayloadBlob = "", "(a blob)"
	}
	if m.o.Counts != nil && !m.o.Counts(env) {
		return dues
	}
	if r.rec.IsZero() {
		if it.Due.After(now) {
			dues = append(dues, it.Due)
		}
		return dues
	}
	// Every occurrence from the row's due time to the last sent early (a
	// pass may send MaxOccurrences more than were already): bounded, a
	// series ahead by more is read as that many.
	for occ, i := it.Due, 0; !occ.After(r.sentUntil) && i < maxPeerOccurrences; i++ {
		if occ.After(now) {
			dues = append(dues, occ)
		}
		next, err := r.rec.Next(occ, occ)
		if err != nil || !next.After(occ) {
			break
		}
		occ = next
	}
	return dues
}

// inBlob reports whether env's payload, inline now, goes in a blob when
// the mover sends it: it is over InlineLimit.
func (m *Mover) inBlob(env queue.Envelope) bool {
	return env.PayloadBlob == "" && jsonLen(env.Payload) > m.o.InlineLimit
}

// maxPeerOccurrences bounds the occurrences of one series a read of a
// peer's early sends counts.
const maxPeerOccurrences = 1000
