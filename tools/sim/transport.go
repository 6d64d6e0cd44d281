package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// Fault is what the simulated service or network does to one request.
type Fault int

// The faults a request can meet.
const (
	// NoFault: the request is served.
	NoFault Fault = iota
	// Busy: the service answers 503 ServerBusy without doing anything.
	Busy
	// Dropped: the connection fails before the request reaches the service.
	Dropped
	// Lost: the service does what was asked, and the answer is lost (the
	// connection resets): the caller sees an error for a write that
	// committed.
	Lost
	// Failed500: the service does what was asked and answers 500
	// (OperationTimedOut), as Azure does when a request outlasts its
	// internal deadline after committing.
	Failed500
	// Slow: the request waits up to 15 s before it is served; a caller whose
	// deadline passes first gives up, and the request is not served.
	Slow
	faultCount
)

var faultNames = [...]string{"none", "503 busy", "dropped", "lost response", "500 after commit", "slow"}

func (f Fault) String() string { return faultNames[f] }

// Rates are the probabilities of each fault per request.
type Rates [faultCount]float64

// any reports whether a fault can strike.
func (r Rates) any() bool {
	for _, p := range r[1:] {
		if p > 0 {
			return true
		}
	}
	return false
}

// transporter is what memstore's in-process transport offers.
type transporter interface {
	Do(*http.Request) (*http.Response, error)
}

// faultTransport carries one process's requests to the in-memory service,
// applying the faults the plan gives it: it is how a process is killed
// (every request fails from then on, none arrives), paused (requests wait,
// and arrive when it resumes) and exposed to storage faults.
type faultTransport struct {
	w    *World
	p    *proc
	next transporter

	mu  sync.Mutex
	rng *rand.Rand
}

// errConnection is what a process sees when the network fails it.
var errConnection = errors.New("sim: connection reset by peer")

// errKilled is what the requests of a killed process fail with.
var errKilled = errors.New("sim: process killed")

func service(host string) string {
	switch {
	case strings.HasPrefix(host, "blob"):
		return "blob"
	case strings.HasPrefix(host, "queue"):
		return "queue"
	default:
		return "table"
	}
}

// Do implements policy.Transporter.
func (f *faultTransport) Do(req *http.Request) (resp *http.Response, err error) {
	p := f.p
	if p.killed() {
		return nil, errKilled
	}
	ctx := req.Context()
	if p.kind == "worker" && f.w.hold.armed() {
		if served := f.w.hold.commit(f.w, p, req); served != nil {
			defer func() { served(resp, err) }()
		}
	}
	if p.waitUnpaused(ctx) {
		// Sent as it was when the process stopped: the service serves it
		// though its sender has given up on it.
		req = req.WithContext(context.WithoutCancel(ctx))
		ctx = req.Context()
	}
	if p.killed() {
		return nil, errKilled
	}
	f.w.progress.Store(int64(f.w.elapsed()))
	svc := service(req.URL.Host)
	op := storage.OpName(svc, req)
	fault := f.draw(svc, op)
	if p.kind == "client" && svc == "table" && p.failRows.fail(req) {
		fault = Busy
	}
	f.w.stats.request(p.kind, svc+" "+op, fault)
	if fault != NoFault {
		f.w.chk.hit(p, svc, req.URL.Path, tasksNamed(svc, req))
	}
	switch fault {
	case Busy:
		return errorResponse(req, svc, http.StatusServiceUnavailable, "ServerBusy"), nil
	case Dropped:
		return nil, errConnection
	case Slow:
		f.mu.Lock()
		d := time.Duration(f.rng.Int64N(int64(15 * time.Second)))
		f.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		if p.killed() {
			return nil, errKilled
		}
	}
	var sends []sentMsg
	if svc == "queue" && p.kind == "worker" && req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/messages") {
		sends = sentRuns(req)
		for i := range sends {
			sends[i].proc = p.id
		}
	}
	resp, err = f.next.Do(req)
	if err != nil {
		return resp, err
	}
	if len(sends) > 0 && resp.StatusCode == http.StatusCreated {
		f.w.chk.sent(sends)
	}
	if svc == "queue" && req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/messages") &&
		!strings.Contains(req.URL.RawQuery, "peekonly") && resp.StatusCode == http.StatusOK {
		runs := dequeuedRuns(resp)
		f.w.chk.dequeued(runs)
		if fault == Lost || fault == Failed500 || p.killed() {
			// Its worker never hears of them (an answer lost, or a 500
			// after the service had served it): hidden until they
			// reappear.
			vis, _ := strconv.Atoi(req.URL.Query().Get("visibilitytimeout"))
			f.w.chk.unseen(runs, time.Duration(vis)*time.Second)
		}
	}
	if traceQueue != "" && svc == "queue" && strings.Contains(req.URL.Path, traceQueue) {
		f.w.traceQueueRequest(p, req, resp, fault)
	}
	switch {
	case fault == Lost:
		drain(resp)
		return nil, errConnection
	case fault == Failed500:
		drain(resp)
		return errorResponse(req, svc, http.StatusInternalServerError, "OperationTimedOut"), nil
	case p.killed():
		// Killed while the request was served: the answer never arrives.
		drain(resp)
		return nil, errKilled
	}
	return resp, nil
}

