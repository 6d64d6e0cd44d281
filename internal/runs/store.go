package runs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// DefaultTable is the default name of the Runs table.
const DefaultTable = "Runs"

// Default retentions.
const (
	// DefaultRetention is how long succeeded and cancelled runs are kept.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultRetentionFailed is how long failed and dead runs are kept.
	DefaultRetentionFailed = 30 * 24 * time.Hour
)

// Options configure a Store.
type Options struct {
	// Table is the table name. Default DefaultTable ("Runs").
	Table string
	// Retention is how long a succeeded or cancelled run is kept after it
	// finished. Default DefaultRetention (7 days).
	Retention time.Duration
	// RetentionFailed is how long a failed or dead run is kept after its
	// last attempt. Default DefaultRetentionFailed (30 days).
	RetentionFailed time.Duration
	// AuditRetention is how long audit entries are kept. Default
	// DefaultAuditRetention (90 days).
	AuditRetention time.Duration
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// Version is written on the counters rows this store flushes, so that
	// the fleet page shows what each instance runs. Empty writes none.
	Version string
	// Layout returns how records are spread over partitions now (a
	// sharded fleet's grows with its shard count; see Layout). It is
	// called for every operation, so it should be cheap (cached). Default:
	// DefaultLayout always.
	Layout func(ctx context.Context) Layout
	// Refresh, when set, is asked when a lookup found no record, before
	// a listing and before a blind insert: it may read the layout afresh
	// (Layout may answer from what it last read, or a default, until
	// asked), and reports whether the layout now reads partitions it did
	// not. A lookup that missed is then tried again. It returns an error
	// when the layout cannot be known (it was never read, and reading it
	// failed): the operation then fails rather than write where the
	// fleet may not look.
	Refresh func(ctx context.Context) (bool, error)
	// Prepare, when set, is called before the store first creates its
	// table (at its first operation): the process records the layout
	// there, so that no record is written before it is.
	Prepare func(ctx context.Context) error
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.Table = cmp.Or(o.Table, DefaultTable)
	o.Retention = cmp.Or(o.Retention, DefaultRetention)
	o.RetentionFailed = cmp.Or(o.RetentionFailed, DefaultRetentionFailed)
	o.AuditRetention = cmp.Or(o.AuditRetention, DefaultAuditRetention)
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	if err := storage.ValidateTableName(o.Table); err != nil {
		return fmt.Errorf("%w: runs.Options.Table: %w", ErrInvalid, err)
	}
	return opt.First(
		opt.AtLeast(ErrInvalid, "runs.Options.Retention", o.Retention, DefaultRetention, time.Minute),
		opt.AtLeast(ErrInvalid, "runs.Options.RetentionFailed", o.RetentionFailed, DefaultRetentionFailed, time.Minute),
		opt.AtLeast(ErrInvalid, "runs.Options.AuditRetention", o.AuditRetention, DefaultAuditRetention, 24*time.Hour),
	)
}

// fill settles o's defaults and validates it: the one place a Store's
// options are read.
func (o *Options) fill() error {
	*o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return err
	}
	o.Logger = o.Logger.With("component", "runs")
	return nil
}

// Store keeps run records in one Azure table (see the package doc for the
// layout). The table is created on first use. A Store is safe for
// concurrent use.
type Store struct {
	t     table.Table
	o     Options
	mu    ctxlock.Mutex // held across the table's creation
	ready bool
	// claims are the runs this Store claimed and has not finished: Finish
	// and Extend of such a run are one write.
	claims sync.Map // id → *Run (a copy per update: compared by pointer)
	// befores keeps, beside each claim, the run's attempt state as it was
	// before it (id → attemptState), so that Unclaim can put it back.
	befores sync.Map
	legacy  legacyProbe
	minute  minuteCounters
	// group combines concurrent claims, extensions and finishes into
	// shared transactions (nil: each goes alone).
	group *grouper
	// onCleaned, when set (tests), is told how many runs each of Clean's
	// transactions removed.
	onCleaned func(n int)
}

// New returns a Store over the table named in o. It does not contact the
// service.
func New(sc *storage.Clients, o Options) (*Store, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if sc == nil || sc.Table == nil {
		return nil, errors.New("runs: no table service client")
	}
	t, err := table.NewAzure(sc.Table, o.Table)
	if err != nil {
		return nil, err
	}
	return &Store{t: t, o: o, group: newGrouper(t)}, nil
}

// Memory is a Store over an in-memory table with the service's semantics, for
// tests and examples.
type Memory struct {
	*Store
	mt *table.Memory
}

// NewMemory returns an empty in-memory Store on clock c (nil means the real
// clock) with the default options.
func NewMemory(c clock.Clock) *Memory {
	o := Options{Clock: c}
	_ = o.fill()
	mt := table.NewMemory(o.Table, o.Clock)
	return &Memory{Store: &Store{t: mt, o: o, group: newGrouper(mt)}, mt: mt}
}

// Peer returns another Store over the same in-memory table: a second
// worker process's, with claims of its own.
func (m *Memory) Peer() *Memory {
	return &Memory{Store: &Store{t: m.mt, o: m.o, group: newGrouper(m.mt)}, mt: m.mt}
}

// FailWith makes every later call fail with err (nil heals it), to test
// that callers survive a Runs-table outage.
func (m *Memory) FailWith(err error) { m.mt.FailWith(err) }

// Requests returns how many table requests the Store has made.
func (m *Memory) Requests() int64 { return int64(m.mt.Requests()) }

// Table returns the table name.
func (s *Store) Table() string { return s.o.Table }

// Retention returns the retentions in force: of succeeded and cancelled
// runs, and of failed and dead ones.
func (s *Store) Retention() (succeeded, failed time.Duration) {
	return s.o.Retention, s.o.RetentionFailed
}

func (s *Store) now() time.Time { return s.o.Clock.Now().UTC() }

// submitRun applies one run's transaction of the hot path (a claim, an
// extension, a finish), sharing a request with others submitted at the
// same time (grouper).
func (s *Store) submitRun(ctx context.Context, ops []table.Op) error {
	if s.group == nil {
		return submit(ctx, s.t, ops)
	}
	return s.group.submit(ctx, ops)
}

