package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/azurite/azuritetest"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// fixture is an API over a fresh account on the shared Azurite, every
// exchange checked against openapi.json.
type fixture struct {
	t     *testing.T
	st    leasecron.Storage
	names leasecron.Names
	c     *leasecron.Client
	srv   *httptest.Server
	spec  *spec
	ctx   context.Context
}

func newFixture(t *testing.T, o api.Options) *fixture {
	t.Helper()
	return newFixtureThrough(t, o, nil)
}

// newFixtureThrough is newFixture whose client's requests go through the
// transport wrap returns, given the SDK's default (nil: none).
func newFixtureThrough(t *testing.T, o api.Options, wrap func(next policy.Transporter) policy.Transporter) *fixture {
	t.Helper()
	az := azuritetest.Shared(t)
	names := leasecron.Names{ScheduleTable: azuritetest.Name(t, "s"), RunsTable: azuritetest.Name(t, "r"), BlackboardTable: azuritetest.Name(t, "b"),
		Queue: azuritetest.Name(t, "q"), PoisonQueue: azuritetest.Name(t, "p"), Container: azuritetest.Name(t, "c")}
	st := leasecron.Storage{ConnectionString: az.ConnectionString()}
	cst := st
	if wrap != nil {
		cst.Transport = wrap(&http.Client{})
	}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: cst, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, st: st, names: names, c: c, spec: loadSpec(t)}
	f.srv = httptest.NewServer(f.spec.validating(t, h))
	t.Cleanup(f.srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f.ctx = ctx
	return f
}

// token makes an API token.
func (f *fixture) token(name, role string, types ...string) string {
	f.t.Helper()
	_, tok, err := f.c.CreateToken(f.ctx, name, role, types, "test")
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// call sends one request and decodes the JSON answer into a map.
func (f *fixture) call(tok, method, path string, body any) (int, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(f.ctx, method, f.srv.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			f.t.Fatalf("%s %s: answer not JSON: %v\n%s", method, path, err, raw)
		}
	}
	return resp.StatusCode, out
}

// must is call expecting status.
func (f *fixture) must(status int, tok, method, path string, body any) map[string]any {
	f.t.Helper()
	got, out := f.call(tok, method, path, body)
	if got != status {
		f.t.Fatalf("%s %s: status %d, want %d: %v", method, path, got, status, out)
	}
	return out
}

