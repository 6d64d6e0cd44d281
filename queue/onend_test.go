package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// OnEnd hears of the end of runs others wait for or a batch counts, before
// their messages go; when it fails the message comes back, and the second
// delivery (a duplicate) tells it again before being acknowledged. Plain
// runs do not call it.
func TestOnEndBeforeTheMessageGoes(t *testing.T) {
	h, rm, ends := newOnEndHarness(t, "parent")
	h.c.Handle("ok", func(context.Context, leasecrontype.Task) error { return nil })
	h.c.Handle("bad", func(context.Context, leasecrontype.Task) error { return errors.New("no") })
	h.enqueue(Envelope{ID: "plain", Type: "ok"})
	h.enqueue(Envelope{ID: "parent", Type: "ok", Waiters: true})
	h.enqueue(Envelope{ID: "member", Type: "bad", Batch: "b"})
	h.start()
	h.expect(OutcomeSucceeded, OutcomeSucceeded, OutcomeDead)
	if n, _ := h.work.Count(context.Background()); n != 1 {
		t.Fatalf("%d messages left, want the parent's (OnEnd failed)", n)
	}
	h.clk.Advance(31 * time.Second) // its visibility timeout
	h.expect(OutcomeDuplicate)
	heard := ends.heard()
	want := []string{"parent succeeded", "member dead", "parent succeeded"}
	if len(heard) != len(want) {
		t.Fatalf("OnEnd heard %v, want %v", heard, want)
	}
	for i := range want {
		if heard[i] != want[i] {
			t.Fatalf("OnEnd heard %v, want %v", heard, want)
		}
	}
	if n, _ := h.work.Count(context.Background()); n != 0 {
		t.Errorf("%d messages left after the duplicate", n)
	}
	if n, _ := h.poison.Count(context.Background()); n != 1 {
		t.Errorf("%d dead letters, want the member's", n)
	}
	mustRun(t, rm, "member", runs.Dead)
}

// A run that succeeded while its batch could not be told keeps its end in
// its message: back after the id was scheduled again (the record taken
// over by the new scheduling, which knows nothing of the batch), the
// message still tells the batch that its run succeeded, and goes without
// running again (issue 38, the simulator's seed 9432: a member replaced
// after it succeeded was never counted, and the batch's callback never
// ran). The same holds for a cancelled run.
func TestEndIsToldAfterTheIdWasScheduledAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
		want   leasecrontype.RunState
	}{{"succeeded", false, leasecrontype.RunSucceeded}, {"cancelled", true, leasecrontype.RunCancelled}} {
		t.Run(tc.name, func(t *testing.T) {
			h, rm, ends := newOnEndHarness(t, "m")
			var ran atomic.Int32
			h.c.Handle("ok", func(context.Context, leasecrontype.Task) error { ran.Add(1); return nil })
			ctx := context.Background()
			due := h.clk.Now()
			if tc.cancel {
				if m := rm.MarkQueued(ctx, []runs.Mark{{ID: "m", Meta: runs.Meta{Type: "ok", Due: due, Batch: "b"}}}); !m[0] {
					t.Fatal("mark failed")
				}
				if _, err := rm.Cancel(ctx, "m"); err != nil {
					t.Fatal(err)
				}
			}
			h.enqueue(Envelope{ID: "m", Type: "ok", Due: due, Marked: true, Batch: "b"})
			h.start()
			if tc.cancel {
				h.expect(OutcomeCancelled)
			} else {
				h.expect(OutcomeSucceeded)
			}
			again := due.Add(time.Minute)
			if m := rm.MarkQueued(ctx, []runs.Mark{{ID: "m", Meta: runs.Meta{Type: "ok", Due: again}}}); !m[0] {
				t.Fatal("the new scheduling's mark failed")
			}
			h.clk.Advance(31 * time.Second)
			h.expect(OutcomeDuplicate)
			heard := ends.heard()
			if want := "m " + string(tc.want); len(heard) != 2 || heard[0] != want || heard[1] != want {
				t.Fatalf("OnEnd heard %v; want %q twice (the failed telling, then the message back)", heard, want)
			}
			if n, _ := h.work.Count(ctx); n != 0 {
				t.Errorf("%d messages left", n)
			}
			if n := ran.Load(); n != 1 && !tc.cancel || n != 0 && tc.cancel {
				t.Errorf("the handler ran %d times", n)
			}
			if r := mustRun(t, rm, "m", runs.Queued); !r.Due.Equal(again) {
				t.Fatalf("the new scheduling's record: %+v", r)
			}
		})
	}
}

