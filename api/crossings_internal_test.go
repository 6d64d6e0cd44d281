package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/queue"
)

// fixture is an API server over a fresh in-memory account, its client,
// and do, which sends a request with a token of role (limited to types,
// when given) made for it.
type fixture struct {
	t *testing.T
	c *leasecron.Client
	h http.Handler
	// ms is the account, for what a test writes beside the client.
	ms *memstore.Server
}

func newFixture(t *testing.T, names leasecron.Names) *fixture {
	t.Helper()
	return newFixtureThrough(t, names, nil)
}

// newFixtureThrough is newFixture whose client reaches the account
// through wrap(the account's transport), when wrap is not nil.
func newFixtureThrough(t *testing.T, names leasecron.Names, wrap func(policy.Transporter) policy.Transporter) *fixture {
	t.Helper()
	return newFixtureWith(t, names, wrap, Options{})
}

// newFixtureWith is newFixtureThrough with the server's options o.
func newFixtureWith(t *testing.T, names leasecron.Names, wrap func(policy.Transporter) policy.Transporter, o Options) *fixture {
	t.Helper()
	ms := memstore.New(memstore.Options{})
	var tr policy.Transporter = ms.Transport()
	if wrap != nil {
		tr = wrap(tr)
	}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: ms.ConnectionString(), Transport: tr}, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, c: c, h: h, ms: ms}
}

// token makes a token of role, limited to types when given.
func (f *fixture) token(name, role string, types ...string) string {
	f.t.Helper()
	_, tok, err := f.c.CreateToken(context.Background(), name, role, types, "test")
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// do sends method path with body (JSON, when not empty) as tok.
func (f *fixture) do(tok, method, path, body string) (int, string) {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	} else {
		r = httptest.NewRequest(method, path, nil)
	}
	r.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	if err := checkAnswer(r, w.Code, w.Body.Bytes()); err != nil {
		f.t.Errorf("%s %s: %v", method, path, err)
	}
	return w.Code, w.Body.String()
}

// A unique task POSTed without an id is scheduled on a sharded schedule:
// its id must fall in its key's shard, which the client draws it for.
// Before, the server named every task it was not given an id for, and
// with 8 shards nearly every such POST was refused with 400, telling the
// caller to leave the id empty — which it had (a review's find).
func TestAUniquePostWithoutAnIDIsScheduledWithShards(t *testing.T) {
	f := newFixture(t, leasecron.Names{Shards: 8})
	tok := f.token("sch", leasecron.RoleScheduler)
	post := func(body string) (int, string) { return f.do(tok, http.MethodPost, "/api/v1/tasks", body) }
	for i := range 8 {
		body := fmt.Sprintf(`{"type":"welcome","in":"1h","unique_key":"user-%d"}`, i)
		if code, answer := post(body); code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s; want 201", body, code, answer)
		}
		// The key is held now: the same POST is refused as a duplicate.
		if code, answer := post(body); code != http.StatusConflict || !strings.Contains(answer, "unique-key-held") {
			t.Fatalf("POST %s again: %d %s; want 409 unique-key-held", body, code, answer)
		}
	}
}

// A retried POST of a task without a type, or with --after ids given with
// spaces or twice, answers as the first did: the request is compared with
// the pending task as the schedule stores it (type "default", the parent
// ids trimmed and without repeats). Before, the retry answered 409 (a
// review's find).
func TestARetriedPostIsComparedAsStored(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	c := f.c
	tok := f.token("sch", leasecron.RoleScheduler)
	post := func(body string) (int, string) { return f.do(tok, http.MethodPost, "/api/v1/tasks", body) }
	for _, id := range []string{"p1", "p2"} {
		if _, err := c.Schedule(context.Background(), leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, body := range []string{
		`{"id":"notype","in":"10m"}`,
		`{"id":"child","type":"t","after":["p1", " p2", "p1"]}`,
	} {
		if code, answer := post(body); code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s; want 201", body, code, answer)
		}
		if code, answer := post(body); code != http.StatusOK {
			t.Fatalf("POST %s again: %d %s; want 200, as the first", body, code, answer)
		}
	}
}

// deadLetters puts a dead letter of each of types in the poison queue,
// oldest first, with run ids d0, d1, ….
func (f *fixture) deadLetters(types ...string) {
	f.t.Helper()
	ctx := context.Background()
	svc, err := azqueue.NewServiceClientFromConnectionString(f.ms.ConnectionString(), &azqueue.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: f.ms.Transport()}})
	if err != nil {
		f.t.Fatal(err)
	}
	qc := svc.NewQueueClient(leasecron.Names{}.WithDefaults().PoisonQueue)
	if _, err := qc.Create(ctx, nil); err != nil {
		f.t.Fatal(err)
	}
	poison, err := queue.NewAzureQueue(qc)
	if err != nil {
		f.t.Fatal(err)
	}
	for i, typ := range types {
		body, err := queue.Envelope{ID: fmt.Sprintf("d%d", i), Type: typ, Due: time.Now()}.Encode()
		if err != nil {
			f.t.Fatal(err)
		}
		rec, err := json.Marshal(queue.DeadLetter{Reason: "max attempts", Body: body, At: time.Now(), RunID: fmt.Sprintf("d%d", i), Type: typ})
		if err != nil {
			f.t.Fatal(err)
		}
		if _, err := poison.Enqueue(ctx, string(rec), 0); err != nil {
			f.t.Fatal(err)
		}
	}
}

