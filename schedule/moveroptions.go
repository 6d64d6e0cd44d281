package schedule

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/queue"
)

// Defaults of MoverOptions.
const (
	DefaultPollEvery   = 5 * time.Second
	DefaultConcurrency = 32
	DefaultMaxPerPass  = 10_000
	DefaultSweepEvery  = time.Minute
	// DefaultMaxOccurrences bounds the messages one pass sends for one
	// recurring series.
	DefaultMaxOccurrences = 100
	// sweepTop is how many rows one sweep query reads per key range.
	sweepTop = 100
)

// MoverSettings are the mover's tunable settings, the part of
// MoverOptions a program configures (leasecron.WorkerOptions.Mover takes
// them as they are). Zero values take the defaults; a negative value is
// refused, except where a field says it turns something off.
type MoverSettings struct {
	// PollEvery is the pause between passes (mover.poll_every). Default
	// 5s.
	PollEvery time.Duration
	// Early is the enqueue-early window: rows due within it are enqueued
	// now with an initial invisibility of the time left, so they appear on
	// time rather than up to a poll late — and, with a window longer than a
	// failover (lease duration + lease poll), so that they appear on time
	// when the leader crashes before they come due. Rows due within
	// min(PollEvery, Early) are moved (removed from the table) once
	// enqueued; rows due later in the window stay in the table marked as
	// sent (PropSent) until they are that close, so that changes to them
	// still apply (see Confirm and Client.Current). 0 means PollEvery; a
	// negative value disables early enqueueing.
	Early time.Duration
	// Concurrency bounds concurrent enqueues (mover.concurrency). Default
	// 32.
	Concurrency int
	// MaxPerPass bounds the messages (or rows, for rows with nothing to
	// send) one pass acts on per shard. Default 10000; a full pass that
	// made progress (sent, moved, retired, set aside or skipped a row),
	// ended without an error and held no due row back is followed by
	// another at once (any other waits its poll, and so does one that
	// used up the room MaxDepth leaves or, with the queue's depth
	// unknown, its one batch). A pass reads the due rows
	// page by page and commits each batch while later pages are read and
	// sent.
	MaxPerPass int
	// MaxOccurrences bounds the messages one pass sends for one recurring
	// series: every occurrence due within the Early window becomes its own
	// message, at most this many per pass (the rest follow in later
	// passes). Default 100.
	MaxOccurrences int
	// MaxDepth pauses moving while the queue holds at least this many
	// messages (0 = never pause). The depth is what Depth reports less the
	// messages this mover knows to be waiting, invisible, for their due
	// time (those it sent early, and those an earlier leader sent early
	// whose rows it has read): only due work counts as backlog. A pass
	// sends at most MaxDepth − depth messages, so the queue does not grow
	// past MaxDepth through the mover alone. With Visible set, a depth at
	// which the mover would hold back (or stay held back) is counted
	// again when few messages are visible: those the other shards' movers
	// sent early (Peers) and up to MaxDepth more invisible ones (being
	// worked on, or put back for later) do not count, so the queue may
	// hold up to about twice MaxDepth besides the messages waiting for
	// their due time.
	MaxDepth int
	// ResumeBelow resumes moving once the depth is below it. Default
	// MaxDepth/2 (at least 1).
	ResumeBelow int
	// InlineLimit is the largest payload (as a JSON string) sent inline.
	// Default 24 KiB, at most 32 KiB.
	InlineLimit int
	// SweepEvery is how often the mover looks for rows whose RowKey can
	// never come due (malformed keys sorting after the tick range) and sets
	// them aside. Default 1 minute; negative disables.
	SweepEvery time.Duration
}