// A second message of a run that ended before the id was scheduled again
// (the mover's copy of a row its client also sent) is acknowledged without
// running and without telling what waits for the id: told now, the run's
// end would be taken for the new scheduling's, releasing the tasks
// waiting for that one (a review of issue 38's row 104). One that says
// others wait for the run may be the only message that does (a child
// marked the row after the first message was sent): the traffic cop
// watches the id from then on, and what waits hears of the end it comes
// to; a message that says nobody waits leaves no watch. Its batch is told
// of the end (counted once): the run's worker may have died before
// telling it (seed 90112).
func TestASecondMessageOfARunTakenOverTellsOnlyItsBatch(t *testing.T) {
	for _, tc := range []struct {
		end     runs.State
		waiters bool
		batch   string
	}{{runs.Succeeded, true, "b"}, {runs.Dead, true, "b"}, {runs.Succeeded, false, "b"}, {runs.Succeeded, true, ""}} {
		end := tc.end
		t.Run(fmt.Sprintf("%s waiters=%v batch=%q", end, tc.waiters, tc.batch), func(t *testing.T) {
			h, rm, ends := newOnEndHarness(t, "")
			h.c.o.OnEnd = func(ctx context.Context, env Envelope, st leasecrontype.RunState) error {
				if env.Waiters {
					t.Errorf("what waits for the id was told the end of a run the record no longer describes")
				}
				return ends.onEnd(ctx, env, st)
			}
			var ran atomic.Int32
			h.c.Handle("ok", func(context.Context, leasecrontype.Task) error { ran.Add(1); return nil })
			ctx := context.Background()
			due := h.clk.Now().UTC().Truncate(time.Second)
			first := runs.Meta{Type: "ok", Due: due}
			if m := rm.MarkQueued(ctx, []runs.Mark{{ID: "p", Meta: first}}); !m[0] {
				t.Fatal("mark failed")
			}
			if _, err := rm.Claim(ctx, "p", "other", 1, h.clk.Now().Add(time.Minute), first); err != nil {
				t.Fatal(err)
			}
			if err := rm.Finish(ctx, "p", end, nil, ""); err != nil {
				t.Fatal(err)
			}
			if m := rm.MarkQueued(ctx, []runs.Mark{{ID: "p", Meta: runs.Meta{Type: "ok", Due: due.Add(time.Minute)}}}); !m[0] {
				t.Fatal("the new scheduling's mark failed")
			}
			h.enqueue(Envelope{ID: "p", Type: "ok", Due: due, Marked: true, Waiters: tc.waiters, Batch: tc.batch})
			h.start()
			h.expect(OutcomeDuplicate)
			var want []string
			if tc.batch != "" {
				want = []string{"p " + string(end)}
			}
			if heard := ends.heard(); !slices.Equal(heard, want) || ran.Load() != 0 {
				t.Errorf("the second message ran %d times and told %v; want never run, told %v", ran.Load(), heard, want)
			}
			if watched, err := rm.Watched(ctx); err != nil || slices.Contains(watched, "p") != tc.waiters {
				t.Errorf("watched %v, %v; want p watched only when others wait", watched, err)
			}
			if r := mustRun(t, rm, "p", runs.Queued); !r.Due.Equal(due.Add(time.Minute)) {
				t.Fatalf("the new scheduling's record: %+v", r)
			}
		})
	}
}

