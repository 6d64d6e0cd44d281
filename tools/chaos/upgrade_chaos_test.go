//go:build chaos

package chaos

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// TestRollingUpgradeChaos is scenario 11: three workers of the previous
// release (proc.PreviousRelease) move a backlog due over two minutes while
// they are replaced one at a time by this release's workers — the first
// and last stopped with SIGTERM as a rolling restart does, the one in the
// middle, the traffic cop of the moment, SIGKILLed. In a sharded run
// (CHAOS_SHARDS) the upgraded workers are then restarted one at a time
// with the shard count, the way README's "Turning sharding on" says, and
// a second batch is scheduled by a sharded client once they share the
// shards. Nothing is lost; duplicates are reported.
func TestRollingUpgradeChaos(t *testing.T) {
	r := newRun(t, "11 rolling upgrade from the previous release", false, 0, nil)
	prev, commit, err := proc.PreviousBinary(t.TempDir())
	if err != nil {
		t.Fatalf("building the previous release: %v", err)
	}
	// The previous release refuses configuration keys it does not know
	// (shards): until the sharding stage every worker reads the fleet's
	// configuration without them.
	flat := unshardedConfig(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var live []string
	old := map[string]bool{}
	for range 3 {
		n := r.startWorkerWith(prev, "LEASECRON_CONFIG="+flat)
		live = append(live, n)
		old[n] = true
	}
	r.waitLeader(ctx, "")
	unsharded, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: r.f.Azurite.ConnectionString()}})
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(10 * time.Second)
	window := 110 * time.Second
	if chaosShards() < 2 {
		window = 60 * time.Second
	}
	if failed := r.scheduleWith(ctx, unsharded, spread("u", 1500, base, window), 16); len(failed) > 0 {
		t.Fatalf("%d tasks not scheduled", len(failed))
	}
	time.Sleep(time.Until(base.Add(5 * time.Second)))

	// One old worker at a time: the second is SIGKILLed, and it is the
	// traffic cop whenever the cop still runs the previous release.
	var killedAt time.Time
	var killed, killedRole string
	for step := range 3 {
		leader, _ := r.waitLeader(ctx, "")
		i := 0
		for j, name := range live {
			if old[name] && (!old[live[i]] || step == 1 && name == leader) {
				i = j
			}
		}
		name := live[i]
		role := "a worker"
		if name == leader {
			role = "the traffic cop"
		}
		at := time.Now()
		how := "SIGTERM"
		if step == 1 {
			how = "SIGKILL"
			killedAt, killed, killedRole = r.kill(name), name, role
		} else {
			r.expectExit(name)
			if err := r.f.Worker(name).Stop(20 * time.Second); err != nil {
				t.Logf("stop %s: %v", name, err)
			}
		}
		live[i] = r.startWorker("LEASECRON_CONFIG=" + flat)
		r.note("upgrade: %s (%s of the previous release) ended by %s, replaced by %s of this release after %s", name, role, how, live[i], round(time.Since(at)))
		time.Sleep(8 * time.Second)
	}

	if chaosShards() > 1 {
		for i, name := range live {
			r.expectExit(name)
			if err := r.f.Worker(name).Stop(20 * time.Second); err != nil {
				t.Logf("stop %s: %v", name, err)
			}
			live[i] = r.startWorker() // the fleet's configuration: sharded
			r.note("sharding: %s restarted with %d shards as %s", name, chaosShards(), live[i])
			time.Sleep(8 * time.Second)
		}
		t0 := time.Now()
		r.settledAmong(ctx, 3)
		r.note("the three sharded workers shared the %d shards %s after the last restart", chaosShards(), round(time.Since(t0)))
		// Clients follow the workers: a sharded client schedules the rest.
		if failed := r.schedule(ctx, spread("s", 500, time.Now().Add(5*time.Second), 20*time.Second), 16); len(failed) > 0 {
			t.Fatalf("%d tasks not scheduled", len(failed))
		}
		if s, err := r.cl.Status(ctx, "u00000"); err != nil {
			t.Errorf("the sharded client's status of a task scheduled before sharding: %v", err)
		} else if s.Run == nil && s.Pending == nil {
			t.Errorf("the sharded client's status of a task scheduled before sharding found neither a row nor a run: %+v", s)
		}
	}
	r.waitExecuted(4 * time.Minute)
	a := r.stopAndAnalyse()
	r.note("previous release: %s", commit)
	res := Result{RecoveryRule: "takeover: SIGKILL → the next term of control; recovery: SIGKILL → the first task started by another worker. No bound of its own: old and new workers side by side, nothing lost, each task once"}
	f := Fault{Kind: "SIGKILL " + killedRole + " " + killed + " (previous release)", At: r.since(killedAt)}
	if _, took, ok := takeoverAfter(a, killedAt, killed); ok {
		f.Takeover = Duration(took)
	}
	if d, ok := firstStartAfter(a, killedAt, killed); ok {
		f.Recovery = Duration(d)
	}
	res.Faults = append(res.Faults, f)
	r.report(a, res, 1)
}

// unshardedConfig writes the fleet's configuration without the shards
// section next to it and returns its path.
func unshardedConfig(t *testing.T, r *run) string {
	t.Helper()
	b, err := os.ReadFile(r.f.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg, "shards")
	if b, err = yaml.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(r.dir, "unsharded.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
