package e2e

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
)

// A task whose handler always fails is set aside after exactly
// retry.max_attempts attempts, with its reason; requeued once its handler
// can succeed, it runs again and succeeds.
func TestLifecycleDeadLetterAndRequeue(t *testing.T) {
	t.Parallel()
	// flaky fails while the marker file ok-$ID is missing next to the records.
	flaky := `d=$(dirname "$FLEET_RECORD"); if [ ! -e "$d/ok-$LEASECRON_TASK_ID" ]; then echo "marker file missing" >&2; exit 9; fi; ` + lcRecordScript
	f := startFleet(t, 2, map[string]any{
		"retry":    map[string]any{"max_attempts": 3, "backoff_base": "1s"},
		"handlers": map[string]any{"flaky": map[string]any{"exec": []string{"/bin/sh", "-c", flaky}}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	lcCLI(ctx, t, f, "schedule", "--id", "doomed", "--type", "fail", "p")
	lcCLI(ctx, t, f, "schedule", "--id", "flaky1", "--type", "flaky", "p")
	began := time.Now()
	for _, id := range []string{"doomed", "flaky1"} {
		t.Run(id, func(t *testing.T) {
			st := lcWaitStatus(ctx, t, f, id, 45*time.Second, "dead", func(s lcStatus) bool { return s.State == "dead" })
			if st.Run == nil || st.Run.Attempts != 3 {
				t.Fatalf("%s is dead after %+v attempts, want exactly 3 (retry.max_attempts)", id, st.Run)
			}
			t.Logf("%s dead after %d attempts (%s after scheduling); last error %q", id, st.Run.Attempts, time.Since(began).Round(100*time.Millisecond), st.Run.LastError)
		})
	}

	out := lcCLI(ctx, t, f, "deadletter", "list", "--json")
	var dls []queue.DeadLetter
	if err := json.Unmarshal([]byte(out), &dls); err != nil {
		t.Fatalf("deadletter list --json: %v\n%s", err, out)
	}
	byID := map[string]queue.DeadLetter{}
	for _, d := range dls {
		byID[d.RunID] = d
	}
	for id, why := range map[string]string{"doomed": "exit code 7; output: failing on purpose", "flaky1": "exit code 9; output: marker file missing"} {
		t.Run(fmt.Sprint(id), func(t *testing.T) {
			d, ok := byID[id]
			if !ok {
				t.Fatalf("%s is not in the dead letters: %s", id, out)
			}
			if d.Attempts != 3 || !strings.Contains(d.Reason, "failed 3 of 3 attempts") || !strings.Contains(d.Reason, why) {
				t.Errorf("dead letter %s: attempts %d, reason %q; want 3 attempts and a reason with %q", id, d.Attempts, d.Reason, why)
			}
		})
	}
	if n := len(lcStarts(t, f, "flaky1")); n != 0 {
		t.Fatalf("flaky1 recorded %d successful starts while failing", n)
	}

	// Fix the cause, then requeue: the task runs again and succeeds.
	if err := os.WriteFile(filepath.Join(f.Dir, "ok-flaky1"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	requeued := time.Now()
	lcCLI(ctx, t, f, "deadletter", "requeue", "flaky1")
	st := lcWaitStatus(ctx, t, f, "flaky1", 30*time.Second, "succeeded", func(s lcStatus) bool { return s.State == "succeeded" })
	if n := len(lcStarts(t, f, "flaky1")); n != 1 {
		t.Fatalf("flaky1 ran %d times after the requeue, want 1", n)
	}
	t.Logf("flaky1 requeued and succeeded on %s after %s (attempt %d)", st.Run.Worker, time.Since(requeued).Round(100*time.Millisecond), st.Run.Attempts)
	out = lcCLI(ctx, t, f, "deadletter", "list", "--json")
	if strings.Contains(out, `"flaky1"`) || !strings.Contains(out, `"doomed"`) {
		t.Fatalf("after requeue the dead letters are %s; want doomed only", out)
	}
}

// A handler running longer than the visibility timeout keeps its message
// hidden: it is delivered once, across two workers.
func TestLifecycleLongHandlerNotDeliveredTwice(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, map[string]any{"worker": map[string]any{"visibility_timeout": "5s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lcCLI(ctx, t, f, "schedule", "--id", "slow1", "--type", "recslow", "12")
	st := lcWaitStatus(ctx, t, f, "slow1", 45*time.Second, "succeeded", func(s lcStatus) bool { return s.State == "succeeded" })
	time.Sleep(3 * time.Second) // a redelivery would show by now
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	var starts, ends int
	for _, r := range rs {
		if r.ID == "slow1" && r.Phase == "start" {
			starts++
		}
		if r.ID == "slow1" && r.Phase == "end" {
			ends++
		}
	}
	if starts != 1 || ends != 1 {
		t.Fatalf("slow1 (12 s, visibility timeout 5 s): %d starts and %d ends, want 1 and 1", starts, ends)
	}
	if st.Run.Attempts != 1 || st.Run.Duplicates != 0 {
		t.Fatalf("slow1's record shows %d attempts and %d duplicates, want 1 and 0", st.Run.Attempts, st.Run.Duplicates)
	}
	t.Logf("12 s handler with a 5 s visibility timeout: 1 start, 1 delivery, worker %s", st.Run.Worker)
}

// An @every 3s series fires every 3 s through a leader handover without a
// lost or doubled occurrence, and cancel stops it.
func TestLifecycleEverySeriesAcrossHandover(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := seriesAcrossSIGTERM(ctx, t, f, "3s", "rec1", 10*time.Second)
	time.Sleep(time.Until(began.Add(21 * time.Second)))

	out := lcCLI(ctx, t, f, "cancel", "rec1")
	cancelled := time.Now()
	if !strings.Contains(out, "cancelled rec1") {
		t.Fatalf("cancel rec1: %q", out)
	}
	time.Sleep(5 * time.Second)

	dues, starts := occurrences(t, f, "rec1")
	if len(dues) < 6 {
		t.Fatalf("%d occurrences in ~21 s, want at least 6: %v", len(dues), dues)
	}
	for i := 1; i < len(dues); i++ {
		if d := dues[i].Sub(dues[i-1]); d != 3*time.Second {
			t.Errorf("occurrences %v and %v are %v apart, want 3s (none lost)", dues[i-1], dues[i], d)
		}
	}
	if last := dues[len(dues)-1]; last.After(cancelled.Add(time.Second)) {
		t.Errorf("an occurrence due %v ran after the series was cancelled at %v", last, cancelled)
	}
	minGap, maxGap := time.Hour, time.Duration(0)
	for i := 1; i < len(starts); i++ {
		d := starts[i].Sub(starts[i-1])
		minGap, maxGap = min(minGap, d), max(maxGap, d)
	}
	t.Logf("rec1: %d occurrences due %s..%s, every 3 s with none lost or doubled; start spacing %s..%s; none after cancel",
		len(dues), dues[0].Format(time.TimeOnly), dues[len(dues)-1].Format(time.TimeOnly), minGap.Round(time.Millisecond), maxGap.Round(time.Millisecond))
}

// Cancel before the move removes the task; cancel after the move (the
// task already queued behind a busy worker) marks its run, and the worker
// acknowledges it without running; an unknown id exits 3.
func TestLifecycleCancel(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 1, map[string]any{"worker": map[string]any{"concurrency": 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}

	// Before the move.
	lcCLI(ctx, t, f, "schedule", "--in", "30s", "--id", "early1", "--type", "rec")
	earlyDue := time.Now().Add(30 * time.Second)
	if out := lcCLI(ctx, t, f, "cancel", "early1"); !strings.Contains(out, "removed from the schedule") {
		t.Fatalf("cancel early1: %q", out)
	}
	if st, code, err := lcGetStatus(ctx, f, "early1"); err != nil || st.State != "cancelled" || st.Pending != nil {
		t.Fatalf("status of a task cancelled before its move: %+v, exit %d (%v); want cancelled and no longer pending", st, code, err)
	}
	if out := lcCLI(ctx, t, f, "list", "--json"); strings.Contains(out, "early1") {
		t.Fatalf("early1 still listed: %s", out)
	}

	// After the move: the only slot is busy with a 15 s task.
	lcCLI(ctx, t, f, "schedule", "--id", "blocker", "--type", "recslow", "15")
	lcWaitRecords(ctx, t, f, 30*time.Second, "blocker")
	lcCLI(ctx, t, f, "schedule", "--id", "late1", "--type", "rec")
	lcWaitStatus(ctx, t, f, "late1", 20*time.Second, "queued", func(s lcStatus) bool { return s.State == "queued" })
	if out := lcCLI(ctx, t, f, "cancel", "late1"); !strings.Contains(out, "already in the queue") {
		t.Fatalf("cancel late1: %q, want it reported as already in the queue", out)
	}
	// Once the blocker ends the worker receives late1 and acknowledges it.
	lcWaitQueueEmpty(ctx, t, f, 40*time.Second)
	st := lcWaitStatus(ctx, t, f, "late1", 10*time.Second, "cancelled", func(s lcStatus) bool { return s.State == "cancelled" })
	if st.State != "cancelled" {
		t.Fatalf("late1 is %s after its delivery, want cancelled", st.State)
	}
	if n := len(lcStarts(t, f, "late1")); n != 0 {
		t.Fatalf("cancelled late1 ran %d times", n)
	}

	// An unknown id.
	_, errOut, code := lcRun(ctx, f, nil, "cancel", "nosuch")
	if code != 3 || !strings.Contains(errOut, "nosuch") || !strings.Contains(errOut, "not found") {
		t.Fatalf("cancel nosuch: exit %d, stderr %q; want exit 3 naming the id as not found", code, errOut)
	}
	t.Logf("cancel nosuch: exit 3, %q", strings.TrimSpace(errOut))

	// early1 would have been due by now: it never ran.
	time.Sleep(time.Until(earlyDue.Add(3 * time.Second)))
	if n := len(lcStarts(t, f, "early1")); n != 0 {
		t.Fatalf("early1, cancelled before its move, ran %d times", n)
	}
}

// reschedule moves a pending task to a new due time; an unknown id exits 3.
func TestLifecycleReschedule(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lcCLI(ctx, t, f, "schedule", "--in", "1h", "--id", "r1", "--type", "rec")
	out := lcCLI(ctx, t, f, "reschedule", "r1", "--in", "2s")
	want := time.Now().Add(2 * time.Second)
	if !strings.Contains(out, "r1 now due") {
		t.Fatalf("reschedule r1: %q", out)
	}
	lcWaitRecords(ctx, t, f, 15*time.Second, "r1")
	rs := lcStarts(t, f, "r1")
	if len(rs) != 1 {
		t.Fatalf("r1 ran %d times", len(rs))
	}
	if d := rs[0].Due.Sub(want); d < -time.Second || d > time.Second {
		t.Fatalf("r1 ran with due %v, want about %v", rs[0].Due, want)
	}
	t.Logf("r1 rescheduled from +1h to +2s: started %s after its new due time", rs[0].At.Sub(rs[0].Due).Round(time.Millisecond))

	_, errOut, code := lcRun(ctx, f, nil, "reschedule", "nosuch", "--in", "1s")
	if code != 3 || !strings.Contains(errOut, "nosuch") {
		t.Fatalf("reschedule nosuch: exit %d, stderr %q; want exit 3 naming the id", code, errOut)
	}
}

// A 1 MiB payload given on stdin reaches the handler intact through a
// blob, and the blob is removed after the task succeeds.
func TestLifecycleLargePayload(t *testing.T) {
	t.Parallel()
	sum := `d=$(dirname "$FLEET_RECORD"); sha256sum | cut -c1-64 > "$d/$LEASECRON_TASK_ID.sum.tmp" && mv "$d/$LEASECRON_TASK_ID.sum.tmp" "$d/$LEASECRON_TASK_ID.sum"`
	f := startFleet(t, 2, map[string]any{"handlers": map[string]any{"sum": map[string]any{"exec": []string{"/bin/sh", "-c", sum}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	raw := make([]byte, 512<<10)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	payload := hex.EncodeToString(raw) // 1 MiB of text
	if len(payload) != 1<<20 {
		t.Fatalf("payload is %d bytes", len(payload))
	}
	want := sha256.Sum256([]byte(payload))

	out, errOut, code := lcRun(ctx, f, strings.NewReader(payload), "schedule", "--in", "4s", "--id", "big1", "--type", "sum", "-")
	if code != 0 {
		t.Fatalf("schedule - (1 MiB on stdin): exit %d: %s %s", code, out, errOut)
	}
	sc, err := storage.New(storage.Config{ConnectionString: f.Azurite.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	blobs := func() []string {
		var names []string
		pager := sc.Blob.NewContainerClient("leasecron").NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("payloads/")})
		for pager.More() {
			page, err := pager.NextPage(ctx)
			if err != nil {
				t.Fatalf("list blobs: %v", err)
			}
			for _, b := range page.Segment.BlobItems {
				names = append(names, *b.Name)
			}
		}
		return names
	}
	before := blobs()
	if len(before) != 1 {
		t.Fatalf("payload blobs after scheduling: %v, want one", before)
	}

	sumFile := filepath.Join(f.Dir, "big1.sum")
	deadline := time.Now().Add(30 * time.Second)
	var got []byte
	for {
		if got, err = os.ReadFile(sumFile); err == nil {
			break
		}
		if time.Now().After(deadline) {
			st, _, serr := lcGetStatus(ctx, f, "big1")
			t.Fatalf("the handler never wrote %s (status %+v %v)", sumFile, st, serr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if g := strings.TrimSpace(string(got)); g != hex.EncodeToString(want[:]) {
		t.Fatalf("handler saw sha256 %s, want %x", g, want)
	}
	lcWaitStatus(ctx, t, f, "big1", 20*time.Second, "succeeded", func(s lcStatus) bool { return s.State == "succeeded" })
	for deadline := time.Now().Add(15 * time.Second); ; {
		left := blobs()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("payload blob %v still there after success", left)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("1 MiB payload via stdin: blob %s, sha256 matched in the handler, blob removed after success", before[0])
}

// The same envelope enqueued twice (two messages, one run id) runs once;
// the second delivery is counted as a duplicate.
func TestLifecycleDuplicateMessageRunsOnce(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, map[string]any{"worker": map[string]any{"visibility_timeout": "5s"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc, err := storage.New(storage.Config{ConnectionString: f.Azurite.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	qc, err := queue.NewClient(sc.Queue, queue.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := queue.Envelope{ID: "dup1", Type: "rec", Due: time.Now().UTC(), Enqueued: time.Now().UTC()}
	for range 2 {
		if err := qc.Enqueue(ctx, env, 0); err != nil {
			t.Fatal(err)
		}
	}
	lcWaitRecords(ctx, t, f, 20*time.Second, "dup1")
	st := lcWaitStatus(ctx, t, f, "dup1", 40*time.Second, "a duplicate delivery", func(s lcStatus) bool {
		return s.Run != nil && s.Run.Duplicates >= 1
	})
	if n := len(lcStarts(t, f, "dup1")); n != 1 {
		t.Fatalf("dup1 ran %d times, want once", n)
	}
	if st.State != "succeeded" {
		t.Fatalf("dup1 is %s", st.State)
	}
	t.Logf("dup1 enqueued twice: 1 run, %d duplicate(s) in its run record", st.Run.Duplicates)

	// Counters reach the table every 30 s or at shutdown: stop the workers
	// and read the fleet-wide sum.
	for _, n := range f.Names() {
		if p := f.Worker(n); p != nil {
			_ = p.Stop(20 * time.Second)
		}
	}
	var stats struct {
		Counters struct {
			Total struct {
				Handled    int64 `json:"handled"`
				Duplicates int64 `json:"duplicates"`
			}
		} `json:"counters"`
	}
	out := lcCLI(ctx, t, f, "stats", "--json")
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, out)
	}
	if stats.Counters.Total.Duplicates < 1 || stats.Counters.Total.Handled != 1 {
		t.Fatalf("stats counters after shutdown: %+v, want 1 handled and at least 1 duplicate\n%s", stats.Counters.Total, out)
	}
	t.Logf("stats after shutdown: handled %d, duplicates %d", stats.Counters.Total.Handled, stats.Counters.Total.Duplicates)
}
