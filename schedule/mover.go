package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// Enqueuer puts one envelope on the work queue, invisible for delay
// (0 = visible at once). Implementations must send the message with a
// time-to-live of −1 (never expires) so a fleet that is down for a week
// keeps its backlog. The queue counts visibility in whole seconds: the
// queue package rounds delay down, and its consumer holds a message that
// appears early until the envelope's Due, so handlers start on time, never
// early.
type Enqueuer interface {
	Enqueue(ctx context.Context, env queue.Envelope, delay time.Duration) error
}

// SetAsider keeps a malformed row that the mover removes from the table
// (normally on the poison queue): raw is the row's JSON, reason why it was
// refused.
type SetAsider interface {
	SetAside(ctx context.Context, raw string, reason string) error
}

// ErrFenced: a leader with a newer generation has taken over the schedule
// (the fence row says so); this mover must stop.
var ErrFenced = errors.New("fenced: a newer leader owns the schedule")

// Mover moves due rows from the ScheduledItems table to the work queue. It
// must run only while its instance holds the traffic cop's lease; the fence
// row makes a stale leader's writes fail rather than fork or lose rows.
type Mover struct {
	t       table.Table
	o       MoverOptions
	running atomic.Bool

	mu    sync.Mutex
	stats MoverStats
	fence map[string]string // shard → fence row ETag last seen
	// waiting are the runs known to be in the queue only to wait for
	// their due time (run id → due), for backpressure.
	waiting map[string]time.Time
	// peerDues are the other shards' early sends as last read (shard →
	// read), for backpressure (peersWaiting).
	peerDues map[string]peerRead
	// lastPass is when the previous completed pass of the current term
	// started (zero at the start of a term).
	lastPass time.Time
	// unsettled are the series' rows (shard/RowKey) a pass of this term
	// planned to move and did not (a send or confirmation refused, the
	// commit failed), with the since of the first such plan: until the
	// row is settled its occurrences are skipped only from then, so that
	// an occurrence the term saw due is sent, not taken for one missed
	// while nobody moved (sinceOf).
	unsettled map[string]time.Time
	lastTook  time.Duration // how long the last completed pass took (retireWindow)
	passRows  int           // rows the current (or last) pass read
	// retrySoon is how soon the rows the last pass failed to send because
	// storage was busy should be tried again (what the service asked for,
	// or a second) rather than a whole PollEvery later; 0: none failed so.
	retrySoon time.Duration
	// held counts the due rows the last pass held back, their runs'
	// records not written (MoverOptions.BeforeSendHold): a full pass that
	// held some waits for retrySoon rather than going again at once
	// against the storage that failed them.
	held int
	// holdEvery is how long a mover held back waits before it reads the
	// depth again: PollEvery, halved (to holdEveryMin) each time the
	// queue drained within one such wait of a pass filling it, doubled
	// back each read that finds it still deep (holdBack). The consumers
	// then drain faster than MaxDepth a poll, and backpressure is to bound
	// the queue's depth, not the fleet's throughput (issue 38: sim seed
	// 5577, max_depth 3, was held to 3 tasks every 5 s with its consumers
	// idle). 0: PollEvery.
	holdEvery time.Duration
	// holdReads counts the depth reads since the mover last began to
	// hold back that found the queue still deep.
	holdReads int
}

// NewMover returns a Mover of the schedule c reads and writes. Its
// Shards default to c's.
func NewMover(c *Client, o MoverOptions) (*Mover, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: schedule.NewMover: nil Client", ErrInvalidOptions)
	}
	if len(o.Shards) == 0 {
		o.Shards = c.Shards()
	}
	return newMover(c.t, o)
}

// newMover returns a Mover over t.
func newMover(t table.Table, o MoverOptions) (*Mover, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: schedule.NewMover: nil table", ErrInvalidOptions)
	}
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Early < 0 {
		o.Early = 0 // off
	}
	if o.SweepEvery < 0 {
		o.SweepEvery = 0 // off
	}
	o.Logger = o.Logger.With("component", "mover")
	return &Mover{t: t, o: o, fence: map[string]string{}, waiting: map[string]time.Time{}}, nil
}

// Stats returns a snapshot of the counters.
func (m *Mover) Stats() MoverStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

func (m *Mover) count(f func(s *MoverStats)) {
	m.mu.Lock()
	f(&m.stats)
	m.mu.Unlock()
}

