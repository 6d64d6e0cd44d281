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
	clk.Advance(CountersKept + time.Hour) // the minute rows are gone after this pass
	if _, err := s.Clean(ctx); err != nil {
		t.Fatal(err)
	}
	if mins, _ := s.Minutes(ctx, clk.Now().Add(-72*time.Hour)); len(mins) != 0 {
		t.Errorf("minute rows kept beyond CountersKept: %d", len(mins))
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
