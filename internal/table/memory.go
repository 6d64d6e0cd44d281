package table

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// Memory is a Table in memory with the service's rules (see the package
// doc), for tests and examples that run without storage. Rows are kept as
// the JSON bodies the service would store, so reads go through the same
// decoding as the service's answers. It is safe for concurrent use.
type Memory struct {
	name string
	clk  clock.Clock

	mu      sync.Mutex
	rows    map[string]map[string]memRow // partition → row key → row
	etag    int64
	calls   map[string]int
	missing bool  // every call fails with storage.ErrTableNotFound until Create
	fail    error // every call fails with it, while set
	// beforeSubmit, when set, is called with every Submit's operations
	// before they are applied; a non-nil error fails the Submit unapplied.
	beforeSubmit func(ops []Op) error
	maxPage      int
}

type memRow struct {
	body    []byte
	etag    string
	updated int64 // Unix nanoseconds of the last write
}

var _ Table = (*Memory)(nil)

// NewMemory returns an empty in-memory table named name ("" = "Memory");
// clk dates its entities (nil = the real clock).
func NewMemory(name string, clk clock.Clock) *Memory {
	if name == "" {
		name = "Memory"
	}
	return &Memory{name: name, clk: clock.OrReal(clk), rows: map[string]map[string]memRow{}, calls: map[string]int{}}
}

// NewMissingMemory returns a table that does not exist yet, as on a fresh
// storage account: every call fails with storage.ErrTableNotFound until
// Create.
func NewMissingMemory(name string, clk clock.Clock) *Memory {
	m := NewMemory(name, clk)
	m.missing = true
	return m
}

// Name implements Table.
func (m *Memory) Name() string { return m.name }

// FailWith makes every call fail with err until FailWith(nil).
func (m *Memory) FailWith(err error) {
	m.mu.Lock()
	m.fail = err
	m.mu.Unlock()
}

// BeforeSubmit sets a hook called with every Submit's operations before
// they are applied; an error it returns fails the Submit unapplied.
func (m *Memory) BeforeSubmit(f func(ops []Op) error) {
	m.mu.Lock()
	m.beforeSubmit = f
	m.mu.Unlock()
}

// SetMaxPage caps the page size of queries (0 = MaxPage, the service's).
func (m *Memory) SetMaxPage(n int) {
	m.mu.Lock()
	m.maxPage = n
	m.mu.Unlock()
}

// Calls returns how often each method (Create, Get, Query, Submit) was
// called.
func (m *Memory) Calls() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.calls))
	for k, v := range m.calls {
		out[k] = v
	}
	return out
}

// Requests returns how many calls were made, as a request counter would.
func (m *Memory) Requests() int {
	n := 0
	for _, v := range m.Calls() {
		n += v
	}
	return n
}

// Len returns the number of rows in a partition.
func (m *Memory) Len(pk string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.rows[pk])
}

// Partitions returns the partitions that hold rows, in order.
func (m *Memory) Partitions() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for pk, rows := range m.rows {
		if len(rows) > 0 {
			out = append(out, pk)
		}
	}
	sort.Strings(out)
	return out
}

// Rows returns every entity of a partition in RowKey order.
func (m *Memory) Rows(pk string) []Entity {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entity
	for _, rk := range m.sortedKeys(pk) {
		out = append(out, m.entity(pk, m.rows[pk][rk]))
	}
	return out
}

// PutRaw stores an entity as another language's client would write it,
// replacing any row with the same keys, without counting a call.
func (m *Memory) PutRaw(pk, rk string, p Props) error {
	b, err := Encode(pk, rk, p)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.put(pk, rk, b)
	return nil
}

// begin locks the table and counts a call, or fails as the table's state
// says (then unlocked).
func (m *Memory) begin(ctx context.Context, call, what string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	m.calls[call]++
	var err error
	switch {
	case m.fail != nil:
		err = fmt.Errorf("%s %s (memory): %w", what, m.name, m.fail)
	case m.missing && call != "Create":
		err = fmt.Errorf("%s %s: %w", what, m.name, storage.ErrTableNotFound)
	}
	if err != nil {
		m.mu.Unlock()
	}
	return err
}

func (m *Memory) put(pk, rk string, body []byte) {
	if m.rows[pk] == nil {
		m.rows[pk] = map[string]memRow{}
	}
	m.etag++
	m.rows[pk][rk] = memRow{body: body, etag: `W/"mem-` + strconv.FormatInt(m.etag, 10) + `"`, updated: m.clk.Now().UnixNano()}
}

func (m *Memory) entity(pk string, r memRow) Entity {
	e, _ := Decode(r.body, r.etag)
	e.Timestamp = unixNano(r.updated)
	return e
}

