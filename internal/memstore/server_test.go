package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// TestListen serves the account on loopback ports: clients built from the
// connection string Listen returns, with the SDK's own HTTP transport, see
// what in-process clients see.
func TestListen(t *testing.T) {
	srv := memstore.New(memstore.Options{})
	cs, err := srv.Listen()
	must(t, "listen", err)
	defer srv.Close()
	if again, _ := srv.Listen(); again != cs {
		t.Fatalf("second Listen: %s, first %s", again, cs)
	}
	ctx := ctxT(t)
	sc, err := storage.New(storage.Config{ConnectionString: cs})
	must(t, "clients", err)
	must(t, "container", sc.EnsureContainer(ctx, "leasecron"))
	must(t, "queue", sc.EnsureQueue(ctx, "work"))
	must(t, "table", sc.EnsureTable(ctx, "Runs"))
	bc := sc.Blob.NewContainerClient("leasecron").NewBlockBlobClient("locks/x")
	_, err = upload(t, bc, "", nil)
	must(t, "upload", err)
	_, err = leaseClient(t, bc, idA).AcquireLease(ctx, 15, nil)
	must(t, "acquire", err)
	p, err := bc.GetProperties(ctx, nil)
	if err != nil || *p.LeaseState != lease.StateTypeLeased {
		t.Fatalf("properties over HTTP: %v", err)
	}
	_, err = bc.GetProperties(ctx, &blob.GetPropertiesOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(idB)}}})
	wantCode(t, "HEAD with another lease over HTTP", err, "LeaseIdMismatchWithBlobOperation", 412)

	tb, err := table.NewAzure(sc.Table, "Runs")
	must(t, "table", err)
	_, err = tb.Submit(ctx, []table.Op{
		{Kind: table.Insert, PartitionKey: "p", RowKey: "a", Props: table.Props{"N": int64(1)}},
		{Kind: table.Insert, PartitionKey: "p", RowKey: "b"},
	})
	must(t, "transaction over HTTP", err)
	e, err := tb.Get(ctx, "p", "a")
	if err != nil || e.Props.Int("N") != 1 {
		t.Fatalf("get over HTTP: %v %v", e.Props, err)
	}
	// The in-process transport reaches the same account by its ports.
	local, err := storage.New(storage.Config{ConnectionString: cs, Transport: srv.Transport()})
	must(t, "clients", err)
	if _, err := local.Queue.NewQueueClient("work").GetProperties(ctx, nil); err != nil {
		t.Fatalf("in-process by port: %v", err)
	}

	must(t, "close", srv.Close())
	if _, err := sc.Queue.NewQueueClient("work").GetProperties(ctx, nil); err == nil {
		t.Fatal("served after Close")
	}
	// The data stays; listening again serves it.
	cs2, err := srv.Listen()
	must(t, "listen again", err)
	sc2, err := storage.New(storage.Config{ConnectionString: cs2})
	must(t, "clients", err)
	if _, err := sc2.Queue.NewQueueClient("work").GetProperties(ctx, nil); err != nil {
		t.Fatalf("after listening again: %v", err)
	}
}

// TestRequestsAndDeterminism: two accounts driven alike answer alike (no
// randomness: ids, receipts and ETags come from counters), and count the
// same requests.
func TestRequestsAndDeterminism(t *testing.T) {
	run := func() (string, map[string]int64) {
		srv, _, sc := account(t, memstore.Options{})
		ctx := ctxT(t)
		var out string
		must(t, "container", sc.EnsureContainer(ctx, "leasecron"))
		r, err := upload(t, sc.Blob.NewContainerClient("leasecron").NewBlockBlobClient("b"), "x", nil)
		must(t, "upload", err)
		out += string(*r.ETag)
		must(t, "queue", sc.EnsureQueue(ctx, "work"))
		qc := sc.Queue.NewQueueClient("work")
		put, err := qc.EnqueueMessage(ctx, "m", nil)
		must(t, "enqueue", err)
		got, err := qc.DequeueMessage(ctx, nil)
		must(t, "dequeue", err)
		out += *put.Messages[0].MessageID + *got.Messages[0].PopReceipt
		must(t, "table", sc.EnsureTable(ctx, "Runs"))
		tb, _ := table.NewAzure(sc.Table, "Runs")
		tags, err := tb.Submit(ctx, []table.Op{{Kind: table.Insert, PartitionKey: "p", RowKey: "r"}})
		must(t, "insert", err)
		out += fmt.Sprint(tags)
		srv.ResetRequests()
		_, _ = tb.Get(ctx, "p", "r")
		return out, srv.Requests()
	}
	a, na := run()
	b, nb := run()
	if a != b || fmt.Sprint(na) != fmt.Sprint(nb) || fmt.Sprint(na) != "map[QueryEntity:1]" {
		t.Fatalf("two runs differ:\n%s %v\n%s %v", a, na, b, nb)
	}
}

// TestTransportIsARoundTripper: a plain http.Client can use it.
func TestTransportIsARoundTripper(t *testing.T) {
	srv := memstore.New(memstore.Options{})
	c := &http.Client{Transport: srv.Transport()}
	resp, err := c.Get("http://" + memstore.BlobHost + "/" + memstore.AccountName + "?comp=list")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+memstore.BlobHost+"/x", nil)
	if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestConcurrentAtomicity: requests racing for one lease or one ETag
// are served one at a time: exactly one of them wins.
func TestConcurrentAtomicity(t *testing.T) {
	_, _, sc := account(t, memstore.Options{})
	ctx := ctxT(t)
	must(t, "container", sc.EnsureContainer(ctx, "leasecron"))
	bc := sc.Blob.NewContainerClient("leasecron").NewBlockBlobClient("lock")
	_, err := upload(t, bc, "", nil)
	must(t, "upload", err)
	must(t, "table", sc.EnsureTable(ctx, "Fence"))
	tb, _ := table.NewAzure(sc.Table, "Fence")
	tags, err := tb.Submit(ctx, []table.Op{{Kind: table.Insert, PartitionKey: "p", RowKey: "fence"}})
	must(t, "insert", err)

	const n = 16
	leases, updates := make(chan error, n), make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
			_, err := leaseClient(t, bc, id).AcquireLease(ctx, 15, nil)
			leases <- err
			_, err = tb.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: "p", RowKey: "fence", IfMatch: tags[0], Props: table.Props{"G": int64(i)}}})
			updates <- err
		}()
	}
	wg.Wait()
	close(leases)
	close(updates)
	count := func(ch chan error, refused error) (won int) {
		for err := range ch {
			switch {
			case err == nil:
				won++
			case !errors.Is(storage.Translate(err), refused):
				t.Fatalf("refused with %v", err)
			}
		}
		return won
	}
	if w := count(leases, storage.ErrLeaseConflict); w != 1 {
		t.Fatalf("%d acquired the lease", w)
	}
	if w := count(updates, storage.ErrPreconditionFailed); w != 1 {
		t.Fatalf("%d updated on the same ETag", w)
	}
}