// draw picks the fault for one request of p from the plan in force now.
func (f *faultTransport) draw(svc, op string) Fault {
	r := f.w.plan.ratesAt(f.w.elapsed(), f.p.name, svc, op)
	if !r.any() {
		return NoFault
	}
	f.mu.Lock()
	x := f.rng.Float64()
	f.mu.Unlock()
	for k := Busy; k < faultCount; k++ {
		if x < r[k] {
			return k
		}
		x -= r[k]
	}
	return NoFault
}

func drain(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
}

// errorResponse is the service's answer to a request it did not carry out,
// in the form of the service's own errors (so that the SDK retries it as
// it would Azure's).
func errorResponse(req *http.Request, svc string, status int, code string) *http.Response {
	msg := fmt.Sprintf("simulated fault: %s", code)
	var body, ctype string
	if svc == "table" {
		ctype = "application/json;odata=minimalmetadata"
		body = fmt.Sprintf(`{"odata.error":{"code":%q,"message":{"lang":"en-US","value":%q}}}`, code, msg)
	} else {
		ctype = "application/xml"
		body = fmt.Sprintf(`<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>%s</Message></Error>`, code, msg)
	}
	h := http.Header{}
	h.Set("Content-Type", ctype)
	h.Set("x-ms-error-code", code)
	return &http.Response{
		Status: fmt.Sprintf("%d %s", status, http.StatusText(status)), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// commitHold is the adversary of the fence: armed, it freezes the next
// worker that sends a mover's commit (a transaction that writes a shard's
// fence row), with that request in hand, until another worker sends a
// commit to the same shard — by then its lease has passed and the other
// worker has taken the shard's fence — or for at most the freeze's
// length. The held commit is then served first: a deposed mover's late
// write, which the fence must refuse.
type commitHold struct {
	mu    sync.Mutex
	max   time.Duration // armed: freeze the next commit for at most this
	held  *proc
	shard string
	sent  chan struct{} // closed once the held commit was served
}

func (h *commitHold) arm(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.max = d
	}
}

func (h *commitHold) armed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max > 0 || h.held != nil
}

// rowFailer fails a client's schedule-many after rows of it were
// written (Op.FailAt): armed with n and the file's task ids, the n-th
// transaction inserting task rows of those ids into the schedule table
// answers 503 on every try (the SDK's retries, which send the same body,
// among them) until it is disarmed. The others, index rows'
// transactions, the roll-back's deletes and other operations' requests
// go through. (A file writes its chunks several at a time, and the first
// to fail cancels those under way; the failed one answers only after the
// SDK's retries, by when the first chunk was served, unless faults
// slowed it.)
type rowFailer struct {
	mu     sync.Mutex
	n      int // 0: disarmed
	ids    []string
	bodies []string // the transactions of the file's task rows, in order
}

