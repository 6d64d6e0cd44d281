package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// TestSnoozeExecHandler: an exec handler that is not ready exits 75 with
// "4s" as its last line; `status` shows the run snoozed until then, the
// task runs again no earlier than that, and it succeeds as its first
// attempt with no error recorded.
func TestSnoozeExecHandler(t *testing.T) {
	t.Parallel()
	record := `printf '%s %s %s %s %s start\n' "$LEASECRON_TASK_ID" "$LEASECRON_DUE" "$(date +%s%N)" "$FLEET_WORKER" "$LEASECRON_GENERATION" >> "$FLEET_RECORD"`
	f := startFleet(t, 2, map[string]any{"handlers": map[string]any{
		"snoozer": map[string]any{"exec": []string{"/bin/sh", "-c",
			`m="$FLEET_RECORD.$LEASECRON_TASK_ID"; if [ ! -e "$m" ]; then : > "$m"; echo "input not there yet"; echo 4s; exit 75; fi; ` + record}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := leaderClient(ctx, t, f)
	if _, err := cl.Schedule(ctx, leasecron.Item{ID: "snz1", Type: "snoozer", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	st := lcWaitStatus(ctx, t, f, "snz1", 30*time.Second, "snoozed", func(s lcStatus) bool {
		return s.Run != nil && s.Run.State == "snoozed" && !s.Run.SnoozedUntil.IsZero()
	})
	if st.Run.LastError != "" || st.Run.Attempts != 1 {
		t.Fatalf("snoozed run: %+v; want attempt 1 and no error", st.Run)
	}
	text := lcCLI(ctx, t, f, "status", "snz1")
	if !strings.Contains(text, "snoozed until") || !strings.Contains(text, "input not there yet") {
		t.Fatalf("status does not show the snooze:\n%s", text)
	}
	snoozedAt := st.Run.SnoozedUntil.Add(-4 * time.Second)
	lcWaitRecords(ctx, t, f, 30*time.Second, "snz1")
	starts := lcStarts(t, f, "snz1")
	if len(starts) != 1 {
		t.Fatalf("the task recorded %d runs after its snooze, want 1", len(starts))
	}
	if gap := starts[0].At.Sub(snoozedAt); gap < 4*time.Second-200*time.Millisecond {
		t.Fatalf("ran again %v after snoozing for 4s: early", gap)
	}
	t.Logf("ran again %v after the snooze (4s asked)", starts[0].At.Sub(snoozedAt).Round(time.Millisecond))
	lcWaitStatus(ctx, t, f, "snz1", 30*time.Second, "succeeded as the first attempt", func(s lcStatus) bool {
		return s.Run != nil && s.Run.State == "succeeded" && s.Run.Attempts == 1 && s.Run.LastError == ""
	})
}
