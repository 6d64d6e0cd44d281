package memstore

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The account the connection strings name: the storage emulator's
// well-known development account (public, documented by Microsoft). The
// services accept any account name in a request's path and any key.
const (
	AccountName = "devstoreaccount1"
	AccountKey  = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// The made-up hosts of the in-process endpoints (ConnectionString).
const (
	BlobHost  = "blob.memstore"
	QueueHost = "queue.memstore"
	TableHost = "table.memstore"
)

// maxBody bounds what a request body may hold (a block blob uploaded in
// one request).
const maxBody = 256 << 20

// Options configure a Server. The zero value is ready to use.
type Options struct {
	// Now is the service's clock: lease expiry and break periods, message
	// visibility and expiry, Last-Modified and Timestamp are all read
	// from it, on each request. Default time.Now.
	Now func() time.Time
	// DuplicateDelivery, when set, is asked on every Get Messages that
	// returns messages, with the queue's name and the text of the first
	// message returned; when it returns true that message stays visible,
	// so another getter can receive it too, as Azure's at-least-once
	// delivery sometimes does. The first getter's pop receipt stops
	// working once another getter has received the message.
	DuplicateDelivery func(queue, text string) bool
	// OnCommit, when set, is told every table write that committed (an
	// entity operation, or a whole entity-group transaction), in the
	// order they committed, while the account is locked: it must not call
	// the Server.
	OnCommit func(Commit)
}

// Commit is a table write that committed: the rows of one partition it
// wrote, as they now stand.
type Commit struct {
	Table, Partition string
	Rows             []CommittedRow
}

// CommittedRow is one row a commit wrote: its properties as stored
// (strings, bools, int64 for Edm.Int32 and Edm.Int64, float64,
// time.Time, []byte and the rest as the service keeps them), or
// Deleted.
type CommittedRow struct {
	RowKey  string
	Deleted bool
	Props   map[string]any
}

// Server is one in-memory storage account. Create it with New; it needs
// no closing unless Listen was called.
type Server struct {
	now      func() time.Time
	dup      func(queue, text string) bool
	onCommit func(Commit)

	mu         sync.Mutex
	seq        uint64 // ids, receipts, ETags
	lastStamp  time.Time
	containers map[string]*container
	queues     map[string]*queue
	tables     map[string]*table
	counts     map[string]int64

	lnMu      sync.Mutex
	listeners []*http.Server
	ports     [3]int
	connStr   string
}

// New returns an empty account.
func New(o Options) *Server {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return &Server{
		now:        now,
		dup:        o.DuplicateDelivery,
		onCommit:   o.OnCommit,
		containers: map[string]*container{},
		queues:     map[string]*queue{},
		tables:     map[string]*table{},
		counts:     map[string]int64{},
	}
}

// ConnectionString returns a connection string whose endpoints are the
// in-process hosts BlobHost, QueueHost and TableHost: clients built from
// it must use Transport (an SDK client's ClientOptions.Transport).
func (s *Server) ConnectionString() string {
	return connectionString("http://"+BlobHost+"/"+AccountName, "http://"+QueueHost+"/"+AccountName, "http://"+TableHost+"/"+AccountName)
}

func connectionString(blob, queue, table string) string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;QueueEndpoint=%s;TableEndpoint=%s;",
		AccountName, AccountKey, blob, queue, table)
}

// Requests returns how many requests the server has answered, by
// operation, named as Azure Storage Analytics logs them: blob
// CreateContainer, DeleteContainer, GetContainerProperties,
// SetContainerMetadata, ListContainers, ListBlobs, PutBlob, GetBlob,
// GetBlobProperties, SetBlobMetadata, SetBlobProperties, DeleteBlob,
// AcquireBlobLease, RenewBlobLease, ChangeBlobLease, ReleaseBlobLease,
// BreakBlobLease; queue CreateQueue, DeleteQueue, GetQueueMetadata,
// SetQueueMetadata, ListQueues, PutMessage, GetMessages, PeekMessages,
// UpdateMessage, DeleteMessage, ClearMessages; table CreateTable,
// DeleteTable, QueryTables, InsertEntity, QueryEntity (one by its keys),
// QueryEntities, UpdateEntity, MergeEntity, InsertOrReplaceEntity,
// InsertOrMergeEntity, DeleteEntity, EntityGroupTransaction (a batch
// counts once, as Azure bills it); Unknown for a request no operation
// matched. Failed requests count too.
func (s *Server) Requests() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

