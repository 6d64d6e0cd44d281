package dashboard_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/dashboard"
)

// TestBadInputIsTheViewersMistake sends input no page, API route or
// action can accept to a dashboard over a real account: each is answered
// with a 4xx whose message names the bad value, never with a 5xx.
func TestBadInputIsTheViewersMistake(t *testing.T) {
	t.Parallel()
	st, names := testAccount(t)
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "pending", Type: "mail", Due: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(c, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	cl := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var tok struct{ Token string }
	if err := getJSON(cl, srv.URL+"/api/csrf", &tok); err != nil || tok.Token == "" {
		t.Fatalf("csrf token: %v", err)
	}
	long := strings.Repeat("a", 3000)
	cases := []struct {
		name, method, path string
		form               url.Values
		status             int    // 0: any 4xx
		want               string // in the message
	}{
		{"nul in a task id", "GET", "/tasks/%00", nil, 400, `\x00`},
		{"nul in a task id (API)", "GET", "/api/tasks/%00", nil, 400, `\x00`},
		{"a 3,000-character task id", "GET", "/tasks/" + long, nil, 400, "3000 bytes"},
		{"a 3,000-character task id (API)", "GET", "/api/tasks/" + long, nil, 400, "3000"},
		{"a run-sized id too long for a record", "GET", "/api/tasks/" + strings.Repeat("b", 980), nil, 400, "980"},
		{"a slash in a task id", "GET", "/api/tasks/a%2Fb", nil, 400, `a/b`},
		{"a hash in a task id", "GET", "/api/tasks/a%23b", nil, 400, `a#b`},
		{"invalid UTF-8 in a task id", "GET", "/api/tasks/%ff%fe", nil, 400, `\xff`},
		{"a control character in a task id", "GET", "/api/tasks/x%1Fy", nil, 400, `U+001F`},
		{"a task that does not exist", "GET", "/tasks/nope", nil, 404, "nope"},
		{"a task that does not exist (API)", "GET", "/api/tasks/nope", nil, 404, "nope"},
		{"a garbage run continuation", "GET", "/runs?continue=garbage", nil, 400, "garbage"},
		{"a garbage run continuation (API)", "GET", "/api/runs?continue=garbage", nil, 400, "garbage"},
		{"a garbage task continuation", "GET", "/tasks?continue=garbage", nil, 400, "garbage"},
		{"a garbage task continuation (API)", "GET", "/api/tasks?continue=garbage", nil, 400, "garbage"},
		{"a garbage series continuation", "GET", "/api/recurring?continue=garbage", nil, 400, "garbage"},
		{"a long garbage continuation", "GET", "/api/runs?continue=" + long, nil, 400, "aaaa"},
		{"a garbage audit continuation", "GET", "/audit?continue=garbage", nil, 400, "garbage"},
		{"a garbage audit continuation (API)", "GET", "/api/audit?continue=garbage", nil, 400, "garbage"},
		{"an unknown run state", "GET", "/runs?state=sleeping", nil, 400, "sleeping"},
		{"an unknown run state (API)", "GET", "/api/runs?state=sleeping", nil, 400, "sleeping"},
		{"a nul run state", "GET", "/api/runs?state=%00", nil, 400, `\x00`},
		{"an injection as a type filter", "GET", "/api/tasks?type=" + url.QueryEscape("' or '1'='1"), nil, 400, "' or '1'='1"},
		{"an upper-case type filter", "GET", "/api/runs?type=Mail", nil, 400, "Mail"},
		{"a 3,000-character type filter", "GET", "/api/tasks?type=" + long, nil, 400, "aaaa"},
		{"an unknown page", "GET", "/nope", nil, 404, "/nope"},
		{"a static file name that is not UTF-8", "GET", "/static/%db", nil, 404, "static file"},
		{"an unknown API route", "GET", "/api/nope", nil, 404, "/api/nope"},
		{"a path under a task", "GET", "/tasks/pending/extra", nil, 404, "/tasks/pending/extra"},
		{"a wrong method", "DELETE", "/tasks", nil, 405, ""},
		{"scheduling every zero seconds", "POST", "/tasks", url.Values{"type": {"mail"}, "every": {"0s"}}, 400, "0s"},
		{"scheduling with both in and at", "POST", "/tasks", url.Values{"type": {"mail"}, "in": {"1m"}, "at": {"2030-01-01T00:00:00Z"}}, 400, "at"},
		{"scheduling a bad type", "POST", "/tasks", url.Values{"type": {"Bad Type"}, "in": {"1m"}}, 400, "Bad Type"},
		{"scheduling a bad id", "POST", "/tasks", url.Values{"id": {"a b"}, "type": {"mail"}, "in": {"1m"}}, 400, `"a b"`},
		{"scheduling with a bad duration", "POST", "/tasks", url.Values{"type": {"mail"}, "in": {"soon"}}, 400, "soon"},
		{"scheduling with a bad time", "POST", "/tasks", url.Values{"type": {"mail"}, "at": {"tomorrow"}}, 400, "tomorrow"},
		{"scheduling with a bad cron rule", "POST", "/tasks", url.Values{"type": {"mail"}, "cron": {"61 * * * *"}}, 400, "61"},
		{"scheduling with a bad zone", "POST", "/tasks", url.Values{"type": {"mail"}, "cron": {"0 9 * * *"}, "tz": {"Mars/Olympus"}}, 400, "Mars/Olympus"},
		{"scheduling with bad max attempts", "POST", "/tasks", url.Values{"type": {"mail"}, "in": {"1m"}, "max_attempts": {"-3"}}, 400, "-3"},
		{"scheduling an id taken", "POST", "/tasks", url.Values{"id": {"pending"}, "type": {"mail"}, "in": {"1m"}}, 409, "pending"},
		{"rescheduling without a time", "POST", "/tasks/pending/reschedule", url.Values{}, 400, "due time"},
		{"rescheduling to a bad time", "POST", "/tasks/pending/reschedule", url.Values{"at": {"yesterday-ish"}}, 400, "yesterday-ish"},
		{"rescheduling a task that does not exist", "POST", "/tasks/nope/reschedule", url.Values{"in": {"1m"}}, 404, "nope"},
		{"cancelling a nul id", "POST", "/tasks/%00/cancel", url.Values{}, 400, `\x00`},
		{"cancelling a task that does not exist", "POST", "/tasks/nope/cancel", url.Values{}, 404, "nope"},
		{"running now a task that does not exist", "POST", "/tasks/nope/run-now", url.Values{}, 404, "nope"},
		{"running now a 3,000-character id", "POST", "/tasks/" + long + "/run-now", url.Values{}, 400, "3000"},
		{"requeueing a dead letter that does not exist", "POST", "/deadletters/nope/requeue", url.Values{}, 404, "nope"},
		{"requeueing a nul dead letter id", "POST", "/deadletters/%00/requeue", url.Values{}, 0, `\x00`},
		{"running a blackboard key with a slash", "POST", "/blackboard/a%2Fb/run-now", url.Values{}, 400, "a/b"},
		{"removing a blackboard key that does not exist", "POST", "/blackboard/nope/remove", url.Values{}, 404, "nope"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.form != nil {
				body = strings.NewReader(tc.form.Encode())
			}
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			if tc.form != nil {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Accept", "application/json")
				req.Header.Set("X-CSRF-Token", tok.Token)
			}
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			msg := message(resp, b)
			switch {
			case tc.status != 0 && resp.StatusCode != tc.status, resp.StatusCode/100 != 4:
				t.Errorf("%s %.80s: %d %q, want %d", tc.method, tc.path, resp.StatusCode, msg, tc.status)
			case !strings.Contains(msg, tc.want):
				t.Errorf("%s %.80s: %d, message %.300q does not name %q", tc.method, tc.path, resp.StatusCode, msg, tc.want)
			case msg == "":
				t.Errorf("%s %.80s: %d with no message", tc.method, tc.path, resp.StatusCode)
			}
		})
	}
	// Nothing stored was touched by any of it.
	if it, err := c.Status(ctx, "pending"); err != nil || it.Pending == nil {
		t.Errorf("the pending task after the bad input: %+v, %v", it, err)
	}
}

// message is the error text of a dashboard answer: the "error" of a JSON
// body, else the body (an HTML page shows the message escaped).
func message(resp *http.Response, b []byte) string {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		var v struct{ Error string }
		if json.Unmarshal(b, &v) == nil {
			return v.Error
		}
	}
	s := string(b)
	for _, r := range [][2]string{{"&#34;", `"`}, {"&#39;", "'"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

func getJSON(cl *http.Client, u string, v any) error {
	resp, err := cl.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
