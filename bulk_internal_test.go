package leasecron

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/leasecron/leasecron/internal/runs"
)

// holdOnce is a transport that, while armed, holds the first request
// whose URL contains match until release is closed (held is closed when
// it is caught).
type holdOnce struct {
	next    policy.Transporter
	match   string
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *holdOnce) Do(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.String(), h.match) && h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
	}
	return h.next.Do(req)
}

// An attempt of a bulk operation that stalled while another attempt took
// the operation up and finished it stops at its next save instead of
// acting on what matches by then: a cancel-pending walk resumed after the
// operation had finished cancelled tasks scheduled since (issue 38, seed
// 17779, read by a review: the worker running the first attempt was
// frozen past its claim).
func TestAStalledBulkAttemptStopsWhenAnotherTookItOver(t *testing.T) {
	ctx := context.Background()
	h := &holdOnce{match: "ScheduledItems()", held: make(chan struct{}), release: make(chan struct{})}
	c := memClientThrough(t, func(next policy.Transporter) policy.Transporter { h.next = next; return h })
	due := time.Now().Add(time.Hour)
	for _, id := range []string{"old-1", "old-2"} {
		if _, err := c.Schedule(ctx, Item{ID: id, Type: "x", Due: due}, nil); err != nil {
			t.Fatal(err)
		}
	}
	op := BulkOp{Kind: BulkCancelPending, Filter: BulkFilter{Type: "x"}}
	b, err := c.StartBulk(ctx, op, 2, "tester")
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(map[string]string{"bulk": b.ID})
	attempt := func() error { return c.runBulk(ctx, Task{ID: b.ID, Type: BulkType, Payload: payload}) }

	// The first attempt stalls at its listing of the pending tasks.
	h.armed.Store(true)
	stalled := make(chan error, 1)
	go func() { stalled <- attempt() }()
	<-h.held
	// Another takes the operation up and finishes it.
	if err := attempt(); err != nil {
		t.Fatalf("the second attempt: %v", err)
	}
	if got, err := c.Bulk(ctx, b.ID); err != nil || got.State != runs.BulkSucceeded || got.Done != 2 {
		t.Fatalf("after the second attempt: %+v, %v; want succeeded with 2 done", got, err)
	}
	if _, err := c.Schedule(ctx, Item{ID: "new", Type: "x", Due: due}, nil); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	if err := <-stalled; !errors.Is(err, runs.ErrBulkChanged) {
		t.Errorf("the stalled attempt: %v; want an error wrapping runs.ErrBulkChanged", err)
	}
	if it, err := c.Get(ctx, "new"); err != nil || it.ID != "new" {
		t.Errorf("the task scheduled after the operation finished: %+v, %v; want it still pending", it, err)
	}
	if got, err := c.Bulk(ctx, b.ID); err != nil || got.State != runs.BulkSucceeded || got.Done != 2 {
		t.Errorf("after the stalled attempt ended: %+v, %v; want succeeded with 2 done", got, err)
	}
}

// A bulk operation started with an id of the caller's is safe to start
// again: the second start finds the first's operation, starts nothing,
// and says so (ErrBulkExists, also ErrAlreadyScheduled). An id that is
// not "bulk-" and a word is refused, naming the field.
func TestStartBulkAsIsSafeToSendAgain(t *testing.T) {
	ctx := context.Background()
	c := memClient(t)
	op := BulkOp{Kind: BulkCancelPending, Filter: BulkFilter{Type: "t"}}
	b, err := c.StartBulkAs(ctx, "bulk-0b1c", op, 0, "tester")
	if err != nil || b.ID != "bulk-0b1c" || b.State != runs.BulkRunning {
		t.Fatalf("StartBulkAs = %+v, %v", b, err)
	}
	if _, err := c.StartBulkAs(ctx, "bulk-0b1c", op, 0, "tester"); !errors.Is(err, ErrBulkExists) || !errors.Is(err, ErrAlreadyScheduled) {
		t.Fatalf("a second start of the id: %v; want ErrBulkExists", err)
	}
	if all, err := c.Bulks(ctx); err != nil || len(all) != 1 {
		t.Fatalf("operations %+v, %v; want the one", all, err)
	}
	for _, id := range []string{"", "0b1c", "bulk-", "bulk-a/b", "bulk-" + strings.Repeat("x", 96)} {
		var spec *SpecError
		if _, err := c.StartBulkAs(ctx, id, op, 0, ""); !errors.As(err, &spec) || spec.Field != "id" || !errors.Is(err, ErrInvalidTask) {
			t.Errorf("StartBulkAs(%q): %v; want a SpecError of field id", id, err)
		}
	}
}