// ResetRequests zeroes the counts Requests returns.
func (s *Server) ResetRequests() {
	s.mu.Lock()
	s.counts = map[string]int64{}
	s.mu.Unlock()
}

// BlobHandler returns the Blob service as an http.Handler (paths
// /{account}/…).
func (s *Server) BlobHandler() http.Handler { return handler{s, svcBlob} }

// QueueHandler returns the Queue service as an http.Handler.
func (s *Server) QueueHandler() http.Handler { return handler{s, svcQueue} }

// TableHandler returns the Table service as an http.Handler.
func (s *Server) TableHandler() http.Handler { return handler{s, svcTable} }

// Transport returns the in-process transport: its Do (and RoundTrip)
// serves a request directly, without a socket, by the service its host
// names: BlobHost, QueueHost or TableHost, or 127.0.0.1 and a port Listen
// opened. It satisfies azcore's policy.Transporter and http.RoundTripper.
func (s *Server) Transport() *Transport { return &Transport{s: s} }

// Transport serves requests in-process; see Server.Transport.
type Transport struct{ s *Server }

// Do serves req and returns the service's response, or an error when the
// request's context is done or its host names no service.
func (t *Transport) Do(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	svc, ok := t.s.serviceOf(req.URL.Host)
	if !ok {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("memstore: no service at host %q", req.URL.Host)
	}
	r := *req
	r.Header = make(http.Header, len(req.Header))
	for k, vs := range req.Header {
		// The SDKs set x-ms-* headers under lower-case keys; a server
		// sees them canonical. (The values are only read.)
		ck := http.CanonicalHeaderKey(k)
		if prev, ok := r.Header[ck]; ok {
			vs = append(append([]string(nil), prev...), vs...)
		}
		r.Header[ck] = vs
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	rec := &recorder{h: http.Header{}}
	handler{t.s, svc}.ServeHTTP(rec, &r)
	if req.Body != nil {
		req.Body.Close()
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	body := rec.body.Bytes()
	if req.Method == http.MethodHead {
		body = nil
	}
	cl := int64(len(body))
	if req.Method == http.MethodHead {
		cl, _ = strconv.ParseInt(rec.h.Get("Content-Length"), 10, 64)
	}
	return &http.Response{
		Status:        strconv.Itoa(rec.status) + " " + http.StatusText(rec.status),
		StatusCode:    rec.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        rec.h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: cl,
		Request:       req,
	}, nil
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) { return t.Do(req) }

// recorder is the in-process http.ResponseWriter.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (s *Server) serviceOf(host string) (service, bool) {
	switch host {
	case BlobHost:
		return svcBlob, true
	case QueueHost:
		return svcQueue, true
	case TableHost:
		return svcTable, true
	}
	if _, p, err := net.SplitHostPort(host); err == nil {
		port, _ := strconv.Atoi(p)
		s.lnMu.Lock()
		defer s.lnMu.Unlock()
		for i, lp := range s.ports {
			if lp != 0 && lp == port {
				return service(i), true
			}
		}
	}
	return 0, false
}

// Listen serves the three services on listeners of 127.0.0.1 (a free port
// each) until Close, and returns a connection string for them. Calling it
// again returns the same connection string.
func (s *Server) Listen() (string, error) { return s.ListenPorts(0, 0, 0) }

// ListenPorts is Listen on the given ports of 127.0.0.1 (0: a free one).
func (s *Server) ListenPorts(blob, queue, table int) (string, error) {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	if s.connStr != "" {
		return s.connStr, nil
	}
	var lns []net.Listener
	for _, port := range []int{blob, queue, table} {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return "", fmt.Errorf("memstore: listen: %w", err)
		}
		lns = append(lns, ln)
	}
	var eps [3]string
	for i, ln := range lns {
		srv := &http.Server{Handler: handler{s, service(i)}, ReadHeaderTimeout: 10 * time.Second}
		s.listeners = append(s.listeners, srv)
		s.ports[i] = ln.Addr().(*net.TCPAddr).Port
		eps[i] = fmt.Sprintf("http://127.0.0.1:%d/%s", s.ports[i], AccountName)
		go func() { _ = srv.Serve(ln) }()
	}
	s.connStr = connectionString(eps[0], eps[1], eps[2])
	return s.connStr, nil
}

