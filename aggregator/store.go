package aggregator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/storage"
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
// Payload (an integer Interval is read as seconds).
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
)

// tableStore is the Store over an Azure table.
type tableStore struct {
	svc   *aztables.ServiceClient
	name  string
	table *aztables.Client
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
	if err := storage.ValidateTableName(name); err != nil {
		return nil, fmt.Errorf("%w: Table: %w", ErrInvalid, err)
	}
	return &tableStore{svc: svc, name: name, table: svc.NewClient(name)}, nil
}

// Name returns the table name.
func (s *tableStore) Name() string { return s.name }

// Ensure implements Store.
func (s *tableStore) Ensure(ctx context.Context) error {
	_, err := s.svc.CreateTable(ctx, s.name, nil)
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrAlreadyExists) {
		return fmt.Errorf("create blackboard table %s: %w", s.name, err)
	}
	return nil
}

// Get implements Store.
func (s *tableStore) Get(ctx context.Context, key string) (Entry, error) {
	resp, err := s.table.GetEntity(ctx, Partition, key, nil)
	if err != nil {
		return Entry{}, fmt.Errorf("read blackboard row %q: %w", key, storage.Translate(err))
	}
	e, err := decodeEntity(resp.Value)
	if err != nil {
		return Entry{}, err
	}
	e.ETag = string(resp.ETag)
	return e, nil
}

