package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

// countingProgress counts the progress writes that reach the run records.
type countingProgress struct {
	*runs.Memory
	mu     sync.Mutex
	writes []leasecrontype.RunProgress
	wrote  chan struct{}
}

func (c *countingProgress) Progress(ctx context.Context, id, worker string, p leasecrontype.RunProgress) error {
	c.mu.Lock()
	c.writes = append(c.writes, p)
	c.mu.Unlock()
	err := c.Memory.Progress(ctx, id, worker, p)
	select {
	case c.wrote <- struct{}{}:
	default:
	}
	return err
}

func (c *countingProgress) written() []leasecrontype.RunProgress {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]leasecrontype.RunProgress(nil), c.writes...)
}

// A handler that reports 1,000 times over 10 s (on the fake clock) costs
// at most one write per ProgressEvery (5 s) and the last report before
// the outcome: at most four writes, the first at once, and the run record
// keeps the last report after the run succeeded. A handler that never
// reports writes nothing.
func TestProgressWritesAreThrottled(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	rec := &countingProgress{Memory: runs.NewMemory(h.clk), wrote: make(chan struct{}, 10)}
	h.c.o.Runs = rec
	h.c.Handle("long", func(ctx context.Context, task leasecrontype.Task) error {
		for i := range 1000 {
			if err := leasecrontype.ReportProgress(ctx, i/10, fmt.Sprintf("step %d of 1000", i+1)); err != nil {
				return err
			}
			if i == 0 {
				// The first report is written at once.
				select {
				case <-rec.wrote:
				case <-time.After(waitLimit):
					return errors.New("the first report was not written")
				}
			}
			if i%100 == 99 {
				h.clk.Advance(time.Second)
			}
		}
		return leasecrontype.ReportProgress(ctx, 100, "done")
	})
	h.c.Handle("quiet", func(context.Context, leasecrontype.Task) error { return nil })
	h.enqueue(Envelope{ID: "quiet", Type: "quiet"})
	h.start()
	h.expect(OutcomeSucceeded)
	if n := len(rec.written()); n != 0 {
		t.Fatalf("a handler that never reported made %d progress writes", n)
	}
	h.enqueue(Envelope{ID: "long", Type: "long"})
	h.expect(OutcomeSucceeded)

	ws := rec.written()
	t.Logf("1,001 reports over 10 s: %d writes", len(ws))
	if len(ws) < 2 || len(ws) > 4 {
		t.Errorf("%d progress writes for 1,001 reports over 10 s at one per 5 s, want 2 to 4: %+v", len(ws), ws)
	}
	if ws[0].Percent != 0 || ws[0].Message != "step 1 of 1000" {
		t.Errorf("first write %+v, want the first report at once", ws[0])
	}
	for i := 1; i < len(ws)-1; i++ {
		if gap := ws[i].At.Sub(ws[i-1].At); gap < h.c.o.ProgressEvery-time.Second {
			t.Errorf("writes %d and %d of reports %s apart, want about ProgressEvery (%s) at least", i-1, i, gap, h.c.o.ProgressEvery)
		}
	}
	last := ws[len(ws)-1]
	if last.Percent != 100 || last.Message != "done" {
		t.Errorf("last write %+v, want the last report (100%% done)", last)
	}
	r, err := rec.Get(context.Background(), "long")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != leasecrontype.RunSucceeded || r.Progress.Percent != 100 || r.Progress.Message != "done" || r.Progress.At.IsZero() {
		t.Errorf("run record %s with progress %+v, want succeeded keeping 100%% done", r.State, r.Progress)
	}
}

// A percent outside 0–100 is refused to the handler, naming the value;
// reports of a run recorder that does not keep progress go nowhere and
// cost nothing.
func TestProgressRefusedAndDropped(t *testing.T) {
	h := newHarness(t, ConsumerOptions{})
	rm := runs.NewMemory(h.clk)
	h.c.o.Runs = gatedFinish{RunRecorder: rm, gate: closedGate(), entering: make(chan string, 10)}
	refused := make(chan error, 1)
	h.c.Handle("t", func(ctx context.Context, _ leasecrontype.Task) error {
		refused <- leasecrontype.ReportProgress(ctx, 101, "too far")
		return leasecrontype.ReportProgress(ctx, 50, "half")
	})
	h.enqueue(Envelope{ID: "a", Type: "t"})
	h.start()
	h.expect(OutcomeSucceeded)
	err := <-refused
	if !errors.Is(err, leasecrontype.ErrInvalidProgress) || !strings.Contains(err.Error(), "101") || !strings.Contains(err.Error(), "0 to 100") {
		t.Errorf("report of 101%%: %v, want ErrInvalidProgress naming 101 and 0 to 100", err)
	}
	r, err := rm.Get(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if r.Progress.Reported() {
		t.Errorf("a recorder without Progress kept %+v", r.Progress)
	}
}

func closedGate() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
