package schedule

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/leasecron/leasecron/internal/storage"
)

// MemoryTable is an in-memory Table with the service's semantics for the
// operations leasecron uses (ETags, atomic transactions, RowKey-ordered
// range queries with paging), for tests and examples that run without
// storage. The zero value is not usable; create one with NewMemoryTable.
type MemoryTable struct {
	mu      sync.Mutex
	rows    map[string]map[string]memRow // partition → row key → row
	etag    int64
	calls   map[string]int
	missing bool // every call fails with storage.ErrTableNotFound until Create
	// beforeSubmit, when set, is called with every Submit's operations
	// before they are applied; a non-nil error fails the Submit unapplied.
	beforeSubmit func(ops []Op) error
	// maxPage caps the page size of queries (0 = 1000, the service's cap).
	maxPage int
}

type memRow struct {
	body []byte
	etag string
}

var _ Table = (*MemoryTable)(nil)

// NewMemoryTable returns an empty in-memory table.
func NewMemoryTable() *MemoryTable {
	return &MemoryTable{rows: map[string]map[string]memRow{}, calls: map[string]int{}}
}

// newMissingMemoryTable returns a table that does not exist yet, as on a
// fresh storage account: every call fails with storage.ErrTableNotFound
// until Create.
func newMissingMemoryTable() *MemoryTable {
	m := NewMemoryTable()
	m.missing = true
	return m
}

// Create creates the table if it is missing (Client.Ensure calls it).
func (m *MemoryTable) Create(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["Create"]++
	m.missing = false
	return nil
}

// absent returns the error of a call on a missing table (m.mu held).
func (m *MemoryTable) absent(what string) error {
	if m.missing {
		return fmt.Errorf("%s: %w", what, storage.ErrTableNotFound)
	}
	return nil
}

// callCounts returns how often each method (Query, Get, Submit) was called.
func (m *MemoryTable) callCounts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.calls {
		out[k] = v
	}
	return out
}

// Len returns the number of rows in a partition.
func (m *MemoryTable) Len(partition string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows[partition])
}

// Rows returns every entity of a partition in RowKey order.
func (m *MemoryTable) Rows(partition string) []Entity {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entity
	for _, rk := range m.sortedKeys(partition) {
		out = append(out, m.entity(m.rows[partition][rk]))
	}
	return out
}

// putRaw stores an entity given as raw JSON properties (as another
// language's client would write it), replacing any row with the same keys.
func (m *MemoryTable) putRaw(partition, rowKey string, props map[string]any) error {
	b, err := encodeEntity(partition, rowKey, props)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.put(partition, rowKey, b)
	return nil
}

func (m *MemoryTable) put(pk, rk string, body []byte) {
	if m.rows[pk] == nil {
		m.rows[pk] = map[string]memRow{}
	}
	m.etag++
	m.rows[pk][rk] = memRow{body: body, etag: `W/"` + strconv.FormatInt(m.etag, 10) + `"`}
}

func (m *MemoryTable) entity(r memRow) Entity {
	e, _ := decodeEntity(r.body, r.etag)
	return e
}