// List implements Store.
func (s *tableStore) List(ctx context.Context) ([]Entry, error) {
	filter := "PartitionKey eq '" + Partition + "'"
	pager := s.table.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	var out []Entry
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			err = storage.Translate(err)
			if errors.Is(err, leasecrontype.ErrNotFound) {
				return nil, nil // no table yet: an empty board
			}
			return nil, fmt.Errorf("list blackboard table %s: %w", s.name, err)
		}
		for _, raw := range page.Entities {
			e, err := decodeEntity(raw)
			if err != nil {
				// One bad row (written by hand, say) must not stop every
				// other key: it is skipped and reported.
				slog.Default().Warn("skipping a malformed blackboard row", "table", s.name, "err", err)
				continue
			}
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Insert implements Store.
func (s *tableStore) Insert(ctx context.Context, e Entry) (string, error) {
	body, err := encodeEntity(e)
	if err != nil {
		return "", err
	}
	resp, err := s.table.AddEntity(ctx, body, nil)
	if err != nil {
		return "", fmt.Errorf("insert blackboard row %q: %w", e.Key, translate(err))
	}
	return string(resp.ETag), nil
}

// Replace implements Store.
func (s *tableStore) Replace(ctx context.Context, e Entry, ifMatch string) (string, error) {
	if ifMatch == "" {
		return "", fmt.Errorf("replace blackboard row %q: %w: no ETag to match", e.Key, ErrInvalid)
	}
	body, err := encodeEntity(e)
	if err != nil {
		return "", err
	}
	tag := azcore.ETag(ifMatch)
	resp, err := s.table.UpdateEntity(ctx, body, &aztables.UpdateEntityOptions{IfMatch: &tag, UpdateMode: aztables.UpdateModeReplace})
	if err != nil {
		return "", fmt.Errorf("update blackboard row %q: %w", e.Key, translate(err))
	}
	return string(resp.ETag), nil
}

// Delete implements Store.
func (s *tableStore) Delete(ctx context.Context, key, ifMatch string) error {
	var opts *aztables.DeleteEntityOptions
	if ifMatch != "" {
		tag := azcore.ETag(ifMatch)
		opts = &aztables.DeleteEntityOptions{IfMatch: &tag}
	}
	if _, err := s.table.DeleteEntity(ctx, Partition, key, opts); err != nil {
		return fmt.Errorf("delete blackboard row %q: %w", key, translate(err))
	}
	return nil
}

// translate maps a table error to the Store contract: the storage
// sentinels a conditional write produces become ErrExists and ErrConflict
// (the service's error stays in the chain).
func translate(err error) error {
	err = storage.Translate(err)
	switch {
	case errors.Is(err, storage.ErrAlreadyExists):
		return fmt.Errorf("%w: %w", ErrExists, err)
	case errors.Is(err, storage.ErrPreconditionFailed):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

func encodeEntity(e Entry) ([]byte, error) {
	p := map[string]any{
		propInterval: e.Interval.String(),
		propType:     e.Type,
		propPayload:  e.Payload,
		propRunning:  e.Running,
		propRunNow:   e.RunNow,
		propRuns:     aztables.EDMInt64(e.Runs),
		propFailures: aztables.EDMInt64(e.Failures),
	}
	setString := func(name, v string) {
		if v != "" {
			p[name] = v
		}
	}
	setString(propWorker, e.Worker)
	setString(propClaimID, e.ClaimID)
	setString(propLastError, trunc.Head(e.LastError, maxErrorLen))
	if e.LastDuration != 0 || !e.Stop.IsZero() {
		p[propLastDuration] = e.LastDuration.String()
	}
	for name, t := range map[string]time.Time{propStart: e.Start, propStop: e.Stop, propClaimedAt: e.ClaimedAt, propLockedUntil: e.LockedUntil} {
		if !t.IsZero() {
			p[name] = aztables.EDMDateTime(t.UTC())
		}
	}
	b, err := json.Marshal(aztables.EDMEntity{Entity: aztables.Entity{PartitionKey: Partition, RowKey: e.Key}, Properties: p})
	if err != nil {
		return nil, fmt.Errorf("encode blackboard row %q: %w", e.Key, err)
	}
	return b, nil
}

// decodeEntity reads a row leniently: a property of an unexpected type
// reads as its zero value, except Interval, which must parse (a row whose
// Interval cannot be read is returned with Interval 0 and skipped by
// workers, who log it).
func decodeEntity(raw []byte) (Entry, error) {
	var ent aztables.EDMEntity
	if err := json.Unmarshal(raw, &ent); err != nil {
		return Entry{}, fmt.Errorf("decode blackboard row: %w", err)
	}
	p := ent.Properties
	e := Entry{Key: ent.RowKey, ETag: ent.ETag}
	e.Interval = readDuration(p[propInterval], time.Second)
	e.Type = readString(p[propType])
	e.Payload = readString(p[propPayload])
	e.Start = readTime(p[propStart])
	e.Stop = readTime(p[propStop])
	e.Running = readBool(p[propRunning])
	e.Worker = readString(p[propWorker])
	e.ClaimID = readString(p[propClaimID])
	e.ClaimedAt = readTime(p[propClaimedAt])
	e.LockedUntil = readTime(p[propLockedUntil])
	e.LastError = readString(p[propLastError])
	e.LastDuration = readDuration(p[propLastDuration], time.Millisecond)
	e.RunNow = readBool(p[propRunNow])
	e.Runs = readInt(p[propRuns])
	e.Failures = readInt(p[propFailures])
	return e, nil
}

func readString(v any) string {
	s, _ := v.(string)
	return s
}

func readBool(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		ok, _ := strconv.ParseBool(b)
		return ok
	}
	return false
}

func readTime(v any) time.Time {
	switch t := v.(type) {
	case aztables.EDMDateTime:
		return time.Time(t).UTC()
	case string:
		if p, err := time.Parse(time.RFC3339Nano, t); err == nil {
			return p.UTC()
		}
	}
	return time.Time{}
}

// readDuration reads a Go duration string, or a bare number in unit.
func readDuration(v any, unit time.Duration) time.Duration {
	switch d := v.(type) {
	case string:
		if p, err := time.ParseDuration(d); err == nil {
			return p
		}
		if n, err := strconv.ParseInt(d, 10, 64); err == nil {
			return time.Duration(n) * unit
		}
	case int32:
		return time.Duration(d) * unit
	case aztables.EDMInt64:
		return time.Duration(d) * unit
	case float64:
		return time.Duration(d * float64(unit))
	}
	return 0
}

func readInt(v any) int64 {
	switch n := v.(type) {
	case aztables.EDMInt64:
		return int64(n)
	case int32:
		return int64(n)
	case float64:
		return int64(n)
	case string:
		i, _ := strconv.ParseInt(n, 10, 64)
		return i
	}
	return 0
}

// MemStore is an in-memory Store with the table's ETag semantics, for tests
// and examples. It is safe for concurrent use.
type MemStore struct {
	mu   sync.Mutex
	rows map[string]Entry
	seq  int64
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{rows: map[string]Entry{}} }

func (m *MemStore) nextETag() string {
	m.seq++
	return fmt.Sprintf("W/\"mem-%d\"", m.seq)
}

// Ensure implements Store.
func (m *MemStore) Ensure(context.Context) error { return nil }

// Get implements Store.
func (m *MemStore) Get(ctx context.Context, key string) (Entry, error) {
	if err := ctx.Err(); err != nil {
		return Entry{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.rows[key]
	if !ok {
		return Entry{}, fmt.Errorf("read blackboard row %q: %w", key, leasecrontype.ErrNotFound)
	}
	return e, nil
}

// List implements Store.
func (m *MemStore) List(ctx context.Context) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Entry, 0, len(m.rows))
	for _, e := range m.rows {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Insert implements Store.
func (m *MemStore) Insert(ctx context.Context, e Entry) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.rows[e.Key]; ok {
		return "", fmt.Errorf("insert blackboard row %q: %w", e.Key, ErrExists)
	}
	e.ETag = m.nextETag()
	e.LastError = trunc.Head(e.LastError, maxErrorLen)
	m.rows[e.Key] = e
	return e.ETag, nil
}

// Replace implements Store.
func (m *MemStore) Replace(ctx context.Context, e Entry, ifMatch string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.rows[e.Key]
	switch {
	case !ok:
		return "", fmt.Errorf("update blackboard row %q: %w", e.Key, leasecrontype.ErrNotFound)
	case ifMatch != "*" && cur.ETag != ifMatch:
		return "", fmt.Errorf("update blackboard row %q: %w", e.Key, ErrConflict)
	}
	e.ETag = m.nextETag()
	e.LastError = trunc.Head(e.LastError, maxErrorLen)
	m.rows[e.Key] = e
	return e.ETag, nil
}

// Delete implements Store.
func (m *MemStore) Delete(ctx context.Context, key, ifMatch string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.rows[key]
	switch {
	case !ok:
		return fmt.Errorf("delete blackboard row %q: %w", key, leasecrontype.ErrNotFound)
	case ifMatch != "" && ifMatch != "*" && cur.ETag != ifMatch:
		return fmt.Errorf("delete blackboard row %q: %w", key, ErrConflict)
	}
	delete(m.rows, key)
	return nil
}