func (s *Store) ensure(ctx context.Context) error {
	if err := s.mu.LockContext(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	if s.o.Prepare != nil {
		if err := s.o.Prepare(ctx); err != nil {
			return fmt.Errorf("runs: %w", err)
		}
	}
	if err := s.t.Create(ctx); err != nil {
		return fmt.Errorf("runs: %w", err)
	}
	s.ready = true
	// Look for records of the previous layout now, once, rather than on
	// the first lookup that misses.
	if _, err := s.hasLegacy(ctx); err != nil {
		s.o.Logger.Debug("could not look for records of the previous layout yet", "err", err)
	}
	return nil
}

// retention returns how long a run in state st is kept after it finished;
// 0 for states that do not expire (the run is still live).
func (s *Store) retention(st State) time.Duration {
	switch st {
	case Succeeded, Cancelled:
		return s.o.Retention
	case Failed, Dead:
		return s.o.RetentionFailed
	}
	return 0
}

// expired reports whether r has passed its retention at now.
func (s *Store) expired(r Run, now time.Time) bool {
	d := s.retention(r.State)
	return d > 0 && !r.Finished.IsZero() && r.Finished.Add(d).Before(now)
}

// Get returns the run with this id: an error wrapping ErrNotFound when
// there is none, or ErrExpired (which matches ErrNotFound too) when its
// record has passed its retention. It is one point read.
func (s *Store) Get(ctx context.Context, id string) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	r, ok, err := s.read(ctx, id)
	switch {
	case err != nil:
		return Run{}, err
	case !ok:
		return Run{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	case s.expired(r, s.now()):
		return Run{}, fmt.Errorf("%w: %s %s at %s and is kept for %s", ErrExpired, id, r.State,
			r.Finished.Format(time.RFC3339), s.retention(r.State))
	}
	return r, nil
}

// read returns the record of id (ok false when there is none), falling
// back to a record of the previous layout while the table holds any.
func (s *Store) read(ctx context.Context, id string) (Run, bool, error) {
	r, ok, _, err := s.readIn(ctx, id)
	return r, ok, err
}

// readIn is read that also returns the layout the record was looked for
// in. Pointer rows (pointTo) met on the way are not the record: when no
// record is in the id's homes, the pointers are followed from the one in
// the home of the largest count, and the returned Run's at names the
// partition they end in, where the first record of id must go. They can
// loop when counts are not multiples of each other (4, 8 and 12: an id's
// home under 12 may be its home under 4, where a writer under 4 puts its
// record, while that writer's pointer holds the home under 8, where the
// writer under 8 puts its own — a review of row 129's fix): the record
// then goes in place of the loop's first pointer by name, replaced on its
// ETag (the returned Run's ETag), so that every writer that meets the
// loop picks the same one and one of them wins it.
func (s *Store) readIn(ctx context.Context, id string) (Run, bool, Layout, error) {
	if err := s.ensure(ctx); err != nil {
		return Run{}, false, Layout{}, err
	}
	tried := map[string]bool{}
	ptr := map[string]Run{} // partition → its pointer
	var l Layout
	get := func(pk string) (Run, bool, error) {
		tried[pk] = true
		r, ok, err := s.pointRead(ctx, pk, runKey(id), id)
		if ok && r.pointer() {
			ptr[pk] = r
			return Run{}, false, nil
		}
		return r, ok, err
	}
	var miss Run // where the first record goes (at), and the pointer it replaces (ETag)
	for again := true; again; {
		l = s.layout(ctx)
		for _, pk := range l.homes(bucketKey(id)) {
			if tried[pk] {
				continue
			}
			if r, ok, err := get(pk); err != nil || ok {
				return r, ok, l, err
			}
		}
		miss = Run{}
		at := ""
		for i := len(l.Read) - 1; i >= 0 && at == ""; i-- {
			at = ptr[bucketIn(bucketKey(id), l.Read[i])].at
		}
		var path []string
		for at != "" {
			if i := slices.Index(path, at); i >= 0 {
				loop := path[i:]
				first := slices.Min(loop)
				miss = Run{at: first, ETag: ptr[first].ETag}
				break
			}
			path = append(path, at)
			if !tried[at] {
				if r, ok, err := get(at); err != nil || ok {
					return r, ok, l, err
				}
			}
			p, ok := ptr[at]
			if !ok {
				miss = Run{at: at}
				break
			}
			at = p.at
		}
		// A miss: the layout may have grown since it was last read.
		var err error
		if again, err = s.refresh(ctx); err != nil {
			return Run{}, false, l, fmt.Errorf("runs: read %s: %w", id, err)
		}
	}
	r, ok, err := s.readLegacy(ctx, id)
	if !ok {
		r.at, r.ETag = miss.at, miss.ETag
	}
	return r, ok, l, err
}

// pointRead reads the row rk of id's run in partition pk: ok false when
// there is none.
func (s *Store) pointRead(ctx context.Context, pk, rk, id string) (Run, bool, error) {
	rw, err := s.t.Get(ctx, pk, rk)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return Run{}, false, nil
	case err != nil:
		return Run{}, false, fmt.Errorf("runs: read %s: %w", id, err)
	}
	return decodeRun(rw), true, nil
}

// refresh is Options.Refresh (nothing to do without it).
func (s *Store) refresh(ctx context.Context) (bool, error) {
	if s.o.Refresh == nil {
		return false, nil
	}
	return s.o.Refresh(ctx)
}

// fullLayout is the layout a listing reads and a blind insert writes
// under: refreshed first (Refresh), so that a process that reads it
// lazily lists every partition, and an error when it cannot be known.
func (s *Store) fullLayout(ctx context.Context) (Layout, error) {
	if _, err := s.refresh(ctx); err != nil {
		return Layout{}, fmt.Errorf("runs: the run records' layout: %w", err)
	}
	return s.layout(ctx), nil
}

// layout returns the layout records are written and read under now.
func (s *Store) layout(ctx context.Context) Layout {
	if s.o.Layout == nil {
		return DefaultLayout
	}
	if l := s.o.Layout(ctx); l.valid() {
		return l
	}
	return DefaultLayout
}

// home returns the partition a write of id's run goes to: where its
// record was read (cur, when of this layout), the layout's home otherwise.
func (s *Store) home(ctx context.Context, cur *Run, id string) string {
	if cur != nil && cur.pk != "" && !cur.legacy {
		return cur.pk
	}
	return s.layout(ctx).home(bucketKey(id))
}

// Mark asks MarkQueued to record one run as queued.
type Mark struct {
	// ID is the run id.
	ID string
	// Meta describes the task (its Due keys the record).
	Meta Meta
}

// MarkQueued records runs as queued before their messages are sent, and
// reports which ones are: a delivery of a marked run is claimed in one
// write (leasecrontype.RunMeta.Queued). It writes one transaction per
// partition and up to 33 runs, so a mover's page of due tasks costs a few
// requests; runs it cannot insert (an earlier record of the id exists) are
// decided one by one. Failures are logged, not returned: marks are
// bookkeeping, and an unmarked run is still claimed correctly.
func (s *Store) MarkQueued(ctx context.Context, marks []Mark) []bool {
	marked, _ := s.MarkQueuedReport(ctx, marks)
	return marked
}

// MarkQueuedReport is MarkQueued that also reports, of each run, whether
// its mark's write failed with a fault that passes (storage.IsTransient):
// such a run may have no record at all, and sent and moved it would have
// neither its row nor a record until a worker claimed it — a traffic cop
// looking at the parents others wait for takes a task with neither for
// cancelled (issue 38, sweep seeds 68455, 68031). A run refused its mark
// by what its record says (another scheduling's run under way) has a
// record, and is not reported.
func (s *Store) MarkQueuedReport(ctx context.Context, marks []Mark) (marked, failed []bool) {
	marked, failed = make([]bool, len(marks)), make([]bool, len(marks))
	s.markQueued(ctx, marks, decideQueued, marked, failed)
	return marked, failed
}

// markedBy is markQueued with decide, reporting only which runs count as
// marked.
func (s *Store) markedBy(ctx context.Context, marks []Mark, decide decider) []bool {
	out := make([]bool, len(marks))
	s.markQueued(ctx, marks, decide, out, make([]bool, len(marks)))
	return out
}

// decider decides, for one run that could not be inserted with its batch,
// the record to write (when write) and whether the run counts as marked.
type decider func(cur *Run, id string, m Meta) (next Run, write, marked bool)

// markQueued is MarkQueued with decide for the runs decided one by one.
// A run may already have a record, whoever marks it: a worker may have
// claimed an early-sent run after checking its row, before the mover
// confirmed it, or before the mark of the send landed on the row at all —
// the sender died, and the next owner of the shard sends the row again as
// one never sent (issue 38, seed 5558). So a run whose id has several
// homes (the layout grew) is read first: a blind insert into its write
// home would not collide with its record in an older one, and would make
// two records of the run, the second message running again.
// It fills out (marked) and failed (the write failed with a fault that
// passes) for each mark.
func (s *Store) markQueued(ctx context.Context, marks []Mark, decide decider, out, failed []bool) {
	if len(marks) == 0 {
		return
	}
	all := func(err error) {
		s.o.Logger.Debug("runs not marked queued", "runs", len(marks), "err", err)
		for i := range failed {
			failed[i] = storage.IsTransient(err)
		}
	}
	if err := s.ensure(ctx); err != nil {
		all(err)
		return
	}
	l, err := s.fullLayout(ctx) // it inserts blind where only one home is read
	if err != nil {
		all(err)
		return
	}
	byBucket := map[string][]int{}
	for i, m := range marks {
		if err := validateID(m.ID); err != nil {
			s.o.Logger.Debug("run not marked queued", "task_id", m.ID, "err", err)
			continue
		}
		if len(l.homes(bucketKey(m.ID))) > 1 {
			byBucket[""] = append(byBucket[""], i) // decided one by one
			continue
		}
		b := l.home(bucketKey(m.ID))
		byBucket[b] = append(byBucket[b], i)
	}
	var g errgroup.Group
	for pk, idx := range byBucket {
		if pk == "" {
			g.Go(func() error {
				s.markEach(ctx, marks, idx, out, failed, decide)
				return nil
			})
			continue
		}
		g.Go(func() error {
			const perBatch = table.MaxOps / 3
			for len(idx) > 0 {
				n := min(len(idx), perBatch)
				s.markBatch(ctx, pk, marks, idx[:n], out, failed, decide)
				idx = idx[n:]
			}
			return nil
		})
	}
	_ = g.Wait()
}

