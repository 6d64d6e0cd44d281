package dashboard

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/clock"
)

var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

func newTest(t *testing.T, o Options) (*fakeSource, *clock.Fake, *httptest.Server, *http.Client) {
	t.Helper()
	src := newFakeSource(t0)
	clk := clock.NewFake(t0)
	o.Clock = clk
	o.Version = "test"
	h, err := newServer(src, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return src, clk, srv, cl
}

func fetch(t *testing.T, cl *http.Client, method, u string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, u, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestEveryPageRendersItsIDsAndJSONTwin(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	for _, c := range []struct {
		path string
		ids  []string
		json string // a key of the JSON twin
	}{
		{"/", []string{"leader", "fleet-size", "queue-depth", "dead-letters", "due-backlog", "oldest-lag", "backpressure", "throughput-chart", "counters", "limits"}, "queue_depth"},
		{"/tasks", []string{"tasks-table", "schedule-form", "filter-form", "search-form"}, "items"},
		{"/tasks/job-1", []string{"task-state", "task-fields", "payload", "task-actions"}, "pending"},
		{"/tasks/bad-1", []string{"task-state", "last-error"}, "run"},
		{"/tasks/done-1", []string{"task-state", "task-progress", "output-tail"}, "run"},
		{"/recurring", []string{"series-table"}, "series"},
		{"/runs", []string{"runs-table", "state-tabs"}, "runs"},
		{"/runs?state=dead", []string{"runs-table"}, "runs"},
		{"/deadletters", []string{"deadletters-table", "bulk-actions", "dead-total"}, "dead_letters"},
		{"/blackboard", []string{"keys-table"}, "keys"},
		{"/fleet", []string{"leader", "instances-table", "slots-table", "shards-summary", "shards-table", "members-table"}, "shards"},
		{"/audit", []string{"audit-table"}, "entries"},
		{"/search?q=type:mail+state:dead", []string{"search-table", "search-box"}, "runs"},
	} {
		t.Run(c.path, func(t *testing.T) {
			resp, body := fetch(t, cl, "GET", srv.URL+c.path, nil, nil)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %s: %d\n%s", c.path, resp.StatusCode, body)
			}
			for _, id := range c.ids {
				if !strings.Contains(body, `id="`+id+`"`) {
					t.Errorf("GET %s: no element with id %q", c.path, id)
				}
			}
			api := "/api" + c.path
			if c.path == "/" {
				api = "/api/overview"
			}
			resp, body = fetch(t, cl, "GET", srv.URL+api, nil, nil)
			var m map[string]any
			if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &m) != nil {
				t.Fatalf("GET %s: %d %s", api, resp.StatusCode, body)
			}
			if _, ok := m[c.json]; !ok {
				t.Errorf("GET %s: no %q in %s", api, c.json, body)
			}
		})
	}
}

func TestPayloadsErrorsAndOutputAreEscaped(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	for _, p := range []string{"/tasks", "/tasks/job-1", "/tasks/done-1", "/tasks/bad-1", "/runs", "/deadletters", "/blackboard"} {
		t.Run(p, func(t *testing.T) {
			_, body := fetch(t, cl, "GET", srv.URL+p, nil, nil)
			if strings.Contains(body, "<img") {
				t.Errorf("GET %s: the payload reached the page as markup", p)
			}
			if !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") && p != "/runs" && p != "/blackboard" {
				t.Errorf("GET %s: the payload is not shown as text", p)
			}
		})
	}
}

func TestSecurityHeaders(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	resp, _ := fetch(t, cl, "GET", srv.URL+"/", nil, nil)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(csp, want) {
				t.Errorf("CSP %q lacks %q", csp, want)
			}
		})
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP allows inline code: %q", csp)
	}
	if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: %v", resp.Header)
	}
}

