package schedule

import (
	"fmt"
	"strings"
	"time"
)

// When is a due time and recurrence as a person types them: the CLI's
// --at/--in and --every/--cron/--tz flags, the dashboard's schedule form.
// Both turn it into an Item the same way, through Resolve.
type When struct {
	// At is an RFC 3339 due time; In a delay from now. At most one.
	At, In string
	// Every is an interval ("10m"); Cron a 5-field expression or a
	// descriptor (@hourly) evaluated in TZ. At most one of the two.
	Every, Cron, TZ string
}

// Resolve returns the due time and the recurrence rule ("" for a one-off).
// Without At or In a one-off is due now and a recurring series at its
// first occurrence from now (on a whole second, so that run ids read
// cleanly). Errors wrap ErrInvalid or ErrBadRecurrence and name the bad
// value.
func (w When) Resolve(now time.Time) (due time.Time, rule string, err error) {
	every, cron, tz := strings.TrimSpace(w.Every), strings.TrimSpace(w.Cron), strings.TrimSpace(w.TZ)
	if every != "" && cron != "" {
		return time.Time{}, "", fmt.Errorf("%w: give --every (%q) or --cron (%q), not both", ErrInvalid, every, cron)
	}
	if tz != "" && cron == "" {
		return time.Time{}, "", fmt.Errorf("%w: --tz applies to --cron only (got --tz %q without --cron)", ErrInvalid, tz)
	}
	rule = cron
	if every != "" {
		rule = "@every " + every
	}
	if due, err = ParseWhen(w.At, w.In, now); err != nil {
		return time.Time{}, "", err
	}
	if rule != "" && strings.TrimSpace(w.At) == "" && strings.TrimSpace(w.In) == "" {
		r, err := ParseRecurrence(rule, tz)
		if err != nil {
			return time.Time{}, "", err
		}
		if due, err = r.Next(now.Truncate(time.Second), now); err != nil {
			return time.Time{}, "", err
		}
	}
	return due, rule, nil
}