// TestEveryRoute drives every route of the document to a success over a
// real account, each request and answer validated against openapi.json,
// and checks the answers say what the Go client sees.
func TestEveryRoute(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Options{})
	op := f.token("ops", leasecron.RoleOperator)
	sch := f.token("svc", leasecron.RoleScheduler)
	view := f.token("grafana", leasecron.RoleViewer)

	if code, _ := f.call("", "GET", "/api/v1/openapi.json", nil); code != 200 {
		t.Fatalf("openapi.json: %d", code)
	}
	h := f.must(200, view, "GET", "/api/v1/health", nil)
	if h["status"] != "degraded" { // no worker leads
		t.Errorf("health of a fleet without workers: %v", h)
	}

	// Schedule one, and retry the same POST: the same answer.
	spec := map[string]any{"id": "inv-1", "type": "mail", "payload": map[string]any{"to": "a@example.com"}, "at": "2030-01-02T03:04:05Z", "unique_key": "inv-1-mail"}
	first := f.must(201, sch, "POST", "/api/v1/tasks", spec)
	again := f.must(200, sch, "POST", "/api/v1/tasks", spec)
	if fmt.Sprint(first) != fmt.Sprint(again) {
		t.Errorf("a retried POST answered %v, the first %v", again, first)
	}
	if task := first["task"].(map[string]any); task["payload"] != `{"to":"a@example.com"}` || task["due"] != "2030-01-02T03:04:05Z" {
		t.Errorf("scheduled %v", task)
	}
	if it, err := f.c.Get(f.ctx, "inv-1"); err != nil || it.Type != "mail" || it.UniqueKey != "inv-1-mail" {
		t.Errorf("the Go client sees %+v, %v", it, err)
	}
	// The same id with another body is a conflict; another id with the
	// key, held.
	spec["payload"] = "other"
	if code, p := f.call(sch, "POST", "/api/v1/tasks", spec); code != 409 || p["type"] != api.ProblemPrefix+"conflict" {
		t.Errorf("same id, other body: %d %v", code, p)
	}
	if code, p := f.call(sch, "POST", "/api/v1/tasks", map[string]any{"id": "inv-2", "type": "mail", "in": "1h", "unique_key": "inv-1-mail"}); code != 409 || p["holder"] != "inv-1" {
		t.Errorf("unique key held: %d %v", code, p)
	}

	// Schedule many, with a batch and its callback.
	many := map[string]any{"batch": "b1", "on_complete": map[string]any{"type": "notify", "payload": "done"}, "tasks": []any{
		map[string]any{"id": "m1", "type": "resize", "in": "1h"},
		map[string]any{"id": "m2", "type": "resize", "in": "1h", "priority": "high"},
		map[string]any{"id": "m3", "type": "resize", "in": "1h", "after": []string{"m1"}},
	}}
	res := f.must(200, sch, "POST", "/api/v1/tasks:many", many)
	if res["scheduled"] != float64(3) {
		t.Errorf("schedule many: %v", res)
	}
	f.must(200, sch, "GET", "/api/v1/batches/b1", nil)
	// A schedule-many retried with the same ids and bodies answers as the
	// first; one task changed is a duplicate.
	plain := map[string]any{"tasks": []any{map[string]any{"id": "r1", "type": "resize", "at": "2030-01-01T00:00:00Z"}, map[string]any{"id": "r2", "type": "resize", "in": "1h"}}}
	f.must(200, sch, "POST", "/api/v1/tasks:many", plain)
	if res := f.must(200, sch, "POST", "/api/v1/tasks:many", plain); res["scheduled"] != float64(2) {
		t.Errorf("a retried schedule-many: %v", res)
	}
	plain["tasks"].([]any)[1].(map[string]any)["payload"] = "changed"
	if res := f.must(200, sch, "POST", "/api/v1/tasks:many", plain); res["scheduled"] != float64(1) || res["results"].([]any)[1].(map[string]any)["status"] != "duplicate" {
		t.Errorf("a schedule-many with one task changed: %v", res)
	}
	st := f.must(200, sch, "GET", "/api/v1/tasks/m2", nil)
	if st["state"] != "scheduled" || st["task"].(map[string]any)["priority"] != float64(2) {
		t.Errorf("status of m2: %v", st)
	}
	f.must(200, view, "GET", "/api/v1/tasks?type=resize&limit=2", nil)
	f.must(200, sch, "PUT", "/api/v1/tasks/m2", map[string]any{"type": "resize", "in": "2h", "payload": "replaced"})
	if it, err := f.c.Get(f.ctx, "m2"); err != nil || it.Payload != "replaced" {
		t.Errorf("after PUT: %+v, %v", it, err)
	}
	f.must(200, sch, "POST", "/api/v1/tasks/m2/reschedule", map[string]any{"at": "2031-01-01T00:00:00Z"})
	f.must(200, sch, "POST", "/api/v1/tasks/m2/cancel", nil)
	if _, err := f.c.Get(f.ctx, "m2"); err == nil {
		t.Error("m2 is still pending after cancel")
	}
	f.must(201, sch, "POST", "/api/v1/tasks", map[string]any{"id": "series", "type": "report", "every": "1h"})
	f.must(200, op, "POST", "/api/v1/tasks/series/disable", nil)
	f.must(200, op, "POST", "/api/v1/tasks/series/enable", nil)
	f.must(200, op, "POST", "/api/v1/tasks/m1/run-now", nil)
	f.must(200, view, "GET", "/api/v1/runs?type=resize&limit=10", nil)
	f.must(200, view, "GET", "/api/v1/search?q=type:resize", nil)
	if s := f.must(200, view, "GET", "/api/v1/search?q=inv-1", nil); s["exact"] == nil {
		t.Errorf("search of an exact id: %v", s)
	}
	f.must(200, op, "POST", "/api/v1/types/mail/pause", map[string]any{"for": "30m"})
	if p := f.must(200, view, "GET", "/api/v1/paused", nil); len(p["paused"].([]any)) != 1 {
		t.Errorf("paused: %v", p)
	}
	f.must(200, op, "POST", "/api/v1/types/mail/resume", nil)
	f.must(200, view, "GET", "/api/v1/dead-letters", nil)

	// A bulk cancel of what is pending of a type, confirmed by its count.
	if code, p := f.call(op, "POST", "/api/v1/bulk", map[string]any{"kind": "cancel-pending", "type": "resize", "expect": 99}); code != 409 {
		t.Errorf("bulk with a wrong expect: %d %v", code, p)
	}
	b := f.must(202, op, "POST", "/api/v1/bulk", map[string]any{"kind": "cancel-pending", "type": "resize", "expect": 4})
	f.must(200, view, "GET", "/api/v1/bulk", nil)
	f.must(200, view, "GET", "/api/v1/bulk/"+b["id"].(string), nil)

	// A dead letter, requeued.
	if err := deadLetter(f, "dies"); err != nil {
		t.Fatal(err)
	}
	dl := f.must(200, view, "GET", "/api/v1/dead-letters", nil)
	list := dl["dead_letters"].([]any)
	if len(list) != 1 {
		t.Fatalf("dead letters: %v", dl)
	}
	f.must(200, op, "POST", "/api/v1/dead-letters/"+list[0].(map[string]any)["id"].(string)+"/requeue", nil)

	if err := deadLetter(f, "dies-again"); err != nil {
		t.Fatal(err)
	}
	if r := f.must(200, op, "POST", "/api/v1/dead-letters/requeue-all", nil); r["requeued"].(float64) < 1 {
		t.Errorf("requeue-all: %v", r)
	}
	f.must(200, op, "POST", "/api/v1/dead-letters/purge", nil)

	if u := f.spec.uncovered(); len(u) > 0 {
		t.Errorf("operations never answered with success: %v", u)
	}
	// Every call that changed something is in the audit log, by token.
	page, err := f.c.AuditLog(f.ctx, leasecron.AuditQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]int{}
	for _, e := range page.Entries {
		if e.Via == "api" {
			by[e.Who+" "+e.Action]++
		}
	}
	for _, want := range []string{"token:svc schedule", "token:svc schedule-many", "token:svc cancel", "token:ops pause", "token:ops bulk", "token:ops deadletter requeue"} {
		if by[want] == 0 {
			t.Errorf("audit log has no %q: %v", want, by)
		}
	}
}

