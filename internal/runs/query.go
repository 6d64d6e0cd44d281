package runs

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/trunc"
)

// Page sizes of Query.
const (
	// DefaultLimit is the page size when Query.Limit is 0.
	DefaultLimit = 50
	// MaxLimit is the largest page (the service's largest query page).
	MaxLimit = 1000
)

// Query selects run records for Store.Query, newest first: ordered by due
// time, latest first (then by id). The zero value lists every run.
type Query struct {
	// State keeps runs in this state ("" = any). Scheduled is refused:
	// tasks that wait in the schedule have no run record yet.
	State State
	// Type keeps runs of this handler type ("" = any).
	Type string
	// Series keeps the occurrences of this recurring series.
	Series string
	// Batch keeps the runs of this batch's members (applied by the
	// service, as Type is).
	Batch string
	// Since keeps runs due at or after it (zero = no bound).
	Since time.Time
	// Limit is the page size: 0 means DefaultLimit, at most MaxLimit.
	Limit int
	// Continue resumes after the page that returned it.
	Continue string
}

// Page is one page of Query results.
type Page struct {
	// Runs are newest first. They carry no output tail and at most
	// MaxListError bytes of the last error; Get has the whole record.
	Runs []Run
	// Continue, when not empty, fetches the next page.
	Continue string
}