func TestActionsNeedTheCSRFToken(t *testing.T) {
	src, _, srv, cl := newTest(t, Options{})
	_, body := fetch(t, cl, "GET", srv.URL+"/tasks", nil, nil)
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token in the tasks page")
	}
	token := m[1]
	// Without the token, with a wrong one, and cross-site with the right
	// one: refused, and nothing happens.
	for i, c := range []struct {
		form url.Values
		hdr  map[string]string
	}{
		{url.Values{"back": {"/tasks"}}, nil},
		{url.Values{"csrf": {"forged"}}, nil},
		{url.Values{"csrf": {token}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{url.Values{"csrf": {token}}, map[string]string{"Origin": "https://evil.example"}},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			resp, _ := fetch(t, cl, "POST", srv.URL+"/tasks/job-1/cancel", c.form, c.hdr)
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST %v %v: status %d, want 403", c.form, c.hdr, resp.StatusCode)
			}
		})
	}
	// Another browser's cookie with this token: refused too.
	other := &http.Client{CheckRedirect: cl.CheckRedirect}
	if resp, _ := fetch(t, other, "POST", srv.URL+"/tasks/job-1/cancel", url.Values{"csrf": {token}}, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("token without its cookie: %d", resp.StatusCode)
	}
	if got := src.done(); len(got) != 0 {
		t.Fatalf("refused requests acted: %v", got)
	}
	resp, _ := fetch(t, cl, "POST", srv.URL+"/tasks/job-1/cancel", url.Values{"csrf": {token}, "back": {"/tasks"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/tasks" {
		t.Fatalf("POST with token: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := src.done(); len(got) != 1 || got[0] != "cancel job-1" {
		t.Fatalf("actions: %v", got)
	}
	// The result shows once on the next page.
	_, body = fetch(t, cl, "GET", srv.URL+"/tasks", nil, nil)
	if !strings.Contains(body, `id="flash"`) || !strings.Contains(body, "cancelled job-1") {
		t.Errorf("no flash message after the action")
	}
	_, body = fetch(t, cl, "GET", srv.URL+"/tasks", nil, nil)
	if strings.Contains(body, `id="flash"`) {
		t.Errorf("the flash message shows twice")
	}
}

func TestEveryActionReachesTheSource(t *testing.T) {
	src, _, srv, cl := newTest(t, Options{})
	resp, body := fetch(t, cl, "GET", srv.URL+"/api/csrf", nil, nil)
	var tok struct{ Token string }
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &tok) != nil || tok.Token == "" {
		t.Fatalf("GET /api/csrf: %d %s", resp.StatusCode, body)
	}
	js := map[string]string{"Accept": "application/json", "X-CSRF-Token": tok.Token}
	for _, c := range []struct {
		path string
		form url.Values
		want string
	}{
		{"/tasks", url.Values{"id": {"new-1"}, "type": {"mail"}, "in": {"10m"}}, "schedule new-1"},
		{"/tasks/job-1/run-now", nil, "run-now job-1"},
		{"/tasks/job-1/reschedule", url.Values{"in": {"90s"}}, "reschedule job-1 1m30s"},
		{"/tasks/job-1/cancel", nil, "cancel job-1"},
		{"/tasks/nightly/disable", nil, "disable nightly"},
		{"/tasks/nightly/enable", nil, "enable nightly"},
		{"/deadletters/bad-1/requeue", nil, "requeue bad-1"},
		{"/deadletters/requeue-all", nil, "requeue-all"},
		{"/deadletters/purge", nil, "purge"},
		{"/blackboard/city-a/run-now", nil, "key-run-now city-a"},
		{"/blackboard/city-a/remove", nil, "key-remove city-a"},
		{"/fleet/w3/drain", nil, "drain w3 by anonymous"},
	} {
		t.Run(c.path, func(t *testing.T) {
			if c.form == nil {
				c.form = url.Values{}
			}
			resp, body := fetch(t, cl, "POST", srv.URL+c.path, c.form, js)
			var out struct {
				OK      bool
				Message string
			}
			if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &out) != nil || !out.OK {
				t.Errorf("POST %s: %d %s", c.path, resp.StatusCode, body)
			}
			got := src.done()
			if len(got) == 0 || got[len(got)-1] != c.want {
				t.Errorf("POST %s: source saw %v, want %q last", c.path, got, c.want)
			}
			// A drain says what no other running instance does once it
			// has stopped (the fake's w3 is the only leader).
			if strings.HasSuffix(c.path, "/drain") && !strings.Contains(out.Message, "warning: no other running instance can lead") {
				t.Errorf("POST %s: %q; want the warning", c.path, out.Message)
			}
		})
	}
	// Bad input is refused before the source is asked, naming the value.
	n := len(src.done())
	resp, body = fetch(t, cl, "POST", srv.URL+"/tasks", url.Values{"in": {"soon"}}, js)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `\"soon\"`) {
		t.Errorf("bad delay: %d %s", resp.StatusCode, body)
	}
	resp, body = fetch(t, cl, "POST", srv.URL+"/tasks/job-1/reschedule", url.Values{}, js)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("reschedule without a time: %d %s", resp.StatusCode, body)
	}
	if len(src.done()) != n {
		t.Errorf("refused input reached the source: %v", src.done()[n:])
	}
}

