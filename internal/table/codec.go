package table

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// EdmTime is how Edm.DateTime values are written: the service's own
// precision, 100 ns.
const EdmTime = "2006-01-02T15:04:05.0000000Z"

// Encode renders an entity's JSON body as the Table service expects it.
// Typed Go values carry their own type annotation (overriding one copied
// from a read entity); an annotation whose property is absent is dropped.
func Encode(pk, rk string, p Props) ([]byte, error) {
	m := make(map[string]any, 2*len(p)+2)
	for k, v := range p {
		if _, ok := strings.CutSuffix(k, TypeSuffix); ok {
			continue
		}
		switch x := v.(type) {
		case time.Time:
			if !x.IsZero() {
				m[k], m[k+TypeSuffix] = x.UTC().Truncate(100*time.Nanosecond).Format(EdmTime), "Edm.DateTime"
			}
		case int64:
			m[k], m[k+TypeSuffix] = strconv.FormatInt(x, 10), "Edm.Int64"
		case int:
			if x < -1<<31 || x > 1<<31-1 {
				m[k], m[k+TypeSuffix] = strconv.Itoa(x), "Edm.Int64"
			} else {
				m[k] = x
			}
		case int32:
			m[k] = x
		case float64:
			m[k], m[k+TypeSuffix] = x, "Edm.Double"
		default:
			m[k] = v
			// A value as read keeps the annotation it was read with.
			if a, ok := p[k+TypeSuffix]; ok {
				m[k+TypeSuffix] = a
			}
		}
	}
	m["PartitionKey"], m["RowKey"] = pk, rk
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode entity %s/%s: %w", pk, rk, err)
	}
	return b, nil
}

// Decode parses an entity's JSON as the service returns it (etag, when
// not empty, is the entity's ETag from the response headers).
func Decode(raw []byte, etag string) (Entity, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return Entity{}, fmt.Errorf("decode entity: %w", err)
	}
	e := Entity{Raw: string(raw), ETag: etag, Props: make(Props, len(m))}
	for k, v := range m {
		switch {
		case k == "PartitionKey":
			e.PartitionKey, _ = v.(string)
		case k == "RowKey":
			e.RowKey, _ = v.(string)
		case k == "Timestamp":
			s, _ := v.(string)
			e.Timestamp, _ = time.Parse(time.RFC3339Nano, s)
		case k == "odata.etag":
			if e.ETag == "" {
				e.ETag, _ = v.(string)
			}
		case strings.HasPrefix(k, "odata."), k == "Timestamp"+TypeSuffix,
			k == "PartitionKey"+TypeSuffix, k == "RowKey"+TypeSuffix:
		default:
			e.Props[k] = v
		}
	}
	return e, nil
}

// Quote renders s as an OData string literal.
func Quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Filter renders q's selection as an OData filter.
func (q Query) Filter() string {
	parts := []string{"PartitionKey eq " + Quote(q.Partition)}
	if q.Partition == "" {
		parts = []string{"PartitionKey ge " + Quote(q.PartitionFrom), "PartitionKey le " + Quote(q.PartitionTo)}
	}
	if q.From != "" {
		parts = append(parts, "RowKey ge "+Quote(q.From))
	}
	if q.To != "" {
		parts = append(parts, "RowKey lt "+Quote(q.To))
	}
	for _, c := range q.Where {
		parts = append(parts, c.odata())
	}
	return strings.Join(parts, " and ")
}

// odata renders c as an OData filter clause.
func (c Cond) odata() string {
	switch v := c.Value.(type) {
	case time.Time:
		return fmt.Sprintf("%s %s datetime'%s'", c.Prop, c.Op, v.UTC().Format(EdmTime))
	case bool:
		return fmt.Sprintf("%s %s %t", c.Prop, c.Op, v)
	default:
		return fmt.Sprintf("%s %s %s", c.Prop, c.Op, Quote(fmt.Sprint(v)))
	}
}

// match reports whether p meets c, as the service evaluates it: a missing
// property, or one of another type, meets nothing.
func (c Cond) match(p Props) bool {
	raw, ok := p[c.Prop]
	if !ok || raw == nil {
		return false
	}
	annot, _ := p[c.Prop+TypeSuffix].(string)
	var cmp int
	switch v := c.Value.(type) {
	case time.Time:
		if annot != "Edm.DateTime" {
			if _, isTime := raw.(time.Time); !isTime {
				return false
			}
		}
		t := p.Time(c.Prop)
		if t.IsZero() {
			return false
		}
		cmp = t.Compare(v.UTC().Truncate(100 * time.Nanosecond))
	case bool:
		b, isBool := raw.(bool)
		if !isBool {
			return false
		}
		switch {
		case b == v:
			cmp = 0
		case !b:
			cmp = -1
		default:
			cmp = 1
		}
	default:
		s, isStr := raw.(string)
		if !isStr || (annot != "" && annot != "Edm.String") {
			return false
		}
		cmp = strings.Compare(s, fmt.Sprint(v))
	}
	switch c.Op {
	case Eq:
		return cmp == 0
	case Ne:
		return cmp != 0
	case Lt:
		return cmp < 0
	case Le:
		return cmp <= 0
	case Gt:
		return cmp > 0
	case Ge:
		return cmp >= 0
	}
	return false
}

// splitContinuation parses a continuation token of this package's form:
// the next PartitionKey and RowKey joined by a newline.
// Either part may be empty; neither may hold control characters or invalid
// UTF-8, or be longer than a key. (The service's own tokens are opaque
// and may hold any other character.)
func splitContinuation(s string) (pk, rk string, err error) {
	pk, rk, ok := strings.Cut(s, "\n")
	if !ok || !keyLike(pk) || !keyLike(rk) {
		return "", "", fmt.Errorf("malformed continuation %q: want the next PartitionKey and RowKey joined by a newline", s)
	}
	return pk, rk, nil
}

// CheckContinuation reports whether s can be a continuation token of this
// package's form (Page.Continuation).
func CheckContinuation(s string) error {
	_, _, err := splitContinuation(s)
	return err
}

// keyLike reports whether s could be a key or the service's token for one.
func keyLike(s string) bool {
	if len(s) > 1024 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

func unixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
