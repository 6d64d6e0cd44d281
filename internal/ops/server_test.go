package ops

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s
}

func TestServerEndpoints(t *testing.T) {
	var readyErr atomic.Pointer[error]
	var readyCalls atomic.Int32
	m := NewMetrics()
	s := startServer(t, Options{
		Addr:    "127.0.0.1:0",
		Metrics: m,
		Ready: func(ctx context.Context) error {
			readyCalls.Add(1)
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("ready called without a deadline")
			}
			if p := readyErr.Load(); p != nil {
				return *p
			}
			return nil
		},
	})
	base := "http://" + s.Addr()

	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ok\n" {
		t.Fatalf("/readyz while ready: %d %q", code, body)
	}
	e := errors.New("table ScheduledItems does not exist")
	readyErr.Store(&e)
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "table ScheduledItems does not exist") {
		t.Fatalf("/readyz while failing: %d %q", code, body)
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz must stay 200 while not ready, got %d", code)
	}
	readyErr.Store(nil)
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz after recovery: %d", code)
	}
	if readyCalls.Load() != 3 {
		t.Errorf("Ready called %d times, want once per /readyz", readyCalls.Load())
	}

	m.SetQueueDepth(5)
	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, "leasecron_queue_depth 5\n") {
		t.Fatalf("/metrics: %d, lacks queue depth:\n%.300s", code, body)
	}
	if code, _ := get(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("pprof served although off: %d", code)
	}
}

func TestServerReadyTimeout(t *testing.T) {
	s := startServer(t, Options{
		Addr:         "127.0.0.1:0",
		ReadyTimeout: 100 * time.Millisecond,
		Ready: func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		},
	})
	start := time.Now()
	code, body := get(t, "http://"+s.Addr()+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "deadline exceeded") {
		t.Fatalf("/readyz with a hanging check: %d %q", code, body)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("/readyz took %v with a 100ms ReadyTimeout", el)
	}
}

func TestServerPprofAndNilMetrics(t *testing.T) {
	s := startServer(t, Options{Addr: "127.0.0.1:0", Pprof: true})
	base := "http://" + s.Addr()
	if code, body := get(t, base+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/: %d", code)
	}
	if code, _ := get(t, base+"/debug/pprof/goroutine?debug=1"); code != 200 {
		t.Fatalf("/debug/pprof/goroutine: %d", code)
	}
	if code, _ := get(t, base+"/metrics"); code != http.StatusNotFound {
		t.Fatalf("/metrics without Metrics: %d, want 404", code)
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz without Ready: %d, want 200", code)
	}
}

func TestServerDisabledWhenAddrEmpty(t *testing.T) {
	s, err := NewServer(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start with empty Addr: %v", err)
	}
	if s.Addr() != "" {
		t.Fatalf("disabled server listens on %q", s.Addr())
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestServerStopsWithContext(t *testing.T) {
	s, err := NewServer(Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := s.Addr()
	if code, _ := get(t, "http://"+addr+"/healthz"); code != 200 {
		t.Fatal("not serving")
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still listening 5s after its context was cancelled")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after context stop: %v", err)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Fatal("Start after Shutdown succeeded")
	}
}

func TestServerOptionErrors(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Addr: "8080"}, `Options.Addr "8080"`},
		{Options{Addr: ":8080", ReadyTimeout: -time.Second}, "Options.ReadyTimeout = -1s: want a positive value"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if _, err := NewServer(c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("NewServer(%+v) = %v, want error mentioning %q", c.opts, err, c.want)
			}
		})
	}
	// A port in use is reported by Start, naming the address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := NewServer(Options{Addr: l.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("Start on a busy port: %v", err)
	}
}
