package schedule

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/adhocore/gronx"
)

// dstTransitions are the 2026 daylight-saving changes the table test
// crosses: clocks forward and back in New York and Amsterdam, and Lord
// Howe Island's half-hour shifts.
var dstTransitions = []struct {
	zone string
	day  string // local date of the change
}{
	{"America/New_York", "2026-03-08"}, {"America/New_York", "2026-11-01"},
	{"Europe/Amsterdam", "2026-03-29"}, {"Europe/Amsterdam", "2026-10-25"},
	{"Australia/Lord_Howe", "2026-04-05"}, {"Australia/Lord_Howe", "2026-10-04"},
}

// TestCronAcrossDST checks every occurrence of fixed-time, wildcard-hour and
// stepped rules across each transition against an oracle that states the
// rules directly: a fixed-hour rule fires once per matching wall time — at
// its first instance when the wall time repeats, at the end of the gap when
// it is skipped; a wildcard or stepped rule fires at every instant whose
// wall reading matches.
func TestCronAcrossDST(t *testing.T) {
	rules := []string{
		"30 2 * * *", "0 2 * * *", "30 1 * * *", "0 1 * * *", "15 3 * * *", "45 2 * * 0", // fixed
		"0 * * * *", "*/15 * * * *", "45 * * * *", "*/10 * * * *", // wildcard hour
		"0 */2 * * *", "*/20 */3 * * *", "30 1-23/2 * * *", // stepped
	}
	for _, tr := range dstTransitions {
		loc, err := time.LoadLocation(tr.zone)
		if err != nil {
			t.Fatal(err)
		}
		day, _ := time.ParseInLocation("2006-01-02", tr.day, loc)
		from, to := day.Add(-30*time.Hour), day.Add(54*time.Hour)
		for _, rule := range rules {
			t.Run(fmt.Sprintf("%s %s %s", tr.zone, tr.day, rule), func(t *testing.T) {
				r := mustRec(t, rule, tr.zone)
				want := oracle(t, rule, loc, from, to)
				var got []time.Time
				for ref := from; ; {
					next, err := r.Next(ref, ref)
					if err != nil {
						t.Fatal(err)
					}
					if !next.Before(to) {
						break
					}
					got = append(got, next)
					ref = next
				}
				if !slices.EqualFunc(got, want, time.Time.Equal) {
					t.Errorf("occurrences in %s:\n got %s\nwant %s", tr.zone, show(got, loc), show(want, loc))
				}
			})
		}
	}
}

