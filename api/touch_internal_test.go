package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/leasecron/leasecron"
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
	if code, body := f.do(sch, http.MethodGet, "/api/v1/tasks/s1", ""); code != http.StatusOK || !strings.Contains(body, `"state":"disabled"`) {
		t.Errorf("s1 after the refused reschedule: %d %s; want it disabled still", code, body)
	}
	if code, body := f.do(op, http.MethodPost, "/api/v1/tasks/s1/reschedule", `{"in":"1m"}`); code != http.StatusOK {
		t.Errorf("an operator's reschedule of a disabled series: %d %s; want 200", code, body)
	}
}
