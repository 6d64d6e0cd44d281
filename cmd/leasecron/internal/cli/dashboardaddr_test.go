package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
)

// lockedBuffer is a bytes.Buffer safe to read while a command writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The address `leasecron dashboard` prints is the dashboard's, under
// dashboard.base_path when one is set (it printed the root, which then
// answers 404: a review's find).
func TestTheDashboardPrintsItsAddressUnderItsBasePath(t *testing.T) {
	srv := azuritetest.Start(t)
	t.Setenv("LEASECRON_STORAGE_CONNECTION_STRING", srv.ConnectionString())
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("LEASECRON_DASHBOARD_BASE_PATH", "/leasecron")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan int)
	go func() {
		done <- Main(ctx, "test", []string{"dashboard", "--addr", "127.0.0.1:0"}, strings.NewReader(""), &out, &errOut)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "dashboard: http") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	line := out.String()
	if !strings.Contains(line, "dashboard: http://127.0.0.1:") || !strings.Contains(line, "/leasecron/\n") {
		t.Errorf("printed %q (stderr %q); want the address under /leasecron/", line, errOut.String())
	}
}
