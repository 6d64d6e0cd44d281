package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// table is the storage seam of the Runs table: point reads, RowKey-range
// queries of one partition with simple property conditions, and atomic
// batches of operations on one partition (an entity-group transaction).
// azTable implements it over the service, memTable in memory for tests.
// Errors wrap storage's sentinels (storage.ErrNotFound, ErrAlreadyExists,
// ErrPreconditionFailed, ...).
type table interface {
	// create makes the table if it does not exist.
	create(ctx context.Context) error
	// get reads one row.
	get(ctx context.Context, pk, rk string) (row, error)
	// query returns one page of q.
	query(ctx context.Context, q query) (page, error)
	// submit applies ops atomically: all succeed or none does. They share
	// one partition, touch distinct rows and number at most maxOps.
	submit(ctx context.Context, ops []op) error
}

// maxOps is the most operations one table transaction may hold.
const maxOps = 100

// row is one entity as read.
type row struct {
	pk, rk, etag string
	p            props
	// updated is the service's Timestamp.
	updated time.Time
}

// props are an entity's properties. Writers put string, bool, int32,
// int64 and time.Time values; readers get them back through the accessors,
// whatever JSON form the service returned them in.
type props map[string]any

func (p props) str(name string) string {
	switch v := p[name].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

func (p props) int(name string) int64 {
	switch v := p[name].(type) {
	case int32:
		return int64(v)
	case int64:
		return v
	case int:
		return int64(v)
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			f, _ := v.Float64()
			n = int64(f)
		}
		return n
	case string:
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n
	}
	return 0
}

func (p props) time(name string) time.Time {
	switch v := p[name].(type) {
	case time.Time:
		return v.UTC()
	case string:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// opKind is the kind of a transaction operation.
type opKind int

const (
	// opInsert adds a row; it fails if the row exists.
	opInsert opKind = iota + 1
	// opDelete removes a row whose ETag matches ("" = any); it fails if
	// the row does not exist.
	opDelete
	// opMerge sets the given properties of a row whose ETag matches ("" =
	// any), keeping the others; it fails if the row does not exist.
	opMerge
	// opReplace replaces a row whose ETag matches ("" = any); it fails if
	// the row does not exist.
	opReplace
	// opUpsert inserts a row or replaces it, unconditionally.
	opUpsert
	// opUpsertMerge inserts a row or sets the given properties of it,
	// keeping the others, unconditionally.
	opUpsertMerge
)

func (k opKind) String() string {
	return [...]string{"?", "insert", "delete", "merge", "replace", "upsert", "upsert-merge"}[k]
}

// op is one operation of a transaction.
type op struct {
	kind    opKind
	pk, rk  string
	p       props
	ifMatch string
}

// query selects rows of one partition whose RowKey lies in [from, to) and
// that meet every condition, in RowKey order.
type query struct {
	pk string
	// pkFrom and pkTo, when pk is empty, select the partitions in
	// [pkFrom, pkTo] instead of one.
	pkFrom, pkTo string
	from, to     string
	where        []cond
	// sel, when set, limits the properties returned.
	sel []string
	// top is the page size (0 = the service's maximum, 1000).
	top int
	// cont resumes after the page that returned it.
	cont string
}

// cond is a condition on a property: prop op value, where value is a
// string or a time.Time and op is "eq", "ne", "lt" or "ge".
type cond struct {
	prop, op string
	val      any
}

// page is one page of query results.
type page struct {
	rows []row
	// cont is non-empty when more rows may follow.
	cont string
}

// match reports whether p meets c (the in-memory table's evaluation of
// what the service evaluates from the OData filter).
func (c cond) match(p props) bool {
	var cmp int
	switch v := c.val.(type) {
	case string:
		cmp = strings.Compare(p.str(c.prop), v)
	case time.Time:
		t := p.time(c.prop)
		if t.IsZero() {
			return false // the service compares nothing to a missing property
		}
		cmp = t.Compare(v)
	default:
		return false
	}
	switch c.op {
	case "eq":
		return cmp == 0
	case "ne":
		return cmp != 0
	case "lt":
		return cmp < 0
	case "ge":
		return cmp >= 0
	}
	return false
}

// odata renders c as an OData filter clause.
func (c cond) odata() string {
	switch v := c.val.(type) {
	case time.Time:
		return fmt.Sprintf("%s %s datetime'%s'", c.prop, c.op, v.UTC().Format(edmTime))
	default:
		return fmt.Sprintf("%s %s %s", c.prop, c.op, odataString(fmt.Sprint(v)))
	}
}

// odataString quotes s as an OData string literal.
func odataString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// edmTime is how DateTime properties are written (100 ns precision, the
// service's own).
const edmTime = "2006-01-02T15:04:05.0000000Z"

// encodeProps renders pk, rk and p as the service's JSON entity body.
func encodeProps(pk, rk string, p props) ([]byte, error) {
	m := make(map[string]any, 2*len(p)+2)
	for k, v := range p {
		switch x := v.(type) {
		case time.Time:
			if x.IsZero() {
				continue
			}
			m[k] = stored(x).Format(edmTime)
			m[k+"@odata.type"] = "Edm.DateTime"
		case int64:
			m[k] = strconv.FormatInt(x, 10)
			m[k+"@odata.type"] = "Edm.Int64"
		case int:
			m[k] = strconv.Itoa(x)
			m[k+"@odata.type"] = "Edm.Int64"
		default:
			m[k] = v
		}
	}
	m["PartitionKey"], m["RowKey"] = pk, rk
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode row %s/%s: %w", pk, rk, err)
	}
	return b, nil
}

// decodeRow parses an entity body as the service returns it.
func decodeRow(b []byte, etag string) (row, error) {
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return row{}, fmt.Errorf("decode row: %w", err)
	}
	r := row{etag: etag, p: props{}}
	for k, v := range m {
		switch {
		case k == "PartitionKey":
			r.pk, _ = v.(string)
		case k == "RowKey":
			r.rk, _ = v.(string)
		case k == "Timestamp":
			s, _ := v.(string)
			r.updated, _ = time.Parse(time.RFC3339Nano, s)
		case k == "odata.etag":
			if r.etag == "" {
				r.etag, _ = v.(string)
			}
		case strings.Contains(k, "@odata.") || strings.HasPrefix(k, "odata."):
		default:
			r.p[k] = v
		}
	}
	return r, nil
}