func TestReadOnlyHidesAndRefusesActions(t *testing.T) {
	src, _, srv, cl := newTest(t, Options{ReadOnly: true})
	for _, p := range []string{"/", "/tasks", "/tasks/job-1", "/recurring", "/deadletters", "/blackboard"} {
		t.Run(p, func(t *testing.T) {
			_, body := fetch(t, cl, "GET", srv.URL+p, nil, nil)
			if strings.Contains(body, `method="post"`) {
				t.Errorf("read-only %s shows a form that changes state", p)
			}
		})
	}
	_, body := fetch(t, cl, "GET", srv.URL+"/api/csrf", nil, nil)
	var tok struct{ Token string }
	_ = json.Unmarshal([]byte(body), &tok)
	resp, _ := fetch(t, cl, "POST", srv.URL+"/deadletters/purge", url.Values{"csrf": {tok.Token}}, nil)
	if resp.StatusCode != http.StatusForbidden || len(src.done()) != 0 {
		t.Errorf("read-only purge: %d, actions %v", resp.StatusCode, src.done())
	}
}

func TestAuth(t *testing.T) {
	for _, c := range []struct {
		auth       string
		user, pass string
		bearer     string
		want       int
	}{
		{"basic:ops:s3cret", "ops", "s3cret", "", 200},
		{"basic:ops:s3cret", "ops", "wrong", "", 401},
		{"basic:ops:s3cret", "admin", "s3cret", "", 401},
		{"basic:ops:s3cret", "", "", "", 401},
		{"basic:ops:s3cret", "", "", "s3cret", 401},
		{"bearer:tok3n", "", "", "tok3n", 200},
		{"bearer:tok3n", "", "", "tok3", 401},
		{"bearer:tok3n", "anyone", "tok3n", "", 200},
		{"bearer:tok3n", "anyone", "nope", "", 401},
	} {
		t.Run(c.auth, func(t *testing.T) {
			_, _, srv, cl := newTest(t, Options{Auth: c.auth})
			req, _ := http.NewRequest("GET", srv.URL+"/api/overview", nil)
			if c.user != "" || c.pass != "" {
				req.SetBasicAuth(c.user, c.pass)
			}
			if c.bearer != "" {
				req.Header.Set("Authorization", "Bearer "+c.bearer)
			}
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("%s with user %q pass %q bearer %q: %d, want %d", c.auth, c.user, c.pass, c.bearer, resp.StatusCode, c.want)
			}
			if c.want == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
				t.Errorf("401 without a basic-auth challenge")
			}
		})
	}
	for _, bad := range []string{"s3cret", "basic:ops", "basic::x", "bearer:", "token:x"} {
		t.Run(bad, func(t *testing.T) {
			_, err := newServer(newFakeSource(t0), Options{Auth: bad})
			if err == nil || strings.Contains(err.Error(), bad) && bad != "bearer:" {
				t.Errorf("auth %q: err %v (must refuse without echoing the secret)", bad, err)
			}
		})
	}
}

func TestCheckAddr(t *testing.T) {
	for _, c := range []struct {
		addr string
		o    Options
		ok   bool
	}{
		{"127.0.0.1:8090", Options{}, true},
		{"localhost:8090", Options{}, true},
		{"[::1]:8090", Options{}, true},
		{":8090", Options{}, false},
		{"0.0.0.0:8090", Options{}, false},
		{"10.1.2.3:8090", Options{}, false},
		{"example.org:8090", Options{}, false},
		{":8090", Options{ReadOnly: true}, false},
		{":8090", Options{AllowAnonymous: true}, false},
		{":8090", Options{ReadOnly: true, AllowAnonymous: true}, true},
		{":8090", Options{Auth: "bearer:x"}, true},
		{"nonsense", Options{}, false},
	} {
		t.Run(c.addr, func(t *testing.T) {
			err := CheckAddr(c.addr, c.o)
			if (err == nil) != c.ok {
				t.Errorf("CheckAddr(%q, %+v) = %v, want ok=%v", c.addr, c.o, err, c.ok)
			}
			if err != nil && !strings.Contains(err.Error(), c.addr) {
				t.Errorf("error %q does not name the address", err)
			}
		})
	}
	if err := CheckAddr(":1", Options{}); !errors.Is(err, ErrExposed) {
		t.Errorf("want ErrExposed, got %v", err)
	}
}

