// Package queuesrv is an in-memory Azure Queue service that speaks the
// REST protocol the azqueue SDK uses (create, delete and list queues,
// properties, put, get, peek, update, delete and clear messages), for
// long runs that need queues of 100,000 messages.
//
// Azurite keeps a queue's messages in one collection that each get and
// delete scans: on this machine a delete takes 65 ms at 10,000 messages
// and 300 ms at 30,000, so draining a queue of 100,000 would take most of
// a day, while Azure serves the same operations in constant time. This
// server keeps each queue's messages in a map and a heap ordered by when
// they become visible, so every operation costs O(log n), and tables and
// blobs stay on Azurite (point a connection string's QueueEndpoint at
// it). It follows the service's rules where leasecron depends on them: a
// get hides each message for its visibility timeout and hands out a new
// pop receipt, update and delete need the latest receipt (400
// PopReceiptMismatch otherwise, 404 MessageNotFound once the message is
// gone), a message of time-to-live -1 never expires, and a body over
// 64 KiB is refused. It does not check signatures, and keeps nothing when
// it stops.
package queuesrv

import (
	"container/heap"
	"crypto/rand"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxMessageBytes is the largest message text the service accepts.
const MaxMessageBytes = 64 << 10

// never is the expiry of a message sent with a time-to-live of -1.
var never = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Server is a running in-memory queue service.
type Server struct {
	ln  net.Listener
	srv *http.Server
	now func() time.Time

	mu     sync.Mutex
	queues map[string]*store
	calls  [opCount]atomic.Int64
}

// Op names an operation the server counts.
type Op int

// The operations Calls counts.
const (
	OpPut Op = iota
	OpGet
	OpPeek
	OpUpdate
	OpDelete
	OpOther
	opCount
)

// Start listens on a free port of 127.0.0.1 and serves.
func Start() (*Server, error) { return StartWithClock(time.Now) }

// StartWithClock is Start with the clock that visibility and expiry are
// counted on.
func StartWithClock(now func() time.Time) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("queuesrv: listen: %w", err)
	}
	s := &Server{ln: ln, now: now, queues: map[string]*store{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Close stops the server; every message is gone.
func (s *Server) Close() error { return s.srv.Close() }

// Calls returns how many requests of op the server has answered.
func (s *Server) Calls(op Op) int64 { return s.calls[op].Load() }

// Len returns how many messages queue holds (hidden ones included), or
// -1 when there is no such queue.
func (s *Server) Len(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return -1
	}
	return len(q.byID)
}

type message struct {
	id, text, receipt         string
	inserted, expires, hidden time.Time
	dequeues                  int64
	seq                       uint64
	at                        int // index in the heap
}

// store holds a queue's messages by id and in a heap by (hidden until, sequence).
type store struct {
	byID map[string]*message
	h    byVisible
	seq  uint64
}

type byVisible []*message

func (h byVisible) Len() int { return len(h) }
func (h byVisible) Less(i, j int) bool {
	if !h[i].hidden.Equal(h[j].hidden) {
		return h[i].hidden.Before(h[j].hidden)
	}
	return h[i].seq < h[j].seq
}
func (h byVisible) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at, h[j].at = i, j
}
func (h *byVisible) Push(x any) {
	m := x.(*message)
	m.at = len(*h)
	*h = append(*h, m)
}
func (h *byVisible) Pop() any {
	old := *h
	m := old[len(old)-1]
	*h = old[:len(old)-1]
	return m
}

func (q *store) remove(m *message) {
	heap.Remove(&q.h, m.at)
	delete(q.byID, m.id)
}

// visible pops the first visible message that has not expired (dropping
// expired ones), or returns nil.
func (q *store) visible(now time.Time) *message {
	for q.h.Len() > 0 {
		m := q.h[0]
		if m.hidden.After(now) {
			return nil
		}
		if !m.expires.After(now) {
			q.remove(m)
			continue
		}
		return m
	}
	return nil
}

// apiError is an error the service answers with.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

