package blackboard

import (
	"context"
	"errors"
	"fmt"

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
// its answer was lost succeeds). opts may be nil.
func (b *Board) Add(ctx context.Context, e Entry, opts *AddOptions) error {
	if err := e.Validate(); err != nil {
		return err
	}
	def := e.definition()
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
	case opts == nil || !opts.Replace:
		// The key holding exactly this definition is this add's own
		// insert whose answer was lost (the retry met it), or an equal
		// one: either way the board now has what was asked for.
		cur, gerr := b.store.Get(ctx, e.Key)
		switch {
		case gerr == nil && cur.definition() == def:
			return nil
		case gerr != nil && !errors.Is(gerr, leasecrontype.ErrNotFound):
			// Whose the key is cannot be told: it may be this add's own
			// (issue 38, seed 12992: a new key's add answered "already
			// exists" for the key it had written). Adding again tells.
			return fmt.Errorf("add blackboard key %q: the key is on the board, and reading whether it is this add's own failed (add it again): %w", e.Key, gerr)
		}
		return fmt.Errorf("%w: %q is already on the blackboard (%s; replace it to change its definition)", ErrExists, e.Key, b.name)
	}
	err = b.modify(ctx, e.Key, func(cur *Entry) {
		cur.Interval, cur.Type, cur.Payload = def.Interval, def.Type, def.Payload
	})
	if errors.Is(err, ErrNotFound) { // removed between our insert and update: insert again
		if _, err = b.store.Insert(ctx, def); err != nil {
			return fmt.Errorf("add blackboard key %q: %w", e.Key, err)
		}
		return nil
	}
	return err
}

// Remove deletes key from the blackboard. A run in progress is not
// interrupted; its worker finds the row gone and records nothing. An
// unknown key is reported with ErrNotFound.
func (b *Board) Remove(ctx context.Context, key string) error {
	if err := storage.ValidateKeyPart("blackboard key", key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if mutate.On(mutate.BoardRemoveNoop) {
		return nil
	}
	err := b.store.Delete(ctx, key, "")
	if errors.Is(err, leasecrontype.ErrNotFound) {
		return fmt.Errorf("%w: %q is not on the blackboard (%s): %w", ErrNotFound, key, b.name, err)
	}
	if err != nil {
		return fmt.Errorf("remove blackboard key %q: %w", key, err)
	}
	return nil
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
	if errors.Is(err, leasecrontype.ErrNotFound) {
		return Entry{}, fmt.Errorf("%w: %q is not on the blackboard (%s): %w", ErrNotFound, key, b.name, err)
	}
	return e, err
}

// List returns every row of the blackboard in key order: the snapshot the
// `blackboard` command prints (see Entry.State for a display status).
func (b *Board) List(ctx context.Context) ([]Entry, error) {
	return b.store.List(ctx)
}

// maxModifyAttempts bounds read-modify-write retries against concurrent
// writers (workers claiming, heartbeating, recording).
const maxModifyAttempts = 10

// modify applies fn to the current row and writes it back conditionally,
// re-reading and retrying when another writer got there first.
func (b *Board) modify(ctx context.Context, key string, fn func(*Entry)) error {
	for attempt := 0; ; attempt++ {
		cur, err := b.store.Get(ctx, key)
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
