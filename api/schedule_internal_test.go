package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/leasecron/leasecron"
)

// faulty is a transport that, while armed, fails the table transactions
// ($batch) that write tasks: lost loses their answer (the write is made),
// otherwise they fail unsent (nothing is written). With lookups, reads of
// an id's index row fail too once a transaction has failed (the look-up
// after a write, not the one before it).
//
// With busy, what fails is answered 503 ServerBusy (as a throttling
// account answers, the SDK's retries spent) instead of a lost connection;
// with blobs, reads of payload blobs fail too once a transaction has
// failed.
type faulty struct {
	next    policy.Transporter
	armed   atomic.Bool
	lost    atomic.Bool
	lookups atomic.Bool
	busy    atomic.Bool
	blobs   atomic.Bool
	// skip is how many transactions pass, while armed, before they fail
	// (a replace's first try, an insert its task's row refuses).
	skip   atomic.Int32
	failed atomic.Bool // a transaction failed since arming
	// before, when set, sees every request first (while armed).
	before atomic.Pointer[func(*http.Request)]
}

func (f *faulty) arm(lost, lookups bool) {
	f.lost.Store(lost)
	f.lookups.Store(lookups)
	f.failed.Store(false)
	f.armed.Store(true)
}

func (f *faulty) disarm() {
	f.armed.Store(false)
	f.before.Store(nil)
	f.busy.Store(false)
	f.blobs.Store(false)
	f.skip.Store(0)
}

// onFirstLookUp has fn run once, unarmed, before the first read of the
// index row of id that follows a failed transaction: between a write and
// the look-up after it.
func (f *faulty) onFirstLookUp(id string, fn func()) {
	var once atomic.Bool
	hook := func(req *http.Request) {
		if f.failed.Load() && strings.Contains(req.URL.String(), "id~"+id) && once.CompareAndSwap(false, true) {
			f.armed.Store(false)
			fn()
			f.armed.Store(true)
		}
	}
	f.before.Store(&hook)
}

