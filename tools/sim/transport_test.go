package sim

import "testing"

// A fault striking a request names the runs of the rows it touches, so
// that the checker can tell a start slowed by it: an occurrence's run row
// names the occurrence's run id (seed 4099: its slowed claim went
// unexcused). The keys are from a simulated run's trace.
func TestTaskOfRowNamesOccurrences(t *testing.T) {
	for rk, want := range map[string]string{
		"r~t74":                      "t74",
		"id~t74":                     "t74",
		"0639085497626883662_t74":    "t74",
		"o~s100~2516293478525844075": "s100@2026-03-08T06:55:47.4155924Z",
	} {
		if got, ok := taskOfRow(rk); !ok || got != want {
			t.Errorf("taskOfRow(%q) = %q, %v; want %q", rk, got, ok, want)
		}
	}
	if got, ok := taskOfRow("x~queued~2516293478525844075~t74"); ok {
		t.Errorf("a state list row named %q; want none (its run row is in the same transaction)", got)
	}
}
