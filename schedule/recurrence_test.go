package schedule

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseRecurrenceAccepts(t *testing.T) {
	for _, c := range []struct{ rule, tz string }{
		{"", ""}, {"@every 10m", ""}, {"@every 1h30m", "Europe/Berlin"}, {"@EVERY 1s", ""},
		{"*/5 * * * *", ""}, {"0 9 * * MON-FRI", "Europe/Berlin"}, {" 0  9 * * 1-5 ", "UTC"},
		{"@hourly", ""}, {"@DAILY", "Asia/Tokyo"}, {"@midnight", ""}, {"@weekly", ""}, {"@monthly", ""},
		{"@yearly", ""}, {"@annually", ""}, {"0 0 29 2 *", ""},
	} {
		t.Run(c.rule, func(t *testing.T) {
			if _, err := ParseRecurrence(c.rule, c.tz); err != nil {
				t.Errorf("ParseRecurrence(%q, %q): %v", c.rule, c.tz, err)
			}
		})
	}
}

func TestParseRecurrenceRefuses(t *testing.T) {
	for _, c := range []struct{ rule, tz, want string }{
		{"@every", "", "@every <duration>"},
		{"@every10m", "", "@every <duration>"},
		{"@every 500ms", "", "shorter than the minimum 1s"},
		{"@every -5m", "", "shorter than the minimum"},
		{"@every soon", "", "not a Go duration"},
		{"* * * *", "", "has 4 fields, want 5"},
		{"0 * * * * *", "", "has 6 fields, want 5"},
		{"61 * * * *", "", "invalid cron expression"},
		{"0 25 * * *", "", "invalid cron expression"},
		{"@reboot", "", "unknown descriptor"},
		{"@5minutes", "", "unknown descriptor"},
		{"0 0 30 2 *", "", "never fires"},
		{"@hourly", "Mars/Olympus_Mons", "unknown time zone"},
		{"@hourly", "Local", "differs between machines"},
		{"", "Nowhere/City", "unknown time zone"},
	} {
		t.Run(c.rule, func(t *testing.T) {
			_, err := ParseRecurrence(c.rule, c.tz)
			if !errors.Is(err, ErrBadRecurrence) {
				t.Errorf("ParseRecurrence(%q, %q) = %v, want ErrBadRecurrence", c.rule, c.tz, err)
				return
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("ParseRecurrence(%q, %q) = %q, want it to say %q", c.rule, c.tz, err, c.want)
			}
			named := c.rule
			if c.tz != "" && c.rule == "@hourly" || c.rule == "" {
				named = c.tz
			}
			if !strings.Contains(err.Error(), named) {
				t.Errorf("error %q does not name the bad value %q", err, named)
			}
		})
	}
}

