package memstore

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"
)

// A filter is a parsed $filter: the subset of OData the Table service
// accepts. Comparisons are typed: a property compares with a literal (or
// another property) of its own type, integers and doubles with each
// other; a comparison with a property the entity lacks, or of values of
// different types, is unknown, and unknown never matches (not of unknown
// is unknown: a filter never selects an entity for lacking a property).
type filter interface {
	eval(get func(string) (value, bool)) tri
}

// tri is a truth value of three-valued logic.
type tri int8

const (
	triFalse tri = iota
	triTrue
	triUnknown
)

type andNode struct{ l, r filter }
type orNode struct{ l, r filter }
type notNode struct{ x filter }

// operand is a property or a literal.
type operand struct {
	prop string // "" for a literal
	lit  value
}

type cmpNode struct {
	a, b operand
	op   string
}

// boolNode is a bare operand used as a condition: a boolean property or
// literal.
type boolNode struct{ a operand }

func (n andNode) eval(get func(string) (value, bool)) tri {
	l := n.l.eval(get)
	if l == triFalse {
		return triFalse
	}
	r := n.r.eval(get)
	switch {
	case r == triFalse:
		return triFalse
	case l == triTrue && r == triTrue:
		return triTrue
	}
	return triUnknown
}

func (n orNode) eval(get func(string) (value, bool)) tri {
	l := n.l.eval(get)
	if l == triTrue {
		return triTrue
	}
	r := n.r.eval(get)
	switch {
	case r == triTrue:
		return triTrue
	case l == triFalse && r == triFalse:
		return triFalse
	}
	return triUnknown
}

func (n notNode) eval(get func(string) (value, bool)) tri {
	switch n.x.eval(get) {
	case triTrue:
		return triFalse
	case triFalse:
		return triTrue
	}
	return triUnknown
}

func (o operand) resolve(get func(string) (value, bool)) (value, bool) {
	if o.prop == "" {
		return o.lit, true
	}
	return get(o.prop)
}

func (n boolNode) eval(get func(string) (value, bool)) tri {
	v, ok := n.a.resolve(get)
	if !ok || v.typ != edmBool {
		return triUnknown
	}
	if v.v.(bool) {
		return triTrue
	}
	return triFalse
}

func (n cmpNode) eval(get func(string) (value, bool)) tri {
	a, ok := n.a.resolve(get)
	if !ok {
		return triUnknown
	}
	b, ok := n.b.resolve(get)
	if !ok {
		return triUnknown
	}
	c, ok := compare(a, b)
	if !ok {
		return triUnknown
	}
	var r bool
	switch n.op {
	case "eq":
		r = c == 0
	case "ne":
		r = c != 0
	case "lt":
		r = c < 0
	case "le":
		r = c <= 0
	case "gt":
		r = c > 0
	case "ge":
		r = c >= 0
	}
	if r {
		return triTrue
	}
	return triFalse
}

func isNumber(t edm) bool { return t == edmInt32 || t == edmInt64 || t == edmDouble }