// A token limited to types sees in health only its types' pauses and dead
// letters, as docs/api.md says of dead letters (a review found it shown
// the fleet's dead-letter total and every paused type).
func TestHealthShowsALimitedTokenItsOwnTypes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, leasecron.Names{})
	c := f.c
	for _, typ := range []string{"invoice", "mail"} {
		if err := c.Pause(ctx, typ, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	f.deadLetters("invoice", "mail", "mail")
	for _, tc := range []struct {
		name   string
		types  []string
		dead   int
		paused []string
	}{{"all", nil, 3, []string{"invoice", "mail"}}, {"lim", []string{"invoice"}, 1, []string{"invoice"}}} {
		code, answer := f.do(f.token(tc.name, leasecron.RoleViewer, tc.types...), http.MethodGet, "/api/v1/health", "")
		var got Health
		if err := json.Unmarshal([]byte(answer), &got); err != nil || code != http.StatusOK {
			t.Fatalf("%s: %d %s (%v)", tc.name, code, answer, err)
		}
		slices.Sort(got.PausedTypes)
		if got.DeadLetters != tc.dead || !slices.Equal(got.PausedTypes, tc.paused) {
			t.Errorf("%s: health shows %d dead letters, paused %v; want %d, %v", tc.name, got.DeadLetters, got.PausedTypes, tc.dead, tc.paused)
		}
	}
}

// A batch's callback of a type the token may not touch is refused with
// 403, as a task of such a type is (docs/api.md: "Anything else is 403");
// it was a 400 (a review's find).
func TestACallbackOfAnotherTypeIsForbidden(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	tok := f.token("lim", leasecron.RoleScheduler, "invoice")
	body := `{"tasks":[{"id":"i1","type":"invoice"}],"batch":"b1","on_complete":{"type":"mail"}}`
	if code, answer := f.do(tok, http.MethodPost, "/api/v1/tasks:many", body); code != http.StatusForbidden || !strings.Contains(answer, "mail") {
		t.Fatalf("POST %s by a token limited to invoice: %d %s; want 403 naming the type", body, code, answer)
	}
}

// The audit log's "from" is the caller's address: the connection's peer,
// or, behind a proxy listed in TrustedProxies (http.trusted_proxies), the
// address the proxy forwarded for. A forwarding header from any other
// peer is not believed.
func TestTheAuditNamesTheCallerBehindATrustedProxy(t *testing.T) {
	for _, c := range []struct {
		name    string
		trusted []netip.Prefix
		hops    int
		want    string
	}{
		{"no proxy trusted", nil, 0, "192.0.2.1"}, // httptest's peer
		{"the peer a trusted proxy", []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, 0, "203.0.113.9"},
		{"two proxies counted", nil, 2, "198.51.100.4"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixtureWith(t, leasecron.Names{}, nil, Options{TrustedProxies: c.trusted, ProxyHops: c.hops})
			tok := f.token("sch", leasecron.RoleScheduler)
			r := httptest.NewRequest(http.MethodPost, "/api/v1/tasks", strings.NewReader(`{"id":"a1","type":"t","in":"1h"}`))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Authorization", "Bearer "+tok)
			r.Header.Set("X-Forwarded-For", "198.51.100.4, 203.0.113.9")
			w := httptest.NewRecorder()
			f.h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				t.Fatalf("POST: %d %s", w.Code, w.Body)
			}
			page, err := f.c.AuditLog(context.Background(), leasecron.AuditQuery{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var froms []string
			for _, e := range page.Entries {
				if e.Via == "api" {
					froms = append(froms, e.From)
				}
			}
			if len(froms) != 1 || froms[0] != c.want {
				t.Errorf("the call's audit entries come from %q; want %q", froms, c.want)
			}
		})
	}
}

// A POST /bulk with an id of the caller's is safe to send again: a resend
// answers as the first start did, before counting (the operation may have
// acted on what it counted), and starts nothing; the id of another
// operation is 409, and an id not "bulk-…" is 400 naming the field.
func TestABulkStartWithAnIDAnswersItsResendAsTheFirst(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	for _, id := range []string{"c1", "c2"} {
		if code, body := f.do(op, http.MethodPost, "/api/v1/tasks", `{"id":"`+id+`","type":"note","in":"1h"}`); code != http.StatusCreated {
			t.Fatalf("schedule %s: %d %s", id, code, body)
		}
	}
	start := `{"id":"bulk-7f3a","kind":"cancel-pending","type":"note","expect":2}`
	for try := range 2 {
		code, body := f.do(op, http.MethodPost, "/api/v1/bulk", start)
		if code != http.StatusAccepted || !strings.Contains(body, `"id":"bulk-7f3a"`) {
			t.Fatalf("send %d: %d %s; want 202 and the operation", try+1, code, body)
		}
	}
	if bs, err := f.c.Bulks(context.Background()); err != nil || len(bs) != 1 {
		t.Fatalf("operations %+v, %v; want the one", bs, err)
	}
	if code, body := f.do(op, http.MethodPost, "/api/v1/bulk", `{"id":"bulk-7f3a","kind":"disable-series","type":"note","expect":0}`); code != http.StatusConflict || !strings.Contains(body, "is another") {
		t.Errorf("the id of another operation: %d %s; want 409", code, body)
	}
	if code, body := f.do(op, http.MethodPost, "/api/v1/bulk", `{"id":"7f3a","kind":"cancel-pending","type":"note","expect":2}`); code != http.StatusBadRequest || !strings.Contains(body, `"field":"id"`) {
		t.Errorf("an id without bulk-: %d %s; want 400 naming id", code, body)
	}
}

// A resend's operation is the first's when kind, filter and caller match:
// a relative since is compared only for being given (its time moves
// between sends), an absolute one exactly; an operation whose own start
// failed before it ran is not answered as started (a review's finds).
func TestSameBulkComparesWhatTheRequestFixed(t *testing.T) {
	who := caller{who: "token:ops"}
	t1, t2 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	op := func(since time.Time) leasecron.BulkOp {
		return leasecron.BulkOp{Kind: leasecron.BulkRequeueDead, Filter: leasecron.BulkFilter{Type: "t", Since: since}}
	}
	running := leasecron.Bulk{ID: "bulk-1", Op: op(t2), By: who.who, State: leasecron.BulkRunning}
	for _, c := range []struct {
		name  string
		b     leasecron.Bulk
		op    leasecron.BulkOp
		since string
		want  int
	}{
		{"relative since, moved", running, op(t1), "24h", http.StatusAccepted},
		{"absolute since, another", running, op(t1), t1.Format(time.RFC3339), http.StatusConflict},
		{"absolute since, the same", running, op(t2), t2.Format(time.RFC3339), http.StatusAccepted},
		{"another caller's", leasecron.Bulk{ID: "bulk-1", Op: op(t2), By: "token:other", State: leasecron.BulkRunning}, op(t2), t2.Format(time.RFC3339), http.StatusConflict},
		{"its start failed", leasecron.Bulk{ID: "bulk-1", Op: op(t2), By: who.who, State: leasecron.BulkFailed, LastError: "scheduling it failed: busy"}, op(t2), t2.Format(time.RFC3339), http.StatusConflict},
		{"it ran and failed", leasecron.Bulk{ID: "bulk-1", Op: op(t2), By: who.who, State: leasecron.BulkFailed, Attempts: 1}, op(t2), t2.Format(time.RFC3339), http.StatusAccepted},
	} {
		code, _, err := sameBulk(c.b, c.op, BulkRequest{Since: c.since}, who)
		var p *Problem
		if errors.As(err, &p) {
			code = p.Status
		}
		if code != c.want {
			t.Errorf("%s: %d (%v), want %d", c.name, code, err, c.want)
		}
	}
}