// An end whose record could not be written is not carried in the message:
// the record may still say running, and the message must come back to
// run its task again, not to tell, for good, an end nobody recorded (a
// review of issue 38's row 88). One whose record was written is.
func TestOnlyARecordedEndIsCarried(t *testing.T) {
	for _, down := range []bool{true, false} {
		h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{Concurrency: 1, BackoffBase: time.Second, VisibilityTimeout: 30 * time.Second, MaxAttempts: 3}})
		rm := &finishRefused{Memory: runs.NewMemory(h.clk), refused: down}
		h.c.o.Runs = rm
		h.c.o.OnEnd = func(context.Context, Envelope, leasecrontype.RunState) error { return errors.New("table busy") }
		h.c.Handle("ok", func(context.Context, leasecrontype.Task) error { return nil })
		h.enqueue(Envelope{ID: "m", Type: "ok", Batch: "b"})
		h.start()
		h.expect(OutcomeSucceeded)
		h.stop()
		if _, env := h.only(h.work); (env.Ended != "") == down || !down && env.Ended != leasecrontype.RunSucceeded {
			t.Errorf("record written %v: the message carries Ended %q", !down, env.Ended)
		}
	}
}

// finishRefused refuses every Finish with an error that is not tried
// again, when refused.
type finishRefused struct {
	*runs.Memory
	refused bool
}

func (f *finishRefused) Finish(ctx context.Context, id string, st leasecrontype.RunState, err error, tail string) error {
	_, _, ferr := f.FinishClaimed(ctx, id, st, err, tail)
	return ferr
}

func (f *finishRefused) FinishClaimed(ctx context.Context, id string, st leasecrontype.RunState, err error, tail string) (leasecrontype.Run, bool, error) {
	if f.refused {
		return leasecrontype.Run{}, false, fmt.Errorf("runs: finish %s: %w", id, storage.ErrBadRequest)
	}
	return f.Memory.FinishClaimed(ctx, id, st, err, tail)
}

// onEnds records what OnEnd heard ("{id} {state}") and fails the first
// telling of the run failing names.
type onEnds struct {
	mu      sync.Mutex
	failing string
	failed  bool
	all     []string
}

func (o *onEnds) onEnd(_ context.Context, env Envelope, st leasecrontype.RunState) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, env.ID+" "+string(st))
	if env.ID == o.failing && !o.failed {
		o.failed = true
		return errors.New("table busy")
	}
	return nil
}

func (o *onEnds) heard() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.all...)
}

// newOnEndHarness is a consumer of one handler slot, one attempt a task
// and a 30 s visibility timeout over in-memory run records, whose OnEnd
// fails the first telling of failing's end.
func newOnEndHarness(t *testing.T, failing string) (*harness, *runs.Memory, *onEnds) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{Concurrency: 1, BackoffBase: time.Second, VisibilityTimeout: 30 * time.Second, MaxAttempts: 1}})
	rm := runs.NewMemory(h.clk)
	h.c.o.Runs = rm
	ends := &onEnds{failing: failing}
	h.c.o.OnEnd = ends.onEnd
	return h, rm, ends
}

