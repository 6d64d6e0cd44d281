package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
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

// Defaults of MoverOptions.
const (
	DefaultPollEvery   = 5 * time.Second
	DefaultConcurrency = 32
	DefaultMaxPerPass  = 1000
	DefaultSweepEvery  = time.Minute
	// sweepTop is how many rows one sweep query reads per key range.
	sweepTop = 100
)

// MoverOptions configures a Mover. Zero values mean the documented defaults.
type MoverOptions struct {
	// Shards are the partitions to move from. Default ["00"]; use the
	// Client's Shards.
	Shards []string
	// Generation returns the fencing generation of the current lease term
	// (≥ 1). Required. Run reads it once, when it starts.
	Generation func() int64
	// PollEvery is the pause between passes (config mover.poll_every).
	// Default 5 s.
	PollEvery time.Duration
	// Early is the enqueue-early window: rows due within it are enqueued
	// now with an initial invisibility of the time left, so they appear on
	// time rather than up to a poll late. 0 means PollEvery; a negative
	// value disables early enqueueing.
	Early time.Duration
	// Concurrency bounds concurrent enqueues. Default 32.
	Concurrency int
	// MaxPerPass bounds the rows one pass reads per shard. Default 1000; a
	// full pass is followed by another at once.
	MaxPerPass int
	// Enqueuer sends envelopes to the work queue. Required.
	Enqueuer Enqueuer
	// SetAside keeps malformed rows before they are deleted. Required.
	SetAside SetAsider
	// Depth returns the work queue's (approximate) depth, for
	// backpressure. Required when MaxDepth > 0.
	Depth func(ctx context.Context) (int, error)
	// MaxDepth pauses moving while the queue holds at least this many
	// messages (0 = never pause). A pass moves at most MaxDepth − depth
	// rows, so the queue does not grow past MaxDepth through the mover.
	MaxDepth int
	// ResumeBelow resumes moving once the depth is below it. Default
	// MaxDepth/2 (at least 1).
	ResumeBelow int
	// OnMoved, when set, is called after each committed batch with the
	// envelopes whose rows it removed (e.g. to mark runs "queued"). It runs
	// on the mover's goroutine and should be quick.
	OnMoved func(ctx context.Context, envs []queue.Envelope)
	// PayloadStore takes payloads of directly inserted rows that are too
	// large for a queue message. Nil: such rows are set aside.
	PayloadStore payload.Store
	// InlineLimit is the largest payload (as a JSON string) sent inline.
	// Default 24 KiB, at most 32 KiB.
	InlineLimit int
	// SweepEvery is how often the mover looks for rows whose RowKey can
	// never come due (malformed keys sorting after the tick range) and sets
	// them aside. Default 1 minute; negative disables.
	SweepEvery time.Duration
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives progress and warnings. Default slog.Default().
	Logger *slog.Logger
}

