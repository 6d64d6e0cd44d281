package pause

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

func newStore(t *testing.T, clk clock.Clock) *Store {
	t.Helper()
	srv := azuritetest.Shared(t)
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(sc.Blob.NewContainerClient(azuritetest.Name(t, "c")), "", clk)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Pause, list, resume on a fresh account (no container yet), and a pause
// with an end that lapses by itself.
func TestPauseResumeOnAzurite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	s := newStore(t, clk)

	if got, err := s.PausedTypes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("fresh account: PausedTypes = %v, %v; want none", got, err)
	}
	if err := s.Resume(ctx, "notify"); !errors.Is(err, ErrNotPaused) || !errors.Is(err, leasecrontype.ErrNotFound) {
		t.Fatalf("Resume of a type never paused = %v, want ErrNotPaused (an ErrNotFound)", err)
	}
	if _, err := s.Pause(ctx, "notify", time.Time{}, "ops@host"); err != nil {
		t.Fatal(err)
	}
	until := clk.Now().Add(time.Minute)
	if _, err := s.Pause(ctx, "report", until, "ops@host"); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 2 || list[0].Type != "notify" || !list[0].Until.IsZero() || list[0].By != "ops@host" ||
		list[1].Type != "report" || !list[1].Until.Equal(until) {
		t.Fatalf("List = %+v, %v", list, err)
	}
	got, err := s.PausedTypes(ctx)
	if err != nil || len(got) != 2 || !got["notify"].IsZero() || !got["report"].Equal(until) {
		t.Fatalf("PausedTypes = %v, %v", got, err)
	}

	clk.Advance(time.Minute) // report's pause ends
	if got, _ := s.PausedTypes(ctx); len(got) != 1 || !got["notify"].IsZero() {
		t.Fatalf("after report's end: PausedTypes = %v, want only notify", got)
	}
	if err := s.Resume(ctx, "report"); !errors.Is(err, ErrNotPaused) {
		t.Fatalf("Resume of a lapsed pause = %v, want ErrNotPaused", err)
	}
	if err := s.Resume(ctx, "notify"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.PausedTypes(ctx); len(got) != 0 {
		t.Fatalf("after resume: PausedTypes = %v", got)
	}
}

// Concurrent pauses of different types from several clients all land:
// the conditional write makes a lost update impossible.
func TestConcurrentPausesOnAzurite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, nil)
	types := []string{"a", "b", "c", "d", "e", "f"}
	var wg sync.WaitGroup
	errs := make(chan error, len(types))
	for _, typ := range types {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Pause(ctx, typ, time.Time{}, "t")
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.PausedTypes(ctx)
	if err != nil || len(got) != len(types) {
		t.Fatalf("PausedTypes = %v, %v; want all of %v", got, err, types)
	}
}
