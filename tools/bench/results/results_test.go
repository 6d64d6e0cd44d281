package results

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	s := Summarize(xs)
	want := Summary{N: 10, Min: 1, P50: 5, P90: 9, P99: 10, Max: 10}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if xs[0] != 5 {
		t.Error("Summarize sorted its input in place")
	}
	if (Summarize(nil) != Summary{}) {
		t.Error("Summarize(nil) is not zero")
	}
}

func TestPercentileAndMedian(t *testing.T) {
	s := []float64{1, 2, 3, 4}
	for i, c := range []struct{ p, want float64 }{{0, 1}, {25, 1}, {26, 2}, {50, 2}, {75, 3}, {100, 4}} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if got := Percentile(s, c.p); got != c.want {
				t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
			}
		})
	}
	if Percentile(nil, 50) != 0 {
		t.Error("Percentile of nothing is not 0")
	}
	if got := Median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("Median even = %v, want 2.5", got)
	}
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("Median odd = %v, want 2", got)
	}
	if got := MedianRate([]Rate{{PerSec: 10}, {PerSec: 30}, {PerSec: 20}}); got != 20 {
		t.Errorf("MedianRate = %v, want 20", got)
	}
}

func TestNewRate(t *testing.T) {
	r := NewRate(500, 2*time.Second, nil)
	if r.PerSec != 250 || r.Seconds != 2 || r.N != 500 {
		t.Errorf("NewRate = %+v", r)
	}
	if NewRate(5, 0, nil).PerSec != 0 {
		t.Error("a zero duration gives a rate")
	}
}

func TestSteadyRate(t *testing.T) {
	// 100 items: a slow start (nothing for 5 s), then 10/s, then a tail.
	var pts []Point
	for s := 0; s <= 5; s++ {
		pts = append(pts, Point{X: float64(s)})
	}
	for i := 1; i <= 10; i++ {
		pts = append(pts, Point{X: 5 + float64(i), Y: float64(10 * i)})
	}
	if got := SteadyRate(pts, 100); got != 10 {
		t.Errorf("SteadyRate = %v, want 10 (the start-up is left out)", got)
	}
	// Too coarse: one sample at the end → overall rate.
	if got := SteadyRate([]Point{{}, {X: 4, Y: 100}}, 100); got != 25 {
		t.Errorf("coarse SteadyRate = %v, want 25", got)
	}
	if SteadyRate(nil, 100) != 0 || SteadyRate(pts, 0) != 0 {
		t.Error("SteadyRate of nothing is not 0")
	}
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	in := Failover{PollEverySeconds: 15, Samples: []FailoverSample{{LeaseSeconds: 60, Signal: "SIGKILL", Takeover: 61.5, NewGeneration: 3}}}
	if err := Write(dir, FailoverFile, in); err != nil {
		t.Fatal(err)
	}
	var out Failover
	if err := Read(dir, FailoverFile, &out); err != nil {
		t.Fatal(err)
	}
	if out.PollEverySeconds != 15 || len(out.Samples) != 1 || out.Samples[0] != in.Samples[0] {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
	if err := Read(dir, MoverFile, &Mover{}); !errors.Is(err, ErrMissing) {
		t.Errorf("reading a missing record: %v, want ErrMissing", err)
	}
}

func ExampleSummarize() {
	lateness := []float64{0.02, 0.01, 0.3, 0.05, 0.04}
	s := Summarize(lateness)
	fmt.Printf("n=%d p50=%.2fs p99=%.2fs max=%.2fs\n", s.N, s.P50, s.P99, s.Max)
	// Output: n=5 p50=0.04s p99=0.30s max=0.30s
}