// deadLetter runs a worker with a failing handler until one task is dead.
func deadLetter(f *fixture, id string) error {
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: f.st, Names: f.names, InstanceID: "w-dead"})
	if err != nil {
		return err
	}
	w.Handle("boom", func(ctx context.Context, _ leasecron.Task) error { return fmt.Errorf("boom") })
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := f.c.Schedule(f.ctx, leasecron.Item{ID: id, Type: "boom", MaxAttempts: 1, Due: time.Now()}, nil); err != nil {
		return err
	}
	for {
		p, err := f.c.PeekDeadLetters(f.ctx, 32)
		if err == nil && slices.ContainsFunc(p.DeadLetters, func(d api.DeadLetter) bool { return d.RunID == id }) {
			return nil
		}
		select {
		case <-f.ctx.Done():
			return fmt.Errorf("no dead letter: %w", f.ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestSecurity: no token, 401; a scheduler cannot pause, bulk, requeue
// or read listings; a token limited to types cannot touch others; a
// revoked token fails within the cache time.
func TestSecurity(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Options{TokenCacheTTL: 500 * time.Millisecond})
	sch := f.token("svc", leasecron.RoleScheduler)
	mailOnly := f.token("mailer", leasecron.RoleOperator, "mail")
	view := f.token("grafana", leasecron.RoleViewer)

	for _, tok := range []string{"", "lct.svc.wrongwrongwrongwrongwrongwrongwrongwrong", "Basic abc", "lct.nobody." + strings.Repeat("x", 43)} {
		if code, p := f.call(tok, "GET", "/api/v1/health", nil); code != 401 || p["type"] != api.ProblemPrefix+"unauthorized" {
			t.Errorf("token %q: %d %v", tok, code, p)
		}
	}
	f.must(201, sch, "POST", "/api/v1/tasks", map[string]any{"id": "r1", "type": "report", "in": "1h"})
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/v1/types/report/pause"}, {"POST", "/api/v1/bulk"}, {"POST", "/api/v1/tasks/r1/run-now"},
		{"POST", "/api/v1/dead-letters/x/requeue"}, {"GET", "/api/v1/runs"}, {"GET", "/api/v1/tasks"},
		{"POST", "/api/v1/dead-letters/purge"}, {"POST", "/api/v1/dead-letters/requeue-all"},
	} {
		if code, _ := f.call(sch, c.method, c.path, "{}"); code != 403 {
			t.Errorf("scheduler %s %s: %d, want 403", c.method, c.path, code)
		}
	}
	if code, _ := f.call(view, "POST", "/api/v1/tasks", map[string]any{"type": "report"}); code != 403 {
		t.Errorf("viewer schedules: %d, want 403", code)
	}
	f.must(200, sch, "POST", "/api/v1/tasks:many", map[string]any{"batch": "rb", "tasks": []any{map[string]any{"id": "rb1", "type": "report", "in": "1h"}}})
	// Limited to mail.
	f.must(201, mailOnly, "POST", "/api/v1/tasks", map[string]any{"id": "m1", "type": "mail", "in": "1h"})
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/tasks", map[string]any{"type": "report"}},
		{"POST", "/api/v1/tasks", map[string]any{"id": "nt"}},
		{"GET", "/api/v1/tasks/r1", nil},
		{"POST", "/api/v1/tasks/r1/cancel", nil},
		{"PUT", "/api/v1/tasks/r1", map[string]any{"type": "mail"}},
		{"GET", "/api/v1/runs", nil},
		{"GET", "/api/v1/runs?type=report", nil},
		{"POST", "/api/v1/types/report/pause", nil},
		{"POST", "/api/v1/bulk", map[string]any{"kind": "cancel-pending", "expect": 1}},
		{"POST", "/api/v1/tasks:many", map[string]any{"tasks": []any{map[string]any{"type": "mail"}, map[string]any{"type": "report"}}}},
		{"POST", "/api/v1/dead-letters/purge", nil},
		{"POST", "/api/v1/dead-letters/requeue-all", nil},
		{"GET", "/api/v1/batches/rb", nil},
	} {
		if code, p := f.call(mailOnly, c.method, c.path, c.body); code != 403 && !(code == 400 && p["field"] == "type") {
			t.Errorf("mail-only %s %s: %d %v, want 403", c.method, c.path, code, p)
		}
	}
	if _, err := f.c.Get(f.ctx, "r1"); err != nil {
		t.Errorf("r1 after the refused calls: %v", err)
	}
	f.must(200, mailOnly, "GET", "/api/v1/tasks/m1", nil)
	// Revoked: refused within the cache time.
	if err := f.c.RevokeToken(f.ctx, "svc"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, _ := f.call(sch, "GET", "/api/v1/tasks/r1", nil)
		if code == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a revoked token still works after 5 s (cache 500 ms): %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMalformedInput: 50 malformed bodies and parameters are answered 4xx
// (never 5xx) with a problem that names the field where there is one, and
// nothing stored is changed.
func TestMalformedInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Options{MaxTasks: 5})
	op := f.token("ops", leasecron.RoleOperator)
	f.must(201, op, "POST", "/api/v1/tasks", map[string]any{"id": "keep", "type": "mail", "at": "2030-01-01T00:00:00Z", "payload": "kept"})
	cases := []struct {
		method, path string
		body         any
		field        string
	}{
		{"POST", "/api/v1/tasks", "", ""},
		{"POST", "/api/v1/tasks", "not json", ""},
		{"POST", "/api/v1/tasks", "[1,2]", ""},
		{"POST", "/api/v1/tasks", `{"type":"mail"} {"type":"mail"}`, ""},
		{"POST", "/api/v1/tasks", `{"type":"mail","tpye":"x"}`, ""},
		{"POST", "/api/v1/tasks", map[string]any{"type": "Mail!"}, "type"},
		{"POST", "/api/v1/tasks", map[string]any{"type": strings.Repeat("a", 65)}, "type"},
		{"POST", "/api/v1/tasks", map[string]any{"id": "has space", "type": "mail"}, "id"},
		{"POST", "/api/v1/tasks", map[string]any{"id": "a@b", "type": "mail"}, "id"},
		{"POST", "/api/v1/tasks", map[string]any{"id": strings.Repeat("x", 201), "type": "mail"}, "id"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "at": "tomorrow"}, "at"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "at": "2030-01-01T00:00:00"}, "at"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "in": "10 minutes"}, "in"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "in": "-5m"}, "in"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "in": "5m", "at": "2030-01-01T00:00:00Z"}, "in"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "cron": "every day"}, "cron"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "cron": "0 9 * * *", "tz": "Mars/Olympus"}, "tz"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "tz": "Europe/Paris"}, "tz"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "every": "sometimes"}, "every"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "every": "1h", "cron": "0 9 * * *"}, "cron"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "priority": 9}, "priority"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "priority": "urgent"}, "priority"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "after": 7}, "after"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "after_any": true}, "after_any"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "unique_for": "1h"}, "unique_for"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "unique_key": "k", "unique_for": "soon"}, "unique_for"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "unique_key": "k", "unique_states": "sleeping"}, "unique_states"},
		{"POST", "/api/v1/tasks", map[string]any{"type": "mail", "max_attempts": -1}, "max_attempts"},
		{"POST", "/api/v1/tasks", map[string]any{"id": "keep", "type": "mail", "payload": "changed"}, ""},
		{"POST", "/api/v1/tasks:many", map[string]any{}, "tasks"},
		{"POST", "/api/v1/tasks:many", map[string]any{"tasks": "x"}, ""},
		{"POST", "/api/v1/tasks:many", map[string]any{"tasks": []any{map[string]any{"type": "mail", "in": "x"}}}, ""},
		{"POST", "/api/v1/tasks:many", map[string]any{"tasks": []any{1, 2, 3, 4, 5, 6}}, ""},
		{"POST", "/api/v1/tasks:many", map[string]any{"tasks": []any{map[string]any{"type": "mail"}}, "on_complete": map[string]any{"type": "x"}}, "on_complete"},
		{"PUT", "/api/v1/tasks/keep", map[string]any{"id": "other", "type": "mail"}, "id"},
		{"PUT", "/api/v1/tasks/keep", map[string]any{"type": "mail", "in": "soon"}, "in"},
		{"POST", "/api/v1/tasks/keep/reschedule", map[string]any{}, "at"},
		{"POST", "/api/v1/tasks/keep/reschedule", map[string]any{"at": "x", "in": "1h"}, "at"},
		{"POST", "/api/v1/tasks/keep/reschedule", map[string]any{"at": "noon"}, "at"},
		{"POST", "/api/v1/tasks/keep/cancel", "not json", ""},
		{"GET", "/api/v1/tasks?limit=0", nil, "limit"},
		{"GET", "/api/v1/tasks?limit=abc", nil, "limit"},
		{"GET", "/api/v1/tasks?recurring=maybe", nil, "recurring"},
		{"GET", "/api/v1/runs?state=sleeping", nil, ""},
		{"GET", "/api/v1/search", nil, "q"},
		{"GET", "/api/v1/search?q=state:sleeping", nil, "q"},
		{"POST", "/api/v1/types/mail/pause", map[string]any{"for": "ever"}, "for"},
		{"POST", "/api/v1/types/mail/pause", map[string]any{"until": "soon"}, "until"},
		{"POST", "/api/v1/types/Bad!/pause", nil, "type"},
		{"POST", "/api/v1/bulk", map[string]any{"kind": "explode", "expect": 0}, ""},
		{"GET", "/api/v1/dead-letters?limit=1000", nil, "limit"},
		{"DELETE", "/api/v1/tasks/keep", nil, ""},
		{"GET", "/api/v1/nothing", nil, ""},
		{"GET", "/api/v1/tasks/nothing-here", nil, ""},
	}
	if len(cases) < 50 {
		t.Fatalf("%d cases, want at least 50", len(cases))
	}
	for _, c := range cases {
		code, p := f.call(op, c.method, c.path, c.body)
		if code < 400 || code >= 500 {
			t.Errorf("%s %s %v: %d, want 4xx: %v", c.method, c.path, c.body, code, p)
			continue
		}
		if p["type"] == nil || p["status"] != float64(code) || p["detail"] == "" {
			t.Errorf("%s %s %v: not a problem: %v", c.method, c.path, c.body, p)
		}
		if c.field != "" && p["field"] != c.field {
			t.Errorf("%s %s %v: field %v, want %q: %v", c.method, c.path, c.body, p["field"], c.field, p["detail"])
		}
	}
	if it, err := f.c.Get(f.ctx, "keep"); err != nil || it.Payload != "kept" || !it.Due.Equal(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("the stored task after the malformed calls: %+v, %v", it, err)
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	n    atomic.Int64
	left int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.left)
	for i := range p[:n] {
		p[i] = ' '
	}
	r.left -= n
	r.n.Add(n)
	return int(n), nil
}

