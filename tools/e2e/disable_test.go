package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// TestDisableEnableSeriesCLI: a series of @every 2s runs; `leasecron
// disable` stops it — `status` says disabled and no occurrence due after
// the disable runs for 8 s, not even one the mover had sent early — and
// `leasecron enable` starts it again from its next occurrence.
func TestDisableEnableSeriesCLI(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := leaderClient(ctx, t, f)
	if _, err := cl.Schedule(ctx, leasecron.Item{ID: "beat", Type: "rec", Recurrence: "@every 2s", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	occurrences := func(after time.Time) []fleet.Record {
		rs, err := f.Records()
		if err != nil {
			t.Fatal(err)
		}
		var out []fleet.Record
		for id, starts := range fleet.Starts(rs) {
			if strings.HasPrefix(id, "beat@") && starts[0].Due.After(after) {
				out = append(out, starts[0])
			}
		}
		return out
	}
	for len(occurrences(time.Time{})) < 2 {
		if ctx.Err() != nil {
			t.Fatal("the series never ran twice")
		}
		time.Sleep(200 * time.Millisecond)
	}
	out := lcCLI(ctx, t, f, "disable", "beat")
	disabled := time.Now()
	if !strings.Contains(out, "beat disabled since") {
		t.Fatalf("disable printed %q", out)
	}
	if st := lcCLI(ctx, t, f, "status", "beat"); !strings.Contains(st, "disabled") || !strings.Contains(st, "leasecron enable beat") {
		t.Fatalf("status of a disabled series:\n%s", st)
	}
	time.Sleep(8 * time.Second)
	if ran := occurrences(disabled); len(ran) > 0 {
		t.Fatalf("%d occurrences due after the disable ran while disabled: %+v", len(ran), ran)
	}
	if _, _, code := lcRun(ctx, f, nil, "disable", "nope"); code != 3 {
		t.Errorf("disable of an unknown id exited %d, want 3 (not found)", code)
	}
	out = lcCLI(ctx, t, f, "enable", "beat")
	enabled := time.Now()
	if !strings.Contains(out, "beat enabled; next occurrence") {
		t.Fatalf("enable printed %q", out)
	}
	for len(occurrences(enabled)) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the enabled series never ran again")
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("disabled for %s: no occurrence ran; enabled again, the next ran %s later", enabled.Sub(disabled).Round(time.Millisecond), time.Since(enabled).Round(time.Millisecond))
}
