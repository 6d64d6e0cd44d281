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
// first occurrence after now. "@every" keeps its phase (due + k·interval).
// Cron rules are read on the wall clock of Loc, and across daylight-saving
// changes they behave as cronie's do:
//
//   - a rule with a fixed hour (no '*' in the hour field, e.g. "30 2 * * *")
//     whose time falls into the hour skipped when clocks go forward runs
//     once, at the first instant after the gap; whose time falls into the
//     hour repeated when clocks go back runs once, at its first instance;
//   - a rule with a wildcard or stepped hour ("*/15 * * * *", "0 */2 * * *")
//     follows real elapsed time: it fires at every instant whose wall-clock
//     reading matches, so it runs in both copies of a repeated hour, and
//     across a gap its next run is as far away in real time as the rule
//     says.
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

// next returns the first cron occurrence strictly after ref.
func (r Recurrence) next(ref time.Time) (time.Time, error) {
	loc := r.Loc
	if loc == nil {
		loc = time.UTC
	}
	if r.followsRealTime() {
		return r.nextReal(ref, loc)
	}
	return r.nextWall(ref, loc)
}

// followsRealTime reports whether the rule's hour field is a wildcard or a
// step ("*", "*/2", "1-23/2" is not): such rules follow elapsed time across
// daylight-saving changes, rules with fixed hours follow the wall clock.
func (r Recurrence) followsRealTime() bool {
	f := strings.Fields(r.Cron)
	return len(f) == 5 && strings.Contains(f[1], "*")
}

// wallUTC is the wall-clock reading of t in its location, expressed in UTC
// so that gronx steps through it without daylight-saving jumps.
func wallUTC(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// nextWall is next for a rule with fixed hours: the first wall-clock match
// after ref's reading; a wall time the day skips maps to the end of the
// gap, and one it repeats to its first instance.
func (r Recurrence) nextWall(ref time.Time, loc *time.Location) (time.Time, error) {
	wall := wallUTC(ref.In(loc))
	for range 8 {
		nw, err := gronx.NextTickAfter(r.Cron, wall, false)
		if err != nil {
			return time.Time{}, fmt.Errorf("cron %q after %s: %w", r.Cron, ref.UTC().Format(time.RFC3339), err)
		}
		if !nw.After(wall) {
			return time.Time{}, fmt.Errorf("cron %q: no occurrence found after %s", r.Cron, ref.UTC().Format(time.RFC3339))
		}
		t, ok := firstInstance(nw, loc)
		if !ok {
			// A wall time the day skips: read it with the offset before
			// the gap, which lands after it; the zone then in effect began
			// when the gap ended.
			_, off := t.Add(-6 * time.Hour).In(loc).Zone()
			t, _ = nw.Add(-time.Duration(off) * time.Second).In(loc).ZoneBounds()
		}
		if t.After(ref) {
			return t.UTC(), nil
		}
		wall = nw
	}
	return time.Time{}, fmt.Errorf("cron %q: no occurrence found after %s", r.Cron, ref.UTC().Format(time.RFC3339))
}

// Upcoming returns the first n occurrences of a series from its due time
// (the first is due itself), each in the series' own zone, so that their
// format shows the zone's offset. A rule that cannot be parsed yields its
// error.
func Upcoming(rule, tz string, due time.Time, n int) ([]time.Time, error) {
	r, err := ParseRecurrence(rule, tz)
	if err != nil || r.IsZero() || n <= 0 {
		return nil, err
	}
	loc := r.Loc
	if loc == nil {
		loc = time.UTC
	}
	out := []time.Time{due.In(loc)}
	for len(out) < n {
		next, err := r.Next(due, due)
		if err != nil {
			return out, err
		}
		out, due = append(out, next.In(loc)), next
	}
	return out, nil
}

// firstInstance returns the first instant whose wall-clock reading in loc
// is wall (a reading in UTC), or, when the day skips it, false and a
// nearby instant.
func firstInstance(wall time.Time, loc *time.Location) (time.Time, bool) {
	probe := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), wall.Nanosecond(), loc)
	_, before := probe.Add(-6 * time.Hour).In(loc).Zone()
	_, after := probe.Add(6 * time.Hour).In(loc).Zone()
	a, b := wall.Add(-time.Duration(before)*time.Second), wall.Add(-time.Duration(after)*time.Second)
	if b.Before(a) {
		a, b = b, a
	}
	for _, c := range []time.Time{a, b} {
		if wallUTC(c.In(loc)).Equal(wall) {
			return c, true
		}
	}
	return probe, false
}

// nextReal is next for a rule with a wildcard or stepped hour: the first
// instant after ref whose wall-clock reading matches, zone by zone.
func (r Recurrence) nextReal(ref time.Time, loc *time.Location) (time.Time, error) {
	t, incl := ref, false
	for range 16 {
		l := t.In(loc)
		_, off := l.Zone()
		_, end := l.ZoneBounds()
		wall := wallUTC(l)
		nw, err := gronx.NextTickAfter(r.Cron, wall, incl)
		if err != nil {
			return time.Time{}, fmt.Errorf("cron %q after %s: %w", r.Cron, ref.UTC().Format(time.RFC3339), err)
		}
		if nw.Before(wall) || !incl && !nw.After(wall) {
			return time.Time{}, fmt.Errorf("cron %q: no occurrence found after %s", r.Cron, ref.UTC().Format(time.RFC3339))
		}
		cand := nw.Add(-time.Duration(off) * time.Second)
		if end.IsZero() || cand.Before(end) {
			return cand.UTC(), nil
		}
		// The match lies beyond this zone's end: read on from the change.
		t, incl = end, true
	}
	return time.Time{}, fmt.Errorf("cron %q: no occurrence found after %s", r.Cron, ref.UTC().Format(time.RFC3339))
}