func (s *Store) markBatch(ctx context.Context, pk string, marks []Mark, idx []int, out, failed []bool, decide decider) {
	var ops []table.Op
	for _, i := range idx {
		r := newRun(marks[i].ID, Queued)
		r.pk = pk
		fillMeta(&r, marks[i].Meta)
		ops = append(ops, transition(nil, r)...)
	}
	err := submit(ctx, s.t, ops)
	if err == nil {
		for _, i := range idx {
			out[i] = true
		}
		return
	}
	if !isConflict(err) && !errors.Is(err, storage.ErrBadRequest) {
		s.o.Logger.Debug("runs not marked queued", "runs", len(idx), "err", err)
		for _, i := range idx {
			failed[i] = storage.IsTransient(err)
		}
		return
	}
	s.markEach(ctx, marks, idx, out, failed, decide)
}

// markEach decides the runs of idx one by one (read, decide, write
// conditionally), a few at once: one at a time would make a slow or
// throttled account stall the mover's pass.
func (s *Store) markEach(ctx context.Context, marks []Mark, idx []int, out, failed []bool, decide decider) {
	var g errgroup.Group
	g.SetLimit(fallbackConcurrency)
	for _, i := range idx {
		g.Go(func() error {
			m := marks[i]
			var marked bool
			err := s.modify(ctx, m.ID, func(cur *Run) (Run, bool, error) {
				next, write, ok := decide(cur, m.ID, m.Meta)
				marked = ok
				return next, write, nil
			})
			if err != nil {
				s.o.Logger.Debug("run not marked queued", "task_id", m.ID, "err", err)
				marked = false
				failed[i] = storage.IsTransient(err)
			}
			out[i] = marked
			return nil
		})
	}
	_ = g.Wait()
}

// fallbackConcurrency bounds the runs written one by one at once when
// their batch could not be written whole.
const fallbackConcurrency = 8

// MarkRequeued puts a dead (or any) run back to queued with its attempts
// reset, for a dead letter moved back to the work queue; m describes the
// task as it will be delivered, and death names the death the dead letter
// records (queue.DeadLetter.Death). When it returns nil the run is marked
// queued under m.Due (so the delivery may set leasecrontype.RunMeta.Queued).
//
// The run remembers the deaths requeued (the latest MaxRequeued), so that a
// dead letter whose requeue a crash cut short is not requeued twice, and a
// run already live again (another dead letter of it was requeued) is not
// requeued for a second one:
// earlier is then true and nothing is written, and queued says whether the
// run is still queued as that requeue left it (the latest death requeued,
// not claimed since), that is, whether its message may still have to be
// sent. A record of another scheduling of the id (another due time: the id
// was scheduled again since this task died) is left alone, with an error
// wrapping leasecrontype.ErrScheduledAgain, as is a record with a
// scheduling of the id moved beside it (Behind), and so is a cancelled run
// (leasecrontype.ErrRunCancelled: it was cancelled while its last attempt
// ran, or after a requeue of this very death marked it queued). The
// cancel is answered before the requeued-before answers: a requeue whose
// mark committed with its answer lost, then a cancel, must not be taken
// for one done.
//
// diedWith is the token the dead message carried (its envelope's Token).
// A record still running under that same token is the run that died, its
// worker gone before it recorded the death: it is requeued, not taken
// for a run brought back by another dead letter — unless a worker's claim
// on it has not lapsed yet, which fails with ErrClaimedElsewhere (try
// again once it has).
func (s *Store) MarkRequeued(ctx context.Context, id string, m Meta, death, diedWith string) (earlier, queued bool, err error) {
	if err := validateID(id); err != nil {
		return false, false, err
	}
	now := s.now()
	err = s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		earlier, queued = false, false
		next := newRun(id, "")
		if cur != nil {
			if cur.State == Cancelled && !otherDue(cur, m) {
				// Cancelled — while its last attempt ran, which then
				// failed, or after a requeue of this very death marked
				// it queued (its answer lost, the dead letter left):
				// a cancelled task is not brought back, and the
				// requeue is refused rather than answered as done.
				return Run{}, false, fmt.Errorf("runs: requeue %s: %w", id, leasecrontype.ErrRunCancelled)
			}
			if i := slices.Index(cur.Requeued, death); death != "" && i >= 0 {
				earlier, queued = true, i == 0 && cur.State == Queued
				return Run{}, false, nil
			}
			if death != "" && slices.ContainsFunc(cur.Requeued, func(r string) bool { return sameDeath(r, death) }) {
				// Another dead letter of a death requeued: only left over
				// (the requeue's own message is the one that may still
				// have to be sent).
				earlier = true
				return Run{}, false, nil
			}
			if otherDue(cur, m) {
				// The id was scheduled again since this task died: the
				// record is the new task's.
				return Run{}, false, fmt.Errorf("runs: requeue %s due %s: %w (its record is of the task due %s, %s)", id,
					m.Due.UTC().Format(time.RFC3339), leasecrontype.ErrScheduledAgain, cur.Due.UTC().Format(time.RFC3339), cur.State)
			}
			if cur.BehindPending(now) {
				// The id was scheduled again while this task ran, and that
				// task was moved to the queue beside it: requeued, this
				// one would run beside the new one (issue 38, the
				// simulator's seed 3514).
				return Run{}, false, fmt.Errorf("runs: requeue %s due %s: %w (the task of the id due %s was moved to the queue beside it)", id,
					m.Due.UTC().Format(time.RFC3339), leasecrontype.ErrScheduledAgain, cur.Behind[0].UTC().Format(time.RFC3339))
			}
			// (Only a run this release requeued, or never requeued: one an
			// earlier release requeued keeps the task's own token, which a
			// duplicate's dead letter carries too. And not a failed one: a
			// message whose set-aside answer was lost comes back with its
			// attempts used up and records the death itself.)
			// (A run claimed after its message's row was checked carries no
			// token: its message's death is its own too.)
			ownDeath := (cur.Token == diedWith || cur.Token == "" && !isRequeueToken(diedWith)) &&
				cur.State == Running && (len(cur.Requeued) == 0 || isRequeueToken(cur.Token))
			switch {
			case ownDeath && cur.ClaimUntil.After(now):
				return Run{}, false, fmt.Errorf("runs: requeue %s: its last attempt is %w (by %s until %s); requeue it again once that has lapsed",
					id, ErrClaimedElsewhere, cur.Worker, cur.ClaimUntil.UTC().Format(time.RFC3339))
			case ownDeath:
				// The run the dead message carried, still recorded live:
				// its worker set the message aside and died before it
				// recorded the death (issue 38, the simulator's seed
				// 6742: taken for a run live again, the dead letter was
				// removed and the run said running for good).
			case cur.State == Queued, cur.State == Running, cur.State == Failed, cur.State == Snoozed:
				// Live again: another dead letter of this run (a duplicate
				// delivery that died too) was requeued already. This one
				// is only left over; requeued as well, the task would run
				// once more for each (issue 38, the simulator's seed 15: a
				// bulk requeue ran one task three times).
				earlier = true
				return Run{}, false, nil
			}
			next = *cur
		}
		fillMeta(&next, m)
		next.State, next.Attempts, next.ClaimUntil = Queued, 0, now
		if death != "" {
			next.Requeued = append([]string{death}, next.Requeued[:min(len(next.Requeued), MaxRequeued-1)]...)
		}
		return next, true, nil
	})
	return earlier, queued, err
}

