package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// plan is what the mover intends for one row in one pass: the messages to
// send for it, and what then happens to the row.
type plan struct {
	e       table.Entity
	due     time.Time // the row's due time
	indexed bool
	id      string // valid when keyOK
	keyOK   bool   // the RowKey parsed: id is known
	bad     string // malformed: why

	// sends are the messages this pass enqueues for the row, in due order
	// (one for a one-off task, one per occurrence for a series).
	sends []*send
	// confirm are the messages sent early by an earlier pass whose row
	// this pass retires (MoverOptions.Confirm is told first).
	confirm []queue.Envelope
	// retire removes the row (a series: replaces it by nextRK/next);
	// otherwise mark, when set, is merged into the row, which stays.
	retire bool
	nextRK string         // series: the RowKey of the row that replaces it
	next   map[string]any // series: that row's properties
	mark   map[string]any // the early-send bookkeeping merged into a row that stays

	ok        bool   // every send was accepted (or the row was set aside)
	blob      string // payload blob stored for a large directly inserted row
	confirmed int    // how many of confirm were accepted (Unconfirm takes them back)
	// preconfirmed: confirm has been asked already (Mover.confirmPlans);
	// confirmFailed: some of it was refused, so the row stays.
	preconfirmed, confirmFailed bool
}

// ahead returns how many of p's messages go ahead of their due time
// (with a visibility delay).
func (p *plan) ahead() int {
	n := 0
	for _, s := range p.sends {
		if s.delay > 0 {
			n++
		}
	}
	return n
}

// send is one message of a plan.
type send struct {
	env   queue.Envelope
	delay time.Duration
	// hold: its run's record could not be written (BeforeSendHold); the
	// row stays for the next pass.
	hold bool
}

// pass moves what is due in every shard. full reports that some shard had
// more due rows than MaxPerPass.
//
// Under backpressure (MaxDepth > 0) a pass sends at most MaxDepth − depth
// messages, so one pass cannot push the queue past MaxDepth however many
// rows are due (the last plan it acts on may take more: a series' several
// occurrences; rows that only retire a message sent early take none); a
// pass that fills the queue to MaxDepth starts holding back, and moving
// resumes below ResumeBelow. When the depth is unknown (the probe failed)
// a pass sends at most one batch's worth (MaxOps messages), and the next
// waits its poll. Held back, the next pass comes after Mover.holdEvery.
func (m *Mover) pass(ctx context.Context, gen int64) (full bool, err error) {
	now := m.o.Clock.Now()
	m.mu.Lock()
	m.passRows, m.retrySoon, m.held = 0, 0, 0
	m.mu.Unlock()
	m.count(func(s *MoverStats) { s.LastPass = now })
	m.waitingAt(now) // forgets the messages that have come due
	hold, room, err := m.holdBack(ctx, now, gen)
	unknown := !room.known && room.rows > 0 // the depth probe failed
	if err != nil || hold {
		if hold {
			// Occurrences that fall due while moving is held back are
			// missed, as while nobody leads: a series runs once after,
			// whether or not a pass had failed to settle its row before.
			m.mu.Lock()
			m.lastPass = now
			m.unsettled = nil
			m.mu.Unlock()
		}
		return false, err
	}
	for _, shard := range m.o.Shards {
		if ctx.Err() != nil {
			return false, nil
		}
		if room.rows == 0 {
			break
		}
		sp := m.newShardPass(shard, gen, now, m.o.MaxPerPass, room.rows, room.early)
		more, err := sp.run(ctx)
		if err != nil {
			return false, err
		}
		full = full || more
		m.mu.Lock()
		m.passRows += sp.rows
		m.mu.Unlock()
		m.o.Logger.Debug("pass over a shard", "shard", shard, "sent", sp.sent, "more", more, "took", m.o.Clock.Now().Sub(now))
		if room.rows >= 0 {
			// (At least 0: a plan of several sends may take more than
			// the room left, and a room below 0 would read as no bound
			// for the next shards.)
			room.rows = max(0, room.rows-sp.sent)
		}
		if room.early >= 0 {
			room.early = max(0, room.early-sp.sentEarly)
		}
	}
	switch {
	case room.known && room.rows <= 0:
		// The queue is now as deep as MaxDepth allows: hold back until it
		// drains below ResumeBelow rather than trickle rows in one by one.
		m.mu.Lock()
		if !m.stats.HoldingBack {
			m.stats.HoldingBack = true
			m.holdReads = 0
			m.o.Logger.Info("holding back; this pass filled the queue", "max_depth", m.o.MaxDepth, "shards", m.o.Shards, "generation", gen)
		}
		m.mu.Unlock()
		full = false
	case unknown:
		// The one batch an unknown depth allows is spent (or tried: some
		// sends may have failed): the next pass waits its poll and
		// probes again, rather than follow at once with another batch as
		// if there were no MaxDepth.
		full = false
	}
	m.count(func(s *MoverStats) { s.Passes++ })
	m.mu.Lock()
	m.lastPass = now
	m.lastTook = m.o.Clock.Now().Sub(now)
	m.mu.Unlock()
	return full, nil
}

