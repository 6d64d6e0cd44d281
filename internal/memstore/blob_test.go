package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/storage"
)

const (
	idA = "aaaaaaaa-0000-4000-8000-000000000001"
	idB = "bbbbbbbb-0000-4000-8000-000000000002"
)

func upload(t testing.TB, bc *blockblob.Client, data string, o *blockblob.UploadOptions) (blockblob.UploadResponse, error) {
	t.Helper()
	return bc.Upload(ctxT(t), streaming.NopCloser(strings.NewReader(data)), o)
}

func leaseClient(t testing.TB, bc *blockblob.Client, id string) *lease.BlobClient {
	t.Helper()
	lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: to.Ptr(id)})
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

func withLease(id string) *blob.SetMetadataOptions {
	return &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(id)}}}
}

// TestLeaseStateMachine walks a blob's lease through every state, with
// the outcomes of the Lease Blob documentation's tables, and checks that
// lease operations leave the ETag and Last-Modified alone.
func TestLeaseStateMachine(t *testing.T) {
	_, clk, sc := account(t, memstore.Options{})
	ctx := ctxT(t)
	cc := sc.Blob.NewContainerClient("box")
	_, err := cc.Create(ctx, nil)
	must(t, "create container", err)
	bc := cc.NewBlockBlobClient("locks/x")
	_, err = upload(t, bc, "", nil)
	must(t, "upload", err)
	la, lb := leaseClient(t, bc, idA), leaseClient(t, bc, idB)

	state := func(what, wantState, wantStatus, wantDuration string) blob.GetPropertiesResponse {
		t.Helper()
		p, err := bc.GetProperties(ctx, nil)
		must(t, what, err)
		dur := ""
		if p.LeaseDuration != nil {
			dur = string(*p.LeaseDuration)
		}
		if string(*p.LeaseState) != wantState || string(*p.LeaseStatus) != wantStatus || dur != wantDuration {
			t.Fatalf("%s: state %s status %s duration %q; want %s %s %q", what, *p.LeaseState, *p.LeaseStatus, dur, wantState, wantStatus, wantDuration)
		}
		return p
	}
	fresh := state("fresh", "available", "unlocked", "")

	_, err = la.AcquireLease(ctx, 10, nil)
	wantCode(t, "acquire for 10 s", err, "InvalidHeaderValue", 400)
	r, err := la.AcquireLease(ctx, 15, nil)
	must(t, "acquire", err)
	if *r.LeaseID != idA {
		t.Fatalf("acquired lease %s, want %s", *r.LeaseID, idA)
	}
	p := state("leased", "leased", "locked", "fixed")
	if *p.ETag != *fresh.ETag || !p.LastModified.Equal(*fresh.LastModified) {
		t.Fatalf("acquire changed the blob: ETag %s -> %s", *fresh.ETag, *p.ETag)
	}
	_, err = lb.AcquireLease(ctx, 15, nil)
	wantCode(t, "acquire with another id", err, "LeaseAlreadyPresent", 409)
	_, err = la.AcquireLease(ctx, 30, nil)
	must(t, "acquire again with the same id", err)
	_, err = lb.RenewLease(ctx, nil)
	wantCode(t, "renew with another id", err, "LeaseIdMismatchWithLeaseOperation", 409)
	_, err = lb.ChangeLease(ctx, idA, nil) // changing to the lease's own id is allowed
	must(t, "change B to A", err)
	lb = leaseClient(t, bc, idB) // the SDK's client now says A

	// Writes under a lease.
	_, err = bc.SetMetadata(ctx, map[string]*string{"k": to.Ptr("v")}, nil)
	wantCode(t, "write without the lease", err, "LeaseIdMissing", 412)
	if !errors.Is(storage.Translate(err), storage.ErrLeaseConflict) {
		t.Fatalf("LeaseIdMissing translates to %v", storage.Translate(err))
	}
	_, err = bc.SetMetadata(ctx, map[string]*string{"k": to.Ptr("v")}, withLease(idB))
	wantCode(t, "write with another lease", err, "LeaseIdMismatchWithBlobOperation", 412)
	clk.Advance(time.Second)
	_, err = bc.SetMetadata(ctx, map[string]*string{"k": to.Ptr("v")}, withLease(idA))
	must(t, "write with the lease", err)
	p = state("written", "leased", "locked", "fixed")
	if *p.ETag == *fresh.ETag || !p.LastModified.Equal(clk.Now()) || *p.Metadata["K"] != "v" {
		t.Fatalf("after a write: ETag %s, Last-Modified %v (clock %v), metadata %v", *p.ETag, p.LastModified, clk.Now(), p.Metadata)
	}

	// Expiry: renewable until written or leased again.
	clk.Advance(30 * time.Second)
	state("expired", "expired", "unlocked", "")
	_, err = lb.RenewLease(ctx, nil)
	wantCode(t, "renew an expired lease with another id", err, "LeaseIdMismatchWithLeaseOperation", 409)
	_, err = la.RenewLease(ctx, nil)
	must(t, "renew the expired lease", err)
	state("renewed", "leased", "locked", "fixed")
	clk.Advance(30 * time.Second)
	_, err = bc.SetMetadata(ctx, nil, withLease(idA))
	wantCode(t, "write with an expired lease", err, "LeaseNotPresentWithBlobOperation", 412)
	_, err = bc.SetMetadata(ctx, nil, nil)
	must(t, "write after expiry", err)
	state("written after expiry", "available", "unlocked", "")
	_, err = la.RenewLease(ctx, nil)
	wantCode(t, "renew after a write", err, "LeaseIdMismatchWithLeaseOperation", 409)
	_, err = la.ChangeLease(ctx, idB, nil)
	wantCode(t, "change without a lease", err, "LeaseNotPresentWithLeaseOperation", 409)
	_, err = lb.BreakLease(ctx, nil)
	wantCode(t, "break without a lease", err, "LeaseNotPresentWithLeaseOperation", 409)
	_, err = la.ReleaseLease(ctx, nil)
	wantCode(t, "release without a lease", err, "LeaseIdMismatchWithLeaseOperation", 409)

	// An infinite lease, changed, then broken with a period.
	la = leaseClient(t, bc, idA)
	_, err = la.AcquireLease(ctx, -1, nil)
	must(t, "acquire for ever", err)
	state("infinite", "leased", "locked", "infinite")
	_, err = la.ChangeLease(ctx, idB, nil)
	must(t, "change A to B", err)
	_, err = leaseClient(t, bc, idA).RenewLease(ctx, nil)
	wantCode(t, "renew with the old id", err, "LeaseIdMismatchWithLeaseOperation", 409)
	clk.Advance(time.Hour)
	_, err = lb.RenewLease(ctx, nil)
	must(t, "renew an infinite lease an hour on", err)
	br, err := leaseClient(t, bc, idA).BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(10))})
	must(t, "break", err) // any id may break
	if *br.LeaseTime != 10 {
		t.Fatalf("break: lease time %d, want 10", *br.LeaseTime)
	}
	state("breaking", "breaking", "locked", "")
	_, err = lb.AcquireLease(ctx, 15, nil)
	wantCode(t, "acquire a breaking lease by its id", err, "LeaseIsBreakingAndCannotBeAcquired", 409)
	_, err = leaseClient(t, bc, idA).AcquireLease(ctx, 15, nil)
	wantCode(t, "acquire a breaking lease by another id", err, "LeaseAlreadyPresent", 409)
	_, err = lb.RenewLease(ctx, nil)
	wantCode(t, "renew a breaking lease", err, "LeaseIsBrokenAndCannotBeRenewed", 409)
	_, err = lb.ChangeLease(ctx, idA, nil)
	wantCode(t, "change a breaking lease", err, "LeaseIsBreakingAndCannotBeChanged", 409)
	_, err = bc.Delete(ctx, nil)
	wantCode(t, "delete while breaking", err, "LeaseIdMissing", 412)
	_, err = bc.SetMetadata(ctx, nil, withLease(idB))
	must(t, "write with the breaking lease", err)
	clk.Advance(9 * time.Second)
	state("still breaking", "breaking", "locked", "")
	clk.Advance(time.Second)
	state("broken", "broken", "unlocked", "")
	_, err = lb.RenewLease(ctx, nil)
	wantCode(t, "renew a broken lease", err, "LeaseIsBrokenAndCannotBeRenewed", 409)
	_, err = bc.SetMetadata(ctx, nil, nil)
	must(t, "write after the break", err)
	state("broken, written", "broken", "unlocked", "")

	// Broken: anyone may acquire; a break with period 0 is immediate.
	la = leaseClient(t, bc, idA)
	_, err = la.AcquireLease(ctx, 60, nil)
	must(t, "acquire a broken lease", err)
	br, err = lb.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(0))})
	must(t, "break now", err)
	if *br.LeaseTime != 0 {
		t.Fatalf("break now: lease time %d", *br.LeaseTime)
	}
	state("broken now", "broken", "unlocked", "")
	_, err = lb.ReleaseLease(ctx, nil)
	wantCode(t, "release a broken lease by another id", err, "LeaseIdMismatchWithLeaseOperation", 409)
	_, err = la.ReleaseLease(ctx, nil)
	must(t, "release a broken lease", err)
	state("released", "available", "unlocked", "")

	// A fixed lease broken without a period breaks when it would expire.
	_, err = la.AcquireLease(ctx, 20, nil)
	must(t, "acquire", err)
	clk.Advance(5 * time.Second)
	br, err = lb.BreakLease(ctx, nil)
	must(t, "break at expiry", err)
	if *br.LeaseTime != 15 {
		t.Fatalf("break at expiry: lease time %d, want 15", *br.LeaseTime)
	}
	_, err = la.ReleaseLease(ctx, nil)
	must(t, "release a breaking lease", err)

	// Delete needs the lease; a missing blob is 404 (HEAD: the code is in
	// the header).
	_, err = la.AcquireLease(ctx, 15, nil)
	must(t, "acquire", err)
	_, err = bc.Delete(ctx, nil)
	wantCode(t, "delete without the lease", err, "LeaseIdMissing", 412)
	_, err = bc.Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(idA)}}})
	must(t, "delete with the lease", err)
	_, err = bc.GetProperties(ctx, nil)
	wantCode(t, "properties of a deleted blob", err, "BlobNotFound", 404)
	_, err = la.AcquireLease(ctx, 15, nil)
	wantCode(t, "acquire on a deleted blob", err, "BlobNotFound", 404)
}

