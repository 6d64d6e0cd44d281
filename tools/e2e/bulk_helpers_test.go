package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/queuesrv"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// startFleetOnMemoryQueues starts workers whose queues are served by a
// queuesrv and whose tables and blobs are on a fresh in-memory Azurite
// (see TestBulkRequeueSurvivesAKill for why).
func startFleetOnMemoryQueues(t *testing.T, workers int) *fleet.Fleet {
	t.Helper()
	if _, err := azurite.FindBinary(""); err != nil && os.Getenv("LEASECRON_REQUIRE_AZURITE") == "" {
		t.Skipf("skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	az, err := azurite.Start(ctx, azurite.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := queuesrv.Start()
	if err != nil {
		_ = az.Stop()
		t.Fatal(err)
	}
	blob, _, table := az.Ports()
	f, err := fleet.Start(ctx, fleet.Options{Dir: t.TempDir(), Workers: workers, ConnectionString: azurite.ConnectionString("127.0.0.1", blob, qs.Port(), table)})
	if err != nil {
		_ = qs.Close()
		_ = az.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Stop()
		t.Logf("queue requests served: %d put, %d get, %d delete, %d update, %d peek", qs.Calls(queuesrv.OpPut), qs.Calls(queuesrv.OpGet), qs.Calls(queuesrv.OpDelete), qs.Calls(queuesrv.OpUpdate), qs.Calls(queuesrv.OpPeek))
		_ = qs.Close()
		_ = az.Stop()
	})
	return f
}

// injectDeadLetters writes n dead letters of type typ, ids
// {prefix}{0000..n-1}, into the poison queue of the account cs (default
// names), sixteen at a time, as a worker sets a dead task aside; it
// returns their ids.
func injectDeadLetters(ctx context.Context, t testing.TB, cs string, n int, typ, prefix string) []string {
	t.Helper()
	svc, err := azqueue.NewServiceClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	qc, err := queue.NewClient(svc, queue.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 16)
	for i := range n {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			env := queue.Envelope{V: queue.EnvelopeVersion, ID: ids[i], Type: typ, Due: time.Now().UTC(), FailedAttempts: 1, MaxAttempts: 1, LastError: "injected"}
			body, err := env.Encode()
			if err == nil {
				err = qc.SetAside(ctx, body, "failed 1 of 1 attempts; last error: injected")
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("injecting dead letters: %v", firstErr)
	}
	return ids
}
