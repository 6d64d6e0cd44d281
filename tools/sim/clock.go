package sim

import (
	"math"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// procClock is one process's wall clock: the simulation's true time
// offset by a constant and running at its own rate (drift, in parts per
// million), as an NTP-disciplined host's clock is. Its timers run on the
// bubble's virtual time, scaled by the same rate.
type procClock struct {
	w      *World
	offset time.Duration
	ppm    float64   // + runs fast, − runs slow
	epoch  time.Time // true time at which the drift started counting
}

func (c *procClock) rate() float64 { return 1 + c.ppm/1e6 }

// Now implements leasecrontype.Clock.
func (c *procClock) Now() time.Time {
	t := c.w.now()
	d := t.Sub(c.epoch)
	return t.Add(time.Duration(float64(d) * c.ppm / 1e6)).Add(c.offset)
}

// NewTimer implements leasecrontype.Clock: d on this clock is d/rate of
// true time, rounded up (and a nanosecond more), so that when it fires
// this clock has reached the instant asked for: a timer that fired a
// little early would be asked for again at once, and a goroutine that
// never stops asking keeps virtual time from moving.
func (c *procClock) NewTimer(d time.Duration) leasecrontype.Timer {
	if d > 0 {
		if f := math.Ceil(float64(d) / c.rate()); f < math.MaxInt64/2 {
			d = time.Duration(f) + 1
		} // else: as good as never (a timer for a row parked at the end of time)
	}
	return realTimer{time.NewTimer(d)}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// toTrue converts an instant read on this clock to true time.
func (c *procClock) toTrue(t time.Time) time.Time {
	d := t.Add(-c.offset).Sub(c.epoch)
	return c.epoch.Add(time.Duration(float64(d) / c.rate()))
}