func fail(status int, code, format string, args ...any) error {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

func token() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func messageID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-ms-request-id", token())
	w.Header().Set("x-ms-version", r.Header.Get("x-ms-version"))
	w.Header().Set("Date", s.now().UTC().Format(http.TimeFormat))
	status, body, err := s.route(w, r)
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{status: http.StatusInternalServerError, code: "InternalError", msg: err.Error()}
		}
		w.Header().Set("x-ms-error-code", ae.code)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(ae.status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, ae.code, xmlEscape(ae.msg))
		return
	}
	if body != nil {
		out, err := xml.Marshal(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, xml.Header)
		_, _ = w.Write(out)
		return
	}
	w.WriteHeader(status)
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// route answers one request: its status and XML body, or an error.
func (s *Server) route(w http.ResponseWriter, r *http.Request) (int, any, error) {
	// Path: /{account}[/{queue}[/messages[/{id}]]]
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if parts[0] == "" {
		return 0, nil, fail(http.StatusBadRequest, "InvalidUri", "no account in %q", r.URL.Path)
	}
	parts = parts[1:]
	qv := r.URL.Query()
	switch {
	case len(parts) == 0 || parts[0] == "":
		if qv.Get("comp") == "list" && r.Method == http.MethodGet {
			s.calls[OpOther].Add(1)
			return s.list(r, qv.Get("prefix"))
		}
	case len(parts) == 1:
		s.calls[OpOther].Add(1)
		return s.queueOp(w, r, parts[0])
	case len(parts) == 2 && parts[1] == "messages":
		return s.messagesOp(r, parts[0])
	case len(parts) == 3 && parts[1] == "messages":
		return s.messageOp(w, r, parts[0], parts[2])
	}
	return 0, nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s %s is not served here", r.Method, r.URL.Path)
}

type queueName struct {
	Name string `xml:"Name"`
}

type listResult struct {
	XMLName         xml.Name    `xml:"EnumerationResults"`
	ServiceEndpoint string      `xml:"ServiceEndpoint,attr"`
	Prefix          string      `xml:"Prefix"`
	MaxResults      int         `xml:"MaxResults"`
	Queues          []queueName `xml:"Queues>Queue"`
	NextMarker      string      `xml:"NextMarker"`
}

func (s *Server) list(r *http.Request, prefix string) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := listResult{ServiceEndpoint: "http://" + r.Host + "/", Prefix: prefix, MaxResults: 5000}
	for n := range s.queues {
		if strings.HasPrefix(n, prefix) {
			out.Queues = append(out.Queues, queueName{n})
		}
	}
	sort.Slice(out.Queues, func(i, j int) bool { return out.Queues[i].Name < out.Queues[j].Name })
	return http.StatusOK, out, nil
}

func (s *Server) queueOp(w http.ResponseWriter, r *http.Request, name string) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	switch r.Method {
	case http.MethodPut:
		if q != nil {
			return http.StatusNoContent, nil, nil
		}
		s.queues[name] = &store{byID: map[string]*message{}}
		return http.StatusCreated, nil, nil
	case http.MethodDelete:
		if q == nil {
			return 0, nil, fail(http.StatusNotFound, "QueueNotFound", "queue %s does not exist", name)
		}
		delete(s.queues, name)
		return http.StatusNoContent, nil, nil
	case http.MethodGet, http.MethodHead:
		if q == nil {
			return 0, nil, fail(http.StatusNotFound, "QueueNotFound", "queue %s does not exist", name)
		}
		w.Header().Set("x-ms-approximate-messages-count", strconv.Itoa(len(q.byID)))
		return http.StatusOK, nil, nil
	}
	return 0, nil, fail(http.StatusMethodNotAllowed, "UnsupportedHttpVerb", "%s on a queue", r.Method)
}

// lookup returns queue name; the caller holds s.mu.
func (s *Server) lookup(name string) (*store, error) {
	q := s.queues[name]
	if q == nil {
		return nil, fail(http.StatusNotFound, "QueueNotFound", "queue %s does not exist", name)
	}
	return q, nil
}

