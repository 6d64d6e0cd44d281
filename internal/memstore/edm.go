package memstore

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// edm is an entity property's type.
type edm uint8

const (
	edmString edm = iota
	edmBool
	edmInt32
	edmInt64
	edmDouble
	edmDateTime
	edmGuid
	edmBinary
)

var edmNames = [...]string{"Edm.String", "Edm.Boolean", "Edm.Int32", "Edm.Int64", "Edm.Double", "Edm.DateTime", "Edm.Guid", "Edm.Binary"}

func (t edm) String() string { return edmNames[t] }

// value is a typed value: of a property or a filter's literal. v holds a
// string (String, Guid), bool, int64 (Int32, Int64), float64, time.Time
// or []byte.
type value struct {
	typ edm
	v   any
}

type property struct {
	name string
	value
}

// entity is a stored entity; props are sorted by name. A stored entity is
// never changed: a write replaces it, so a query's page may hold it.
type entity struct {
	pk, rk string
	props  []property
	ts     time.Time
	etag   string
}

// EdmTime is how the service writes Edm.DateTime values and Timestamps:
// 100 ns precision.
const edmTime = "2006-01-02T15:04:05.0000000Z"

func (e *entity) prop(name string) (value, bool) {
	switch name {
	case "PartitionKey":
		return value{edmString, e.pk}, true
	case "RowKey":
		return value{edmString, e.rk}, true
	case "Timestamp":
		return value{edmDateTime, e.ts}, true
	}
	i, ok := slices.BinarySearchFunc(e.props, name, func(p property, n string) int { return strings.Compare(p.name, n) })
	if !ok {
		return value{}, false
	}
	return e.props[i].value, true
}

func errInput(format string, args ...any) error {
	return fail(http.StatusBadRequest, "InvalidInput", format, args...)
}

// utf16Len is the length of s in UTF-16 code units, the unit of the
// service's limits.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r > 0xffff {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// checkKey applies the service's rules to a PartitionKey or RowKey.
func checkKey(which, k string) error {
	if utf16Len(k) > 1024 {
		return fail(http.StatusBadRequest, "OutOfRangeInput", "The '%s' parameter of value is out of range: longer than 1 KiB.", which)
	}
	for _, r := range k {
		if r == '/' || r == '\\' || r == '#' || r == '?' || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fail(http.StatusBadRequest, "OutOfRangeInput", "The '%s' parameter of value %q is out of range: it holds the character %q.", which, k, r)
		}
	}
	if !utf8.ValidString(k) {
		return fail(http.StatusBadRequest, "OutOfRangeInput", "The '%s' parameter is not valid UTF-8.", which)
	}
	return nil
}