// A start whose operation was recorded and whose task was scheduled
// answers success even when reading the operation back is refused: an
// error would have its caller start it again (a review of the HTTP
// API's bulk route). A start whose record cannot be written leaves no
// operation running with nothing to run it.
func TestAStartedBulkOperationIsNotReportedAsFailed(t *testing.T) {
	ctx := context.Background()
	c, tr := memClientFailing(t, "RowKey='bulk-readback'")
	if _, err := c.Bulks(ctx); err != nil { // (the table made)
		t.Fatal(err)
	}
	tr.armed.Store(true)
	op := BulkOp{Kind: BulkCancelPending, Filter: BulkFilter{Type: "t"}}
	b, err := c.StartBulkAs(ctx, "bulk-readback", op, 0, "tester")
	if err != nil || b.ID != "bulk-readback" || b.State != runs.BulkRunning || tr.failed.Load() == 0 {
		t.Fatalf("StartBulkAs with its read back refused %d times = %+v, %v; want the operation, running", tr.failed.Load(), b, err)
	}
	tr.armed.Store(false)
	if got, err := c.Bulk(ctx, "bulk-readback"); err != nil || got.State != runs.BulkRunning {
		t.Fatalf("Bulk = %+v, %v", got, err)
	}
}

// lostInsert forwards every insert (a POST) whose body contains match and
// answers it with a dropped connection, as it does every point read of a
// bulk operation: the write commits, and its caller cannot tell.
type lostInsert struct {
	next  policy.Transporter
	match string
	armed atomic.Bool
}

func (l *lostInsert) Do(req *http.Request) (*http.Response, error) {
	if !l.armed.Load() {
		return l.next.Do(req)
	}
	if req.Method == http.MethodGet && strings.Contains(req.URL.String(), "RowKey='bulk-") {
		return nil, errors.New("connection reset by peer")
	}
	if req.Method == http.MethodPost && req.Body != nil {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(l.match)) {
			resp, err := l.next.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return nil, errors.New("connection reset by peer")
		}
	}
	return l.next.Do(req)
}

// lostInsertClient is a client over an in-memory account whose inserts of
// cancel-pending operations commit unanswered while the transport is
// armed, its tables made.
func lostInsertClient(t *testing.T) (*Client, *lostInsert) {
	t.Helper()
	var tr *lostInsert
	c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
		tr = &lostInsert{next: next, match: string(BulkCancelPending)}
		return tr
	})
	if _, err := c.Bulks(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, tr
}

// A start whose record was written though every answer was lost is marked
// failed, not left running with no task to run it.
func TestABulkStartWhoseRecordWentUnansweredIsNotLeftRunning(t *testing.T) {
	ctx := context.Background()
	c, tr := lostInsertClient(t)
	tr.armed.Store(true)
	if _, err := c.StartBulk(ctx, BulkOp{Kind: BulkCancelPending, Filter: BulkFilter{Type: "t"}}, 0, "tester"); err == nil {
		t.Fatal("StartBulk answered success though its record's every answer was lost")
	}
	tr.armed.Store(false)
	all, err := c.Bulks(ctx)
	if err != nil || len(all) != 1 || all[0].State != runs.BulkFailed || !strings.Contains(all[0].LastError, "recording it failed") {
		t.Fatalf("operations %+v, %v; want the one, failed for its record", all, err)
	}
}