// sameDeath reports whether two deaths of dead letters (queue.DeadLetter.
// Death: a message id and its dequeue count, or "p-" and a poison record
// id) are one: the same message, set aside at two deliveries because the
// answer to the first set-aside was lost, is one death, the second dead
// letter only left over. (A message of the run from before a requeue
// cannot die again: it does not take the run the requeue brought back,
// requeuedFor.)
func sameDeath(a, b string) bool {
	return a == b || !strings.HasPrefix(a, "p-") && messageOf(a) != "" && messageOf(a) == messageOf(b)
}

// messageOf is the message id of a death "{message id}-{dequeue count}"
// ("" when it has no count).
func messageOf(death string) string {
	i := strings.LastIndexByte(death, '-')
	if i <= 0 || i == len(death)-1 {
		return ""
	}
	for _, r := range death[i+1:] {
		if r < '0' || r > '9' {
			return ""
		}
	}
	return death[:i]
}

// MaxRequeued is how many of its requeued deaths a run remembers.
const MaxRequeued = 8

// claimToken is the state row a claim of a delivery described by m takes
// in one write, or "" when the delivery is not known to have one: a first
// attempt of a run the mover marked queued takes its queued row, a retry
// takes the failed row its previous attempt left.
func claimToken(id string, attempt int, m Meta) string {
	switch {
	case attempt <= 1 && m.Token != "":
		// Sent early: only the record confirmed with this token will do.
		return stateKey(Queued, id, m.Due, m.Token)
	case attempt <= 1 && m.Queued:
		return stateKey(Queued, id, m.Due, "")
	}
	// A retry reads the record first: the attempt is the record's count
	// (decideClaim), which a second message of the run does not know, and
	// taking the failed state row blind would run an attempt again.
	return ""
}

// Claim claims the run for worker's attempt until leaseUntil, so that of
// two workers claiming at once only one wins. It returns the record as
// written and, instead of claiming: ErrAlreadySucceeded (the delivery is a
// duplicate; it is counted in Duplicates), ErrCancelled, or
// ErrClaimedElsewhere (running on another worker whose claim has not
// lapsed; the returned record says until when). Any other error means the
// claim could not be read or written. ErrInvalid (an id the records cannot
// hold) and the service's refusals that trying again does not change
// (storage.IsTransient false: authentication, a bad request) will not
// pass, and the queue consumer runs the task anyway; anything else is a
// fault that passes, and it puts the message back to claim it later.
//
// A first attempt of a run marked queued and a first attempt of a run with
// no record are one transaction that is conditional on the state row it
// replaces (or on the record's absence); anything else (a retry: its
// attempt is the record's count), or a transaction that finds the run
// changed, reads the record and writes conditionally on its ETag.
func (s *Store) Claim(ctx context.Context, id, worker string, attempt int, leaseUntil time.Time, m Meta) (leasecrontype.Run, error) {
	if err := validateID(id); err != nil {
		return leasecrontype.Run{}, err
	}
	if err := s.ensure(ctx); err != nil {
		return leasecrontype.Run{}, err
	}
	now := s.now()
	l, err := s.fullLayout(ctx) // it inserts blind where only one home is read
	if err != nil {
		return leasecrontype.Run{}, err
	}
	next := newRun(id, Running)
	next.Worker, next.Attempts, next.Started, next.ClaimUntil = worker, attempt, now, leaseUntil
	next.pk = l.home(bucketKey(id))
	fillMeta(&next, m)
	var ops []table.Op
	if token := claimToken(id, attempt, m); token != "" {
		ops = claimOps(token, next)
	} else if attempt <= 1 && !s.legacyPresent() && len(l.homes(bucketKey(id))) == 1 {
		// Inserting fails if the run has a record — unless that record is
		// an old-layout row, or in a partition of a smaller count, which
		// only a read finds.
		ops = withSummary(transition(nil, next), next)
	}
	if ops != nil {
		err := s.submitRun(ctx, ops)
		if err == nil {
			// Before it: queued and not started (the mark it replaced), or
			// nothing, which a give-back writes as queued.
			s.remember(id, &next, unstarted)
			return next.Public(), nil
		}
		if !isConflict(err) {
			return leasecrontype.Run{}, fmt.Errorf("runs: claim %s: %w", id, err)
		}
	}
	var verdict error
	var before attemptState
	err = s.modifyAt(ctx, id, func(cur *Run, home string) (Run, bool, error) {
		var n Run
		n, verdict = decideClaim(cur, id, worker, attempt, leaseUntil, m, now)
		n.pk = home
		next = n
		// A new scheduling (the record was an earlier one's, ended — an
		// earlier release's record of any due time among them — or one
		// taken over) was queued and not started before the claim, not
		// what the earlier one came to (a review of row 82: a give-back
		// wrote the earlier run's success onto this one, which then never
		// ran).
		before = unstarted
		if cur != nil && !cur.State.Finished() && !otherDue(cur, m) {
			before = attemptStateOf(*cur)
		}
		// A duplicate is counted (best effort); other refusals write nothing.
		// (Not one of another scheduling that ended beside the record:
		// endedScheduling.)
		return n, verdict == nil || (cur != nil && errors.Is(verdict, ErrAlreadySucceeded) && !otherDue(cur, m)), nil
	})
	switch {
	case verdict != nil:
		if err != nil && !isConflict(err) && !errors.Is(err, ErrContention) {
			s.o.Logger.Warn("counting a duplicate delivery failed", "run", id, "err", err)
		}
		return next.Public(), verdict
	case err != nil:
		return leasecrontype.Run{}, err
	}
	s.remember(id, &next, before)
	return next.Public(), nil
}

// attemptState is what a claim writes of a run's state and attempt, and
// a give-back (Unclaim) puts back as it was.
type attemptState struct {
	state             State
	attempts          int
	worker            string
	started, claimEnd time.Time
}

// unstarted is the attempt state of a run queued and not started.
var unstarted = attemptState{state: Queued}

func attemptStateOf(r Run) attemptState {
	return attemptState{r.State, r.Attempts, r.Worker, r.Started, r.ClaimUntil}
}

// onto writes p over r's attempt state.
func (p attemptState) onto(r *Run) {
	r.State, r.Attempts, r.Worker, r.Started, r.ClaimUntil = p.state, p.attempts, p.worker, p.started, p.claimEnd
}

// remember keeps this Store's claim on id and the run's attempt state before it.
func (s *Store) remember(id string, claimed *Run, before attemptState) {
	s.claims.Store(id, claimed)
	s.befores.Store(id, before)
}

// Forget drops what this Store remembers of its claim on id without
// writing anything: the attempt ended with nothing to record (a snooze
// whose message could not be hidden for it), and a later end of another
// scheduling of the id that this process runs unclaimed must not be
// taken for this attempt's.
func (s *Store) Forget(id string) {
	s.claims.Delete(id)
	s.befores.Delete(id)
}