// decodeEntity parses an entity's JSON body: its keys (when present) and
// its properties, typed by their annotations or, without one, by their
// JSON form (a string, a boolean, an integer that fits Int32, else a
// Double). Timestamp and odata.* members are ignored, as are nulls.
func decodeEntity(body []byte) (pk, rk *string, props []property, err error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, nil, nil, errInput("The request body is not a JSON object: %v", err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a refusal names the same property every time
	for _, k := range keys {
		v := m[k]
		switch {
		case k == "PartitionKey" || k == "RowKey":
			s, ok := v.(string)
			if !ok {
				return nil, nil, nil, errInput("%s must be a string", k)
			}
			if k == "PartitionKey" {
				pk = &s
			} else {
				rk = &s
			}
			continue
		case k == "Timestamp", strings.HasPrefix(k, "odata."), strings.HasSuffix(k, "@odata.type"):
			continue
		}
		if v == nil {
			continue
		}
		var annot string
		if a, ok := m[k+"@odata.type"]; ok {
			if annot, ok = a.(string); !ok {
				return nil, nil, nil, errInput("%s@odata.type must be a string", k)
			}
		}
		val, err := typed(k, v, annot)
		if err != nil {
			return nil, nil, nil, err
		}
		if len(k) > 255 {
			return nil, nil, nil, fail(http.StatusBadRequest, "PropertyNameTooLong", "The property name exceeds the maximum allowed length (255).")
		}
		props = append(props, property{name: k, value: val})
	}
	if len(props) > 252 {
		return nil, nil, nil, fail(http.StatusBadRequest, "TooManyProperties", "The entity contains more properties than allowed (252).")
	}
	return pk, rk, props, nil
}

func isIntLiteral(s string) bool { return !strings.ContainsAny(s, ".eE") }

// typed converts a decoded JSON value of property name to its type.
func typed(name string, v any, annot string) (value, error) {
	bad := func() (value, error) {
		return value{}, errInput("property %s: %v is not a valid %s", name, v, cmp.Or(annot, "value"))
	}
	tooLarge := func() (value, error) {
		return value{}, fail(http.StatusBadRequest, "PropertyValueTooLarge", "The property value of %s exceeds the maximum allowed size (64KB).", name)
	}
	switch annot {
	case "":
		switch x := v.(type) {
		case string:
			if utf16Len(x) > 32<<10 {
				return tooLarge()
			}
			return value{edmString, x}, nil
		case bool:
			return value{edmBool, x}, nil
		case json.Number:
			if isIntLiteral(x.String()) {
				if n, err := strconv.ParseInt(x.String(), 10, 32); err == nil {
					return value{edmInt32, n}, nil
				}
			}
			f, err := strconv.ParseFloat(x.String(), 64)
			if err != nil {
				return bad()
			}
			return value{edmDouble, f}, nil
		}
		return value{}, errInput("property %s: a %T is not a valid property value", name, v)
	case "Edm.String":
		if s, ok := v.(string); ok {
			if utf16Len(s) > 32<<10 {
				return tooLarge()
			}
			return value{edmString, s}, nil
		}
	case "Edm.Boolean":
		if b, ok := v.(bool); ok {
			return value{edmBool, b}, nil
		}
	case "Edm.Int32", "Edm.Int64":
		var s string
		switch x := v.(type) {
		case json.Number:
			s = x.String()
		case string:
			s = x
		default:
			return bad()
		}
		bits, t := 32, edmInt32
		if annot == "Edm.Int64" {
			bits, t = 64, edmInt64
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, bits)
		if err != nil {
			return bad()
		}
		return value{t, n}, nil
	case "Edm.Double":
		switch x := v.(type) {
		case json.Number:
			f, err := strconv.ParseFloat(x.String(), 64)
			if err == nil {
				return value{edmDouble, f}, nil
			}
		case string:
			switch x {
			case "NaN":
				return value{edmDouble, math.NaN()}, nil
			case "Infinity", "INF":
				return value{edmDouble, math.Inf(1)}, nil
			case "-Infinity", "-INF":
				return value{edmDouble, math.Inf(-1)}, nil
			}
			if f, err := strconv.ParseFloat(x, 64); err == nil && !math.IsInf(f, 0) {
				return value{edmDouble, f}, nil
			}
		}
	case "Edm.DateTime":
		if s, ok := v.(string); ok {
			if t, ok := parseDateTime(s); ok {
				return value{edmDateTime, t}, nil
			}
		}
	case "Edm.Guid":
		if s, ok := v.(string); ok && validGUID(s) {
			return value{edmGuid, s}, nil
		}
	case "Edm.Binary":
		if s, ok := v.(string); ok {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return bad()
			}
			if len(b) > 64<<10 {
				return tooLarge()
			}
			return value{edmBinary, b}, nil
		}
	default:
		return value{}, errInput("property %s: unknown type %q", name, annot)
	}
	return bad()
}

// parseDateTime reads an Edm.DateTime: RFC 3339, or without a zone (UTC,
// as the service takes it).
func parseDateTime(s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		if t, err = time.Parse("2006-01-02T15:04:05.999999999", s); err != nil {
			return time.Time{}, false
		}
	}
	return t.UTC().Truncate(100 * time.Nanosecond), true
}

// entitySize estimates an entity's size by the service's formula.
func entitySize(pk, rk string, props []property) int {
	n := 4 + 2*utf16Len(pk) + 2*utf16Len(rk)
	for _, p := range props {
		n += 8 + 2*utf16Len(p.name)
		switch p.typ {
		case edmString:
			n += 4 + 2*utf16Len(p.v.(string))
		case edmBool:
			n++
		case edmInt32:
			n += 4
		case edmInt64, edmDouble, edmDateTime:
			n += 8
		case edmGuid:
			n += 16
		case edmBinary:
			n += 4 + len(p.v.([]byte))
		}
	}
	return n
}

// metaLevel is the JSON metadata a response carries.
type metaLevel int

const (
	metaNone metaLevel = iota
	metaMinimal
	metaFull
)

