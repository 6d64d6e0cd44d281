package leasecrontype

import "time"

// Clock is the time source every leasecron service takes (an Options field
// named Clock; nil means the real clock). Tests pass a simulated clock to
// drive leases, backoff and schedules without sleeping.
type Clock interface {
	// Now returns the current time. The real clock's value carries a
	// monotonic reading, so Sub and Since between two Now values are
	// immune to wall-clock jumps.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that services use.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}