func (r *rowFailer) arm(n int, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n, r.ids, r.bodies = n, ids, nil
}

// fail reports whether req is to answer 503.
func (r *rowFailer) fail(req *http.Request) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "$batch") {
		return false
	}
	body := bodyText(req)
	if !strings.Contains(body, "POST ") || strings.Contains(body, "DELETE ") || strings.Contains(body, "MERGE ") ||
		strings.Contains(body, "PATCH ") || strings.Contains(body, schedule.IndexPrefix) || !strings.Contains(body, "/"+scheduleTable) ||
		!slices.ContainsFunc(r.ids, func(id string) bool { return strings.Contains(body, `"`+schedule.PropID+`":"`+id+`"`) }) {
		return false
	}
	k := slices.Index(r.bodies, body)
	if k < 0 {
		r.bodies = append(r.bodies, body)
		k = len(r.bodies) - 1
	}
	return k == r.n-1
}

// fenceShardRE finds the shard of a transaction's fence row.
var fenceShardRE = regexp.MustCompile(`PartitionKey='([^']*)',RowKey='` + regexp.QuoteMeta(fenceRow) + `'`)

// commit is called before p's request req goes out. When req is the
// commit to hold, it freezes p and returns what to call once the request
// was served; when it is another worker's commit to the held shard, it
// lets the held one go out and waits until it was served.
func (h *commitHold) commit(w *World, p *proc, req *http.Request) (served func(*http.Response, error)) {
	if !strings.HasSuffix(req.URL.Path, "$batch") {
		return nil
	}
	m := fenceShardRE.FindStringSubmatch(bodyText(req))
	if m == nil {
		return nil
	}
	h.mu.Lock()
	switch {
	case h.held == nil && h.max > 0:
		d := h.max
		h.held, h.shard, h.sent, h.max = p, m[1], make(chan struct{}), 0
		h.mu.Unlock()
		w.chk.note(p, "frozen")
		w.logs.add(fmt.Sprintf("%s  %s frozen with its commit to shard %s in hand", w.elapsed().Truncate(time.Millisecond), p.id, m[1]))
		p.freeze(d)
		return func(resp *http.Response, err error) {
			answer := fmt.Sprint(err)
			if resp != nil {
				answer = resp.Status
			}
			w.logs.add(fmt.Sprintf("%s  %s's held commit to shard %s answered: %s", w.elapsed().Truncate(time.Millisecond), p.id, m[1], answer))
			h.mu.Lock()
			defer h.mu.Unlock()
			close(h.sent)
			h.held = nil
		}
	case h.held != nil && h.held != p && h.shard == m[1]:
		held, sent := h.held, h.sent
		h.mu.Unlock()
		w.logs.add(fmt.Sprintf("%s  %s commits to shard %s: %s's commit goes first", w.elapsed().Truncate(time.Millisecond), p.id, m[1], held.id))
		held.thaw()
		select {
		case <-sent:
		case <-time.After(time.Minute): // (the held process's request is stuck elsewhere)
		}
		return nil
	}
	h.mu.Unlock()
	return nil
}

// rowKeyRE finds the rows a Table request names.
var rowKeyRE = regexp.MustCompile(`RowKey='([^']*)'`)

// schedRowRE is a schedule row's key: its due tick, then the task id.
var schedRowRE = regexp.MustCompile(`^[0-9]+_(.+)$`)

// occRowRE is an occurrence's run row key: o~{series}~{inverted due}.
var occRowRE = regexp.MustCompile(`^o~(.+)~([0-9]{19})$`)

