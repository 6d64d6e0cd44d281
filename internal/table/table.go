// Package table is leasecron's one layer over Azure Table storage: entities
// and their properties, the operations of an entity-group transaction,
// RowKey-range queries with conditions and paging, conditional writes, and
// the translation of the service's errors into storage's sentinels. Azure
// implements it over the service (or Azurite), Memory in memory with the
// same rules, and one conformance suite (table_test.go) runs on both.
//
// The schedule, the run records and the blackboard are built on it; what
// each stores, and how it spreads its rows over partitions (a Partitioner),
// is theirs.
//
// The service's rules that both implementations enforce: a transaction
// touches one partition, holds at most MaxOps operations and names no row
// twice, and applies all of them or none; a conditional operation (IfMatch)
// fails with storage.ErrPreconditionFailed when the row's ETag moved on;
// an insert of a row that exists fails with storage.ErrAlreadyExists; an
// update or delete of a row that does not exist with storage.ErrNotFound; a
// query returns at most 1,000 entities a page, in PartitionKey and RowKey
// order, and a continuation when more may follow; a condition on a
// property an entity lacks never matches.
package table

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
)

// Table is the storage seam: the few operations on one Azure table that
// leasecron's stores need. Errors wrap storage's sentinels
// (storage.ErrNotFound, ErrTableNotFound, ErrAlreadyExists,
// ErrPreconditionFailed, ErrBadRequest, ...).
type Table interface {
	// Name returns the table's name.
	Name() string
	// Create creates the table if it does not exist.
	Create(ctx context.Context) error
	// Get reads one entity.
	Get(ctx context.Context, pk, rk string) (Entity, error)
	// Query returns one page of q.
	Query(ctx context.Context, q Query) (Page, error)
	// Submit applies ops atomically: all succeed or none does. All ops must
	// be in one partition, touch distinct rows and number at most MaxOps.
	// On success it returns the new ETag of the row each op wrote (""
	// for a delete), or nil when the implementation cannot tell.
	Submit(ctx context.Context, ops []Op) (etags []string, err error)
}

// MaxOps is the most operations a table transaction may hold.
const MaxOps = 100

// MaxPage is the most entities the service returns in one page.
const MaxPage = 1000

// Entity is a table entity as read.
type Entity struct {
	// PartitionKey and RowKey identify the entity.
	PartitionKey, RowKey string
	// ETag is the entity's version, used for conditional writes.
	ETag string
	// Timestamp is the service's time of the entity's last change.
	Timestamp time.Time
	// Props are the other properties as decoded from JSON: strings, bools
	// and json.Number values, with any "Name@odata.type" annotations kept
	// (so writing Props back preserves types such as Edm.Int64 and
	// Edm.DateTime). The service's Timestamp and odata.* metadata are not
	// among them. Read them with the accessors of Props.
	Props Props
	// Raw is the entity's JSON as read (to keep a malformed row whole).
	Raw string
}

// Props are an entity's properties. Writers may put string, bool, int
// (Edm.Int32 when it fits, else Edm.Int64), int32, int64 (Edm.Int64),
// float64 (Edm.Double), time.Time (Edm.DateTime; the zero time is not
// written), json.Number, or anything a read Entity's Props hold.
type Props map[string]any

// TypeSuffix is what follows a property's name in its type annotation.
const TypeSuffix = "@odata.type"

// Clone returns a shallow copy of p.
func (p Props) Clone() Props {
	out := make(Props, len(p))
	for k, v := range p {
		out[k] = v
	}
	return out
}

// Delete removes a property and its type annotation.
func (p Props) Delete(name string) {
	delete(p, name)
	delete(p, name+TypeSuffix)
}