// TestBodyLimit: a body over api.max_body is refused with 413 before it
// is read whole, whether its length is announced or not.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Options{MaxBody: 64 << 10})
	op := f.token("ops", leasecron.RoleOperator)
	h, err := api.New(f.c, api.Options{MaxBody: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, announced := range []bool{true, false} {
		body := &countingReader{left: 64 << 20}
		req := httptest.NewRequest("POST", "/api/v1/tasks", body)
		req.Header.Set("Authorization", "Bearer "+op)
		req.Header.Set("Content-Type", "application/json")
		if announced {
			req.ContentLength = 64 << 20
		} else {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "too-large") {
			t.Errorf("announced %v: %d %s", announced, rec.Code, rec.Body)
		}
		if n := body.n.Load(); n > 128<<10 {
			t.Errorf("announced %v: %d bytes read of a 64 MiB body over a 64 KiB limit", announced, n)
		}
	}
	code, p := f.call(op, "POST", "/api/v1/tasks", map[string]any{"type": "mail", "payload": strings.Repeat("x", 70<<10)})
	if code != 413 {
		t.Errorf("a 70 KiB body: %d %v", code, p)
	}
}

// TestRetriesAndBrowsers: a retried POST with --after keeps the pending
// child waiting for its parent; a retry whose payload went to a blob is
// compared with the blob (a different payload is a conflict); the same id
// twice in one schedule-many is refused; a browser's cross-site write and
// a body without a media type are refused; leasecron's own types are not
// the caller's.
func TestRetriesAndBrowsers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, api.Options{})
	op := f.token("ops", leasecron.RoleOperator)
	f.must(201, op, "POST", "/api/v1/tasks", map[string]any{"id": "parent", "type": "mail", "in": "1h"})
	child := map[string]any{"id": "child", "type": "mail", "in": "1h", "after": []string{"parent"}}
	f.must(201, op, "POST", "/api/v1/tasks", child)
	f.must(200, op, "POST", "/api/v1/tasks", child)
	if got, err := f.c.Dependents(f.ctx, "parent"); err != nil || len(got) != 1 || got[0] != "child" {
		t.Errorf("tasks waiting for the parent after a retried POST of the child: %v %v", got, err)
	}
	big := strings.Repeat("x", 30<<10)
	f.must(201, op, "POST", "/api/v1/tasks", map[string]any{"id": "big", "type": "mail", "in": "1h", "payload": big})
	f.must(200, op, "POST", "/api/v1/tasks", map[string]any{"id": "big", "type": "mail", "in": "1h", "payload": big})
	if code, _ := f.call(op, "POST", "/api/v1/tasks", map[string]any{"id": "big", "type": "mail", "in": "1h", "payload": "other"}); code != 409 {
		t.Errorf("a retry of a blob payload with another payload: %d, want 409", code)
	}
	if code, p := f.call(op, "POST", "/api/v1/tasks:many", map[string]any{"tasks": []any{map[string]any{"id": "twice", "type": "mail"}, map[string]any{"id": "twice", "type": "mail"}}}); code != 422 || !strings.Contains(fmt.Sprint(p["errors"]), "also task 0") {
		t.Errorf("one id twice in a request: %d %v", code, p)
	}
	if code, p := f.call(op, "POST", "/api/v1/tasks", map[string]any{"type": "leasecron-bulk"}); code != 400 || p["field"] != "type" {
		t.Errorf("leasecron's own type: %d %v", code, p)
	}
	for _, c := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"cross-site", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, 403},
		{"no media type", map[string]string{}, 415},
		{"a program", map[string]string{"Content-Type": "application/json"}, 201},
	} {
		req, _ := http.NewRequestWithContext(f.ctx, "POST", f.srv.URL+"/api/v1/tasks", strings.NewReader(`{"type":"mail","in":"1h"}`))
		req.Header.Set("Authorization", "bearer "+op) // the scheme is not case-sensitive
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
}