// plan interprets one row read at now: the messages to send and what then
// happens to the row; or why the row is malformed. since is when the
// previous pass of this term ran (now in a term's first pass).
//
// Two horizons apply. Rows due by now + retire window (min(PollEvery,
// Early)) are removed from the table once their messages are in the queue:
// the move. Rows due later but within now + Early get their messages sent
// early, invisible until due, and stay in the table marked as sent
// (PropSent holds a random token the messages carry, PropSentUntil the last
// occurrence sent of a series), so that cancelling, rescheduling or
// replacing them still works until they are moved; a worker that receives
// such a message checks it against the run record or the row (see
// Client.Current).
func (m *Mover) plan(e table.Entity, now, since time.Time, gen int64) *plan {
	r, err := parseRow(e)
	p := &plan{e: e, indexed: r.indexed, id: r.item.ID, due: r.item.Due}
	_, _, kerr := ParseRowKey(e.RowKey)
	p.keyOK = kerr == nil
	if err != nil {
		p.bad = err.Error()
		return p
	}
	it := r.item
	base := queue.Envelope{
		V:              queue.EnvelopeVersion,
		Type:           it.Type,
		Queue:          it.Queue,
		Priority:       it.Priority,
		FairKey:        it.FairKey,
		Payload:        it.Payload,
		PayloadBlob:    it.PayloadBlob,
		Enqueued:       now.UTC(),
		FailedAttempts: it.Attempts,
		MaxAttempts:    it.MaxAttempts,
		Recurrence:     it.Recurrence,
		Generation:     gen,
		TraceParent:    it.TraceParent,
		UniqueKey:      it.UniqueKey,
		UniqueFor:      int64(it.UniqueFor / time.Second),
		UniqueStates:   joinStates(it.UniqueStates),
		Batch:          it.Batch,
		After:          it.After,
		Waiters:        it.Waiters,
	}
	if it.Callback {
		base.Completed = it.Completed
	}
	if base.PayloadBlob == "" && jsonLen(base.Payload) > m.o.InlineLimit && m.o.PayloadStore == nil {
		p.bad = fmt.Sprintf("payload is %d bytes as JSON, more than the inline limit %d, and no payload store is configured", jsonLen(base.Payload), m.o.InlineLimit)
		return p
	}
	retireBy, earlyBy := now.Add(m.oneOffRetireWindow()), now.Add(m.o.Early)
	if now.Before(it.CancellingUntil) {
		// A cancel is telling what waits for the task that it ended, and
		// removes the row after: moved now, it would run though they heard
		// it was cancelled (issue 38, seed 16778).
		return p
	}
	token := r.sent
	if token == "" && now.Before(it.SendingUntil) {
		// The client that wrote the row is sending its message itself
		// (AddOptions.Sending); it is moved as any other row only if the
		// client never marks it sent.
		return p
	}
	recurring := !r.rec.IsZero()
	if recurring {
		retireBy = now.Add(m.seriesRetireWindow())
	}
	row := e.PartitionKey + "/" + e.RowKey
	msg := func(due time.Time, tok string) queue.Envelope {
		env := base
		env.ID, env.Due = runID(it.ID, due, recurring), due
		if recurring {
			env.Series = it.ID
		}
		if tok != "" {
			env.Token, env.Row, env.RowETag = tok, row, e.ETag
		}
		return env
	}
	if !recurring {
		switch {
		case !p.due.After(retireBy) && token != "" && r.confirmed == token:
			p.retire = true // its sender confirmed the run already
		case !p.due.After(retireBy) && token != "":
			p.confirm = append(p.confirm, msg(p.due, token))
			p.retire = true
		case !p.due.After(retireBy):
			p.sends = append(p.sends, &send{env: msg(p.due, ""), delay: max(0, p.due.Sub(now))})
			p.retire = true
		case token != "":
			m.waitingFor(msg(p.due, token).ID, p.due) // sent by an earlier pass or term
		default:
			token = newToken()
			p.sends = append(p.sends, &send{env: msg(p.due, token), delay: p.due.Sub(now)})
			p.mark = map[string]any{PropSent: token}
		}
		return p
	}

	// A series: every occurrence due within the window gets its own
	// message. The first is the row's own due time; after it, occurrences
	// due before since (the previous pass of this term, or now) are skipped
	// (Recurrence.Next) once one is sent: they were missed while nobody
	// moved, so an overdue series runs once, not once per missed
	// occurrence (an occurrence sent early already is not that once).
	// Occurrences that fell due since the previous pass (a series added
	// meanwhile) are sent at once.
	if !r.indexed {
		// Without an index row a worker cannot find the series' row to
		// check an early-sent occurrence: send only what is moved now.
		earlyBy = retireBy
	}
	sentUntil := r.sentUntil
	if token == "" {
		sentUntil = time.Time{}
	}
	newTok := token
	if newTok == "" {
		newTok = newToken()
	}
	var lastEarly, firstAfter time.Time
	occ := p.due
	fresh := 0
	for !occ.After(earlyBy) && fresh < m.o.MaxOccurrences {
		already := token != "" && !occ.After(sentUntil)
		if occ.After(retireBy) && firstAfter.IsZero() {
			firstAfter = occ
		}
		switch {
		case !occ.After(retireBy) && already:
			p.confirm = append(p.confirm, msg(occ, token))
		case !occ.After(retireBy):
			fresh++
			p.sends = append(p.sends, &send{env: numbered(msg(occ, ""), r.seq+int64(fresh)), delay: max(0, occ.Sub(now))})
		case already:
			m.waitingFor(msg(occ, token).ID, occ)
		default:
			fresh++
			p.sends = append(p.sends, &send{env: numbered(msg(occ, newTok), r.seq+int64(fresh)), delay: occ.Sub(now)})
			lastEarly = occ
		}
		// Skipped from since, but only once an occurrence is sent: the
		// first one not sent yet is the overdue series' once, also when
		// the row's own was sent early already (issue 38, seed 106191: a
		// new term's first pass, a few milliseconds after an occurrence
		// fell due, confirmed the row's and skipped that one).
		from := since
		if fresh == 0 {
			from = occ
		}
		next, err := r.rec.Next(occ, from)
		if err == nil && mutate.On(mutate.SkipOccurrence) {
			next, err = r.rec.Next(next, next)
		}
		if err != nil {
			p.bad = fmt.Sprintf("recurrence %q: %v", it.Recurrence, err)
			return p
		}
		occ = next
	}
	until := sentUntil
	if lastEarly.After(until) {
		until = lastEarly
	}
	seq := r.seq + int64(fresh)
	marker := func(props map[string]any) {
		props[PropSent], props[PropSentUntil] = newTok, formatSentUntil(until)
	}
	if p.due.After(retireBy) {
		// Nothing to move yet: only early sends, recorded on the row.
		if !lastEarly.IsZero() {
			p.mark = map[string]any{PropSeq: seq}
			marker(p.mark)
		}
		return p
	}
	// Move the row to its first occurrence after the retire horizon (or
	// to the first one this pass did not reach, when MaxOccurrences
	// stopped it), in the same transaction that removes this one.
	nextDue := occ
	if !firstAfter.IsZero() {
		nextDue = firstAfter
	}
	_, suffix, _ := ParseRowKey(e.RowKey)
	if p.nextRK, err = RowKey(nextDue, suffix); err != nil {
		p.bad = fmt.Sprintf("recurrence %q: next occurrence: %v", it.Recurrence, err)
		return p
	}
	p.next = table.Props(e.Props).Clone()
	for _, k := range []string{PropAttempts, PropSent, PropSentUntil} {
		delete(p.next, k)
		delete(p.next, k+"@odata.type")
	}
	if seq > 0 {
		p.next[PropSeq] = seq
	}
	if !until.IsZero() && !until.Before(nextDue) {
		// Occurrences already sent from the next due on stay recorded.
		marker(p.next)
	}
	p.retire = true
	return p
}

