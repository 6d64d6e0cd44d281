// Package faultproxy is a small TCP proxy that injects network faults
// between one client and one server, for the reliability suite: it listens
// on 127.0.0.1, forwards every connection to a target address, and can be
// switched at any moment between passing traffic, adding latency, stalling
// (a black hole: bytes are accepted and held, nothing is forwarded),
// resetting connections, and a partition (new connections are refused and
// open ones are dropped).
//
// Bytes held during a stall are forwarded when the stall ends, but only on
// connections the client still holds open: a client that gave up (closed
// its connection) has its held bytes dropped, so a request abandoned by its
// caller is never delivered late.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int

// The modes.
const (
	// Pass forwards bytes as they arrive.
	Pass Mode = iota
	// Latency forwards every chunk of bytes after a one-way delay (see
	// SetLatency), in each direction: a request/response pair is delayed by
	// twice the latency.
	Latency
	// Stall accepts connections and reads what clients send, but forwards
	// nothing in either direction until the mode changes.
	Stall
	// Reset resets every open connection (TCP RST) and every new one right
	// after accepting it.
	Reset
	// Partition stops listening, so new connections are refused, and drops
	// every open connection.
	Partition
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Latency:
		return "latency"
	case Stall:
		return "stall"
	case Reset:
		return "reset"
	case Partition:
		return "partition"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configure New.
type Options struct {
	// Target is the host:port every connection is forwarded to. Required.
	Target string
	// Listen is the address to listen on. Default "127.0.0.1:0" (a free
	// port; see Addr).
	Listen string
	// DialTimeout bounds the connection to Target. Default 5 s.
	DialTimeout time.Duration
	// Logger receives mode changes. Default slog.Default().
	Logger *slog.Logger
}

// Stats count what the proxy has done since New.
type Stats struct {
	// Accepted counts client connections accepted.
	Accepted int64
	// Resets counts connections reset (Reset mode, ResetAll, Partition).
	Resets int64
	// DialErrors counts failed connections to the target.
	DialErrors int64
	// BytesUp and BytesDown count bytes forwarded to and from the target.
	BytesUp, BytesDown int64
	// Open is the number of connections open now.
	Open int
}

// Proxy is a running fault proxy. Its methods are safe for concurrent use.
type Proxy struct {
	o    Options
	addr string

	mu      sync.Mutex
	mode    Mode
	latency time.Duration
	changed chan struct{} // closed and replaced on every mode change
	ln      net.Listener  // nil while partitioned or closed
	conns   map[*conn]struct{}
	closed  bool
	wg      sync.WaitGroup

	accepted, resets, dialErrors, up, down atomic.Int64
}

// ErrClosed is returned by methods of a closed Proxy.
var ErrClosed = errors.New("faultproxy: closed")

// New starts a proxy in Pass mode.
func New(o Options) (*Proxy, error) {
	if o.Target == "" {
		return nil, errors.New("faultproxy: Options.Target is empty: want the host:port to forward to")
	}
	if _, _, err := net.SplitHostPort(o.Target); err != nil {
		return nil, fmt.Errorf("faultproxy: Options.Target %q: want host:port: %w", o.Target, err)
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.DialTimeout < 0 {
		return nil, fmt.Errorf("faultproxy: Options.DialTimeout %v is negative: want > 0, or 0 for 5s", o.DialTimeout)
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen on %s: %w", o.Listen, err)
	}
	p := &Proxy{o: o, addr: ln.Addr().String(), changed: make(chan struct{}), conns: map[*conn]struct{}{}}
	p.o.Logger = o.Logger.With("proxy", p.addr, "target", o.Target)
	p.serve(ln)
	return p, nil
}

// Addr is the host:port the proxy listens on (kept across partitions).
func (p *Proxy) Addr() string { return p.addr }

// Port is the port of Addr.
func (p *Proxy) Port() int { return p.addrPort() }

func (p *Proxy) addrPort() int {
	a, err := net.ResolveTCPAddr("tcp", p.addr)
	if err != nil {
		return 0
	}
	return a.Port
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetLatency switches to Latency mode with a one-way delay of d per
// direction (d ≤ 0 switches to Pass).
func (p *Proxy) SetLatency(d time.Duration) error {
	if d <= 0 {
		return p.Set(Pass)
	}
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
	return p.Set(Latency)
}

// Set switches the proxy to mode m. Entering Reset or Partition drops every
// open connection; leaving Partition listens again on the same address.
func (p *Proxy) Set(m Mode) error {
	if m < Pass || m > Partition {
		return fmt.Errorf("faultproxy: Set(%v): unknown mode", m)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	prev := p.mode
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
	var drop []*conn
	if m == Reset || m == Partition {
		for c := range p.conns {
			drop = append(drop, c)
		}
	}
	var stop net.Listener
	if m == Partition && p.ln != nil {
		stop, p.ln = p.ln, nil
	}
	relisten := prev == Partition && m != Partition
	lat := p.latency
	p.mu.Unlock()

	if stop != nil {
		_ = stop.Close()
	}
	for _, c := range drop {
		c.reset(p)
	}
	if relisten {
		if err := p.relisten(); err != nil {
			return err
		}
	}
	if prev != m {
		if m == Latency {
			p.o.Logger.Info("fault proxy mode", "mode", m, "latency", lat)
		} else {
			p.o.Logger.Info("fault proxy mode", "mode", m)
		}
	}
	return nil
}

// relisten binds the proxy's address again after a partition, retrying
// briefly while the port is still being released.
func (p *Proxy) relisten() error {
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		ln, err = net.Listen("tcp", p.addr)
		if err == nil {
			p.mu.Lock()
			if p.closed || p.mode == Partition || p.ln != nil {
				p.mu.Unlock()
				_ = ln.Close()
				return nil
			}
			p.mu.Unlock()
			p.serve(ln)
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("faultproxy: listen again on %s after a partition: %w", p.addr, err)
}

// ResetAll resets every open connection once, without changing the mode,
// and returns how many it reset.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	var drop []*conn
	for c := range p.conns {
		drop = append(drop, c)
	}
	p.mu.Unlock()
	for _, c := range drop {
		c.reset(p)
	}
	return len(drop)
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := len(p.conns)
	p.mu.Unlock()
	return Stats{Accepted: p.accepted.Load(), Resets: p.resets.Load(), DialErrors: p.dialErrors.Load(),
		BytesUp: p.up.Load(), BytesDown: p.down.Load(), Open: open}
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ln := p.ln
	p.ln = nil
	var all []*conn
	for c := range p.conns {
		all = append(all, c)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range all {
		c.close()
	}
	p.wg.Wait()
	return nil
}

// serve accepts connections on ln until it is closed.
func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = ln.Close()
		return
	}
	p.ln = ln
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			p.mu.Lock()
			mode, closed := p.mode, p.closed
			p.mu.Unlock()
			if closed || mode == Reset || mode == Partition {
				p.resets.Add(1) // counted before the peer can see the reset
				rst(cc)
				continue
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.handle(cc)
			}()
		}
	}()
}

// handle forwards one connection.
func (p *Proxy) handle(cc net.Conn) {
	tc, err := net.DialTimeout("tcp", p.o.Target, p.o.DialTimeout)
	if err != nil {
		p.dialErrors.Add(1)
		rst(cc)
		return
	}
	c := &conn{client: cc, target: tc, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.mode == Reset || p.mode == Partition {
		p.mu.Unlock()
		p.resets.Add(1) // counted before the peer can see the reset
		rst(cc)
		rst(tc)
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()

	up := newPipe()   // client → target
	down := newPipe() // target → client
	var wg sync.WaitGroup
	wg.Add(4)
	// The client side ending ends the connection at once, dropping held
	// bytes: the caller gave up.
	go func() { defer wg.Done(); read(cc, up); c.close() }()
	// The target side ending is delivered in order: the response bytes
	// read before the end still reach the client.
	go func() { defer wg.Done(); read(tc, down) }()
	go func() { defer wg.Done(); p.write(c, up, tc, &p.up); c.close() }()
	go func() { defer wg.Done(); p.write(c, down, cc, &p.down); c.close() }()
	wg.Wait()
}

// conn is one proxied connection.
type conn struct {
	client, target net.Conn
	once           sync.Once
	done           chan struct{}
}

func (c *conn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.target.Close()
	})
}

func (c *conn) reset(p *Proxy) {
	c.once.Do(func() {
		close(c.done)
		p.resets.Add(1) // counted before the peer can see the reset
		rst(c.client)
		rst(c.target)
	})
}

// rst closes a TCP connection with a reset rather than a FIN.
func rst(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// chunk is bytes read at a time.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe is an unbounded queue of chunks from a reader to a writer.
type pipe struct {
	mu     sync.Mutex
	q      []chunk
	eof    bool
	notify chan struct{}
}

func newPipe() *pipe { return &pipe{notify: make(chan struct{}, 1)} }

func (q *pipe) push(c chunk, eof bool) {
	q.mu.Lock()
	if c.b != nil {
		q.q = append(q.q, c)
	}
	q.eof = q.eof || eof
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

func (q *pipe) peek() (chunk, bool, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.q) == 0 {
		return chunk{}, false, q.eof
	}
	return q.q[0], true, false
}

func (q *pipe) pop() {
	q.mu.Lock()
	q.q = q.q[1:]
	q.mu.Unlock()
}

// read copies src into q until src ends.
func read(src net.Conn, q *pipe) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q.push(chunk{b: append([]byte(nil), buf[:n]...), at: time.Now()}, false)
		}
		if err != nil {
			q.push(chunk{}, true)
			return
		}
	}
}

