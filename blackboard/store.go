package blackboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Store is the blackboard's storage seam: rows keyed by Entry.Key, each
// with an ETag that changes on every write. Errors wrap these sentinels so
// callers branch with errors.Is: leasecrontype.ErrNotFound (no such row),
// ErrExists (Insert of a row that exists) and ErrConflict (the row's ETag
// is no longer ifMatch). NewBoard and NewWorker use the table one;
// NewMemStore is an in-memory one with the same semantics for tests and
// examples.
type Store interface {
	// Ensure creates the underlying table if it does not exist.
	Ensure(ctx context.Context) error
	// Get returns the row for key, with its ETag.
	Get(ctx context.Context, key string) (Entry, error)
	// List returns every row, with ETags, in key order.
	List(ctx context.Context) ([]Entry, error)
	// Insert creates the row e.Key (ErrAlreadyExists if present) and
	// returns its ETag.
	Insert(ctx context.Context, e Entry) (etag string, err error)
	// Replace overwrites the row e.Key if its ETag is still ifMatch
	// (ErrPreconditionFailed otherwise, ErrNotFound if it is gone) and
	// returns the new ETag.
	Replace(ctx context.Context, e Entry, ifMatch string) (etag string, err error)
	// Delete removes the row key (ErrNotFound if absent); a non-empty
	// ifMatch makes the delete conditional.
	Delete(ctx context.Context, key, ifMatch string) error
}

// Entity property names of a blackboard row. Times are Edm.DateTime
// (omitted while zero), durations Go duration strings ("8h0m0s"), counts
// Edm.Int64. These names are a public contract: any tool may read the
// table, and may add a key by inserting a row with Interval, Type and
// Payload (an integer Interval is read as seconds). A row with Removed set
// is not on the board: its key was removed while a run held it, and the
// row stays until that run stops (an insert of the key meanwhile meets
// it; Board.Add takes it over).
const (
	propInterval     = "Interval"
	propType         = "Type"
	propPayload      = "Payload"
	propStart        = "Start"
	propStop         = "Stop"
	propRunning      = "Running"
	propWorker       = "Worker"
	propClaimID      = "ClaimID"
	propClaimedAt    = "ClaimedAt"
	propLockedUntil  = "LockedUntil"
	propLastError    = "LastError"
	propLastDuration = "LastDuration"
	propRunNow       = "RunNow"
	propRuns         = "Runs"
	propFailures     = "Failures"
	propStoppable    = "Stoppable"
	propStopClaim    = "StopClaim"
	propRemoved      = "Removed"
)

// tableStore is the Store over a table (Azure or in memory).
type tableStore struct {
	t table.Table
}

// newTableStore returns the Store over the table name ("" means
// DefaultTable) of svc. It does not contact the service.
func newTableStore(svc *aztables.ServiceClient, name string) (*tableStore, error) {
	if svc == nil {
		return nil, fmt.Errorf("%w: no table service client", ErrInvalid)
	}
	if name == "" {
		name = DefaultTable
	}
	t, err := table.NewAzure(svc, name)
	if err != nil {
		return nil, fmt.Errorf("%w: Table: %w", ErrInvalid, err)
	}
	return &tableStore{t: t}, nil
}

// NewMemoryStore returns a Store kept in memory, with the table's ETag
// semantics, for tests and examples. It is safe for concurrent use.
func NewMemoryStore() Store { return &tableStore{t: table.NewMemory(DefaultTable, nil)} }

// Where says where the rows are, for messages.
func (s *tableStore) Where() string {
	if _, mem := s.t.(*table.Memory); mem {
		return "in-memory store"
	}
	return "table " + s.t.Name()
}

// Ensure implements Store.
func (s *tableStore) Ensure(ctx context.Context) error {
	if err := s.t.Create(ctx); err != nil {
		return fmt.Errorf("create blackboard table: %w", err)
	}
	return nil
}

// Get implements Store.
func (s *tableStore) Get(ctx context.Context, key string) (Entry, error) {
	e, err := s.t.Get(ctx, Partition, key)
	if err != nil {
		return Entry{}, fmt.Errorf("read blackboard row %q: %w", key, err)
	}
	return decodeEntry(e), nil
}

