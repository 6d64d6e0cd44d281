package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

// A handler that snoozes runs again after the delay with its attempt count
// unchanged; the run record shows the snooze and no error.
func TestSnoozeRunsAgainWithoutAnAttempt(t *testing.T) {
	rm := runs.NewMemory(nil)
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{PollMax: 2 * time.Second}, Runs: rm})
	var got calls
	var snoozedRun runs.Run
	h.c.Handle("report", func(ctx context.Context, task leasecrontype.Task) error {
		if got.add(task, h.clk.Now()) == 1 {
			leasecrontype.Output(ctx).Write([]byte("input not there yet"))
			return leasecrontype.Snooze(10 * time.Minute)
		}
		snoozedRun, _ = rm.Get(ctx, task.ID)
		return nil
	})
	h.enqueue(Envelope{ID: "r1", Type: "report"})
	h.start()
	h.await(OutcomeSnoozed)
	m, env := h.only(h.work)
	if env.FailedAttempts != 0 || env.Snoozes != 1 || !m.NextVisible.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("snoozed message = %+v %+v; want attempt 0, one snooze, visible in 10 min", m, env)
	}
	r := mustRun(t, rm, "r1", runs.Snoozed)
	if !r.SnoozedUntil.Equal(t0.Add(10*time.Minute)) || r.LastError != "" || r.OutputTail != "input not there yet" {
		t.Fatalf("snoozed run = %+v", r)
	}
	h.expect(OutcomeSucceeded)
	if got.n() != 2 || got.tasks[0].Attempt != 1 || got.tasks[1].Attempt != 1 || got.at[1].Before(t0.Add(10*time.Minute)) {
		t.Fatalf("calls %+v at %v; want attempt 1 twice, the second after the snooze", got.tasks, got.at)
	}
	if snoozedRun.State != runs.Running {
		t.Fatalf("during the second run the record was %s", snoozedRun.State)
	}
	r = mustRun(t, rm, "r1", runs.Succeeded)
	if r.Attempts != 1 || r.LastError != "" {
		t.Fatalf("succeeded run = %+v, want one attempt and no error", r)
	}
	if st := h.c.Stats().ByType["report"]; st.Failed != 0 || st.Handled != 1 || st.Deferred != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A task that snoozes forever: past MaxSnoozes each snooze is a failed
// attempt, so it ends dead rather than looping.
func TestSnoozeLimit(t *testing.T) {
	h := newHarness(t, ConsumerOptions{ConsumerSettings: ConsumerSettings{MaxSnoozes: 2, MaxAttempts: 2, BackoffBase: time.Second, BackoffMax: time.Second, PollMax: 2 * time.Second}})
	var got calls
	h.c.Handle("forever", func(_ context.Context, task leasecrontype.Task) error {
		got.add(task, h.clk.Now())
		return leasecrontype.Snooze(time.Minute)
	})
	h.enqueue(Envelope{ID: "f1", Type: "forever"})
	h.start()
	h.expect(OutcomeSnoozed, OutcomeSnoozed, OutcomeRetried, OutcomeDead)
	dl := h.deadLetters()
	if len(dl) != 1 || dl[0].Attempts != 2 {
		t.Fatalf("dead letters %+v", dl)
	}
	env, err := DecodeEnvelope(dl[0].Body)
	if err != nil || env.Snoozes != 4 || !strings.Contains(env.LastError, ErrTooManySnoozes.Error()) {
		t.Fatalf("dead envelope %+v, %v", env, err)
	}
	if got.n() != 4 {
		t.Fatalf("handler ran %d times, want 4 (two snoozes, then two attempts)", got.n())
	}
}
