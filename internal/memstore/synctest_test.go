package memstore_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/storage"
)

// TestVirtualTime runs SDK round trips inside a synctest bubble, on the
// service's default clock (time.Now, the bubble's virtual time): a lease
// expires after 15 virtual seconds and a message reappears after its
// visibility timeout, while no real time passes and the account leaves no
// goroutine behind.
func TestVirtualTime(t *testing.T) {
	realStart := time.Now()
	synctest.Test(t, func(t *testing.T) {
		srv := memstore.New(memstore.Options{})
		sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString(), Transport: srv.Transport()})
		must(t, "clients", err)
		ctx := context.Background()
		start := time.Now()

		cc := sc.Blob.NewContainerClient("leasecron")
		_, err = cc.Create(ctx, nil)
		must(t, "create container", err)
		bc := cc.NewBlockBlobClient("locks/scheduler")
		_, err = upload(t, bc, "", nil)
		must(t, "upload", err)
		_, err = leaseClient(t, bc, idA).AcquireLease(ctx, 15, nil)
		must(t, "acquire", err)
		leaseState := func() string {
			p, err := bc.GetProperties(ctx, nil)
			must(t, "properties", err)
			return string(*p.LeaseState)
		}
		time.Sleep(15*time.Second - time.Nanosecond)
		if s := leaseState(); s != "leased" {
			t.Fatalf("just before 15 s: %s", s)
		}
		_, err = leaseClient(t, bc, idB).AcquireLease(ctx, 15, nil)
		wantCode(t, "acquire by another before expiry", err, "LeaseAlreadyPresent", 409)
		time.Sleep(time.Nanosecond)
		if s := leaseState(); s != "expired" {
			t.Fatalf("at 15 s: %s", s)
		}
		_, err = leaseClient(t, bc, idB).AcquireLease(ctx, 15, nil)
		must(t, "acquire by another after expiry", err)
		md, err := bc.SetMetadata(ctx, map[string]*string{"k": to.Ptr("v")}, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(idB)}}})
		must(t, "write", err)
		if !md.LastModified.Equal(start.Add(15 * time.Second).Truncate(time.Second)) {
			t.Fatalf("Last-Modified %v, want the virtual %v", md.LastModified, start.Add(15*time.Second))
		}

		qc := sc.Queue.NewQueueClient("work")
		_, err = qc.Create(ctx, nil)
		must(t, "create queue", err)
		_, err = qc.EnqueueMessage(ctx, "m", nil)
		must(t, "enqueue", err)
		get := func() *azqueue.DequeuedMessage {
			r, err := qc.DequeueMessage(ctx, &azqueue.DequeueMessageOptions{VisibilityTimeout: to.Ptr(int32(30))})
			must(t, "dequeue", err)
			if len(r.Messages) == 0 {
				return nil
			}
			return r.Messages[0]
		}
		if m := get(); m == nil || *m.DequeueCount != 1 {
			t.Fatal("the message was not received")
		}
		time.Sleep(29 * time.Second)
		if m := get(); m != nil {
			t.Fatal("the message reappeared before its visibility timeout")
		}
		time.Sleep(time.Second)
		m := get()
		if m == nil || *m.DequeueCount != 2 {
			t.Fatal("the message did not reappear after its visibility timeout")
		}
		if d := time.Since(start); d != 45*time.Second {
			t.Fatalf("virtual time passed: %v, want 45s", d)
		}
	})
	if d := time.Since(realStart); d > 10*time.Second {
		t.Fatalf("the bubble took %v of real time", d)
	}
}
