// Package throttle is an HTTP proxy in front of one Azurite service that
// answers like a busy Azure Storage account: 503 ServerBusy with a
// Retry-After header, for a share of requests at random (SetRefuse), for
// every request (RefuseAll), or past Azure's scalability targets scaled
// down (SetLimits: messages per second per queue, entities per second per
// table partition, requests per second per blob and per account). The
// reliability suite uses it for throttling; the sharding benchmark uses it
// so that what limits throughput is the targets, not the emulator's one
// thread.
package throttle

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Service is the storage service a proxy stands in front of: it decides
// how requests are keyed (queue, table partition, blob) and how a refusal
// is written (XML for blob and queue, JSON for table).
type Service string

// The services.
const (
	Blob  Service = "blob"
	Queue Service = "queue"
	Table Service = "table"
)

// Limits are scalability targets, per second. Zero means no limit. Azure's
// own (general-purpose v2) are about 2,000 messages per queue, 2,000
// entities per table partition, 500 requests per blob and 20,000 requests
// per account; tests scale them down so that an emulator can exceed them.
type Limits struct {
	// QueueMessages is the rate of message operations per queue.
	QueueMessages float64
	// PartitionEntities is the rate of entity operations per table
	// partition (a batch counts each of its operations).
	PartitionEntities float64
	// BlobRequests is the rate of requests per blob.
	BlobRequests float64
	// AccountRequests is the rate of requests through this proxy.
	AccountRequests float64
}

// Options configure New.
type Options struct {
	// Target is the host:port of the service. Required.
	Target string
	// Service is what Target serves. Required.
	Service Service
	// Listen is the address to listen on. Default "127.0.0.1:0".
	Listen string
	// RetryAfter is the Retry-After a refusal carries, in whole seconds.
	// Default 1; negative: no header.
	RetryAfter int
	// Seed makes the random refusals repeatable. Default: random.
	Seed uint64
	// Latency is added before every request is answered (refused or
	// forwarded), as the network and service of a real account add it.
	Latency time.Duration
	// Logger receives changes of behaviour. Default slog.Default().
	Logger *slog.Logger
}

// Stats count requests since New.
type Stats struct {
	// Requests is every request received.
	Requests int64
	// Forwarded were passed to the service.
	Forwarded int64
	// Refused were answered 503 ServerBusy, by reason: at random, while
	// refusing all, and past each limit.
	Refused, Random, All, QueueLimit, PartitionLimit, BlobLimit, AccountLimit int64
}

// Proxy is a running throttling proxy. Its methods are safe for concurrent
// use.
type Proxy struct {
	o   Options
	srv *http.Server
	ln  net.Listener

	mu      sync.Mutex
	refuse  float64
	all     bool
	limits  Limits
	buckets map[string]*bucket
	rng     *rand.Rand
	// per counts each key's forwarded cost and refusals (BucketStats).
	per map[string]*BucketStats

	requests, forwarded, random, allN, queueN, partN, blobN, acctN atomic.Int64
}