// numbered returns env as occurrence number seq of its series
// (queue.Envelope.Seq).
func numbered(env queue.Envelope, seq int64) queue.Envelope {
	env.Seq = seq
	return env
}

// newToken returns a fresh early-send token: 12 random hex digits.
func newToken() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// formatSentUntil renders PropSentUntil.
func formatSentUntil(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// sendAll sends a plan's messages, in order, stopping at the first failure
// (the row then stays for the next pass). A large payload of a directly
// inserted row is moved to the payload store first. It reports whether
// every message was accepted.
func (m *Mover) sendAll(ctx context.Context, now time.Time, p *plan) bool {
	for _, s := range p.sends {
		if s.hold {
			m.o.Logger.Debug("run's record could not be written; the row stays for the next pass", "task_id", s.env.ID, "row", p.e.RowKey)
			m.mu.Lock()
			m.retrySoon = max(m.retrySoon, time.Second)
			m.held++
			m.mu.Unlock()
			return false
		}
	}
	if m.o.BeforeSend != nil || m.o.BeforeSendHold != nil {
		m.mu.Lock()
		nextPass := m.o.PollEvery + m.lastTook
		m.mu.Unlock()
		for _, s := range p.sends {
			if s.env.Token == "" && s.delay > nextPass && !s.env.Marked {
				// A run moved further ahead of its due time than the next
				// pass, unrecorded, would have neither its row nor a run
				// record for that long: status and cancel answered "not
				// found" for 14 s before it ran (issue 38, sweep seed
				// 30689; a slow pass widens the retire window). The row
				// stays for the next pass, which comes before it is due.
				// Nearer its due time it goes recorded or not: a mark is
				// also refused, not only failed, for a run noted behind
				// another scheduling still under way (a handler that
				// schedules its own id again), which must not start late.
				m.o.Logger.Debug("run not recorded queued; the row stays for the next pass", "task_id", s.env.ID, "row", p.e.RowKey)
				return false
			}
		}
	}
	for i, s := range p.sends {
		if ctx.Err() != nil {
			return false
		}
		env := s.env
		if m.inBlob(env) {
			if p.blob == "" {
				// Deterministic name: a retry overwrites instead of leaking.
				ref, err := m.o.PayloadStore.Put(ctx, payload.Prefix+p.id+"-"+strconv.FormatInt(Ticks(p.due), 10), []byte(env.Payload))
				if err != nil {
					m.count(func(s *MoverStats) { s.Errors++ })
					m.o.Logger.Warn("cannot store a large payload; the row stays", "row", p.e.RowKey, "err", err)
					return false
				}
				p.blob = ref
			}
			env.PayloadBlob, env.Payload = p.blob, ""
		}
		delay := s.delay
		if delay > 0 {
			// Measured now, not when the pass began: recording the runs
			// (BeforeSend) and the sends before this one take time, and
			// the message must appear when it is due, not that much later.
			delay = max(0, env.Due.Sub(m.o.Clock.Now()))
		}
		err := m.o.Enqueuer.Enqueue(ctx, env, delay)
		switch {
		case err == nil:
			p.sends[i].env = env
			m.count(func(st *MoverStats) { st.Enqueued++ })
			m.o.Logger.Debug("sent", "task_id", env.ID, "due", env.Due, "delay", delay, "token", env.Token, "row", p.e.RowKey)
			if s.delay > 0 {
				m.waitingFor(env.ID, env.Due)
			}
		case errors.Is(err, storage.ErrBadRequest) && i == 0:
			// The queue refuses this message as such: set the row aside
			// rather than retry it forever.
			p.bad = fmt.Sprintf("the queue refused its message: %v", err)
			return false
		default:
			if s.delay > 0 && mayHaveLanded(err) {
				// It may be in the queue all the same (its answer lost):
				// counted as waiting, so that the early room stays within
				// MaxDepth (issue 38, sim seed 145045, row 238: the mover
				// counted one fewer than waited, and sent one too many).
				// A send again of the id counts once.
				m.waitingFor(env.ID, env.Due)
			}
			if ctx.Err() == nil {
				m.count(func(s *MoverStats) { s.Errors++ })
				m.o.Logger.Warn("enqueue failed; the row stays for the next pass", "row", p.e.RowKey, "err", err)
				if storage.IsTransient(err) {
					m.mu.Lock()
					m.retrySoon = max(m.retrySoon, retry.Wait(time.Second, err))
					m.mu.Unlock()
				}
			}
			return false
		}
	}
	return true
}

// mayHaveLanded reports whether a send that answered err may have put its
// message on the queue all the same: a fault that passes (a dropped
// connection, a timeout, a 5xx), not a refusal of the message as such
// nor one made before it went out.
func mayHaveLanded(err error) bool {
	return storage.IsTransient(err) && !errors.Is(err, queue.ErrTooLarge) && !errors.Is(err, queue.ErrDelayTooLong) &&
		!errors.Is(err, queue.ErrMalformed) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// waitingFor records a message known to be in the queue, invisible until
// due (see waitingAt).
func (m *Mover) waitingFor(runID string, due time.Time) {
	m.mu.Lock()
	_, known := m.waiting[runID]
	m.waiting[runID] = due
	m.mu.Unlock()
	if !known && m.o.OnWaiting != nil {
		m.o.OnWaiting(due)
	}
}

// waitingAt returns how many messages this mover knows to be in the queue
// only to wait for their due time (sent early), as of now, and forgets
// those that have come due. Backpressure does not count them as backlog.
func (m *Mover) waitingAt(now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for id, due := range m.waiting {
		if due.After(now) {
			n++
		} else {
			delete(m.waiting, id)
		}
	}
	return n
}

// Upcoming returns the distinct due times, in order, of the messages this
// mover knows to be waiting in the queue for their due time (see waitingAt),
// at most max of them: when they come due, any consumer may look for them
// (a leader's worker publishes them to the others, which need them if it
// dies before they come due).
func (m *Mover) Upcoming(now time.Time, max int) []time.Time {
	m.mu.Lock()
	out := make([]time.Time, 0, len(m.waiting))
	for _, due := range m.waiting {
		if due.After(now) {
			out = append(out, due)
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	out = slices.CompactFunc(out, func(a, b time.Time) bool { return a.Equal(b) })
	if len(out) > max {
		out = out[:max]
	}
	return out
}

// beforeSend hands the envelopes a chunk is about to send to BeforeSend
// and sets Marked on those it recorded. Envelopes sent early (with a Token)
// are left out: their runs are recorded when their rows are moved
// (Confirm), since the task may still change before that.
func (m *Mover) beforeSend(ctx context.Context, plans []*plan) {
	if m.o.BeforeSend == nil && m.o.BeforeSendHold == nil {
		return
	}
	var envs []queue.Envelope
	var at []*send
	for _, p := range plans {
		if p.bad != "" {
			continue
		}
		for _, s := range p.sends {
			if s.env.Token == "" {
				envs, at = append(envs, s.env), append(at, s)
			}
		}
	}
	if len(envs) == 0 {
		return
	}
	var marked, hold []bool
	if m.o.BeforeSendHold != nil {
		marked, hold = m.o.BeforeSendHold(ctx, envs)
	} else {
		marked = m.o.BeforeSend(ctx, envs)
	}
	for i, s := range at {
		s.env.Marked = i < len(marked) && marked[i]
		s.hold = i < len(hold) && hold[i]
	}
}