// level reads the metadata level from $format or Accept (minimal by
// default).
func level(r *request) metaLevel {
	v := cmp.Or(r.q("$format"), r.header.Get("Accept"))
	switch {
	case strings.Contains(v, "odata=nometadata"):
		return metaNone
	case strings.Contains(v, "odata=fullmetadata"):
		return metaFull
	}
	return metaMinimal
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				switch c {
				case '\n':
					b = append(b, '\\', 'n')
				case '\r':
					b = append(b, '\\', 'r')
				case '\t':
					b = append(b, '\\', 't')
				default:
					b = fmt.Appendf(b, `\u%04x`, c)
				}
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

func formatDouble(f float64) (text string, special bool) {
	switch {
	case math.IsNaN(f):
		return "NaN", true
	case math.IsInf(f, 1):
		return "Infinity", true
	case math.IsInf(f, -1):
		return "-Infinity", true
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s, false
}

// appendValue appends v as JSON, with its type annotation first when the
// level asks for it (minimal: the types JSON cannot tell; full: every
// type but String).
func appendProp(b []byte, name string, v value, lvl metaLevel) []byte {
	annotate := func() {
		b = appendJSONString(b, name+"@odata.type")
		b = append(b, ':')
		b = appendJSONString(b, v.typ.String())
		b = append(b, ',')
	}
	switch v.typ {
	case edmString:
		b = appendJSONString(b, name)
		b = append(b, ':')
		return appendJSONString(b, v.v.(string))
	case edmBool:
		if lvl == metaFull {
			annotate()
		}
		b = appendJSONString(b, name)
		return strconv.AppendBool(append(b, ':'), v.v.(bool))
	case edmInt32:
		if lvl == metaFull {
			annotate()
		}
		b = appendJSONString(b, name)
		return strconv.AppendInt(append(b, ':'), v.v.(int64), 10)
	case edmDouble:
		s, special := formatDouble(v.v.(float64))
		if lvl == metaFull || special && lvl == metaMinimal {
			annotate()
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
		if special {
			return appendJSONString(b, s)
		}
		return append(b, s...)
	}
	if lvl != metaNone {
		annotate()
	}
	b = appendJSONString(b, name)
	b = append(b, ':')
	switch v.typ {
	case edmInt64:
		return appendJSONString(b, strconv.FormatInt(v.v.(int64), 10))
	case edmDateTime:
		return appendJSONString(b, v.v.(time.Time).Format(edmTime))
	case edmGuid:
		return appendJSONString(b, v.v.(string))
	case edmBinary:
		return appendJSONString(b, base64.StdEncoding.EncodeToString(v.v.([]byte)))
	}
	return append(b, "null"...)
}

// appendEntity appends e as JSON: its odata members (metadata, when not
// empty, is the odata.metadata URL), keys, Timestamp and properties;
// selected, when not nil, limits the properties (and keys) returned.
func appendEntity(b []byte, e *entity, lvl metaLevel, metadata, typeName, editURL string, selected []string) []byte {
	b = append(b, '{')
	first := true
	comma := func() {
		if !first {
			b = append(b, ',')
		}
		first = false
	}
	if lvl != metaNone {
		if metadata != "" {
			comma()
			b = append(b, `"odata.metadata":`...)
			b = appendJSONString(b, metadata)
		}
		if lvl == metaFull {
			comma()
			b = append(b, `"odata.type":`...)
			b = appendJSONString(b, typeName)
			comma()
			b = append(b, `"odata.id":`...)
			b = appendJSONString(b, editURL)
		}
		comma()
		b = append(b, `"odata.etag":`...)
		b = appendJSONString(b, e.etag)
		if lvl == metaFull {
			comma()
			b = append(b, `"odata.editLink":`...)
			b = appendJSONString(b, editURL)
		}
	}
	want := func(n string) bool { return selected == nil || slices.Contains(selected, n) }
	if want("PartitionKey") {
		comma()
		b = appendProp(b, "PartitionKey", value{edmString, e.pk}, lvl)
	}
	if want("RowKey") {
		comma()
		b = appendProp(b, "RowKey", value{edmString, e.rk}, lvl)
	}
	if want("Timestamp") {
		comma()
		tl := lvl
		if tl == metaMinimal {
			tl = metaNone // the system property's type is known
		}
		b = appendProp(b, "Timestamp", value{edmDateTime, e.ts}, tl)
	}
	for _, p := range e.props {
		if want(p.name) {
			comma()
			b = appendProp(b, p.name, p.value, lvl)
		}
	}
	return append(b, '}')
}
