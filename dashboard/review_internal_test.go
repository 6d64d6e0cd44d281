package dashboard

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/leasecrontype"
)

// serveSource serves a dashboard over src, with a client and the headers
// of a JSON action that carries its CSRF token.
func serveSource(t *testing.T, src Source) (*httptest.Server, *http.Client, map[string]string) {
	t.Helper()
	h, err := newServer(src, Options{Clock: clock.NewFake(t0)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	_, _, _, cl := newTest(t, Options{})
	_, js := fetch(t, cl, "GET", srv.URL+"/api/csrf", nil, nil)
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(js), &tok); err != nil {
		t.Fatal(err)
	}
	return srv, cl, map[string]string{"Accept": "application/json", "X-CSRF-Token": tok.Token}
}

// notDrainable answers every drain as an instance of an earlier release.
type notDrainable struct{ *fakeSource }

func (n notDrainable) Drain(ctx context.Context, id, by string) ([]string, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("%w: drain: give the id of a running instance", leasecron.ErrInvalidOptions)
	}
	return nil, fmt.Errorf("%w: instance %q does not look for drain requests", leasecron.ErrNotDrainable, id)
}

// What a review of the dashboard against README found (each case failed
// before its fix): a drain refused for the instance's release or a blank
// id answered 502, as a storage failure; a cross-site POST through a
// viewer's browser wrote an audit entry in the viewer's name; viewers and
// read-only dashboards saw the bulk operations' buttons; a disabled
// series showed as scheduled, offering Run now and no Enable; a snoozed
// run had no colour.
func TestWhatTheDashboardReviewFound(t *testing.T) {
	t.Run("drain refusals are the viewer's, not storage's", func(t *testing.T) {
		srv, cl, hdr := serveSource(t, notDrainable{newFakeSource(t0)})
		for _, c := range []struct {
			path string
			want int
		}{{"/fleet/w3/drain", http.StatusConflict}, {"/fleet/%20/drain", http.StatusBadRequest}} {
			if resp, body := fetch(t, cl, "POST", srv.URL+c.path, url.Values{}, hdr); resp.StatusCode != c.want {
				t.Errorf("POST %s: %d %s; want %d", c.path, resp.StatusCode, body, c.want)
			}
		}
	})
	t.Run("a cross-site POST writes no audit entry", func(t *testing.T) {
		src, _, srv, cl := newTest(t, Options{Auth: "basic:alice:a", ViewerAuth: "basic:bob:b"})
		bob := "Basic " + base64.StdEncoding.EncodeToString([]byte("bob:b"))
		resp, _ := fetch(t, cl, "POST", srv.URL+"/deadletters/purge", url.Values{}, map[string]string{"Authorization": bob, "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
		src.mu.Lock()
		defer src.mu.Unlock()
		if resp.StatusCode != http.StatusForbidden || len(src.audit) != 0 {
			t.Errorf("cross-site POST as a viewer: %d, audit %+v; want 403 and no entry", resp.StatusCode, src.audit)
		}
	})
	t.Run("viewers and read-only dashboards see no bulk buttons", func(t *testing.T) {
		for _, o := range []Options{{Auth: "basic:alice:a", ViewerAuth: "basic:bob:b"}, {ReadOnly: true}} {
			_, _, srv, cl := newTest(t, o)
			hdr := map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("bob:b"))}
			for _, p := range []string{"/tasks", "/recurring", "/deadletters"} {
				if _, body := fetch(t, cl, "GET", srv.URL+p, nil, hdr); strings.Contains(body, "/bulk/new") {
					t.Errorf("viewer %v, read-only %v: %s offers a bulk operation", o.ViewerAuth != "", o.ReadOnly, p)
				}
			}
		}
	})
	t.Run("a disabled series is disabled, with Enable and no Run now", func(t *testing.T) {
		src, _, srv, cl := newTest(t, Options{})
		src.pending[1].Disabled = t0.Add(-time.Hour)
		_, js := fetch(t, cl, "GET", srv.URL+"/api/tasks/nightly", nil, nil)
		var v struct{ State string }
		if err := json.Unmarshal([]byte(js), &v); err != nil || v.State != leasecron.StateDisabled {
			t.Errorf("/api/tasks/nightly: %s; want state disabled", js)
		}
		_, page := fetch(t, cl, "GET", srv.URL+"/tasks/nightly", nil, nil)
		if !strings.Contains(page, "/tasks/nightly/enable") || strings.Contains(page, "/tasks/nightly/run-now") {
			t.Errorf("a disabled series' page: want Enable and no Run now")
		}
		_, list := fetch(t, cl, "GET", srv.URL+"/tasks", nil, nil)
		if strings.Contains(list, "/tasks/nightly/run-now") {
			t.Errorf("/tasks offers Run now for a disabled series")
		}
	})
	t.Run("a snoozed run has its colour", func(t *testing.T) {
		src, _, srv, cl := newTest(t, Options{})
		src.runs = append(src.runs, leasecrontype.Run{ID: "zz-1", State: leasecrontype.RunSnoozed, Type: "mail"})
		if _, body := fetch(t, cl, "GET", srv.URL+"/runs?state=snoozed", nil, nil); !strings.Contains(body, `st-snoozed">snoozed<`) {
			t.Errorf("a snoozed run has no colour of its own")
		}
	})
}

// exactAndWaiting answers an exact search with a pending task, and a
// run-now with a task that still waits for its parents.
type exactAndWaiting struct{ *fakeSource }

func (e exactAndWaiting) Search(ctx context.Context, q leasecron.SearchQuery) (leasecron.SearchResult, error) {
	it := leasecron.Item{ID: q.ID, Type: "mail", Due: t0.Add(time.Hour)}
	return leasecron.SearchResult{Exact: &leasecron.Status{ID: q.ID, Pending: &it}}, nil
}

func (e exactAndWaiting) RunNow(ctx context.Context, id string) (leasecron.Item, error) {
	return leasecron.Item{ID: id, Type: "mail", Due: t0, Waiting: true}, nil
}

// /api/search answers an exact id of a task that is only pending with
// that task (it answered no match), and Run now of a task that waits for
// others says it still waits (it said "due now" alone).
func TestExactSearchesOfPendingTasksAndRunNowOfWaitingOnes(t *testing.T) {
	srv, cl, hdr := serveSource(t, exactAndWaiting{newFakeSource(t0)})
	_, js := fetch(t, cl, "GET", srv.URL+"/api/search?q=pend", nil, nil)
	var v SearchView
	if err := json.Unmarshal([]byte(js), &v); err != nil || len(v.Runs) != 1 || v.Runs[0].ID != "pend" || v.Runs[0].State != "scheduled" {
		t.Errorf("/api/search?q=pend: %s; want pend, scheduled", js)
	}
	resp, body := fetch(t, cl, "POST", srv.URL+"/tasks/child/run-now", url.Values{}, hdr)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "still waits") {
		t.Errorf("run-now of a waiting task: %d %s; want it said to still wait", resp.StatusCode, body)
	}
}
