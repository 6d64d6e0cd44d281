package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// Nobody touches a task of leasecron's own types through the API: a
// scheduler's cancel of a bulk operation's task left the operation
// "running" with nothing to run it (a review's find). And a reschedule,
// which enables a disabled series, is refused to a caller who may not
// enable it (a scheduler re-enabled an operator's disable that way).
func TestTasksOfLeasecronsOwnAndDisabledSeriesAreNotTouchedAround(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	sch := f.token("sch", leasecron.RoleScheduler)
	for _, id := range []string{"c1", "c2"} {
		if code, body := f.do(sch, http.MethodPost, "/api/v1/tasks", `{"id":"`+id+`","type":"note","in":"1h"}`); code != http.StatusCreated {
			t.Fatalf("schedule %s: %d %s", id, code, body)
		}
	}
	code, body := f.do(op, http.MethodPost, "/api/v1/bulk", `{"kind":"cancel-pending","id_prefix":"c","expect":2}`)
	if code != http.StatusAccepted {
		t.Fatalf("bulk: %d %s", code, body)
	}
	var b struct{ ID string }
	if err := json.Unmarshal([]byte(body), &b); err != nil || b.ID == "" {
		t.Fatalf("bulk answer %s: %v", body, err)
	}
	for _, c := range []struct{ tok, path, body string }{
		{sch, "/cancel", ""}, {op, "/cancel", ""}, {sch, "/reschedule", `{"in":"1m"}`},
		{op, "/run-now", ""}, {op, "/disable", ""},
	} {
		if code, body := f.do(c.tok, http.MethodPost, "/api/v1/tasks/"+b.ID+c.path, c.body); code != http.StatusForbidden || !strings.Contains(body, "leasecron's own type") {
			t.Errorf("%s of the bulk operation's task: %d %s; want 403 naming leasecron's own type", c.path, code, body)
		}
	}
	if code, body := f.do(sch, http.MethodPut, "/api/v1/tasks/"+b.ID, `{"type":"note","in":"1h"}`); code != http.StatusForbidden {
		t.Errorf("a replace of the bulk operation's task: %d %s; want 403", code, body)
	}

	if code, body := f.do(sch, http.MethodPost, "/api/v1/tasks", `{"id":"s1","type":"note","every":"1h"}`); code != http.StatusCreated {
		t.Fatalf("schedule s1: %d %s", code, body)
	}
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks/s1/disable", ""); code != http.StatusOK {
		t.Fatalf("disable: %d %s", code, body)
	}
	if code, body := f.do(sch, http.MethodPost, "/api/v1/tasks/s1/reschedule", `{"in":"1m"}`); code != http.StatusForbidden || !strings.Contains(body, "operator") {
		t.Errorf("a scheduler's reschedule of a disabled series: %d %s; want 403 naming the role operator", code, body)
	}
	if code, body := f.do(sch, http.MethodPut, "/api/v1/tasks/s1", `{"type":"note","every":"2h"}`); code != http.StatusForbidden || !strings.Contains(body, "operator") {
		t.Errorf("a scheduler's replace of a disabled series: %d %s; want 403 naming the role operator", code, body)
	}
	if code, body := f.do(sch, http.MethodGet, "/api/v1/tasks/s1", ""); code != http.StatusOK || !strings.Contains(body, `"state":"disabled"`) {
		t.Errorf("s1 after the refused reschedule and replace: %d %s; want it disabled still", code, body)
	}
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks/s1/reschedule", `{"in":"1m"}`); code != http.StatusOK {
		t.Errorf("an operator's reschedule of a disabled series: %d %s; want 200", code, body)
	}
}

// A requeue of a dead unique task whose key another task took since is
// refused 409 unique-key-held naming the holder, as POST /tasks is, and
// the route's table (and so openapi.json) lists it (a review found the
// answer unlisted).
func TestARequeueOfADeadUniqueTaskWhoseKeyIsHeldNamesTheHolder(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	st := leasecron.Storage{ConnectionString: f.ms.ConnectionString(), Transport: f.ms.Transport()}
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, InstanceID: "solo",
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 200 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 200 * time.Millisecond, Concurrency: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("invoice", func(context.Context, leasecron.Task) error { return errors.New("boom") })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks", `{"id":"u1","type":"invoice","unique_key":"k","max_attempts":1}`); code != http.StatusCreated {
		t.Fatalf("u1: %d %s", code, body)
	}
	for {
		if s, err := f.c.Status(ctx, "u1"); err == nil && s.Run != nil && s.Run.State == leasecron.RunDead {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("u1 never died")
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks", `{"id":"u2","type":"invoice","unique_key":"k","in":"1h"}`); code != http.StatusCreated {
		t.Fatalf("u2 takes the key: %d %s", code, body)
	}
	code, body := f.do(op, http.MethodPost, "/api/v1/dead-letters/u1/requeue", "")
	if code != http.StatusConflict || !strings.Contains(body, "unique-key-held") || !strings.Contains(body, `"holder":"u2"`) {
		t.Errorf("requeue u1: %d %s; want 409 unique-key-held, holder u2", code, body)
	}
}