// sealFails fails every request for batch b1's header once armed, as
// storage that stops answering after a schedule-many wrote its tasks.
type sealFails struct {
	next  policy.Transporter
	armed atomic.Bool
}

func (f *sealFails) Do(req *http.Request) (*http.Response, error) {
	if f.armed.Load() && strings.Contains(req.URL.String(), "PartitionKey='~cb1',RowKey='h'") {
		return nil, errors.New("connection reset by peer")
	}
	return f.next.Do(req)
}

// A POST of a task without an id whose write storage did not answer (it
// may have been made) answers 500 outcome-unknown naming the task it may
// have scheduled, not a 503 that clients send again (a second task); with
// an id, the same: the server settles it by the id, or says it cannot.
func TestScheduleWithoutAnIdWhoseAnswerIsLostSaysWhichTask(t *testing.T) {
	var tr *answersLost
	f := newFixtureThrough(t, api.Options{}, func(next policy.Transporter) policy.Transporter {
		tr = &answersLost{next: next}
		return tr
	})
	sch := f.token("s", "scheduler")
	if code, p := f.call(sch, "POST", "/api/v1/tasks", map[string]any{"type": "resize", "in": "1h"}); code != 201 {
		t.Fatalf("a first schedule: %d %v", code, p) // (the tables made)
	}
	// Its write's answers lost, the task is found: it was written.
	tr.armed.Store(true)
	code, p := f.call(sch, "POST", "/api/v1/tasks", map[string]any{"type": "resize", "in": "1h", "payload": map[string]any{"n": 0}})
	tr.armed.Store(false)
	if task, _ := p["task"].(map[string]any); code != 201 || task == nil || task["id"] == "" {
		t.Fatalf("a schedule whose answers were lost and whose task is found: %d %v; want 201 with the task", code, p)
	}
	// Its look-up failing too, nobody can tell.
	tr.lookups.Store(true)
	tr.armed.Store(true)
	code, p = f.call(sch, "POST", "/api/v1/tasks", map[string]any{"type": "resize", "in": "1h", "payload": map[string]any{"n": 1}})
	tr.armed.Store(false)
	id, _ := p["id"].(string)
	if code != 500 || p["type"] != api.ProblemPrefix+"outcome-unknown" || id == "" || !strings.Contains(fmt.Sprint(p["detail"]), id) {
		t.Fatalf("a schedule whose answers were lost: %d %v; want 500 outcome-unknown naming the task", code, p)
	}
	if code, got := f.call(sch, "GET", "/api/v1/tasks/"+id, nil); code != 200 {
		t.Fatalf("the task the lost write scheduled: %d %v; want it found by the id the problem named", code, got)
	}
	// With an id and its look-up failing, the look-up the server makes
	// before writing fails first: 503, nothing written, safe to send
	// again.
	tr.armed.Store(true)
	code, p = f.call(sch, "POST", "/api/v1/tasks", map[string]any{"id": "named", "type": "resize", "in": "1h"})
	tr.armed.Store(false)
	if code != 503 {
		t.Fatalf("a schedule with an id whose look-up failed: %d %v; want 503 (nothing written, safe to send again)", code, p)
	}
	if code, got := f.call(sch, "GET", "/api/v1/tasks/named", nil); code != 404 {
		t.Fatalf("the task of a schedule answered 503: %d %v; want 404, nothing written", code, got)
	}
	// With an id and the look-up answering, the written task is found
	// and the answer is the identical retry's.
	tr.lookups.Store(false)
	tr.armed.Store(true)
	code, p = f.call(sch, "POST", "/api/v1/tasks", map[string]any{"id": "named2", "type": "resize", "in": "1h"})
	tr.armed.Store(false)
	if task, _ := p["task"].(map[string]any); code != 200 || task == nil || task["id"] != "named2" {
		t.Fatalf("a schedule with an id whose answers were lost and whose task is found: %d %v; want 200 with the task", code, p)
	}
}

