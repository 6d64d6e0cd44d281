package runs

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

// memTable is the table seam in memory, with the service's semantics for
// what the Runs table uses: ETags, all-or-nothing transactions on one
// partition, RowKey-ordered range queries with conditions and paging. Rows
// are kept as the JSON bodies the service would store, so reads go through
// the same decoding as the service's answers.
type memTable struct {
	clk  clock.Clock
	mu   sync.Mutex
	rows map[string]map[string]memRow // partition → row key → row
	seq  int64
	fail error
	// requests counts calls, like storage.Counter counts requests.
	requests int64
}

type memRow struct {
	body    []byte
	etag    string
	updated time.Time
}

func newMemTable(c clock.Clock) *memTable {
	return &memTable{clk: clock.OrReal(c), rows: map[string]map[string]memRow{}}
}

// begin locks the table and counts a request, or fails as FailWith says.
func (m *memTable) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	m.requests++
	if m.fail != nil {
		err := m.fail
		m.mu.Unlock()
		return fmt.Errorf("runs (memory): %w", err)
	}
	return nil
}

func (m *memTable) create(ctx context.Context) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
	m.mu.Unlock()
	return nil
}

func (m *memTable) read(r memRow) row {
	out, _ := decodeRow(r.body, r.etag)
	out.updated = r.updated
	return out
}

func (m *memTable) get(ctx context.Context, pk, rk string) (row, error) {
	if err := m.begin(ctx); err != nil {
		return row{}, err
	}
	defer m.mu.Unlock()
	r, ok := m.rows[pk][rk]
	if !ok {
		return row{}, fmt.Errorf("read %s/%s: %w", pk, rk, storage.ErrNotFound)
	}
	return m.read(r), nil
}

func (m *memTable) query(ctx context.Context, q query) (page, error) {
	if err := m.begin(ctx); err != nil {
		return page{}, err
	}
	defer m.mu.Unlock()
	top := q.top
	if top <= 0 || top > 1000 {
		top = 1000
	}
	from := q.from
	if q.cont != "" {
		_, rk, ok := strings.Cut(q.cont, "\n")
		if !ok {
			return page{}, fmt.Errorf("query: malformed continuation %q", q.cont)
		}
		from = max(from, rk)
	}
	fromPK := ""
	if q.cont != "" {
		fromPK, _, _ = strings.Cut(q.cont, "\n")
	}
	type key struct{ pk, rk string }
	var keys []key
	for pk, rows := range m.rows {
		if (q.pk != "" && pk != q.pk) || (q.pk == "" && (pk < q.pkFrom || pk > q.pkTo)) || pk < fromPK {
			continue
		}
		for k := range rows {
			if (q.pk == "" && (pk > fromPK || k >= from)) || (q.pk != "" && k >= from && (q.to == "" || k < q.to)) {
				keys = append(keys, key{pk, k})
			}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].pk < keys[j].pk || keys[i].pk == keys[j].pk && keys[i].rk < keys[j].rk
	})
	var p page
next:
	for _, k := range keys {
		r := m.read(m.rows[k.pk][k.rk])
		for _, c := range q.where {
			if !c.match(r.p) {
				continue next
			}
		}
		if len(p.rows) == top {
			p.cont = k.pk + "\n" + k.rk
			break
		}
		if len(q.sel) > 0 {
			keep := props{}
			for _, s := range q.sel {
				if v, ok := r.p[s]; ok {
					keep[s] = v
				}
			}
			r.p = keep
		}
		p.rows = append(p.rows, r)
	}
	return p, nil
}

func (m *memTable) submit(ctx context.Context, ops []op) error {
	if err := m.begin(ctx); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if len(ops) > maxOps {
		return fmt.Errorf("%w: %d operations, a transaction holds at most %d", storage.ErrBadRequest, len(ops), maxOps)
	}
	seen := map[string]bool{}
	bodies := make([][]byte, len(ops))
	// Check every precondition and encode every body first, then apply.
	for i, o := range ops {
		if o.pk != ops[0].pk {
			return fmt.Errorf("%w: operation %d is in partition %q, the transaction in %q", storage.ErrBadRequest, i, o.pk, ops[0].pk)
		}
		if seen[o.rk] {
			return fmt.Errorf("%w: row %q twice in one transaction", storage.ErrBadRequest, o.rk)
		}
		seen[o.rk] = true
		cur, exists := m.rows[o.pk][o.rk]
		switch {
		case o.kind == opInsert && exists:
			return fmt.Errorf("operation %d: insert %s/%s: %w", i, o.pk, o.rk, storage.ErrAlreadyExists)
		case o.kind == opInsert || o.kind == opUpsert || o.kind == opUpsertMerge:
		case !exists:
			return fmt.Errorf("operation %d: %s %s/%s: %w", i, o.kind, o.pk, o.rk, storage.ErrNotFound)
		case o.ifMatch != "" && o.ifMatch != cur.etag:
			return fmt.Errorf("operation %d: %s %s/%s: %w", i, o.kind, o.pk, o.rk, storage.ErrPreconditionFailed)
		}
		p := o.p
		if o.kind == opMerge || (o.kind == opUpsertMerge && exists) {
			p = m.read(cur).p
			for k, v := range o.p {
				p[k] = v
			}
		}
		if o.kind != opDelete {
			b, err := encodeProps(o.pk, o.rk, p)
			if err != nil {
				return err
			}
			bodies[i] = b
		}
	}
	now := m.clk.Now()
	for i, o := range ops {
		if o.kind == opDelete {
			delete(m.rows[o.pk], o.rk)
			continue
		}
		if m.rows[o.pk] == nil {
			m.rows[o.pk] = map[string]memRow{}
		}
		m.seq++
		m.rows[o.pk][o.rk] = memRow{body: bodies[i], etag: fmt.Sprintf(`W/"%d"`, m.seq), updated: now}
	}
	return nil
}