// New starts a proxy that forwards everything (no refusals, no limits).
func New(o Options) (*Proxy, error) {
	if o.Target == "" {
		return nil, errors.New("throttle: Options.Target is empty: want the host:port of the service")
	}
	if _, _, err := net.SplitHostPort(o.Target); err != nil {
		return nil, fmt.Errorf("throttle: Options.Target %q: want host:port: %w", o.Target, err)
	}
	switch o.Service {
	case Blob, Queue, Table:
	default:
		return nil, fmt.Errorf("throttle: Options.Service %q: want %q, %q or %q", o.Service, Blob, Queue, Table)
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("throttle: listen on %s: %w", o.Listen, err)
	}
	p := &Proxy{o: o, ln: ln, buckets: map[string]*bucket{}, per: map[string]*BucketStats{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	p.o.Logger = o.Logger.With("proxy", ln.Addr().String(), "service", string(o.Service))
	target := &url.URL{Scheme: "http", Host: o.Target}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the signature does not cover the host, Azurite's path-style URLs do not need it changed
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "throttle: "+err.Error(), http.StatusBadGateway)
		},
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		if o.Latency > 0 {
			t := time.NewTimer(o.Latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if reason := p.decide(r); reason != "" {
			p.busy(w, reason)
			return
		}
		p.forwarded.Add(1)
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Addr is the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the port of Addr.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Close stops the proxy and drops its connections.
func (p *Proxy) Close() error { return p.srv.Close() }

// SetRefuse answers the share frac (0 to 1) of requests with 503
// ServerBusy at random; 0 stops.
func (p *Proxy) SetRefuse(frac float64) error {
	if frac < 0 || frac > 1 || frac != frac {
		return fmt.Errorf("throttle: SetRefuse(%v): want a share from 0 to 1", frac)
	}
	p.mu.Lock()
	p.refuse = frac
	p.mu.Unlock()
	p.o.Logger.Info("random refusals", "share", frac)
	return nil
}

// RefuseAll answers every request with 503 ServerBusy while on is true.
func (p *Proxy) RefuseAll(on bool) {
	p.mu.Lock()
	p.all = on
	p.mu.Unlock()
	p.o.Logger.Info("refusing every request", "on", on)
}

// SetLimits enforces l from now on (the buckets start full).
func (p *Proxy) SetLimits(l Limits) error {
	for name, v := range map[string]float64{"QueueMessages": l.QueueMessages, "PartitionEntities": l.PartitionEntities,
		"BlobRequests": l.BlobRequests, "AccountRequests": l.AccountRequests} {
		if v < 0 || v != v {
			return fmt.Errorf("throttle: Limits.%s = %v: want a rate ≥ 0 (0: no limit)", name, v)
		}
	}
	p.mu.Lock()
	p.limits = l
	p.buckets = map[string]*bucket{}
	p.mu.Unlock()
	p.o.Logger.Info("limits", "queue_messages", l.QueueMessages, "partition_entities", l.PartitionEntities,
		"blob_requests", l.BlobRequests, "account_requests", l.AccountRequests)
	return nil
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	s := Stats{Requests: p.requests.Load(), Forwarded: p.forwarded.Load(), Random: p.random.Load(), All: p.allN.Load(),
		QueueLimit: p.queueN.Load(), PartitionLimit: p.partN.Load(), BlobLimit: p.blobN.Load(), AccountLimit: p.acctN.Load()}
	s.Refused = s.Random + s.All + s.QueueLimit + s.PartitionLimit + s.BlobLimit + s.AccountLimit
	return s
}

// decide returns why r is refused, or "" to forward it.
func (p *Proxy) decide(r *http.Request) string {
	key, cost := p.key(r)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.all:
		p.allN.Add(1)
		return "refusing every request"
	case p.refuse > 0 && p.rng.Float64() < p.refuse:
		p.random.Add(1)
		return "refused at random"
	}
	if l := p.limits.AccountRequests; l > 0 && !p.take("account", l, 1, now) {
		p.acctN.Add(1)
		return "past the account's request rate"
	}
	if key == "" {
		return ""
	}
	st := p.per[key]
	if st == nil {
		st = &BucketStats{}
		p.per[key] = st
	}
	var rate float64
	var count *atomic.Int64
	switch {
	case strings.HasPrefix(key, "queue/"):
		rate, count = p.limits.QueueMessages, &p.queueN
	case strings.HasPrefix(key, "partition/"):
		rate, count = p.limits.PartitionEntities, &p.partN
	case strings.HasPrefix(key, "blob/"):
		rate, count = p.limits.BlobRequests, &p.blobN
	}
	if rate > 0 && !p.take(key, rate, cost, now) {
		count.Add(1)
		st.Refused++
		return "past the rate of " + key
	}
	st.Requests++
	st.Cost += cost
	return ""
}

// BucketStats count what one key (queue/{name}, partition/{table}/{pk},
// blob/{container}/{name}) was asked since New.
type BucketStats struct {
	// Requests were forwarded; Cost is their operations (a table batch
	// counts each entity).
	Requests int64
	Cost     float64
	// Refused were answered 503 past the key's rate.
	Refused int64
}

// Buckets returns each key's counts so far.
func (p *Proxy) Buckets() map[string]BucketStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]BucketStats, len(p.per))
	for k, v := range p.per {
		out[k] = *v
	}
	return out
}