func TestReadsAreSharedBetweenViewers(t *testing.T) {
	src, clk, srv, cl := newTest(t, Options{CacheTTL: 5 * time.Second})
	for range 5 {
		fetch(t, cl, "GET", srv.URL+"/", nil, nil)
		fetch(t, cl, "GET", srv.URL+"/api/overview", nil, nil)
	}
	if n := src.called("Stats"); n != 1 {
		t.Fatalf("10 views within the TTL read Stats %d times, want 1", n)
	}
	clk.Advance(5 * time.Second)
	fetch(t, cl, "GET", srv.URL+"/", nil, nil)
	if n := src.called("Stats"); n != 2 {
		t.Fatalf("after the TTL: %d reads, want 2", n)
	}
	// An action clears the cache, so its effect shows at once.
	_, body := fetch(t, cl, "GET", srv.URL+"/api/csrf", nil, nil)
	var tok struct{ Token string }
	_ = json.Unmarshal([]byte(body), &tok)
	fetch(t, cl, "POST", srv.URL+"/deadletters/purge", url.Values{"csrf": {tok.Token}}, nil)
	fetch(t, cl, "GET", srv.URL+"/", nil, nil)
	if n := src.called("Stats"); n != 3 {
		t.Fatalf("after an action: %d reads, want 3", n)
	}
}

func TestBadQueriesNameTheValue(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	for _, c := range []struct{ path, want string }{
		{"/runs?state=sleeping", `"sleeping"`},
		{"/tasks?continue=bad", `bad`},
		{"/tasks/nope", `nope`},
	} {
		t.Run(c.path, func(t *testing.T) {
			resp, body := fetch(t, cl, "GET", srv.URL+c.path, nil, nil)
			if resp.StatusCode/100 != 4 || !strings.Contains(body, c.want) && !strings.Contains(body, template_escape(c.want)) {
				t.Errorf("GET %s: %d, body lacks %s", c.path, resp.StatusCode, c.want)
			}
		})
	}
	resp, _ := fetch(t, cl, "GET", srv.URL+"/tasks?id=job-1", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/tasks/job-1" {
		t.Errorf("id search: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func template_escape(s string) string { return strings.ReplaceAll(s, `"`, "&#34;") }

func TestBackStaysOnThisSite(t *testing.T) {
	for in, want := range map[string]string{"/tasks?type=a": "/tasks?type=a", "//evil.example/": "/", "https://evil.example/": "/", "/\\evil": "/", "": "/"} {
		t.Run(fmt.Sprint(in), func(t *testing.T) {
			r := httptest.NewRequest("POST", "/x", strings.NewReader(url.Values{"back": {in}}.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if got := backTo(r); got != want {
				t.Errorf("backTo(%q) = %q, want %q", in, got, want)
			}
		})
	}
}

func TestChartScale(t *testing.T) {
	for in, want := range map[int64]int64{0: 5, 3: 5, 6: 10, 11: 20, 20: 20, 21: 50, 499: 500, 501: 1000} {
		t.Run(fmt.Sprint(in), func(t *testing.T) {
			if got := niceMax(in); got != want {
				t.Errorf("niceMax(%d) = %d, want %d", in, got, want)
			}
		})
	}
	ms := minuteViews([]Minute{{Minute: t0.Add(-30 * time.Second), Succeeded: 4, Failed: 1}}, t0)
	if len(ms) != 60 || !ms[59].Minute.Equal(t0) || ms[58].Succeeded != 4 {
		t.Fatalf("minutes: %d, last %v, second last %+v", len(ms), ms[59].Minute, ms[58])
	}
	c := newChart(ms)
	if c.Succeeded != 4 || c.Failed != 1 || c.Max != 5 || c.Bars[58].OkH != chartH*4/5 {
		t.Fatalf("chart: %+v", c.Bars[58])
	}
}

func TestPagerLinksCarryTheFiltersAndToken(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	_, body := fetch(t, cl, "GET", srv.URL+"/tasks?type=mail", nil, nil)
	m := regexp.MustCompile(`href="([^"]*)" id="next-page"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no next-page link")
	}
	u, err := url.Parse(strings.ReplaceAll(m[1], "&amp;", "&"))
	if err != nil {
		t.Fatal(err)
	}
	if q := u.Query(); q.Get("type") != "mail" || q.Get("continue") != "tok+/=&x" {
		t.Fatalf("next link %q: query %v", m[1], q)
	}
	_, body = fetch(t, cl, "GET", srv.URL+"/tasks?type=mail&continue=x", nil, nil)
	if !strings.Contains(body, `href="?type=mail" id="first-page"`) {
		t.Errorf("no first-page link back to the filtered list")
	}
}

