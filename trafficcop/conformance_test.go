package trafficcop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
)

func azuriteClients(t *testing.T) *storage.Clients {
	t.Helper()
	srv := azuritetest.Shared(t)
	clients, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	return clients
}

// lockConformance runs one script against a Lock: the blob implementation
// on Azurite and MemLock must agree, so that fake-clock tests of the cop
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
	id1, id2 := uuid.NewString(), uuid.NewString()

	_, err := lock.Get(ctx)
	is("Get before Ensure", err, storage.ErrNotFound)
	is("Acquire before Ensure", lock.Acquire(ctx, id1, d), storage.ErrNotFound)
	is("Ensure", lock.Ensure(ctx), nil)
	is("Ensure again", lock.Ensure(ctx), nil)
	st := state("fresh", LeaseAvailable, false)
	if len(st.Metadata) != 0 {
		t.Fatalf("fresh metadata %v", st.Metadata)
	}

	is("Acquire", lock.Acquire(ctx, id1, d), nil)
	is("Acquire with another ID", lock.Acquire(ctx, id2, d), storage.ErrLeaseConflict)
	is("Acquire again with the same ID", lock.Acquire(ctx, id1, d), nil)
	st = state("leased", LeaseLeased, true)
	is("Renew with another ID", lock.Renew(ctx, id2), storage.ErrLeaseConflict)
	is("Renew", lock.Renew(ctx, id1), nil)

	md := map[string]string{MetaHolder: "h/1/abcd", MetaGeneration: "7", MetaAcquired: "2030-01-02T03:04:05Z"}
	is("SetMetadata with another lease ID", lock.SetMetadata(ctx, id2, st.ETag, md), storage.ErrLeaseConflict)
	is("SetMetadata with a stale ETag", lock.SetMetadata(ctx, id1, `"0x8DC0000DEADBEEF"`, md), storage.ErrPreconditionFailed)
	is("SetMetadata", lock.SetMetadata(ctx, id1, st.ETag, md), nil)
	is("SetMetadata with the ETag it replaced", lock.SetMetadata(ctx, id1, st.ETag, md), storage.ErrPreconditionFailed)
	is("SetMetadata without an ETag condition", lock.SetMetadata(ctx, id1, "", md), nil)
	is("SetMetadata without an ETag condition, another lease ID", lock.SetMetadata(ctx, id2, "", md), storage.ErrLeaseConflict)
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
	hi, err := ReadHolderFrom(ctx, lock)
	if err != nil || hi.Holder != "h/1/abcd" || hi.Generation != 7 || !hi.Held() ||
		!hi.Acquired.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("ReadHolderFrom: %+v, %v", hi, err)
	}

	is("Release with another ID", lock.Release(ctx, id2), storage.ErrLeaseConflict)
	is("Release", lock.Release(ctx, id1), nil)
	st = state("released", LeaseAvailable, false)
	is("Renew after Release", lock.Renew(ctx, id1), storage.ErrLeaseConflict)
	is("SetMetadata with a lease ID but no lease", lock.SetMetadata(ctx, id1, st.ETag, md), storage.ErrLeaseConflict)

	// Expiry.
	id3, id4 := uuid.NewString(), uuid.NewString()
	is("Acquire for expiry", lock.Acquire(ctx, id3, d), nil)
	wait(d + time.Second)
	state("after the lease ran out", LeaseExpired, false)
	is("Renew of an expired lease nobody took", lock.Renew(ctx, id3), nil)
	state("renewed after expiry", LeaseLeased, true)
	wait(d + time.Second)
	is("Acquire after expiry", lock.Acquire(ctx, id4, d), nil)
	is("Renew of a lease somebody else took", lock.Renew(ctx, id3), storage.ErrLeaseConflict)
	is("Release of a lease somebody else took", lock.Release(ctx, id3), storage.ErrLeaseConflict)
	is("final Release", lock.Release(ctx, id4), nil)
}

func TestMemLockConformance(t *testing.T) {
	clk := clock.NewFake(t0)
	lockConformance(t, NewMemLock("conformance", clk), clk.Advance)
}

func TestAzuriteBlobLockConformance(t *testing.T) {
	t.Parallel()
	clients := azuriteClients(t)
	lock, err := NewBlobLock(clients, azuritetest.Name(t, "c"), "locks/conformance")
	if err != nil {
		t.Fatal(err)
	}
	lockConformance(t, lock, time.Sleep)
}

func TestAzuriteReadHolderMissing(t *testing.T) {
	t.Parallel()
	clients := azuriteClients(t)
	_, err := ReadHolder(context.Background(), clients, azuritetest.Name(t, "c"), "")
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("ReadHolder of a missing blob: %v, want ErrNotFound", err)
	}
}