// answersLost is a transport that, while armed, serves each table
// transaction ($batch) — and with lookups each read of an id's index row
// — and loses its answer.
type answersLost struct {
	next    policy.Transporter
	armed   atomic.Bool
	lookups atomic.Bool
}

func (f *answersLost) Do(req *http.Request) (*http.Response, error) {
	resp, err := f.next.Do(req)
	hit := strings.HasSuffix(req.URL.Path, "$batch") || f.lookups.Load() && strings.Contains(req.URL.String(), "id~")
	if err != nil || !f.armed.Load() || !hit {
		return resp, err
	}
	_ = resp.Body.Close()
	return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
}

// A schedule-many whose tasks were written but whose batch could not be
// sealed answers 500 "incomplete", saying so, rather than a 200 that hides
// a callback that may never run (a review of the seal's retry).
func TestScheduleManyWithAnUnsealedBatchSaysSo(t *testing.T) {
	var tr *sealFails
	f := newFixtureThrough(t, api.Options{}, func(next policy.Transporter) policy.Transporter {
		tr = &sealFails{next: next}
		return tr
	})
	sch := f.token("s", "scheduler")
	tr.armed.Store(true)
	many := map[string]any{"batch": "b1", "on_complete": map[string]any{"type": "notify"}, "tasks": []any{
		map[string]any{"id": "u1", "type": "resize", "in": "1h"},
		map[string]any{"id": "u2", "type": "resize", "in": "1h"},
	}}
	code, p := f.call(sch, "POST", "/api/v1/tasks:many", many)
	if code != 500 || p["type"] != api.ProblemPrefix+"incomplete" || !strings.Contains(fmt.Sprint(p["detail"]), "batch b1") {
		t.Fatalf("schedule-many with its seal failing: %d %v; want 500 incomplete naming the batch", code, p)
	}
	// The same request again finds the batch unsealed, as it would while
	// its first try is still writing it: come back, not refused.
	tr.armed.Store(false)
	if code, p := f.call(sch, "POST", "/api/v1/tasks:many", many); code != 503 || !strings.Contains(fmt.Sprint(p["detail"]), "being written") {
		t.Fatalf("the same request beside its unsealed batch: %d %v; want 503 to come back", code, p)
	}
}

