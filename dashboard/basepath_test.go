package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// Under dashboard.base_path every page, link, form, action and redirect is
// under the prefix, and nothing answers outside it.
func TestBasePathServesEverythingUnderThePrefix(t *testing.T) {
	src, _, srv, cl := newTest(t, Options{BasePath: "/ops/leasecron/"})
	links := regexp.MustCompile(`(?:href|action|src)="([^"?][^"]*)"`)
	for _, p := range []string{"/", "/tasks", "/tasks/job-1", "/recurring", "/runs", "/deadletters", "/blackboard", "/fleet", "/audit", "/search?q=type:mail"} {
		resp, body := fetch(t, cl, "GET", srv.URL+"/ops/leasecron"+p, nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s under the base path: %d %s", p, resp.StatusCode, body)
		}
		for _, m := range links.FindAllStringSubmatch(body, -1) {
			if !strings.HasPrefix(m[1], "/ops/leasecron/") {
				t.Errorf("page %s links to %q, outside the base path", p, m[1])
			}
		}
	}
	if resp, body := fetch(t, cl, "GET", srv.URL+"/ops/leasecron/api/tasks", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"items"`) {
		t.Errorf("API under the base path: %d %s", resp.StatusCode, body)
	}
	if resp, body := fetch(t, cl, "GET", srv.URL+"/ops/leasecron/static/app.css", nil, nil); resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Errorf("static under the base path: %d", resp.StatusCode)
	}
	for _, p := range []string{"/", "/tasks", "/api/tasks", "/ops/leasecronx/tasks", "/ops/tasks"} {
		resp, body := fetch(t, cl, "GET", srv.URL+p, nil, nil)
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "/ops/leasecron/ (dashboard.base_path)") {
			t.Errorf("GET %s outside the base path: %d %q, want 404 naming the base path", p, resp.StatusCode, body)
		}
	}
	if resp, _ := fetch(t, cl, "GET", srv.URL+"/ops/leasecron?x=1", nil, nil); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ops/leasecron/?x=1" {
		t.Errorf("the base path without its slash: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp, _ := fetch(t, cl, "GET", srv.URL+"/ops/leasecron/tasks?id=job-1", nil, nil); resp.Header.Get("Location") != "/ops/leasecron/tasks/job-1" {
		t.Errorf("id search redirects to %q", resp.Header.Get("Location"))
	}
	if resp, _ := fetch(t, cl, "GET", srv.URL+"/ops/leasecron/search?q=job-1", nil, nil); resp.Header.Get("Location") != "/ops/leasecron/tasks/job-1" {
		t.Errorf("an id alone in the search box redirects to %q", resp.Header.Get("Location"))
	}
	_, body := fetch(t, cl, "GET", srv.URL+"/ops/leasecron/tasks/job-1", nil, nil)
	token := csrfRE.FindStringSubmatch(body)[1]
	back := regexp.MustCompile(`name="back" value="([^"]+)"`).FindStringSubmatch(body)[1]
	resp, _ := fetch(t, cl, "POST", srv.URL+"/ops/leasecron/tasks/job-1/cancel", url.Values{"csrf": {token}, "back": {back}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ops/leasecron/tasks/job-1" {
		t.Errorf("an action under the base path: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := src.done(); len(got) != 1 || got[0] != "cancel job-1" {
		t.Errorf("actions: %v", got)
	}
}

func TestBasePathRefusesWhatIsNotAPrefix(t *testing.T) {
	for _, p := range []string{"leasecron", "/a//b", "/a/../b", "/a b", "/a?b", "/ä"} {
		_, err := newServer(newFakeSource(t0), Options{BasePath: p})
		if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "dashboard.base_path") {
			t.Errorf("BasePath %q: %v, want ErrInvalidOptions naming dashboard.base_path", p, err)
		}
	}
	for _, p := range []string{"", "/", "/leasecron", "/a/b-c_d.e~f/"} {
		if _, err := newServer(newFakeSource(t0), Options{BasePath: p}); err != nil {
			t.Errorf("BasePath %q refused: %v", p, err)
		}
	}
}
