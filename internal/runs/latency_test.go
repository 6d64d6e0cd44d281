package runs

import (
	"context"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/table"
)

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 {
		t.Error("an empty histogram has a median")
	}
	for range 90 {
		h.Observe(150 * time.Millisecond) // (0.1, 0.25]
	}
	for range 10 {
		h.Observe(2 * time.Hour) // beyond every bound
	}
	if p50 := h.Quantile(0.5); p50 <= 100*time.Millisecond || p50 > 250*time.Millisecond {
		t.Errorf("p50 %s, want within (100ms, 250ms]", p50)
	}
	if p99 := h.Quantile(0.99); p99 != 30*time.Minute {
		t.Errorf("p99 %s, want the unbounded bucket's lower bound 30m", p99)
	}
	if h.Count() != 100 {
		t.Errorf("count %d", h.Count())
	}
}

// The histograms ride in the per-minute counters rows; the cleaning pass
// rolls ended hours up into hourly rows, which outlive the minute rows.
func TestLatencyRollsUpIntoHours(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 26, 10, 15, 0, 0, time.UTC))
	mt := table.NewMemory("", clk)
	o := Options{Clock: clk}
	_ = o.fill()
	s := &Store{t: mt, o: o}
	ctx := context.Background()
	var l Latency
	for range 10 {
		l.Wait.Observe(40 * time.Millisecond)
		l.Run.Observe(3 * time.Second)
	}
	c := Counters{Instance: "w1", ByType: map[string]Counts{"mail": {Handled: 10}}, Total: Counts{Handled: 10}, Lat: map[string]Latency{"mail": l}}
	if err := s.FlushCounters(ctx, c); err != nil {
		t.Fatal(err)
	}
	mins, err := s.Minutes(ctx, clk.Now().Add(-time.Hour))
	if err != nil || len(mins) != 1 || mins[0].Latency["mail"].Run.Count() != 10 || mins[0].ByType["mail"].Handled != 10 {
		t.Fatalf("minutes: %+v %v", mins, err)
	}
	clk.Advance(time.Hour) // 11:15: the 10:00 hour has ended
	if _, err := s.Clean(ctx); err != nil {
		t.Fatal(err)
	}
	fives, fthrough, err := s.Fives(ctx, clk.Now().Add(-6*time.Hour))
	if err != nil || len(fives) != 1 || !fives[0].At.Equal(time.Date(2026, 11, 26, 10, 15, 0, 0, time.UTC)) ||
		fives[0].ByType["mail"].Handled != 10 || fives[0].Latency["mail"].Run.Count() != 10 || !fthrough.Equal(time.Date(2026, 11, 26, 11, 0, 0, 0, time.UTC)) {
		t.Fatalf("five-minute roll-ups: %+v through %s, %v", fives, fthrough, err)
	}
	clk.Advance(CountersKept + time.Hour) // the minute rows are gone after this pass
	if _, err := s.Clean(ctx); err != nil {
		t.Fatal(err)
	}
	if mins, _ := s.Minutes(ctx, clk.Now().Add(-72*time.Hour)); len(mins) != 0 {
		t.Errorf("minute rows kept beyond CountersKept: %d", len(mins))
	}
	if fives, _, _ := s.Fives(ctx, time.Time{}); len(fives) != 0 {
		t.Errorf("five-minute rows kept beyond FivesKept: %d", len(fives))
	}
	hours, through, err := s.Hours(ctx, clk.Now().Add(-7*24*time.Hour))
	if err != nil || len(hours) != 1 {
		t.Fatalf("hours: %+v %v", hours, err)
	}
	h := hours[0]
	if !h.At.Equal(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)) || h.ByType["mail"].Handled != 10 || h.Latency["mail"].Wait.Count() != 10 {
		t.Errorf("the 10:00 hour: %+v", h)
	}
	if !through.After(h.At) {
		t.Errorf("rolled up through %s, want after %s", through, h.At)
	}
	clk.Advance(HoursKept)
	if _, err := s.Clean(ctx); err != nil {
		t.Fatal(err)
	}
	if hours, _, _ := s.Hours(ctx, time.Time{}); len(hours) != 0 {
		t.Errorf("hourly rows kept beyond HoursKept: %d", len(hours))
	}
}

