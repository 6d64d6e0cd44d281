package dashboard

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
)

// The task page links a task's parents, the tasks waiting for it and its
// batch; the batch page shows the counts and members and links the runs
// filtered by the batch, which the runs page applies.
func TestWorkflowPages(t *testing.T) {
	src, _, srv, cl := newTest(t, Options{})
	src.pending = append(src.pending,
		schedule.Item{ID: "child", Type: "mail", Due: t0, After: []string{"done-1", "parent"}, Met: []string{"done-1"}, Waiting: true, Batch: "b7"},
		schedule.Item{ID: "b7-done", Type: "notify", Due: t0, Batch: "b7", Callback: true, Waiting: true},
	)
	src.runs = append(src.runs,
		leasecrontype.Run{ID: "parent", State: leasecrontype.RunRunning, Type: "mail", Batch: "b7", Started: t0.Add(-time.Second)},
		leasecrontype.Run{ID: "m2", State: leasecrontype.RunDead, Type: "mail", Batch: "b7"},
	)
	resp, body := fetch(t, cl, "GET", srv.URL+"/tasks/child", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /tasks/child: %d", resp.StatusCode)
	}
	if strings.Contains(body, "/tasks/child/run-now") || !strings.Contains(body, `id="task-waits"`) {
		t.Errorf("a waiting task offers Run now, or does not say when it runs")
	}
	for _, want := range []string{`id="task-state">waiting`, `href="/tasks/done-1">done-1</a> <small class="muted">(done)`, `href="/tasks/parent">parent</a>`, `href="/batches/b7">b7</a>`} {
		if !strings.Contains(body, want) {
			t.Errorf("task page lacks %s", want)
		}
	}
	if _, body = fetch(t, cl, "GET", srv.URL+"/tasks/parent", nil, nil); !strings.Contains(body, `id="task-children"><a href="/tasks/child">child</a>`) {
		t.Errorf("the parent's page does not link the child")
	}
	resp, body = fetch(t, cl, "GET", srv.URL+"/batches/b7", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /batches/b7: %d %s", resp.StatusCode, body)
	}
	for _, want := range []string{"3 members", "0 succeeded, 1 dead, 0 cancelled, 2 pending", `href="/tasks/b7-done" id="batch-callback">b7-done</a>`, `href="/runs?batch=b7"`} {
		if want == "3 members" {
			want = "1 of 3 ended"
		}
		if !strings.Contains(body, want) {
			t.Errorf("batch page lacks %s", want)
		}
	}
	_, js := fetch(t, cl, "GET", srv.URL+"/api/batches/b7", nil, nil)
	if !strings.Contains(js, `"total": 3`) && !strings.Contains(js, `"total":3`) {
		t.Errorf("GET /api/batches/b7: %s", js)
	}
	_, body = fetch(t, cl, "GET", srv.URL+"/runs?batch=b7", nil, nil)
	if !strings.Contains(body, `data-id="parent"`) || !strings.Contains(body, `data-id="m2"`) || strings.Contains(body, `data-id="done-1"`) {
		t.Errorf("runs filtered by batch b7:\n%s", body)
	}
	for _, u := range []string{"/runs?batch=a%20b", "/batches/nope"} {
		if resp, _ := fetch(t, cl, "GET", srv.URL+u, nil, nil); resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 400 or 404", u, resp.StatusCode)
		}
	}
}
