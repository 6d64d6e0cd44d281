package trafficcop

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Op names a Lock operation, for MemoryLock's fault injection and counters.
type Op string

// Lock operations.
const (
	OpEnsure      Op = "ensure"
	OpAcquire     Op = "acquire"
	OpRenew       Op = "renew"
	OpRelease     Op = "release"
	OpGet         Op = "get"
	OpSetMetadata Op = "setmetadata"
)

// MemoryLock is an in-memory Lock for tests and examples. It follows the Blob
// service's lease rules (one lease ID at a time, expiry by the clock it is
// given, renewal of an expired lease that nobody else took, metadata writes
// needing the current lease ID and ETag) and reports refusals with the same
// sentinels as the blob implementation (leasecrontype.ErrLeaseConflict,
// ErrPreconditionFailed, ErrNotFound).
//
// A MemoryLock starts out missing, like a blob that was never created; Ensure
// creates it. Faults can be injected with SetFault.
type MemoryLock struct {
	name string
	clk  leasecrontype.Clock

	mu       sync.Mutex
	exists   bool
	leaseID  string // "" when no lease (never taken or released)
	duration time.Duration
	expires  time.Time
	md       map[string]string
	etag     int64
	fault    func(context.Context, Op) error
	counts   map[Op]int
}

// NewMemoryLock returns a missing MemoryLock named name whose leases expire by
// clk (nil: the real clock).
func NewMemoryLock(name string, clk leasecrontype.Clock) *MemoryLock {
	return &MemoryLock{name: name, clk: clock.OrReal(clk), md: map[string]string{}, counts: map[Op]int{}}
}

// SetFault installs f, called before every operation with the operation's
// context. A non-nil result is returned instead of performing the
// operation; f may block (to simulate a hung call) and should then honour
// ctx. Nil removes the fault.
func (m *MemoryLock) SetFault(f func(ctx context.Context, op Op) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fault = f
}

// Count reports how many times op was called (including faulted calls).
func (m *MemoryLock) Count(op Op) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[op]
}

// LeaseID returns the ID of the lease in force, or "" if none is.
func (m *MemoryLock) LeaseID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stateLocked() != LeaseLeased {
		return ""
	}
	return m.leaseID
}

// ExpireLease makes the lease in force expire now, as Azurite does to
// every lease when it restarts: anyone may acquire it, and its holder, who
// is not told, may still renew it as long as nobody has.
func (m *MemoryLock) ExpireLease() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stateLocked() == LeaseLeased {
		m.expires = m.clk.Now()
	}
}

// String names the lock in logs.
func (m *MemoryLock) String() string { return "memlock/" + m.name }

func (m *MemoryLock) begin(ctx context.Context, op Op) error {
	m.mu.Lock()
	m.counts[op]++
	f := m.fault
	m.mu.Unlock()
	if f != nil {
		if err := f(ctx, op); err != nil {
			return fmt.Errorf("%s %s: %w", op, m, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, m, err)
	}
	m.mu.Lock()
	if !m.exists && op != OpEnsure {
		m.mu.Unlock()
		return fmt.Errorf("%s %s: %w", op, m, leasecrontype.ErrNotFound)
	}
	return nil // m.mu held
}

func (m *MemoryLock) stateLocked() LeaseState {
	switch {
	case m.leaseID == "":
		return LeaseAvailable
	case m.clk.Now().Before(m.expires):
		return LeaseLeased
	default:
		return LeaseExpired
	}
}

func (m *MemoryLock) conflict(op Op, why string) error {
	return fmt.Errorf("%s %s: %w: %s", op, m, leasecrontype.ErrLeaseConflict, why)
}

// Ensure implements Lock.
func (m *MemoryLock) Ensure(ctx context.Context) error {
	if err := m.begin(ctx, OpEnsure); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if !m.exists {
		m.exists = true
		m.etag++
	}
	return nil
}

// Acquire implements Lock.
func (m *MemoryLock) Acquire(ctx context.Context, leaseID string, d time.Duration) error {
	if err := m.begin(ctx, OpAcquire); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if m.stateLocked() == LeaseLeased && m.leaseID != leaseID {
		return m.conflict(OpAcquire, "there is already a lease present")
	}
	m.leaseID, m.duration, m.expires = leaseID, d, m.clk.Now().Add(d)
	return nil
}

// Renew implements Lock.
func (m *MemoryLock) Renew(ctx context.Context, leaseID string) error {
	if err := m.begin(ctx, OpRenew); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if m.leaseID == "" || m.leaseID != leaseID {
		return m.conflict(OpRenew, "lease ID does not match the lease on the blob")
	}
	m.expires = m.clk.Now().Add(m.duration)
	return nil
}

// Release implements Lock.
func (m *MemoryLock) Release(ctx context.Context, leaseID string) error {
	if err := m.begin(ctx, OpRelease); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if m.leaseID == "" || m.leaseID != leaseID {
		return m.conflict(OpRelease, "lease ID does not match the lease on the blob")
	}
	m.leaseID, m.expires = "", time.Time{}
	return nil
}

// Get implements Lock.
func (m *MemoryLock) Get(ctx context.Context) (LockState, error) {
	if err := m.begin(ctx, OpGet); err != nil {
		return LockState{}, err
	}
	defer m.mu.Unlock()
	st := m.stateLocked()
	return LockState{State: st, Locked: st == LeaseLeased, Metadata: maps.Clone(m.md), ETag: m.etagLocked()}, nil
}

func (m *MemoryLock) etagLocked() string { return `"0x` + strconv.FormatInt(m.etag, 16) + `"` }

// SetMetadata implements Lock.
func (m *MemoryLock) SetMetadata(ctx context.Context, leaseID, ifMatch string, md map[string]string) error {
	if err := m.begin(ctx, OpSetMetadata); err != nil {
		return err
	}
	defer m.mu.Unlock()
	switch st := m.stateLocked(); {
	case st == LeaseLeased && leaseID != m.leaseID:
		return m.conflict(OpSetMetadata, "lease ID does not match the lease on the blob")
	case st != LeaseLeased && leaseID != "":
		return m.conflict(OpSetMetadata, "there is currently no lease on the blob")
	}
	if ifMatch != "" && ifMatch != m.etagLocked() {
		return fmt.Errorf("%s %s: %w: ETag %s, blob has %s", OpSetMetadata, m, leasecrontype.ErrPreconditionFailed, ifMatch, m.etagLocked())
	}
	m.md = maps.Clone(md)
	if m.md == nil {
		m.md = map[string]string{}
	}
	m.etag++
	return nil
}
