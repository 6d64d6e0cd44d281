package azurite_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestStartAnswersAllServices(t *testing.T) {
	t.Parallel()
	s := azuritetest.Start(t)
	cs := s.ConnectionString()
	if !strings.Contains(cs, "AccountName=devstoreaccount1") {
		t.Fatalf("connection string %q", cs)
	}
	c, err := storage.New(storage.Config{ConnectionString: cs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.EnsureContainer(ctx, "probe"); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureQueue(ctx, "probe"); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureTable(ctx, "probe"); err != nil {
		t.Fatal(err)
	}
	// Idempotent: second creation is fine.
	if err := c.EnsureTable(ctx, "probe"); err != nil {
		t.Fatal(err)
	}
	if s.IsMemstore() {
		return // no process of its own
	}
	// Pid names the emulator's own process (node running Azurite).
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", s.Pid()))
	if runtime.GOOS == "linux" && (err != nil || !strings.Contains(string(cmdline), "azurite")) {
		t.Fatalf("Pid %d: cmdline %q, %v", s.Pid(), cmdline, err)
	}
}

func TestRestartKeepsDataAndPorts(t *testing.T) {
	t.Parallel()
	s := azuritetest.Start(t)
	c, err := storage.New(storage.Config{ConnectionString: s.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.EnsureQueue(ctx, "keepme"); err != nil {
		t.Fatal(err)
	}
	b, q, tb := s.Ports()
	if !s.IsMemstore() {
		time.Sleep(2 * time.Second) // Azurite flushes its metadata to disk periodically.
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	b2, q2, t2 := s.Ports()
	if b != b2 || q != q2 || tb != t2 {
		t.Fatalf("ports changed across restart: %d/%d/%d -> %d/%d/%d", b, q, tb, b2, q2, t2)
	}
	if _, err := c.Queue.NewQueueClient("keepme").GetProperties(ctx, nil); err != nil {
		t.Fatalf("queue lost across restart: %v", err)
	}
}

func TestStopIsIdempotentAndRemovesDir(t *testing.T) {
	t.Parallel()
	s := azuritetest.Start(t)
	select {
	case <-s.Done():
		t.Fatal("exited early")
	default:
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
}

func TestMissingBinaryNamesTheFix(t *testing.T) {
	_, err := azurite.Start(context.Background(), azurite.Options{Bin: "/nonexistent/azurite"})
	if err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("want an error naming `make deps`, got %v", err)
	}
}
