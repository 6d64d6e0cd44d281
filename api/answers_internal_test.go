package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// routeMux finds the route of a request by the table's patterns, as the
// server's mux does.
var routeMux = sync.OnceValues(func() (*http.ServeMux, map[string]answers) {
	m := http.NewServeMux()
	by := map[string]answers{}
	for _, rt := range (&server{}).table() {
		m.Handle(rt.pattern, http.NotFoundHandler())
		by[rt.pattern] = rt.answers
	}
	return m, by
})

// checkAnswer reports an answer to r that the route's table does not list
// (route.answers): its status, or for an error its problem type. Requests
// no route serves (404, 405) and the document are not checked.
func checkAnswer(r *http.Request, status int, body []byte) error {
	m, by := routeMux()
	_, pattern := m.Handler(r)
	want, ok := by[pattern]
	if !ok {
		return nil
	}
	slugs, ok := want[status]
	if !ok {
		return fmt.Errorf("answered %d, which the table of %s does not list (it lists %v): %s", status, pattern, slices.Sorted(maps.Keys(want)), body)
	}
	if status < 400 {
		return nil
	}
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil {
		return fmt.Errorf("answered %d without a problem: %s", status, body)
	}
	if slug := strings.TrimPrefix(p.Type, ProblemPrefix); !slices.Contains(slugs, slug) {
		return fmt.Errorf("answered %d %s, which the table of %s does not list for %d (it lists %v): %s", status, slug, pattern, status, slugs, body)
	}
	return nil
}

// openAPIResponses reads what openapi.json lists for each operation
// ("METHOD /path"): each status, with the x-problem-types of an error
// status.
func openAPIResponses(t *testing.T) map[string]answers {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]answers{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if !slices.Contains([]string{"get", "put", "post", "delete", "patch"}, method) {
				continue
			}
			var op struct {
				Responses map[string]struct {
					Types []string `json:"x-problem-types"`
				} `json:"responses"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			got := answers{}
			for code, r := range op.Responses {
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Fatalf("%s %s: response %q is not a status", method, path, code)
				}
				got[status] = r.Types
			}
			out[strings.ToUpper(method)+" "+path] = got
		}
	}
	return out
}

// openAPIDifferences lists where the document (openAPIResponses) and the
// routes' tables disagree: a status one lists and the other does not, a
// status whose problem types differ, an operation no route serves.
func openAPIDifferences(rts []route, doc map[string]answers) []string {
	var out []string
	seen := map[string]bool{"GET " + Prefix + "openapi.json": true} // served before routing: 200 only
	for _, rt := range rts {
		seen[rt.pattern] = true
		got, ok := doc[rt.pattern]
		if !ok {
			out = append(out, fmt.Sprintf("%s: no operation in openapi.json", rt.pattern))
			continue
		}
		for _, status := range slices.Sorted(maps.Keys(rt.answers)) {
			slugs := rt.answers[status]
			docSlugs, listed := got[status]
			switch {
			case !listed:
				out = append(out, fmt.Sprintf("%s: answers %d %v, which openapi.json does not list", rt.pattern, status, slugs))
			case !slices.Equal(slices.Sorted(slices.Values(slugs)), slices.Sorted(slices.Values(docSlugs))):
				out = append(out, fmt.Sprintf("%s %d: openapi.json lists the problem types %v; the route answers %v", rt.pattern, status, docSlugs, slugs))
			}
		}
		for _, status := range slices.Sorted(maps.Keys(got)) {
			if _, ok := rt.answers[status]; !ok {
				out = append(out, fmt.Sprintf("%s: openapi.json lists %d, which the route does not answer", rt.pattern, status))
			}
		}
	}
	for _, op := range slices.Sorted(maps.Keys(doc)) {
		if !seen[op] {
			out = append(out, fmt.Sprintf("openapi.json: %s is no route of the table", op))
		}
	}
	return out
}

// openapi.json lists exactly what each route can answer, as the table
// next to the handlers says (route.answers): every status, and for each
// error status the problem types (x-problem-types). Every answer the
// package's tests get is checked against the table (fixture.do), and
// every route's table holds what every route answers, with titles for
// its problem types.
func TestOpenAPIListsWhatEachRouteAnswers(t *testing.T) {
	rts := (&server{}).table()
	for _, d := range openAPIDifferences(rts, openAPIResponses(t)) {
		t.Error(d)
	}
	for _, rt := range rts {
		for status, slugs := range everyRoute {
			if !containsAll(rt.answers[status], slugs) {
				t.Errorf("%s: %d %v, which every route answers, is missing from its table", rt.pattern, status, slugs)
			}
		}
		for status, slugs := range rt.answers {
			for _, slug := range slugs {
				if titles[slug] == "" {
					t.Errorf("%s %d: problem type %q has no title", rt.pattern, status, slug)
				}
			}
		}
	}
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// The check catches what a review found in openapi.json: PUT listing a
// 409 it cannot answer (unique-key-held: a unique task cannot replace
// another) and not its real one (conflict), reschedule and run-now
// without their 409s, cancel and disable without their 500 incomplete.
// checkAnswer refuses an answer the table does not list.
func TestOpenAPICheckCatchesWhatAReviewFound(t *testing.T) {
	rts := (&server{}).table()
	doc := openAPIResponses(t)
	doc["PUT /api/v1/tasks/{id}"][http.StatusConflict] = []string{"unique-key-held"}
	delete(doc["POST /api/v1/tasks/{id}/reschedule"], http.StatusConflict)
	delete(doc["POST /api/v1/tasks/{id}/run-now"], http.StatusConflict)
	doc["POST /api/v1/tasks/{id}/cancel"][http.StatusInternalServerError] = []string{"internal"}
	delete(doc["POST /api/v1/tasks/{id}/disable"], http.StatusInternalServerError)
	doc["GET /api/v1/paused"][http.StatusBadRequest] = []string{"invalid-field"}
	got := strings.Join(openAPIDifferences(rts, doc), "\n")
	for _, want := range []string{
		"PUT /api/v1/tasks/{id} 409: openapi.json lists the problem types [unique-key-held]; the route answers [conflict]",
		"POST /api/v1/tasks/{id}/reschedule: answers 409 [conflict], which openapi.json does not list",
		"POST /api/v1/tasks/{id}/run-now: answers 409 [conflict], which openapi.json does not list",
		"POST /api/v1/tasks/{id}/cancel 500: openapi.json lists the problem types [internal]; the route answers [internal incomplete]",
		"POST /api/v1/tasks/{id}/disable: answers 500 [internal incomplete], which openapi.json does not list",
		"GET /api/v1/paused: openapi.json lists 400, which the route does not answer",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the differences do not say %q; they are:\n%s", want, got)
		}
	}
	r := newRequest(http.MethodPut, "/api/v1/tasks/x")
	for _, c := range []struct {
		status int
		slug   string
		ok     bool
	}{{http.StatusConflict, "unique-key-held", false}, {http.StatusNotFound, "not-found", false}, {http.StatusConflict, "conflict", true}} {
		err := checkAnswer(r, c.status, []byte(`{"type":"`+ProblemPrefix+c.slug+`","status":`+strconv.Itoa(c.status)+`}`))
		if (err == nil) != c.ok {
			t.Errorf("checkAnswer(PUT, %d %s) = %v; want it taken: %v", c.status, c.slug, err, c.ok)
		}
	}
}

// newRequest is a request without a body, for checkAnswer.
func newRequest(method, path string) *http.Request {
	r, err := http.NewRequest(method, path, nil)
	if err != nil {
		panic(err)
	}
	return r
}