// With a caller's id, a start whose record went unanswered is not marked
// failed (the row may be another send's running operation) but has its
// task scheduled all the same, so that a row that stands is run; a task
// with no row ends at once, and a resend that finds the task pending
// takes it for its own.
func TestACallersBulkStartLeavesItsTaskWhateverItsRecordAnswered(t *testing.T) {
	ctx := context.Background()
	c, tr := lostInsertClient(t)
	op := BulkOp{Kind: BulkCancelPending, Filter: BulkFilter{Type: "t"}}
	tr.armed.Store(true)
	if _, err := c.StartBulkAs(ctx, "bulk-unanswered", op, 0, "tester"); err == nil {
		t.Fatal("StartBulkAs answered success though its record's every answer was lost")
	}
	tr.armed.Store(false)
	if b, err := c.Bulk(ctx, "bulk-unanswered"); err != nil || b.State != BulkRunning {
		t.Fatalf("the operation %+v, %v; want it running, as written", b, err)
	}
	if st, err := c.Status(ctx, "bulk-unanswered"); err != nil || st.Pending == nil || st.Pending.Type != BulkType {
		t.Fatalf("its task: %+v, %v; want it pending", st, err)
	}
	if _, err := c.StartBulkAs(ctx, "bulk-unanswered", op, 0, "tester"); !errors.Is(err, ErrBulkExists) {
		t.Fatalf("the resend: %v; want ErrBulkExists", err)
	}

	// A task whose record was never written ends at once; a start of its
	// id then writes the record and takes the pending task for its own.
	if err := c.runBulk(ctx, Task{ID: "bulk-orphan", Type: BulkType, Payload: []byte(`{"bulk":"bulk-orphan"}`)}); err != nil {
		t.Fatalf("a task with no record: %v; want nil, nothing to run", err)
	}
	if err := c.scheduleBulkTask(ctx, "bulk-orphan", time.Now()); err != nil {
		t.Fatal(err)
	}
	if b, err := c.StartBulkAs(ctx, "bulk-orphan", op, 0, "tester"); err != nil || b.State != BulkRunning {
		t.Fatalf("a start beside its pending task: %+v, %v; want it running", b, err)
	}
}

// A start whose task's schedule answered an error marks its operation
// failed only while no attempt has taken it up: a task written after
// all, already walking, is left to run, and the start reports it started
// (a review's find: marked failed unread, the walk stopped part way).
func TestAFailedScheduleFailsOnlyAnOperationNotTakenUp(t *testing.T) {
	ctx := context.Background()
	c := memClient(t)
	op := BulkOp{Kind: BulkCancelPending, Filter: BulkFilter{Type: "t"}}
	for _, id := range []string{"bulk-idle", "bulk-walking"} {
		if _, err := c.StartBulkAs(ctx, id, op, 0, "tester"); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.runs.GetBulk(ctx, "bulk-walking")
	if err != nil {
		t.Fatal(err)
	}
	r.Attempts = 1 // a worker's first save
	if _, err := c.runs.SaveBulk(ctx, r); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if c.failUnstarted(ctx, "bulk-idle", "scheduling it failed: busy", now) {
		t.Error("an operation no attempt took up was reported started")
	}
	if !c.failUnstarted(ctx, "bulk-walking", "scheduling it failed: busy", now) {
		t.Error("an operation an attempt took up was not reported started")
	}
	for id, want := range map[string]string{"bulk-idle": BulkFailed, "bulk-walking": BulkRunning} {
		if b, err := c.Bulk(ctx, id); err != nil || b.State != want {
			t.Errorf("%s: %+v, %v; want %s", id, b, err, want)
		}
	}
}
