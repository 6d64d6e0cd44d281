package presence

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// testContainer is a client of a container of t's own (not created) on
// the shared Azurite.
func testContainer(t *testing.T) *container.Client {
	t.Helper()
	sc, err := storage.New(storage.Config{ConnectionString: azuritetest.Shared(t).ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	return sc.Blob.NewContainerClient(azuritetest.Name(t, "c"))
}

// A worker's presence is there from its start and gone at its stop; two
// workers show with their ids and versions, and a listing of a container
// nobody created is empty, not an error.
func TestPresenceFromStartToStop(t *testing.T) {
	cc := testContainer(t)
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
	var err error
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

// A drain request reaches the instance whether it is made between two of
// its looks or between two of its periodic writes: the write, conditional
// on the blob being as the instance last saw it, is refused rather than
// overwriting the request. An instance that never looks is refused.
func TestDrainRequestIsNeverOverwritten(t *testing.T) {
	cc := testContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cc.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Now())
	drained := make(chan string, 2)
	// Looks less often than it writes: the next thing it does is the
	// periodic write.
	a := &Announcer{C: cc, Name: "a", Instance: "a", Clock: clk, DrainEvery: 2 * DefaultEvery, OnDrain: func(by string) { drained <- by }}
	never := &Announcer{C: cc, Name: "never", Instance: "never", Clock: clk}
	actx, acancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	for _, x := range []*Announcer{a, never} {
		go func() {
			defer func() { done <- struct{}{} }()
			_ = x.Run(actx)
		}()
	}
	// Both wrote and sleep (a has looked once, after its first write).
	if err := clk.WaitForTimers(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := RequestDrain(ctx, cc, "never", "tester", time.Now()); !errors.Is(err, ErrNoDrain) {
		t.Errorf("draining an instance that never looks: %v, want ErrNoDrain", err)
	}
	in, err := RequestDrain(ctx, cc, "a", "tester", time.Now())
	if err != nil || in.DrainBy != "tester" || in.DrainEvery != 2*DefaultEvery {
		t.Fatalf("RequestDrain: %+v, %v", in, err)
	}
	select {
	case by := <-drained:
		t.Fatalf("drained by %s before its next write or look", by)
	default:
	}
	clk.Advance(DefaultEvery) // the periodic write: refused, then a look
	select {
	case by := <-drained:
		if by != "tester" {
			t.Errorf("OnDrain by %q, want tester", by)
		}
	case <-ctx.Done():
		t.Fatal("the request made before a periodic write was lost")
	}
	list, err := List(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range list {
		if in.ID == "a" && (in.DrainBy != "tester" || in.Draining.IsZero()) {
			t.Errorf("a after the drain: %+v, want the request kept and draining set", in)
		}
	}
	acancel()
	<-done
	<-done
	if _, err := RequestDrain(ctx, cc, "a", "tester", time.Now()); !errors.Is(err, ErrNotPresent) {
		t.Errorf("draining a stopped instance: %v, want ErrNotPresent", err)
	}
}

// An instance that consumes no queue says so (queues "-"), so that a
// reader does not take it for one of an earlier release, which left the
// list out and consumed the default queue: a leader-only instance was
// listed as the default queue's consumer, hiding that nothing ran its
// tasks (a review's find). One that consumes lists its queues.
func TestPresenceSaysWhichQueuesAreConsumed(t *testing.T) {
	cc := testContainer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stops []func()
	for _, a := range []*Announcer{
		{C: cc, Name: "a", Instance: "a", Queues: []string{"default", "gpu"}, Roles: []string{"lead", "consume"}},
		{C: cc, Name: "b", Instance: "b", NoConsume: true, Roles: []string{}},
		{C: cc, Name: "c", Instance: "c"}, // as an earlier release writes it
	} {
		actx, acancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = a.Run(actx)
		}()
		stops = append(stops, func() { acancel(); <-done })
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	var got []Instance
	var err error
	for {
		if got, err = List(ctx, cc); err == nil && len(got) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("three instances never showed: %v, %v", got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if q := got[0].Queues; len(q) != 2 || q[0] != "default" || q[1] != "gpu" {
		t.Errorf("a consumer's queues: %q; want [default gpu]", q)
	}
	if q := got[1].Queues; q == nil || len(q) != 0 {
		t.Errorf("a non-consumer's queues: %#v; want empty, not nil", q)
	}
	if q := got[2].Queues; q != nil {
		t.Errorf("an earlier release's queues: %#v; want nil (not said)", q)
	}
	// Its roles too: said, said to be none, or not said.
	if r := got[0].Roles; len(r) != 2 || r[0] != "lead" || r[1] != "consume" {
		t.Errorf("roles: %q; want [lead consume]", r)
	}
	if r := got[1].Roles; r == nil || len(r) != 0 {
		t.Errorf("no roles: %#v; want empty, not nil", r)
	}
	if r := got[2].Roles; r != nil {
		t.Errorf("an earlier release's roles: %#v; want nil (not said)", r)
	}
}