// write forwards q to dst, obeying the mode, until q ends or c closes.
func (p *Proxy) write(c *conn, q *pipe, dst net.Conn, count *atomic.Int64) {
	for {
		ch, ok, eof := q.peek()
		if eof {
			return
		}
		if !ok {
			select {
			case <-q.notify:
				continue
			case <-c.done:
				return
			}
		}
		if !p.gate(c, ch.at) {
			return
		}
		if _, err := dst.Write(ch.b); err != nil {
			return
		}
		count.Add(int64(len(ch.b)))
		q.pop()
	}
}

// gate waits until a chunk read at `at` may be forwarded: at once in Pass
// mode, at at+latency in Latency mode, never while stalled. It returns
// false when the connection ends or must be dropped.
func (p *Proxy) gate(c *conn, at time.Time) bool {
	for {
		p.mu.Lock()
		mode, lat, changed, closed := p.mode, p.latency, p.changed, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		switch mode {
		case Pass:
			return true
		case Latency:
			wait := time.Until(at.Add(lat))
			if wait <= 0 {
				return true
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				return true
			case <-changed:
				t.Stop()
			case <-c.done:
				t.Stop()
				return false
			}
		case Stall:
			select {
			case <-changed:
			case <-c.done:
				return false
			}
		default: // Reset, Partition: Set drops the connection
			select {
			case <-changed:
			case <-c.done:
				return false
			}
		}
	}
}

var _ io.Closer = (*Proxy)(nil)
