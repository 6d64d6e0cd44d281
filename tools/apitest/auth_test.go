package apitest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/internal/clock"
)

// principalHeader is X-MS-CLIENT-PRINCIPAL as Container Apps' built-in
// authentication sets it for an Entra ID service principal holding roles.
func principalHeader(roles ...string) string {
	type claim struct {
		Typ string `json:"typ"`
		Val string `json:"val"`
	}
	p := struct {
		AuthTyp string  `json:"auth_typ"`
		RoleTyp string  `json:"role_typ"`
		Claims  []claim `json:"claims"`
	}{AuthTyp: "aad", RoleTyp: "roles"}
	for _, r := range roles {
		p.Claims = append(p.Claims, claim{"roles", r})
	}
	b, _ := json.Marshal(p)
	return base64.StdEncoding.EncodeToString(b)
}

// TestPlatformAuth: behind Container Apps authentication a principal's app
// role is its role; without one of the three it is refused; without
// PlatformAuth the headers are ignored (a client could forge them).
func TestPlatformAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Options{PlatformAuth: true})
	plain := newFixture(t, api.Options{})
	send := func(srv *httptest.Server, method, path, name, principal, body string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-MS-CLIENT-PRINCIPAL-NAME", name)
		req.Header.Set("X-MS-CLIENT-PRINCIPAL", principal)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	sched := principalHeader(api.PlatformSchedulerRole)
	if code := send(f.srv, "POST", "/api/v1/tasks", "billing-app", sched, `{"id":"p1","type":"mail","in":"1h"}`); code != 201 {
		t.Errorf("a scheduler principal schedules: %d", code)
	}
	if code := send(f.srv, "POST", "/api/v1/types/mail/pause", "billing-app", sched, `{}`); code != 403 {
		t.Errorf("a scheduler principal pauses: %d, want 403", code)
	}
	if code := send(f.srv, "POST", "/api/v1/types/mail/pause", "ops-app", principalHeader("other", api.PlatformOperatorRole), `{}`); code != 200 {
		t.Errorf("an operator principal pauses: %d", code)
	}
	if code := send(f.srv, "GET", "/api/v1/health", "stranger", principalHeader("reader"), ""); code != 403 {
		t.Errorf("a principal without a leasecron role: %d, want 403", code)
	}
	if code := send(plain.srv, "GET", "/api/v1/health", "forged", principalHeader(api.PlatformOperatorRole), ""); code != 401 {
		t.Errorf("platform headers without PlatformAuth: %d, want 401", code)
	}
	page, err := f.c.AuditLog(f.ctx, leasecron.AuditQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range page.Entries {
		found = found || (e.Who == "principal:billing-app" && e.Action == "schedule" && e.OK)
	}
	if !found {
		t.Errorf("no audit entry of principal:billing-app scheduling: %+v", page.Entries)
	}
}

// busyTransport answers 503 ServerBusy with Retry-After: 3 to every table
// request while busy is set, as a throttled partition does.
type busyTransport struct {
	busy      atomic.Bool
	tablePort string
}

func (b *busyTransport) Do(req *http.Request) (*http.Response, error) {
	if b.busy.Load() && req.URL.Port() == b.tablePort {
		h := http.Header{}
		h.Set("x-ms-error-code", "ServerBusy")
		h.Set("Retry-After", "3")
		return &http.Response{StatusCode: 503, Status: "503 Server Busy", Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestThrottledStorageAnswers503: while storage answers ServerBusy the API
// answers 503 with the service's Retry-After, and works again after.
func TestThrottledStorageAnswers503(t *testing.T) {
	t.Parallel()
	az := azuritetest.Shared(t)
	_, _, tablePort := az.Ports()
	tr := &busyTransport{tablePort: strconv.Itoa(tablePort)}
	names := leasecron.Names{ScheduleTable: azuritetest.Name(t, "s"), RunsTable: azuritetest.Name(t, "r"), BlackboardTable: azuritetest.Name(t, "b"),
		Queue: azuritetest.Name(t, "q"), PoisonQueue: azuritetest.Name(t, "p"), Container: azuritetest.Name(t, "c")}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: az.ConnectionString(), Transport: tr}, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(c, api.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, tok, err := c.CreateToken(t.Context(), "svc", leasecron.RoleScheduler, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/api/v1/tasks", bytes.NewReader([]byte(`{"type":"mail","in":"1h"}`)))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	tr.busy.Store(true)
	start := time.Now()
	rec := post()
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "3" || !strings.Contains(rec.Body.String(), "unavailable") {
		t.Errorf("throttled: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	t.Logf("a throttled schedule answered 503 after %s (the SDK's own retries)", time.Since(start).Round(time.Millisecond))
	tr.busy.Store(false)
	if rec := post(); rec.Code != 201 {
		t.Errorf("after the throttling: %d %s", rec.Code, rec.Body)
	}
}

// TestPagingAndTheDashboardMount: listings page by continuation token
// through every task; the dashboard serves the API under its base path.
func TestPagingAndTheDashboardMount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Options{})
	op := f.token("ops", leasecron.RoleOperator)
	var tasks []any
	for i := range 25 {
		tasks = append(tasks, map[string]any{"id": "pg-" + string(rune('a'+i)), "type": "page", "in": "1h"})
	}
	f.must(200, op, "POST", "/api/v1/tasks:many", map[string]any{"tasks": tasks})
	seen, pages, cont := map[string]bool{}, 0, ""
	for {
		path := "/api/v1/tasks?type=page&limit=10"
		if cont != "" {
			path += "&continue=" + cont
		}
		p := f.must(200, op, "GET", path, nil)
		pages++
		for _, x := range p["tasks"].([]any) {
			seen[x.(map[string]any)["id"].(string)] = true
		}
		c, _ := p["continue"].(string)
		if c == "" || pages > 10 {
			break
		}
		cont = c
	}
	if len(seen) != 25 || pages < 3 {
		t.Errorf("paged through %d tasks in %d pages, want 25 in 3 or more", len(seen), pages)
	}

	h, err := api.New(f.c, api.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(f.c, dashboard.Options{BasePath: "/lc", Auth: "bearer:dashboard-secret", API: h})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, auth string
		want       int
	}{
		{"/lc/api/v1/openapi.json", "", 200},
		{"/lc/api/v1/health", "Bearer " + op, 200},
		{"/lc/api/v1/health", "", 401},
		{"/lc/api/v1/health", "Bearer dashboard-secret", 401}, // the dashboard's credentials are not an API token
		{"/lc/", "", 401},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		d.ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s (%q): %d, want %d", c.path, c.auth, rec.Code, c.want)
		}
	}
}

// TestReadsAreAuditedInBulk: reads and refused calls reach the audit log
// as one entry per caller and kind per ReadAuditEvery, counting each
// route.
func TestReadsAreAuditedInBulk(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Now())
	f := newFixture(t, api.Options{Clock: clk})
	view := f.token("grafana", leasecron.RoleViewer)
	for range 3 {
		f.must(200, view, "GET", "/api/v1/health", nil)
	}
	f.must(404, view, "GET", "/api/v1/tasks/nothing", nil)
	f.must(403, view, "POST", "/api/v1/tasks", map[string]any{"type": "mail"})
	f.must(401, "", "GET", "/api/v1/health", nil)
	clk.Advance(api.ReadAuditEvery + time.Second)
	f.must(200, view, "GET", "/api/v1/health", nil) // flushes, itself included
	want := map[string]string{
		"token:grafana read":      "5 calls",
		"token:grafana refused":   "POST /api/v1/tasks ×1",
		"unauthenticated refused": "GET /api/v1/health ×1",
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		page, err := f.c.AuditLog(f.ctx, leasecron.AuditQuery{Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, e := range page.Entries {
			got[e.Who+" "+e.Action] = e.Result
		}
		ok := true
		for k, v := range want {
			ok = ok && strings.Contains(got[k], v)
		}
		if ok {
			if !strings.Contains(got["token:grafana read"], "GET /api/v1/health ×4") {
				t.Errorf("the read entry: %q", got["token:grafana read"])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit entries %v, want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