// Unclaim gives back the claim this Store made on id for a delivery put
// back without running after all (queue.Unclaimer: a pause found after
// the claim, or a rate window full when its start was moved to the
// claim's end): what the claim wrote of the run's progress — its state,
// attempts, worker, start and claim — is put back as it was before the
// claim (a first attempt queued and not started, a retry failed with its
// attempts, a crashed attempt's run as its worker left it), so that
// nothing reads the give-back as an attempt made (a disable, a cancel of
// the id's next scheduling, a claim's count of attempts) and another
// worker need not wait for the claim to lapse. Everything else stays as
// the record has it now: what the claim's scheduling wrote (its due time
// and token), and what others wrote meanwhile (a mover's notes, a
// counted duplicate). A claim made after its message's row was checked
// is not given back so (its message would be sent to the row again, which
// the mover may have removed: the consumer hands it back as at shutdown).
// A record that is no longer this claim's run is left alone, and nothing
// is written for an id this Store did not claim.
func (s *Store) Unclaim(ctx context.Context, id string) (err error) {
	v, ok := s.claims.LoadAndDelete(id)
	b, _ := s.befores.LoadAndDelete(id)
	if !ok {
		return nil
	}
	c := *v.(*Run)
	before, ok := b.(attemptState)
	if !ok {
		return nil // (a claim remembered without its state before: none here)
	}
	defer func() {
		if err != nil {
			s.remember(id, v.(*Run), before) // a retry is still this claim's
		}
	}()
	return s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		if cur == nil || cur.State != Running || cur.Worker != c.Worker || cur.Attempts != c.Attempts || otherDue(cur, Meta{Due: c.Due}) {
			return Run{}, false, nil
		}
		next := *cur
		before.onto(&next)
		return next, true, nil
	})
}

// Extend moves worker's claim on id to until while the handler runs. A run
// this Store claimed is extended only while the claim is still this
// worker's: when it no longer is (taken over after it lapsed, cancelled
// or ended since) the error wraps leasecrontype.ErrClaimLost. A run this
// Store did not claim has only its run row moved, and a missing record is
// not an error then.
func (s *Store) Extend(ctx context.Context, id, worker string, until time.Time) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	set := table.Props{"ClaimUntil": until.UTC(), "Worker": worker}
	pk := s.home(ctx, nil, id)
	var ops []table.Op
	c, claimed := s.updateClaim(id, func(c *Run) { c.ClaimUntil = until.UTC() })
	if claimed {
		pk = c.pk
		ops = append(ops, table.Op{Kind: table.Merge, PartitionKey: pk, RowKey: stateKey(Running, id, c.Due, c.Worker), Props: table.Props{"ClaimUntil": until.UTC()}})
	}
	ops = append([]table.Op{{Kind: table.Merge, PartitionKey: pk, RowKey: runKey(id), Props: set}}, ops...)
	// A missing running row means the claim is no longer this worker's (a
	// cancel, or another worker took it over): nothing is extended then.
	err := s.submitRun(ctx, ops)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrNotFound) && claimed && !errors.Is(err, storage.ErrTableNotFound):
		return fmt.Errorf("runs: extend claim on %s: %w", id, leasecrontype.ErrClaimLost)
	case errors.Is(err, storage.ErrNotFound):
		return nil
	}
	return fmt.Errorf("runs: extend claim on %s: %w", id, err)
}

// Progress records the running attempt's progress report p in one
// transaction: the run row, its time list row and its running state row,
// whose presence proves the claim is still worker's. Only a run this
// Store claimed is written (a claim that failed, or another worker's
// takeover, leaves the record alone); nothing is an error then, and
// neither is a missing record.
func (s *Store) Progress(ctx context.Context, id, worker string, p leasecrontype.RunProgress) error {
	if err := validateID(id); err != nil {
		return err
	}
	v, ok := s.claims.Load(id)
	if !ok || !p.Reported() {
		return nil
	}
	c := *v.(*Run)
	if c.Worker != worker {
		return nil
	}
	props := progressProps(p)
	ops := []table.Op{
		{Kind: table.Merge, PartitionKey: c.pk, RowKey: runKey(id), Props: props},
		{Kind: table.Merge, PartitionKey: c.pk, RowKey: listKey(id, c.Due), Props: props},
		{Kind: table.Merge, PartitionKey: c.pk, RowKey: stateRowKey(c), Props: props},
	}
	err := s.submitRun(ctx, ops)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("runs: progress of %s: %w", id, err)
	}
	if err == nil {
		// The attempt's end rewrites its rows from the claim: it keeps
		// this report.
		s.updateClaim(id, func(c *Run) { c.Progress = p })
	}
	return nil
}

// updateClaim applies f to the claim of id this Store holds, if it still
// holds one (an attempt's end removes it; f never brings it back), and
// returns the claim as updated.
func (s *Store) updateClaim(id string, f func(c *Run)) (Run, bool) {
	for {
		v, ok := s.claims.Load(id)
		if !ok {
			return Run{}, false
		}
		c := *v.(*Run)
		f(&c)
		if s.claims.CompareAndSwap(id, v, &c) {
			return c, true
		}
	}
}

// Finish records the end of an attempt: state (usually succeeded, failed or
// dead; queued for a delivery released at shutdown), the error (kept in
// LastError when not nil) and the output tail (kept when not empty). The
// claim is released. A cancelled run stays cancelled, and a run another
// worker has taken over under a live claim, a record that is already
// another scheduling's of the id (of another due time: the run was
// cancelled and the id scheduled again), a run that has succeeded or died
// since (another delivery's end) and one requeued since are left as they
// are (FinishClaimed tells which).
func (s *Store) Finish(ctx context.Context, id string, state State, err error, outputTail string) error {
	_, _, ferr := s.FinishClaimed(ctx, id, state, err, outputTail)
	return ferr
}

// FinishClaimed is Finish reporting whether the end was recorded and, when
// it was not, the record found instead (queue.ClaimedRunFinisher): a
// worker whose claim lapsed while its handler ran learns that another
// delivery has ended or requeued the run, or holds it, and settles its
// message as a duplicate instead of setting aside a dead letter of a run
// that did not die (a review of issue 38's row 90).
func (s *Store) FinishClaimed(ctx context.Context, id string, state State, err error, outputTail string) (found leasecrontype.Run, recorded bool, ferr error) {
	if verr := validateID(id); verr != nil {
		return found, false, verr
	}
	if !state.Valid() {
		return found, false, fmt.Errorf("%w: state %q", ErrInvalid, state)
	}
	set := []string{"State", "Finished", "ClaimUntil"}
	if err != nil {
		set = append(set, "LastError")
	}
	if outputTail != "" {
		set = append(set, "OutputTail")
	}
	return s.end(ctx, id, set, func(cur *Run, now time.Time) Run {
		return applyFinish(cur, id, state, err, outputTail, now)
	})
}

// FinishOwn records the end of a delivery that holds no claim on its run
// (queue.OwnRunFinisher: a message set aside with its attempts already
// used up, or by the crash guard, or run after a claim that could not be
// made) as Finish would, but only on the run m describes (ownRun): a
// record that is another scheduling's of the id, or its own run moved on
// since the message was sent (requeued, succeeded, confirmed under
// another message, running under a live claim), is left as it is and
// returned with recorded false (issue 38, seed 8247: a death written over
// a replacement's queued run, whose message was then acknowledged as a
// second message of a dead run). A hand-back (Queued) is not written over
// a run that has ended. Unlike Finish it leaves the run this Store
// claimed, if any, to the delivery that claimed it; a record that has
// expired is written anew with m's type and due time.
func (s *Store) FinishOwn(ctx context.Context, id string, m Meta, state State, err error, outputTail string) (found leasecrontype.Run, recorded bool, ferr error) {
	if verr := validateID(id); verr != nil {
		return found, false, verr
	}
	if !state.Valid() {
		return found, false, fmt.Errorf("%w: state %q", ErrInvalid, state)
	}
	if err := s.ensure(ctx); err != nil {
		return found, false, err
	}
	now := s.now()
	ferr = s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		recorded = false
		if cur != nil {
			found = cur.Run
			if !ownRun(cur, m, now) || state == Queued && cur.State.Finished() {
				return Run{}, false, nil
			}
		}
		next := applyFinish(cur, id, state, err, outputTail, now)
		if cur == nil {
			fillMeta(&next, Meta{Type: m.Type, Due: m.Due, Generation: m.Generation, Seq: m.Seq})
		}
		recorded = true
		return next, true, nil
	})
	return found, recorded && ferr == nil, ferr
}

