package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// echoServer echoes every byte and counts what it received.
type echoServer struct {
	ln       net.Listener
	received atomic.Int64
}

func newEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						e.received.Add(int64(n))
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return e
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(Options{Target: target})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads len(msg) bytes back within d.
func roundTrip(c net.Conn, msg string, d time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

func TestOptionsValidation(t *testing.T) {
	for i, o := range []Options{{}, {Target: "nohostport"}, {Target: "127.0.0.1:1", DialTimeout: -time.Second}, {Target: "127.0.0.1:1", Listen: "256.0.0.1:0"}} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if p, err := New(o); err == nil {
				p.Close()
				t.Errorf("New(%+v) accepted", o)
			}
		})
	}
	p := newProxy(t, "127.0.0.1:1")
	if err := p.Set(Mode(42)); err == nil {
		t.Error("Set(42) accepted")
	}
	p.Close()
	if err := p.Set(Stall); !errors.Is(err, ErrClosed) {
		t.Errorf("Set after Close = %v, want ErrClosed", err)
	}
	if got := Partition.String() + Mode(9).String(); got != "partitionMode(9)" {
		t.Errorf("mode names: %q", got)
	}
}

func TestPassAndHTTP(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer srv.Close()
	p := newProxy(t, srv.Listener.Addr().String())
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	for range 3 {
		resp, err := cl.Get("http://" + p.Addr() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello" {
			t.Fatalf("body %q", b)
		}
	}
	st := p.Stats()
	if st.Accepted < 1 || st.BytesUp == 0 || st.BytesDown == 0 {
		t.Errorf("stats %+v", st)
	}
	if p.Port() == 0 {
		t.Error("Port() = 0")
	}
}

func TestLatencyDelaysEachDirection(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "warm", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.SetLatency(150 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := roundTrip(c, "ping", 3*time.Second)
	if err != nil || got != "ping" {
		t.Fatalf("round trip %q %v", got, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("round trip took %v, want at least 300ms (150ms each way)", d)
	}
	if err := p.SetLatency(0); err != nil || p.Mode() != Pass {
		t.Fatalf("SetLatency(0): %v, mode %v", err, p.Mode())
	}
	start = time.Now()
	if _, err := roundTrip(c, "pong", time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 200*time.Millisecond {
		t.Errorf("pass round trip took %v", d)
	}
}

func TestStallHoldsThenDeliversToOpenConnections(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	open := dial(t, p.Addr())
	if _, err := roundTrip(open, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Set(Stall); err != nil {
		t.Fatal(err)
	}
	// An open connection and a new one (accepted, not forwarded).
	fresh := dial(t, p.Addr())
	if _, err := roundTrip(open, "held", 300*time.Millisecond); err == nil {
		t.Fatal("a stalled connection answered")
	}
	if _, err := roundTrip(fresh, "new", 300*time.Millisecond); err == nil {
		t.Fatal("a connection made during the stall answered")
	}
	if n := e.received.Load(); n != 1 {
		t.Fatalf("target received %d bytes during the stall, want 1 (from before)", n)
	}
	// A client that gives up: its held bytes must never arrive.
	quitter := dial(t, p.Addr())
	if _, err := quitter.Write([]byte("abandoned")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	quitter.Close()
	time.Sleep(50 * time.Millisecond)

	if err := p.Set(Pass); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		conn net.Conn
		want string
	}{{open, "held"}, {fresh, "new"}} {
		t.Run(c.want, func(t *testing.T) {
			_ = c.conn.SetDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, len(c.want))
			if _, err := io.ReadFull(c.conn, buf); err != nil || string(buf) != c.want {
				t.Fatalf("after the stall read %q, %v; want %q", buf, err, c.want)
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	if n := e.received.Load(); n != int64(len("a")+len("held")+len("new")) {
		t.Errorf("target received %d bytes; the abandoned connection's bytes must be dropped", n)
	}
}

func TestResetModeAndResetAll(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "x", time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.ResetAll(); n != 1 {
		t.Fatalf("ResetAll reset %d connections, want 1", n)
	}
	if _, err := roundTrip(c, "y", time.Second); err == nil {
		t.Fatal("a reset connection still works")
	}
	if p.Mode() != Pass {
		t.Fatalf("ResetAll changed the mode to %v", p.Mode())
	}
	c2 := dial(t, p.Addr())
	if _, err := roundTrip(c2, "z", time.Second); err != nil {
		t.Fatalf("a new connection after ResetAll: %v", err)
	}
	if err := p.Set(Reset); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c2, "w", time.Second); err == nil {
		t.Fatal("an open connection survived Reset mode")
	}
	if c3, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil { // accepted, then reset
		defer c3.Close()
		if _, err := roundTrip(c3, "v", time.Second); err == nil {
			t.Fatal("a new connection works in Reset mode")
		}
	}
	if st := p.Stats(); st.Resets < 3 {
		t.Errorf("stats %+v: want at least 3 resets", st)
	}
	_ = p.Set(Pass)
	c4 := dial(t, p.Addr())
	if got, err := roundTrip(c4, "ok", time.Second); err != nil || got != "ok" {
		t.Fatalf("after Reset mode: %q %v", got, err)
	}
}

func TestPartitionRefusesThenHeals(t *testing.T) {
	e := newEcho(t)
	p := newProxy(t, e.ln.Addr().String())
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "x", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Set(Partition); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(c, "y", time.Second); err == nil {
		t.Fatal("an open connection survived the partition")
	}
	if nc, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		nc.Close()
		t.Fatal("a connection was accepted during the partition")
	}
	if err := p.Set(Pass); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, p.Addr())
	if got, err := roundTrip(c2, "back", time.Second); err != nil || got != "back" {
		t.Fatalf("after the partition: %q %v", got, err)
	}
}

func TestUnreachableTargetResetsClient(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	p := newProxy(t, ln.Addr().String()) // its own port, distinct from ln's
	ln.Close()
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil { // the reset may beat connect
		defer c.Close()
		if _, err := roundTrip(c, "x", time.Second); err == nil {
			t.Fatal("a connection to a dead target answered")
		}
	}
	deadline := time.Now().Add(time.Second)
	for p.Stats().DialErrors == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p.Stats().DialErrors == 0 {
		t.Error("no dial error counted")
	}
}

// TestAzuriteThroughProxy drives the Blob service through the proxy: calls
// pass, a stall makes them time out at the caller's deadline, and the
// service answers again once the stall ends.
func TestAzuriteThroughProxy(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	blob, queue, table := srv.Ports()
	var proxies [3]*Proxy
	for i, port := range []int{blob, queue, table} {
		proxies[i] = newProxy(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	cs := azurite.ConnectionString("127.0.0.1", proxies[0].Port(), proxies[1].Port(), proxies[2].Port())
	sc, err := storage.New(storage.Config{ConnectionString: cs})
	if err != nil {
		t.Fatal(err)
	}
	props := func(d time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		_, err := sc.Blob.GetProperties(ctx, &service.GetPropertiesOptions{})
		return err
	}
	if err := props(5 * time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	_ = proxies[0].Set(Stall)
	start := time.Now()
	if err := props(500 * time.Millisecond); err == nil {
		t.Fatal("a call answered during a stall")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a stalled call took %v to give up", d)
	}
	_ = proxies[0].Set(Partition)
	if err := props(2 * time.Second); err == nil {
		t.Fatal("a call answered during a partition")
	}
	_ = proxies[0].Set(Pass)
	if err := props(5 * time.Second); err != nil {
		t.Fatalf("after healing: %v", err)
	}
}