// A run that succeeded while its batch could not be told, and whose
// message cannot carry its end (its visibility was lost while the
// handler ran, or rewriting it failed), sends the end in a message of its
// own, so that the batch hears of it even when, by the time the old
// message reappears, the id has been scheduled again and its record says
// nothing of this run: the old message, sent early, is then acknowledged
// as stale (issue 38, the simulator's seed 13604: a member scheduled
// again while it ran; its batch's callback never ran). Telling it leaves
// the payload blob, which the run's message names too.
func TestEndIsToldWhenItsMessageCannotCarryIt(t *testing.T) {
	for _, lost := range []bool{true, false} {
		t.Run(map[bool]string{true: "visibility lost", false: "rewrite refused"}[lost], func(t *testing.T) {
			pl := &payloads{blobs: map[string][]byte{"blob-m": []byte("big")}}
			h, fq, rm := lostHarness(t, ConsumerOptions{Payloads: pl, ConsumerSettings: ConsumerSettings{Concurrency: 2, BackoffBase: time.Second, VisibilityTimeout: 30 * time.Second, MaxAttempts: 1}})
			ends := &onEnds{failing: "m"}
			h.c.o.OnEnd = ends.onEnd
			release := make(chan struct{})
			var ran atomic.Int32
			h.c.Handle("ok", func(_ context.Context, task leasecrontype.Task) error {
				if string(task.Payload) != "big" {
					t.Errorf("payload %q", task.Payload)
				}
				ran.Add(1)
				<-release
				return nil
			})
			ctx := context.Background()
			due := h.clk.Now()
			// Sent early, its run confirmed with the message's token; its
			// row is gone by the time the message reappears.
			if ok := rm.Confirm(ctx, []runs.Mark{{ID: "m", Meta: runs.Meta{Type: "ok", Due: due, Token: "tok", Batch: "b"}}}); !ok[0] {
				t.Fatal("confirm failed")
			}
			h.c.o.Current = func(context.Context, Envelope) (bool, error) { return false, nil }
			h.enqueue(Envelope{ID: "m", Type: "ok", Due: due, Token: "tok", Row: "00/x", Batch: "b", PayloadBlob: "blob-m"})
			h.start()
			h.waitStarted()
			h.waitIdle()
			if lost {
				h.loseVisibility(fq)
				fq.failUpdates(nil)
				close(release)
				h.expectPast(OutcomeLost)
			} else {
				fq.failUpdates(storage.ErrBadRequest)
				close(release)
				h.expect(OutcomeSucceeded)
				fq.failUpdates(nil)
			}
			mustRun(t, rm, "m", runs.Succeeded)
			// The id is scheduled again: its record now describes that run.
			again := due.Add(time.Hour)
			if m := rm.MarkQueued(ctx, []runs.Mark{{ID: "m", Meta: runs.Meta{Type: "ok", Due: again}}}); !m[0] {
				t.Fatal("the new scheduling's mark failed")
			}
			// Three minutes: the old message waits for the new scheduling's
			// run meanwhile (up to runs.QueuedWait).
			for range 6 {
				h.clk.Advance(31 * time.Second)
				h.waitIdle()
			}
			heard := ends.heard()
			if want := "m succeeded"; len(heard) < 2 || heard[0] != want || heard[1] != want {
				t.Fatalf("OnEnd heard %v; want %q twice first (the failed telling, then the end's own message)", heard, want)
			}
			if n := ran.Load(); n != 1 {
				t.Errorf("the handler ran %d times, want once", n)
			}
			for _, m := range h.work.all() {
				if strings.Contains(m.Text, `"ended"`) {
					t.Errorf("the end's own message is left: %s", m.Text)
				}
			}
			pl.mu.Lock()
			defer pl.mu.Unlock()
			if _, ok := pl.blobs["blob-m"]; !ok {
				t.Errorf("telling the end deleted the payload blob the run's message still names")
			}
		})
	}
}

// watchFails is a run recorder whose watches fail with err.
type watchFails struct {
	*runs.Memory
	err error
}

func (w watchFails) WatchParents(context.Context, []string) error { return w.err }

// A second message of a run taken over that says others wait, whose
// watch of the id fails with a fault that passes, is put back, its
// delivery counted, to have the id watched when it comes back; one the
// service would refuse again is acknowledged all the same (logged), not
// put back for good.
func TestASecondMessageWhoseWatchFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"a fault that passes", errors.New("connection reset by peer"), OutcomeDeferred},
		{"refused for good", fmt.Errorf("watch: %w", storage.ErrBadRequest), OutcomeDuplicate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, rm, _ := newOnEndHarness(t, "")
			h.c.o.Runs = watchFails{Memory: rm, err: tc.err}
			h.c.Handle("ok", func(context.Context, leasecrontype.Task) error { return nil })
			ctx := context.Background()
			due := h.clk.Now().UTC().Truncate(time.Second)
			first := runs.Meta{Type: "ok", Due: due}
			if _, err := rm.Claim(ctx, "p", "other", 1, h.clk.Now().Add(time.Minute), first); err != nil {
				t.Fatal(err)
			}
			if err := rm.Finish(ctx, "p", runs.Succeeded, nil, ""); err != nil {
				t.Fatal(err)
			}
			if m := rm.MarkQueued(ctx, []runs.Mark{{ID: "p", Meta: runs.Meta{Type: "ok", Due: due.Add(time.Minute)}}}); !m[0] {
				t.Fatal("the new scheduling's mark failed")
			}
			h.enqueue(Envelope{ID: "p", Type: "ok", Due: due, Marked: true, Waiters: true})
			h.start()
			h.expect(tc.want)
			h.stop()
			left := h.work.all()
			if tc.want == OutcomeDuplicate {
				if len(left) != 0 {
					t.Fatalf("%d messages left; want it acknowledged", len(left))
				}
				return
			}
			if _, env := h.only(h.work); env.Dequeues != 1 {
				t.Fatalf("the message put back counts %d deliveries; want 1", env.Dequeues)
			}
		})
	}
}