// ownRun reports whether cur is still the run m describes as its message
// saw it, for an end recorded without a claim (FinishOwn): not another
// scheduling's (another due time); not one a requeue brought back since
// (the requeue's token is not m's), nor one confirmed under another
// message's token before it started; not one that succeeded (a used-up
// copy of a run that another delivery ran to success); not one running
// under a live claim. No record at all is m's (it has expired).
func ownRun(cur *Run, m Meta, now time.Time) bool {
	switch {
	case cur == nil:
		return true
	case otherDue(cur, m), requeuedFor(cur, m),
		isRequeueToken(cur.Token) && cur.Token != m.Token,
		m.Token != "" && notStarted(cur) && cur.Token != m.Token,
		cur.State == Succeeded,
		cur.State == Running && cur.ClaimUntil.After(now):
		return false
	}
	return true
}

// Snooze records that the running attempt of id snoozed until until
// (leasecrontype.Snooze): the run is snoozed, its attempts and last error
// stay, a cancelled run stays cancelled. Like Finish it is one write for a
// run this Store claimed, and leaves another scheduling's record alone.
func (s *Store) Snooze(ctx context.Context, id string, until time.Time, outputTail string) error {
	if err := validateID(id); err != nil {
		return err
	}
	set := []string{"State", "Finished", "ClaimUntil", "SnoozedUntil"}
	if outputTail != "" {
		set = append(set, "OutputTail")
	}
	_, _, err := s.end(ctx, id, set, func(cur *Run, now time.Time) Run {
		return applySnooze(cur, id, until, outputTail, now)
	})
	return err
}

// NoteWaiting records that the delivery described by m waits, without an
// attempt, until until (queue.WaitNoter: put back for its rate limit): the
// run shows snoozed with why as its output. Only the delivery's own run is
// noted — a record that has ended, is another scheduling's (another due
// time) or, for an early-sent message, does not carry its token is left
// as it is, and no record is created for a message sent early — noted
// reports false then, and the caller asks again later (issue 38,
// seed 1031: a stale early message's note turned the succeeded run of
// the rescheduled task into a snoozed one that never ended); a run running
// under a live claim is left to its worker. The note marks the run
// (Run.WaitNoted): snoozed for its rate, not by its handler.
func (s *Store) NoteWaiting(ctx context.Context, id string, m Meta, until time.Time, why string) (noted bool, err error) {
	if err := validateID(id); err != nil {
		return false, err
	}
	now := s.now()
	err = s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		noted = false
		switch {
		case cur == nil && m.Token != "",
			cur != nil && (cur.State.Finished() || otherDue(cur, m) || unconfirmed(cur, m) || requeuedFor(cur, m)),
			cur != nil && cur.State == Running && cur.ClaimUntil.After(now):
			// Not this delivery's run, or a run another delivery is
			// running under a live claim (a duplicate put back).
			return Run{}, false, nil
		}
		// After a failed attempt, or over a wait noted after one, the
		// next claim makes the next attempt (Run.WaitRetry).
		retry := cur != nil && (cur.State == Failed || cur.WaitingForRate() && cur.WaitRetry)
		next := applySnooze(cur, id, until, why, now)
		next.WaitNoted, next.WaitRetry = next.SnoozedUntil, retry
		fillMeta(&next, m)
		noted = true
		return next, true, nil
	})
	return noted && err == nil, err
}

// end records the end of an attempt as apply computes it; set names the
// properties apply changes. A run this Store claimed takes one transaction
// (finishOps); otherwise, or when that finds the run changed, the record is
// read and written conditionally — unless it is now another worker's live
// claim, another scheduling's record, or, for a claimed attempt, a run
// that has succeeded or died or been requeued since, which are left alone
// and returned as found with recorded false.
func (s *Store) end(ctx context.Context, id string, set []string, apply func(cur *Run, now time.Time) Run) (found leasecrontype.Run, recorded bool, err error) {
	if err := s.ensure(ctx); err != nil {
		return found, false, err
	}
	now := s.now()
	endAt := now
	v, claimed := s.claims.LoadAndDelete(id)
	b, _ := s.befores.LoadAndDelete(id)
	var c Run
	if claimed {
		c = *v.(*Run)
		if !c.endAt.IsZero() {
			endAt = c.endAt // a retry: see Run.endAt
		}
		defer func() {
			if err != nil {
				if b != nil {
					s.befores.LoadOrStore(id, b)
				}
				// Not recorded, or not known to be: the caller's retry is
				// still this claim's end, and keeps its guards (a review
				// of issue 38's row 78: retried without it, the end was
				// written over whatever record the id had by then) and
				// its end time.
				kept := c
				kept.endAt = endAt
				s.claims.LoadOrStore(id, &kept)
			}
		}()
		ferr := s.submitRun(ctx, finishOps(c, apply(&c, endAt), set))
		if ferr == nil {
			return found, true, nil
		}
		if !isConflict(ferr) {
			return found, false, fmt.Errorf("runs: finish %s: %w", id, ferr)
		}
	}
	err = s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		recorded, found = false, leasecrontype.Run{}
		if cur != nil {
			found = cur.Run
		}
		over := claimed && cur != nil && cur.State == Running && cur.Worker != c.Worker && cur.ClaimUntil.After(now)
		if over && apply(&c, endAt).State != Succeeded {
			s.o.Logger.Warn("another worker has taken the run over; not recording this attempt's end over its claim",
				"run", id, "worker", cur.Worker)
			return Run{}, false, nil
		}
		// (A success is recorded over the other worker's claim: the
		// task's work is done, and that attempt's end will find it so.
		// Left unrecorded, the other attempt may be cut short, and the
		// crash guard set a task that succeeded aside as dead, cancelling
		// its --after children: issue 38, sweep seed 68031.)
		if claimed && cur != nil && otherDue(cur, Meta{Due: c.Due}) {
			// The id was scheduled again (after a cancel of this run) and
			// the record is the new task's: this attempt's end is not its
			// (issue 38, seed 1123: it snoozed the new task's record).
			s.o.Logger.Warn("the run record is now another scheduling's; not recording this attempt's end over it",
				"run", id, "due", c.Due, "record_due", cur.Due)
			return Run{}, false, nil
		}
		if claimed && cur != nil && (cur.State == Succeeded || cur.State == Dead) {
			// Another delivery, after this worker's claim lapsed, ran the
			// run to its end and settled the message with it (set aside
			// as dead): the first end stands. Written over it, a failed
			// attempt's end left the run failed for good (issue 38, seed
			// 11184: a late "failed" over a death). Or it is this end's
			// own write, committed with its answer lost: recorded.
			if sameClaim(cur, &c) && stored(cur.Finished).Equal(stored(endAt)) && apply(&c, endAt).State == cur.State {
				// This end's own: its transaction above, or a try before
				// it, committed although its answer was lost (the SDK's
				// retry then met the running row gone).
				recorded = true
				return Run{}, false, nil
			}
			s.o.Logger.Warn("another delivery has ended the run; not recording this attempt's end over it",
				"run", id, "state", cur.State, "worker", cur.Worker)
			return Run{}, false, nil
		}
		if claimed && cur != nil && isRequeueToken(cur.Token) && cur.Token != c.Token {
			// Requeued since (its death, by another delivery, set aside
			// and brought back): this attempt's end would end the
			// requeue's run before it began, or hide the death it
			// requeued (README: an end is not written over a run that
			// has since been requeued).
			s.o.Logger.Warn("the run was requeued since this worker's claim lapsed; not recording this attempt's end over it",
				"run", id, "state", cur.State)
			return Run{}, false, nil
		}
		if cur == nil && claimed {
			r := newRun(id, "")
			r.Type, r.Due, r.Generation, r.Series, r.Attempts, r.Worker, r.Started = c.Type, c.Due, c.Generation, c.Series, c.Attempts, c.Worker, c.Started
			cur = &r
		}
		next := apply(cur, endAt)
		if over {
			next.Worker, next.Attempts, next.Started = c.Worker, c.Attempts, c.Started
		}
		if claimed && next.State == Queued && (cur.State != Running || cur.Worker != c.Worker) {
			// A hand-back at shutdown of a run that has moved on since this
			// worker's claim lapsed (another delivery ran it to its end, or
			// holds it): queued written over it would bring back a run that
			// ended, or hide a death from its dead letter's requeue.
			s.o.Logger.Warn("the run moved on since this worker's claim lapsed; not recording the hand-back over it",
				"run", id, "state", cur.State, "worker", cur.Worker)
			return Run{}, false, nil
		}
		recorded = true
		return next, true, nil
	})
	return found, recorded && err == nil, err
}

