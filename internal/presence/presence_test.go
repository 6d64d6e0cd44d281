package presence

import (
	"context"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// A worker's presence is there from its start and gone at its stop; two
// workers show with their ids and versions, and a listing of a container
// nobody created is empty, not an error.
func TestPresenceFromStartToStop(t *testing.T) {
	srv := azuritetest.Shared(t)
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	cc := sc.Blob.NewContainerClient(azuritetest.Name(t, "c"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got, err := List(ctx, cc); err != nil || len(got) != 0 {
		t.Fatalf("no container yet: %v, %v; want none and no error", got, err)
	}
	run := func(id, version string) (stop func()) {
		actx, acancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = (&Announcer{C: cc, Name: id, Instance: id + "@host", Version: version}).Run(actx)
		}()
		return func() { acancel(); <-done }
	}
	stopA := run("a", "v1")
	stopB := run("b", "v2")
	var got []Instance
	for {
		if got, err = List(ctx, cc); err == nil && len(got) == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("two workers never showed: %v, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, want := range []struct{ id, version string }{{"a@host", "v1"}, {"b@host", "v2"}} {
		in := got[i]
		if in.ID != want.id || in.Version != want.version || in.Started.IsZero() || !in.Present(time.Now()) {
			t.Errorf("instance %d: %+v, want %s %s started and present", i, in, want.id, want.version)
		}
	}
	stopA()
	if got, err = List(ctx, cc); err != nil || len(got) != 1 || got[0].ID != "b@host" {
		t.Fatalf("after a's stop: %+v, %v; want only b", got, err)
	}
	stopB()
	if got, err = List(ctx, cc); err != nil || len(got) != 0 {
		t.Fatalf("after both stopped: %+v, %v", got, err)
	}
	old := Instance{Seen: time.Now().Add(-12 * time.Minute)}
	if old.Present(time.Now()) {
		t.Error("a presence last written 12 minutes ago (every 5 min) still counts as present")
	}
}