// A batch member sent early whose run ended while its worker died before
// any telling of the end landed, and whose record a replace took over
// since, is told to its batch by its message when it comes back: its row
// is gone, and the end the record keeps for its due time is its own
// (issue 38, the simulator's seed 90112: the message was acknowledged as
// stale, and the batch's callback waited for good). The batch alone is
// told: what waits for the id waits for the replacement. A telling that
// fails puts the message back; the handler never runs again.
func TestEarlySentMemberBackAfterATakeoverTellsItsBatch(t *testing.T) {
	for _, end := range []runs.State{runs.Succeeded, runs.Dead} {
		t.Run(string(end), func(t *testing.T) {
			h, rm, ends := newOnEndHarness(t, "m")
			var ran atomic.Int32
			h.c.Handle("ok", func(context.Context, leasecrontype.Task) error { ran.Add(1); return nil })
			ctx := context.Background()
			due := h.clk.Now()
			early := runs.Meta{Type: "ok", Due: due, Token: "tok", Batch: "b"}
			if ok := rm.Confirm(ctx, []runs.Mark{{ID: "m", Meta: early}}); !ok[0] {
				t.Fatal("confirm failed")
			}
			// Its worker claimed and ended it, and died before telling.
			if _, err := rm.Claim(ctx, "m", "dead-worker", 1, due.Add(time.Minute), early); err != nil {
				t.Fatal(err)
			}
			if err := rm.Finish(ctx, "m", end, nil, ""); err != nil {
				t.Fatal(err)
			}
			if ok := rm.MarkQueued(ctx, []runs.Mark{{ID: "m", Meta: runs.Meta{Type: "ok", Due: due.Add(2 * time.Minute)}}}); !ok[0] {
				t.Fatal("the replacement's mark failed")
			}
			h.c.o.Current = func(context.Context, Envelope) (bool, error) { return false, nil }
			h.c.o.OnEnd = func(ctx context.Context, env Envelope, st leasecrontype.RunState) error {
				if env.Waiters {
					t.Errorf("what waits for the id was told the end of a run the record no longer describes")
				}
				return ends.onEnd(ctx, env, st)
			}
			h.enqueue(Envelope{ID: "m", Type: "ok", Due: due, Token: "tok", Row: "00/x", Batch: "b", Waiters: true})
			h.start()
			h.expect(OutcomeDeferred, OutcomeDuplicate)
			want := "m " + string(end)
			if heard := ends.heard(); len(heard) != 2 || heard[0] != want || heard[1] != want {
				t.Fatalf("OnEnd heard %v; want %q twice (the failed telling, then again)", heard, want)
			}
			if n := ran.Load(); n != 0 {
				t.Errorf("the handler ran %d times, want never", n)
			}
			if n, _ := h.work.Count(ctx); n != 0 {
				t.Errorf("%d messages left", n)
			}
			if r := mustRun(t, rm, "m", runs.Queued); !r.OfDue(due.Add(2 * time.Minute)) {
				t.Errorf("the record is of %v; want the replacement's", r.Due)
			}
		})
	}
}
