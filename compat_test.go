package leasecron_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// compatLine is one stored thing of testdata/compat/*.jsonl: what a
// release wrote to its account (a table entity as the service returns it,
// a message's text, a blob with its metadata), captured by running that
// release's worker and client against Azurite.
type compatLine struct {
	Kind     string            `json:"kind"`
	Where    string            `json:"where"`
	Body     json.RawMessage   `json:"body,omitempty"`
	Text     string            `json:"text,omitempty"`
	Name     string            `json:"name,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// loadCompat writes a fixture into the account behind sc: entities
// (without the service's own metadata), messages (visible at once) and
// blobs.
func loadCompat(ctx context.Context, t *testing.T, sc *storage.Clients, file string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sn := bufio.NewScanner(f)
	sn.Buffer(make([]byte, 1<<20), 1<<20)
	for sn.Scan() {
		var l compatLine
		if err := json.Unmarshal(sn.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		switch l.Kind {
		case "entity":
			var m map[string]any
			if err := json.Unmarshal(l.Body, &m); err != nil {
				t.Fatal(err)
			}
			for k := range m {
				if strings.HasPrefix(k, "odata.") || strings.HasPrefix(k, "Timestamp") {
					delete(m, k)
				}
			}
			b, _ := json.Marshal(m)
			if err := sc.EnsureTable(ctx, l.Where); err != nil {
				t.Fatal(err)
			}
			if _, err := sc.Table.NewClient(l.Where).UpsertEntity(ctx, b, nil); err != nil {
				t.Fatalf("entity %s: %v", b, err)
			}
		case "message":
			if err := sc.EnsureQueue(ctx, l.Where); err != nil {
				t.Fatal(err)
			}
			if _, err := sc.Queue.NewQueueClient(l.Where).EnqueueMessage(ctx, l.Text, &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(-1))}); err != nil {
				t.Fatal(err)
			}
		case "blob":
			if err := sc.EnsureContainer(ctx, l.Where); err != nil {
				t.Fatal(err)
			}
			md := map[string]*string{}
			for k, v := range l.Metadata {
				md[k] = to.Ptr(v)
			}
			bb := sc.Blob.NewContainerClient(l.Where).NewBlockBlobClient(l.Name)
			if _, err := bb.UploadBuffer(ctx, []byte(l.Text), &blockblob.UploadBufferOptions{Metadata: md}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("fixture line of kind %q", l.Kind)
		}
	}
	if err := sn.Err(); err != nil {
		t.Fatal(err)
	}
}

// compatWritten is about when testdata/compat/deacd2a.jsonl was written.
var compatWritten = time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)

// An account written by the previous release (deacd2a: its worker ran ok,
// failing, cancelled and recurring tasks, a blackboard key, and left a
// large pending payload, early-sent occurrences and an untaken message on
// the queue) keeps working: every record reads as it was written, and a
// worker of this release runs what was pending — each task once, the
// large payload from its blob — without running again what had finished.
func TestPreviousReleaseAccountKeepsWorking(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	loadCompat(ctx, t, sc, filepath.Join("testdata", "compat", "deacd2a.jsonl"))
	st := leasecron.Storage{ConnectionString: srv.ConnectionString()}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("records read as written", func(t *testing.T) {
		// Read on the day the fixture was written: its records' retention
		// (7 days) runs out on the calendar, and an expired record says
		// so instead of its state.
		c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st, Clock: clock.NewFake(compatWritten)})
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]leasecron.RunState{"ok-1": leasecron.RunSucceeded, "fail-1": leasecron.RunDead, "cancel-1": leasecron.RunCancelled} {
			s, err := c.Status(ctx, id)
			if err != nil || s.Run == nil || s.Run.State != want {
				t.Errorf("status %s: %+v, %v; want %s", id, s.Run, err, want)
			}
		}
		if s, _ := c.Status(ctx, "fail-1"); s.Run == nil || s.Run.Attempts != 2 || !strings.Contains(s.Run.LastError, "failing on purpose") {
			t.Errorf("fail-1's record: %+v", s.Run)
		}
		recent, err := c.Recent(ctx, "beat", 5)
		if err != nil || len(recent) < 3 {
			t.Errorf("beat's recent runs: %d, %v", len(recent), err)
		}
		page, err := c.Runs(ctx, leasecron.RunQuery{Limit: 100})
		if err != nil || len(page.Runs) < 6 {
			t.Errorf("run history: %d runs, %v", len(page.Runs), err)
		}
		res, err := c.CheckRuns(ctx)
		if err != nil || len(res.Problems) != 0 {
			t.Errorf("runs check: %v, %v", res.Problems, err)
		}
	})
	t.Run("pending tasks read as written", func(t *testing.T) {
		p, err := c.List(ctx, &leasecron.ListOptions{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]schedule.Item{}
		for _, it := range p.Items {
			ids[it.ID] = it
		}
		if len(ids) != 3 || ids["nightly"].TZ != "Europe/Amsterdam" || ids["nightly"].Recurrence != "30 2 * * *" ||
			ids["beat"].Recurrence != "@every 3s" || ids["big"].PayloadBlob == "" {
			t.Errorf("pending: %+v", p.Items)
		}
		b, err := c.Payload(ctx, ids["big"].PayloadBlob)
		if err != nil || len(b) != 40<<10 {
			t.Errorf("big's payload blob: %d bytes, %v", len(b), err)
		}
	})
	t.Run("dead letters, blackboard and lease read as written", func(t *testing.T) {
		peek, err := c.PeekDeadLetters(ctx, 10)
		if err != nil || len(peek.DeadLetters) != 1 || !strings.Contains(peek.DeadLetters[0].Reason, "failing on purpose") {
			t.Errorf("dead letters: %+v, %v", peek, err)
		}
		keys, err := c.Blackboard(ctx)
		if err != nil || len(keys) != 1 || keys[0].Key != "city" || keys[0].Runs < 1 || keys[0].Interval != time.Hour {
			t.Errorf("blackboard: %+v, %v", keys, err)
		}
		h, err := c.Leader(ctx)
		if err != nil || h.Holder != "old-worker" || h.Generation != 1 {
			t.Errorf("leader: %+v, %v", h, err)
		}
	})

	// Rows the previous release wrote can be changed: the two pending
	// one-off and cron tasks are made due now (when the fixture is replayed
	// they may still lie in the future).
	for _, id := range []string{"big", "nightly"} {
		if _, err := c.RunNow(ctx, id); err != nil {
			t.Fatalf("run-now %s: %v", id, err)
		}
	}

	// A worker of this release takes over the account.
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{
		Storage: st, InstanceID: "new-worker",
		Lease:    trafficcop.Timing{LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: 15 * time.Second}, PollEvery: time.Second},
		Mover:    schedule.MoverSettings{PollEvery: 500 * time.Millisecond},
		Consumer: queue.ConsumerSettings{PollMax: 300 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	var bigPayload int
	w.Handle("ok", func(_ context.Context, task leasecron.Task) error {
		mu.Lock()
		defer mu.Unlock()
		ran[task.ID]++
		if task.ID == "big" {
			bigPayload = len(task.Payload)
		}
		return nil
	})
	w.Handle("fail", func(context.Context, leasecron.Task) error { return errors.New("still failing") })
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	for {
		mu.Lock()
		n := min(ran["queued-1"], 1) + min(ran["big"], 1)
		for id := range ran {
			if strings.HasPrefix(id, "nightly@") {
				n++
				break
			}
		}
		mu.Unlock()
		if n >= 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the worker did not run the pending tasks: %v", ran)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Let the early-sent occurrences and the overdue series settle.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if s, err := c.Status(ctx, "big"); err == nil && s.Run != nil && s.Run.State == leasecron.RunSucceeded {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range ran {
		if n > 1 {
			t.Errorf("%s ran %d times", id, n)
		}
	}
	for _, id := range []string{"ok-1", "fail-1", "cancel-1"} {
		if ran[id] > 0 {
			t.Errorf("%s, finished under the previous release, ran again", id)
		}
	}
	if bigPayload != 40<<10 {
		t.Errorf("big's handler got %d bytes of payload, want 40 KiB from its blob", bigPayload)
	}
	if s, err := c.Status(ctx, "queued-1"); err != nil || s.Run == nil || s.Run.State != leasecron.RunSucceeded {
		t.Errorf("queued-1 (a message the previous release enqueued): %+v, %v", s.Run, err)
	}
}