// TestConditionalWrites: If-Match, If-None-Match and the container's and
// blob's existence, as leasecron's writes use them.
func TestConditionalWrites(t *testing.T) {
	_, clk, sc := account(t, memstore.Options{})
	ctx := ctxT(t)
	cc := sc.Blob.NewContainerClient("box")
	bc := cc.NewBlockBlobClient("a/b")
	_, err := upload(t, bc, "x", nil)
	wantCode(t, "upload to a missing container", err, "ContainerNotFound", 404)
	_, err = cc.Create(ctx, nil)
	must(t, "create container", err)
	_, err = cc.Create(ctx, nil)
	wantCode(t, "create container twice", err, "ContainerAlreadyExists", 409)
	if !errors.Is(storage.Translate(err), storage.ErrAlreadyExists) {
		t.Fatalf("ContainerAlreadyExists translates to %v", storage.Translate(err))
	}
	_, err = sc.Blob.NewContainerClient("Bad_Name").Create(ctx, nil)
	wantCode(t, "create container with a bad name", err, "InvalidResourceName", 400)

	any := azcore.ETagAny
	ifNone := &blockblob.UploadOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &any}}}
	stale := azcore.ETag(`"0x8DC000000000000"`)
	_, err = upload(t, bc, "x", &blockblob.UploadOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &stale}}})
	wantCode(t, "If-Match on a missing blob", err, "ConditionNotMet", 412)
	first, err := upload(t, bc, "first", &blockblob.UploadOptions{
		Metadata:    map[string]*string{"Holder": to.Ptr("me")},
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: to.Ptr("text/plain")},
	})
	must(t, "create with If-None-Match *", err)
	_, err = upload(t, bc, "again", ifNone)
	wantCode(t, "If-None-Match * on an existing blob", err, "BlobAlreadyExists", 409)
	_, err = upload(t, bc, "again", &blockblob.UploadOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &stale}}})
	wantCode(t, "If-Match with a stale ETag", err, "ConditionNotMet", 412)
	if !errors.Is(storage.Translate(err), storage.ErrPreconditionFailed) {
		t.Fatalf("ConditionNotMet translates to %v", storage.Translate(err))
	}

	p, err := bc.GetProperties(ctx, nil)
	must(t, "properties", err)
	if *p.ETag != *first.ETag || *p.ContentType != "text/plain" || *p.ContentLength != 5 || *p.Metadata["Holder"] != "me" || !p.LastModified.Equal(t0) {
		t.Fatalf("properties %+v", p)
	}
	_, err = bc.GetProperties(ctx, &blob.GetPropertiesOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: p.ETag}}})
	if _, s := code(err); s != http.StatusNotModified {
		t.Fatalf("If-None-Match with the ETag: %v, want 304", err)
	}

	clk.Advance(time.Minute)
	md, err := bc.SetMetadata(ctx, map[string]*string{"holder": to.Ptr("you")}, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: p.ETag}}})
	must(t, "set metadata on the ETag read", err)
	if *md.ETag == *p.ETag || !md.LastModified.Equal(t0.Add(time.Minute)) {
		t.Fatalf("set metadata: ETag %s (was %s), Last-Modified %v", *md.ETag, *p.ETag, md.LastModified)
	}
	_, err = bc.SetMetadata(ctx, nil, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: p.ETag}}})
	wantCode(t, "set metadata on the ETag it replaced", err, "ConditionNotMet", 412)

	// Download: all, and a range; the content type is kept.
	d, err := bc.DownloadStream(ctx, nil)
	must(t, "download", err)
	body, _ := io.ReadAll(d.Body)
	if string(body) != "first" || *d.ContentType != "text/plain" || *d.Metadata["Holder"] != "you" {
		t.Fatalf("download: %q %v %v", body, *d.ContentType, d.Metadata)
	}
	d, err = bc.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: 1, Count: 3}})
	must(t, "download a range", err)
	body, _ = io.ReadAll(d.Body)
	if string(body) != "irs" {
		t.Fatalf("range: %q", body)
	}
	_, err = cc.NewBlobClient("nope").DownloadStream(ctx, nil)
	wantCode(t, "download a missing blob", err, "BlobNotFound", 404)
	_, err = sc.Blob.NewContainerClient("nope").NewBlobClient("x").GetProperties(ctx, nil)
	wantCode(t, "properties in a missing container", err, "ContainerNotFound", 404)
}

