package e2e

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// TestRollingUpgradeThenSharding (make test-long, about 3 min): a fleet of
// three workers of the previous release runs a stream of one-off tasks and
// a series; one worker at a time is replaced by this release's binary,
// then, one at a time again, restarted with shards.count 8, and then the
// client too — the way an operator turns sharding on. Nothing is lost or run early, every one-off
// task runs once (duplicates are reported), and once sharded the fleet
// shares the shards among all three.
func TestRollingUpgradeThenSharding(t *testing.T) {
	if os.Getenv("LEASECRON_LONG") == "" {
		t.Skip("long: set LEASECRON_LONG=1 (make test-long)")
	}
	t.Parallel()
	old, commit, err := proc.PreviousBinary(t.TempDir())
	if err != nil {
		t.Fatalf("building the previous release: %v", err)
	}
	f := startFleet(t, 0, nil)
	var live []string
	for range 3 {
		n, err := f.StartWorkerWith(old)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}
	unsharded, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unsharded.Schedule(ctx, leasecron.Item{ID: "series", Type: "rec", Recurrence: "@every 3s", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}

	// The stream: a task every 300 ms, due 5 s later, scheduled by the
	// unsharded client and then by a sharded one.
	var mu sync.Mutex
	cl := unsharded
	stopStream := stream(ctx, "up", 300*time.Millisecond, 5*time.Second, func() *leasecron.Client {
		mu.Lock()
		defer mu.Unlock()
		return cl
	})

	replace := func(stage string, extraEnv ...string) {
		for i, name := range live {
			time.Sleep(8 * time.Second)
			if err := f.Worker(name).Stop(20 * time.Second); err != nil {
				t.Logf("stop %s: %v", name, err)
			}
			n, err := f.StartWorker(extraEnv...)
			if err != nil {
				t.Fatal(err)
			}
			live[i] = n
			t.Logf("%s: %s replaced by %s", stage, name, n)
		}
	}
	replace("upgrade")
	// The workers first, then the clients: a client that places tasks
	// by the shard count before a sharded worker leads would place them
	// in shards nobody moves yet.
	replace("sharding", "LEASECRON_SHARDS_COUNT=8", "LEASECRON_SHARDS_CYCLE=1s")
	// The fleet keeps one work queue: a client must name as many queues
	// as the workers drain (names.queues).
	sharded, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.Azurite.ConnectionString()},
		Names: leasecron.Names{Shards: 8}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	cl = sharded
	mu.Unlock()
	waitSettled(ctx, t, sharded, 3)
	time.Sleep(8 * time.Second)
	dues := stopStream()

	lateness, dups := ranOnTime(ctx, t, f, dues)
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	starts := fleet.Starts(rs)
	series := 0
	for id := range starts {
		if len(id) > 7 && id[:7] == "series@" {
			series++
		}
	}
	t.Logf("%d tasks through a rolling upgrade from %s and a rolling switch to 8 shards: 0 lost, %d duplicate runs, lateness p50 %s, p99 %s, max %s; the series ran %d occurrences",
		len(dues), commit, dups, fleet.Percentile(lateness, 50).Round(time.Millisecond), fleet.Percentile(lateness, 99).Round(time.Millisecond),
		lateness[len(lateness)-1].Round(time.Millisecond), series)
	if series < 10 {
		t.Errorf("the series ran %d occurrences over the upgrade", series)
	}
	if p := fleet.Percentile(lateness, 99); p > 3*time.Second {
		t.Errorf("lateness p99 %s through the upgrade, want within 3 s", p.Round(time.Millisecond))
	}
	if s, err := sharded.Status(ctx, "up0000"); err != nil || s.Run == nil {
		t.Errorf("status of the first task, scheduled before sharding: %+v, %v", s, err)
	}
}