// MoverOptions configures a Mover: its settings and what it is wired to.
// Zero values mean the documented defaults.
type MoverOptions struct {
	// MoverSettings are the tunable settings (see there).
	MoverSettings
	// Shards are the partitions to move from. Default ["00"]; use the
	// Client's Shards.
	Shards []string
	// Generation returns the fencing generation of the current lease term
	// (≥ 1). Required. Run reads it once, when it starts.
	Generation func() int64
	// Enqueuer sends envelopes to the work queue. Required.
	Enqueuer Enqueuer
	// SetAside keeps malformed rows before they are deleted. Required.
	SetAside SetAsider
	// Depth returns the work queue's (approximate) depth, for
	// backpressure. Required when MaxDepth > 0.
	Depth func(ctx context.Context) (int, error)
	// Visible counts the visible messages in the queues Depth counts,
	// up to n, and reports whether the count is exact (queue.Client's
	// Visible), for backpressure: asked (one request per queue) only when
	// the depth would hold moving back. Nil: the depth alone decides. A
	// failed or inexact answer leaves the depth as it is.
	Visible func(ctx context.Context, n int) (count int, exact bool, err error)
	// Peers, when set, returns every shard of the fleet (a sharded
	// worker's shard map): when the depth would hold moving back and more
	// than MaxDepth messages are invisible, the rows of those this mover
	// does not move are read for the messages their movers sent early,
	// which wait for their due time and are no backlog either (a query
	// or two a shard, each shard read again after a poll, at least 5 s).
	// Nil: only this mover's own early sends are known.
	Peers func() []string
	// Counts reports whether a message goes to a queue Depth counts
	// (queue.Client's Counts): another mover's early message is left out
	// of the depth only then. Nil: every queue counts.
	Counts func(queue.Envelope) bool
	// BeforeSend, when set, is called with the envelopes of each batch of
	// due rows before they are sent, and returns for each whether it was
	// recorded (leasecron's worker marks their runs queued in one table
	// transaction per partition); the mover sets Envelope.Marked on those.
	// Envelopes sent early (with a Token) are not passed: their runs are
	// recorded through Confirm when their rows are moved. A run due
	// further ahead than the next pass that is not recorded is not sent:
	// its row stays for that pass (moved, the task would have neither a
	// row nor a record until it ran). It runs on the goroutine that reads
	// the rows, while earlier batches are sent and committed.
	BeforeSend func(ctx context.Context, envs []queue.Envelope) []bool
	// BeforeSendHold, when set, is used instead of BeforeSend: it also
	// returns, for each envelope, whether its run must not be sent this
	// pass even when due — its record's write failed with a fault that
	// passes, so the run may have no record, and moved, the task would
	// have neither its row nor a record until a worker claimed it (a
	// traffic cop looking at the parents others wait for took it for
	// cancelled: issue 38, sweep seeds 68455, 68031). Its row stays for
	// the next pass. A run kept from its record by a refusal (another
	// scheduling's run under way) is not held.
	BeforeSendHold func(ctx context.Context, envs []queue.Envelope) (marked, hold []bool)
	// OnMoved, when set, is called after each committed batch with the
	// envelopes whose rows it removed (e.g. to mark runs "queued"). It runs
	// on the mover's goroutine and should be quick.
	OnMoved func(ctx context.Context, envs []queue.Envelope)
	// Confirm, when set, is called with the runs whose messages were sent
	// early (their envelopes carry a Token) just before their rows are
	// moved, a batch at a time, and returns for each whether its row may be
	// moved; leasecron's worker records each run as queued with its token,
	// so a worker that receives the message knows it still stands without
	// reading the row. A row whose run is not confirmed stays for the next
	// pass (its message is in the queue, and is checked against the row).
	Confirm func(ctx context.Context, envs []queue.Envelope) []bool
	// OnWaiting, when set, is told the due time of every message the mover
	// knows to be in the queue waiting for its due time: those it sends
	// early and those an earlier term sent early whose rows it reads (after
	// a handover). leasecron's worker wakes its consumer then, so such
	// tasks start on time whoever sent them. It must be quick.
	OnWaiting func(due time.Time)
	// Unconfirm takes a confirmation back when the row changed (was
	// cancelled, rescheduled, replaced or deleted) between the
	// confirmation and the move.
	Unconfirm func(ctx context.Context, env queue.Envelope) error
	// GuardLive, when set, lets the sweep (every SweepEvery) delete the
	// unique guards whose task no longer holds the key (see AddUnique);
	// nil leaves them to be taken over by the next task with the key.
	GuardLive Live
	// SendSlots, when set, bounds the messages in flight across every
	// mover sharing it (one slot per send in flight; its capacity is the
	// bound), in place of each pass's own Concurrency: an instance moving
	// several shards then sends no more at once than one mover would.
	SendSlots chan struct{}
	// Pace, when set, is called after every pass (but one followed at
	// once: see MaxPerPass) in place of the wait of PollEvery, and the
	// next pass starts when it returns; a non-nil error (ctx ended) stops
	// the mover. A sharded schedule's owner uses it to leave a shard with
	// nothing due within Early alone until it is woken (internal/shard).
	Pace func(ctx context.Context, r PassReport) error
	// PayloadStore takes payloads of directly inserted rows that are too
	// large for a queue message. Nil: such rows are set aside.
	PayloadStore PayloadStore
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives progress and warnings. Default slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns s with every zero field set to its default. Early
// and SweepEvery keep a negative value (off).
func (s MoverSettings) WithDefaults() MoverSettings {
	s.PollEvery = cmp.Or(s.PollEvery, DefaultPollEvery)
	s.Early = cmp.Or(s.Early, s.PollEvery)
	s.Concurrency = cmp.Or(s.Concurrency, DefaultConcurrency)
	s.MaxOccurrences = cmp.Or(s.MaxOccurrences, DefaultMaxOccurrences)
	s.MaxPerPass = cmp.Or(s.MaxPerPass, DefaultMaxPerPass)
	if s.MaxDepth > 0 {
		s.ResumeBelow = cmp.Or(s.ResumeBelow, max(1, s.MaxDepth/2))
	}
	s.InlineLimit = cmp.Or(s.InlineLimit, DefaultInlineLimit)
	s.SweepEvery = cmp.Or(s.SweepEvery, DefaultSweepEvery)
	return s
}

func (s MoverSettings) validate() error {
	const p = "schedule.MoverSettings."
	err := opt.First(
		opt.AtLeast(ErrInvalidOptions, p+"PollEvery", s.PollEvery, DefaultPollEvery, 10*time.Millisecond),
		opt.In(ErrInvalidOptions, p+"Concurrency", s.Concurrency, DefaultConcurrency, 1, 1024),
		opt.In(ErrInvalidOptions, p+"MaxOccurrences", s.MaxOccurrences, DefaultMaxOccurrences, 1, 10_000),
		opt.In(ErrInvalidOptions, p+"MaxPerPass", s.MaxPerPass, DefaultMaxPerPass, 1, 100_000),
		opt.In(ErrInvalidOptions, p+"InlineLimit", s.InlineLimit, DefaultInlineLimit, 1, MaxInlineLimit),
	)
	switch {
	case err != nil:
		return err
	case s.Early > 24*time.Hour:
		return opt.Invalid(ErrInvalidOptions, p+"Early", s.Early, "at most 24h, 0 for PollEvery, or negative to disable")
	case s.MaxDepth < 0:
		return opt.Invalid(ErrInvalidOptions, p+"MaxDepth", s.MaxDepth, "0 (no backpressure) or more")
	case s.MaxDepth > 0 && (s.ResumeBelow < 1 || s.ResumeBelow > s.MaxDepth):
		return opt.Invalid(ErrInvalidOptions, p+"ResumeBelow", s.ResumeBelow, fmt.Sprintf("1 to MaxDepth (%d)", s.MaxDepth))
	}
	return nil
}

// WithDefaults returns o with every zero field set to its default.
func (o MoverOptions) WithDefaults() MoverOptions {
	o.MoverSettings = o.MoverSettings.WithDefaults()
	if len(o.Shards) == 0 {
		o.Shards = []string{DefaultShard}
	}
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o MoverOptions) validate() error {
	if err := o.MoverSettings.validate(); err != nil {
		return err
	}
	for _, s := range o.Shards {
		if err := validateShard(s); err != nil {
			return fmt.Errorf("%w: schedule.MoverOptions: %w", ErrInvalidOptions, err)
		}
	}
	switch {
	case o.Generation == nil:
		return fmt.Errorf("%w: schedule.MoverOptions.Generation is nil: the mover needs the lease term's fencing generation", ErrInvalidOptions)
	case o.Enqueuer == nil:
		return fmt.Errorf("%w: schedule.MoverOptions.Enqueuer is nil: the mover needs the work queue", ErrInvalidOptions)
	case o.SetAside == nil:
		return fmt.Errorf("%w: schedule.MoverOptions.SetAside is nil: malformed rows must go somewhere", ErrInvalidOptions)
	case o.MaxDepth > 0 && o.Depth == nil:
		return fmt.Errorf("%w: schedule.MoverSettings.MaxDepth is %d but MoverOptions.Depth is nil: backpressure needs the queue's depth", ErrInvalidOptions, o.MaxDepth)
	}
	return nil
}

// retireWindow is how close to its due time a row is moved out of the
// table (rows due later within Early are only marked as sent): the next
// pass, which comes a poll after this one ends. When passes take long (a
// busy account), rows are retired that much earlier, so that their runs
// are confirmed before they come due and workers claim them in one write;
// never beyond Early.
func (m *Mover) retireWindow() time.Duration {
	m.mu.Lock()
	took := m.lastTook
	m.mu.Unlock()
	return min(m.o.PollEvery+2*took, m.o.Early)
}

// oneOffRetireWindow is retireWindow for a one-off task's row: never
// beyond maxRetire.
func (m *Mover) oneOffRetireWindow() time.Duration {
	return min(m.retireWindow(), maxRetire)
}

// maxRetire bounds how far ahead of its due time a pass sends a one-off
// row's message without marking the row (it retires the row after the
// send): a cancel, replace or roll-back that deletes an unmarked row keeps
// its payload blob only when it is due within ClockSlack (mayBeSent),
// which this leaves half of for the clocks' skew. A row due later within
// Early is sent with a token and marked (messageMayBeOut) instead. Past
// it, a replace raced a pass that had sent a row due 70 s on, and deleted
// the blob its message named (a review of issue 38's row 199). A series'
// blob is never deleted by a change of its row, and its window stays.
const maxRetire = ClockSlack / 2

// seriesRetireWindow is retireWindow for a series' row: never beyond two
// polls, however slow the passes. Whatever a pass confirms or sends
// without a token is then among the occurrences a disable or cancel of
// the series stops (DisableMoving, MovingOccurrences: two polls and the
// clocks' skew), even when the pass read the row just before the change;
// wider, a slow pass confirmed after a disable an occurrence 19.6 s past
// it, and it ran (issue 38, sweep seed 93370). An occurrence due past
// this window is sent early with a token instead, and the worker that
// claims it checks it against the row (a read more, never a late start).
func (m *Mover) seriesRetireWindow() time.Duration {
	return min(m.retireWindow(), 2*m.o.PollEvery)
}

// PassReport is what a pass found, for MoverOptions.Pace.
type PassReport struct {
	// Busy: the pass sent, moved, marked or set aside a row, held back,
	// or failed.
	Busy bool
	// HeldBack: moving is held back by backpressure (queue.max_depth), a
	// Busy that says nothing of the rows due.
	HeldBack bool
	// Rows is how many rows due within the Early window it read (rows
	// already sent early count: they are retired when due).
	Rows int
	// Err is the pass's error, if it failed.
	Err error
	// Wait is how long the mover would wait before the next pass
	// (PollEvery, or longer after failures).
	Wait time.Duration
}

// MoverStats are the mover's counters since it was created.
type MoverStats struct {
	// Generation is the fencing generation of the current (or last) term.
	Generation int64
	// Passes counts completed polls.
	Passes int64
	// Enqueued counts envelopes sent (including ones whose rows were then
	// not removed: those will be sent again, a counted duplicate).
	Enqueued int64
	// Moved counts rows removed (or advanced) after their envelope was sent.
	Moved int64
	// SentEarly counts rows whose messages were sent early and which stay
	// in the table, marked as sent, until they are moved.
	SentEarly int64
	// Batches counts committed table transactions.
	Batches int64
	// SetAside counts malformed rows set aside and removed.
	SetAside int64
	// Skipped counts rows that changed while being moved (enqueued, not
	// removed by the mover).
	Skipped int64
	// Fenced counts terms that ended because a newer leader took over.
	Fenced int64
	// Errors counts failed storage or queue calls.
	Errors int64
	// HoldingBack reports that moving is paused by backpressure.
	HoldingBack bool
	// LastMoveLag is how late (now − due) the oldest row of the last pass
	// that moved anything was; 0 when it was on time or early.
	LastMoveLag time.Duration
	// LastPass is when the last pass started.
	LastPass time.Time
}

// Add adds o's counters to s (for movers of several shards): counts are
// summed, Generation and LastPass take the larger, LastMoveLag the larger,
// and HoldingBack is true if either holds back.
func (s *MoverStats) Add(o MoverStats) {
	s.Generation = max(s.Generation, o.Generation)
	s.Passes += o.Passes
	s.Enqueued += o.Enqueued
	s.Moved += o.Moved
	s.SentEarly += o.SentEarly
	s.Batches += o.Batches
	s.SetAside += o.SetAside
	s.Skipped += o.Skipped
	s.Fenced += o.Fenced
	s.Errors += o.Errors
	s.HoldingBack = s.HoldingBack || o.HoldingBack
	s.LastMoveLag = max(s.LastMoveLag, o.LastMoveLag)
	if o.LastPass.After(s.LastPass) {
		s.LastPass = o.LastPass
	}
}