// TestListBlobs: a flat listing by prefix, with metadata, lease states and
// paging by marker.
func TestListBlobs(t *testing.T) {
	_, _, sc := account(t, memstore.Options{})
	ctx := ctxT(t)
	cc := sc.Blob.NewContainerClient("box")
	_, err := cc.Create(ctx, nil)
	must(t, "create", err)
	for i := range 7 {
		_, err := upload(t, cc.NewBlockBlobClient(fmt.Sprintf("members/m%d/0", i)), "", &blockblob.UploadOptions{Metadata: map[string]*string{"n": to.Ptr(fmt.Sprint(i))}})
		must(t, "upload", err)
	}
	_, err = upload(t, cc.NewBlockBlobClient("other"), "", nil)
	must(t, "upload", err)
	_, err = leaseClient(t, cc.NewBlockBlobClient("members/m3/0"), idA).AcquireLease(ctx, 15, nil)
	must(t, "acquire", err)

	var names []string
	pages := 0
	pager := cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: to.Ptr("members/"), MaxResults: to.Ptr(int32(3)), Include: container.ListBlobsInclude{Metadata: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		must(t, "list", err)
		pages++
		for _, b := range page.Segment.BlobItems {
			names = append(names, *b.Name)
			leased := *b.Name == "members/m3/0"
			if (*b.Properties.LeaseState == lease.StateTypeLeased) != leased || b.Properties.ETag == nil || b.Properties.LastModified == nil {
				t.Fatalf("%s: lease state %s, ETag %v", *b.Name, *b.Properties.LeaseState, b.Properties.ETag)
			}
			if want := strings.TrimSuffix(strings.TrimPrefix(*b.Name, "members/m"), "/0"); *b.Metadata["n"] != want {
				t.Fatalf("%s: metadata %v", *b.Name, b.Metadata)
			}
		}
	}
	if len(names) != 7 || pages != 3 || names[0] != "members/m0/0" || names[6] != "members/m6/0" {
		t.Fatalf("listed %v in %d pages", names, pages)
	}
	_, err = sc.Blob.NewContainerClient("nope").NewListBlobsFlatPager(nil).NextPage(ctx)
	wantCode(t, "list a missing container", err, "ContainerNotFound", 404)
}