// A listing's bad filter or continue is refused 400 naming the parameter
// (a 20,000-character type was answered 500 internal, and a bad state or
// continue named no field: a review's finds).
func TestListingParametersAreNamedWhenRefused(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	long := strings.Repeat("a", 20000)
	for _, c := range []struct{ path, field string }{
		{"/api/v1/runs?type=" + long, "type"},
		{"/api/v1/runs?batch=" + long, "batch"},
		{"/api/v1/runs?series=a%23b", "series"},
		{"/api/v1/runs?state=bogus", "state"},
		{"/api/v1/runs?continue=garbage", "continue"},
		{"/api/v1/tasks?type=" + long, "type"},
		{"/api/v1/tasks?type=Report", "type"},
		{"/api/v1/tasks?continue=garbage", "continue"},
	} {
		code, body := f.do(op, http.MethodGet, c.path, "")
		var p Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || code != http.StatusBadRequest || p.Field != c.field || p.Accepted == "" {
			t.Errorf("GET %.60s: %d %.300s; want 400 naming %s with what it accepts", c.path, code, body, c.field)
		}
	}
}

// A limited token's dead-letter total does not depend on the page's
// limit: it is its types' count among the oldest, as health counts it (a
// review found limit=1 answering total 1 of 3).
func TestALimitedTokensDeadLetterTotalIsNotThePagesSize(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	f.deadLetters("invoice", "mail", "invoice", "invoice")
	lim := f.token("lim", leasecron.RoleViewer, "invoice")
	for _, c := range []struct{ limit, shown int }{{1, 1}, {2, 2}, {32, 3}} {
		code, body := f.do(lim, http.MethodGet, fmt.Sprintf("/api/v1/dead-letters?limit=%d", c.limit), "")
		var got DeadLetterList
		if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK {
			t.Fatalf("limit %d: %d %s", c.limit, code, body)
		}
		if got.Total != 3 || len(got.DeadLetters) != c.shown {
			t.Errorf("limit %d: total %d and %d dead letters; want total 3 and %d", c.limit, got.Total, len(got.DeadLetters), c.shown)
		}
		for _, d := range got.DeadLetters {
			if d.Type != "invoice" {
				t.Errorf("limit %d: shows a dead letter of %s", c.limit, d.Type)
			}
		}
	}
}

// A token limited to types searches by id prefix and sees its types'
// tasks alone (it was refused, told to give type=, which search does not
// take); a filter search without a type says how to give one.
func TestALimitedTokenSearchesByIDPrefix(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	sch := f.token("sch", leasecron.RoleScheduler)
	for _, spec := range []string{`{"id":"inv-1","type":"invoice","in":"1h"}`, `{"id":"inv-2","type":"mail","in":"1h"}`} {
		if code, body := f.do(sch, http.MethodPost, "/api/v1/tasks", spec); code != http.StatusCreated {
			t.Fatalf("schedule: %d %s", code, body)
		}
	}
	lim := f.token("lim", leasecron.RoleViewer, "invoice")
	code, body := f.do(lim, http.MethodGet, "/api/v1/search?q=inv-*", "")
	var got SearchResult
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK || len(got.Runs) != 1 || got.Runs[0].ID != "inv-1" {
		t.Errorf("a limited id-prefix search: %d %s; want inv-1 alone", code, body)
	}
	if code, body := f.do(lim, http.MethodGet, "/api/v1/search?q=state:scheduled", ""); code != http.StatusForbidden || !strings.Contains(body, "type:TYPE token in q") {
		t.Errorf("a limited search without a type: %d %s; want 403 saying to give a type: token", code, body)
	}
}

// A pause through the API names its caller, not the server's account, as
// a bulk operation does; its until in the past, and a path's malformed id
// or type, are refused naming the field (a review's finds).
func TestAPausesCallerAndPathValuesAreNamed(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	if code, body := f.do(op, http.MethodPost, "/api/v1/types/invoice/pause", `{"for":"1h"}`); code != http.StatusOK {
		t.Fatalf("pause: %d %s", code, body)
	}
	if code, body := f.do(op, http.MethodGet, "/api/v1/paused", ""); code != http.StatusOK || !strings.Contains(body, `"by":"token:op"`) {
		t.Errorf("paused: %d %s; want by token:op", code, body)
	}
	for _, c := range []struct{ method, path, body, field string }{
		{http.MethodPost, "/api/v1/types/invoice/pause", `{"until":"2020-01-01T00:00:00Z"}`, "until"},
		{http.MethodPost, "/api/v1/types/Invoice/pause", `{"for":"1h"}`, "type"},
		{http.MethodGet, "/api/v1/tasks/a%23b", "", "id"},
		{http.MethodGet, "/api/v1/tasks/" + strings.Repeat("x", 2000), "", "id"},
		{http.MethodPost, "/api/v1/dead-letters/a%5Cb/requeue", "", "id"},
	} {
		code, body := f.do(op, c.method, c.path, c.body)
		var p Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || code != http.StatusBadRequest || p.Field != c.field || p.Accepted == "" {
			t.Errorf("%s %.60s: %d %.300s; want 400 naming %s", c.method, c.path, code, body, c.field)
		}
	}
}