func (m *Memory) sortedKeys(pk string) []string {
	keys := make([]string, 0, len(m.rows[pk]))
	for k := range m.rows[pk] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Create implements Table.
func (m *Memory) Create(ctx context.Context) error {
	if err := m.begin(ctx, "Create", "create"); err != nil {
		return err
	}
	defer m.mu.Unlock()
	m.missing = false
	return nil
}

// Get implements Table.
func (m *Memory) Get(ctx context.Context, pk, rk string) (Entity, error) {
	if err := m.begin(ctx, "Get", "read"); err != nil {
		return Entity{}, err
	}
	defer m.mu.Unlock()
	r, ok := m.rows[pk][rk]
	if !ok {
		return Entity{}, fmt.Errorf("read %s/%s/%s: %w", m.name, pk, rk, storage.ErrNotFound)
	}
	return m.entity(pk, r), nil
}

// Query implements Table.
func (m *Memory) Query(ctx context.Context, q Query) (Page, error) {
	if err := m.begin(ctx, "Query", "query"); err != nil {
		return Page{}, err
	}
	defer m.mu.Unlock()
	limit := m.maxPage
	if limit <= 0 {
		limit = MaxPage
	}
	top := q.Top
	if top <= 0 || top > limit {
		top = limit
	}
	var contPK, contRK string
	if q.Continuation != "" {
		var err error
		if contPK, contRK, err = splitContinuation(q.Continuation); err != nil {
			return Page{}, fmt.Errorf("query %s: %w: %w", m.name, storage.ErrBadRequest, err)
		}
	}
	var pks []string
	for pk := range m.rows {
		if q.Partition != "" && pk != q.Partition || q.Partition == "" && (pk < q.PartitionFrom || pk > q.PartitionTo) {
			continue
		}
		if pk >= contPK {
			pks = append(pks, pk)
		}
	}
	sort.Strings(pks)
	var p Page
	for _, pk := range pks {
		for _, rk := range m.sortedKeys(pk) {
			if rk < q.From || (q.To != "" && rk >= q.To) || (pk == contPK && rk < contRK) {
				continue
			}
			e := m.entity(pk, m.rows[pk][rk])
			if !meets(e.Props, q.Where) {
				continue
			}
			if len(p.Entities) == top {
				p.Continuation = pk + "\n" + rk
				return p, nil
			}
			if len(q.Select) > 0 {
				keep := Props{}
				for _, s := range q.Select {
					if v, ok := e.Props[s]; ok {
						keep[s] = v
					}
					if v, ok := e.Props[s+TypeSuffix]; ok {
						keep[s+TypeSuffix] = v
					}
				}
				e.Props = keep
			}
			p.Entities = append(p.Entities, e)
		}
	}
	return p, nil
}

func meets(p Props, where []Cond) bool {
	for _, c := range where {
		if !c.match(p) {
			return false
		}
	}
	return true
}

// Submit implements Table.
func (m *Memory) Submit(ctx context.Context, ops []Op) ([]string, error) {
	if err := m.begin(ctx, "Submit", "submit to"); err != nil {
		return nil, err
	}
	hook := m.beforeSubmit
	m.mu.Unlock()
	if hook != nil {
		if err := hook(ops); err != nil {
			return nil, err
		}
	}
	if len(ops) == 0 {
		return nil, nil
	}
	if err := checkTxn(m.name, ops); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pk := ops[0].PartitionKey
	bodies := make([][]byte, len(ops))
	// Check every precondition and encode every body first, then apply:
	// all or nothing.
	for i, op := range ops {
		r, exists := m.rows[pk][op.RowKey]
		where := fmt.Sprintf("%s %s/%s/%s", op.Kind, m.name, pk, op.RowKey)
		if len(ops) > 1 {
			where = fmt.Sprintf("operation %d: %s", i, where)
		}
		switch {
		case op.Kind == Insert && exists:
			return nil, fmt.Errorf("%s: %w", where, storage.ErrAlreadyExists)
		case op.Kind.conditional() && !exists:
			return nil, fmt.Errorf("%s: %w", where, storage.ErrNotFound)
		case op.Kind.conditional() && op.IfMatch != "" && op.IfMatch != "*" && op.IfMatch != r.etag:
			return nil, fmt.Errorf("%s: %w", where, storage.ErrPreconditionFailed)
		}
		if op.Kind == Delete {
			continue
		}
		props := op.Props
		if op.Kind == Merge || (op.Kind == UpsertMerge && exists) {
			props = m.entity(pk, r).Props
			for k, v := range op.Props {
				props[k] = v
				if _, annotation := op.Props[k+TypeSuffix]; !annotation {
					delete(props, k+TypeSuffix)
				}
			}
		}
		b, err := Encode(pk, op.RowKey, props)
		if err != nil {
			return nil, err
		}
		bodies[i] = b
	}
	etags := make([]string, len(ops))
	for i, op := range ops {
		if op.Kind == Delete {
			delete(m.rows[pk], op.RowKey)
			continue
		}
		m.put(pk, op.RowKey, bodies[i])
		etags[i] = m.rows[pk][op.RowKey].etag
	}
	return etags, nil
}

// Remove deletes a row without counting a call or checking anything, as
// another process would between two of the caller's steps (a test aid).
func (m *Memory) Remove(pk, rk string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows[pk], rk)
}