// TestErrorFormats: the bodies and headers the SDKs read their codes from.
func TestErrorFormats(t *testing.T) {
	srv := memstore.New(memstore.Options{Now: func() time.Time { return t0 }})
	do := func(method, url string, body string, h map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := srv.Transport().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	read := func(r *http.Response) string { b, _ := io.ReadAll(r.Body); return string(b) }

	r := do("GET", "http://"+memstore.BlobHost+"/acct/nope/blob", "", nil)
	if b := read(r); r.StatusCode != 404 || r.Header.Get("x-ms-error-code") != "ContainerNotFound" ||
		!strings.Contains(b, "<Code>ContainerNotFound</Code>") || !strings.Contains(b, "<Message>") {
		t.Fatalf("blob error: %d %v %s", r.StatusCode, r.Header, b)
	}
	r = do("HEAD", "http://"+memstore.BlobHost+"/acct/nope/blob", "", nil)
	if b := read(r); r.StatusCode != 404 || r.Header.Get("x-ms-error-code") != "ContainerNotFound" || b != "" {
		t.Fatalf("HEAD error: %d %v %q", r.StatusCode, r.Header, b)
	}
	r = do("POST", "http://"+memstore.QueueHost+"/acct/nope/messages", "<QueueMessage><MessageText>x</MessageText></QueueMessage>", nil)
	if b := read(r); r.StatusCode != 404 || r.Header.Get("x-ms-error-code") != "QueueNotFound" || !strings.Contains(b, "<Code>QueueNotFound</Code>") {
		t.Fatalf("queue error: %d %v %s", r.StatusCode, r.Header, b)
	}
	r = do("GET", "http://"+memstore.TableHost+"/acct/Nope(PartitionKey='a',RowKey='b')", "", map[string]string{"Accept": "application/json;odata=minimalmetadata"})
	if b := read(r); r.StatusCode != 404 || r.Header.Get("x-ms-error-code") != "TableNotFound" ||
		!strings.HasPrefix(b, `{"odata.error":{"code":"TableNotFound","message":{"lang":"en-US","value":"`) {
		t.Fatalf("table error: %d %v %s", r.StatusCode, r.Header, b)
	}
	if _, err := srv.Transport().Do(must2(http.NewRequest("GET", "http://elsewhere/acct", nil))); err == nil {
		t.Fatal("a request to an unknown host was served")
	}
	// A request whose context is done is not served.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+memstore.BlobHost+"/acct?comp=list", nil)
	if _, err := srv.Transport().Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled request: %v", err)
	}
	if n := srv.Requests(); n["GetBlob"] != 1 || n["GetBlobProperties"] != 1 || n["PutMessage"] != 1 || n["QueryEntity"] != 1 || n["ListContainers"] != 0 {
		t.Fatalf("requests %v", n)
	}
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
