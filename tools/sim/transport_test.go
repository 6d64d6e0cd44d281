package sim

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
)

// A fault striking a request names the runs of the rows it touches, so
// that the checker can tell a start slowed by it: an occurrence's run row
// names the occurrence's run id (seed 4099: its slowed claim went
// unexcused). The keys are from a simulated run's trace.
func TestTaskOfRowNamesOccurrences(t *testing.T) {
	for rk, want := range map[string]string{
		"r~t74":                      "t74",
		"id~t74":                     "t74",
		"0639085497626883662_t74":    "t74",
		"o~s100~2516293478525844075": "s100@2026-03-08T06:55:47.4155924Z",
	} {
		if got, ok := taskOfRow(rk); !ok || got != want {
			t.Errorf("taskOfRow(%q) = %q, %v; want %q", rk, got, ok, want)
		}
	}
	if got, ok := taskOfRow("x~queued~2516293478525844075~t74"); ok {
		t.Errorf("a state list row named %q; want none (its run row is in the same transaction)", got)
	}
}

// The checker learns from each dequeue's answer which runs' messages it
// handed out (first dequeues, for the excuse of an occurrence that waited
// in the queue until a stop): the envelope's id read out of the answer as
// the in-memory service encodes it (an id XML and JSON escape too), the
// answer left readable.
func TestDequeuedRunsReadsTheEnvelopeIDs(t *testing.T) {
	store := memstore.New(memstore.Options{Now: time.Now})
	rt := store.Transport()
	do := func(method, path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, "http://queue.memstore/devstoreaccount1/"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode >= 300 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %s: %v %v %s", method, path, resp.StatusCode, err, b)
		}
		return resp
	}
	drain(do(http.MethodPut, "work", ""))
	for _, id := range []string{"s32@2026-03-08T06:51:29.2799658Z", `t"7<`} {
		env, _ := json.Marshal(queue.Envelope{ID: id, Type: "plain", Payload: `{"id":"not-this"}`})
		var text strings.Builder
		_ = xml.EscapeText(&text, env)
		drain(do(http.MethodPost, "work/messages", "<QueueMessage><MessageText>"+text.String()+"</MessageText></QueueMessage>"))
	}
	resp := do(http.MethodGet, "work/messages?numofmessages=32", "")
	got := dequeuedRuns(resp)
	if want := []string{"s32@2026-03-08T06:51:29.2799658Z", `t"7<`}; !slices.Equal(got, want) {
		t.Errorf("dequeuedRuns = %q; want %q (the envelopes' ids, not the payload's)", got, want)
	}
	body, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(body, []byte("<QueueMessage>")) {
		t.Errorf("the answer was not left readable: %q", body)
	}
}

// The checker learns from each send which version of a task a worker put
// on a queue, and when the pass that sent it began (seed 66219: a pass
// begun before a reschedule sent the old version after it): read out of
// the request as the service reads it, the request left readable for it.
func TestSentRunsReadsTheEnvelope(t *testing.T) {
	due := time.Date(2026, 3, 8, 6, 51, 29, 0, time.UTC)
	send := func(env queue.Envelope) string {
		b, _ := json.Marshal(env)
		var text strings.Builder
		_ = xml.EscapeText(&text, b)
		return xml.Header + "<QueueMessage><MessageText>" + text.String() + "</MessageText></QueueMessage>"
	}
	for _, tok := range []string{"", "tk1"} {
		body := send(queue.Envelope{ID: `t"7<`, Type: "plain", Due: due, Enqueued: due.Add(-time.Second), Token: tok})
		req, err := http.NewRequest(http.MethodPost, "http://queue.memstore/devstoreaccount1/work/messages", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got := sentRuns(req)
		want := []sentMsg{{id: `t"7<`, due: due, passBegan: due.Add(-time.Second), token: tok != ""}}
		if len(got) != 1 || got[0].id != want[0].id || !got[0].due.Equal(due) || !got[0].passBegan.Equal(want[0].passBegan) || got[0].token != want[0].token {
			t.Errorf("token %q: sentRuns = %+v; want %+v", tok, got, want)
		}
		if left, _ := io.ReadAll(req.Body); string(left) != body {
			t.Errorf("the request was not left readable: %q", left)
		}
	}
	// A run's end sent alone carries the envelope of the message that ran.
	end := send(queue.Envelope{ID: "t8", Type: "plain", Due: due, Enqueued: due, Ended: leasecrontype.RunSucceeded, EndOnly: true})
	req, err := http.NewRequest(http.MethodPost, "http://queue.memstore/devstoreaccount1/work/messages", strings.NewReader(end))
	if err != nil {
		t.Fatal(err)
	}
	if got := sentRuns(req); len(got) != 0 {
		t.Errorf("a run's end sent alone was taken for a send of its run: %+v", got)
	}
}

// A consumer's acknowledgement of a cancelled run reaches the checker
// through the process's logger, at any log level, with the task id given
// either to the logger (as the consumer does) or in the record.
func TestCancelledAcksReachTheChecker(t *testing.T) {
	w := &World{plan: &Scenario{}, logs: newRing(10)}
	w.chk = newChecker(w)
	log := slog.New(&ackWatch{h: slog.DiscardHandler, w: w})
	log.With("instance", "w1-1", "task_id", "s1@2026-03-08T06:51:29Z").Info(cancelledAck)
	log.Info(cancelledAck, "task_id", "t2")
	log.With("task_id", "t3").Info("task succeeded")
	for _, id := range []string{"s1@2026-03-08T06:51:29Z", "t2"} {
		if len(w.chk.cancelAcks[id]) != 1 {
			t.Errorf("acknowledgements of %s: %v; want one", id, w.chk.cancelAcks[id])
		}
	}
	if len(w.chk.cancelAcks) != 2 {
		t.Errorf("acknowledgements noted: %v; want only the two cancelled ones", w.chk.cancelAcks)
	}
}
