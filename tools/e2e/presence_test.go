package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/dashboard"
)

// TestFleetPageShowsIdleWorkers is the new user's check: two workers
// start and neither runs anything; the dashboard's fleet page (its JSON
// twin) lists both as running within seconds of their start, the leader
// holding the lease, and a worker that stops is gone from it within
// seconds.
func TestFleetPageShowsIdleWorkers(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	h, err := dashboard.New(cl, dashboard.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	type view struct {
		Instances []struct {
			ID      string    `json:"id"`
			Present bool      `json:"present"`
			Leader  bool      `json:"leader"`
			Started time.Time `json:"started"`
		} `json:"instances"`
	}
	fleetPage := func() (view, error) {
		var v view
		resp, err := http.Get(srv.URL + "/api/fleet")
		if err != nil {
			return v, err
		}
		defer resp.Body.Close()
		return v, json.NewDecoder(resp.Body).Decode(&v)
	}
	started := time.Now()
	var v view
	for {
		v, err = fleetPage()
		running, leaders := 0, 0
		for _, in := range v.Instances {
			if in.Present {
				running++
			}
			if in.Leader {
				leaders++
			}
		}
		if err == nil && running == 2 && leaders == 1 {
			break
		}
		if time.Since(started) > 30*time.Second {
			t.Fatalf("the fleet page did not show both idle workers running and one leading within 30 s: %+v, %v", v, err)
		}
		time.Sleep(200 * time.Millisecond) // the page's reads are cached for 5 s
	}
	t.Logf("both idle workers on the fleet page %s after they were started", time.Since(started).Round(time.Millisecond))

	stopped := f.Names()[0]
	if err := f.Worker(stopped).Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for {
		ins, err := cl.Instances(ctx)
		if err == nil && !present(ins, stopped) && present(ins, f.Names()[1]) {
			break
		}
		if time.Since(at) > 20*time.Second {
			t.Fatalf("%s still shows as running 20 s after it stopped: %+v, %v", stopped, ins, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s gone from the instances %s after it stopped", stopped, time.Since(at).Round(time.Millisecond))
}

// present reports whether ins lists id as running.
func present(ins []leasecron.Instance, id string) bool {
	for _, in := range ins {
		if in.ID == id && in.Present {
			return true
		}
	}
	return false
}

// TestDrainFromTheCLI: `leasecron drain ID --wait` asks a running worker
// process to drain, follows it to gone, and the process exits 0 on its
// own while the other keeps running; the audit log names the drain.
func TestDrainFromTheCLI(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 2, nil, "LEASECRON_WORKER_DRAIN_CHECK=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	names := f.Names()
	waitFor(ctx, t, time.Minute, "both workers on the fleet", func() bool {
		ins, err := cl.Instances(ctx)
		return err == nil && present(ins, names[0]) && present(ins, names[1])
	})
	asked := time.Now()
	out, stderr, err := f.CLI(ctx, "drain", names[0], "--wait", "1m")
	if err != nil {
		t.Fatalf("leasecron drain %s --wait 1m: %v\n%s%s", names[0], err, out, stderr)
	}
	for _, want := range []string{names[0] + " asked to drain", names[0] + " is gone"} {
		if !strings.Contains(out, want) {
			t.Errorf("drain's output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("%s drained and gone %s after the request", names[0], time.Since(asked).Round(time.Millisecond))
	p := f.Worker(names[0])
	select {
	case <-p.Done():
		if p.Err() != nil {
			t.Errorf("the drained worker exited with %v, want 0", p.Err())
		}
	case <-ctx.Done():
		t.Fatal("the drained worker's process never exited")
	}
	ins, err := cl.Instances(ctx)
	if err != nil || present(ins, names[0]) || !present(ins, names[1]) {
		t.Errorf("after the drain: %+v, %v; want only %s running", ins, err, names[1])
	}
	out, _, err = f.CLI(ctx, "audit")
	if err != nil || !strings.Contains(out, "drain") || !strings.Contains(out, names[0]) {
		t.Errorf("the audit log does not name the drain of %s: %v\n%s", names[0], err, out)
	}
}
