package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/throttle"
)

// A worker started while storage answers every request with 503
// ServerBusy stays up: /healthz answers, /readyz answers 503 with the
// reason, the log says it is retrying; once storage accepts requests again
// it becomes ready (200) and runs tasks.
func TestWorkerStartsThroughARefusingAccount(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 0, nil)
	b, q, tb := f.Azurite.Ports()
	set, err := throttle.NewSet(b, q, tb, throttle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	set.RefuseAll(true)
	addr := freeAddr(t)
	base := "http://" + addr
	name, err := f.StartWorker("LEASECRON_ADMIN_ADDR="+addr, "LEASECRON_STORAGE_CONNECTION_STRING="+set.ConnectionString())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	refusedUntil := time.Now().Add(10 * time.Second)
	if _, err := waitStatus(ctx, base+"/healthz", http.StatusOK, 100*time.Millisecond); err != nil {
		t.Fatalf("/healthz while storage refuses: %v", err)
	}
	code, body, err := get(ctx, base+"/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Fatalf("/readyz while storage refuses: %d %q %v; want 503 saying it is starting", code, body, err)
	}
	t.Logf("/readyz while refused: %d %s", code, strings.TrimSpace(body))
	select {
	case <-f.Worker(name).Done():
		t.Fatalf("the worker exited while storage refused: %v", f.Worker(name).Err())
	case <-time.After(time.Until(refusedUntil)):
	}
	if !logHas(t, f, name, "storage not ready at start-up; retrying") {
		t.Error("no log line says the worker is retrying")
	}
	refused := set.Stats().Refused
	set.RefuseAll(false)
	t.Logf("storage accepts requests again after refusing %d", refused)
	took, err := waitStatus(ctx, base+"/readyz", http.StatusOK, 200*time.Millisecond)
	if err != nil {
		t.Fatalf("/readyz after storage recovered: %v", err)
	}
	t.Logf("/readyz 200 %s after storage recovered", took.Round(time.Millisecond))
	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Schedule(ctx, leasecron.Item{ID: "after-refusal", Type: "rec", Due: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	if missing, err := f.WaitRecords(ctx, []string{"after-refusal"}); err != nil {
		t.Fatalf("task never ran after storage recovered: %v %v", missing, err)
	}
	select {
	case <-f.Worker(name).Done():
		t.Fatalf("the worker exited: %v", f.Worker(name).Err())
	default:
	}
}