// week, in seconds, is the longest visibility timeout and the default
// time-to-live.
const week = 7 * 24 * 3600

// intParam reads query value key (seconds, or a number of messages) as a
// whole number within [lo, hi], def when absent.
func intParam(r *http.Request, key string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "%s=%q: want a whole number from %d to %d", key, v, lo, hi)
	}
	return n, nil
}

type wireMessage struct {
	XMLName         xml.Name `xml:"QueueMessage"`
	MessageID       string   `xml:"MessageId"`
	InsertionTime   string   `xml:"InsertionTime"`
	ExpirationTime  string   `xml:"ExpirationTime"`
	PopReceipt      string   `xml:"PopReceipt,omitempty"`
	TimeNextVisible string   `xml:"TimeNextVisible,omitempty"`
	DequeueCount    *int64   `xml:"DequeueCount,omitempty"`
	MessageText     *string  `xml:"MessageText,omitempty"`
}

type wireList struct {
	XMLName  xml.Name      `xml:"QueueMessagesList"`
	Messages []wireMessage `xml:"QueueMessage"`
}

func rfc1123(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

// wire is m as a get (receipt true) or a peek returns it.
func wire(m *message, receipt bool) wireMessage {
	n, text := m.dequeues, m.text
	w := wireMessage{MessageID: m.id, InsertionTime: rfc1123(m.inserted), ExpirationTime: rfc1123(m.expires), DequeueCount: &n, MessageText: &text}
	if receipt {
		w.PopReceipt, w.TimeNextVisible = m.receipt, rfc1123(m.hidden)
	}
	return w
}

// readText reads a <QueueMessage><MessageText> body.
func readText(r *http.Request) (string, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 4*MaxMessageBytes))
	if err != nil {
		return "", false, fail(http.StatusBadRequest, "InvalidInput", "reading the body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return "", false, nil
	}
	var in struct {
		MessageText string `xml:"MessageText"`
	}
	if err := xml.Unmarshal(b, &in); err != nil {
		return "", false, fail(http.StatusBadRequest, "InvalidXmlDocument", "the body is not a QueueMessage: %v", err)
	}
	if len(in.MessageText) > MaxMessageBytes {
		return "", false, fail(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "message text of %d bytes: at most %d", len(in.MessageText), MaxMessageBytes)
	}
	return in.MessageText, true, nil
}

func (s *Server) messagesOp(r *http.Request, name string) (int, any, error) {
	switch r.Method {
	case http.MethodPost:
		s.calls[OpPut].Add(1)
		return s.put(r, name)
	case http.MethodGet:
		n, err := intParam(r, "numofmessages", 1, 1, 32)
		if err != nil {
			return 0, nil, err
		}
		if r.URL.Query().Get("peekonly") == "true" {
			s.calls[OpPeek].Add(1)
			return s.take(name, n, 0, true)
		}
		s.calls[OpGet].Add(1)
		vis, err := intParam(r, "visibilitytimeout", 30, 1, week)
		if err != nil {
			return 0, nil, err
		}
		return s.take(name, n, time.Duration(vis)*time.Second, false)
	case http.MethodDelete:
		s.calls[OpOther].Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, err := s.lookup(name); err != nil {
			return 0, nil, err
		}
		s.queues[name] = &store{byID: map[string]*message{}}
		return http.StatusNoContent, nil, nil
	}
	return 0, nil, fail(http.StatusMethodNotAllowed, "UnsupportedHttpVerb", "%s on messages", r.Method)
}

