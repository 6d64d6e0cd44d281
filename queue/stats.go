package queue

import (
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Outcome is what became of one delivered message.
type Outcome string

// Outcomes reported to Observer.OnHandled.
const (
	// OutcomeSucceeded: the handler succeeded and the message was deleted.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRetried: the attempt failed; the message comes back after a
	// backoff with its attempt count raised.
	OutcomeRetried Outcome = "retried"
	// OutcomeDead: the last allowed attempt failed (or the message kept
	// crashing workers); it was set aside in the poison queue.
	OutcomeDead Outcome = "dead"
	// OutcomeDuplicate: the run had already succeeded; acknowledged
	// without running.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeCancelled: the run was cancelled; acknowledged without running.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeSuperseded: a message sent early for a task that was
	// cancelled, rescheduled, replaced or deleted since; acknowledged
	// without running (counted with Cancelled).
	OutcomeSuperseded Outcome = "superseded"
	// OutcomeMalformed: not a readable envelope; set aside with the reason.
	OutcomeMalformed Outcome = "malformed"
	// OutcomeDeferred: put back for later without counting an attempt (no
	// limiter slot, claimed by another worker, already running here).
	OutcomeDeferred Outcome = "deferred"
	// OutcomeSnoozed: the handler snoozed (leasecrontype.Snooze); the
	// message comes back after the delay with its attempt count unchanged.
	OutcomeSnoozed Outcome = "snoozed"
	// OutcomePaused: its type is paused; put back without running and
	// without counting an attempt, until the type is resumed.
	OutcomePaused Outcome = "paused"
	// OutcomeMisrouted: the worker has no handler for its type; put back
	// without counting an attempt, for a worker that has one.
	OutcomeMisrouted Outcome = "misrouted"
	// OutcomeAbandoned: released unfinished because the worker shut down,
	// or because its concurrency slot was lost (ErrSlotLost).
	OutcomeAbandoned Outcome = "abandoned"
	// OutcomeLost: the handler ran but the message's visibility could not
	// be kept (it is gone or was redelivered); its result is recorded in
	// the run record and the message is left alone to reappear. Also a
	// delivery that did not run because, on its way to the handler, its
	// message was received by another worker (a message held until due,
	// or one slowed past its visibility whose claim was taken over or
	// could not be confirmed).
	OutcomeLost Outcome = "lost"
	// OutcomeLeft: a storage call failed so nothing could be recorded on
	// the message; it reappears when its visibility timeout lapses.
	OutcomeLeft Outcome = "left"
)

// Observer receives the consumer's events, for metrics. Methods are called
// from the consumer's goroutines and must not block.
type Observer interface {
	// OnHandled is called once per delivered message when its outcome is
	// settled, with the time from dequeue to outcome. taskType is
	// "(malformed)" for messages that could not be read.
	OnHandled(taskType string, outcome Outcome, d time.Duration)
	// OnPoll is called after every dequeue with the number of messages
	// received and the wait before the next dequeue.
	OnPoll(received int, wait time.Duration)
}

// LatencyObserver is an Observer that also wants every attempt's timing:
// its queue wait (due to handler start; negative for retries, which are
// not timed) and its run time.
type LatencyObserver interface {
	OnTimed(taskType string, wait, run time.Duration)
}

// MalformedType is the type under which unreadable messages are counted.
const MalformedType = "(malformed)"

// Stats is a snapshot of a consumer.
type Stats struct {
	// Instance is the consumer's instance id.
	Instance string
	// InFlight is the number of messages being processed now. A message
	// leaves it just after its outcome is counted and reported to the
	// Observer, once its delivery has let go of the slot it held.
	InFlight int
	// PollInterval is the current empty-queue polling interval.
	PollInterval time.Duration
	// Total sums every type.
	Total leasecrontype.Counts
	// ByType holds the counts per task type.
	ByType map[string]leasecrontype.Counts
	// lat holds, per task type, the queue wait of first attempts (due to
	// handler start) and the run time of every attempt, for the counters
	// rows (leasecron.Client.Latency reads them back).
	lat map[string]runs.Latency
}

type statsState struct {
	mu       sync.Mutex
	byType   map[string]*leasecrontype.Counts
	lat      map[string]*runs.Latency
	inFlight int
	poll     time.Duration
}

func (s *statsState) add(typ string, f func(c *leasecrontype.Counts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byType == nil {
		s.byType = map[string]*leasecrontype.Counts{}
	}
	c := s.byType[typ]
	if c == nil {
		c = &leasecrontype.Counts{}
		s.byType[typ] = c
	}
	f(c)
}

func (s *statsState) snapshot(instance string) Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Instance: instance, InFlight: s.inFlight, PollInterval: s.poll, ByType: map[string]leasecrontype.Counts{}}
	for k, c := range s.byType {
		st.ByType[k] = *c
		st.Total.Add(*c)
	}
	if len(s.lat) > 0 {
		st.lat = make(map[string]runs.Latency, len(s.lat))
		for k, l := range s.lat {
			st.lat[k] = *l
		}
	}
	return st
}

// observe times one attempt of a task of type typ: its run time, and its
// queue wait when it is a first attempt (wait >= 0).
func (s *statsState) observe(typ string, wait, run time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lat == nil {
		s.lat = map[string]*runs.Latency{}
	}
	l := s.lat[typ]
	if l == nil {
		l = &runs.Latency{}
		s.lat[typ] = l
	}
	if wait >= 0 {
		l.Wait.Observe(wait)
	}
	l.Run.Observe(run)
}