// ServeListener serves one service (the handler given, from BlobHandler,
// QueueHandler or TableHandler) on ln until Close.
func (s *Server) ServeListener(ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.lnMu.Lock()
	s.listeners = append(s.listeners, srv)
	if hh, ok := h.(handler); ok {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			s.ports[hh.svc] = a.Port
		}
	}
	s.lnMu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// Ports returns the ports Listen opened (0 before).
func (s *Server) Ports() (blob, queue, table int) {
	s.lnMu.Lock()
	defer s.lnMu.Unlock()
	return s.ports[0], s.ports[1], s.ports[2]
}

// Close stops serving on the listeners Listen and ServeListener opened and
// closes their connections. The data stays: the Server still answers
// through Transport, and Listen may be called again.
func (s *Server) Close() error {
	s.lnMu.Lock()
	srvs := s.listeners
	s.listeners, s.ports, s.connStr = nil, [3]int{}, ""
	s.lnMu.Unlock()
	var errs []error
	for _, srv := range srvs {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}

type service int

const (
	svcBlob service = iota
	svcQueue
	svcTable
)

// handler serves one service of a Server.
type handler struct {
	s   *Server
	svc service
}

// request is what a service operation sees of an HTTP request.
type request struct {
	method  string
	account string
	path    string // after the account, without the leading slash; decoded
	query   map[string][]string
	header  http.Header
	body    []byte
	host    string
	now     time.Time
}

func (r *request) q(key string) string {
	if v := r.query[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (r *request) has(key string) bool { _, ok := r.query[key]; return ok }

// reply is a service operation's answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func newReply(status int) *reply { return &reply{status: status, header: http.Header{}} }

// svcError is an error the service answers with.
type svcError struct {
	status int
	code   string
	msg    string
}

func (e *svcError) Error() string { return e.code + ": " + e.msg }

func fail(status int, code, format string, args ...any) *svcError {
	return &svcError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func (h handler) ServeHTTP(w http.ResponseWriter, hr *http.Request) {
	body, err := io.ReadAll(io.LimitReader(hr.Body, maxBody+1))
	var rerr *svcError
	switch {
	case err != nil:
		rerr = fail(http.StatusBadRequest, "InvalidInput", "reading the request body: %v", err)
	case len(body) > maxBody:
		rerr = fail(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "the request body is larger than %d bytes", maxBody)
	}
	path := strings.TrimPrefix(hr.URL.Path, "/")
	account, rest, _ := strings.Cut(path, "/")
	r := &request{
		method: hr.Method, account: account, path: rest, query: hr.URL.Query(),
		header: hr.Header, body: body, host: hr.Host,
	}
	if r.host == "" {
		r.host = hr.URL.Host
	}

	rep, reqID, rerr := h.serve(r, rerr)
	if rerr != nil {
		rep = errorReply(h.svc, rerr, reqID, r.now)
	}
	hd := w.Header()
	for k, v := range rep.header {
		hd[k] = v
	}
	hd.Set("X-Ms-Request-Id", reqID)
	hd.Set("X-Ms-Version", cmp.Or(hr.Header.Get("X-Ms-Version"), "2025-01-05"))
	hd.Set("Date", r.now.Format(http.TimeFormat))
	hd.Set("Server", "memstore")
	if v := hr.Header.Get("X-Ms-Client-Request-Id"); v != "" {
		hd.Set("X-Ms-Client-Request-Id", v)
	}
	if hd.Get("Content-Length") == "" || hr.Method != http.MethodHead {
		hd.Set("Content-Length", strconv.Itoa(len(rep.body)))
	}
	w.WriteHeader(rep.status)
	if hr.Method != http.MethodHead && len(rep.body) > 0 {
		_, _ = w.Write(rep.body)
	}
}

// serve answers r under the server's lock (failed, when set, is the
// answer already). A panic is answered as a 500 InternalError, so that a
// bug never leaves the lock held.
func (h handler) serve(r *request, failed *svcError) (rep *reply, reqID string, rerr *svcError) {
	s := h.s
	op := ""
	s.mu.Lock()
	defer s.mu.Unlock()
	r.now = s.now().UTC()
	reqID = idFrom(s.next())
	defer func() {
		if p := recover(); p != nil {
			rep, rerr = nil, fail(http.StatusInternalServerError, "InternalError", "memstore: %v", p)
		}
		if op == "" {
			op = "Unknown"
		}
		s.counts[op]++
	}()
	if failed == nil && r.account == "" {
		failed = fail(http.StatusBadRequest, "InvalidUri", "no account in the path %q", "/"+r.path)
	}
	if failed != nil {
		return nil, reqID, failed
	}
	var err error
	switch h.svc {
	case svcBlob:
		op, rep, err = s.blob(r)
	case svcQueue:
		op, rep, err = s.queue(r)
	case svcTable:
		op, rep, err = s.table(r)
	}
	if err != nil {
		if !errors.As(err, &rerr) {
			rerr = fail(http.StatusInternalServerError, "InternalError", "%v", err)
		}
		return nil, reqID, rerr
	}
	return rep, reqID, nil
}

func errorReply(svc service, e *svcError, reqID string, now time.Time) *reply {
	rep := newReply(e.status)
	rep.header.Set("X-Ms-Error-Code", e.code)
	if e.status == http.StatusNotModified {
		return rep
	}
	msg := e.msg + "\nRequestId:" + reqID + "\nTime:" + now.Format("2006-01-02T15:04:05.0000000Z")
	if svc == svcTable {
		rep.header.Set("Content-Type", "application/json;odata=minimalmetadata;streaming=true;charset=utf-8")
		rep.body = tableErrorBody(e.code, msg)
		return rep
	}
	rep.header.Set("Content-Type", "application/xml")
	rep.body = []byte(`<?xml version="1.0" encoding="utf-8"?><Error><Code>` + e.code + `</Code><Message>` + xmlEscape(msg) + `</Message></Error>`)
	return rep
}

// next returns the next value of the server's counter; the caller holds
// s.mu.
func (s *Server) next() uint64 {
	s.seq++
	return s.seq
}

// idFrom renders n as a GUID-shaped identifier.
func idFrom(n uint64) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(n>>32), uint16(n>>16), uint16(n)&0xfff, 0, n&0xffffffffffff)
}

// token renders n as an opaque base64 token (pop receipts).
func token(n uint64) string {
	var b [12]byte
	b[0], b[1], b[2], b[3] = 'm', 'e', 'm', 1
	binary.BigEndian.PutUint64(b[4:], n)
	return base64.StdEncoding.EncodeToString(b[:])
}

// metadata reads x-ms-meta-* headers. Keys are kept lower-case (as they
// reach Azurite over HTTP; leasecron reads them case-insensitively).
func metadata(h http.Header) map[string]string {
	var m map[string]string
	for k, vs := range h {
		if len(k) > len("x-ms-meta-") && strings.EqualFold(k[:len("x-ms-meta-")], "x-ms-meta-") && len(vs) > 0 {
			if m == nil {
				m = map[string]string{}
			}
			m[strings.ToLower(k[len("x-ms-meta-"):])] = vs[0]
		}
	}
	return m
}

func setMetadata(h http.Header, m map[string]string) {
	for k, v := range m {
		h.Set("X-Ms-Meta-"+k, v)
	}
}

func rfc1123(t time.Time) string { return t.UTC().Format(http.TimeFormat) }