func (m *MemoryTable) sortedKeys(pk string) []string {
	keys := make([]string, 0, len(m.rows[pk]))
	for k := range m.rows[pk] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Query implements Table.
func (m *MemoryTable) Query(ctx context.Context, q Query) (Page, error) {
	if err := ctx.Err(); err != nil {
		return Page{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["Query"]++
	if err := m.absent("query " + q.Partition); err != nil {
		return Page{}, err
	}
	top := int(q.Top)
	limit := m.maxPage
	if limit <= 0 {
		limit = 1000
	}
	if top <= 0 || top > limit {
		top = limit
	}
	from := q.From
	if q.Continuation != "" {
		_, rk, ok := strings.Cut(q.Continuation, "\n")
		if !ok {
			return Page{}, fmt.Errorf("query: bad continuation %q", q.Continuation)
		}
		if rk > from {
			from = rk
		}
	}
	var p Page
	for _, rk := range m.sortedKeys(q.Partition) {
		if rk < from || (q.To != "" && rk >= q.To) {
			continue
		}
		if len(p.Entities) == top {
			p.Continuation = q.Partition + "\n" + rk
			break
		}
		e := m.entity(m.rows[q.Partition][rk])
		if !q.keeps(e.Props) {
			continue
		}
		if len(q.Select) > 0 {
			keep := map[string]any{}
			for _, s := range q.Select {
				if v, ok := e.Props[s]; ok {
					keep[s] = v
				}
				if v, ok := e.Props[s+"@odata.type"]; ok {
					keep[s+"@odata.type"] = v
				}
			}
			e.Props = keep
		}
		p.Entities = append(p.Entities, e)
	}
	return p, nil
}

// Get implements Table.
func (m *MemoryTable) Get(ctx context.Context, pk, rk string) (Entity, error) {
	if err := ctx.Err(); err != nil {
		return Entity{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls["Get"]++
	if err := m.absent("get " + pk + "/" + rk); err != nil {
		return Entity{}, err
	}
	r, ok := m.rows[pk][rk]
	if !ok {
		return Entity{}, fmt.Errorf("get %s/%s: %w", pk, rk, storage.ErrNotFound)
	}
	return m.entity(r), nil
}

// Submit implements Table.
func (m *MemoryTable) Submit(ctx context.Context, ops []Op) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.calls["Submit"]++
	hook := m.beforeSubmit
	err := m.absent("submit")
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if hook != nil {
		if err := hook(ops); err != nil {
			return nil, err
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	if len(ops) > MaxOps {
		return nil, fmt.Errorf("%w: %d operations, a transaction holds at most %d", storage.ErrBadRequest, len(ops), MaxOps)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	pk := ops[0].PartitionKey
	bodies := make([][]byte, len(ops))
	// Check every precondition and encode every body first, then apply:
	// all or nothing.
	for i, op := range ops {
		if op.PartitionKey != pk {
			return nil, fmt.Errorf("%w: operation %d is in partition %q, the transaction in %q", storage.ErrBadRequest, i, op.PartitionKey, pk)
		}
		if seen[op.RowKey] {
			return nil, fmt.Errorf("%w: row %q appears twice in one transaction", storage.ErrBadRequest, op.RowKey)
		}
		seen[op.RowKey] = true
		r, exists := m.rows[pk][op.RowKey]
		switch op.Kind {
		case OpInsert:
			if exists {
				return nil, fmt.Errorf("operation %d: insert %s/%s: %w", i, pk, op.RowKey, storage.ErrAlreadyExists)
			}
		case OpDelete, OpMerge, OpReplace:
			if !exists {
				return nil, fmt.Errorf("operation %d: %s %s/%s: %w", i, op.Kind, pk, op.RowKey, storage.ErrNotFound)
			}
			if op.IfMatch != "" && op.IfMatch != "*" && op.IfMatch != r.etag {
				return nil, fmt.Errorf("operation %d: %s %s/%s: %w", i, op.Kind, pk, op.RowKey, storage.ErrPreconditionFailed)
			}
		default:
			return nil, fmt.Errorf("%w: unknown operation %v", storage.ErrBadRequest, op.Kind)
		}
		props := op.Props
		if op.Kind == OpMerge {
			props = m.entity(r).Props
			for k, v := range op.Props {
				props[k] = v
			}
		}
		if op.Kind != OpDelete {
			b, err := encodeEntity(pk, op.RowKey, props)
			if err != nil {
				return nil, err
			}
			bodies[i] = b
		}
	}
	etags := make([]string, len(ops))
	for i, op := range ops {
		if op.Kind == OpDelete {
			delete(m.rows[pk], op.RowKey)
		} else {
			m.put(pk, op.RowKey, bodies[i])
			etags[i] = m.rows[pk][op.RowKey].etag
		}
	}
	return etags, nil
}
