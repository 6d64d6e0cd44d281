package handler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

func mustHTTP(t *testing.T, opts HTTPOptions) leasecrontype.Handler {
	t.Helper()
	h, err := HTTP(opts)
	if err != nil {
		t.Fatalf("HTTP(%+v): %v", opts, err)
	}
	return h
}

func TestHTTPValidation(t *testing.T) {
	cases := []struct {
		name string
		opts HTTPOptions
		want string
	}{
		{"empty url", HTTPOptions{}, "HTTPOptions.URL is empty"},
		{"ftp scheme", HTTPOptions{URL: "ftp://example.com/x"}, `has scheme "ftp": want http or https`},
		{"no scheme", HTTPOptions{URL: "example.com/hook"}, `has scheme "": want http or https`},
		{"no host", HTTPOptions{URL: "http:///path"}, "has no host"},
		{"unparsable", HTTPOptions{URL: "http://[::1"}, `HTTPOptions.URL "http://[::1"`},
		{"bad method", HTTPOptions{URL: "http://h/", Method: "PO ST"}, `HTTPOptions.Method "PO ST"`},
		{"bad header name", HTTPOptions{URL: "http://h/", Headers: map[string]string{"Bad Name": "x"}}, `"Bad Name" is not a valid header name`},
		{"header injection", HTTPOptions{URL: "http://h/", Headers: map[string]string{"X-A": "1\r\nX-B: 2"}}, `Headers["X-A"]: value contains a line break`},
		{"negative timeout", HTTPOptions{URL: "http://h/", Timeout: -time.Second}, "HTTPOptions.Timeout = -1s: want a positive value"},
		{"negative tail", HTTPOptions{URL: "http://h/", OutputTail: -5}, "HTTPOptions.OutputTail = -5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := HTTP(c.opts)
			if err == nil || h != nil {
				t.Fatalf("HTTP accepted %+v", c.opts)
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q: want ErrInvalidOptions mentioning %q", err, c.want)
			}
		})
	}
}

func TestHTTPSendsPayloadAndHeaders(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, body string
		header       http.Header
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, string(b), r.Header.Clone()}
		io.WriteString(w, "accepted "+r.Header.Get(HeaderTaskID))
	}))
	defer srv.Close()

	h := mustHTTP(t, HTTPOptions{
		URL:     srv.URL + "/hook",
		Headers: map[string]string{"Authorization": "Bearer token", "Content-Type": "application/json", HeaderTaskID: "spoofed"},
	})
	ctx, out := capture()
	task := sampleTask(`{"report":"daily"}`)
	task.Key = "k1"
	if err := h(ctx, task); err != nil {
		t.Fatalf("run: %v", err)
	}
	s := <-got
	if s.method != http.MethodPost || s.body != `{"report":"daily"}` {
		t.Errorf("method %s body %q", s.method, s.body)
	}
	want := map[string]string{
		HeaderTaskID:     "task-1",
		HeaderTaskType:   "report",
		HeaderAttempt:    "2",
		HeaderDue:        "2030-01-02T02:04:05Z",
		HeaderGeneration: "7",
		HeaderSeries:     "nightly",
		HeaderKey:        "k1",
		"Authorization":  "Bearer token",
		"Content-Type":   "application/json",
	}
	for k, v := range want {
		if g := s.header.Get(k); g != v {
			t.Errorf("header %s = %q, want %q", k, g, v)
		}
	}
	if o, calls := out(); o != "accepted task-1" || calls != 1 {
		t.Errorf("sink got %q (%d calls)", o, calls)
	}
}

func TestHTTPMethodAndDefaultContentType(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Method + " " + r.Header.Get("Content-Type")
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	h := mustHTTP(t, HTTPOptions{URL: srv.URL, Method: http.MethodPut})
	if err := h(context.Background(), sampleTask("x")); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != "PUT application/octet-stream" {
		t.Fatalf("server saw %q", g)
	}
}

func TestHTTPNon2xxIsAnErrorWithBodyTail(t *testing.T) {
	t.Parallel()
	for i, status := range []int{http.StatusInternalServerError, http.StatusNotFound, http.StatusMultipleChoices} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				io.WriteString(w, strings.Repeat("noise ", 2000)+"the real reason")
			}))
			h := mustHTTP(t, HTTPOptions{URL: srv.URL + "/x?sig=SECRET", OutputTail: 32})
			ctx, out := capture()
			err := h(ctx, sampleTask(""))
			srv.Close()
			var he *HTTPError
			if !errors.As(err, &he) {
				t.Fatalf("status %d: error %v (%T), want *HTTPError", status, err, err)
			}
			if he.StatusCode != status || !strings.HasSuffix(he.Tail, "the real reason") || len(he.Tail) != 32 {
				t.Errorf("status %d: got %d, tail %q", status, he.StatusCode, he.Tail)
			}
			if tailOf(err) != he.Tail {
				t.Errorf("tailOf(err) = %q", tailOf(err))
			}
			msg := err.Error()
			if !strings.Contains(msg, http.StatusText(status)) || !strings.Contains(msg, "the real reason") {
				t.Errorf("Error() %q lacks the status or body", msg)
			}
			if strings.Contains(msg, "SECRET") {
				t.Errorf("Error() %q leaks the URL's signature", msg)
			}
			if o, calls := out(); calls != 1 || o != he.Tail {
				t.Errorf("sink got %q (%d calls)", o, calls)
			}
		})
	}
}

func TestHTTPTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	h := mustHTTP(t, HTTPOptions{URL: srv.URL, Timeout: 150 * time.Millisecond})
	start := time.Now()
	err := h(context.Background(), sampleTask(""))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("timeout of 150ms took %v", el)
	}
}

func TestHTTPCancelledIsNotTimeout(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	h := mustHTTP(t, HTTPOptions{URL: srv.URL})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err := h(ctx, sampleTask(""))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want context.Canceled only", err)
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h := mustHTTP(t, HTTPOptions{URL: "http://" + addr + "/hook?sig=SECRET"})
	err = h(context.Background(), sampleTask(""))
	if err == nil || errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want a connection error", err)
	}
	if strings.Contains(err.Error(), "SECRET") {
		t.Errorf("error %q leaks the URL's signature", err)
	}
	if tailOf(err) != "" {
		t.Errorf("OutputTail of a connection error: %q", tailOf(err))
	}
}

// 503 with Retry-After (seconds or an HTTP date) snoozes the task; 503
// without it is a failed attempt.
func TestHTTPRetryAfterSnoozes(t *testing.T) {
	t.Parallel()
	retry := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := <-retry; v != "" {
			w.Header().Set("Retry-After", v)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "busy")
	}))
	defer srv.Close()
	h, err := HTTP(HTTPOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	task := leasecrontype.Task{ID: "t", Type: "notify", Attempt: 1}
	retry <- "120"
	if d, ok := leasecrontype.SnoozeOf(h(context.Background(), task)); !ok || d != 2*time.Minute {
		t.Fatalf("503 Retry-After: 120 = %v, %v; want a 2 min snooze", d, ok)
	}
	retry <- time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	if d, ok := leasecrontype.SnoozeOf(h(context.Background(), task)); !ok || d < 59*time.Minute || d > time.Hour {
		t.Fatalf("503 Retry-After in an hour = %v, %v", d, ok)
	}
	retry <- ""
	err = h(context.Background(), task)
	var he *HTTPError
	if _, ok := leasecrontype.SnoozeOf(err); ok || !errors.As(err, &he) || he.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("503 without Retry-After = %v, want an HTTPError", err)
	}
}