// oracle lists the occurrences of rule in (from, to) by brute force over
// every minute.
func oracle(t *testing.T, rule string, loc *time.Location, from, to time.Time) []time.Time {
	t.Helper()
	g := gronx.New()
	matches := func(wall time.Time) bool {
		ok, err := g.IsDue(rule, wall)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	var out []time.Time
	if r := mustRec(t, rule, loc.String()); r.followsRealTime() {
		for at := from.Add(time.Minute); at.Before(to); at = at.Add(time.Minute) {
			if matches(wallUTC(at.In(loc))) {
				out = append(out, at.UTC())
			}
		}
		return out
	}
	// Fixed hours: walk the wall clock, find each matching wall time's
	// instants by scanning, and map it by the rules.
	seen := map[time.Time]bool{}
	for w := wallUTC(from.In(loc)).Add(time.Minute); w.Before(wallUTC(to.In(loc))); w = w.Add(time.Minute) {
		if !matches(w) {
			continue
		}
		var at time.Time
		for c := w.Add(-15 * time.Hour); c.Before(w.Add(15 * time.Hour)); c = c.Add(time.Minute) {
			if wallUTC(c.In(loc)).Equal(w) {
				at = c // the first instance
				break
			}
		}
		if at.IsZero() { // skipped: the first instant after the gap
			for c := w.Add(-15 * time.Hour); ; c = c.Add(time.Minute) {
				if wallUTC(c.In(loc)).After(w) {
					at = c
					break
				}
			}
		}
		if at.After(from) && at.Before(to) && !seen[at] {
			seen[at] = true
			out = append(out, at.UTC())
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

func show(ts []time.Time, loc *time.Location) string {
	s := ""
	for _, x := range ts {
		s += " " + x.In(loc).Format("01-02T15:04-07:00")
	}
	return s
}

// The examples of the design: cronie's answers in New York in 2026.
func TestCronDSTExamples(t *testing.T) {
	cases := []struct{ rule, after, want string }{
		// 02:30 does not exist on 2026-03-08: run at the end of the gap, 03:00 EDT.
		{"30 2 * * *", "2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z"},
		// 01:45 EDT, then 01:00 EST (15 minutes later), not 02:00 EST.
		{"*/15 * * * *", "2026-11-01T05:45:00Z", "2026-11-01T06:00:00Z"},
		// 00:00 EDT... 01:00 EDT, then 01:00 EST.
		{"0 * * * *", "2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z"},
		// A fixed 01:30 runs at its first instance only: EDT, then the next day.
		{"30 1 * * *", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		// Spring forward: 01:45 EST, then 03:00 EDT, 15 real minutes later.
		{"*/15 * * * *", "2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z"},
	}
	for _, c := range cases {
		t.Run(c.rule+" after "+c.after, func(t *testing.T) {
			r := mustRec(t, c.rule, "America/New_York")
			got, err := r.Next(utc(c.after), utc(c.after))
			if err != nil || !got.Equal(utc(c.want)) {
				t.Errorf("Next = %s, %v; want %s", got, err, c.want)
			}
		})
	}
}

// TestAzureSeriesAcrossDST moves two New York series through the night
// clocks go back, pass by pass on the fake clock, over Azurite: the
// every-30-minutes series runs at every half hour of real time (both
// copies of 01:00–02:00), the fixed 01:30 series once a night; no
// occurrence is sent twice and none is missed.
func TestAzureSeriesAcrossDST(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	start := utc("2026-10-31T04:00:00Z") // 00:00 EDT, the day before
	a.fc.Advance(start.Sub(t0))
	end := utc("2026-11-02T12:00:00Z")
	for _, it := range []Item{
		{ID: "half", Due: start, Recurrence: "*/30 * * * *", TZ: "America/New_York"},
		{ID: "fixed", Due: utc("2026-10-31T05:30:00Z"), Recurrence: "30 1 * * *", TZ: "America/New_York"},
	} {
		if _, err := a.c.Add(ctx(t), it, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	q := &fakeQueue{}
	m := a.mover(t, 3, q, MoverOptions{MoverSettings: MoverSettings{PollEvery: 5 * time.Minute, Early: 10 * time.Minute}})
	if err := m.takeFence(ctx(t), "00", 3); err != nil {
		t.Fatal(err)
	}
	for a.fc.Now().Before(end) {
		if _, err := m.pass(ctx(t), 3); err != nil {
			t.Fatal(err)
		}
		a.fc.Advance(5 * time.Minute)
	}
	loc, _ := time.LoadLocation("America/New_York")
	for _, c := range []struct{ id, rule string }{{"half", "*/30 * * * *"}, {"fixed", "30 1 * * *"}} {
		var got []time.Time
		seen := map[time.Time]bool{}
		for _, s := range q.sentFor(c.id) {
			if seen[s.env.Due] {
				t.Errorf("%s: the occurrence due %s was sent twice", c.id, s.env.Due.In(loc))
			}
			seen[s.env.Due] = true
			if s.env.Due.Before(end) {
				got = append(got, s.env.Due.UTC())
			}
		}
		slices.SortFunc(got, time.Time.Compare)
		want := oracle(t, c.rule, loc, start.Add(-time.Minute), end)
		if !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("%s sent\n %s\nwant\n %s", c.id, show(got, loc), show(want, loc))
		}
	}
}
