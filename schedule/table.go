package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Table is the storage seam of the schedule package: the few operations on
// one Azure table that the Client and the Mover need. AzureTable implements
// it over aztables; MemoryTable in memory for tests. Errors are translated
// at this boundary: implementations return errors that wrap storage's
// sentinels (storage.ErrNotFound, ErrAlreadyExists, ErrPreconditionFailed…).
type Table interface {
	// Query returns one page of the entities of q.Partition whose RowKey
	// lies in [q.From, q.To), in RowKey order.
	Query(ctx context.Context, q Query) (Page, error)
	// Get reads one entity.
	Get(ctx context.Context, partitionKey, rowKey string) (Entity, error)
	// Submit applies ops atomically: all succeed or none does. All ops must
	// be in one partition, touch distinct rows and number at most MaxOps.
	// On success it returns the new ETag of the row each op wrote (""
	// for a delete), or nil when the implementation cannot tell; the Mover
	// then re-reads its fence row after each transaction.
	Submit(ctx context.Context, ops []Op) (etags []string, err error)
}

// MaxOps is the most operations a table transaction may hold.
const MaxOps = 100

// Query selects a RowKey range of one partition.
type Query struct {
	// Partition is the PartitionKey.
	Partition string
	// From is the inclusive lower RowKey bound ("" = from the start).
	From string
	// To is the exclusive upper RowKey bound ("" = to the end).
	To string
	// Select, when non-empty, limits the properties returned (PartitionKey
	// and RowKey are always returned).
	Select []string
	// Top is the page size (0 = the service's default and maximum, 1000).
	Top int32
	// Continuation resumes after the page that returned it.
	Continuation string
	// Type, when set, keeps only entities whose Type property equals it
	// (filtered by the service).
	Type string
	// Recurring keeps only entities with a non-empty Recurrence property
	// (filtered by the service).
	Recurring bool
}

// keeps reports whether an entity's properties pass q's Type and
// Recurring filters (for tables that filter in memory).
func (q Query) keeps(props map[string]any) bool {
	if q.Type != "" {
		if t, _ := props["Type"].(string); t != q.Type {
			return false
		}
	}
	if q.Recurring {
		if r, _ := props["Recurrence"].(string); r == "" {
			return false
		}
	}
	return true
}

// Page is one page of query results.
type Page struct {
	// Entities are in RowKey order.
	Entities []Entity
	// Continuation is non-empty when more entities may follow.
	Continuation string
}

// Entity is a table entity as read.
type Entity struct {
	// PartitionKey and RowKey identify the entity.
	PartitionKey, RowKey string
	// ETag is the entity's version, used for conditional writes.
	ETag string
	// Props are the other properties as decoded from JSON: strings, bools
	// and json.Number values, with any "Name@odata.type" annotations kept
	// (so copying Props preserves types such as Edm.Int64). The service's
	// Timestamp and odata.* metadata are removed.
	Props map[string]any
	// Raw is the entity's JSON as read (for setting malformed rows aside).
	Raw string
}

// OpKind is the kind of a transaction operation.
type OpKind int

// Operation kinds.
const (
	// OpInsert adds an entity; it fails if the row exists.
	OpInsert OpKind = iota + 1
	// OpDelete deletes an entity if its ETag matches IfMatch ("" = any).
	OpDelete
	// OpMerge merges Props into an existing entity if its ETag matches
	// IfMatch ("" = any); it fails if the row does not exist.
	OpMerge
	// OpReplace replaces an existing entity if its ETag matches IfMatch
	// ("" = any); it fails if the row does not exist.
	OpReplace
)

// String names the operation kind.
func (k OpKind) String() string {
	switch k {
	case OpInsert:
		return "insert"
	case OpDelete:
		return "delete"
	case OpMerge:
		return "merge"
	case OpReplace:
		return "replace"
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op is one operation of a transaction.
type Op struct {
	Kind                 OpKind
	PartitionKey, RowKey string
	// Props are the properties written by insert, merge and replace. Values
	// may be string, bool, int (Edm.Int32), int64 (written as Edm.Int64),
	// json.Number, or anything Props of a read Entity holds.
	Props map[string]any
	// IfMatch is the ETag a delete, merge or replace requires ("" = any).
	IfMatch string
}

// encodeEntity renders an entity's JSON body as the Table service expects it.
func encodeEntity(pk, rk string, props map[string]any) ([]byte, error) {
	m := make(map[string]any, len(props)+4)
	for k, v := range props {
		switch x := v.(type) {
		case int64:
			m[k] = strconv.FormatInt(x, 10)
			m[k+"@odata.type"] = "Edm.Int64"
		case int:
			if x < -1<<31 || x > 1<<31-1 {
				m[k] = strconv.Itoa(x)
				m[k+"@odata.type"] = "Edm.Int64"
			} else {
				m[k] = x
			}
		default:
			m[k] = v
		}
	}
	m["PartitionKey"] = pk
	m["RowKey"] = rk
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode entity %s/%s: %w", pk, rk, err)
	}
	return b, nil
}

// decodeEntity parses an entity's JSON as returned by the service.
func decodeEntity(raw []byte, etag string) (Entity, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return Entity{}, fmt.Errorf("decode entity: %w", err)
	}
	e := Entity{Raw: string(raw), ETag: etag, Props: make(map[string]any, len(m))}
	for k, v := range m {
		switch {
		case k == "PartitionKey":
			e.PartitionKey, _ = v.(string)
		case k == "RowKey":
			e.RowKey, _ = v.(string)
		case k == "odata.etag":
			if e.ETag == "" {
				e.ETag, _ = v.(string)
			}
		case strings.HasPrefix(k, "odata."), k == "Timestamp", k == "Timestamp@odata.type",
			k == "PartitionKey@odata.type", k == "RowKey@odata.type":
		default:
			e.Props[k] = v
		}
	}
	return e, nil
}

// propString returns a string property; ok is false when it is absent, and
// err non-nil when it is present but not a string.
func propString(props map[string]any, name string) (s string, ok bool, err error) {
	v, ok := props[name]
	if !ok || v == nil {
		return "", false, nil
	}
	s, isStr := v.(string)
	if !isStr {
		return "", true, fmt.Errorf("property %s is %T %v, want a string", name, v, v)
	}
	return s, true, nil
}

// propInt returns an integer property written as Edm.Int32, Edm.Int64 or a
// decimal string; ok is false when it is absent.
func propInt(props map[string]any, name string) (n int64, ok bool, err error) {
	v, ok := props[name]
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

// propBool returns a boolean property (absent = false).
func propBool(props map[string]any, name string) bool {
	switch x := props[name].(type) {
	case bool:
		return x
	case string:
		b, _ := strconv.ParseBool(x)
		return b
	}
	return false
}

// copyProps returns a shallow copy of p.
func copyProps(p map[string]any) map[string]any {
	out := make(map[string]any, len(p))
	for k, v := range p {
		out[k] = v
	}
	return out
}
