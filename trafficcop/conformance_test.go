package trafficcop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/randid"
	"github.com/leasecron/leasecron/leasecrontype"
)

// azuriteContainer returns a client for a container of its own (named
// after the test) on the shared Azurite, built the way a program using the
// Azure SDK builds one: from the connection string, with its shared key.
// The container does not exist yet.
func azuriteContainer(t *testing.T) *container.Client {
	t.Helper()
	return containerOn(t, azuritetest.Shared(t), azuritetest.Name(t, "c"))
}

func containerOn(t *testing.T, srv *azurite.Server, name string) *container.Client {
	t.Helper()
	c, err := container.NewClientFromConnectionString(srv.ConnectionString(), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newBlobLock is NewBlobLock that fails the test on error.
func newBlobLock(t *testing.T, c *container.Client, name string) Lock {
	t.Helper()
	l, err := NewBlobLock(c, name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// lockConformance runs one script against a Lock: the blob implementation
// on Azurite and MemoryLock must agree, so that fake-clock tests of the cop
// mean something. wait lets a lease run out (real sleep or fake clock).
func lockConformance(t *testing.T, lock Lock, wait func(time.Duration)) {
	ctx := context.Background()
	const d = 15 * time.Second
	is := func(what string, err, want error) {
		t.Helper()
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
	}
	state := func(what string, want LeaseState, locked bool) LockState {
		t.Helper()
		st, err := lock.Get(ctx)
		if err != nil {
			t.Fatalf("%s: Get: %v", what, err)
		}
		if st.State != want || st.Locked != locked || st.ETag == "" {
			t.Fatalf("%s: state %q locked %v etag %q; want %q locked %v", what, st.State, st.Locked, st.ETag, want, locked)
		}
		return st
	}
	id1, id2 := randid.UUID(), randid.UUID()

	_, err := lock.Get(ctx)
	is("Get before Ensure", err, leasecrontype.ErrNotFound)
	is("Acquire before Ensure", lock.Acquire(ctx, id1, d), leasecrontype.ErrNotFound)
	is("Ensure", lock.Ensure(ctx), nil)
	is("Ensure again", lock.Ensure(ctx), nil)
	st := state("fresh", LeaseAvailable, false)
	if len(st.Metadata) != 0 {
		t.Fatalf("fresh metadata %v", st.Metadata)
	}

	is("Acquire", lock.Acquire(ctx, id1, d), nil)
	is("Acquire with another ID", lock.Acquire(ctx, id2, d), leasecrontype.ErrLeaseConflict)
	is("Acquire again with the same ID", lock.Acquire(ctx, id1, d), nil)
	st = state("leased", LeaseLeased, true)
	is("Renew with another ID", lock.Renew(ctx, id2), leasecrontype.ErrLeaseConflict)
	is("Renew", lock.Renew(ctx, id1), nil)

	md := map[string]string{MetaHolder: "h/1/abcd", MetaGeneration: "7", MetaAcquired: "2030-01-02T03:04:05Z"}
	is("SetMetadata with another lease ID", lock.SetMetadata(ctx, id2, st.ETag, md), leasecrontype.ErrLeaseConflict)
	is("SetMetadata with a stale ETag", lock.SetMetadata(ctx, id1, `"0x8DC0000DEADBEEF"`, md), leasecrontype.ErrPreconditionFailed)
	is("SetMetadata", lock.SetMetadata(ctx, id1, st.ETag, md), nil)
	is("SetMetadata with the ETag it replaced", lock.SetMetadata(ctx, id1, st.ETag, md), leasecrontype.ErrPreconditionFailed)
	is("SetMetadata without an ETag condition", lock.SetMetadata(ctx, id1, "", md), nil)
	is("SetMetadata without an ETag condition, another lease ID", lock.SetMetadata(ctx, id2, "", md), leasecrontype.ErrLeaseConflict)
	st = state("stamped", LeaseLeased, true)
	for k, v := range md {
		if st.Metadata[k] != v {
			t.Fatalf("metadata %s = %q, want %q (all: %v)", k, st.Metadata[k], v, st.Metadata)
		}
	}
	is("Ensure while leased", lock.Ensure(ctx), nil)
	if st2 := state("after Ensure", LeaseLeased, true); st2.Metadata[MetaGeneration] != "7" {
		t.Fatal("Ensure clobbered the blob")
	}
	hi, err := ReadHolder(ctx, lock)
	if err != nil || hi.Holder != "h/1/abcd" || hi.Generation != 7 || !hi.Held() ||
		!hi.Acquired.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("ReadHolder: %+v, %v", hi, err)
	}

	is("Release with another ID", lock.Release(ctx, id2), leasecrontype.ErrLeaseConflict)
	is("Release", lock.Release(ctx, id1), nil)
	st = state("released", LeaseAvailable, false)
	is("Renew after Release", lock.Renew(ctx, id1), leasecrontype.ErrLeaseConflict)
	is("SetMetadata with a lease ID but no lease", lock.SetMetadata(ctx, id1, st.ETag, md), leasecrontype.ErrLeaseConflict)

	// Expiry.
	id3, id4 := randid.UUID(), randid.UUID()
	is("Acquire for expiry", lock.Acquire(ctx, id3, d), nil)
	wait(d + time.Second)
	state("after the lease ran out", LeaseExpired, false)
	is("Renew of an expired lease nobody took", lock.Renew(ctx, id3), nil)
	state("renewed after expiry", LeaseLeased, true)
	wait(d + time.Second)
	is("Acquire after expiry", lock.Acquire(ctx, id4, d), nil)
	is("Renew of a lease somebody else took", lock.Renew(ctx, id3), leasecrontype.ErrLeaseConflict)
	is("Release of a lease somebody else took", lock.Release(ctx, id3), leasecrontype.ErrLeaseConflict)
	is("final Release", lock.Release(ctx, id4), nil)
}

func TestMemLockConformance(t *testing.T) {
	clk := clock.NewFake(t0)
	lockConformance(t, NewMemoryLock("conformance", clk), clk.Advance)
}

// memstoreContainer returns a client for the container name of srv, an
// in-memory account (memstore), built from its connection string with
// its in-process transport. The container does not exist yet.
func memstoreContainer(t *testing.T, srv *memstore.Server, name string) *container.Client {
	t.Helper()
	c, err := container.NewClientFromConnectionString(srv.ConnectionString(), name,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: srv.Transport()}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMemstoreBlobLockConformance runs the script on the blob Lock over
// memstore, whose service clock is the fake one the script advances.
func TestMemstoreBlobLockConformance(t *testing.T) {
	clk := clock.NewFake(t0)
	srv := memstore.New(memstore.Options{Now: clk.Now})
	lockConformance(t, newBlobLock(t, memstoreContainer(t, srv, "leasecron"), "locks/conformance"), clk.Advance)
}

func TestAzuriteBlobLockConformance(t *testing.T) {
	t.Parallel()
	lockConformance(t, newBlobLock(t, azuriteContainer(t), "locks/conformance"), time.Sleep)
}

func TestAzuriteReadHolderMissing(t *testing.T) {
	t.Parallel()
	_, err := ReadHolder(context.Background(), newBlobLock(t, azuriteContainer(t), "locks/scheduler"))
	if !errors.Is(err, leasecrontype.ErrNotFound) {
		t.Fatalf("ReadHolder of a missing blob: %v, want ErrNotFound", err)
	}
}