// compare orders two values of comparable types; ok is false when their
// types do not compare.
func compare(a, b value) (int, bool) {
	if isNumber(a.typ) && isNumber(b.typ) {
		if a.typ != edmDouble && b.typ != edmDouble {
			x, y := a.v.(int64), b.v.(int64)
			return cmpInt(x, y), true
		}
		x, y := toFloat(a), toFloat(b)
		if math.IsNaN(x) || math.IsNaN(y) {
			return 0, false
		}
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	}
	if a.typ != b.typ {
		return 0, false
	}
	switch a.typ {
	case edmString:
		return strings.Compare(a.v.(string), b.v.(string)), true
	case edmGuid:
		return strings.Compare(strings.ToLower(a.v.(string)), strings.ToLower(b.v.(string))), true
	case edmBool:
		x, y := a.v.(bool), b.v.(bool)
		switch {
		case x == y:
			return 0, true
		case !x:
			return -1, true
		}
		return 1, true
	case edmDateTime:
		return a.v.(time.Time).Compare(b.v.(time.Time)), true
	case edmBinary:
		return bytes.Compare(a.v.([]byte), b.v.([]byte)), true
	}
	return 0, false
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func toFloat(v value) float64 {
	if v.typ == edmDouble {
		return v.v.(float64)
	}
	return float64(v.v.(int64))
}

// token kinds of the filter lexer.
const (
	tkEOF = iota
	tkIdent
	tkLit
	tkOpen
	tkClose
)

type tok struct {
	kind int
	text string // identifier (as written)
	lit  value
	pos  int
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// quoted reads an OData string literal that starts with the quote at
// s[i] (two quotes in a row stand for one) and returns its text and the
// index after it.
func quoted(s string, i int) (string, int, bool) {
	var b strings.Builder
	for j := i + 1; j < len(s); j++ {
		if s[j] == '\'' {
			if j+1 < len(s) && s[j+1] == '\'' {
				b.WriteByte('\'')
				j++
				continue
			}
			return b.String(), j + 1, true
		}
		b.WriteByte(s[j])
	}
	return "", 0, false
}

func lex(s string) ([]tok, error) {
	var toks []tok
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			i++
		case c == '(':
			toks = append(toks, tok{kind: tkOpen, pos: i})
			i++
		case c == ')':
			toks = append(toks, tok{kind: tkClose, pos: i})
			i++
		case c == '\'':
			str, next, ok := quoted(s, i)
			if !ok {
				return nil, errInput("$filter: unterminated string at %d", i)
			}
			toks = append(toks, tok{kind: tkLit, lit: value{edmString, str}, pos: i})
			i = next
		case c == '-' || c >= '0' && c <= '9':
			j := i + 1
			for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E' ||
				(s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			text := s[i:j]
			suffix := byte(0)
			if j < len(s) && strings.IndexByte("LlDdMmFf", s[j]) >= 0 {
				suffix = s[j]
				j++
			}
			if j < len(s) && isIdentChar(s[j]) {
				return nil, errInput("$filter: malformed number at %d", i)
			}
			v, err := number(text, suffix)
			if err != nil {
				return nil, err
			}
			toks = append(toks, tok{kind: tkLit, lit: v, pos: i})
			i = j
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			word := s[i:j]
			if j < len(s) && s[j] == '\'' {
				str, next, ok := quoted(s, j)
				if !ok {
					return nil, errInput("$filter: unterminated literal at %d", i)
				}
				v, err := typedLiteral(word, str)
				if err != nil {
					return nil, err
				}
				toks = append(toks, tok{kind: tkLit, lit: v, pos: i})
				i = next
				continue
			}
			switch strings.ToLower(word) {
			case "true", "false":
				toks = append(toks, tok{kind: tkLit, lit: value{edmBool, strings.ToLower(word) == "true"}, pos: i})
			default:
				toks = append(toks, tok{kind: tkIdent, text: word, pos: i})
			}
			i = j
		default:
			return nil, errInput("$filter: unexpected %q at %d", c, i)
		}
	}
	return append(toks, tok{kind: tkEOF, pos: len(s)}), nil
}

func number(text string, suffix byte) (value, error) {
	switch suffix {
	case 'L', 'l':
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return value{}, errInput("$filter: %sL is not an Int64", text)
		}
		return value{edmInt64, n}, nil
	case 0:
		if isIntLiteral(text) {
			if n, err := strconv.ParseInt(text, 10, 64); err == nil {
				if n >= math.MinInt32 && n <= math.MaxInt32 {
					return value{edmInt32, n}, nil
				}
				return value{edmInt64, n}, nil
			}
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return value{}, errInput("$filter: %s is not a number", text)
	}
	return value{edmDouble, f}, nil
}

func typedLiteral(prefix, text string) (value, error) {
	switch strings.ToLower(prefix) {
	case "datetime":
		if t, ok := parseDateTime(text); ok {
			return value{edmDateTime, t}, nil
		}
	case "guid":
		if validGUID(text) {
			return value{edmGuid, text}, nil
		}
	case "x", "binary":
		if b, err := hex.DecodeString(text); err == nil {
			return value{edmBinary, b}, nil
		}
		if b, err := base64.StdEncoding.DecodeString(text); err == nil && strings.ToLower(prefix) == "binary" {
			return value{edmBinary, b}, nil
		}
	case "datetimeoffset":
		if t, ok := parseDateTime(text); ok {
			return value{edmDateTime, t}, nil
		}
	default:
		return value{}, errInput("$filter: unknown literal %s'%s'", prefix, text)
	}
	return value{}, errInput("$filter: %s'%s' is not a valid literal", prefix, text)
}

type parser struct {
	toks []tok
	i    int
}

func (p *parser) peek() tok { return p.toks[p.i] }
func (p *parser) next() tok {
	t := p.toks[p.i]
	if t.kind != tkEOF {
		p.i++
	}
	return t
}

func (p *parser) keyword(w string) bool {
	t := p.peek()
	if t.kind == tkIdent && strings.EqualFold(t.text, w) {
		p.i++
		return true
	}
	return false
}

// parseFilter parses a $filter.
func parseFilter(s string) (filter, error) {
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	f, err := p.or()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tkEOF {
		return nil, errInput("$filter: unexpected input at %d", t.pos)
	}
	return f, nil
}

func (p *parser) or() (filter, error) {
	l, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.keyword("or") {
		r, err := p.and()
		if err != nil {
			return nil, err
		}
		l = orNode{l, r}
	}
	return l, nil
}

func (p *parser) and() (filter, error) {
	l, err := p.not()
	if err != nil {
		return nil, err
	}
	for p.keyword("and") {
		r, err := p.not()
		if err != nil {
			return nil, err
		}
		l = andNode{l, r}
	}
	return l, nil
}

func (p *parser) not() (filter, error) {
	if p.keyword("not") {
		x, err := p.not()
		if err != nil {
			return nil, err
		}
		return notNode{x}, nil
	}
	return p.primary()
}

var cmpOps = map[string]bool{"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true}

func (p *parser) primary() (filter, error) {
	t := p.peek()
	if t.kind == tkOpen {
		p.next()
		f, err := p.or()
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tkClose {
			return nil, errInput("$filter: missing ) at %d", c.pos)
		}
		return f, nil
	}
	a, err := p.operand()
	if err != nil {
		return nil, err
	}
	if op := p.peek(); op.kind == tkIdent && cmpOps[strings.ToLower(op.text)] {
		p.next()
		b, err := p.operand()
		if err != nil {
			return nil, err
		}
		return cmpNode{a: a, b: b, op: strings.ToLower(op.text)}, nil
	}
	return boolNode{a}, nil
}

func (p *parser) operand() (operand, error) {
	t := p.next()
	switch t.kind {
	case tkLit:
		return operand{lit: t.lit}, nil
	case tkIdent:
		switch strings.ToLower(t.text) {
		case "and", "or", "not", "eq", "ne", "lt", "le", "gt", "ge":
			return operand{}, errInput("$filter: unexpected %s at %d", t.text, t.pos)
		}
		return operand{prop: t.text}, nil
	}
	return operand{}, errInput("$filter: expected a property or a literal at %d", t.pos)
}

// keyRange bounds the keys a filter can select, from the comparisons of
// PartitionKey and RowKey with string literals among its top-level
// conjunction (inclusive bounds; the filter itself still decides).
type keyRange struct {
	pkLo, pkHi, rkLo, rkHi             string
	hasPkLo, hasPkHi, hasRkLo, hasRkHi bool
}

func (k *keyRange) bound(prop, op, v string) {
	lo, hi := op == "eq" || op == "gt" || op == "ge", op == "eq" || op == "lt" || op == "le"
	switch prop {
	case "PartitionKey":
		if lo && (!k.hasPkLo || v > k.pkLo) {
			k.pkLo, k.hasPkLo = v, true
		}
		if hi && (!k.hasPkHi || v < k.pkHi) {
			k.pkHi, k.hasPkHi = v, true
		}
	case "RowKey":
		if lo && (!k.hasRkLo || v > k.rkLo) {
			k.rkLo, k.hasRkLo = v, true
		}
		if hi && (!k.hasRkHi || v < k.rkHi) {
			k.rkHi, k.hasRkHi = v, true
		}
	}
}

var flipped = map[string]string{"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}

func rangeOf(f filter) keyRange {
	var k keyRange
	var walk func(f filter)
	walk = func(f filter) {
		switch n := f.(type) {
		case andNode:
			walk(n.l)
			walk(n.r)
		case cmpNode:
			a, b, op := n.a, n.b, n.op
			if a.prop == "" {
				a, b, op = b, a, flipped[op]
			}
			if a.prop != "" && b.prop == "" && b.lit.typ == edmString && op != "ne" {
				k.bound(a.prop, op, b.lit.v.(string))
			}
		}
	}
	if f != nil {
		walk(f)
	}
	return k
}