// Run takes control of the schedule for the generation Options.Generation
// returns (writing it to every shard's fence row) and then moves due rows
// every PollEvery until ctx ends. It returns nil when ctx ends (making no
// storage call after that), ErrFenced when a newer leader has taken over,
// or an error if it cannot start. Storage errors during a pass are logged
// and counted; the pass is retried at the next poll. Run may be called
// again (for a later term) after it returns, but not concurrently.
func (m *Mover) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("schedule.Mover.Run: already running")
	}
	defer m.running.Store(false)
	gen := m.o.Generation()
	if gen < 1 {
		return fmt.Errorf("schedule.Mover.Run: generation %d: want the lease term's fencing generation (1 or more)", gen)
	}
	m.count(func(s *MoverStats) { s.Generation = gen })
	m.mu.Lock()
	m.lastPass = time.Time{}
	m.unsettled = nil
	m.mu.Unlock()
	log := m.o.Logger.With("generation", gen)
	for _, shard := range m.o.Shards {
		for {
			if ctx.Err() != nil {
				return nil
			}
			err := m.takeFence(ctx, shard, gen)
			if err == nil {
				break
			}
			if errors.Is(err, ErrFenced) {
				return m.fenced(log, err)
			}
			if ctx.Err() != nil {
				return nil
			}
			m.count(func(s *MoverStats) { s.Errors++ })
			log.Warn("cannot take the fence; retrying", "shard", shard, "err", err)
			if clock.Sleep(ctx, m.o.Clock, m.o.PollEvery) != nil {
				return nil
			}
		}
	}
	log.Info("in control", "shards", m.o.Shards)
	var lastSweep time.Time
	failures := 0 // passes failed in a row
	for {
		if ctx.Err() != nil {
			return nil
		}
		before := m.Stats()
		full, err := m.pass(ctx, gen)
		if err == nil && m.o.SweepEvery > 0 && ctx.Err() == nil {
			if now := m.o.Clock.Now(); lastSweep.IsZero() || now.Sub(lastSweep) >= m.o.SweepEvery {
				lastSweep = now
				err = m.sweep(ctx, gen)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrFenced) {
			return m.fenced(log, err)
		}
		wait := m.o.PollEvery
		if err != nil {
			// A busy account is not pressed harder: failed passes in a row
			// space the next ones out to twice the poll (or what the
			// service asks for); the first good pass restores the pace.
			failures++
			wait = retry.Wait(retry.Exp(m.o.PollEvery, 2*m.o.PollEvery, failures), err)
			m.count(func(s *MoverStats) { s.Errors++ })
			log.Warn("pass failed; retrying", "err", err, "retry_in", wait)
		} else {
			failures = 0
			m.mu.Lock()
			if soon := m.retrySoon; soon > 0 && soon < wait {
				wait = soon
			}
			if e := m.holdEvery; m.stats.HoldingBack && e > 0 && e < wait {
				wait = e
			}
			m.mu.Unlock()
		}
		m.mu.Lock()
		held := m.held
		m.mu.Unlock()
		after := m.Stats()
		if full && err == nil && held == 0 && progressed(before, after) {
			// (A full pass that moved nothing — its rows only wait, their
			// early-sent runs' confirmations refused until an earlier run
			// of the id ends — waits its poll: at once, the next would
			// find the same rows and ask the account again and again;
			// issue 38, sim seed 300106.)
			continue
		}
		if m.o.Pace != nil {
			m.mu.Lock()
			rows := m.passRows
			m.mu.Unlock()
			busy := err != nil || after.HoldingBack || progressed(before, after)
			if m.o.Pace(ctx, PassReport{Busy: busy, HeldBack: after.HoldingBack, Rows: rows, Err: err, Wait: wait}) != nil {
				return nil
			}
			continue
		}
		if clock.Sleep(ctx, m.o.Clock, wait) != nil {
			return nil
		}
	}
}

// progressed reports whether a pass between two readings of the stats
// sent, moved, retired, set aside or skipped a row.
func progressed(before, after MoverStats) bool {
	return after.Enqueued != before.Enqueued || after.Moved != before.Moved || after.SentEarly != before.SentEarly ||
		after.SetAside != before.SetAside || after.Skipped != before.Skipped
}

func (m *Mover) fenced(log *slog.Logger, err error) error {
	m.count(func(s *MoverStats) { s.Fenced++ })
	log.Warn("stopping", "err", err)
	return err
}
