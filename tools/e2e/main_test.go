// Package e2e holds end-to-end tests: worker processes of the built binary
// against a private Azurite, checked from recorded executions.
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// startFleet starts a fleet for t (Azurite included) and stops it at cleanup.
func startFleet(t *testing.T, workers int, cfg map[string]any, env ...string) *fleet.Fleet {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test; -short skips it")
	}
	if _, err := azurite.FindBinary(""); err != nil && os.Getenv("LEASECRON_REQUIRE_AZURITE") == "" {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	if keep := os.Getenv("E2E_KEEP"); keep != "" {
		// E2E_KEEP=dir keeps the fleet's logs, records and Azurite data
		// there, for reading after the test.
		var err error
		if dir, err = os.MkdirTemp(keep, strings.ReplaceAll(t.Name(), "/", "_")+"-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("keeping the fleet's logs in %s", dir)
	}
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Workers: workers, Config: cfg, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			for _, n := range f.Names() {
				b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("--- %s log (tail) ---\n%s", n, b)
			}
		}
	})
	return f
}

// leaderClient waits until a worker of f leads and returns a Go client for
// f's account.
func leaderClient(ctx context.Context, t *testing.T, f *fleet.Fleet) *leasecron.Client {
	t.Helper()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