// A schedule-many of a batch tried again because its first try went
// unanswered (a client's timeout: the first call wrote and sealed the
// batch) is answered as the first: every task scheduled. A request that
// differs (another member, another task under an id, no callback) is
// refused as the batch existing; and a task refused as already scheduled
// is the request's own only if it is in the request's batch.
func TestScheduleManyOfABatchTriedAgainIsAnsweredAsTheFirst(t *testing.T) {
	f := newFixture(t, api.Options{})
	sch := f.token("s", "scheduler")
	task := func(id, typ string) map[string]any { return map[string]any{"id": id, "type": typ, "in": "1h"} }
	many := func(batch string, cb bool, tasks ...any) map[string]any {
		m := map[string]any{"batch": batch, "tasks": tasks}
		if cb {
			m["on_complete"] = map[string]any{"type": "notify"}
		}
		return m
	}
	first := many("b2", true, task("v1", "resize"), task("v2", "resize"))
	if code, p := f.call(sch, "POST", "/api/v1/tasks:many", first); code != 200 || p["scheduled"] != float64(2) {
		t.Fatalf("schedule-many: %d %v", code, p)
	}
	code, p := f.call(sch, "POST", "/api/v1/tasks:many", first)
	if code != 200 || p["scheduled"] != float64(2) || p["batch"] != "b2" {
		t.Fatalf("the same request again: %d %v; want it answered as the first", code, p)
	}
	for _, r := range p["results"].([]any) {
		if r.(map[string]any)["status"] != "scheduled" {
			t.Fatalf("the same request again: %v; want every task scheduled", p)
		}
	}
	for name, other := range map[string]map[string]any{
		"another member":        many("b2", true, task("v1", "resize"), task("v3", "resize")),
		"another task of an id": many("b2", true, task("v1", "resize"), task("v2", "notify")),
		"no callback":           many("b2", false, task("v1", "resize"), task("v2", "resize")),
		"another callback":      {"batch": "b2", "on_complete": map[string]any{"type": "resize"}, "tasks": []any{task("v1", "resize"), task("v2", "resize")}},
		"a member left out":     many("b2", true, task("v1", "resize")),
		"a task without an id":  many("b2", true, task("v1", "resize"), map[string]any{"type": "resize", "in": "1h"}),
	} {
		if code, p := f.call(sch, "POST", "/api/v1/tasks:many", other); code != 409 || !strings.Contains(fmt.Sprint(p["detail"]), "batch already exists") {
			t.Errorf("%s: %d %v; want 409, the batch existing", name, code, p)
		}
	}
	if code, p := f.call(sch, "POST", "/api/v1/tasks", task("p1", "resize")); code != 201 {
		t.Fatalf("schedule p1: %d %v", code, p)
	}
	code, p = f.call(sch, "POST", "/api/v1/tasks:many", many("b3", false, task("p1", "resize")))
	if code != 200 || p["scheduled"] != float64(0) {
		t.Fatalf("a batch of a task pending outside it: %d %v; want nothing scheduled", code, p)
	}
	if code, p := f.call(sch, "GET", "/api/v1/batches/b3", nil); code != 404 {
		t.Fatalf("the batch of a request that wrote nothing: %d %v; want it taken back", code, p)
	}
}