// taskOfRow returns the task id a row key names: a run record ("r~id"),
// a task's schedule row ("{tick}_id") or its id index row ("id~id").
func taskOfRow(rk string) (string, bool) {
	if id, ok := strings.CutPrefix(rk, "r~"); ok {
		return id, true
	}
	if id, ok := strings.CutPrefix(rk, "id~"); ok {
		return id, true
	}
	if m := occRowRE.FindStringSubmatch(rk); m != nil {
		// An occurrence's run row, o~{series}~{inverted due}: its run id
		// (seed 4099: a claim of one slowed by a fault went unexcused).
		inv, _ := strconv.ParseInt(m[2], 10, 64)
		const maxTicks, unixEpochTicks = 3155378975999999999, 621355968000000000
		due := time.Unix(0, (maxTicks-inv-unixEpochTicks)*100).UTC()
		return runs.OccurrenceID(m[1], due), true
	}
	if m := schedRowRE.FindStringSubmatch(rk); m != nil {
		return m[1], true
	}
	return "", false
}

// bodyText is req's body, unescaped, read through GetBody (which leaves
// the body rewound as it found it); "" when it cannot be read again.
func bodyText(req *http.Request) string {
	if req.GetBody == nil {
		return ""
	}
	body, err := req.GetBody()
	if err != nil {
		return ""
	}
	b, _ := io.ReadAll(body)
	// The SDK's GetBody rewinds the request's own body and returns it:
	// rewind it again for the send.
	_, _ = req.GetBody()
	if t, err := url.PathUnescape(string(b)); err == nil {
		return t
	}
	return string(b)
}

// tasksNamed returns the ids of the tasks whose rows a Table request reads
// or writes (its run record, its schedule row: a claim, and the check of
// an early-sent message against its row): in its URL, or in the body of a
// transaction (read through GetBody, which leaves the body rewound as it
// found it).
func tasksNamed(svc string, req *http.Request) []string {
	if svc != "table" {
		return nil
	}
	text, _ := url.PathUnescape(req.URL.Path)
	if strings.HasSuffix(req.URL.Path, "$batch") {
		text += bodyText(req)
	}
	var ids []string
	for _, m := range rowKeyRE.FindAllStringSubmatch(text, -1) {
		if id, ok := taskOfRow(m[1]); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// dequeuedRuns returns the run ids (the envelopes' ids) of the messages
// a dequeue's answer holds, leaving the answer readable.
func dequeuedRuns(resp *http.Response) []string {
	body := peekBody(resp)
	if !bytes.Contains(body, []byte("<QueueMessage>")) {
		return nil
	}
	var list struct {
		Messages []struct {
			Text string `xml:"MessageText"`
		} `xml:"QueueMessage"`
	}
	if xml.Unmarshal(body, &list) != nil {
		return nil
	}
	var ids []string
	for _, m := range list.Messages {
		var env struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(m.Text), &env) == nil && env.ID != "" {
			ids = append(ids, env.ID)
		}
	}
	return ids
}

// sentRuns reads the envelope a worker's request puts on a queue (a
// traffic-cop pass's move, or a worker's message of its own), leaving the
// request's body readable.
func sentRuns(req *http.Request) []sentMsg {
	if req.Body == nil {
		return nil
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	var m struct {
		Text string `xml:"MessageText"`
	}
	if xml.Unmarshal(body, &m) != nil {
		return nil
	}
	var env queue.Envelope
	if json.Unmarshal([]byte(m.Text), &env) != nil || env.ID == "" || env.EndOnly {
		// (A run's end sent alone carries the envelope of the message
		// that ran, pass start and all: no pass sent anything.)
		return nil
	}
	shard, _, _ := strings.Cut(env.Row, "/")
	return []sentMsg{{id: env.ID, due: env.Due, passBegan: env.Enqueued, token: env.Token != "",
		series: env.Series != "", gen: env.Generation, shard: shard}}
}

// peekBody returns resp's body, leaving it readable for the caller.
func peekBody(resp *http.Response) []byte {
	if resp.Body == nil {
		return nil
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return body
}
