package runs

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Mem is an in-memory Runs table with the same semantics as Store (it
// shares the decision logic), for tests and examples. It is safe for
// concurrent use.
type Mem struct {
	clk      clock.Clock
	mu       sync.Mutex
	rows     map[string]Run
	counters map[string]Counters
	fail     error
	seq      int64
}

// NewMem returns an empty Mem on clock c (nil means the real clock).
func NewMem(c clock.Clock) *Mem {
	return &Mem{clk: clock.OrReal(c), rows: map[string]Run{}, counters: map[string]Counters{}}
}

// FailWith makes every later call fail with err (nil heals it), to test
// that callers survive a Runs-table outage.
func (m *Mem) FailWith(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail = err
}

func (m *Mem) lock() error {
	m.mu.Lock()
	if m.fail != nil {
		err := m.fail
		m.mu.Unlock()
		return fmt.Errorf("runs (memory): %w", err)
	}
	return nil
}

func (m *Mem) put(r Run) {
	m.seq++
	r.Updated = m.clk.Now()
	r.etag = fmt.Sprint(m.seq)
	m.rows[r.ID] = r
}

func (m *Mem) cur(id string) *Run {
	r, ok := m.rows[id]
	if !ok {
		return nil
	}
	return &r
}

// Get implements Store.Get.
func (m *Mem) Get(_ context.Context, id string) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	if err := m.lock(); err != nil {
		return Run{}, err
	}
	defer m.mu.Unlock()
	r, ok := m.rows[id]
	if !ok {
		return Run{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return r, nil
}

// MarkScheduled implements Store.MarkScheduled.
func (m *Mem) MarkScheduled(_ context.Context, id string, meta Meta) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r := Run{ID: id, State: Scheduled}
	fillMeta(&r, meta)
	m.put(r)
	return nil
}

// MarkQueued implements Store.MarkQueued.
func (m *Mem) MarkQueued(_ context.Context, id string, meta Meta) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.put(applyQueued(m.cur(id), id, meta))
	return nil
}

// MarkRequeued implements Store.MarkRequeued.
func (m *Mem) MarkRequeued(_ context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	r := Run{ID: id}
	if c := m.cur(id); c != nil {
		r = *c
	}
	r.State, r.Attempts, r.ClaimUntil = Queued, 0, m.clk.Now()
	m.put(r)
	return nil
}

// Claim implements Store.Claim.
func (m *Mem) Claim(_ context.Context, id, worker string, attempt int, leaseUntil time.Time, meta Meta) (leasecrontype.Run, error) {
	if err := validateID(id); err != nil {
		return leasecrontype.Run{}, err
	}
	if err := m.lock(); err != nil {
		return leasecrontype.Run{}, err
	}
	defer m.mu.Unlock()
	next, verdict := decideClaim(m.cur(id), id, worker, attempt, leaseUntil, meta, m.clk.Now())
	m.put(next)
	return m.rows[id].Public(), verdict
}

// Extend implements Store.Extend.
func (m *Mem) Extend(_ context.Context, id, worker string, until time.Time) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if c := m.cur(id); c != nil {
		c.ClaimUntil, c.Worker = until, worker
		m.put(*c)
	}
	return nil
}

// Finish implements Store.Finish.
func (m *Mem) Finish(_ context.Context, id string, state State, err error, outputTail string) error {
	if verr := validateID(id); verr != nil {
		return verr
	}
	if !state.Valid() {
		return fmt.Errorf("%w: state %q", ErrInvalid, state)
	}
	if lerr := m.lock(); lerr != nil {
		return lerr
	}
	defer m.mu.Unlock()
	m.put(applyFinish(m.cur(id), id, state, err, outputTail, m.clk.Now()))
	return nil
}

// Cancel implements Store.Cancel.
func (m *Mem) Cancel(_ context.Context, id string) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	if err := m.lock(); err != nil {
		return Run{}, err
	}
	defer m.mu.Unlock()
	c := m.cur(id)
	if c == nil {
		return Run{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	next, err := applyCancel(*c, m.clk.Now())
	if err != nil {
		return next, err
	}
	m.put(next)
	return m.rows[id], nil
}

// List implements Store.List.
func (m *Mem) List(_ context.Context, f Filter) ([]Run, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []Run
	for _, r := range m.rows {
		if f.matches(r) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Updated.Equal(out[j].Updated) {
			return out[i].Updated.After(out[j].Updated)
		}
		return out[i].ID < out[j].ID
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// FlushCounters implements Store.FlushCounters.
func (m *Mem) FlushCounters(_ context.Context, c Counters) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	c.Instance = sanitizeKey(c.Instance)
	c.Instances = 1
	c.Updated = m.clk.Now()
	byType := make(map[string]Counts, len(c.ByType))
	for k, v := range c.ByType {
		byType[k] = v
	}
	c.ByType = byType
	m.counters[c.Instance] = c
	return nil
}

// ListCounters implements Store.ListCounters.
func (m *Mem) ListCounters(_ context.Context) ([]Counters, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([]Counters, 0, len(m.counters))
	for _, c := range m.counters {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, nil
}

// SumCounters implements Store.SumCounters.
func (m *Mem) SumCounters(ctx context.Context) (Counters, error) {
	rows, err := m.ListCounters(ctx)
	if err != nil {
		return Counters{}, err
	}
	return sumCounters(rows), nil
}