// The last 24 hours' counts are read from the per-instance hourly rows and
// the minute rows since the last roll-up: two queries instead of one per
// 1,000 minute rows, and the same counts to the hour.
func TestDayCountsFromInstanceHours(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 26, 0, 0, 30, 0, time.UTC))
	mt := table.NewMemory("", clk)
	o := Options{Clock: clk, Version: "v9"}
	_ = o.fill()
	s := &Store{t: mt, o: o}
	ctx := context.Background()
	// Two workers count one run a minute each for 30 hours.
	var c1, c2 Counters
	for i := range 30 * 60 {
		c1.Instance, c2.Instance = "w1", "w2"
		c1.Total.Handled++
		c1.ByType = map[string]Counts{"mail": c1.Total}
		c2.Total.Failed++
		c2.ByType = map[string]Counts{"sync": c2.Total}
		if err := s.FlushCounters(ctx, c1); err != nil {
			t.Fatal(err)
		}
		if err := s.FlushCounters(ctx, c2); err != nil {
			t.Fatal(err)
		}
		if i%600 == 599 {
			if err := s.RollUp(ctx); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute)
	}
	if err := s.RollUp(ctx); err != nil {
		t.Fatal(err)
	}
	// Reference: the minute rows of the same window, summed directly.
	first := clk.Now().Add(-statsWindow).Truncate(time.Hour).Add(time.Hour)
	var want Counters
	if err := s.minuteRows(ctx, first, false, func(_ time.Time, _ string, c Counters) { want.add(c) }); err != nil {
		t.Fatal(err)
	}
	before := mt.Requests()
	sum, err := s.SumCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := mt.Requests() - before; n > 4 {
		t.Errorf("the day's counts cost %d requests, want at most 4", n)
	}
	if sum.Total != want.Total || sum.ByType["mail"] != want.ByType["mail"] || sum.Instances != 2 {
		t.Errorf("sum %+v, want %+v from 2 instances", sum, want)
	}
	if sum.Total.Handled < 23*60 || sum.Total.Handled > 24*60 {
		t.Errorf("%d runs of w1 in the day, want 23 to 24 hours' worth", sum.Total.Handled)
	}
	list, err := s.ListCounters(ctx)
	if err != nil || len(list) != 2 || list[0].Instance != "w1" || list[0].Total.Handled != want.Total.Handled || list[1].Total.Failed != want.Total.Failed {
		t.Errorf("per instance: %+v %v", list, err)
	}
	// The hourly rows are kept a little over a day.
	clk.Advance(InstanceHoursKept + time.Hour)
	if err := s.RollUp(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, _ := table.All(ctx, mt, table.Query{Partition: instHourPK}, 0); len(rows) > 2*3 {
		t.Errorf("%d per-instance hourly rows kept", len(rows))
	}
}

// The day partitions a window of minute rows is read from, which the
// pages' request counts depend on.
func TestDayPartitions(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		now    string
		window time.Duration
		want   int
	}{
		{"2026-11-26T12:00:00Z", time.Hour, 1},
		{"2026-11-27T00:27:00Z", time.Hour, 2}, // the last hour began yesterday
		{"2026-11-26T01:00:00Z", time.Hour, 1},
		{"2026-11-26T23:59:30Z", time.Hour, 2}, // read to a minute past now: tomorrow
		{"2026-11-26T12:00:00Z", 24 * time.Hour, 2},
		{"2026-11-27T00:27:00Z", 24 * time.Hour, 2},
		{"2026-11-26T23:59:30Z", 24 * time.Hour, 3},
		{"2026-11-26T14:00:00+02:00", time.Hour, 1}, // counted in UTC
	} {
		now := at(c.now)
		if got := DayPartitions(now.Add(-c.window), now); got != c.want {
			t.Errorf("%s, last %s: %d partitions, want %d", c.now, c.window, got, c.want)
		}
	}
	// Beyond the usual (one more than a window's whole days), for the
	// overview's two windows.
	for now, want := range map[string]int{"2026-11-26T12:00:00Z": 0, "2026-11-27T00:27:00Z": 1, "2026-11-26T23:59:30Z": 2} {
		if got := ExtraDayPartitions(at(now), time.Hour, 24*time.Hour); got != want {
			t.Errorf("%s: %d extra partitions for the last hour and 24 hours, want %d", now, got, want)
		}
	}
}
