package storage_test

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
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

func TestParseConnectionString(t *testing.T) {
	cs, err := storage.ParseConnectionString("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.chinacloudapi.cn")
	if err != nil {
		t.Fatal(err)
	}
	if cs.BlobEndpoint != "https://acct.blob.core.chinacloudapi.cn" || cs.TableEndpoint != "https://acct.table.core.chinacloudapi.cn" {
		t.Errorf("derived endpoints: %+v", cs)
	}
	cs, err = storage.ParseConnectionString("UseDevelopmentStorage=true")
	if err != nil || cs.AccountName != storage.DevAccountName || !strings.Contains(cs.QueueEndpoint, ":10001/") {
		t.Errorf("dev storage: %+v %v", cs, err)
	}
	cs, err = storage.ParseConnectionString("AccountName=a;AccountKey=a2V5;QueueEndpoint=http://127.0.0.1:9/a")
	if err != nil || cs.QueueEndpoint != "http://127.0.0.1:9/a" || cs.BlobEndpoint != "https://a.blob.core.windows.net" {
		t.Errorf("explicit endpoint: %+v %v", cs, err)
	}
	for _, bad := range []struct{ in, want string }{
		{"AccountName=a", "AccountName and AccountKey are required"},
		{"garbage", "not key=value"},
		{"AccountName=a;AccountKey=k;DefaultEndpointsProtocol=ftp", "ftp"},
		{"AccountName=a;AccountKey=k;BlobEndpoint=not a url", "not an http(s) URL"},
		{"BlobEndpoint=https://x;SharedAccessSignature=sv=1&sig=abc", "SAS connection strings are not supported"},
	} {
		t.Run(bad.in, func(t *testing.T) {
			_, err := storage.ParseConnectionString(bad.in)
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%q: got %v, want %q", bad.in, err, bad.want)
			}
			if err != nil && strings.Contains(err.Error(), "sig=abc") {
				t.Errorf("%q: error leaks the signature: %v", bad.in, err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	in := "AccountName=a;AccountKey=c2VjcmV0;BlobEndpoint=https://a.blob.core.windows.net/?sv=1&sig=s1gn4ture&se=2;SharedAccessSignature=sv=2&sig=zzz"
	out := storage.Redact(in)
	for _, secret := range []string{"c2VjcmV0", "s1gn4ture", "zzz"} {
		t.Run(secret, func(t *testing.T) {
			if strings.Contains(out, secret) {
				t.Errorf("Redact left %q in %q", secret, out)
			}
		})
	}
	if !strings.Contains(out, "AccountName=a") || !strings.Contains(out, "se=2") {
		t.Errorf("Redact removed too much: %q", out)
	}
}

func TestNewNeedsAnAccount(t *testing.T) {
	if _, err := storage.New(storage.Config{}); !errors.Is(err, storage.ErrNoAccount) {
		t.Fatalf("got %v", err)
	}
	if _, err := storage.New(storage.Config{Account: "Bad_Name", Credential: fakeCred{}}); !errors.Is(err, storage.ErrInvalidName) {
		t.Fatalf("bad account name: %v", err)
	}
}

type fakeCred struct{}

func (fakeCred) GetToken(context.Context, policy.TokenRequestOptions) (azcore.AccessToken, error) {
	return azcore.AccessToken{Token: "t", ExpiresOn: time.Now().Add(time.Hour)}, nil
}

// With an account name and an Azure AD credential, requests go to the
// account's public endpoints with a bearer token.
func TestNewWithAzureADCredential(t *testing.T) {
	var seen []string
	c, err := storage.New(storage.Config{Account: "myacct", Credential: fakeCred{}, MaxRetries: -1, Transport: transportFunc(func(r *http.Request) (*http.Response, error) {
		seen = append(seen, r.URL.Host+" "+r.Header.Get("Authorization"))
		return &http.Response{StatusCode: 403, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, qerr := c.Queue.NewQueueClient("q").GetProperties(ctx, nil)
	_, berr := c.Blob.NewContainerClient("c").GetProperties(ctx, nil)
	if !errors.Is(storage.Translate(qerr), storage.ErrAuth) || !errors.Is(storage.Translate(berr), storage.ErrAuth) {
		t.Errorf("403 should translate to ErrAuth: %v / %v", qerr, berr)
	}
	want := []string{"myacct.queue.core.windows.net Bearer t", "myacct.blob.core.windows.net Bearer t"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("requests %v, want %v", seen, want)
	}
}

type transportFunc func(*http.Request) (*http.Response, error)

func (f transportFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

func respErr(status int, code string) error {
	resp := &http.Response{StatusCode: status, Header: http.Header{"X-Ms-Error-Code": {code}}, Body: io.NopCloser(strings.NewReader("")),
		Request: &http.Request{Method: "GET", URL: mustURL("http://h/x")}}
	return runtime.NewResponseError(resp)
}

func TestTranslate(t *testing.T) {
	cases := []struct {
		err       error
		want      error
		transient bool
	}{
		{respErr(404, "BlobNotFound"), storage.ErrNotFound, false},
		{respErr(404, "TableNotFound"), storage.ErrTableNotFound, false},
		{respErr(404, "TableNotFound"), storage.ErrNotFound, false},
		{respErr(409, "LeaseAlreadyPresent"), storage.ErrLeaseConflict, false},
		{respErr(412, "LeaseIdMismatchWithLeaseOperation"), storage.ErrLeaseConflict, false},
		{respErr(412, "ConditionNotMet"), storage.ErrPreconditionFailed, false},
		{respErr(409, "EntityAlreadyExists"), storage.ErrAlreadyExists, false},
		{respErr(403, "AuthenticationFailed"), storage.ErrAuth, false},
		{respErr(400, "InvalidInput"), storage.ErrBadRequest, false},
		{respErr(503, "ServerBusy"), storage.ErrServerBusy, true},
		{respErr(500, "OperationTimedOut"), storage.ErrServerBusy, true},
		{respErr(429, "TooManyRequests"), storage.ErrServerBusy, true},
		{respErr(500, "InternalError"), storage.ErrServerBusy, true},
		{errors.New("dial tcp: connection refused"), nil, true},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got := storage.Translate(tc.err)
			if tc.want != nil && !errors.Is(got, tc.want) {
				t.Errorf("%v: translated to %v, want %v", tc.err, got, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("%v: cause lost in %v", tc.err, got)
			}
			if storage.IsTransient(got) != tc.transient {
				t.Errorf("%v: transient %v, want %v", tc.err, !tc.transient, tc.transient)
			}
		})
	}
	if errors.Is(storage.Translate(respErr(404, "ResourceNotFound")), storage.ErrTableNotFound) {
		t.Error("an entity that is not found was reported as a missing table")
	}
	if storage.Translate(nil) != nil {
		t.Error("Translate(nil) != nil")
	}
}

func TestRetryAfter(t *testing.T) {
	with := func(h http.Header) error {
		resp := &http.Response{StatusCode: 503, Header: h, Body: io.NopCloser(strings.NewReader("")),
			Request: &http.Request{Method: "GET", URL: mustURL("http://h/x")}}
		return storage.Translate(runtime.NewResponseError(resp))
	}
	cases := []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"milliseconds win", http.Header{"Retry-After": {"3"}, "X-Ms-Retry-After-Ms": {"250"}}, 250 * time.Millisecond},
		{"none", http.Header{}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"negative", http.Header{"Retry-After": {"-4"}}, 0},
		{"a date in the past", http.Header{"Retry-After": {"Mon, 02 Jan 2006 15:04:05 GMT"}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := storage.RetryAfter(with(c.h)); got != c.want {
				t.Errorf("RetryAfter = %s, want %s", got, c.want)
			}
		})
	}
	if got := storage.RetryAfter(errors.New("dial tcp: refused")); got != 0 {
		t.Errorf("RetryAfter of a connection error = %s, want 0", got)
	}
}

func TestValidateNames(t *testing.T) {
	for _, ok := range []string{"leasecron-work", "abc", "a1-b2"} {
		t.Run(ok, func(t *testing.T) {
			if err := storage.ValidateQueueName(ok); err != nil {
				t.Errorf("queue %q: %v", ok, err)
			}
		})
	}
	for _, bad := range []string{"ab", "Upper", "double--hyphen", "-lead", "trail-", strings.Repeat("a", 64)} {
		t.Run(bad, func(t *testing.T) {
			if err := storage.ValidateQueueName(bad); err == nil || !strings.Contains(err.Error(), bad) {
				t.Errorf("queue %q accepted or not named: %v", bad, err)
			}
		})
	}
	if err := storage.ValidateTableName("1abc"); err == nil {
		t.Error("table name starting with a digit accepted")
	}
	for _, bad := range []string{"", "a/b", "a\\b", "a#b", "a?b", "tab\there", strings.Repeat("x", 1025), "\xff"} {
		t.Run(bad, func(t *testing.T) {
			if err := storage.ValidateKeyPart("id", bad); !errors.Is(err, storage.ErrInvalidName) {
				t.Errorf("key %q: %v", bad, err)
			}
		})
	}
}

// The counter sees every request the SDK sends, named by operation.
func TestCounterAgainstAzurite(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	counter := storage.NewCounter()
	var hooked int
	counter.OnRequest = func(storage.RequestKey) { hooked++ }
	c, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString(), Counter: counter})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := azuritetest.Name(t, "q")
	if err := c.EnsureQueue(ctx, q); err != nil {
		t.Fatal(err)
	}
	qc := c.Queue.NewQueueClient(q)
	if _, err := qc.EnqueueMessage(ctx, "hi", nil); err != nil {
		t.Fatal(err)
	}
	got, err := qc.DequeueMessage(ctx, nil)
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("dequeue: %v", err)
	}
	if _, err := qc.DeleteMessage(ctx, *got.Messages[0].MessageID, *got.Messages[0].PopReceipt, nil); err != nil {
		t.Fatal(err)
	}
	tb := "t" + azuritetest.Name(t, "")
	if err := c.EnsureTable(ctx, tb); err != nil {
		t.Fatal(err)
	}
	keys, counts := counter.ByOp()
	for _, want := range []string{"queue enqueue", "queue dequeue", "queue delete-message", "table post-table"} {
		t.Run(want, func(t *testing.T) {
			if counts[want] != 1 {
				t.Errorf("%s counted %d times; all: %v %v", want, counts[want], keys, counts)
			}
		})
	}
	if int64(hooked) != counter.Total() || counter.Total() < 5 {
		t.Errorf("hook saw %d, total %d", hooked, counter.Total())
	}
	counter.Reset()
	if counter.Total() != 0 {
		t.Error("Reset did not zero the counts")
	}
}