func (o *MoverOptions) fill() error {
	if len(o.Shards) == 0 {
		o.Shards = []string{DefaultShard}
	}
	for _, s := range o.Shards {
		if err := validateShard(s); err != nil {
			return fmt.Errorf("schedule.MoverOptions: %w", err)
		}
	}
	if o.Generation == nil {
		return errors.New("schedule.MoverOptions.Generation is nil: the mover needs the lease term's fencing generation")
	}
	if o.PollEvery == 0 {
		o.PollEvery = DefaultPollEvery
	}
	if o.PollEvery < 10*time.Millisecond {
		return fmt.Errorf("schedule.MoverOptions.PollEvery %s: want at least 10ms (0 means %s)", o.PollEvery, DefaultPollEvery)
	}
	if o.Early == 0 {
		o.Early = o.PollEvery
	}
	if o.Early < 0 {
		o.Early = 0
	}
	if o.Early > 24*time.Hour {
		return fmt.Errorf("schedule.MoverOptions.Early %s: want at most 24h (0 means PollEvery, negative disables)", o.Early)
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Concurrency < 0 || o.Concurrency > 1024 {
		return fmt.Errorf("schedule.MoverOptions.Concurrency %d: want 1..1024 (0 means %d)", o.Concurrency, DefaultConcurrency)
	}
	if o.MaxPerPass == 0 {
		o.MaxPerPass = DefaultMaxPerPass
	}
	if o.MaxPerPass < 0 || o.MaxPerPass > 100_000 {
		return fmt.Errorf("schedule.MoverOptions.MaxPerPass %d: want 1..100000 (0 means %d)", o.MaxPerPass, DefaultMaxPerPass)
	}
	if o.Enqueuer == nil {
		return errors.New("schedule.MoverOptions.Enqueuer is nil")
	}
	if o.SetAside == nil {
		return errors.New("schedule.MoverOptions.SetAside is nil: malformed rows must go somewhere")
	}
	if o.MaxDepth < 0 {
		return fmt.Errorf("schedule.MoverOptions.MaxDepth %d: want 0 (no backpressure) or more", o.MaxDepth)
	}
	if o.MaxDepth > 0 {
		if o.Depth == nil {
			return fmt.Errorf("schedule.MoverOptions.MaxDepth is %d but Depth is nil", o.MaxDepth)
		}
		if o.ResumeBelow == 0 {
			o.ResumeBelow = max(1, o.MaxDepth/2)
		}
		if o.ResumeBelow < 1 || o.ResumeBelow > o.MaxDepth {
			return fmt.Errorf("schedule.MoverOptions.ResumeBelow %d: want 1..MaxDepth (%d)", o.ResumeBelow, o.MaxDepth)
		}
	}
	if o.InlineLimit == 0 {
		o.InlineLimit = DefaultInlineLimit
	}
	if o.InlineLimit < 0 || o.InlineLimit > MaxInlineLimit {
		return fmt.Errorf("schedule.MoverOptions.InlineLimit %d: want 1..%d bytes (0 means %d)", o.InlineLimit, MaxInlineLimit, DefaultInlineLimit)
	}
	if o.SweepEvery == 0 {
		o.SweepEvery = DefaultSweepEvery
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
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

// Mover moves due rows from the ScheduledItems table to the work queue. It
// must run only while its instance holds the traffic cop's lease; the fence
// row makes a stale leader's writes fail rather than fork or lose rows.
type Mover struct {
	t       Table
	o       MoverOptions
	running atomic.Bool

	mu    sync.Mutex
	stats MoverStats
	fence map[string]string // shard → fence row ETag last seen
}

// NewMover returns a Mover over t.
func NewMover(t Table, o MoverOptions) (*Mover, error) {
	if t == nil {
		return nil, errors.New("schedule.NewMover: nil Table")
	}
	if err := o.fill(); err != nil {
		return nil, err
	}
	return &Mover{t: t, o: o, fence: map[string]string{}}, nil
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
			log.Warn("leasecron mover: cannot take the fence; retrying", "shard", shard, "err", err)
			if clock.Sleep(ctx, m.o.Clock, m.o.PollEvery) != nil {
				return nil
			}
		}
	}
	log.Info("leasecron mover: in control", "shards", m.o.Shards)
	var lastSweep time.Time
	for {
		if ctx.Err() != nil {
			return nil
		}
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
		if err != nil {
			m.count(func(s *MoverStats) { s.Errors++ })
			log.Warn("leasecron mover: pass failed; retrying at the next poll", "err", err)
		}
		if full && err == nil {
			continue
		}
		if clock.Sleep(ctx, m.o.Clock, m.o.PollEvery) != nil {
			return nil
		}
	}
}

func (m *Mover) fenced(log *slog.Logger, err error) error {
	m.count(func(s *MoverStats) { s.Fenced++ })
	log.Warn("leasecron mover: stopping", "err", err)
	return err
}

// takeFence writes gen into shard's fence row unless a newer generation is
// already there.
func (m *Mover) takeFence(ctx context.Context, shard string, gen int64) error {
	for range retries {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, err := m.t.Get(ctx, shard, FenceRowKey)
		var op Op
		switch {
		case errors.Is(err, storage.ErrNotFound):
			op = Op{Kind: OpInsert, PartitionKey: shard, RowKey: FenceRowKey, Props: map[string]any{PropGeneration: gen}}
		case err != nil:
			return fmt.Errorf("read fence of shard %s: %w", shard, err)
		default:
			g, _, perr := propInt(e.Props, PropGeneration)
			if perr != nil {
				return fmt.Errorf("fence of shard %s: %w", shard, perr)
			}
			if g > gen {
				return fmt.Errorf("%w: shard %s fence holds generation %d, ours is %d", ErrFenced, shard, g, gen)
			}
			op = Op{Kind: OpMerge, PartitionKey: shard, RowKey: FenceRowKey, Props: map[string]any{PropGeneration: gen}, IfMatch: e.ETag}
		}
		err = m.t.Submit(ctx, []Op{op})
		if err == nil {
			return m.refreshFence(ctx, shard, gen)
		}
		if !conflict(err) {
			return fmt.Errorf("write fence of shard %s: %w", shard, err)
		}
	}
	return fmt.Errorf("write fence of shard %s: still conflicting after %d attempts", shard, retries)
}

// refreshFence re-reads shard's fence row after a write: it must still hold
// gen, and its new ETag conditions the next batch.
func (m *Mover) refreshFence(ctx context.Context, shard string, gen int64) error {
	e, err := m.t.Get(ctx, shard, FenceRowKey)
	if err != nil {
		return fmt.Errorf("read fence of shard %s: %w", shard, err)
	}
	g, _, err := propInt(e.Props, PropGeneration)
	if err != nil {
		return fmt.Errorf("fence of shard %s: %w", shard, err)
	}
	if g != gen {
		return fmt.Errorf("%w: shard %s fence holds generation %d, ours is %d", ErrFenced, shard, g, gen)
	}
	m.mu.Lock()
	m.fence[shard] = e.ETag
	m.mu.Unlock()
	return nil
}

// fenceOp is the conditional fence update every batch carries.
func (m *Mover) fenceOp(shard string, gen int64) Op {
	m.mu.Lock()
	etag := m.fence[shard]
	m.mu.Unlock()
	return Op{Kind: OpMerge, PartitionKey: shard, RowKey: FenceRowKey, Props: map[string]any{PropGeneration: gen}, IfMatch: etag}
}

// checkFence re-reads shard's fence row after a failed batch. It reports
// ErrFenced when another generation has written it. When the row holds our
// generation under a new ETag (a batch of ours committed although its
// response was lost) it adopts that ETag and reports changed, so the caller
// retries.
func (m *Mover) checkFence(ctx context.Context, shard string, gen int64) (changed bool, err error) {
	e, err := m.t.Get(ctx, shard, FenceRowKey)
	if err != nil {
		return false, fmt.Errorf("read fence of shard %s: %w", shard, err)
	}
	g, _, _ := propInt(e.Props, PropGeneration)
	if g != gen {
		return false, fmt.Errorf("%w: shard %s fence holds generation %d, ours is %d", ErrFenced, shard, g, gen)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.ETag != m.fence[shard] {
		m.fence[shard] = e.ETag
		return true, nil
	}
	return false, nil
}

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

// room is how many rows a pass may still move under backpressure: rows < 0
// means no limit; known reports that it comes from a depth probe (not the
// one-batch allowance of an unknown depth).
type room struct {
	rows  int
	known bool
}

// holdBack applies backpressure with hysteresis and says how many rows the
// pass may move.
func (m *Mover) holdBack(ctx context.Context) (bool, room, error) {
	if m.o.MaxDepth <= 0 {
		return false, room{rows: -1}, nil
	}
	depth, err := m.o.Depth(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		// Keep the previous state; a failed depth probe is not a reason to
		// flood the queue or to stop moving: move at most one batch.
		m.stats.Errors++
		m.o.Logger.Warn("leasecron mover: queue depth unknown", "err", err)
		return m.stats.HoldingBack, room{rows: MaxOps}, nil
	}
	was := m.stats.HoldingBack
	switch {
	case !was && depth >= m.o.MaxDepth:
		m.stats.HoldingBack = true
		m.o.Logger.Info("leasecron mover: holding back; the queue is deep", "depth", depth, "max_depth", m.o.MaxDepth)
	case was && depth < m.o.ResumeBelow:
		m.stats.HoldingBack = false
		m.o.Logger.Info("leasecron mover: resuming", "depth", depth, "resume_below", m.o.ResumeBelow)
	}
	return m.stats.HoldingBack, room{rows: max(0, m.o.MaxDepth-depth), known: true}, nil
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

// rowOps are the table operations that retire one row.
func rowOps(shard string, p *plan, withNext, withIndex bool) []Op {
	var ops []Op
	recurring := p.nextRK != "" && p.bad == ""
	if recurring && withNext {
		next := p.next
		if p.indexed && !withIndex {
			// The index row is gone: the series continues unindexed (found
			// by scanning) instead of failing every move.
			next = copyProps(p.next)
			delete(next, PropIndexed)
		}
		ops = append(ops, Op{Kind: OpInsert, PartitionKey: shard, RowKey: p.nextRK, Props: next})
	}
	ops = append(ops, Op{Kind: OpDelete, PartitionKey: shard, RowKey: p.e.RowKey, IfMatch: p.e.ETag})
	if p.indexed && withIndex && p.keyOK {
		if recurring {
			ops = append(ops, Op{Kind: OpMerge, PartitionKey: shard, RowKey: indexKey(p.id), Props: map[string]any{PropItem: p.nextRK}})
		} else {
			ops = append(ops, Op{Kind: OpDelete, PartitionKey: shard, RowKey: indexKey(p.id)})
		}
	}
	return ops
}

// commit removes the ready rows in fenced transactions of at most MaxOps
// operations, in RowKey order.
func (m *Mover) commit(ctx context.Context, shard string, gen int64, ready []*plan) error {
	for i := 0; i < len(ready); {
		var ops []Op
		keys := map[string]bool{}
		j := i
		for ; j < len(ready); j++ {
			rops := rowOps(shard, ready[j], true, true)
			clash := false
			for _, op := range rops {
				clash = clash || keys[op.RowKey]
			}
			if len(ops)+len(rops) > MaxOps-1 || (clash && j > i) {
				break
			}
			for _, op := range rops {
				keys[op.RowKey] = true
			}
			ops = append(ops, rops...)
		}
		batch := ready[i:j]
		i = j
		var err error
		for attempt := 0; ; attempt++ {
			if ctx.Err() != nil {
				return nil
			}
			err = m.t.Submit(ctx, append(ops, m.fenceOp(shard, gen)))
			if err == nil || ctx.Err() != nil {
				break
			}
			changed, ferr := m.checkFence(ctx, shard, gen)
			if ferr != nil {
				return ferr
			}
			if !changed || attempt > 0 {
				break
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			m.committed(ctx, batch)
			if ctx.Err() != nil {
				return nil
			}
			if err := m.refreshFence(ctx, shard, gen); err != nil {
				return err
			}
			continue
		}
		if !conflict(err) && !errors.Is(err, storage.ErrBadRequest) {
			return fmt.Errorf("remove moved rows: %w", err)
		}
		// Some row changed since it was read (or an index row or the next
		// occurrence is in the way): settle the batch row by row.
		for _, p := range batch {
			if err := m.commitOne(ctx, shard, gen, p); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
		}
	}
	return nil
}

// commitOne retires one row in its own fenced transaction, working around
// an index row that is gone or a next occurrence that already exists. A row
// that changed since it was read is left alone (its run was enqueued: a
// possible duplicate, never a loss).
func (m *Mover) commitOne(ctx context.Context, shard string, gen int64, p *plan) error {
	withNext, withIndex := true, true
	for range 5 {
		if ctx.Err() != nil {
			return nil
		}
		err := m.t.Submit(ctx, append(rowOps(shard, p, withNext, withIndex), m.fenceOp(shard, gen)))
		if err == nil {
			m.committed(ctx, []*plan{p})
			if ctx.Err() != nil {
				return nil
			}
			return m.refreshFence(ctx, shard, gen)
		}
		if ctx.Err() != nil {
			return nil
		}
		changed, ferr := m.checkFence(ctx, shard, gen)
		if ferr != nil {
			return ferr
		}
		switch {
		case changed:
			continue // our fence ETag was stale; try again with the new one
		case errors.Is(err, storage.ErrAlreadyExists):
			withNext = false // the next occurrence is already there
			continue
		case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrPreconditionFailed), errors.Is(err, storage.ErrBadRequest):
			cur, gerr := m.t.Get(ctx, shard, p.e.RowKey)
			if errors.Is(gerr, storage.ErrNotFound) || (gerr == nil && cur.ETag != p.e.ETag) {
				m.count(func(s *MoverStats) { s.Skipped++ })
				m.o.Logger.Info("leasecron mover: row changed while it was moved; left as it is (its run may be enqueued twice)", "row", p.e.RowKey)
				return nil
			}
			if gerr != nil {
				return fmt.Errorf("re-read row %s: %w", p.e.RowKey, gerr)
			}
			if !withIndex {
				return fmt.Errorf("remove moved row %s: %w", p.e.RowKey, err)
			}
			withIndex = false // the row is unchanged: its index row is missing
			continue
		default:
			return fmt.Errorf("remove moved row %s: %w", p.e.RowKey, err)
		}
	}
	return fmt.Errorf("remove moved row %s: gave up", p.e.RowKey)
}

// committed records a committed batch and reports it to OnMoved.
func (m *Mover) committed(ctx context.Context, batch []*plan) {
	var envs []queue.Envelope
	var moved, aside int64
	for _, p := range batch {
		if p.bad != "" {
			aside++
			continue
		}
		moved++
		envs = append(envs, p.env)
	}
	m.count(func(s *MoverStats) { s.Batches++; s.Moved += moved; s.SetAside += aside })
	if m.o.OnMoved != nil && len(envs) > 0 {
		m.o.OnMoved(ctx, envs)
	}
}

// sweepRanges are the RowKey ranges no due query reaches: keys starting
// with '1'..'9' (ticks beyond year 3169, or malformed), letters other than
// the index rows, and anything after the fence row.
var sweepRanges = [][2]string{{"1", IndexPrefix}, {"ie", FenceRowKey}, {FenceRowKey + " ", ""}}

// sweep sets aside malformed rows that would never come due.
func (m *Mover) sweep(ctx context.Context, gen int64) error {
	for _, shard := range m.o.Shards {
		var plans []*plan
		for _, r := range sweepRanges {
			if ctx.Err() != nil {
				return nil
			}
			p, err := m.t.Query(ctx, Query{Partition: shard, From: r[0], To: r[1], Top: sweepTop})
			if err != nil {
				return fmt.Errorf("sweep shard %s: %w", shard, err)
			}
			for _, e := range p.Entities {
				if r, err := parseRow(e); err != nil {
					_, _, kerr := ParseRowKey(e.RowKey)
					plans = append(plans, &plan{e: e, bad: err.Error(), indexed: r.indexed, id: r.item.ID, keyOK: kerr == nil})
				}
			}
		}
		if len(plans) > 0 {
			if err := m.move(ctx, shard, gen, m.o.Clock.Now(), plans); err != nil {
				return err
			}
		}
	}
	return nil
}
