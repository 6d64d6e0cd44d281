package memstore

import (
	"container/heap"
	"encoding/xml"
	"maps"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxMessageBytes is the largest message text the Queue service accepts.
const MaxMessageBytes = 64 << 10

// never is the expiry of a message sent with a time-to-live of -1.
var never = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// week, in seconds, is the longest visibility timeout and the default
// time-to-live.
const week = 7 * 24 * 3600

// queue holds a queue's messages by id and in a heap ordered by when they
// become visible (then by arrival), so that every operation costs
// O(log n) however long the queue is.
type queue struct {
	meta map[string]string
	byID map[string]*message
	h    byVisible
	seq  uint64
}

type message struct {
	id, text, receipt         string
	inserted, expires, hidden time.Time
	// hiddenFor is the visibility timeout hidden was last set with.
	hiddenFor time.Duration
	dequeues  int64
	seq       uint64
	at        int // index in the heap
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
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}

func newQueue(meta map[string]string) *queue { return &queue{meta: meta, byID: map[string]*message{}} }

func (q *queue) remove(m *message) {
	heap.Remove(&q.h, m.at)
	delete(q.byID, m.id)
}

// visible returns the first visible message that has not expired
// (dropping expired ones on the way), or nil.
func (q *queue) visible(now time.Time) *message {
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

// QueueLen returns how many messages queue name holds (hidden ones and
// expired ones not yet dropped included), or -1 when there is no such
// queue.
func (s *Server) QueueLen(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return -1
	}
	return len(q.byID)
}

// HiddenLong returns the latest time a message of any queue that is
// hidden at now, its visibility last set for span or longer (a pause
// hold, a long backoff), becomes visible again, and whether there is
// such a message.
func (s *Server) HiddenLong(now time.Time, span time.Duration) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last time.Time
	for _, q := range s.queues {
		for _, m := range q.byID {
			if m.hidden.After(now) && m.expires.After(now) && m.hiddenFor >= span && m.hidden.After(last) {
				last = m.hidden
			}
		}
	}
	return last, !last.IsZero()
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// queue serves one Queue service request; the caller holds s.mu.
func (s *Server) queue(r *request) (string, *reply, error) {
	// Path (after the account): [{queue}[/messages[/{id}]]]
	parts := strings.Split(r.path, "/")
	comp := r.q("comp")
	switch {
	case r.path == "":
		if comp == "list" && r.method == http.MethodGet {
			rep, err := s.listQueues(r)
			return "ListQueues", rep, err
		}
	case len(parts) == 1:
		return s.queueOp(r, parts[0])
	case len(parts) == 2 && parts[1] == "messages":
		return s.messagesOp(r, parts[0])
	case len(parts) == 3 && parts[1] == "messages":
		return s.messageOp(r, parts[0], parts[2])
	}
	return "", nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s %s is not an operation memstore serves", r.method, r.path)
}

func (s *Server) listQueues(r *request) (*reply, error) {
	max, err := maxResults(r)
	if err != nil {
		return nil, err
	}
	prefix, marker := r.q("prefix"), r.q("marker")
	var names []string
	for n := range s.queues {
		if strings.HasPrefix(n, prefix) && n >= marker {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	next := ""
	if len(names) > max {
		next, names = names[max], names[:max]
	}
	withMeta := includes(r, "metadata")
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="` + xmlEscape(endpoint(r)) + `">`)
	listHead(&b, r)
	b.WriteString("<Queues>")
	for _, n := range names {
		b.WriteString("<Queue><Name>" + xmlEscape(n) + "</Name>")
		if withMeta {
			writeMetadata(&b, s.queues[n].meta)
		}
		b.WriteString("</Queue>")
	}
	b.WriteString("</Queues><NextMarker>" + xmlEscape(next) + "</NextMarker></EnumerationResults>")
	return xmlReply(b.String()), nil
}

func errQueueNotFound() error {
	return fail(http.StatusNotFound, "QueueNotFound", "The specified queue does not exist.")
}

func (s *Server) queueOp(r *request, name string) (string, *reply, error) {
	q := s.queues[name]
	comp := r.q("comp")
	switch {
	case r.method == http.MethodPut && comp == "":
		if !validName(name) {
			return "CreateQueue", nil, fail(http.StatusBadRequest, "InvalidResourceName", "The specified resource name contains invalid characters.")
		}
		meta := metadata(r.header)
		if q != nil {
			if !maps.Equal(q.meta, meta) {
				return "CreateQueue", nil, fail(http.StatusConflict, "QueueAlreadyExists", "The specified queue already exists.")
			}
			return "CreateQueue", newReply(http.StatusNoContent), nil
		}
		s.queues[name] = newQueue(meta)
		return "CreateQueue", newReply(http.StatusCreated), nil
	case r.method == http.MethodDelete && comp == "":
		if q == nil {
			return "DeleteQueue", nil, errQueueNotFound()
		}
		delete(s.queues, name)
		return "DeleteQueue", newReply(http.StatusNoContent), nil
	case (r.method == http.MethodGet || r.method == http.MethodHead) && (comp == "metadata" || comp == ""):
		if q == nil {
			return "GetQueueMetadata", nil, errQueueNotFound()
		}
		rep := newReply(http.StatusOK)
		rep.header.Set("X-Ms-Approximate-Messages-Count", strconv.Itoa(len(q.byID)))
		setMetadata(rep.header, q.meta)
		return "GetQueueMetadata", rep, nil
	case r.method == http.MethodPut && comp == "metadata":
		if q == nil {
			return "SetQueueMetadata", nil, errQueueNotFound()
		}
		q.meta = metadata(r.header)
		return "SetQueueMetadata", newReply(http.StatusNoContent), nil
	}
	return "", nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s on a queue is not an operation memstore serves", r.method)
}

// intParam reads query value key (seconds, or a number of messages) as a
// whole number within [lo, hi], def when absent.
func intParam(r *request, key string, def, lo, hi int) (int, error) {
	v := r.q(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "%s=%q: want a whole number from %d to %d", key, v, lo, hi)
	}
	return n, nil
}

// appendMessage appends m as a QueueMessage element: as a get returns it
// (receipt true: with its pop receipt and next visibility), or a peek;
// text false leaves out the dequeue count and text (a put's answer).
func appendMessage(b []byte, m *message, receipt, text bool) []byte {
	b = append(b, "<QueueMessage><MessageId>"...)
	b = append(b, m.id...)
	b = append(b, "</MessageId><InsertionTime>"...)
	b = append(b, rfc1123(m.inserted)...)
	b = append(b, "</InsertionTime><ExpirationTime>"...)
	b = append(b, rfc1123(m.expires)...)
	b = append(b, "</ExpirationTime>"...)
	if receipt {
		b = append(b, "<PopReceipt>"...)
		b = append(b, m.receipt...)
		b = append(b, "</PopReceipt><TimeNextVisible>"...)
		b = append(b, rfc1123(m.hidden)...)
		b = append(b, "</TimeNextVisible>"...)
	}
	if text {
		b = append(b, "<DequeueCount>"...)
		b = strconv.AppendInt(b, m.dequeues, 10)
		b = append(b, "</DequeueCount><MessageText>"...)
		b = appendXMLText(b, m.text)
		b = append(b, "</MessageText>"...)
	}
	return append(b, "</QueueMessage>"...)
}

const listHeader = `<?xml version="1.0" encoding="utf-8"?>` + "\n<QueueMessagesList>"

func messagesReply(status int, b []byte) *reply {
	rep := newReply(status)
	rep.header.Set("Content-Type", "application/xml")
	rep.body = append(b, "</QueueMessagesList>"...)
	return rep
}

// readText reads a <QueueMessage><MessageText> body; has is false when
// the body is empty.
func readText(r *request) (text string, has bool, err error) {
	body := strings.TrimSpace(string(r.body))
	if body == "" {
		return "", false, nil
	}
	text, ok := messageText(body)
	if !ok {
		var in struct {
			MessageText string `xml:"MessageText"`
		}
		if err := xml.Unmarshal(r.body, &in); err != nil {
			return "", false, fail(http.StatusBadRequest, "InvalidXmlDocument", "XML specified is not syntactically valid: %v", err)
		}
		text = in.MessageText
	}
	if len(text) > MaxMessageBytes {
		return "", false, fail(http.StatusRequestEntityTooLarge, "RequestBodyTooLarge", "The request body is too large and exceeds the maximum permissible limit (message text of %d bytes: at most %d).", len(text), MaxMessageBytes)
	}
	return text, true, nil
}

// messageText reads the text of the plain form the SDK sends,
// <QueueMessage><MessageText>…</MessageText></QueueMessage> with the
// character references encoding/xml writes, without an XML decoder; ok
// is false for anything else (then the decoder reads it).
func messageText(body string) (string, bool) {
	body = strings.TrimPrefix(body, xml.Header)
	body = strings.TrimPrefix(body, `<?xml version="1.0" encoding="utf-8"?>`)
	inner, ok := strings.CutPrefix(strings.TrimSpace(body), "<QueueMessage><MessageText>")
	if !ok {
		return "", false
	}
	inner, ok = strings.CutSuffix(inner, "</MessageText></QueueMessage>")
	if !ok || strings.ContainsAny(inner, "<>") {
		return "", false
	}
	if !strings.Contains(inner, "&") {
		return inner, true
	}
	var b strings.Builder
	for inner != "" {
		i := strings.IndexByte(inner, '&')
		if i < 0 {
			b.WriteString(inner)
			break
		}
		b.WriteString(inner[:i])
		j := strings.IndexByte(inner[i:], ';')
		if j < 0 {
			return "", false
		}
		ref := inner[i+1 : i+j]
		inner = inner[i+j+1:]
		switch ref {
		case "amp":
			b.WriteByte('&')
		case "lt":
			b.WriteByte('<')
		case "gt":
			b.WriteByte('>')
		case "quot":
			b.WriteByte('"')
		case "apos":
			b.WriteByte('\'')
		default:
			var n uint64
			var err error
			switch {
			case strings.HasPrefix(ref, "#x"):
				n, err = strconv.ParseUint(ref[2:], 16, 32)
			case strings.HasPrefix(ref, "#"):
				n, err = strconv.ParseUint(ref[1:], 10, 32)
			default:
				return "", false
			}
			if err != nil {
				return "", false
			}
			b.WriteRune(rune(n))
		}
	}
	return b.String(), true
}

// appendXMLText appends s escaped as XML character data.
func appendXMLText(b []byte, s string) []byte {
	if !strings.ContainsAny(s, "&<>\"'\t\n\r") {
		return append(b, s...)
	}
	return append(b, xmlEscape(s)...)
}

func (s *Server) messagesOp(r *request, name string) (string, *reply, error) {
	switch r.method {
	case http.MethodPost:
		rep, err := s.putMessage(r, name)
		return "PutMessage", rep, err
	case http.MethodGet:
		if r.q("peekonly") == "true" {
			n, err := intParam(r, "numofmessages", 1, 1, 32)
			if err != nil {
				return "PeekMessages", nil, err
			}
			rep, err := s.takeMessages(r, name, n, 0, true)
			return "PeekMessages", rep, err
		}
		n, err := intParam(r, "numofmessages", 1, 1, 32)
		if err != nil {
			return "GetMessages", nil, err
		}
		vis, err := intParam(r, "visibilitytimeout", 30, 1, week)
		if err != nil {
			return "GetMessages", nil, err
		}
		rep, err := s.takeMessages(r, name, n, time.Duration(vis)*time.Second, false)
		return "GetMessages", rep, err
	case http.MethodDelete:
		q := s.queues[name]
		if q == nil {
			return "ClearMessages", nil, errQueueNotFound()
		}
		q.byID, q.h = map[string]*message{}, nil
		return "ClearMessages", newReply(http.StatusNoContent), nil
	}
	return "", nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s on messages is not an operation memstore serves", r.method)
}

func (s *Server) putMessage(r *request, name string) (*reply, error) {
	vis, err := intParam(r, "visibilitytimeout", 0, 0, week)
	if err != nil {
		return nil, err
	}
	ttl, err := intParam(r, "messagettl", week, -1, 1<<31-1)
	if err != nil {
		return nil, err
	}
	if ttl == 0 {
		return nil, fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "messagettl=0: want -1 or a positive number of seconds")
	}
	if ttl > 0 && vis >= ttl {
		return nil, fail(http.StatusBadRequest, "OutOfRangeQueryParameterValue", "visibilitytimeout=%d must be less than messagettl=%d", vis, ttl)
	}
	text, _, err := readText(r)
	if err != nil {
		return nil, err
	}
	q := s.queues[name]
	if q == nil {
		return nil, errQueueNotFound()
	}
	now := r.now.Truncate(time.Second)
	hide := time.Duration(vis) * time.Second
	m := &message{id: idFrom(s.next()), text: text, receipt: token(s.next()), inserted: now, hidden: now.Add(hide), hiddenFor: hide, expires: never}
	if ttl > 0 {
		m.expires = now.Add(time.Duration(ttl) * time.Second)
	}
	q.seq++
	m.seq = q.seq
	q.byID[m.id] = m
	heap.Push(&q.h, m)
	return messagesReply(http.StatusCreated, appendMessage([]byte(listHeader), m, true, false)), nil
}

// takeMessages answers a get (hiding each message for vis, with a new
// receipt) or, when peek, a peek (changing nothing) of up to n visible
// messages.
func (s *Server) takeMessages(r *request, name string, n int, vis time.Duration, peek bool) (*reply, error) {
	q := s.queues[name]
	if q == nil {
		return nil, errQueueNotFound()
	}
	now := r.now
	out := []byte(listHeader)
	var taken []*message
	for len(taken) < n {
		m := q.visible(now)
		if m == nil {
			break
		}
		if peek {
			heap.Pop(&q.h) // out of the way of the next; pushed back below
		} else {
			m.hidden, m.hiddenFor = now.Add(vis), vis
			m.dequeues++
			m.receipt = token(s.next())
			heap.Fix(&q.h, m.at)
		}
		taken = append(taken, m)
		out = appendMessage(out, m, !peek, true)
	}
	if peek {
		for _, m := range taken {
			heap.Push(&q.h, m)
		}
	} else if len(taken) > 0 && s.dup != nil && s.dup(name, taken[0].text) {
		// At-least-once delivery: the first message stays visible.
		m := taken[0]
		m.hidden, m.hiddenFor = now, 0
		heap.Fix(&q.h, m.at)
	}
	return messagesReply(http.StatusOK, out), nil
}

// held returns the message id of queue name if receipt is its latest pop
// receipt.
func (s *Server) held(r *request, name, id string) (*queue, *message, error) {
	q := s.queues[name]
	if q == nil {
		return nil, nil, errQueueNotFound()
	}
	m := q.byID[id]
	if m == nil || !m.expires.After(r.now) {
		return nil, nil, fail(http.StatusNotFound, "MessageNotFound", "The specified message does not exist.")
	}
	if got := r.q("popreceipt"); got != m.receipt {
		return nil, nil, fail(http.StatusBadRequest, "PopReceiptMismatch", "The specified pop receipt did not match the pop receipt for a dequeued message.")
	}
	return q, m, nil
}

func (s *Server) messageOp(r *request, name, id string) (string, *reply, error) {
	switch r.method {
	case http.MethodDelete:
		q, m, err := s.held(r, name, id)
		if err != nil {
			return "DeleteMessage", nil, err
		}
		q.remove(m)
		return "DeleteMessage", newReply(http.StatusNoContent), nil
	case http.MethodPut:
		vis, err := intParam(r, "visibilitytimeout", -1, 0, week)
		if err != nil {
			return "UpdateMessage", nil, err
		}
		if vis < 0 {
			return "UpdateMessage", nil, fail(http.StatusBadRequest, "MissingRequiredQueryParameter", "A query parameter that's mandatory for this request is not specified: visibilitytimeout.")
		}
		text, has, err := readText(r)
		if err != nil {
			return "UpdateMessage", nil, err
		}
		q, m, err := s.held(r, name, id)
		if err != nil {
			return "UpdateMessage", nil, err
		}
		if has {
			m.text = text
		}
		m.receipt = token(s.next())
		hide := time.Duration(vis) * time.Second
		m.hidden, m.hiddenFor = r.now.Add(hide), hide
		heap.Fix(&q.h, m.at)
		rep := newReply(http.StatusNoContent)
		rep.header.Set("X-Ms-Popreceipt", m.receipt)
		rep.header.Set("X-Ms-Time-Next-Visible", rfc1123(m.hidden))
		return "UpdateMessage", rep, nil
	}
	return "", nil, fail(http.StatusBadRequest, "UnsupportedHttpVerb", "%s on a message is not an operation memstore serves", r.method)
}