// sameClaim reports whether cur, a record read back, carries the claim c
// (its worker, attempt and start, as the table keeps it). An end written
// without a claim over c's lapsed claim (FinishOwn) carries it too: end
// also compares the end time.
func sameClaim(cur, c *Run) bool {
	return cur.Worker == c.Worker && cur.Attempts == c.Attempts && stored(cur.Started).Equal(stored(c.Started))
}

// CancelOf is Cancel for a bulk cancel, which acts on the task it listed
// (m: its type and due time when listed) and on no other task of its id
// (issue 38, seed 7023: a walk that listed a task whose row was then moved
// marked the run of the id's next task, of another type, cancelled). The
// record is cancelled when it is of m's type (the listed task, or a later
// one the operation's filter selects as well; its due time may have moved
// since the listing), and then only itself: the schedulings moved beside
// it (Run.Behind), whose types the record does not know, are left but
// the one of m's due time. A record of another type is left as it is,
// except that a scheduling of m's due time moved beside it is cancelled;
// without one it is ErrNotFound. A finished record of m's type is
// ErrAlreadyFinished, or success when it is cancelled already. With exact,
// a record of m's type is cancelled only when it is of m's due time too
// (the filter selected more than the type, or the id's pending row is
// another task's by now, which may have been sent early already).
func (s *Store) CancelOf(ctx context.Context, id string, m Meta, exact bool) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	if m.Type == "" || m.Due.IsZero() {
		return Run{}, fmt.Errorf("%w: cancel %s of a listed task: its type and due time are both needed", ErrInvalid, id)
	}
	due := stored(m.Due)
	now := s.now()
	var out Run
	err := s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		if cur == nil {
			return Run{}, false, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		next := *cur
		behind := next.cancelBehindDue(due)
		switch {
		case cur.Type != m.Type || exact && !cur.OfDue(due) || cur.State.Finished() && behind:
			if !behind {
				return Run{}, false, fmt.Errorf("%w: %s of type %s due %s (the record is of another task of the id, of type %s)", ErrNotFound, id, m.Type, due.Format(time.RFC3339Nano), cur.Type)
			}
		case cur.State == Cancelled:
			out = *cur
			return Run{}, false, nil
		case cur.State.Finished():
			out = *cur
			return Run{}, false, fmt.Errorf("%w: run %s is %s", ErrAlreadyFinished, id, cur.State)
		default:
			next.State, next.Finished = Cancelled, now
		}
		out = next
		return next, true, nil
	})
	return out, err
}

// CancelPendingOf is CancelPending for a bulk cancel, which acts on what
// its filter selects only: an unfinished record of another scheduling of
// the id is cancelled only when it is of m's type, and the schedulings
// noted beside it are left but m's own; m's due time is added to the ones
// cancelled, so that the removed row's sender cannot confirm its message
// on the record.
func (s *Store) CancelPendingOf(ctx context.Context, id string, m Meta) (Run, error) {
	return s.cancelPending(ctx, id, m, true)
}

// Cancel marks the run cancelled unless it has already finished, returning
// the record, and cancels the schedulings of the id moved to the queue
// beside it and not started (Run.Behind) whatever became of its own run.
// Unknown ids fail with ErrNotFound, runs that succeeded or died with
// ErrAlreadyFinished (and the record) unless the cancel reached such a
// scheduling: then it succeeds, and the record returned keeps its own
// run's state. A run already cancelled
// is returned as it is, without an error: a cancel is idempotent, so one
// whose write committed but whose answer was lost succeeds when it is
// tried again (issue 38, seed 1111: the retry answered "already
// finished: cancelled").
func (s *Store) Cancel(ctx context.Context, id string) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	var out Run
	err := s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		if cur == nil {
			return Run{}, false, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		if cur.State.Finished() {
			// Schedulings of the id moved beside this record and not
			// started are cancelled whatever became of its own run; a
			// run that succeeded or died is still reported so, unless
			// the cancel reached one of them.
			next := *cur
			if next.cancelBehind() {
				out = next
				return next, true, nil
			}
			if cur.State == Cancelled {
				out = *cur
				return Run{}, false, nil
			}
		}
		next, err := applyCancel(*cur, s.now())
		out = next
		return next, err == nil, err
	})
	return out, err
}

// CancelPending records that a task was cancelled before the mover sent it
// (its pending row was removed): a cancelled record replaces any earlier,
// finished run of the id, and a run that has not finished — the mover sent
// the task meanwhile, or an earlier scheduling of the id is still queued
// or running — is cancelled, and returned (ID "" when there was none), so
// that the caller tells that run's batch and the tasks waiting for it
// (issue 38, seed 4055: a batch member queued behind a pause was
// cancelled with the id's pending task, and its batch never heard).
// A finished run of the task itself (m's due time) is left as it is, with
// ErrAlreadyFinished, unless it is cancelled already (a cancel tried again
// after its answer was lost succeeds).
func (s *Store) CancelPending(ctx context.Context, id string, m Meta) (Run, error) {
	return s.cancelPending(ctx, id, m, false)
}

// cancelPending is CancelPending, and with only CancelPendingOf.
func (s *Store) cancelPending(ctx context.Context, id string, m Meta, only bool) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	now := s.now()
	var unfinished Run
	err := s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		unfinished = Run{}
		if only && cur != nil && !cur.State.Finished() && !m.Due.IsZero() {
			// A record still under way: another scheduling's of another
			// type is left running, one of m's type (m's own, sent
			// early, or another the filter selects too) is cancelled;
			// of the schedulings noted beside it, whose types the record
			// does not know, only m's own due time is. A withdrawn due
			// time's placeholder of another type is cancelled too: it
			// stands for no message that may still run, and the mark
			// that would take it over was m's, whose row is gone (issue
			// 38, row 169, seed 91811: a limited task sent early, replaced
			// as slow, then bulk-cancelled by type, stayed queued).
			due := stored(m.Due)
			next := *cur
			if !next.cancelBehindDue(due) && otherDue(cur, m) {
				next.CancelledDue = next.CancelledDue.with(due)
			}
			if cur.Type == m.Type || !otherDue(cur, m) || withdrawnPlaceholder(cur, m) {
				next.State, next.Finished = Cancelled, now
				unfinished = next
			}
			return next, true, nil
		}
		if cur != nil && !cur.State.Finished() {
			next, err := applyCancel(*cur, now)
			if err == nil {
				unfinished = next
				if !m.Due.IsZero() && otherDue(&next, m) {
					// The row removed was another scheduling's, whose
					// client may still be sending it: its confirmation
					// must not take this cancelled record over (issue 38,
					// sweep seed 8669: a replace due now, cancelled as it
					// was sent, ran).
					next.CancelledDue = next.CancelledDue.with(stored(m.Due))
				}
			}
			return next, err == nil, nil
		}
		if cur != nil && !m.Due.IsZero() && !cur.Due.IsZero() && !otherDue(cur, m) {
			// (A record without a due time, an earlier release's, is
			// another scheduling's: this one is cancelled beside it.)
			if cur.State == Cancelled {
				return Run{}, false, nil // cancelled already: as idempotent as Cancel
			}
			// This very task has ended already (its row only waited for
			// the mover): its end stands.
			return Run{}, false, fmt.Errorf("%w: run %s is %s", ErrAlreadyFinished, id, cur.State)
		}
		if cur != nil && cur.State.Finished() && otherDue(cur, m) && cur.CancelledDue.has(m.Due) {
			// m's cancel is recorded already, kept by the record of a
			// later scheduling that took it over and has ended: the id
			// was scheduled again after m's row went, and that run's end
			// stands (issue 38, sim seed 162586: a cancel whose delete
			// answered late marked again, and a replace that had run and
			// succeeded in between read as cancelled). A late message of
			// m's due time is refused by CancelledDue.
			return Run{}, false, nil
		}
		next := successor(cur, id, Cancelled)
		next.Finished = now
		fillMeta(&next, m)
		next.started(m.Due)
		next.cancelBehind()
		return next, true, nil
	})
	if err != nil {
		return Run{}, err
	}
	return unfinished, nil
}

