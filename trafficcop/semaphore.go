package trafficcop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/randid"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Semaphore limits concurrency across instances to N: it is N lease slots,
// each a leased blob {Prefix}/{name}/{i} (i = 0..N−1). A holder keeps its
// slot by renewing the lease in the background; a holder that crashes loses
// its slot when the lease expires, so the count cannot drift.
type Semaphore struct {
	name    string
	slots   []Lock
	o       SemaphoreOptions
	log     *slog.Logger
	observe func(event)
}

// NewSemaphore returns the semaphore name with n slots, the blobs
// {Prefix}/{name}/{i} of the container c (a container client the caller
// built with the Azure SDK, as for NewBlobLock). name is 1–200 letters,
// digits, '.', '_' or '-'; n is 1..MaxSlots. It does not contact the
// service: the container and slot blobs are created on first use.
func NewSemaphore(c *container.Client, name string, n int, opts SemaphoreOptions) (*Semaphore, error) {
	o := opts.WithDefaults()
	if err := validateSemaphore(name, n, o); err != nil {
		return nil, err
	}
	locks := make([]Lock, n)
	for i := range locks {
		l, err := NewBlobLock(c, o.Prefix+"/"+name+"/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		locks[i] = l
	}
	return newSemaphore(name, locks, o), nil
}

// NewSemaphoreWithLocks returns a semaphore whose slots are locks (such as
// MemLocks in tests, or any other Lock implementation). opts.Prefix is
// ignored.
func NewSemaphoreWithLocks(name string, locks []Lock, opts SemaphoreOptions) (*Semaphore, error) {
	o := opts.WithDefaults()
	if err := validateSemaphore(name, len(locks), o); err != nil {
		return nil, err
	}
	for i, l := range locks {
		if l == nil {
			return nil, fmt.Errorf("%w: lock %d is nil", ErrInvalidOptions, i)
		}
	}
	return newSemaphore(name, locks, o), nil
}

func validateSemaphore(name string, n int, o SemaphoreOptions) error {
	if !slotNameRE.MatchString(name) {
		return invalid("name", strconv.Quote(name), "1-200 letters, digits, '.', '_' or '-'")
	}
	if n < 1 || n > MaxSlots {
		return invalid("n", n, fmt.Sprintf("from 1 to %d", MaxSlots))
	}
	return o.validate()
}

func newSemaphore(name string, locks []Lock, o SemaphoreOptions) *Semaphore {
	return &Semaphore{name: name, slots: locks, o: o, observe: func(event) {},
		log: o.Logger.With("semaphore", name)}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// TryAcquire tries the slots once each, starting at a random one so that
// contenders spread out, and returns the first it leases. It returns an
// error wrapping ErrNoSlot when every slot is held, and another error when
// some slot could not be tried (storage trouble).
//
// The slot stays held, renewed in the background, until Release or until
// it is lost; its Context carries ctx's values but not its cancellation.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Slot, error) {
	n := len(s.slots)
	first := rand.IntN(n)
	var errs []error
	for j := range n {
		i := (first + j) % n
		slot, err := s.tryOne(ctx, i)
		if err == nil {
			return slot, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("semaphore %q: %w", s.name, context.Cause(ctx))
		}
		if !errors.Is(err, leasecrontype.ErrLeaseConflict) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w: all %d slots of semaphore %q are held", ErrNoSlot, n, s.name)
	}
	return nil, fmt.Errorf("semaphore %q: no slot acquired: %w", s.name, errors.Join(errs...))
}

func (s *Semaphore) call(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, s.o.CallTimeout)
	defer cancel()
	return f(cctx)
}

func (s *Semaphore) tryOne(ctx context.Context, i int) (*Slot, error) {
	lock := s.slots[i]
	id := randid.UUID()
	acquire := func(cctx context.Context) error { return lock.Acquire(cctx, id, s.o.LeaseDuration) }
	start := s.o.Clock.Now()
	err := s.call(ctx, acquire)
	if errors.Is(err, leasecrontype.ErrNotFound) { // first use of this slot
		if err := s.call(ctx, lock.Ensure); err != nil {
			return nil, err
		}
		start = s.o.Clock.Now()
		err = s.call(ctx, acquire)
	}
	if err != nil {
		return nil, err
	}
	k := newKeeper(lock, id, start, s.o.LeaseTiming, s.o.Clock, s.log.With("slot", i), s.observe)
	return newSlot(ctx, s, i, k), nil
}

// Held counts the slots whose lease is in force now (for stats). Slots
// never used count as free.
func (s *Semaphore) Held(ctx context.Context) (int, error) {
	held := 0
	for _, l := range s.slots {
		st, err := l.Get(ctx)
		if errors.Is(err, leasecrontype.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("semaphore %q: %w", s.name, err)
		}
		if st.State == LeaseLeased || st.State == LeaseBreaking {
			held++
		}
	}
	return held, nil
}

// Slot is one held slot of a Semaphore.
type Slot struct {
	sem      *Semaphore
	index    int
	k        *keeper
	ctx      context.Context
	cancel   context.CancelCauseFunc
	stopKeep context.CancelFunc
	kept     chan struct{} // closed when the renewal loop has ended

	once       sync.Once
	releaseErr error
}

func newSlot(parent context.Context, sem *Semaphore, i int, k *keeper) *Slot {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	keepCtx, stopKeep := context.WithCancel(context.Background())
	sl := &Slot{sem: sem, index: i, k: k, ctx: ctx, cancel: cancel, stopKeep: stopKeep, kept: make(chan struct{})}
	go func() {
		defer close(sl.kept)
		if err := k.run(keepCtx, func(err error) { cancel(err) }); err != nil {
			sem.log.Warn("lost semaphore slot", "slot", i, "err", err)
		}
	}()
	return sl
}

// Index returns the slot's number, 0..N−1.
func (sl *Slot) Index() int { return sl.index }

// Context is cancelled when the slot is lost (cause wrapping ErrLeaseLost)
// or released (cause ErrSlotReleased). Work limited by the semaphore should
// run under it.
func (sl *Slot) Context() context.Context { return sl.ctx }

// Held reports whether the slot is still held: not released, not lost, and
// its local deadline not passed.
func (sl *Slot) Held() bool { return sl.ctx.Err() == nil && sl.k.valid() }

// Release stops renewing and releases the lease so that another contender
// can take the slot at once. It is idempotent; later calls return the first
// call's result. A slot that was already lost releases without error.
func (sl *Slot) Release(ctx context.Context) error {
	sl.once.Do(func() { sl.releaseErr = sl.stop(ctx, true) })
	return sl.releaseErr
}

func (sl *Slot) stop(ctx context.Context, release bool) error {
	lost := sl.ctx.Err() != nil
	sl.cancel(ErrSlotReleased)
	sl.stopKeep()
	<-sl.kept
	sl.k.end()
	if !release {
		return nil
	}
	err := sl.k.release(ctx)
	if err != nil && lost && errors.Is(err, leasecrontype.ErrLeaseConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("semaphore %q: release slot %d: %w", sl.sem.name, sl.index, err)
	}
	return nil
}
