package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/queue"
)

// A unique task POSTed without an id is scheduled on a sharded schedule:
// its id must fall in its key's shard, which the client draws it for.
// Before, the server named every task it was not given an id for, and
// with 8 shards nearly every such POST was refused with 400, telling the
// caller to leave the id empty — which it had (a review's find).
func TestAUniquePostWithoutAnIDIsScheduledWithShards(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()},
		Names: leasecron.Names{Shards: 8}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, tok, err := c.CreateToken(context.Background(), "sch", leasecron.RoleScheduler, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) (int, string) {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/tasks", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for i := range 8 {
		body := fmt.Sprintf(`{"type":"welcome","in":"1h","unique_key":"user-%d"}`, i)
		if code, answer := post(body); code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s; want 201", body, code, answer)
		}
		// The key is held now: the same POST is refused as a duplicate.
		if code, answer := post(body); code != http.StatusConflict || !strings.Contains(answer, "unique-key-held") {
			t.Fatalf("POST %s again: %d %s; want 409 unique-key-held", body, code, answer)
		}
	}
}

// A retried POST of a task without a type, or with --after ids given with
// spaces or twice, answers as the first did: the request is compared with
// the pending task as the schedule stores it (type "default", the parent
// ids trimmed and without repeats). Before, the retry answered 409 (a
// review's find).
func TestARetriedPostIsComparedAsStored(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, tok, err := c.CreateToken(context.Background(), "sch", leasecron.RoleScheduler, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) (int, string) {
		r := httptest.NewRequest(http.MethodPost, "/api/v1/tasks", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	for _, id := range []string{"p1", "p2"} {
		if _, err := c.Schedule(context.Background(), leasecron.Item{ID: id, Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, body := range []string{
		`{"id":"notype","in":"10m"}`,
		`{"id":"child","type":"t","after":["p1", " p2", "p1"]}`,
	} {
		if code, answer := post(body); code != http.StatusCreated {
			t.Fatalf("POST %s: %d %s; want 201", body, code, answer)
		}
		if code, answer := post(body); code != http.StatusOK {
			t.Fatalf("POST %s again: %d %s; want 200, as the first", body, code, answer)
		}
	}
}

// A token limited to types sees in health only its types' pauses and dead
// letters, as docs/api.md says of dead letters (a review found it shown
// the fleet's dead-letter total and every paused type).
func TestHealthShowsALimitedTokenItsOwnTypes(t *testing.T) {
	ctx := context.Background()
	ms := memstore.New(memstore.Options{})
	st := leasecron.Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()}
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"invoice", "mail"} {
		if err := c.Pause(ctx, typ, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	svc, err := azqueue.NewServiceClientFromConnectionString(ms.ConnectionString(), &azqueue.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: ms.Transport()}})
	if err != nil {
		t.Fatal(err)
	}
	qc := svc.NewQueueClient(leasecron.Names{}.WithDefaults().PoisonQueue)
	if _, err := qc.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	poison, err := queue.NewAzureQueue(qc)
	if err != nil {
		t.Fatal(err)
	}
	for i, typ := range []string{"invoice", "mail", "mail"} {
		body, err := queue.Envelope{ID: fmt.Sprintf("d%d", i), Type: typ, Due: time.Now()}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := json.Marshal(queue.DeadLetter{Reason: "max attempts", Body: body, At: time.Now(), RunID: fmt.Sprintf("d%d", i), Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := poison.Enqueue(ctx, string(rec), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		types  []string
		dead   int
		paused []string
	}{{"all", nil, 3, []string{"invoice", "mail"}}, {"lim", []string{"invoice"}, 1, []string{"invoice"}}} {
		_, tok, err := c.CreateToken(ctx, tc.name, leasecron.RoleViewer, tc.types, "test")
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodGet, "/api/v1/health", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var got Health
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s (%v)", tc.name, w.Code, w.Body, err)
		}
		slices.Sort(got.PausedTypes)
		if got.DeadLetters != tc.dead || !slices.Equal(got.PausedTypes, tc.paused) {
			t.Errorf("%s: health shows %d dead letters, paused %v; want %d, %v", tc.name, got.DeadLetters, got.PausedTypes, tc.dead, tc.paused)
		}
	}
}

// A batch's callback of a type the token may not touch is refused with
// 403, as a task of such a type is (docs/api.md: "Anything else is 403");
// it was a 400 (a review's find).
func TestACallbackOfAnotherTypeIsForbidden(t *testing.T) {
	ms := memstore.New(memstore.Options{})
	c, err := leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: ms.ConnectionString(), Transport: ms.Transport()}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, tok, err := c.CreateToken(context.Background(), "lim", leasecron.RoleScheduler, []string{"invoice"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	body := `{"tasks":[{"id":"i1","type":"invoice"}],"batch":"b1","on_complete":{"type":"mail"}}`
	r := httptest.NewRequest(http.MethodPost, "/api/v1/tasks:many", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+tok)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "mail") {
		t.Fatalf("POST %s by a token limited to invoice: %d %s; want 403 naming the type", body, w.Code, w.Body)
	}
}
