package memstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/table"
)

// The cost of a request through the SDK and the in-process transport
// (the SDK's pipeline, signing included, is most of it).

func BenchmarkTableInsert(b *testing.B) {
	_, _, sc := account(b, memstore.Options{})
	ctx := context.Background()
	tb, err := table.NewAzure(sc.Table, "Bench")
	must(b, "table", err)
	must(b, "create", tb.Create(ctx))
	props := table.Props{"Message": "hello", "Type": "t", "Attempts": int64(0)}
	i := 0
	for b.Loop() {
		i++
		if _, err := tb.Submit(ctx, []table.Op{{Kind: table.Insert, PartitionKey: "p", RowKey: fmt.Sprintf("r%09d", i), Props: props}}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTableTransaction10(b *testing.B) {
	_, _, sc := account(b, memstore.Options{})
	ctx := context.Background()
	tb, err := table.NewAzure(sc.Table, "Bench")
	must(b, "table", err)
	must(b, "create", tb.Create(ctx))
	i := 0
	ops := make([]table.Op, 10)
	for b.Loop() {
		for j := range ops {
			i++
			ops[j] = table.Op{Kind: table.Insert, PartitionKey: "p", RowKey: fmt.Sprintf("r%09d", i), Props: table.Props{"N": int64(i)}}
		}
		if _, err := tb.Submit(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTableQuery100(b *testing.B) {
	_, _, sc := account(b, memstore.Options{})
	ctx := context.Background()
	tb, err := table.NewAzure(sc.Table, "Bench")
	must(b, "table", err)
	must(b, "create", tb.Create(ctx))
	for i := 0; i < 1000; i += 100 {
		ops := make([]table.Op, 100)
		for j := range ops {
			ops[j] = table.Op{Kind: table.Insert, PartitionKey: "p", RowKey: fmt.Sprintf("r%05d", i+j), Props: table.Props{"N": int64(i + j)}}
		}
		if _, err := tb.Submit(ctx, ops); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		p, err := tb.Query(ctx, table.Query{Partition: "p", From: "r00400", Top: 100})
		if err != nil || len(p.Entities) != 100 {
			b.Fatal(err)
		}
	}
}

func BenchmarkQueuePut(b *testing.B) {
	_, _, sc := account(b, memstore.Options{})
	ctx := context.Background()
	qc := sc.Queue.NewQueueClient("bench")
	_, err := qc.Create(ctx, nil)
	must(b, "create", err)
	o := &azqueue.EnqueueMessageOptions{TimeToLive: to.Ptr(int32(-1))}
	for b.Loop() {
		if _, err := qc.EnqueueMessage(ctx, `{"id":"x","type":"t"}`, o); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkQueueGetDelete(b *testing.B) {
	_, _, sc := account(b, memstore.Options{})
	ctx := context.Background()
	qc := sc.Queue.NewQueueClient("bench")
	_, err := qc.Create(ctx, nil)
	must(b, "create", err)
	for b.Loop() {
		if _, err := qc.EnqueueMessage(ctx, "m", nil); err != nil {
			b.Fatal(err)
		}
		got, err := qc.DequeueMessage(ctx, nil)
		if err != nil || len(got.Messages) != 1 {
			b.Fatal(err)
		}
		if _, err := qc.DeleteMessage(ctx, *got.Messages[0].MessageID, *got.Messages[0].PopReceipt, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBlobLeaseRenew(b *testing.B) {
	_, _, sc := account(b, memstore.Options{})
	ctx := context.Background()
	cc := sc.Blob.NewContainerClient("bench")
	_, err := cc.Create(ctx, nil)
	must(b, "create", err)
	bc := cc.NewBlockBlobClient("lock")
	_, err = upload(b, bc, "", nil)
	must(b, "upload", err)
	lc := leaseClient(b, bc, idA)
	_, err = lc.AcquireLease(ctx, 60, nil)
	must(b, "acquire", err)
	for b.Loop() {
		if _, err := lc.RenewLease(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// The cost of memstore alone: raw requests through Transport.Do, without
// the SDK.

func rawDo(b *testing.B, srv *memstore.Server, method, url, body string, h map[string]string) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := srv.Transport().Do(req)
	if err != nil || resp.StatusCode >= 300 {
		b.Fatalf("%s %s: %v %v", method, url, resp.Status, err)
	}
}

func BenchmarkRawTableInsert(b *testing.B) {
	srv := memstore.New(memstore.Options{})
	base := "http://" + memstore.TableHost + "/acct/"
	rawDo(b, srv, "POST", base+"Tables", `{"TableName":"Bench"}`, map[string]string{"Prefer": "return-no-content"})
	i := 0
	for b.Loop() {
		i++
		rawDo(b, srv, "POST", base+"Bench", fmt.Sprintf(`{"PartitionKey":"p","RowKey":"r%09d","Message":"hello","Type":"t","Attempts":"0","Attempts@odata.type":"Edm.Int64"}`, i),
			map[string]string{"Prefer": "return-no-content", "Accept": "application/json;odata=minimalmetadata"})
	}
}

func BenchmarkRawQueuePut(b *testing.B) {
	srv := memstore.New(memstore.Options{})
	base := "http://" + memstore.QueueHost + "/acct/bench"
	rawDo(b, srv, "PUT", base, "", nil)
	for b.Loop() {
		rawDo(b, srv, "POST", base+"/messages?messagettl=-1", `<QueueMessage><MessageText>{"id":"x","type":"t"}</MessageText></QueueMessage>`, nil)
	}
}
