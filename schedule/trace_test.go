package schedule

import (
	"fmt"
	"testing"
)

// A row's TraceParent, as any program may set it, reaches the envelope
// (every occurrence of a series carries the series'); a malformed one is
// dropped without setting the task aside.
func TestMoverCarriesTraceParent(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := newMoverEnv(t, 1, MoverOptions{})
	_ = e.mt.PutRaw("00", mustKey(t0.Add(-2), "traced"), map[string]any{"Message": "", "TraceParent": tp})
	_ = e.mt.PutRaw("00", mustKey(t0.Add(-1), "garbled"), map[string]any{"Message": "", "TraceParent": "not-a-traceparent"})
	_ = e.mt.PutRaw("00", mustKey(t0, "series"), map[string]any{"Message": "", "Recurrence": "@every 1h", "TraceParent": tp})
	if err := e.onePass(t); err != nil {
		t.Fatal(err)
	}
	traced, ok1 := e.q.byID("traced")
	garbled, ok2 := e.q.byID("garbled")
	occ, ok3 := e.q.byID("series@" + t0.UTC().Format("2006-01-02T15:04:05Z07:00"))
	if !ok1 || !ok2 || !ok3 {
		t.Fatalf("moved: %v %v %v", ok1, ok2, ok3)
	}
	if traced.env.TraceParent != tp || garbled.env.TraceParent != "" || occ.env.TraceParent != tp || occ.env.Series != "series" {
		t.Fatalf("envelopes: %q, %q, %q", traced.env.TraceParent, garbled.env.TraceParent, occ.env.TraceParent)
	}
	next := itemKeys(e.mt)
	if len(next) != 1 {
		t.Fatalf("rows after the pass: %v", next)
	}
	if got, err := e.c.Get(ctx(t), "series"); err != nil || got.TraceParent != tp {
		t.Fatalf("next occurrence: %+v, %v", got, err)
	}
}

func TestValidTraceParent(t *testing.T) {
	for tp, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz": true, // a later version, read leniently
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":     false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":     false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":     false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7":        false,
		"": false,
	} {
		t.Run(fmt.Sprint(tp), func(t *testing.T) {
			if got := ValidTraceParent(tp); got != want {
				t.Errorf("ValidTraceParent(%q) = %v", tp, got)
			}
		})
	}
}