// A bulk operation's refused field is named, in the HTTP API as in a
// task spec (a review found kind and since refused naming no field).
func TestABulkOperationsRefusedFieldIsNamed(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	for _, c := range []struct{ body, field string }{
		{`{"kind":"cancel-everything","type":"invoice"}`, "kind"},
		{`{"kind":"requeue-dead","type":"invoice","since":"yesterday"}`, "since"},
		{`{"kind":"requeue-dead","type":"invoice","until":"soon"}`, "until"},
		{`{"kind":"requeue-dead","id_prefix":"inv-"}`, "id_prefix"},
		{`{"kind":"cancel-pending","type":"invoice","reason":"x"}`, "reason"},
		{`{"kind":"cancel-pending"}`, "type"},
		{`{"kind":"disable-series","type":"Invoice"}`, "type"},
		{`{"kind":"cancel-pending","queue":"p1"}`, "queue"},
		{`{"kind":"requeue-dead","since":"1h","until":"2h"}`, "since"},
	} {
		code, body := f.do(op, http.MethodPost, "/api/v1/bulk", c.body)
		var p Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil || code != http.StatusBadRequest || p.Field != c.field || p.Accepted == "" {
			t.Errorf("POST /bulk %s: %d %s; want 400 naming %s", c.body, code, body, c.field)
		}
	}
}

// An action that does not apply to the task names its id, saying which
// tasks it takes (a disable of a one-off task named no field).
func TestAnActionOnTheWrongKindOfTaskNamesTheID(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks", `{"id":"one","type":"note","in":"1h"}`); code != http.StatusCreated {
		t.Fatalf("schedule: %d %s", code, body)
	}
	code, body := f.do(op, http.MethodPost, "/api/v1/tasks/one/disable", "")
	var p Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || code != http.StatusBadRequest || p.Field != "id" || !strings.Contains(p.Accepted, "series") {
		t.Errorf("disable of a one-off task: %d %s; want 400 naming id, accepting a series", code, body)
	}
}

// A schedule-many's bad batch id is named, and unique tasks refused in a
// call with tasks that wait are named by id, not told they wait (a
// review found "unique tasks cannot be scheduled in a batch or wait for
// others" of a unique task that waits for nothing).
func TestAScheduleManysBatchAndUniqueRefusalsSayWhat(t *testing.T) {
	f := newFixture(t, leasecron.Names{})
	sch := f.token("sch", leasecron.RoleScheduler)
	code, body := f.do(sch, http.MethodPost, "/api/v1/tasks:many", `{"batch":"a b","tasks":[{"id":"m1","type":"note","in":"1h"}]}`)
	var p Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || code != http.StatusBadRequest || p.Field != "batch" {
		t.Errorf("batch \"a b\": %d %s; want 400 naming batch", code, body)
	}
	code, body = f.do(sch, http.MethodPost, "/api/v1/tasks:many", `{"tasks":[{"id":"r1","type":"note","in":"1h","unique_key":"k"},{"id":"r2","type":"note","in":"1h","after":["r1"]}]}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "unique tasks (r1)") || !strings.Contains(body, "tasks that wait for others") {
		t.Errorf("a unique task beside a waiting one: %d %s; want 400 naming r1 and the tasks that wait", code, body)
	}
}

// A task written by another program as a row without an id index (the
// table contract) is still cancelled through the API: the read before
// the action goes by the index alone, and leaves a miss to the action,
// which scans (a review found that read scanning the schedule on every
// miss, a second scan beside the action's own).
func TestACancelThroughTheAPIFindsARowWrittenWithoutAnIndex(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, leasecron.Names{})
	op := f.token("op", leasecron.RoleOperator)
	// A task scheduled the usual way makes the table.
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks", `{"id":"indexed","type":"note","in":"1h"}`); code != http.StatusCreated {
		t.Fatalf("schedule: %d %s", code, body)
	}
	svc, err := aztables.NewServiceClientFromConnectionString(f.ms.ConnectionString(), &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: f.ms.Transport()}})
	if err != nil {
		t.Fatal(err)
	}
	rk, err := schedule.RowKey(time.Now().Add(time.Hour), "byhand")
	if err != nil {
		t.Fatal(err)
	}
	row, _ := json.Marshal(map[string]any{"PartitionKey": "00", "RowKey": rk, "Message": "", "Type": "note"})
	if _, err := svc.NewClient(leasecron.Names{}.WithDefaults().ScheduleTable).AddEntity(ctx, row, nil); err != nil {
		t.Fatal(err)
	}
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks/byhand/cancel", ""); code != http.StatusOK || !strings.Contains(body, `"removed":true`) {
		t.Errorf("cancel of a row written without an index: %d %s; want it removed", code, body)
	}
}
