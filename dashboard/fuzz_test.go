package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/schedule"
)

// strictSource is the fake source that fails as storage does when handed
// a key storage cannot hold: the dashboard must refuse such ids itself.
type strictSource struct{ *fakeSource }

func storageKeyError(what, id string) error {
	if id == "" || len(id) > 1024 || !utf8.ValidString(id) || strings.ContainsAny(id, "/\\#?") {
		return fmt.Errorf("storage refused %s %q (400 InvalidInput)", what, id)
	}
	for _, r := range id {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return fmt.Errorf("storage refused %s %q (400 InvalidInput)", what, id)
		}
	}
	return nil
}

func (s strictSource) Task(ctx context.Context, id string) (Task, error) {
	if err := storageKeyError("task", id); err != nil {
		return Task{}, err
	}
	return s.fakeSource.Task(ctx, id)
}

func (s strictSource) Cancel(ctx context.Context, id string) (string, error) {
	if err := storageKeyError("task", id); err != nil {
		return "", err
	}
	return s.fakeSource.Cancel(ctx, id)
}

func (s strictSource) RunNow(ctx context.Context, id string) (schedule.Item, error) {
	if err := storageKeyError("task", id); err != nil {
		return schedule.Item{}, err
	}
	return s.fakeSource.RunNow(ctx, id)
}

func (s strictSource) Reschedule(ctx context.Context, id string, due time.Time) (schedule.Item, error) {
	if err := storageKeyError("task", id); err != nil {
		return schedule.Item{}, err
	}
	return s.fakeSource.Reschedule(ctx, id, due)
}

func (s strictSource) Requeue(ctx context.Context, id string) error {
	if err := storageKeyError("dead letter", id); err != nil {
		return err
	}
	return s.fakeSource.Requeue(ctx, id)
}

func (s strictSource) RunKeyNow(ctx context.Context, key string) error {
	if err := storageKeyError("key", key); err != nil {
		return err
	}
	return s.fakeSource.RunKeyNow(ctx, key)
}

func (s strictSource) RemoveKey(ctx context.Context, key string) error {
	if err := storageKeyError("key", key); err != nil {
		return err
	}
	return s.fakeSource.RemoveKey(ctx, key)
}

// FuzzRouter sends any method, path, query and form to the dashboard
// (with a valid CSRF token, so actions run) over a healthy source: the
// answer is never a 5xx and never a panic, and a 4xx carries a message.
func FuzzRouter(f *testing.F) {
	seeds := []struct{ method, path, query, form string }{
		{"GET", "/", "", ""}, {"GET", "/api/overview", "", ""}, {"GET", "/tasks", "type=mail", ""}, {"GET", "/tasks", "id=job-1", ""},
		{"GET", "/tasks/job-1", "", ""}, {"GET", "/api/tasks/nightly", "", ""}, {"GET", "/tasks/\x00", "", ""}, {"GET", "/tasks/" + strings.Repeat("a", 3000), "", ""},
		{"GET", "/runs", "continue=garbage", ""}, {"GET", "/runs", "state=sleeping&type=Mail", ""}, {"GET", "/recurring", "continue=bad", ""},
		{"GET", "/deadletters", "", ""}, {"GET", "/blackboard", "", ""}, {"GET", "/fleet", "", ""}, {"GET", "/static/app.css", "", ""},
		{"GET", "/static/../../etc/passwd", "", ""}, {"GET", "/nope", "", ""}, {"GET", "//evil", "", ""}, {"DELETE", "/tasks", "", ""},
		{"POST", "/tasks", "", "type=mail&in=1m&payload=x"}, {"POST", "/tasks", "", "type=mail&cron=61+*+*+*+*"}, {"POST", "/tasks", "", "type=mail&every=1m&tz=Mars"},
		{"POST", "/tasks/job-1/reschedule", "", "at=tomorrow"}, {"POST", "/tasks/job-1/reschedule", "", "in=1h&back=/tasks"},
		{"POST", "/tasks/job-1/cancel", "", ""}, {"POST", "/tasks/a%2Fb/run-now", "", ""}, {"POST", "/deadletters/bad-1/requeue", "", ""},
		{"POST", "/deadletters/requeue-all", "", ""}, {"POST", "/deadletters/purge", "", ""}, {"POST", "/blackboard/city-a/run-now", "", ""},
		{"POST", "/blackboard/city-a/remove", "", "back=https://evil.example/"}, {"POST", "/tasks", "", "%zz"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, s.form, false)
		f.Add(s.method, s.path, s.query, s.form, true)
	}
	src := newFakeSource(t0)
	h, err := newServer(strictSource{src}, Options{Clock: clock.NewFake(t0), Version: "test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api/csrf", nil))
	var tok struct{ Token string }
	if err := json.NewDecoder(rec.Body).Decode(&tok); err != nil || tok.Token == "" {
		f.Fatalf("csrf token: %v", err)
	}
	cookies := rec.Result().Cookies()
	f.Fuzz(func(t *testing.T, method, path, query, form string, asJSON bool) {
		if !validMethod(method) {
			method = "GET"
		}
		r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}, Host: "127.0.0.1:8090",
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, RequestURI: (&url.URL{Path: path, RawQuery: query}).RequestURI()}
		r = r.WithContext(context.Background())
		r.Body = io.NopCloser(strings.NewReader(form))
		r.ContentLength = int64(len(form))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-CSRF-Token", tok.Token)
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		if asJSON {
			r.Header.Set("Accept", "application/json")
		}
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("%s %q ?%q form %q: %d %.300s", method, path, query, form, w.Code, w.Body.String())
		}
		if w.Code >= 400 && strings.TrimSpace(w.Body.String()) == "" {
			t.Fatalf("%s %q ?%q: %d with no message", method, path, query, w.Code)
		}
		src.mu.Lock()
		src.actions = nil
		src.mu.Unlock()
	})
}

func validMethod(m string) bool {
	switch m {
	case "GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS":
		return true
	}
	return false
}
