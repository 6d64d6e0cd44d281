package memstore

import (
	"encoding/base64"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// table is one table: its partitions by key and their keys in order; a
// partition keeps its entities by RowKey and the RowKeys in order.
type table struct {
	name  string
	parts map[string]*partition
	pkeys []string
}

type partition struct {
	rows  map[string]*entity
	rkeys []string
}

func (t *table) get(pk, rk string) *entity {
	if p := t.parts[pk]; p != nil {
		return p.rows[rk]
	}
	return nil
}

func (t *table) put(e *entity) {
	p := t.parts[e.pk]
	if p == nil {
		p = &partition{rows: map[string]*entity{}}
		t.parts[e.pk] = p
		i, _ := slices.BinarySearch(t.pkeys, e.pk)
		t.pkeys = slices.Insert(t.pkeys, i, e.pk)
	}
	if _, ok := p.rows[e.rk]; !ok {
		i, _ := slices.BinarySearch(p.rkeys, e.rk)
		p.rkeys = slices.Insert(p.rkeys, i, e.rk)
	}
	p.rows[e.rk] = e
}

func (t *table) del(pk, rk string) {
	p := t.parts[pk]
	if p == nil {
		return
	}
	if _, ok := p.rows[rk]; !ok {
		return
	}
	delete(p.rows, rk)
	if i, ok := slices.BinarySearch(p.rkeys, rk); ok {
		p.rkeys = slices.Delete(p.rkeys, i, i+1)
	}
	if len(p.rows) == 0 {
		delete(t.parts, pk)
		if i, ok := slices.BinarySearch(t.pkeys, pk); ok {
			t.pkeys = slices.Delete(t.pkeys, i, i+1)
		}
	}
}

// scan calls fn with the entities within k from (npk, nrk) on, in key
// order, until fn returns false.
func (t *table) scan(k keyRange, npk, nrk string, fn func(*entity) bool) {
	startPK := npk
	if k.hasPkLo && k.pkLo > startPK {
		startPK = k.pkLo
	}
	for i, _ := slices.BinarySearch(t.pkeys, startPK); i < len(t.pkeys); i++ {
		pk := t.pkeys[i]
		if k.hasPkHi && pk > k.pkHi {
			return
		}
		p := t.parts[pk]
		startRK := ""
		if pk == npk {
			startRK = nrk
		}
		if k.hasRkLo && k.rkLo > startRK {
			startRK = k.rkLo
		}
		for j, _ := slices.BinarySearch(p.rkeys, startRK); j < len(p.rkeys); j++ {
			rk := p.rkeys[j]
			if k.hasRkHi && rk > k.rkHi {
				break
			}
			if !fn(p.rows[rk]) {
				return
			}
		}
	}
}

// stamp returns the Timestamp of a write now: the clock's time at the
// service's precision, strictly after the previous one, so that every
// version of an entity has an ETag of its own.
func (s *Server) stamp(now time.Time) time.Time {
	t := now.UTC().Truncate(100 * time.Nanosecond)
	if !t.After(s.lastStamp) {
		t = s.lastStamp.Add(100 * time.Nanosecond)
	}
	s.lastStamp = t
	return t
}

func tableETag(ts time.Time) string {
	return `W/"datetime'` + strings.ReplaceAll(ts.Format(edmTime), ":", "%3A") + `'"`
}

func errTableNotFound() error {
	return fail(http.StatusNotFound, "TableNotFound", "The table specified does not exist.")
}

func errEntityNotFound() error {
	return fail(http.StatusNotFound, "ResourceNotFound", "The specified resource does not exist.")
}

func errConditionNotSatisfied() error {
	return fail(http.StatusPreconditionFailed, "UpdateConditionNotSatisfied", "The update condition specified in the request was not satisfied.")
}

func tableErrorBody(code, msg string) []byte {
	b := []byte(`{"odata.error":{"code":`)
	b = appendJSONString(b, code)
	b = append(b, `,"message":{"lang":"en-US","value":`...)
	b = appendJSONString(b, msg)
	return append(b, "}}}"...)
}

// validTableName checks a table name: 3-63 letters and digits, starting
// with a letter, and not "tables".
func validTableName(n string) bool {
	if len(n) < 3 || len(n) > 63 || strings.EqualFold(n, "tables") {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// resource is what a Table service path names.
type resource struct {
	tables   bool   // /Tables or /Tables('name')
	name     string // the table (of Tables('name') too)
	keyed    bool   // (PartitionKey='…',RowKey='…')
	pk, rk   string
	batch    bool
	badInput error
}

// parseResource parses the path after the account.
func parseResource(path string) resource {
	if path == "$batch" {
		return resource{batch: true}
	}
	name, args, paren := strings.Cut(path, "(")
	if name == "Tables" {
		res := resource{tables: true}
		if paren {
			inner, ok := strings.CutSuffix(args, ")")
			if !ok || len(inner) < 2 || inner[0] != '\'' || inner[len(inner)-1] != '\'' {
				res.badInput = errInput("malformed table name in %q", path)
			}
			if ok && len(inner) >= 2 {
				res.name = strings.ReplaceAll(inner[1:len(inner)-1], "''", "'")
			}
		}
		return res
	}
	res := resource{name: name}
	if !paren || args == ")" {
		return res
	}
	pk, rk, err := parseKeys(args)
	if err != nil {
		res.badInput = err
		return res
	}
	res.keyed, res.pk, res.rk = true, pk, rk
	return res
}

// parseKeys reads "PartitionKey='…',RowKey='…')" (two quotes in a row
// stand for one within a key).
func parseKeys(s string) (pk, rk string, err error) {
	bad := errInput("The keys of %q are not PartitionKey='…',RowKey='…'", "("+s)
	read := func(s, name string) (string, string, bool) {
		s = strings.TrimLeft(s, " ")
		rest, ok := strings.CutPrefix(s, name)
		if !ok {
			return "", "", false
		}
		rest = strings.TrimLeft(rest, " ")
		if rest, ok = strings.CutPrefix(rest, "="); !ok {
			return "", "", false
		}
		rest = strings.TrimLeft(rest, " ")
		if rest == "" || rest[0] != '\'' {
			return "", "", false
		}
		v, next, ok := quoted(rest, 0)
		return v, rest[next:], ok
	}
	pk, rest, ok := read(s, "PartitionKey")
	if !ok {
		return "", "", bad
	}
	rest = strings.TrimLeft(rest, " ")
	if rest, ok = strings.CutPrefix(rest, ","); !ok {
		return "", "", bad
	}
	rk, rest, ok = read(rest, "RowKey")
	if !ok || strings.TrimSpace(rest) != ")" {
		return "", "", bad
	}
	return pk, rk, nil
}

func (s *Server) lookupTable(name string) (*table, error) {
	t := s.tables[strings.ToLower(name)]
	if t == nil {
		return nil, errTableNotFound()
	}
	return t, nil
}

// table serves one Table service request; the caller holds s.mu.
func (s *Server) table(r *request) (string, *reply, error) {
	res := parseResource(r.path)
	switch {
	case res.batch:
		if r.method != http.MethodPost {
			break
		}
		rep, err := s.batch(r)
		return "EntityGroupTransaction", rep, err
	case res.tables:
		if res.badInput != nil {
			return "", nil, res.badInput
		}
		switch {
		case r.method == http.MethodPost && res.name == "":
			rep, err := s.createTable(r)
			return "CreateTable", rep, err
		case r.method == http.MethodDelete && res.name != "":
			rep, err := s.deleteTable(res.name)
			return "DeleteTable", rep, err
		case r.method == http.MethodGet:
			rep, err := s.queryTables(r, res.name)
			return "QueryTables", rep, err
		}
	case res.name == "" || strings.Contains(res.name, "/"):
	case r.method == http.MethodGet && (res.keyed || res.badInput != nil):
		op := "QueryEntity"
		if res.badInput != nil {
			return op, nil, res.badInput
		}
		rep, err := s.getEntity(r, res)
		return op, rep, err
	case r.method == http.MethodGet:
		rep, err := s.queryEntities(r, res.name)
		return "QueryEntities", rep, err
	default:
		c, err := s.prepare(r, res)
		if err != nil {
			return opName(r, res), nil, err
		}
		rep, err := s.commitOne(r, c)
		return c.opName(), rep, err
	}
	return "", nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s %s is not an operation memstore serves", r.method, r.path)
}

func (s *Server) createTable(r *request) (*reply, error) {
	_, _, props, err := decodeEntity(r.body)
	if err != nil {
		return nil, err
	}
	var name string
	for _, p := range props {
		if p.name == "TableName" && p.typ == edmString {
			name = p.v.(string)
		}
	}
	if !validTableName(name) {
		return nil, fail(http.StatusBadRequest, "InvalidResourceName", "The specified resource name contains invalid characters.")
	}
	if s.tables[strings.ToLower(name)] != nil {
		return nil, fail(http.StatusConflict, "TableAlreadyExists", "The table specified already exists.")
	}
	s.tables[strings.ToLower(name)] = &table{name: name, parts: map[string]*partition{}}
	if noContent(r) {
		rep := newReply(http.StatusNoContent)
		rep.header.Set("Preference-Applied", "return-no-content")
		return rep, nil
	}
	rep := newReply(http.StatusCreated)
	rep.header.Set("Preference-Applied", "return-content")
	b := []byte(`{"odata.metadata":`)
	b = appendJSONString(b, endpoint(r)+"$metadata#Tables/@Element")
	b = append(b, `,"TableName":`...)
	b = appendJSONString(b, name)
	rep.body = append(b, '}')
	rep.header.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
	return rep, nil
}

func noContent(r *request) bool { return strings.Contains(r.header.Get("Prefer"), "return-no-content") }

func (s *Server) deleteTable(name string) (*reply, error) {
	if _, err := s.lookupTable(name); err != nil {
		return nil, err
	}
	delete(s.tables, strings.ToLower(name))
	return newReply(http.StatusNoContent), nil
}

// top reads $top: 1 to 1000, 1000 when absent.
func top(r *request) (int, error) {
	v := r.q("$top")
	if v == "" {
		return 1000, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, errInput("$top=%q: want a whole number from 1 to 1000", v)
	}
	return n, nil
}

func (s *Server) queryTables(r *request, only string) (*reply, error) {
	n, err := top(r)
	if err != nil {
		return nil, err
	}
	var f filter
	if v := r.q("$filter"); v != "" {
		if f, err = parseFilter(v); err != nil {
			return nil, err
		}
	}
	names := make([]string, 0, len(s.tables))
	for _, t := range s.tables {
		names = append(names, t.name)
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	if only != "" {
		t, err := s.lookupTable(only)
		if err != nil {
			return nil, err
		}
		names = []string{t.name}
	}
	after := strings.ToLower(r.q("NextTableName"))
	var out []string
	next := ""
	for _, name := range names {
		if strings.ToLower(name) < after {
			continue
		}
		if f != nil && f.eval(func(p string) (value, bool) {
			if p == "TableName" {
				return value{edmString, name}, true
			}
			return value{}, false
		}) != triTrue {
			continue
		}
		if len(out) == n {
			next = name
			break
		}
		out = append(out, name)
	}
	lvl := level(r)
	b := []byte{'{'}
	if lvl != metaNone {
		b = append(b, `"odata.metadata":`...)
		b = appendJSONString(b, endpoint(r)+"$metadata#Tables")
		b = append(b, ',')
	}
	b = append(b, `"value":[`...)
	for i, name := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"TableName":`...)
		b = appendJSONString(b, name)
		b = append(b, '}')
	}
	b = append(b, "]}"...)
	rep := newReply(http.StatusOK)
	rep.header.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
	if next != "" {
		rep.header.Set("X-Ms-Continuation-NextTableName", next)
	}
	rep.body = b
	return rep, nil
}

// selection reads $select: nil for every property.
func selection(r *request) []string {
	v := r.q("$select")
	if strings.TrimSpace(v) == "" || strings.TrimSpace(v) == "*" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func entityURL(r *request, t *table, e *entity) string {
	return endpoint(r) + t.name + "(PartitionKey=" + quoteKey(e.pk) + ",RowKey=" + quoteKey(e.rk) + ")"
}

func quoteKey(k string) string { return "'" + strings.ReplaceAll(k, "'", "''") + "'" }

func (s *Server) getEntity(r *request, res resource) (*reply, error) {
	t, err := s.lookupTable(res.name)
	if err != nil {
		return nil, err
	}
	e := t.get(res.pk, res.rk)
	if e == nil {
		return nil, errEntityNotFound()
	}
	lvl := level(r)
	rep := newReply(http.StatusOK)
	rep.header.Set("ETag", e.etag)
	rep.header.Set("Content-Type", "application/json;odata="+[...]string{"nometadata", "minimalmetadata", "fullmetadata"}[lvl]+";streaming=true;charset=utf-8")
	rep.body = appendEntity(nil, e, lvl, endpoint(r)+"$metadata#"+t.name+"/@Element", r.account+"."+t.name, entityURL(r, t, e), selection(r))
	return rep, nil
}

// Continuation tokens name the next entity's keys as Azure's do in form
// ("1!{length}!{base64}"), so that keys of any character survive a header.
func contToken(k string) string {
	b := base64.StdEncoding.EncodeToString([]byte(k))
	return "1!" + strconv.Itoa(len(b)) + "!" + b
}

func parseContToken(tok string) (string, error) {
	parts := strings.SplitN(tok, "!", 3)
	if len(parts) != 3 || parts[0] != "1" || parts[1] != strconv.Itoa(len(parts[2])) {
		return "", errInput("malformed continuation token %q", tok)
	}
	b, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		return "", errInput("malformed continuation token %q", tok)
	}
	return string(b), nil
}

func (s *Server) queryEntities(r *request, name string) (*reply, error) {
	t, err := s.lookupTable(name)
	if err != nil {
		return nil, err
	}
	n, err := top(r)
	if err != nil {
		return nil, err
	}
	var f filter
	if v := r.q("$filter"); v != "" {
		if f, err = parseFilter(v); err != nil {
			return nil, err
		}
	}
	var npk, nrk string
	if v := r.q("NextPartitionKey"); v != "" {
		if npk, err = parseContToken(v); err != nil {
			return nil, err
		}
	}
	if v := r.q("NextRowKey"); v != "" {
		if nrk, err = parseContToken(v); err != nil {
			return nil, err
		}
	}
	var out []*entity
	var next *entity
	t.scan(rangeOf(f), npk, nrk, func(e *entity) bool {
		if f != nil && f.eval(e.prop) != triTrue {
			return true
		}
		if len(out) == n {
			next = e
			return false
		}
		out = append(out, e)
		return true
	})
	lvl := level(r)
	sel := selection(r)
	b := make([]byte, 0, 256*len(out)+64)
	b = append(b, '{')
	if lvl != metaNone {
		b = append(b, `"odata.metadata":`...)
		b = appendJSONString(b, endpoint(r)+"$metadata#"+t.name)
		b = append(b, ',')
	}
	b = append(b, `"value":[`...)
	for i, e := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendEntity(b, e, lvl, "", r.account+"."+t.name, entityURL(r, t, e), sel)
	}
	b = append(b, "]}"...)
	rep := newReply(http.StatusOK)
	rep.header.Set("Content-Type", "application/json;odata="+[...]string{"nometadata", "minimalmetadata", "fullmetadata"}[lvl]+";streaming=true;charset=utf-8")
	if next != nil {
		rep.header.Set("X-Ms-Continuation-NextPartitionKey", contToken(next.pk))
		rep.header.Set("X-Ms-Continuation-NextRowKey", contToken(next.rk))
	}
	rep.body = b
	return rep, nil
}

// opKind is the kind of an entity write.
type opKind int

const (
	opInsert opKind = iota
	opReplace
	opMerge
	opUpsertReplace
	opUpsertMerge
	opDelete
)

var opNames = [...]string{"InsertEntity", "UpdateEntity", "MergeEntity", "InsertOrReplaceEntity", "InsertOrMergeEntity", "DeleteEntity"}

// change is one prepared entity write, checked against the table before
// it is applied.
type change struct {
	kind      opKind
	t         *table
	pk, rk    string
	ifMatch   string
	props     []property
	noContent bool
	contentID string
	r         *request
}

func (c *change) opName() string { return opNames[c.kind] }

// opName names a write request that could not be prepared.
func opName(r *request, res resource) string {
	switch r.method {
	case http.MethodPost:
		return "InsertEntity"
	case http.MethodDelete:
		return "DeleteEntity"
	case http.MethodPut:
		if r.header.Get("If-Match") == "" {
			return "InsertOrReplaceEntity"
		}
		return "UpdateEntity"
	case "MERGE", http.MethodPatch:
		if r.header.Get("If-Match") == "" {
			return "InsertOrMergeEntity"
		}
		return "MergeEntity"
	}
	return ""
}

// prepare parses a write request into a change (its table must exist).
func (s *Server) prepare(r *request, res resource) (*change, error) {
	if res.badInput != nil {
		return nil, res.badInput
	}
	c := &change{r: r, ifMatch: r.header.Get("If-Match"), noContent: noContent(r)}
	switch r.method {
	case http.MethodPost:
		if res.keyed {
			return nil, errInput("an insert names no keys in its URL")
		}
		c.kind = opInsert
	case http.MethodPut, "MERGE", http.MethodPatch:
		if !res.keyed {
			return nil, errInput("an update names its entity's keys in its URL")
		}
		merge := r.method != http.MethodPut
		switch {
		case c.ifMatch == "" && merge:
			c.kind = opUpsertMerge
		case c.ifMatch == "":
			c.kind = opUpsertReplace
		case merge:
			c.kind = opMerge
		default:
			c.kind = opReplace
		}
	case http.MethodDelete:
		if !res.keyed {
			return nil, errInput("a delete names its entity's keys in its URL")
		}
		if c.ifMatch == "" {
			return nil, fail(http.StatusBadRequest, "MissingRequiredHeader", "An HTTP header that's mandatory for this request is not specified: If-Match.")
		}
		c.kind = opDelete
	default:
		return nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s on an entity is not an operation memstore serves", r.method)
	}
	t, err := s.lookupTable(res.name)
	if err != nil {
		return nil, err
	}
	c.t = t
	c.pk, c.rk = res.pk, res.rk
	if c.kind != opDelete {
		pk, rk, props, err := decodeEntity(r.body)
		if err != nil {
			return nil, err
		}
		if c.kind == opInsert {
			if pk == nil || rk == nil {
				return nil, fail(http.StatusBadRequest, "PropertiesNeedValue", "The values are not specified for all properties in the entity: PartitionKey and RowKey are required.")
			}
			c.pk, c.rk = *pk, *rk
		}
		c.props = props
		if entitySize(c.pk, c.rk, props) > 1<<20 {
			return nil, fail(http.StatusBadRequest, "EntityTooLarge", "The entity is larger than the maximum allowed size (1MB).")
		}
	}
	if err := checkKey("PartitionKey", c.pk); err != nil {
		return nil, err
	}
	if err := checkKey("RowKey", c.rk); err != nil {
		return nil, err
	}
	return c, nil
}

// check applies the change's preconditions to the table as it is.
func (c *change) check() error {
	cur := c.t.get(c.pk, c.rk)
	switch c.kind {
	case opInsert:
		if cur != nil {
			return fail(http.StatusConflict, "EntityAlreadyExists", "The specified entity already exists.")
		}
	case opReplace, opMerge, opDelete:
		if cur == nil {
			return errEntityNotFound()
		}
		if strings.TrimSpace(c.ifMatch) != "*" && !etagMatches(c.ifMatch, cur.etag) {
			return errConditionNotSatisfied()
		}
	}
	return nil
}

// apply makes the change with Timestamp ts and returns the entity written
// (nil for a delete).
func (c *change) apply(ts time.Time) *entity {
	if c.kind == opDelete {
		c.t.del(c.pk, c.rk)
		return nil
	}
	props := c.props
	if cur := c.t.get(c.pk, c.rk); cur != nil && (c.kind == opMerge || c.kind == opUpsertMerge) {
		props = mergeProps(cur.props, c.props)
	}
	e := &entity{pk: c.pk, rk: c.rk, props: props, ts: ts, etag: tableETag(ts)}
	c.t.put(e)
	return e
}

// mergeProps returns old with new's properties set (both sorted).
func mergeProps(old, upd []property) []property {
	out := make([]property, 0, len(old)+len(upd))
	i, j := 0, 0
	for i < len(old) || j < len(upd) {
		switch {
		case j == len(upd) || i < len(old) && old[i].name < upd[j].name:
			out = append(out, old[i])
			i++
		case i == len(old) || upd[j].name < old[i].name:
			out = append(out, upd[j])
			j++
		default:
			out = append(out, upd[j])
			i++
			j++
		}
	}
	return out
}

// result is the reply to an applied change.
func (c *change) result(e *entity) *reply {
	r := c.r
	if c.kind == opDelete {
		return newReply(http.StatusNoContent)
	}
	rep := newReply(http.StatusNoContent)
	rep.header.Set("ETag", e.etag)
	if c.kind != opInsert {
		return rep
	}
	url := entityURL(r, c.t, e)
	rep.header.Set("Location", url)
	rep.header.Set("DataServiceId", url)
	if c.noContent {
		rep.header.Set("Preference-Applied", "return-no-content")
		return rep
	}
	lvl := level(r)
	rep.status = http.StatusCreated
	rep.header.Set("Preference-Applied", "return-content")
	rep.header.Set("Content-Type", "application/json;odata="+[...]string{"nometadata", "minimalmetadata", "fullmetadata"}[lvl]+";streaming=true;charset=utf-8")
	rep.body = appendEntity(nil, e, lvl, endpoint(r)+"$metadata#"+c.t.name+"/@Element", r.account+"."+c.t.name, url, nil)
	return rep
}

func (s *Server) commitOne(r *request, c *change) (*reply, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	e := c.apply(s.stamp(r.now))
	s.committed(c.t.name, c.pk, []*change{c}, []*entity{e})
	return c.result(e), nil
}

// committed tells Options.OnCommit of changes applied together (entities
// holds what each wrote: nil for a delete).
func (s *Server) committed(tbl, pk string, changes []*change, entities []*entity) {
	if s.onCommit == nil {
		return
	}
	c := Commit{Table: tbl, Partition: pk, Rows: make([]CommittedRow, len(changes))}
	for i, ch := range changes {
		row := CommittedRow{RowKey: ch.rk, Deleted: entities[i] == nil}
		if e := entities[i]; e != nil {
			row.Props = make(map[string]any, len(e.props))
			for _, p := range e.props {
				row.Props[p.name] = p.v
			}
		}
		c.Rows[i] = row
	}
	s.onCommit(c)
}
