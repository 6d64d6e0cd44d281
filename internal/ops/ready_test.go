package ops

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/storage"
)

// startAzurite starts a private Azurite on a data directory the test owns,
// so the test can stop it and start it again on the same ports and data.
func startAzurite(t *testing.T, opts azurite.Options) *azurite.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := azurite.Start(ctx, opts)
	if err != nil {
		if errors.Is(err, azurite.ErrNotInstalled) && os.Getenv("LEASECRON_REQUIRE_AZURITE") == "" {
			t.Skipf("skipping Azurite integration test: %v", err)
		}
		t.Fatalf("start azurite: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func check(ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return ready(ctx)
}

func TestReadyCheckAgainstAzurite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	az := startAzurite(t, azurite.Options{Dir: dir})
	counter := storage.NewCounter()
	m := NewMetrics()
	counter.OnRequest = m.StorageRequest
	clients, err := storage.New(storage.Config{ConnectionString: az.ConnectionString(), Counter: counter, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	table := azuritetest.Name(t, "t")
	queue := azuritetest.Name(t, "q")

	ready := ReadyCheck(clients, []string{table}, []string{queue})
	err = check(ready)
	if !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "table "+table+" does not exist") {
		t.Fatalf("before creating anything: %v, want table not found", err)
	}
	if err := clients.EnsureTable(ctx, table); err != nil {
		t.Fatal(err)
	}
	err = check(ready)
	if !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), "queue "+queue+" does not exist") {
		t.Fatalf("without the queue: %v, want queue not found", err)
	}
	if err := clients.EnsureQueue(ctx, queue); err != nil {
		t.Fatal(err)
	}
	if err := check(ready); err != nil {
		t.Fatalf("with table and queue: %v", err)
	}
	if err := check(ReadyCheck(clients, nil, nil)); err != nil {
		t.Fatalf("account-only check: %v", err)
	}
	// The readiness calls went through the counter into the metrics.
	if out := scrape(t, m.Handler()); !strings.Contains(out, `leasecron_storage_requests_total{op="get-properties",service="queue",status="200"} 1`) {
		t.Errorf("metrics lack the queue GetProperties request:\n%s", grepLines(out, "leasecron_storage"))
	}

	// Storage goes away: not ready, and quickly (bounded by the context).
	blob, qport, tport := az.Ports()
	if err := az.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = check(ready)
	if err == nil {
		t.Fatal("ready while Azurite is stopped")
	}
	t.Logf("stopped: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	if time.Since(start) > 4*time.Second {
		t.Errorf("check took %v with a 3s deadline", time.Since(start))
	}

	// Storage comes back with its data: ready again.
	startAzurite(t, azurite.Options{Dir: dir, BlobPort: blob, QueuePort: qport, TablePort: tport})
	if err := check(ready); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