// take spends cost tokens of key's bucket (rate per second, holding at
// most a second's worth); false when there are not enough. A request
// costing more than a second's worth (a batch of 100 entities against a
// target scaled down below 100/s) passes when the bucket is full and
// leaves it in debt, so the rate holds on average without refusing for
// ever what the real target (2,000/s) takes at once.
func (p *Proxy) take(key string, rate, cost float64, now time.Time) bool {
	b := p.buckets[key]
	if b == nil {
		b = &bucket{tokens: rate, at: now}
		p.buckets[key] = b
	}
	b.tokens = min(rate, b.tokens+now.Sub(b.at).Seconds()*rate)
	b.at = now
	if b.tokens < min(cost, rate) {
		return false
	}
	b.tokens -= cost
	return true
}

// bucket is a token bucket.
type bucket struct {
	tokens float64
	at     time.Time
}

var (
	// entityPK finds the partition key in a table entity's path:
	// /Table(PartitionKey='pk',RowKey='rk').
	entityPK = regexp.MustCompile(`PartitionKey='((?:[^']|'')*)'`)
	// filterPK finds it in a query's $filter (PartitionKey eq 'pk').
	filterPK = regexp.MustCompile(`PartitionKey\s+eq\s+'((?:[^']|'')*)'`)
	// batchOp counts the operations of a batch (one request line each).
	batchOp = regexp.MustCompile(`(?m)^(GET|POST|PUT|PATCH|MERGE|DELETE) \S+ HTTP/1\.1`)
	// batchPK finds the partition key of a batch's first operation, in its
	// URL or in its JSON body.
	batchPK = regexp.MustCompile(`PartitionKey='((?:[^']|'')*)'|"PartitionKey"\s*:\s*"((?:[^"\\]|\\.)*)"`)
	// batchTable finds the table of a batch's first operation: the last
	// segment of its URL's path, before the entity's keys, the query or
	// the protocol (an insert posts to /account/Table?…, with no keys).
	batchTable = regexp.MustCompile(`(?m)^(?:GET|POST|PUT|PATCH|MERGE|DELETE) \S*?/([A-Za-z][A-Za-z0-9]{2,62})(?:\(|\?| )`)
)

// key returns what r counts against (queue/{name}, partition/{table}/{pk},
// blob/{container}/{name}) and how much: one, or a batch's operations.
func (p *Proxy) key(r *http.Request) (string, float64) {
	path := strings.Trim(r.URL.EscapedPath(), "/")
	parts := strings.SplitN(path, "/", 3) // account, resource, rest
	if len(parts) < 2 {
		return "", 1
	}
	switch p.o.Service {
	case Queue:
		if len(parts) == 3 && strings.HasPrefix(parts[2], "messages") {
			return "queue/" + parts[1], 1
		}
	case Blob:
		if len(parts) == 3 {
			return "blob/" + parts[1] + "/" + parts[2], 1
		}
	case Table:
		res, _ := url.PathUnescape(parts[1])
		if res == "$batch" {
			body, err := io.ReadAll(r.Body)
			r.Body.Close()
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			if err != nil {
				return "", 1
			}
			n := len(batchOp.FindAll(body, -1))
			table := ""
			if m := batchTable.FindSubmatch(body); m != nil {
				table = string(m[1])
			}
			if m := batchPK.FindSubmatch(body); m != nil {
				pk := string(m[1]) + string(m[2])
				return "partition/" + table + "/" + pk, float64(max(n, 1))
			}
			return "", float64(max(n, 1))
		}
		table, _, _ := strings.Cut(res, "(")
		if m := entityPK.FindStringSubmatch(res); m != nil {
			return "partition/" + table + "/" + strings.ReplaceAll(m[1], "''", "'"), 1
		}
		if m := filterPK.FindStringSubmatch(r.URL.Query().Get("$filter")); m != nil {
			return "partition/" + table + "/" + strings.ReplaceAll(m[1], "''", "'"), 1
		}
	}
	return "", 1
}

// busy answers 503 ServerBusy as Azure Storage does.
func (p *Proxy) busy(w http.ResponseWriter, reason string) {
	h := w.Header()
	h.Set("x-ms-error-code", "ServerBusy")
	h.Set("x-ms-request-id", strconv.FormatUint(p.rngUint(), 16))
	if p.o.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.o.RetryAfter))
	}
	msg := "The server is busy (throttle proxy: " + reason + ")."
	if p.o.Service == Table {
		h.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":%q}}}`, msg)
		return
	}
	h.Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code><Message>%s</Message></Error>`, msg)
}

func (p *Proxy) rngUint() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.Uint64()
}
