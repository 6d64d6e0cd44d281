package throttle

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/storage"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// backend is a stand-in service that answers 200 and counts requests.
func backend(t *testing.T) (host string, hits func() int) {
	t.Helper()
	n := 0
	ch := make(chan struct{}, 10000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		ch <- struct{}{}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), func() int {
		for {
			select {
			case <-ch:
				n++
			default:
				return n
			}
		}
	}
}

func newProxy(t *testing.T, svc Service) (*Proxy, func() int) {
	t.Helper()
	host, hits := backend(t)
	p, err := New(Options{Target: host, Service: svc, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, hits
}

func do(t *testing.T, p *Proxy, method, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+p.Addr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestOptionsAreChecked(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"no target", Options{Service: Queue}, "Target is empty"},
		{"bad target", Options{Target: "nohost", Service: Queue}, "want host:port"},
		{"bad service", Options{Target: "127.0.0.1:1", Service: "files"}, `Service "files"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New(%+v): %v, want an error containing %q", c.o, err, c.want)
			}
		})
	}
	p, _ := newProxy(t, Queue)
	if err := p.SetRefuse(1.5); err == nil {
		t.Error("SetRefuse(1.5) accepted")
	}
	if err := p.SetLimits(Limits{QueueMessages: -1}); err == nil || !strings.Contains(err.Error(), "QueueMessages") {
		t.Errorf("SetLimits with a negative rate: %v", err)
	}
}

// A refusal looks like Azure's: 503, x-ms-error-code ServerBusy,
// Retry-After, and the error body of the service's format; nothing reaches
// the service.
func TestRefuseAllAnswersServerBusy(t *testing.T) {
	for _, svc := range []Service{Queue, Table} {
		t.Run(string(svc), func(t *testing.T) {
			p, hits := newProxy(t, svc)
			p.RefuseAll(true)
			resp := do(t, p, http.MethodGet, "/devstoreaccount1/q/messages", "")
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("x-ms-error-code") != "ServerBusy" || resp.Header.Get("Retry-After") != "1" {
				t.Errorf("refusal: %d %v", resp.StatusCode, resp.Header)
			}
			wantType := "application/xml"
			if svc == Table {
				wantType = "application/json"
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, wantType) {
				t.Errorf("content type %q, want %s", ct, wantType)
			}
			p.RefuseAll(false)
			if resp := do(t, p, http.MethodGet, "/devstoreaccount1/q/messages", ""); resp.StatusCode != http.StatusOK {
				t.Errorf("after RefuseAll(false): %d", resp.StatusCode)
			}
			if n := hits(); n != 1 {
				t.Errorf("the service saw %d requests, want 1", n)
			}
			if s := p.Stats(); s.Requests != 2 || s.All != 1 || s.Refused != 1 || s.Forwarded != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// Random refusals refuse about the share asked for.
func TestRandomRefusals(t *testing.T) {
	p, _ := newProxy(t, Queue)
	if err := p.SetRefuse(0.3); err != nil {
		t.Fatal(err)
	}
	const n = 400
	refused := 0
	for range n {
		if do(t, p, http.MethodGet, "/devstoreaccount1/q/messages", "").StatusCode == http.StatusServiceUnavailable {
			refused++
		}
	}
	if share := float64(refused) / n; share < 0.2 || share > 0.4 {
		t.Errorf("refused %d of %d (%.2f), want about 0.3", refused, n, share)
	}
}

// Each queue, table partition and blob has its own bucket: past its rate
// it is refused while the others are not; a batch counts its operations.
func TestLimitsPerQueuePartitionAndBlob(t *testing.T) {
	t.Run("queue", func(t *testing.T) {
		p, _ := newProxy(t, Queue)
		if err := p.SetLimits(Limits{QueueMessages: 5}); err != nil {
			t.Fatal(err)
		}
		codes := map[string][]int{}
		for range 8 {
			for _, q := range []string{"a", "b"} {
				codes[q] = append(codes[q], do(t, p, http.MethodPost, "/devstoreaccount1/"+q+"/messages", "<x/>").StatusCode)
			}
		}
		for q, cs := range codes {
			ok := 0
			for _, c := range cs {
				if c == http.StatusOK {
					ok++
				}
			}
			if ok < 5 || ok > 6 {
				t.Errorf("queue %s: %d of 8 accepted in a burst at 5/s, want 5 (6 if a token refilled)", q, ok)
			}
		}
		// Queue-level requests (create, properties) are not messages.
		if c := do(t, p, http.MethodGet, "/devstoreaccount1/a?comp=metadata", "").StatusCode; c != http.StatusOK {
			t.Errorf("get properties of a throttled queue: %d", c)
		}
		if s := p.Stats(); s.QueueLimit == 0 {
			t.Errorf("stats %+v: no queue-limit refusals", s)
		}
	})
	t.Run("table partition", func(t *testing.T) {
		p, _ := newProxy(t, Table)
		if err := p.SetLimits(Limits{PartitionEntities: 10}); err != nil {
			t.Fatal(err)
		}
		batch := func(pk string, ops int) string {
			var b strings.Builder
			b.WriteString("--batch\r\nContent-Type: multipart/mixed; boundary=cs\r\n\r\n")
			for range ops {
				// An insert posts to the table's URL, with the SDK's query.
				b.WriteString("--cs\r\nContent-Type: application/http\r\n\r\nPOST http://127.0.0.1:10002/devstoreaccount1/Sched?%24format=application%2Fjson%3Bodata%3Dminimalmetadata HTTP/1.1\r\n\r\n")
				b.WriteString(`{"PartitionKey":"` + pk + `","RowKey":"r"}` + "\r\n")
			}
			return b.String()
		}
		if c := do(t, p, http.MethodPost, "/devstoreaccount1/$batch", batch("p1", 8)).StatusCode; c != http.StatusOK {
			t.Fatalf("a batch of 8 within 10/s: %d", c)
		}
		if c := do(t, p, http.MethodPost, "/devstoreaccount1/$batch", batch("p1", 8)).StatusCode; c != http.StatusServiceUnavailable {
			t.Errorf("a second batch of 8 in the same partition: %d, want 503", c)
		}
		// A batch larger than a second's worth passes on a full bucket,
		// leaving it in debt: the next request waits for the refill.
		if c := do(t, p, http.MethodPost, "/devstoreaccount1/$batch", batch("p3", 25)).StatusCode; c != http.StatusOK {
			t.Errorf("a batch of 25 on a full bucket of 10/s: %d, want 200", c)
		}
		if c := do(t, p, http.MethodGet, "/devstoreaccount1/Sched(PartitionKey='p3',RowKey='x')", "").StatusCode; c != http.StatusServiceUnavailable {
			t.Errorf("right after a batch of 25 at 10/s: %d, want 503", c)
		}
		if c := do(t, p, http.MethodGet, "/devstoreaccount1/Sched(PartitionKey='p2',RowKey='x')", "").StatusCode; c != http.StatusOK {
			t.Errorf("another partition: %d, want 200", c)
		}
		if c := do(t, p, http.MethodGet, "/devstoreaccount1/Sched()?$filter=PartitionKey%20eq%20'p1'", "").StatusCode; c != http.StatusOK {
			t.Errorf("a query of the partition with 2 entities' worth left: %d, want 200", c)
		}
		if s := p.Stats(); s.PartitionLimit != 2 {
			t.Errorf("stats %+v: want two partition-limit refusals", s)
		}
		// Batched inserts count against the table's partition, as single
		// requests do (they once went to a bucket of no table, unlimited
		// beside the partition's own).
		if b := p.Buckets(); b["partition/Sched/p1"] != (BucketStats{Requests: 2, Cost: 9, Refused: 1}) || len(b) != 3 {
			t.Errorf("buckets %+v: want partition/Sched/p1 with the batch of 8 and the query, one batch refused; and p2", b)
		}
	})
	t.Run("account", func(t *testing.T) {
		p, _ := newProxy(t, Blob)
		if err := p.SetLimits(Limits{AccountRequests: 3}); err != nil {
			t.Fatal(err)
		}
		ok := 0
		for i := range 6 {
			if do(t, p, http.MethodGet, "/devstoreaccount1/c/b"+string(rune('0'+i)), "").StatusCode == http.StatusOK {
				ok++
			}
		}
		if ok < 3 || ok > 4 {
			t.Errorf("%d of 6 accepted at 3/s, want 3", ok)
		}
	})
}

// Through the proxies, the storage layer sees ServerBusy as a transient
// error, and traffic flows again once the refusals stop.
func TestAzuriteThroughThrottle(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	b, q, tb := srv.Ports()
	set, err := NewSet(b, q, tb, Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(set.Close)
	sc, err := storage.New(storage.Config{ConnectionString: set.ConnectionString(), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	set.RefuseAll(true)
	err = sc.EnsureTable(ctx, "Throttled")
	if !errors.Is(err, storage.ErrServerBusy) || !storage.IsTransient(err) {
		t.Fatalf("create table while refused: %v, want ErrServerBusy (transient)", err)
	}
	if d := storage.RetryAfter(err); d != time.Second {
		t.Errorf("RetryAfter = %s, want 1s", d)
	}
	set.RefuseAll(false)
	if err := sc.EnsureTable(ctx, "Throttled"); err != nil {
		t.Fatal(err)
	}
	if err := sc.EnsureQueue(ctx, "throttled"); err != nil {
		t.Fatal(err)
	}
	if s := set.Stats(); s.All != 1 || s.Forwarded < 2 {
		t.Errorf("stats %+v", s)
	}
}