func (s *Server) put(r *http.Request, name string) (int, any, error) {
	vis, err := intParam(r, "visibilitytimeout", 0, 0, week)
	if err != nil {
		return 0, nil, err
	}
	ttl, err := intParam(r, "messagettl", week, -1, 1<<31-1)
	if err != nil {
		return 0, nil, err
	}
	if ttl == 0 {
		return 0, nil, fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "messagettl=0: want -1 or a positive number of seconds")
	}
	text, _, err := readText(r)
	if err != nil {
		return 0, nil, err
	}
	now := s.now().UTC().Truncate(time.Second)
	m := &message{id: messageID(), text: text, receipt: token(), inserted: now, hidden: now.Add(time.Duration(vis) * time.Second), expires: never}
	if ttl > 0 {
		m.expires = now.Add(time.Duration(ttl) * time.Second)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(name)
	if err != nil {
		return 0, nil, err
	}
	q.seq++
	m.seq = q.seq
	q.byID[m.id] = m
	heap.Push(&q.h, m)
	w := wire(m, true)
	w.DequeueCount, w.MessageText = nil, nil
	return http.StatusCreated, wireList{Messages: []wireMessage{w}}, nil
}

// take answers a get (hiding each message for vis, with a new receipt)
// or, when peek, a peek (changing nothing) of up to n visible messages.
func (s *Server) take(name string, n int, vis time.Duration, peek bool) (int, any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.lookup(name)
	if err != nil {
		return 0, nil, err
	}
	now := s.now().UTC()
	out := wireList{Messages: []wireMessage{}}
	var peeked []*message
	for len(out.Messages) < n {
		m := q.visible(now)
		if m == nil {
			break
		}
		if peek {
			heap.Pop(&q.h) // out of the way of the next; pushed back below
			peeked = append(peeked, m)
		} else {
			m.hidden = now.Add(vis)
			m.dequeues++
			m.receipt = token()
			heap.Fix(&q.h, m.at)
		}
		out.Messages = append(out.Messages, wire(m, !peek))
	}
	for _, m := range peeked {
		heap.Push(&q.h, m)
	}
	return http.StatusOK, out, nil
}

// held returns the message id of queue name if receipt is its latest pop
// receipt; the caller holds s.mu.
func (s *Server) held(r *http.Request, name, id string) (*store, *message, error) {
	q, err := s.lookup(name)
	if err != nil {
		return nil, nil, err
	}
	m := q.byID[id]
	if m == nil || !m.expires.After(s.now()) {
		return nil, nil, fail(http.StatusNotFound, "MessageNotFound", "message %s is not in queue %s", id, name)
	}
	if got := r.URL.Query().Get("popreceipt"); got != m.receipt {
		return nil, nil, fail(http.StatusBadRequest, "PopReceiptMismatch", "pop receipt %q is not the message's latest", got)
	}
	return q, m, nil
}

func (s *Server) messageOp(w http.ResponseWriter, r *http.Request, name, id string) (int, any, error) {
	switch r.Method {
	case http.MethodDelete:
		s.calls[OpDelete].Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		q, m, err := s.held(r, name, id)
		if err != nil {
			return 0, nil, err
		}
		q.remove(m)
		return http.StatusNoContent, nil, nil
	case http.MethodPut:
		s.calls[OpUpdate].Add(1)
		vis, err := intParam(r, "visibilitytimeout", -1, 0, week)
		if err != nil {
			return 0, nil, err
		}
		if vis < 0 {
			return 0, nil, fail(http.StatusBadRequest, "MissingRequiredQueryParameter", "visibilitytimeout is required")
		}
		text, has, err := readText(r)
		if err != nil {
			return 0, nil, err
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		q, m, err := s.held(r, name, id)
		if err != nil {
			return 0, nil, err
		}
		if has {
			m.text = text
		}
		m.receipt = token()
		m.hidden = s.now().UTC().Add(time.Duration(vis) * time.Second)
		heap.Fix(&q.h, m.at)
		w.Header().Set("x-ms-popreceipt", m.receipt)
		w.Header().Set("x-ms-time-next-visible", rfc1123(m.hidden))
		return http.StatusNoContent, nil, nil
	}
	return 0, nil, fail(http.StatusMethodNotAllowed, "UnsupportedHttpVerb", "%s on a message", r.Method)
}
