package runs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/trunc"
)

// Bulk operations (act on everything matching a filter) keep their state
// in one row each, in partition "~k" with RowKey the operation's id: what
// it does, who started it, how many matched when it was confirmed, and how
// far it has got. The worker running it writes the row after each batch,
// so a worker that takes it over after a crash continues the counts.
const bulkPK = "~k"

// ErrNoBulk: no bulk operation has that id.
var ErrNoBulk = errors.New("no such bulk operation")

// ErrBulkChanged: SaveBulk found the operation's row changed since it was
// read (another attempt of the operation took it up, or finished it).
var ErrBulkChanged = errors.New("bulk operation changed by another attempt")

// ErrBulkExists: CreateBulk found a row of the id that this call did not
// write (a caller's id given twice).
var ErrBulkExists = errors.New("a bulk operation of this id exists")

// BulkRow is a bulk operation's state.
type BulkRow struct {
	ID string
	// Kind and Filter say what it does (Filter is the caller's JSON).
	Kind, Filter string
	// By is who started it; Expect how many matched when it was confirmed.
	By     string
	Expect int
	// Done and Failed count the items acted on and those that could not
	// be.
	Done, Failed int
	// State is "running", "succeeded" or "failed"; Error says why it
	// failed, or the latest item error.
	State, Error string
	// Attempts counts the workers that have run it (more than one after
	// a takeover).
	Attempts                   int
	Created, Updated, Finished time.Time
	// ETag is the row's version as read (GetBulk) or written (SaveBulk):
	// SaveBulk writes over that version only.
	ETag string
}

// Bulk states.
const (
	BulkRunning   = "running"
	BulkSucceeded = "succeeded"
	BulkFailed    = "failed"
)

func (b BulkRow) props() table.Props {
	return table.Props{"Kind": b.Kind, "Filter": b.Filter, "By": trunc.Head(b.By, MaxAuditField), "Expect": int64(b.Expect),
		"Done": int64(b.Done), "Failed": int64(b.Failed), "State": b.State, "Error": trunc.Head(b.Error, MaxAuditField),
		"Attempts": int64(b.Attempts), "Created": b.Created, "Updated": b.Updated, "Finished": b.Finished}
}

func bulkFrom(e table.Entity) BulkRow {
	p := e.Props
	return BulkRow{ID: e.RowKey, Kind: p.Str("Kind"), Filter: p.Str("Filter"), By: p.Str("By"), Expect: int(p.Int("Expect")),
		Done: int(p.Int("Done")), Failed: int(p.Int("Failed")), State: p.Str("State"), Error: p.Str("Error"),
		Attempts: int(p.Int("Attempts")), Created: p.Time("Created"), Updated: p.Time("Updated"), Finished: p.Time("Finished"),
		ETag: e.ETag}
}

// CreateBulk writes a new operation's row (refused if the id exists),
// first removing the rows of operations that finished longer ago than
// Options.RetentionFailed (one query), so the partition stays small
// without costing the cleaning pass anything.
func (s *Store) CreateBulk(ctx context.Context, b BulkRow) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	if _, err := s.cleanBulk(ctx, s.now().Add(-s.o.RetentionFailed)); err != nil {
		s.o.Logger.Debug("removing old bulk operations failed", "err", err)
	}
	b.Created, b.Updated, b.State = s.now(), s.now(), BulkRunning
	err := submit(ctx, s.t, []table.Op{{Kind: table.Insert, PartitionKey: bulkPK, RowKey: b.ID, Props: b.props()}})
	if errors.Is(err, storage.ErrAlreadyExists) {
		// This call's own row, its insert committed though its answer
		// was lost: refused, the operation would stand running for
		// good with no task to run it (a review of issue 38's row 122).
		e, gerr := s.t.Get(ctx, bulkPK, b.ID)
		if gerr != nil {
			return fmt.Errorf("runs: create bulk operation %s: %w, and reading it to tell whether this call wrote it failed: %w", b.ID, storage.ErrAlreadyExists, gerr)
		}
		if got := bulkFrom(e); got.Kind == b.Kind && got.Filter == b.Filter && got.State == BulkRunning && got.Attempts == 0 &&
			got.Created.Equal(b.Created.Truncate(100*time.Nanosecond)) {
			return nil
		}
		return fmt.Errorf("runs: create bulk operation %s: %w: %w", b.ID, ErrBulkExists, err)
	}
	if err != nil {
		return fmt.Errorf("runs: create bulk operation %s: %w", b.ID, err)
	}
	return nil
}

// SaveBulk writes an operation's progress (one request) and returns the
// row as written, with its new ETag. A row with an ETag (read by GetBulk,
// or returned by SaveBulk) is written only over that version: when the row
// changed since, nothing is written and the error wraps ErrBulkChanged, so
// an attempt of the operation that stalled (a frozen worker, its claim
// lapsed) learns that another has taken the operation up or finished it.
func (s *Store) SaveBulk(ctx context.Context, b BulkRow) (BulkRow, error) {
	b.Updated = s.now()
	op := table.Op{Kind: table.Upsert, PartitionKey: bulkPK, RowKey: b.ID, Props: b.props()}
	if b.ETag != "" {
		op.Kind, op.IfMatch = table.Replace, b.ETag
	}
	etags, err := s.t.Submit(ctx, []table.Op{op})
	switch {
	case err != nil && b.ETag != "" && (errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrNotFound)):
		return b, fmt.Errorf("runs: save bulk operation %s: %w", b.ID, ErrBulkChanged)
	case err != nil:
		return b, fmt.Errorf("runs: save bulk operation %s: %w", b.ID, err)
	}
	if len(etags) > 0 {
		b.ETag = etags[0]
	}
	return b, nil
}

// GetBulk reads an operation's row; ErrNoBulk when there is none.
func (s *Store) GetBulk(ctx context.Context, id string) (BulkRow, error) {
	if err := s.ensure(ctx); err != nil {
		return BulkRow{}, err
	}
	e, err := s.t.Get(ctx, bulkPK, id)
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return BulkRow{}, fmt.Errorf("%w: %q", ErrNoBulk, id)
		}
		return BulkRow{}, fmt.Errorf("runs: read bulk operation %s: %w", id, err)
	}
	return bulkFrom(e), nil
}

// ListBulk returns the operations, newest first (one query per 1,000).
func (s *Store) ListBulk(ctx context.Context) ([]BulkRow, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	rows, err := table.All(ctx, s.t, table.Query{Partition: bulkPK}, 0)
	if err != nil {
		return nil, fmt.Errorf("runs: list bulk operations: %w", err)
	}
	out := make([]BulkRow, len(rows))
	for i, e := range rows {
		out[i] = bulkFrom(e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// cleanBulk removes the operations that finished before cutoff.
func (s *Store) cleanBulk(ctx context.Context, cutoff time.Time) (int, error) {
	old, err := table.All(ctx, s.t, table.Query{Partition: bulkPK, Select: []string{"Finished"},
		Where: []table.Cond{{Prop: "State", Op: table.Ne, Value: BulkRunning}, {Prop: "Finished", Op: table.Lt, Value: cutoff}}}, 0)
	if err != nil {
		return 0, fmt.Errorf("runs: clean bulk operations: %w", err)
	}
	return s.deleteRows(ctx, old), nil
}