// List implements Store.
func (s *tableStore) List(ctx context.Context) ([]Entry, error) {
	rows, err := table.All(ctx, s.t, table.Query{Partition: Partition}, 0)
	if errors.Is(err, leasecrontype.ErrNotFound) {
		return nil, nil // no table yet: an empty board
	}
	if err != nil {
		return nil, fmt.Errorf("list the blackboard: %w", err)
	}
	out := make([]Entry, 0, len(rows))
	for _, r := range rows {
		out = append(out, decodeEntry(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Insert implements Store.
func (s *tableStore) Insert(ctx context.Context, e Entry) (string, error) {
	etags, err := s.t.Submit(ctx, []table.Op{{Kind: table.Insert, PartitionKey: Partition, RowKey: e.Key, Props: entryProps(e)}})
	if err != nil {
		return "", fmt.Errorf("insert blackboard row %q: %w", e.Key, translate(err))
	}
	return etags[0], nil
}

// Replace implements Store.
func (s *tableStore) Replace(ctx context.Context, e Entry, ifMatch string) (string, error) {
	if ifMatch == "" {
		return "", fmt.Errorf("replace blackboard row %q: %w: no ETag to match", e.Key, ErrInvalid)
	}
	etags, err := s.t.Submit(ctx, []table.Op{{Kind: table.Replace, PartitionKey: Partition, RowKey: e.Key, Props: entryProps(e), IfMatch: ifMatch}})
	if err != nil {
		return "", fmt.Errorf("update blackboard row %q: %w", e.Key, translate(err))
	}
	return etags[0], nil
}

// Delete implements Store.
func (s *tableStore) Delete(ctx context.Context, key, ifMatch string) error {
	if _, err := s.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: Partition, RowKey: key, IfMatch: ifMatch}}); err != nil {
		return fmt.Errorf("delete blackboard row %q: %w", key, translate(err))
	}
	return nil
}

// translate maps a table error to the Store contract: the storage
// sentinels a conditional write produces become ErrExists and ErrConflict
// (the service's error stays in the chain).
func translate(err error) error {
	switch {
	case errors.Is(err, storage.ErrAlreadyExists):
		return fmt.Errorf("%w: %w", ErrExists, err)
	case errors.Is(err, storage.ErrPreconditionFailed):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// entryProps are a row's properties.
func entryProps(e Entry) table.Props {
	p := table.Props{
		propInterval: e.Interval.String(),
		propType:     e.Type,
		propPayload:  e.Payload,
		propRunning:  e.Running,
		propRunNow:   e.RunNow,
		propRuns:     e.Runs,
		propFailures: e.Failures,
		propStart:    e.Start, propStop: e.Stop, propClaimedAt: e.ClaimedAt, propLockedUntil: e.LockedUntil,
	}
	setString := func(name, v string) {
		if v != "" {
			p[name] = v
		}
	}
	if e.Stoppable {
		p[propStoppable] = true
	}
	if !e.Removed.IsZero() {
		p[propRemoved] = e.Removed
	}
	setString(propStopClaim, e.StopClaim)
	setString(propWorker, e.Worker)
	setString(propClaimID, e.ClaimID)
	setString(propLastError, trunc.Head(e.LastError, maxErrorLen))
	if e.LastDuration != 0 || !e.Stop.IsZero() {
		p[propLastDuration] = e.LastDuration.String()
	}
	return p
}

// decodeEntry reads a row leniently: a property of an unexpected type
// reads as its zero value, except Interval, which must parse (a row whose
// Interval cannot be read is returned with Interval 0 and skipped by
// workers, who log it).
func decodeEntry(r table.Entity) Entry {
	p := r.Props
	return Entry{
		Key:          r.RowKey,
		ETag:         r.ETag,
		Interval:     readDuration(p, propInterval, time.Second),
		Type:         p.Str(propType),
		Payload:      p.Str(propPayload),
		Start:        p.Time(propStart),
		Stop:         p.Time(propStop),
		Running:      p.Bool(propRunning),
		Worker:       p.Str(propWorker),
		ClaimID:      p.Str(propClaimID),
		ClaimedAt:    p.Time(propClaimedAt),
		LockedUntil:  p.Time(propLockedUntil),
		LastError:    p.Str(propLastError),
		LastDuration: readDuration(p, propLastDuration, time.Millisecond),
		RunNow:       p.Bool(propRunNow),
		Runs:         p.Int(propRuns),
		Failures:     p.Int(propFailures),
		Stoppable:    p.Bool(propStoppable),
		StopClaim:    p.Str(propStopClaim),
		Removed:      p.Time(propRemoved),
	}
}

// readDuration reads a Go duration string, or a bare number (a number
// property or a numeric string) in unit.
func readDuration(p table.Props, name string, unit time.Duration) time.Duration {
	if s, ok := p[name].(string); ok {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	if f, ok := p[name].(json.Number); ok {
		x, err := f.Float64()
		if err == nil {
			return time.Duration(x * float64(unit))
		}
	}
	if n, ok, err := p.StrictInt(name); ok && err == nil {
		return time.Duration(n) * unit
	}
	return 0
}