// decodeCursor reads a continuation token of the query with fingerprint
// fp over n partitions (a fresh cursor for ""). Anything this query did
// not return — another query's token, a forged one naming keys no key can
// be — is ErrBadContinue.
func decodeCursor(tok string, fp uint32, n int) (cursor, error) {
	cur := cursor{Q: fp, Last: make([]string, n), Done: make([]bool, n)}
	if tok == "" {
		return cur, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	ok := err == nil && json.Unmarshal(b, &cur) == nil && cur.Q == fp && len(cur.Last) == n && len(cur.Done) == n
	for _, l := range cur.Last {
		ok = ok && (l == "" || storage.ValidateKeyPart("key", l) == nil)
	}
	if !ok {
		return cursor{}, fmt.Errorf("%w %q was not returned by this query (same state, type, series and since)", ErrBadContinue, trunc.Head(tok, 200))
	}
	return cur, nil
}

// ErrBadContinue: a continuation token that this query did not return.
var ErrBadContinue = fmt.Errorf("%w: continuation token", ErrInvalid)

// cursor is what a continuation token holds: per partition read, the last
// RowKey returned ("" = none yet) and whether the partition is exhausted;
// and the since of the query's first page (Unix nanoseconds, 0 = none),
// which the pages after it keep.
type cursor struct {
	Q    uint32   `json:"q"`
	Last []string `json:"l"`
	Done []bool   `json:"d"`
	S    int64    `json:"s,omitempty"`
}

// fingerprint ties a token to the query that made it: its filters, and
// whether it has a since (whose time the token carries: a since given as
// "2h ago" is another time on the next page's request). Without a since
// it is what earlier releases computed, so their tokens and these pass
// between the two in a rolling upgrade.
func (q Query) fingerprint() uint32 {
	h := fnv.New32a()
	if q.Since.IsZero() {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", q.State, q.Type, q.Series, q.Since.UnixNano())
	} else {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00since", q.State, q.Type, q.Series)
	}
	if q.Batch != "" {
		fmt.Fprintf(h, "\x00%s", q.Batch)
	}
	return h.Sum32()
}

// listSelect are the properties a listing reads.
var listSelect = []string{"Id", "State", "Type", "Series", "Attempts", "Worker", "LastError", "Generation", "Started", "Finished", "Due", "SnoozedUntil", "Progress", "ProgressMessage", "ProgressAt", "Batch", "Timestamp"}

// hasState holds of every record and of no pointer row (pointTo): a
// listing that reads run rows leaves pointers out, and its limit counts
// records only.
var hasState = table.Cond{Prop: "State", Op: table.Gt, Value: ""}

// plan returns the partitions and the RowKey range a query reads, and the
// conditions the service applies.
func (q Query) plan(l Layout) (pks []string, from, to string, where []table.Cond) {
	if q.Type != "" {
		where = append(where, table.Cond{Prop: "Type", Op: table.Eq, Value: q.Type})
	}
	if q.Batch != "" {
		where = append(where, table.Cond{Prop: "Batch", Op: table.Eq, Value: q.Batch})
	}
	switch {
	case q.Series != "":
		pks = l.homes(q.Series)
		from, to = seriesRange(q.Series)
		where = append(where, hasState) // not its pointers (pointTo)
		if q.State != "" {
			where = append(where, table.Cond{Prop: "State", Op: table.Eq, Value: string(q.State)})
		}
		if !q.Since.IsZero() {
			to = from + invertedAfter(q.Since)
		}
		return pks, from, to, where
	case q.State == "" || !hasStateRow(q.State):
		from, to = prefixList, prefixList+"~"
		if q.State != "" {
			where = append(where, table.Cond{Prop: "State", Op: table.Eq, Value: string(q.State)})
		}
	default:
		from, to = stateRange(q.State)
	}
	if !q.Since.IsZero() {
		to = from + invertedAfter(q.Since)
	}
	return l.all(), from, to, where
}

// Query returns a page of run records, newest first. Without Series it
// reads each partition of the layout once (a state's own rows for a
// state other than succeeded, the time rows otherwise), so a page costs
// one request per partition whatever the table holds; with Series it reads the
// series' one partition. A Type filter, and State succeeded, are applied by
// the service to those rows and can take more requests when they match
// few. Records past their retention are left out.
func (s *Store) Query(ctx context.Context, q Query) (Page, error) {
	switch {
	case q.State == Scheduled:
		return Page{}, fmt.Errorf("%w: state scheduled: tasks waiting in the schedule have no run record yet (list them with `leasecron list`)", ErrInvalid)
	case q.State != "" && !q.State.Valid():
		_, err := ParseState(string(q.State))
		return Page{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	case q.Series != "":
		if err := checkSeries(q.Series); err != nil {
			return Page{}, err
		}
	}
	q.Limit = cmp.Or(q.Limit, DefaultLimit)
	if err := opt.In(ErrInvalid, "limit", q.Limit, DefaultLimit, 1, MaxLimit); err != nil {
		return Page{}, err
	}
	if err := s.ensure(ctx); err != nil {
		return Page{}, err
	}
	l, err := s.fullLayout(ctx)
	if err != nil {
		return Page{}, err
	}
	pks, from, to, where := q.plan(l)
	cur, err := decodeCursor(q.Continue, q.fingerprint(), len(pks))
	if err != nil {
		return Page{}, err
	}
	if cur.S != 0 {
		// The first page's since, which a relative one ("2h" ago)
		// given again to continue would have moved.
		q.Since = time.Unix(0, cur.S).UTC()
		pks, from, to, where = q.plan(l)
	}
	if !q.Since.IsZero() {
		cur.S = q.Since.UnixNano()
	}
	got := make([][]table.Entity, len(pks))
	more := make([]bool, len(pks))
	var g errgroup.Group
	for i, pk := range pks {
		if cur.Done[i] {
			continue
		}
		g.Go(func() error {
			qq := table.Query{Partition: pk, From: from, To: to, Where: where, Select: listSelect, Top: q.Limit}
			if cur.Last[i] != "" {
				qq.From = cur.Last[i] + " " // the first key after it: keys hold no control characters
			}
			var err error
			got[i], more[i], err = s.collect(ctx, qq, q.Limit)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Page{}, fmt.Errorf("runs: list: %w", err)
	}
	type hit struct {
		r    table.Entity
		from int
	}
	var hits []hit
	for i, rows := range got {
		for _, r := range rows {
			hits = append(hits, hit{r, i})
		}
	}
	sort.Slice(hits, func(a, b int) bool { return listOrder(hits[a].r) < listOrder(hits[b].r) })
	if len(hits) > q.Limit {
		hits = hits[:q.Limit]
	}
	var out Page
	now := s.now()
	taken := make([]int, len(pks))
	for _, h := range hits {
		cur.Last[h.from] = h.r.RowKey
		taken[h.from]++
		if r := decodeRun(h.r); !r.pointer() && !s.expired(r, now) { // (hasState leaves pointers out already)
			out.Runs = append(out.Runs, r)
		}
	}
	end := true
	for i := range pks {
		if !cur.Done[i] && !more[i] && taken[i] == len(got[i]) {
			cur.Done[i] = true
		}
		end = end && cur.Done[i]
	}
	if !end {
		b, _ := json.Marshal(cur)
		out.Continue = base64.RawURLEncoding.EncodeToString(b)
	}
	return out, nil
}

// listOrder is the key listings sort by: the due part and the id of a
// list row or of an occurrence's run row, so rows of different partitions
// merge newest first.
func listOrder(r table.Entity) string {
	k := r.RowKey
	switch {
	case strings.HasPrefix(k, prefixState):
		// x~{state}~{inverted due}~{id}
		if i := strings.IndexByte(k[len(prefixState):], '~'); i >= 0 {
			return k[len(prefixState)+i+1:]
		}
	case strings.HasPrefix(k, prefixList):
		return k[len(prefixList):]
	}
	return k
}

// collect reads up to limit rows of q, following the service's
// continuations (a filtered query can return short pages); more reports
// that rows may be left.
func (s *Store) collect(ctx context.Context, q table.Query, limit int) (rows []table.Entity, more bool, err error) {
	for {
		q.Top = limit - len(rows)
		p, err := s.t.Query(ctx, q)
		if err != nil {
			return nil, false, err
		}
		rows = append(rows, p.Entities...)
		if p.Continuation == "" {
			return rows, false, nil
		}
		if len(rows) >= limit {
			return rows, true, nil
		}
		q.Continuation = p.Continuation
	}
}