func (f *faulty) Do(req *http.Request) (*http.Response, error) {
	if b := f.before.Load(); b != nil && f.armed.Load() {
		(*b)(req)
	}
	batch := strings.HasSuffix(req.URL.Path, "$batch")
	lookup := f.failed.Load() && (f.lookups.Load() && strings.Contains(req.URL.String(), "id~") ||
		f.blobs.Load() && req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/payloads/"))
	if !f.armed.Load() || !batch && !lookup || batch && f.skip.Add(-1) >= 0 {
		return f.next.Do(req)
	}
	if batch {
		f.failed.Store(true)
	}
	if !f.lost.Load() && batch {
		return f.fail(req) // never sent
	}
	resp, err := f.next.Do(req)
	if err != nil {
		return resp, err
	}
	_ = resp.Body.Close()
	return f.fail(req)
}

// fail is the answer of a request that fails: a lost connection, or with
// busy 503 ServerBusy.
func (f *faulty) fail(req *http.Request) (*http.Response, error) {
	if !f.busy.Load() {
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	body := `{"odata.error":{"code":"ServerBusy","message":{"lang":"en-US","value":"The server is busy."}}}`
	return &http.Response{
		StatusCode: http.StatusServiceUnavailable, Status: "503 Server Busy", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json;odata=minimalmetadata"}, "X-Ms-Error-Code": {"ServerBusy"}},
		Body:   io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}, nil
}

// post sends a POST /api/v1/tasks of body and decodes the answer.
func (f *fixture) post(tok, body string) (int, map[string]any) {
	f.t.Helper()
	code, answer := f.do(tok, http.MethodPost, "/api/v1/tasks", body)
	var out map[string]any
	if err := json.Unmarshal([]byte(answer), &out); err != nil {
		f.t.Fatalf("POST %s: %d %s: not JSON: %v", body, code, answer, err)
	}
	return code, out
}

func taskID(answer map[string]any) string {
	task, _ := answer["task"].(map[string]any)
	id, _ := task["id"].(string)
	return id
}

// A POST with an id whose write storage did not answer (a lost
// connection: the write may have committed) is settled by a look-up, as
// one without an id is: found as the request describes it, 200 as a
// retried POST; surely not written, the fault's own 503 (safe to send
// again); unsettled, 500 outcome-unknown naming the id, which clients do
// not send again. Before, every such POST was a 503 that the clients
// sent again, and a task due now that the first write had scheduled, run
// by then, was scheduled a second time (a review's find).
func TestAPostWithAnIDWhoseWriteWentUnansweredIsSettled(t *testing.T) {
	f, tr, tok := faultyFixture(t)

	// Written, its answer lost: found, as the request describes it.
	for _, body := range []string{
		`{"id":"named","type":"resize","in":"1h"}`,
		`{"id":"now","type":"resize"}`,
		`{"id":"keyed","type":"resize","in":"1h","unique_key":"k1"}`,
	} {
		tr.arm(true, false)
		code, got := f.post(tok, body)
		tr.disarm()
		if code != http.StatusOK || taskID(got) == "" {
			t.Errorf("POST %s, its write's answer lost: %d %v; want 200 with the task found stored", body, code, got)
		}
	}
	// Without an id, the same (the server drew the id): 201.
	tr.arm(true, false)
	code, got := f.post(tok, `{"type":"resize","in":"1h"}`)
	tr.disarm()
	if code != http.StatusCreated || taskID(got) == "" {
		t.Errorf("POST without an id, its write's answer lost: %d %v; want 201 with the task found", code, got)
	}

	// Never written: 503, and sent again it is scheduled.
	tr.arm(false, false)
	code, got = f.post(tok, `{"id":"unsent","type":"resize","in":"1h"}`)
	tr.disarm()
	if code != http.StatusServiceUnavailable || got["type"] != ProblemPrefix+"unavailable" {
		t.Errorf("POST with an id whose write was never sent: %d %v; want 503 unavailable", code, got)
	}
	if code, got := f.post(tok, `{"id":"unsent","type":"resize","in":"1h"}`); code != http.StatusCreated {
		t.Errorf("the same POST again: %d %v; want 201", code, got)
	}

	// Written, and the look-up failing too: nobody can tell.
	tr.arm(true, true)
	code, got = f.post(tok, `{"id":"unknown","type":"resize","in":"1h"}`)
	tr.disarm()
	if code != http.StatusInternalServerError || got["type"] != ProblemPrefix+"outcome-unknown" || got["id"] != "unknown" || !strings.Contains(got["detail"].(string), "unknown") {
		t.Fatalf("POST with an id whose write and look-up went unanswered: %d %v; want 500 outcome-unknown naming the id", code, got)
	}
	if code, answer := f.do(tok, http.MethodGet, "/api/v1/tasks/unknown", ""); code != http.StatusOK {
		t.Errorf("GET the task the problem named: %d %s; want it found (the write was made)", code, answer)
	}
}

// The look-up after an unanswered write reads the run records too: an id
// whose earlier scheduling left a record of another due time, ended
// before the request began, and whose new write was never made, is
// surely not written (503, safe to send again); one whose task is gone
// with a record of the request's own due time was written and has moved
// on (here: cancelled at once), and is answered as found, not scheduled
// again. A different task found under the id is a conflict. (The
// server's clock runs two minutes ahead of the account's: the earlier
// task, cancelled just before, ended "more than a minute" before the
// request, past the clocks' slack; see TestARecordWrittenSinceTheRequestBeganSettlesNothing.)
func TestThePostLookUpReadsTheRunRecords(t *testing.T) {
	var tr *faulty
	f := newFixtureWith(t, leasecron.Names{}, func(next policy.Transporter) policy.Transporter {
		tr = &faulty{next: next}
		return tr
	}, Options{Clock: aheadClock{2 * time.Minute}})
	ctx := context.Background()
	tok := f.token("sch", leasecron.RoleScheduler)
	if code, got := f.post(tok, `{"id":"reused","type":"resize","in":"1h"}`); code != http.StatusCreated {
		t.Fatalf("a first POST: %d %v", code, got)
	}
	if _, err := f.c.Cancel(ctx, "reused"); err != nil {
		t.Fatal(err)
	}
	tr.arm(false, false)
	code, got := f.post(tok, `{"id":"reused","type":"resize","in":"2h"}`)
	tr.disarm()
	if code != http.StatusServiceUnavailable {
		t.Errorf("POST of a reused id whose write was never sent: %d %v; want 503 (the record is the earlier task's)", code, got)
	}

	// Written, its answer lost, and cancelled before the look-up.
	tr.arm(true, false)
	tr.onFirstLookUp("moved", func() {
		if _, err := f.c.Cancel(ctx, "moved"); err != nil {
			t.Errorf("cancel moved: %v", err)
		}
	})
	code, got = f.post(tok, `{"id":"moved","type":"resize","in":"1h"}`)
	tr.disarm()
	if code != http.StatusOK || taskID(got) != "moved" {
		t.Errorf("POST whose task was written and moved on before the look-up: %d %v; want 200 with the task", code, got)
	}

	// Written, its answer lost, and replaced by another task before the
	// look-up: the id holds a different task.
	tr.arm(true, false)
	tr.onFirstLookUp("replaced", func() {
		other := leasecron.Item{ID: "replaced", Type: "resize", Payload: "another", Due: time.Now().Add(3 * time.Hour)}
		if _, err := f.c.Schedule(ctx, other, &leasecron.ScheduleOptions{Replace: true}); err != nil {
			t.Errorf("replace: %v", err)
		}
	})
	code, got = f.post(tok, `{"id":"replaced","type":"resize","in":"1h"}`)
	tr.disarm()
	if code != http.StatusConflict || got["type"] != ProblemPrefix+"conflict" {
		t.Errorf("POST whose task was replaced by another before the look-up: %d %v; want 409 conflict", code, got)
	}
}

// A unique POST without an id whose write storage did not answer has no
// id to look up (the schedule draws it in its key's shard): 500
// outcome-unknown naming the key, not a 503 the clients send again (a
// review's find). Given an id, the same fault is settled by a look-up.
func TestAUniquePostWithoutAnIDWhoseWriteWentUnansweredIsOutcomeUnknown(t *testing.T) {
	f, tr, tok := faultyFixture(t)
	tr.arm(true, false)
	code, got := f.post(tok, `{"type":"resize","in":"1h","unique_key":"user-7"}`)
	tr.disarm()
	if code != http.StatusInternalServerError || got["type"] != ProblemPrefix+"outcome-unknown" || got["id"] != nil || !strings.Contains(got["detail"].(string), `"user-7"`) {
		t.Fatalf("a unique POST without an id, its write's answer lost: %d %v; want 500 outcome-unknown naming the key, without an id", code, got)
	}
	// Sent again, the key's guard names the task the first write made.
	if code, got := f.post(tok, `{"type":"resize","in":"1h","unique_key":"user-7"}`); code != http.StatusConflict || got["holder"] == "" {
		t.Errorf("the same POST again: %d %v; want 409 unique-key-held naming the task", code, got)
	}
}

// An identical retry of a POST whose due time the request fixes (at; a
// series' first occurrence, on a whole second) answers 200 with the task
// stored, as one with in does (docs/api.md). It answered 201: Schedule
// takes a row identical to the one it writes for its own, committed with
// its answer lost, and answers it as written; the server now looks first.
func TestARetriedPostWithAFixedDueAnswers200(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	tok := f.token("sch", leasecron.RoleScheduler)
	for _, body := range []string{
		`{"id":"fixed","type":"report","at":"2030-01-02T03:04:05Z"}`,
		`{"id":"fixed-unique","type":"report","at":"2030-01-02T03:04:05Z","unique_key":"r1"}`,
		`{"id":"daily","type":"report","cron":"0 9 * * *"}`,
		`{"id":"in","type":"report","in":"1h"}`,
	} {
		code, first := f.post(tok, body)
		if code != http.StatusCreated {
			t.Fatalf("POST %s: %d %v; want 201", body, code, first)
		}
		code, again := f.post(tok, body)
		if code != http.StatusOK || taskID(again) != taskID(first) {
			t.Errorf("POST %s again: %d %v; want 200 with the task stored", body, code, again)
		}
	}
	// A different body under the id is still a conflict.
	if code, got := f.post(tok, `{"id":"fixed","type":"report","at":"2030-01-02T03:04:06Z"}`); code != http.StatusConflict {
		t.Errorf("another due time under the id: %d %v; want 409", code, got)
	}
}

// A task spec the schedule refuses names the body's field at fault
// (field, accepted), for the checks of the library's validators and of
// the schedule itself (a parent's state, a unique window longer than the
// run records are kept), in POST, PUT and each task of schedule-many.
// Before, the library's refusals were 400 without a field (a review's
// find).
func TestTaskSpecRefusalsNameTheirField(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	tok := f.token("ops", leasecron.RoleOperator)
	if _, err := f.c.Schedule(context.Background(), leasecron.Item{ID: "p1", Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Schedule(context.Background(), leasecron.Item{ID: "series", Type: "t", Due: time.Now().Add(time.Hour), Recurrence: "@every 1h"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ body, field string }{
		{`{"id":"bad id","type":"t"}`, "id"},
		{`{"type":"Bad Type"}`, "type"},
		{`{"type":"t","at":"tomorrow"}`, "at"},
		{`{"type":"t","in":"-5m"}`, "in"},
		{`{"type":"t","at":"2030-01-01T00:00:00Z","cron":"61 * * * *"}`, "cron"},
		{`{"type":"t","at":"2030-01-01T00:00:00Z","every":"1ms"}`, "every"},
		{`{"type":"t","max_attempts":1001}`, "max_attempts"},
		{`{"type":"t","max_attempts":-1}`, "max_attempts"},
		{`{"type":"t","queue":"Billing"}`, "queue"},
		{`{"type":"t","queue":"poison"}`, "queue"},
		{`{"type":"t","priority":7}`, "priority"},
		{`{"type":"t","fair_key":"` + strings.Repeat("k", 300) + `"}`, "fair_key"},
		{`{"type":"t","payload":"` + strings.Repeat("x", 1<<20+1) + `"}`, "payload"},
		{`{"type":"t","unique_key":"a/b"}`, "unique_key"},
		{`{"type":"t","unique_key":"` + strings.Repeat("k", 201) + `"}`, "unique_key"},
		{`{"type":"t","unique_key":"k","unique_for":"9000h"}`, "unique_for"},
		{`{"type":"t","unique_key":"k","unique_for":"720h"}`, "unique_for"}, // beyond runs.retention (7 days)
		{`{"type":"t","unique_for":"1h"}`, "unique_for"},
		{`{"type":"t","after":["bad id"]}`, "after"},
		{`{"id":"self","type":"t","after":["self"]}`, "after"},
		{`{"type":"t","after":["nosuch"]}`, "after"},
		{`{"type":"t","after":["series"]}`, "after"},
		{`{"type":"t","every":"1h","after":["p1"]}`, "after"},
		{`{"type":"t","unique_key":"k","after":["p1"]}`, "after"},
		{`{"type":"t","after_any":true}`, "after_any"},
	} {
		code, got := f.post(tok, c.body)
		if code != http.StatusBadRequest || got["field"] != c.field || got["accepted"] == "" {
			t.Errorf("POST %.120s: %d field %v accepted %v (%v); want 400 naming %s", c.body, code, got["field"], got["accepted"], got["detail"], c.field)
		}
	}
	var p Problem
	code, answer := f.do(tok, http.MethodPut, "/api/v1/tasks/p1", `{"type":"t","in":"1h","unique_key":"k"}`)
	if code != http.StatusBadRequest || json.Unmarshal([]byte(answer), &p) != nil || p.Field != "unique_key" {
		t.Errorf("PUT with a unique key: %d %s; want 400 naming unique_key", code, answer)
	}
	code, answer = f.do(tok, http.MethodPost, "/api/v1/tasks:many", `{"tasks":[{"type":"t"},{"type":"t","max_attempts":5000}]}`)
	p = Problem{}
	if code != http.StatusUnprocessableEntity || json.Unmarshal([]byte(answer), &p) != nil || len(p.Errors) != 1 || p.Errors[0].Index != 1 || p.Errors[0].Field != "max_attempts" {
		t.Errorf("schedule-many with a task of too many attempts: %d %s; want 422 naming task 1's max_attempts", code, answer)
	}
}

// The library's SpecError from Schedule keeps ErrInvalidTask (errors.Is),
// so that callers branching on it see no change.
func TestScheduleSpecErrorsAreInvalidTasks(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	_, err := f.c.Schedule(context.Background(), leasecron.Item{ID: "c", Type: "t", Due: time.Now().Add(time.Hour), After: []string{"nosuch"}}, nil)
	var se *leasecron.SpecError
	if !errors.Is(err, leasecron.ErrInvalidTask) || !errors.As(err, &se) || se.Field != "after" {
		t.Fatalf("Schedule waiting for an unknown parent: %v; want a SpecError of after wrapping ErrInvalidTask", err)
	}
}