// The recurring page shows a series' next occurrences in its own zone with
// the zone's UTC offset (and its JSON twin as RFC 3339 in that zone).
func TestRecurringShowsNextOccurrencesInTheSeriesZone(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	_, body := fetch(t, cl, "GET", srv.URL+"/recurring", nil, nil)
	body = html.UnescapeString(body)
	// nightly: "0 3 * * *" in Europe/Amsterdam, due t0+1h (2026-03-04 11:00Z).
	for _, want := range []string{"Wed 2026-03-04 12:00 CET (+01:00)", "Thu 2026-03-05 03:00 CET (+01:00)", "Fri 2026-03-06 03:00 CET (+01:00)"} {
		if !strings.Contains(body, want) {
			t.Errorf("/recurring lacks %q", want)
		}
	}
	_, js := fetch(t, cl, "GET", srv.URL+"/api/recurring", nil, nil)
	if !strings.Contains(js, `"2026-03-05T03:00:00+01:00"`) {
		t.Errorf("/api/recurring lacks the next occurrence in the series' zone:\n%s", js)
	}
}

// Every action is recorded in the audit log with the signed-in user, the
// client's address, its target and its result — a refused one too — and
// /audit lists them newest first, as text.
func TestActionsAreAudited(t *testing.T) {
	src, _, srv, cl := newTest(t, Options{Auth: "basic:alice:secret"})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:secret"))
	resp, body := fetch(t, cl, "GET", srv.URL+"/api/csrf", nil, map[string]string{"Authorization": basic})
	var tok struct{ Token string }
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &tok) != nil {
		t.Fatalf("GET /api/csrf: %d %s", resp.StatusCode, body)
	}
	// A forwarding header from a peer not trusted as a proxy is not
	// believed (http.trusted_proxies).
	js := map[string]string{"Accept": "application/json", "X-CSRF-Token": tok.Token, "Authorization": basic, "X-Forwarded-For": "203.0.113.9"}
	if resp, body := fetch(t, cl, "POST", srv.URL+"/tasks/job-1/cancel", url.Values{}, js); resp.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	if resp, body := fetch(t, cl, "POST", srv.URL+"/tasks/"+url.PathEscape("<i>x")+"/disable", url.Values{}, js); resp.StatusCode != 200 {
		t.Fatalf("disable: %d %s", resp.StatusCode, body)
	}
	src.mu.Lock()
	got := append([]leasecron.AuditEntry(nil), src.audit...)
	src.mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("audit entries %+v, want 2", got)
	}
	c := got[1]
	if c.Who != "alice" || c.Via != "dashboard" || c.Action != "cancel" || c.Target != "job-1" || !c.OK || c.Result == "" || c.From != "127.0.0.1" {
		t.Errorf("the cancel's entry: %+v", c)
	}
	// Behind a trusted proxy, the address it forwarded for.
	src2, _, srv2, cl2 := newTest(t, Options{Auth: "basic:alice:secret", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	_, body = fetch(t, cl2, "GET", srv2.URL+"/api/csrf", nil, map[string]string{"Authorization": basic})
	if json.Unmarshal([]byte(body), &tok) != nil {
		t.Fatalf("GET /api/csrf: %s", body)
	}
	js2 := map[string]string{"Accept": "application/json", "X-CSRF-Token": tok.Token, "Authorization": basic, "X-Forwarded-For": "198.51.100.4, 203.0.113.9"}
	if resp, body := fetch(t, cl2, "POST", srv2.URL+"/tasks/job-1/cancel", url.Values{}, js2); resp.StatusCode != 200 {
		t.Fatalf("cancel through a trusted proxy: %d %s", resp.StatusCode, body)
	}
	src2.mu.Lock()
	if len(src2.audit) != 1 || src2.audit[0].From != "203.0.113.9" {
		t.Errorf("the entry behind a trusted proxy: %+v; want from 203.0.113.9", src2.audit)
	}
	src2.mu.Unlock()
	_, page := fetch(t, cl, "GET", srv.URL+"/audit", nil, map[string]string{"Authorization": basic})
	if !strings.Contains(page, `class="who">alice<`) || !strings.Contains(page, `class="action">cancel<`) || strings.Contains(page, "<i>x") {
		t.Errorf("the audit page does not list the actions as text:\n%s", page)
	}
	resp, body = fetch(t, cl, "GET", srv.URL+"/api/audit", nil, map[string]string{"Authorization": basic})
	var v struct {
		Entries []struct{ Who, Action, Target string }
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &v) != nil || len(v.Entries) != 2 || v.Entries[0].Action != "disable" || v.Entries[0].Target != "<i>x" {
		t.Errorf("GET /api/audit: %d %s", resp.StatusCode, body)
	}
}

// Viewers see every page without an action and are refused every POST
// (and the refusal is audited); operators act. With PlatformAuth the
// platform's principal signs in, an operator when it holds the operator
// role; without PlatformAuth those headers count for nothing.
func TestRolesViewersSeeOperatorsAct(t *testing.T) {
	principal := func(roles ...string) string {
		type claim struct {
			Typ string `json:"typ"`
			Val string `json:"val"`
		}
		p := struct {
			AuthTyp string  `json:"auth_typ"`
			Claims  []claim `json:"claims"`
			NameTyp string  `json:"name_typ"`
			RoleTyp string  `json:"role_typ"`
		}{AuthTyp: "aad", NameTyp: "name", RoleTyp: "roles"}
		for _, r := range roles {
			p.Claims = append(p.Claims, claim{"roles", r})
		}
		b, _ := json.Marshal(p)
		return base64.StdEncoding.EncodeToString(b)
	}
	basic := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	for _, c := range []struct {
		name    string
		o       Options
		hdr     map[string]string
		status  int // of GET /recurring
		acts    bool
		who     string
		refused bool
	}{
		{"operator", Options{Auth: "basic:alice:a", ViewerAuth: "basic:bob:b"}, map[string]string{"Authorization": basic("alice", "a")}, 200, true, "alice", false},
		{"viewer", Options{Auth: "basic:alice:a", ViewerAuth: "basic:bob:b"}, map[string]string{"Authorization": basic("bob", "b")}, 200, false, "bob", true},
		{"nobody", Options{Auth: "basic:alice:a", ViewerAuth: "basic:bob:b"}, nil, 401, false, "", false},
		{"platform operator", Options{PlatformAuth: true}, map[string]string{headerPrincipalName: "carol@example.com", headerPrincipal: principal("leasecron.operator")}, 200, true, "carol@example.com", false},
		{"platform viewer", Options{PlatformAuth: true}, map[string]string{headerPrincipalName: "dave@example.com", headerPrincipal: principal("reader")}, 200, false, "dave@example.com", true},
		{"platform, no principal", Options{PlatformAuth: true}, nil, 401, false, "", false},
		{"platform headers not trusted", Options{Auth: "basic:alice:a"}, map[string]string{headerPrincipalName: "mallory", headerPrincipal: principal("leasecron.operator")}, 401, false, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			src, _, srv, cl := newTest(t, c.o)
			resp, page := fetch(t, cl, "GET", srv.URL+"/recurring", nil, c.hdr)
			if resp.StatusCode != c.status {
				t.Fatalf("GET /recurring: %d, want %d", resp.StatusCode, c.status)
			}
			if c.status != 200 {
				return
			}
			if hasForms := strings.Contains(page, `action="/tasks/nightly/disable"`); hasForms != c.acts {
				t.Errorf("the disable button shown: %v, want %v", hasForms, c.acts)
			}
			if !strings.Contains(page, `id="user">`+html.EscapeString(c.who)+`<`) {
				t.Errorf("the page does not say who signed in (%s)", c.who)
			}
			_, body := fetch(t, cl, "GET", srv.URL+"/api/csrf", nil, c.hdr)
			var tok struct{ Token string }
			_ = json.Unmarshal([]byte(body), &tok)
			hdr := map[string]string{"Accept": "application/json", "X-CSRF-Token": tok.Token}
			for k, v := range c.hdr {
				hdr[k] = v
			}
			resp, body = fetch(t, cl, "POST", srv.URL+"/tasks/nightly/disable", url.Values{}, hdr)
			did := len(src.done()) > 0
			if c.acts && (resp.StatusCode != 200 || !did) || !c.acts && (resp.StatusCode != http.StatusForbidden || did || !strings.Contains(body, "viewers cannot act")) {
				t.Errorf("POST disable: %d %s (source saw %v)", resp.StatusCode, body, src.done())
			}
			src.mu.Lock()
			defer src.mu.Unlock()
			if len(src.audit) != 1 || src.audit[0].Who != c.who || src.audit[0].OK == c.refused {
				t.Errorf("audit %+v, want one entry by %s (refused %v)", src.audit, c.who, c.refused)
			}
		})
	}
}

