package schedule

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones work in containers without /usr/share/zoneinfo

	"github.com/adhocore/gronx"
)

// MinEvery is the shortest interval "@every" accepts.
const MinEvery = time.Second

// descriptors are the "@name" shorthands accepted as recurrences.
var descriptors = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// ErrBadRecurrence is wrapped by every recurrence and time-zone error.
var ErrBadRecurrence = errors.New("bad recurrence")

const recurrenceHelp = `accepted: "@every <duration>" (Go duration, at least 1s, e.g. "@every 10m"), ` +
	`a 5-field cron expression "minute hour day-of-month month day-of-week" (e.g. "*/15 9-17 * * MON-FRI"), ` +
	`or @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly`

// Recurrence is a parsed recurrence rule. The zero value means "no
// recurrence" (a one-off task).
type Recurrence struct {
	// Rule is the rule as given.
	Rule string
	// Every is the interval of an "@every" rule, else 0.
	Every time.Duration
	// Cron is the 5-field cron expression of a cron or descriptor rule.
	Cron string
	// Loc is the zone cron fields are read in (UTC when TZ is empty).
	Loc *time.Location
}

// IsZero reports whether r is "no recurrence".
func (r Recurrence) IsZero() bool { return r.Every == 0 && r.Cron == "" }

// ParseRecurrence parses a recurrence rule and its IANA time zone. An empty
// rule is a one-off (zero Recurrence). tz applies to cron rules only (empty
// means UTC; "Local" is refused because it differs between machines); it is
// still validated when given with an "@every" rule, where it has no effect.
func ParseRecurrence(rule, tz string) (Recurrence, error) {
	loc, err := loadTZ(tz)
	if err != nil {
		return Recurrence{}, err
	}
	rule = strings.TrimSpace(rule)
	if rule == "" {
		return Recurrence{}, nil
	}
	r := Recurrence{Rule: rule, Loc: loc}
	lower := strings.ToLower(rule)
	if rest, ok := strings.CutPrefix(lower, "@every"); ok {
		ds := strings.TrimSpace(rest)
		if ds == "" || len(rest) == len(strings.TrimLeft(rest, " \t")) {
			return Recurrence{}, fmt.Errorf("%w %q: want \"@every <duration>\"; %s", ErrBadRecurrence, rule, recurrenceHelp)
		}
		d, err := time.ParseDuration(ds)
		if err != nil {
			return Recurrence{}, fmt.Errorf("%w %q: interval %q is not a Go duration (e.g. 90s, 10m, 1h30m); %s", ErrBadRecurrence, rule, ds, recurrenceHelp)
		}
		if d < MinEvery {
			return Recurrence{}, fmt.Errorf("%w %q: interval %s is shorter than the minimum %s", ErrBadRecurrence, rule, d, MinEvery)
		}
		r.Every = d
		return r, nil
	}
	expr := rule
	if strings.HasPrefix(rule, "@") {
		e, ok := descriptors[lower]
		if !ok {
			return Recurrence{}, fmt.Errorf("%w %q: unknown descriptor; %s", ErrBadRecurrence, rule, recurrenceHelp)
		}
		expr = e
	}
	if n := len(strings.Fields(expr)); n != 5 {
		return Recurrence{}, fmt.Errorf("%w %q: cron expression has %d fields, want 5 (seconds and year fields are not supported); %s", ErrBadRecurrence, rule, n, recurrenceHelp)
	}
	expr = strings.Join(strings.Fields(expr), " ")
	if !gronx.IsValid(expr) {
		return Recurrence{}, fmt.Errorf("%w %q: invalid cron expression; %s", ErrBadRecurrence, rule, recurrenceHelp)
	}
	r.Cron = expr
	// A syntactically valid expression may never fire (e.g. "0 0 30 2 *").
	probe := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := r.next(probe); err != nil {
		return Recurrence{}, fmt.Errorf("%w %q: the expression never fires: %w", ErrBadRecurrence, rule, err)
	}
	return r, nil
}

func loadTZ(tz string) (*time.Location, error) {
	tz = strings.TrimSpace(tz)
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if strings.EqualFold(tz, "local") {
		return nil, fmt.Errorf("%w: time zone %q differs between machines; name an IANA zone such as Europe/Berlin or America/New_York (or UTC)", ErrBadRecurrence, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown time zone %q; want an IANA zone name such as Europe/Berlin, America/New_York or UTC", ErrBadRecurrence, tz)
	}
	return loc, nil
}

// Next returns the next occurrence after a run that was due at due and is
// being moved at now: the first occurrence strictly after max(due, now).
// Occurrences missed while no leader was moving (now well after due) are not
// replayed: the overdue run is enqueued once and the series resumes at the
// first occurrence after now. "@every" keeps its phase (due + k·interval);
// cron rules are evaluated on the wall clock of Loc: occurrences that fall
// into a daylight-saving gap run once, when the gap ends, and the hour that
// repeats when clocks go back is not repeated (an occurrence in it runs at
// its first instance only).
func (r Recurrence) Next(due, now time.Time) (time.Time, error) {
	ref := due
	if now.After(ref) {
		ref = now
	}
	if r.Every > 0 {
		gap := ref.Sub(due)
		if gap == math.MaxInt64 || gap < 0 {
			return ref.Add(r.Every).UTC(), nil
		}
		k := gap/r.Every + 1
		return due.Add(k * r.Every).UTC(), nil
	}
	if r.Cron == "" {
		return time.Time{}, fmt.Errorf("no recurrence")
	}
	return r.next(ref)
}

// next returns the first cron occurrence strictly after ref, evaluating the
// expression on the wall clock of r.Loc.
func (r Recurrence) next(ref time.Time) (time.Time, error) {
	loc := r.Loc
	if loc == nil {
		loc = time.UTC
	}
	l := ref.In(loc)
	// The wall-clock reading of ref, expressed in UTC so that gronx steps
	// through it without daylight-saving jumps.
	wall := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
	for range 8 {
		nw, err := gronx.NextTickAfter(r.Cron, wall, false)
		if err != nil {
			return time.Time{}, fmt.Errorf("cron %q after %s: %w", r.Cron, ref.UTC().Format(time.RFC3339), err)
		}
		if !nw.After(wall) {
			return time.Time{}, fmt.Errorf("cron %q: no occurrence found after %s", r.Cron, ref.UTC().Format(time.RFC3339))
		}
		t := time.Date(nw.Year(), nw.Month(), nw.Day(), nw.Hour(), nw.Minute(), 0, 0, loc)
		if l := t.In(loc); l.Hour() != nw.Hour() || l.Minute() != nw.Minute() {
			// The wall time falls into a daylight-saving gap: run when the
			// gap ends (read the wall time with the offset before the gap).
			_, off := t.Add(-12 * time.Hour).In(loc).Zone()
			t = nw.Add(-time.Duration(off) * time.Second)
		}
		if t.After(ref) {
			return t.UTC(), nil
		}
		wall = nw
	}
	return time.Time{}, fmt.Errorf("cron %q: no occurrence found after %s", r.Cron, ref.UTC().Format(time.RFC3339))
}