func mustRec(t *testing.T, rule, tz string) Recurrence {
	t.Helper()
	r, err := ParseRecurrence(rule, tz)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestNextEvery(t *testing.T) {
	r := mustRec(t, "@every 10m", "")
	for _, c := range []struct{ due, now, want string }{
		{"2025-01-01T10:00:00Z", "2025-01-01T10:00:00Z", "2025-01-01T10:10:00Z"},     // on time
		{"2025-01-01T10:00:00Z", "2025-01-01T10:05:00Z", "2025-01-01T10:10:00Z"},     // a little late
		{"2025-01-01T10:00:00Z", "2025-01-01T10:10:00Z", "2025-01-01T10:20:00Z"},     // strictly after now
		{"2025-01-01T10:00:00Z", "2025-01-01T13:07:00Z", "2025-01-01T13:10:00Z"},     // missed ticks run once, phase kept
		{"2025-01-01T10:00:03Z", "2025-01-01T10:00:00Z", "2025-01-01T10:10:03Z"},     // enqueued early
		{"2025-01-01T10:00:00.5Z", "2025-01-01T10:00:01Z", "2025-01-01T10:10:00.5Z"}, // sub-second phase
		{"0001-01-01T00:00:00Z", "2025-01-01T10:00:00Z", "2025-01-01T10:10:00Z"},     // gap beyond time.Duration
	} {
		t.Run(c.due, func(t *testing.T) {
			got, err := r.Next(utc(c.due), utc(c.now))
			if err != nil || !got.Equal(utc(c.want)) {
				t.Errorf("Next(%s, %s) = %s, %v; want %s", c.due, c.now, got, err, c.want)
			}
		})
	}
}

func TestNextCron(t *testing.T) {
	cases := []struct{ rule, tz, due, now, want string }{
		{"*/15 * * * *", "", "2025-01-01T10:00:00Z", "2025-01-01T10:00:30Z", "2025-01-01T10:15:00Z"},
		{"*/15 * * * *", "", "2025-01-01T10:00:00Z", "2025-01-01T13:07:00Z", "2025-01-01T13:15:00Z"}, // missed: once
		{"*/15 * * * *", "", "2025-01-01T10:15:00Z", "2025-01-01T10:14:58Z", "2025-01-01T10:30:00Z"}, // early
		{"@hourly", "", "2025-01-01T10:00:00Z", "2025-01-01T10:00:00Z", "2025-01-01T11:00:00Z"},
		{"0 9 * * *", "Europe/Berlin", "2025-01-10T08:00:00Z", "2025-01-10T08:00:00Z", "2025-01-11T08:00:00Z"}, // CET
		{"0 9 * * *", "Europe/Berlin", "2025-07-10T07:00:00Z", "2025-07-10T07:00:00Z", "2025-07-11T07:00:00Z"}, // CEST
		{"0 9 * * MON-FRI", "America/New_York", "2025-01-03T14:00:00Z", "2025-01-03T14:00:00Z", "2025-01-06T14:00:00Z"},
		{"0 0 29 2 *", "", "2024-02-29T00:00:00Z", "2025-03-01T00:00:00Z", "2028-02-29T00:00:00Z"},
		// Spring forward in New York: 02:30 does not exist on 2025-03-09; it runs when the gap ends, 03:00 EDT.
		{"30 2 * * *", "America/New_York", "2025-03-08T07:30:00Z", "2025-03-08T07:30:00Z", "2025-03-09T07:00:00Z"},
		{"30 2 * * *", "America/New_York", "2025-03-09T07:00:00Z", "2025-03-09T07:00:00Z", "2025-03-10T06:30:00Z"},
		// Fall back: 01:30 happens twice on 2025-11-02; it runs once (EDT).
		{"30 1 * * *", "America/New_York", "2025-11-01T05:30:00Z", "2025-11-01T05:30:00Z", "2025-11-02T05:30:00Z"},
		{"30 1 * * *", "America/New_York", "2025-11-02T05:30:00Z", "2025-11-02T05:30:00Z", "2025-11-03T06:30:00Z"},
	}
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := mustRec(t, c.rule, c.tz)
			got, err := r.Next(utc(c.due), utc(c.now))
			if err != nil || !got.Equal(utc(c.want)) {
				t.Errorf("%q in %q: Next(%s, %s) = %s, %v; want %s", c.rule, c.tz, c.due, c.now, got, err, c.want)
			}
		})
	}
}

func TestNextIsAlwaysAfterBoth(t *testing.T) {
	rules := []struct{ rule, tz string }{{"@every 7s", ""}, {"*/1 * * * *", "Europe/London"}, {"0 */3 * * *", "Australia/Lord_Howe"}}
	start := utc("2025-03-28T00:00:00Z")
	for i, rr := range rules {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			r := mustRec(t, rr.rule, rr.tz)
			due := start
			for i := range 2000 {
				now := due.Add(time.Duration(i%5) * time.Second)
				next, err := r.Next(due, now)
				if err != nil {
					t.Fatal(err)
				}
				if !next.After(due) || !next.After(now) {
					t.Fatalf("%s: Next(%s, %s) = %s is not after both", rr.rule, due, now, next)
				}
				due = next
			}
		})
	}
}