// The search box: an id alone goes straight to its task, tokens list the
// matching runs, and a bad token is a 400 naming it.
func TestSearch(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	resp, _ := fetch(t, cl, "GET", srv.URL+"/search?q=done-1", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/tasks/done-1" {
		t.Errorf("an id alone: %d to %q, want 303 to /tasks/done-1", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body := fetch(t, cl, "GET", srv.URL+"/search?q="+url.QueryEscape("type:mail state:dead"), nil, nil)
	if !strings.Contains(body, `data-id="bad-1"`) || strings.Contains(body, `data-id="done-1"`) {
		t.Errorf("type:mail state:dead does not list exactly bad-1:\n%s", body)
	}
	_, body = fetch(t, cl, "GET", srv.URL+"/search?q="+url.QueryEscape("id:done*"), nil, nil)
	if !strings.Contains(body, `data-id="done-1"`) || strings.Contains(body, `data-id="bad-1"`) {
		t.Errorf("id:done* does not list exactly done-1")
	}
	resp, body = fetch(t, cl, "GET", srv.URL+"/api/search?q="+url.QueryEscape("colour:red"), nil, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "colour") {
		t.Errorf("a bad token: %d %s", resp.StatusCode, body)
	}
}

// The fleet page offers Drain on each running instance that is not
// draining yet, and shows a draining one as such, with who asked.
func TestFleetPageDrains(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	_, body := fetch(t, cl, "GET", srv.URL+"/fleet", nil, nil)
	row := func(id string) string {
		i := strings.Index(body, `data-id="`+id+`"`)
		if i < 0 {
			t.Fatalf("no row for %s", id)
		}
		j := strings.Index(body[i:], "</tr>")
		return body[i : i+j]
	}
	if r := row("w3"); !strings.Contains(r, `action="/fleet/w3/drain"`) || !strings.Contains(r, "running") {
		t.Errorf("running w3 has no Drain button: %s", r)
	}
	if r := row("w4"); strings.Contains(r, "/drain") || !strings.Contains(r, ">draining<") || !strings.Contains(r, "asked by ops@host") {
		t.Errorf("draining w4 is not shown draining, or offers Drain again: %s", r)
	}
	if r := row("w2"); strings.Contains(r, "/drain") {
		t.Errorf("w2, not running, offers Drain: %s", r)
	}
	_, js := fetch(t, cl, "GET", srv.URL+"/api/fleet", nil, nil)
	if !strings.Contains(js, `"draining": true,`) || !strings.Contains(js, `"drain_by": "ops@host"`) {
		t.Errorf("the JSON twin does not say w4 is draining: %s", js)
	}
}

// The bulk pages: the count the confirmation names, the start that goes
// on to the operation's page, the operation and the list; a bad kind is
// refused naming it; a read-only dashboard offers no start.
func TestBulkPages(t *testing.T) {
	src, _, srv, cl := newTest(t, Options{})
	resp, body := fetch(t, cl, "GET", srv.URL+"/bulk/new?kind=requeue-dead&type=mail&since=24h", nil, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, `id="bulk-matches">1000<`) ||
		!strings.Contains(body, `data-confirm="Requeue 1000 dead letters (requeue-dead type:mail since:`) || !strings.Contains(body, `name="expect" value="1000"`) {
		t.Fatalf("GET /bulk/new: %d\n%s", resp.StatusCode, body)
	}
	// The start sends the window counted, not "24h" read again at the
	// click (a review's find).
	if want := `name="since" value="` + t0.Add(-24*time.Hour).Format(time.RFC3339) + `"`; !strings.Contains(body, want) {
		t.Errorf("GET /bulk/new: the start form does not carry %s", want)
	}
	token := csrfRE.FindStringSubmatch(body)[1]
	since := t0.Add(-24 * time.Hour).Format(time.RFC3339)
	resp, _ = fetch(t, cl, "POST", srv.URL+"/bulk", url.Values{"csrf": {token}, "kind": {"requeue-dead"}, "type": {"mail"}, "since": {since}, "expect": {"1000"}, "back": {"/bulk/new"}}, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/bulk/bulk-1" {
		t.Errorf("POST /bulk: %d to %q, want 303 to /bulk/bulk-1", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := src.done(); len(got) != 1 || got[0] != "bulk requeue-dead type:mail since:"+since+" expect 1000 by anonymous" {
		t.Errorf("source saw %v", got)
	}
	src.mu.Lock()
	if len(src.audit) == 0 || src.audit[0].Target != "requeue-dead type:mail since:"+since {
		t.Errorf("the start's audit entry %+v; want the operation as it reads", src.audit)
	}
	src.mu.Unlock()
	if _, body = fetch(t, cl, "GET", srv.URL+"/bulk/bulk-1", nil, nil); !strings.Contains(body, "400 requeued, 2 failed, of 1000 matching when confirmed") || !strings.Contains(body, "taken over") {
		t.Errorf("GET /bulk/bulk-1:\n%s", body)
	}
	if _, js := fetch(t, cl, "GET", srv.URL+"/api/bulk/bulk-1", nil, nil); !strings.Contains(js, `"percent": 40`) {
		t.Errorf("GET /api/bulk/bulk-1: %s", js)
	}
	if _, body = fetch(t, cl, "GET", srv.URL+"/bulk", nil, nil); !strings.Contains(body, `data-id="bulk-1"`) {
		t.Errorf("GET /bulk does not list bulk-1")
	}
	if resp, body = fetch(t, cl, "GET", srv.URL+"/bulk/new?kind=delete-all", nil, nil); resp.StatusCode != 400 || !strings.Contains(body, `&#34;delete-all&#34;`) {
		t.Errorf("a bad kind: %d %s", resp.StatusCode, body)
	}
	if resp, _ = fetch(t, cl, "GET", srv.URL+"/bulk/nope", nil, nil); resp.StatusCode != 404 {
		t.Errorf("an unknown operation: %d, want 404", resp.StatusCode)
	}
	_, _, ro, rcl := newTest(t, Options{ReadOnly: true})
	if _, body = fetch(t, rcl, "GET", ro.URL+"/bulk/new?kind=cancel-pending&type=mail", nil, nil); strings.Contains(body, `id="bulk-start"`) || !strings.Contains(body, `id="bulk-matches"`) {
		t.Errorf("read-only /bulk/new offers a start, or no count:\n%s", body)
	}
}

// The latency page: ranges, types, the totals and three charts; a bad
// range or type is refused naming it.
func TestLatencyPage(t *testing.T) {
	_, _, srv, cl := newTest(t, Options{})
	resp, body := fetch(t, cl, "GET", srv.URL+"/latency?range=6h&type=mail", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET /latency: %d %s", resp.StatusCode, body)
	}
	for _, want := range []string{`id="latency-totals"`, `id="outcome-chart"`, `id="wait-chart"`, `id="run-chart"`, `<polyline class="p99"`, `data-type="mail"`, `aria-current="page">6h<`, "1.2s"} {
		if !strings.Contains(body, want) {
			t.Errorf("GET /latency lacks %s", want)
		}
	}
	if _, js := fetch(t, cl, "GET", srv.URL+"/api/latency?range=1h", nil, nil); !strings.Contains(js, `"p95": 4`) || !strings.Contains(js, `"range_name": "1h"`) {
		t.Errorf("GET /api/latency: %s", js)
	}
	for _, q := range []string{"range=2w", "type=Bad%20Type"} {
		if resp, body := fetch(t, cl, "GET", srv.URL+"/latency?"+q, nil, nil); resp.StatusCode != 400 {
			t.Errorf("GET /latency?%s: %d %s, want 400", q, resp.StatusCode, body)
		}
	}
}
