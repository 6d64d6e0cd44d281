package queue

import (
	"math/rand/v2"
	"time"
)

// poller is the empty-queue polling backoff: every empty poll doubles the
// interval up to max; a full batch snaps it back to min. When the work runs
// out — a poll returns fewer messages than it asked for, or none — the
// backoff resumes from half the interval it had before the work arrived
// instead of climbing from min again: a lone task in an idle fleet costs
// about half a poll more than idling, not seven. Each wait is jittered over
// [¾·interval, interval] (never below min) so an idle fleet does not poll in
// lockstep.
type poller struct {
	min, max, cur time.Duration
	resume        time.Duration // interval before the current run of work; 0 when none
	rnd           func() float64
}

func newPoller(min, max time.Duration, rnd func() float64) *poller {
	return &poller{min: min, max: max, cur: min, rnd: rnd}
}

// empty returns the wait after an empty poll and doubles the interval.
func (p *poller) empty() time.Duration {
	d := p.cur
	wait := d - time.Duration(float64(d/4)*p.rnd())
	if wait < p.min {
		wait = p.min
	}
	next := p.cur * 2
	if p.resume > 0 {
		next = max(next, p.resume/2)
		p.resume = 0
	}
	p.cur = min(next, p.max)
	return wait
}

// drained returns the wait after a poll that returned messages but fewer
// than it asked for, after got: the queue is empty for now, so rather than
// poll again at min and climb back through several empty polls, it waits
// half the interval it had before the work arrived (at least min) and
// resumes the backoff from there. Messages a producer announces (WakeAt:
// the mover's, and this consumer's own retries) are not left waiting by it.
func (p *poller) drained() time.Duration {
	back := max(p.min, min(p.resume/2, p.max))
	p.resume = 0
	p.cur = min(back*2, p.max)
	wait := back - time.Duration(float64(back/4)*p.rnd())
	return max(wait, p.min)
}

// got resets the interval after messages arrived (or a wake hint came due).
func (p *poller) got() {
	if p.resume == 0 {
		p.resume = p.cur
	}
	p.cur = p.min
}

// interval returns the current interval.
func (p *poller) interval() time.Duration { return p.cur }

func defaultRand() float64 { return rand.Float64() }