// Str returns a property as a string: "" when absent, any other value
// formatted.
func (p Props) Str(name string) string {
	switch v := p[name].(type) {
	case string:
		return v
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// Int returns an integer property written as Edm.Int32, Edm.Int64 or a
// decimal string; 0 when absent or unreadable.
func (p Props) Int(name string) int64 {
	n, _, err := p.StrictInt(name)
	if err != nil {
		if f, ok := p[name].(json.Number); ok {
			x, _ := f.Float64()
			return int64(x)
		}
		return 0
	}
	return n
}

// Bool returns a boolean property (absent or unreadable: false).
func (p Props) Bool(name string) bool {
	switch x := p[name].(type) {
	case bool:
		return x
	case string:
		b, _ := strconv.ParseBool(x)
		return b
	}
	return false
}

// Time returns a time property written as Edm.DateTime (or an RFC 3339
// string), in UTC; the zero time when absent or unreadable.
func (p Props) Time(name string) time.Time {
	switch v := p[name].(type) {
	case time.Time:
		return v.UTC()
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// StrictString returns a string property; ok is false when it is absent,
// and err non-nil when it is present but not a string.
func (p Props) StrictString(name string) (s string, ok bool, err error) {
	v, ok := p[name]
	if !ok || v == nil {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", true, fmt.Errorf("property %s is %T %v, want a string", name, v, v)
	}
	return s, true, nil
}

// StrictInt returns an integer property written as Edm.Int32, Edm.Int64 or
// a decimal string; ok is false when it is absent, err non-nil when it is
// present but not an integer.
func (p Props) StrictInt(name string) (n int64, ok bool, err error) {
	v, ok := p[name]
	if !ok || v == nil {
		return 0, false, nil
	}
	switch x := v.(type) {
	case json.Number:
		n, err = x.Int64()
	case string:
		n, err = strconv.ParseInt(strings.TrimSpace(x), 10, 64)
	case int:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case float64:
		n = int64(x)
		if float64(n) != x {
			err = fmt.Errorf("not an integer")
		}
	default:
		err = fmt.Errorf("type %T", v)
	}
	if err != nil {
		return 0, true, fmt.Errorf("property %s is %v, want an integer", name, v)
	}
	return n, true, nil
}

// OpKind is the kind of a transaction operation.
type OpKind int

// Operation kinds.
const (
	// Insert adds an entity; it fails if the row exists.
	Insert OpKind = iota + 1
	// Delete removes an entity whose ETag matches IfMatch ("" = any); it
	// fails if the row does not exist.
	Delete
	// Merge sets Props on an existing entity whose ETag matches IfMatch
	// ("" = any), keeping its other properties; it fails if the row does
	// not exist.
	Merge
	// Replace replaces an existing entity whose ETag matches IfMatch ("" =
	// any); it fails if the row does not exist.
	Replace
	// Upsert inserts an entity or replaces it, unconditionally.
	Upsert
	// UpsertMerge inserts an entity or merges Props into it,
	// unconditionally.
	UpsertMerge
)

// String names the operation kind.
func (k OpKind) String() string {
	switch k {
	case Insert:
		return "insert"
	case Delete:
		return "delete"
	case Merge:
		return "merge"
	case Replace:
		return "replace"
	case Upsert:
		return "upsert"
	case UpsertMerge:
		return "upsert-merge"
	}
	return "OpKind(" + strconv.Itoa(int(k)) + ")"
}

// conditional reports whether the kind takes IfMatch and needs the row.
func (k OpKind) conditional() bool { return k == Delete || k == Merge || k == Replace }

// Op is one operation of a transaction.
type Op struct {
	Kind                 OpKind
	PartitionKey, RowKey string
	// Props are what Insert, Merge, Replace and the upserts write.
	Props Props
	// IfMatch is the ETag a Delete, Merge or Replace requires ("" or "*"
	// = any).
	IfMatch string
}

// Query selects entities whose RowKey lies in [From, To) and that meet
// every condition of Where, in PartitionKey and RowKey order: of one
// partition, or of the partitions in [PartitionFrom, PartitionTo] when
// Partition is empty.
type Query struct {
	// Partition is the PartitionKey.
	Partition string
	// PartitionFrom and PartitionTo, when Partition is empty, bound the
	// PartitionKeys selected (both inclusive).
	PartitionFrom, PartitionTo string
	// From is the inclusive lower RowKey bound ("" = from the start).
	From string
	// To is the exclusive upper RowKey bound ("" = to the end).
	To string
	// Where are conditions on properties, all of which must hold.
	Where []Cond
	// Select, when non-empty, limits the properties returned
	// (PartitionKey and RowKey are always returned).
	Select []string
	// Top is the page size (0 = the service's maximum, MaxPage).
	Top int
	// Continuation resumes after the page that returned it.
	Continuation string
}

// CmpOp is a comparison of a condition.
type CmpOp string

// Comparisons.
const (
	Eq CmpOp = "eq"
	Ne CmpOp = "ne"
	Lt CmpOp = "lt"
	Le CmpOp = "le"
	Gt CmpOp = "gt"
	Ge CmpOp = "ge"
)

// Cond is a condition on a property: Prop Op Value, where Value is a
// string, a bool or a time.Time (compared as Edm.DateTime). An entity
// without the property never meets it.
type Cond struct {
	Prop  string
	Op    CmpOp
	Value any
}

// Page is one page of query results.
type Page struct {
	// Entities are in PartitionKey and RowKey order.
	Entities []Entity
	// Continuation is non-empty when more entities may follow.
	Continuation string
}

// All reads every page of q with t and returns the entities; stop bounds
// how many it reads (0 = no bound; the query then stops at the page that
// reaches it).
func All(ctx context.Context, t Table, q Query, stop int) ([]Entity, error) {
	var out []Entity
	for {
		p, err := t.Query(ctx, q)
		if err != nil {
			return out, err
		}
		out = append(out, p.Entities...)
		if p.Continuation == "" || (stop > 0 && len(out) >= stop) {
			return out, nil
		}
		q.Continuation = p.Continuation
	}
}

// checkTxn enforces Azure's rules of an entity-group transaction before
// anything is sent (Azurite does not enforce all of them): at most MaxOps
// operations, one partition, no row twice, known kinds.
func checkTxn(name string, ops []Op) error {
	if len(ops) > MaxOps {
		return fmt.Errorf("submit to %s: %w: %d operations, a transaction holds at most %d", name, storage.ErrBadRequest, len(ops), MaxOps)
	}
	seen := make(map[string]bool, len(ops))
	for i, op := range ops {
		switch {
		case op.Kind < Insert || op.Kind > UpsertMerge:
			return fmt.Errorf("submit to %s: %w: unknown operation %v", name, storage.ErrBadRequest, op.Kind)
		case op.PartitionKey != ops[0].PartitionKey:
			return fmt.Errorf("submit to %s: %w: operation %d is in partition %q, the transaction in %q", name, storage.ErrBadRequest, i, op.PartitionKey, ops[0].PartitionKey)
		case seen[op.RowKey]:
			return fmt.Errorf("submit to %s: %w: row %q appears twice in one transaction", name, storage.ErrBadRequest, op.RowKey)
		}
		seen[op.RowKey] = true
	}
	return nil
}
