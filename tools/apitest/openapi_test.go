package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/leasecron/leasecron/api"
)

// spec is the OpenAPI document, read as the tests check it: its
// operations, and a JSON Schema compiler over the whole document so that
// a schema at any place in it (with its $refs) can be checked against.
type spec struct {
	doc map[string]any
	ops []*operation
	c   *jsonschema.Compiler

	mu      sync.Mutex
	schemas map[string]*jsonschema.Schema
	covered map[string]map[string]bool // operationId → statuses seen
}

type operation struct {
	id, method, path string
	re               *regexp.Regexp
	ptr              string // JSON pointer of the operation in the document
	params           map[string]string
	op               map[string]any
}

func loadSpec(t testing.TB) *spec {
	t.Helper()
	raw := api.OpenAPI()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	s := &spec{doc: doc.(map[string]any), c: jsonschema.NewCompiler(), schemas: map[string]*jsonschema.Schema{}, covered: map[string]map[string]bool{}}
	s.c.DefaultDraft(jsonschema.Draft2020)
	if err := s.c.AddResource("openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.doc["openapi"].(string); !strings.HasPrefix(v, "3.1") {
		t.Fatalf("openapi.json: openapi %q, want 3.1.x", v)
	}
	paths := s.doc["paths"].(map[string]any)
	for p, item := range paths {
		for m, o := range item.(map[string]any) {
			op, ok := o.(map[string]any)
			if !ok || !slices.Contains([]string{"get", "put", "post", "delete", "patch"}, m) {
				continue
			}
			pat := regexp.QuoteMeta(p)
			pat = regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(pat, `[^/]+`)
			x := &operation{id: op["operationId"].(string), method: strings.ToUpper(m), path: p, re: regexp.MustCompile("^" + pat + "$"),
				ptr: "/paths/" + escapePtr(p) + "/" + m, params: map[string]string{}, op: op}
			for _, prm := range append(params(item.(map[string]any)), params(op)...) {
				x.params[prm["name"].(string)] = prm["in"].(string)
			}
			s.ops = append(s.ops, x)
		}
	}
	sort.Slice(s.ops, func(i, j int) bool { return s.ops[i].id < s.ops[j].id })
	return s
}

func params(m map[string]any) []map[string]any {
	var out []map[string]any
	ps, _ := m["parameters"].([]any)
	for _, p := range ps {
		out = append(out, p.(map[string]any))
	}
	return out
}

func escapePtr(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// schema compiles the schema at the JSON pointer ptr of the document.
func (s *spec) schema(ptr string) (*jsonschema.Schema, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc, ok := s.schemas[ptr]; ok {
		return sc, nil
	}
	sc, err := s.c.Compile("openapi.json#" + ptr)
	if err != nil {
		return nil, err
	}
	s.schemas[ptr] = sc
	return sc, nil
}

// find returns the operation of method and path (every path matches
// one operation at most: literal paths are tried first).
func (s *spec) find(method, path string) *operation {
	var best *operation
	for _, o := range s.ops {
		if o.method == method && o.re.MatchString(path) && (best == nil || strings.Count(o.path, "{") < strings.Count(best.path, "{")) {
			best = o
		}
	}
	return best
}

// check validates one exchange against the document: the operation
// exists, every query parameter is declared, the request body (JSON)
// fits the operation's requestBody schema, and the status and body of
// the answer are among the operation's responses and fit their schema.
// It reports what does not fit.
func (s *spec) check(method, path string, query map[string][]string, reqBody []byte, reqType string, status int, respType string, respBody []byte) error {
	o := s.find(method, path)
	if o == nil && (status == http.StatusNotFound || status == http.StatusMethodNotAllowed) && isJSON(respType) {
		return nil // no such route: answered as a problem
	}
	if o == nil {
		return fmt.Errorf("%s %s: no operation in openapi.json", method, path)
	}
	for k := range query {
		if o.params[k] != "query" {
			return fmt.Errorf("%s %s: query parameter %q not declared", method, o.path, k)
		}
	}
	if len(bytes.TrimSpace(reqBody)) > 0 && isJSON(reqType) && status < 400 {
		if _, ok := o.op["requestBody"]; !ok {
			return fmt.Errorf("%s %s: a body was sent and answered %d, but no requestBody is declared", method, o.path, status)
		}
		if err := s.validate(o.ptr+"/requestBody/content/application~1json/schema", reqBody); err != nil {
			return fmt.Errorf("%s %s request: %w", method, o.path, err)
		}
	}
	resps := o.op["responses"].(map[string]any)
	code := strconv.Itoa(status)
	r, ok := resps[code].(map[string]any)
	if !ok {
		return fmt.Errorf("%s %s: status %d not declared (declared: %v)", method, o.path, status, keys(resps))
	}
	s.mu.Lock()
	if s.covered[o.id] == nil {
		s.covered[o.id] = map[string]bool{}
	}
	s.covered[o.id][code] = true
	s.mu.Unlock()
	content, _ := r["content"].(map[string]any)
	if len(respBody) == 0 || content == nil {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(respType)
	if _, ok := content[mt]; !ok {
		return fmt.Errorf("%s %s %d: answered %s, declared %v", method, o.path, status, mt, keys(content))
	}
	if err := s.validate(o.ptr+"/responses/"+code+"/content/"+escapePtr(mt)+"/schema", respBody); err != nil {
		return fmt.Errorf("%s %s %d response: %w\n%s", method, o.path, status, err, respBody)
	}
	return nil
}

func (s *spec) validate(ptr string, body []byte) error {
	sc, err := s.schema(ptr)
	if err != nil {
		return fmt.Errorf("schema %s: %w", ptr, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sc.Validate(v)
}

func isJSON(ct string) bool {
	mt, _, _ := mime.ParseMediaType(ct)
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// validating wraps h so that every exchange is checked against the
// document: a mismatch fails t.
func (s *spec) validating(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil && r.ContentLength <= 1<<20 {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if err := s.check(r.Method, r.URL.Path, r.URL.Query(), body, r.Header.Get("Content-Type"), rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes()); err != nil {
			t.Errorf("openapi.json: %v", err)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// uncovered lists the operations no exchange reached with a 2xx answer.
func (s *spec) uncovered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, o := range s.ops {
		ok := false
		for code := range s.covered[o.id] {
			ok = ok || code[0] == '2'
		}
		if !ok {
			out = append(out, o.id)
		}
	}
	return out
}

// TestOpenAPIDocument: the document is OpenAPI 3.1, every schema in it
// compiles, every operation has an id and answers problem details for
// its errors, and it documents exactly the routes the server serves.
func TestOpenAPIDocument(t *testing.T) {
	s := loadSpec(t)
	comps := s.doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name := range comps {
		if _, err := s.schema("/components/schemas/" + name); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
	for _, o := range s.ops {
		for code, r := range o.op["responses"].(map[string]any) {
			if code[0] == '4' || code[0] == '5' {
				content, _ := r.(map[string]any)["content"].(map[string]any)
				if _, ok := content["application/problem+json"]; !ok {
					t.Errorf("%s %s %s: an error answer without application/problem+json", o.method, o.path, code)
				}
			}
		}
	}
	if len(s.ops) != len(api.Routes())+1 {
		t.Errorf("openapi.json has %d operations; the server serves %d routes and the document", len(s.ops), len(api.Routes()))
	}
	for _, r := range api.Routes() {
		method, path, _ := strings.Cut(r, " ")
		if o := s.find(method, strings.NewReplacer("{", "x", "}", "").Replace(path)); o == nil || o.path != path {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	var doc map[string]any
	if err := json.Unmarshal(api.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
}
