package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// stats lists the instances running and shows one asked to drain as
// draining, as README ("Draining an instance") and drain's own error
// text say (a review found it printed only how many counter rows there
// were).
func TestStatsListsTheInstancesAndWhichDrain(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := leasecron.NewWorker(leasecron.WorkerOptions{Storage: leasecron.Storage{ConnectionString: srv.ConnectionString()}, InstanceID: "stats-w1", DrainCheck: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var out string
	for ctx.Err() == nil {
		_, out, _ = run(t, "", "stats")
		if strings.Contains(out, "instance stats-w1") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !regexp.MustCompile(`instances running +1\n`).MatchString(out) || strings.Contains(out, "DRAINING") || !strings.Contains(out, "roles lead,consume,blackboard") {
		t.Fatalf("stats with one worker running (its roles shown):\n%s", out)
	}
	// The only worker: draining it leaves nobody to lead or consume, and
	// drain says so.
	code, _, stderr := run(t, "", "drain", "stats-w1")
	if code != exitOK {
		t.Fatalf("drain: exit %d, %s", code, stderr)
	}
	for _, want := range []string{"no other running instance can lead", "consumes the queue default", "walks the blackboard"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("drain of the only worker: stderr %q; want a warning that %s", stderr, want)
		}
	}
	// The worker checks for the request every 10 minutes here: not seen yet.
	if _, out, _ = run(t, "", "stats"); !strings.Contains(out, "instance stats-w1") || !strings.Contains(out, "DRAINING: asked by") {
		t.Errorf("stats after drain:\n%s", out)
	}
	if _, out, _ = run(t, "", "stats", "--json"); !strings.Contains(out, `"draining": true`) || !strings.Contains(out, `"id": "stats-w1"`) {
		t.Errorf("stats --json after drain:\n%s", out)
	}
}
