package blackboard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Board edits and reads the blackboard: the operator's side (the CLI's
// `blackboard add/remove/run-now` and `blackboard`). It never claims keys.
type Board struct {
	store Store
	name  string
}

// NewBoard returns the Board over the table (default DefaultTable) of the
// account behind svc, a table service client the caller built with its own
// credential (aztables.NewServiceClient, NewServiceClientWithSharedKey or
// NewServiceClientFromConnectionString). It does not contact the service;
// the table is created on the first Add.
func NewBoard(svc *aztables.ServiceClient, table string) (*Board, error) {
	s, err := newTableStore(svc, table)
	if err != nil {
		return nil, err
	}
	return NewBoardWithStore(s), nil
}

// NewBoardWithStore returns a Board over any Store (NewMemoryStore in tests).
func NewBoardWithStore(s Store) *Board {
	name := "its store"
	if n, ok := s.(interface{ Where() string }); ok {
		name = n.Where()
	}
	return &Board{store: s, name: name}
}

// AddOptions modify Add.
type AddOptions struct {
	// Replace overwrites the definition (Interval, Type, Payload) of a key
	// that already exists, keeping its run state; without it Add refuses an
	// existing key of another definition with ErrExists (one of the same
	// definition is left as it is, and Add succeeds).
	Replace bool
}

// EnsureTable creates the blackboard table if it does not exist.
func (b *Board) EnsureTable(ctx context.Context) error { return b.store.Ensure(ctx) }

// Add puts a key on the blackboard. Only e's Key, Interval, Type and
// Payload are used; they are validated first (ErrInvalid). A new key is due
// at once. An existing key is refused with ErrExists unless opts.Replace,
// in which case its definition is replaced and its state (last start, a
// run in progress, counters) kept; an existing key with exactly e's
// definition is not refused (an add is idempotent, so one retried after
// its answer was lost succeeds). A key removed while a run of it is still
// stopping is added as a new key: it runs once that run has stopped (at
// its worker's next heartbeat), never beside it. opts may be nil.
func (b *Board) Add(ctx context.Context, e Entry, opts *AddOptions) error {
	if err := e.Validate(); err != nil {
		return err
	}
	def := e.definition()
	replace := opts != nil && opts.Replace
	for attempt := 0; attempt < maxModifyAttempts; attempt++ {
		_, err := b.store.Insert(ctx, def)
		if errors.Is(err, leasecrontype.ErrNotFound) {
			// First use: the table does not exist yet.
			if eerr := b.store.Ensure(ctx); eerr != nil {
				return fmt.Errorf("add blackboard key %q: %w", e.Key, eerr)
			}
			_, err = b.store.Insert(ctx, def)
		}
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, ErrExists):
			return fmt.Errorf("add blackboard key %q: %w", e.Key, err)
		}
		cur, err := b.store.Get(ctx, e.Key)
		var next Entry
		switch {
		case errors.Is(err, leasecrontype.ErrNotFound):
			continue // removed meanwhile: insert again
		case err != nil:
			// Whose the key is cannot be told: it may be this add's own
			// (issue 38, seed 12992: a new key's add answered "already
			// exists" for the key it had written). Adding again tells.
			return fmt.Errorf("add blackboard key %q: the key is on the board, and reading whether it is this add's own failed (add it again): %w", e.Key, err)
		case !cur.Removed.IsZero():
			next = readded(cur, def, time.Now())
		case cur.definition() == def:
			// This add's own insert whose answer was lost (the retry met
			// it), or an equal one: the board has what was asked for.
			return nil
		case !replace:
			return fmt.Errorf("%w: %q is already on the blackboard (%s; replace it to change its definition)", ErrExists, e.Key, b.name)
		default:
			next = cur
			next.Interval, next.Type, next.Payload = def.Interval, def.Type, def.Payload
		}
		_, err = b.store.Replace(ctx, next, cur.ETag)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrConflict), errors.Is(err, leasecrontype.ErrNotFound):
			continue // changed meanwhile (a worker's heartbeat): read it again
		default:
			return fmt.Errorf("add blackboard key %q: %w", e.Key, err)
		}
	}
	return fmt.Errorf("add blackboard key %q: %w after %d attempts", e.Key, ErrConflict, maxModifyAttempts)
}

// readded is the row of a key added as def at now over cur, a row
// removed while a run held it: a new key, due at once, whose row keeps
// that run's claim (and StopClaim naming it) so that no worker claims the
// key until the run has stopped (issue 38, row 172: deleted at once, the
// row took the claim with it, and the key added again ran beside the
// removed one). A claim that has lapsed (its worker died) is not kept:
// the key is free at once, as a takeover would find it.
func readded(cur, def Entry, now time.Time) Entry {
	next := def
	next.ETag = cur.ETag
	if cur.Abandoned(now) {
		return next
	}
	next.Running, next.Worker, next.ClaimID, next.ClaimedAt, next.LockedUntil = cur.Running, cur.Worker, cur.ClaimID, cur.ClaimedAt, cur.LockedUntil
	next.Start, next.Stoppable, next.StopClaim = cur.Start, cur.Stoppable, cur.StopClaim
	next.RunNow = true
	return next
}