// DropBehind takes due off the schedulings of id noted beside another
// run (Run.Behind) — its message was acknowledged without running, as
// superseded — so that what waits for the id is not held for a run that
// will never start (issue 38, seed 4499). When the record still describes
// that scheduling, unstarted and with its confirmation taken back, it is
// marked withdrawn instead, so that another scheduling's claim taking the
// record over does not note it beside itself (row 57: the acknowledgement
// came before the take-over). It writes only when the record holds due
// in either way.
func (s *Store) DropBehind(ctx context.Context, id string, due time.Time) error {
	if err := validateID(id); err != nil {
		return err
	}
	due = stored(due)
	return s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		switch {
		case cur == nil:
			return Run{}, false, nil
		case cur.Behind.has(due):
			next := *cur
			next.Behind = next.Behind.without(due)
			next.ConfirmedBehind = next.ConfirmedBehind.without(due)
			return next, true, nil
		case cur.Due.Equal(due) && cur.Token == "" && notStarted(cur) && !cur.Withdrawn.has(due):
			next := *cur
			next.Withdrawn = next.Withdrawn.with(due)
			return next, true, nil
		}
		return Run{}, false, nil
	})
}

// CancelUnstarted records the run id cancelled unless it has started: a
// run no attempt has claimed is cancelled, and without a record a
// cancelled one is written (m describes it), which a later mark or claim
// cannot undo; a run under way or ended is left as it is. For the
// occurrences a disable stops while a mover may be moving them.
func (s *Store) CancelUnstarted(ctx context.Context, id string, m Meta) error {
	if err := validateID(id); err != nil {
		return err
	}
	now := s.now()
	return s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		switch {
		case cur == nil:
			next := newRun(id, Cancelled)
			next.Finished = now
			fillMeta(&next, m)
			return next, true, nil
		case notStarted(cur):
			next, err := applyCancel(*cur, now)
			return next, err == nil, nil
		}
		return Run{}, false, nil
	})
}

// modify runs a read-decide-write loop on one run: read its record (nil
// when missing), let f compute the next record and whether to write it,
// then write the transition conditionally on the ETag read, retrying when
// another writer was quicker. An error of f is returned as is, with
// nothing written.
func (s *Store) modify(ctx context.Context, id string, f func(cur *Run) (next Run, write bool, err error)) error {
	return s.modifyAt(ctx, id, func(cur *Run, _ string) (Run, bool, error) { return f(cur) })
}

// modifyAt is modify whose f is also told where the record is written
// (a next without a partition goes there): where it was read, or, when
// it was not found, where the pointers read lead, else the home of the
// layout the miss was in (readIn). A first record is guarded by pointers
// first (pointTo) unless it follows them.
func (s *Store) modifyAt(ctx context.Context, id string, f func(cur *Run, home string) (next Run, write bool, err error)) error {
	for try := 0; try < maxTries; try++ {
		cur, ok, l, err := s.readIn(ctx, id)
		if err != nil {
			return err
		}
		var curp *Run
		home := l.home(bucketKey(id)) // where the miss was, not where a later layout says
		switch {
		case ok:
			curp = &cur
			if !cur.legacy && cur.pk != "" {
				home = cur.pk
			}
		case cur.at != "":
			home = cur.at // a pointer's: the id's first record goes there
		}
		next, write, err := f(curp, home)
		if err != nil || !write {
			return err
		}
		if curp == nil && !slices.Equal(s.layout(ctx).homes(bucketKey(id)), l.homes(bucketKey(id))) {
			// The layout changed since the miss: another process may have
			// written the record under either count meanwhile. Read again.
			continue
		}
		if next.pk == "" {
			next.pk = home
		}
		if curp == nil && cur.at == "" {
			if err := s.pointTo(ctx, l, id, next.pk); isConflict(err) {
				continue // a record or a pointer came first: read again
			} else if err != nil {
				return fmt.Errorf("runs: write %s: %w", id, err)
			}
		}
		if curp != nil && curp.legacy {
			err = s.convert(ctx, cur, next)
		} else {
			ops := withSummary(transition(curp, next), next)
			if curp == nil && cur.ETag != "" {
				// In place of a pointer of a loop (readIn).
				ops[0].Kind, ops[0].IfMatch = table.Replace, cur.ETag
			}
			err = submit(ctx, s.t, ops)
		}
		if err == nil || !isConflict(err) {
			if err != nil {
				return fmt.Errorf("runs: write %s: %w", id, err)
			}
			return nil
		}
	}
	return fmt.Errorf("runs: %s: %w", id, ErrContention)
}

// pointTo guards the first record of id, about to be written in pk,
// against a first record written at the same moment in the id's home
// under a larger count of the layout: while the count grows, processes
// that still write under the smaller one (the larger read but not yet
// written under, or not yet learned to be written under) and processes
// that write under the larger one each read both homes, found nothing and
// write their own, and two inserts into two partitions never collide
// (issue 38, sweep seed 68612: a run recorded twice, its status queued for
// good, a requeue of it dead bringing nothing back). So a process first
// inserts, in the id's home under each count larger than the one it
// writes under, a pointer row: the run row's key, no state, and the
// partition its record goes to. A first record written there meets the
// pointer and reads again; a pointer that meets a record reads again and
// finds it; a process that reads pointers writes the id's first record
// where they lead (readIn), so that of two writers of it one meets the
// other's row. A process writing under the largest count writes nothing
// more: it costs a request more only while a count is read and not yet
// written under, and for a process that has not yet learned a new count.
// Pointers stay (a few bytes each, only of ids first recorded in a count
// change); a later first record of the id follows them.
func (s *Store) pointTo(ctx context.Context, l Layout, id, pk string) error {
	key := bucketKey(id)
	for _, c := range l.Read {
		if w := bucketIn(key, c); c > l.Write && w != pk {
			err := submit(ctx, s.t, []table.Op{{Kind: table.Insert, PartitionKey: w, RowKey: runKey(id), Props: table.Props{"Id": id, propAt: pk}}})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// propAt is the property of a pointer row that names the partition of
// its id's record (pointTo).
const propAt = "At"

// isConflict reports whether a conditional write lost a race: a row
// changed, appeared or vanished since it was read.
func isConflict(err error) bool {
	return errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrAlreadyExists) ||
		errors.Is(err, storage.ErrNotFound)
}

// submit applies ops to t as one transaction (the new ETags are not needed
// here).
func submit(ctx context.Context, t table.Table, ops []table.Op) error {
	_, err := t.Submit(ctx, ops)
	return err
}