// Remove deletes key from the blackboard. A run in progress stops at its
// worker's next heartbeat (its handler's context is cancelled); until
// then its row stays, marked removed (Entry.Removed), so that the key
// added again meanwhile does not start beside it, and every read of the
// Board treats the key as absent. An unknown key is reported with
// ErrNotFound, and so is a key already removed whose run is stopping.
func (b *Board) Remove(ctx context.Context, key string) error {
	if err := storage.ValidateKeyPart("blackboard key", key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if mutate.On(mutate.BoardRemoveNoop) {
		return nil
	}
	for attempt := 0; ; attempt++ {
		cur, err := b.store.Get(ctx, key)
		switch {
		case err == nil && !cur.Removed.IsZero():
			// Removed already (or by this call, its answer lost, as a
			// delete whose answer was lost meets no row).
			err = leasecrontype.ErrNotFound
		case err == nil && cur.Running && cur.Stoppable && !cur.Abandoned(time.Now()):
			cur.StopClaim, cur.Removed = cur.ClaimID, time.Now().UTC()
			_, err = b.store.Replace(ctx, cur, cur.ETag)
		case err == nil:
			// Not running, its claim lapsed (its worker gone: a takeover
			// would free it), or claimed by a worker of an earlier
			// release, which would write a mark away: deleted as those
			// releases did.
			err = b.store.Delete(ctx, key, cur.ETag)
		}
		switch {
		case err == nil:
			return nil
		case errors.Is(err, leasecrontype.ErrNotFound):
			return fmt.Errorf("%w: %q is not on the blackboard (%s): %w", ErrNotFound, key, b.name, err)
		case errors.Is(err, ErrConflict) && attempt+1 < maxModifyAttempts:
			continue
		default:
			return fmt.Errorf("remove blackboard key %q: %w", key, err)
		}
	}
}

// RunNow flags key so that the next worker cycle runs it regardless of its
// interval. If the key is running, the flag survives that run and makes it
// run once more afterwards. An unknown key is reported with ErrNotFound.
func (b *Board) RunNow(ctx context.Context, key string) error {
	if err := storage.ValidateKeyPart("blackboard key", key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return b.modify(ctx, key, func(cur *Entry) { cur.RunNow = true })
}

// Get returns the row for key (ErrNotFound if absent).
func (b *Board) Get(ctx context.Context, key string) (Entry, error) {
	if err := storage.ValidateKeyPart("blackboard key", key); err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	e, err := b.store.Get(ctx, key)
	if err == nil && !e.Removed.IsZero() {
		err = leasecrontype.ErrNotFound // removed; its run is stopping
	}
	if errors.Is(err, leasecrontype.ErrNotFound) {
		return Entry{}, fmt.Errorf("%w: %q is not on the blackboard (%s): %w", ErrNotFound, key, b.name, err)
	}
	return e, err
}

// List returns every key of the blackboard in key order: the snapshot the
// `blackboard` command prints (see Entry.State for a display status). A
// key removed while its run is stopping is not listed.
func (b *Board) List(ctx context.Context) ([]Entry, error) {
	rows, err := b.store.List(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(rows, func(e Entry) bool { return !e.Removed.IsZero() }), nil
}

// maxModifyAttempts bounds read-modify-write retries against concurrent
// writers (workers claiming, heartbeating, recording).
const maxModifyAttempts = 10

// modify applies fn to the current row and writes it back conditionally,
// re-reading and retrying when another writer got there first.
func (b *Board) modify(ctx context.Context, key string, fn func(*Entry)) error {
	for attempt := 0; ; attempt++ {
		cur, err := b.store.Get(ctx, key)
		if err == nil && !cur.Removed.IsZero() {
			err = leasecrontype.ErrNotFound // removed; its run is stopping
		}
		if errors.Is(err, leasecrontype.ErrNotFound) {
			return fmt.Errorf("%w: %q is not on the blackboard (%s): %w", ErrNotFound, key, b.name, err)
		}
		if err != nil {
			return fmt.Errorf("update blackboard key %q: %w", key, err)
		}
		fn(&cur)
		_, err = b.store.Replace(ctx, cur, cur.ETag)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrConflict) && attempt+1 < maxModifyAttempts:
			continue
		case errors.Is(err, leasecrontype.ErrNotFound):
			return fmt.Errorf("%w: %q is not on the blackboard (%s): %w", ErrNotFound, key, b.name, err)
		default:
			return fmt.Errorf("update blackboard key %q: %w", key, err)
		}
	}
}
