package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

type azEnv struct {
	clients *storage.Clients
	table   *table.Azure
	raw     *aztables.Client
	c       *Client
	fc      *clock.Fake
	store   *payload.BlobStore
}

func newAzEnv(t *testing.T, o Options) *azEnv {
	t.Helper()
	srv := azuritetest.Shared(t)
	clients, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	name := azuritetest.Name(t, "t")
	tbl, err := table.NewAzure(clients.Table, name)
	if err != nil {
		t.Fatal(err)
	}
	store, err := payload.NewBlobStore(clients.Blob, payload.Options{Container: azuritetest.Name(t, "c")})
	if err != nil {
		t.Fatal(err)
	}
	fc := clock.NewFake(t0)
	o.Clock, o.Logger = fc, quiet
	if o.PayloadStore == nil {
		o.PayloadStore = store
	}
	c, err := newClient(tbl, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ensure(ctx(t)); err != nil {
		t.Fatal(err)
	}
	return &azEnv{clients: clients, table: tbl, raw: clients.Table.NewClient(name), c: c, fc: fc, store: store}
}

func (a *azEnv) mover(t *testing.T, gen int64, q *fakeQueue, o MoverOptions) *Mover {
	t.Helper()
	o.Generation = func() int64 { return gen }
	o.Enqueuer, o.SetAside, o.Clock, o.Logger = q, q, a.fc, quiet
	if o.PayloadStore == nil {
		o.PayloadStore = a.store
	}
	m, err := newMover(a.table, o)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// allKeys lists every RowKey of partition "00".
func (a *azEnv) allKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	q := table.Query{Partition: "00"}
	for {
		p, err := a.table.Query(ctx(t), q)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, keysOf(p.Entities)...)
		if p.Continuation == "" {
			return keys
		}
		q.Continuation = p.Continuation
	}
}

func TestAzureClientLifecycle(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	c := a.c
	it, err := c.Add(ctx(t), Item{ID: "report:2025-01", Due: t0.Add(time.Hour), Payload: `{"x":"y"}`, Type: "report", MaxAttempts: 2}, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx(t), "report:2025-01")
	if err != nil || got.Payload != `{"x":"y"}` || got.Type != "report" || got.MaxAttempts != 2 || !got.Due.Equal(it.Due) || !got.Indexed {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "report:2025-01", Due: t0}, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "report:2025-01", Due: t0.Add(-time.Minute), Payload: "v2"}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Add(ctx(t), Item{ID: fmt.Sprintf("n%d", i), Due: t0.Add(time.Duration(i) * time.Minute)}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reschedule(ctx(t), "n0", t0.Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	var ids []string
	tok := ""
	for {
		items, next, err := c.List(ctx(t), ListOptions{Limit: 2, Continuation: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		if tok = next; tok == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "report:2025-01,n1,n2,n0" {
		t.Fatalf("List = %v", ids)
	}
	st, err := c.Due(ctx(t), t0)
	if err != nil || st.Count != 1 || st.Lag != time.Minute {
		t.Fatalf("Due = %+v, %v", st, err)
	}
	if _, err := c.Cancel(ctx(t), "report:2025-01"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx(t), "report:2025-01"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second cancel: %v", err)
	}
	keys := a.allKeys(t)
	if len(keys) != 6 { // n0..n2 and their index rows
		t.Fatalf("rows %v", keys)
	}
}

func TestAzureDirectRowsAreMoved(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	put := func(rk string, props map[string]any) {
		props["PartitionKey"], props["RowKey"] = "00", rk
		b, _ := json.Marshal(props)
		if _, err := a.raw.AddEntity(ctx(t), b, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(mustKey(t0.Add(-time.Minute), "0b7a3c1e-guid"), map[string]any{"Message": "from python"})
	put(mustKey(t0.Add(-time.Second), "typed"), map[string]any{"Message": "m", "Type": "email"})
	put(mustKey(t0, "o'brien"), map[string]any{"Message": "quoted"})
	put("!garbage", map[string]any{"Message": "m"})
	put(mustKey(t0.Add(time.Hour), "later"), map[string]any{"Message": "not yet"})
	q := &fakeQueue{}
	m := a.mover(t, 1, q, MoverOptions{})
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if ids := q.ids(); len(ids) != 2 {
		t.Fatalf("sent %v", ids)
	}
	s, _ := q.byID("0b7a3c1e-guid")
	if s.env.Payload != "from python" || s.env.Type != DefaultType {
		t.Fatalf("envelope %+v", s.env)
	}
	if s, _ := q.byID("typed"); s.env.Type != "email" {
		t.Fatalf("typed %+v", s.env)
	}
	// "o'brien" is outside the ids' character set: set aside too.
	if raw := strings.Join(q.raw, "\n"); len(q.aside) != 2 || !strings.Contains(raw, "!garbage") || !strings.Contains(raw, "brien") {
		t.Fatalf("aside %v", q.aside)
	}
	if keys := a.allKeys(t); strings.Join(keys, " ") != mustKey(t0.Add(time.Hour), "later")+" "+FenceRowKey {
		t.Fatalf("rows left %v", keys)
	}
}

func TestAzureStaleFenceFailsWholeBatch(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	for i := range 5 {
		if _, err := a.c.Add(ctx(t), Item{ID: fmt.Sprintf("f%d", i), Due: t0}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	qa, qb := &fakeQueue{}, &fakeQueue{}
	old := a.mover(t, 1, qa, MoverOptions{})
	if err := old.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	// The raw service behaviour the design rests on: a transaction whose
	// fence update carries a stale ETag fails entirely.
	staleETag := old.fence["00"]
	newer := a.mover(t, 2, qb, MoverOptions{})
	if err := newer.takeFence(ctx(t), "00", 2); err != nil {
		t.Fatal(err)
	}
	rows := a.allKeys(t)
	_, err := a.table.Submit(ctx(t), []table.Op{
		{Kind: table.Delete, PartitionKey: "00", RowKey: rows[0]},
		{Kind: table.Delete, PartitionKey: "00", RowKey: rows[1]},
		{Kind: table.Merge, PartitionKey: "00", RowKey: FenceRowKey, Props: map[string]any{PropGeneration: int64(1)}, IfMatch: staleETag},
	})
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("stale fence transaction: %v, want ErrPreconditionFailed", err)
	}
	// The stale mover: enqueues (a duplicate), then its batch fails whole.
	_, err = old.pass(ctx(t), 1)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("stale pass = %v", err)
	}
	if got := a.allKeys(t); len(got) != 11 {
		t.Fatalf("a stale leader deleted rows: %v", got)
	}
	if len(qa.ids()) != 5 {
		t.Fatalf("stale mover sent %v", qa.ids())
	}
	// Taking control again with the old generation is refused.
	if err := old.takeFence(ctx(t), "00", 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("old takeFence = %v", err)
	}
	if _, err := newer.pass(ctx(t), 2); err != nil {
		t.Fatal(err)
	}
	if got := a.allKeys(t); len(got) != 1 || len(qb.ids()) != 5 {
		t.Fatalf("newer leader: rows %v sent %v", got, qb.ids())
	}
}

func TestAzureRowChangedDuringMove(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	for _, id := range []string{"a", "b", "c"} {
		t.Run(id, func(t *testing.T) {
			if _, err := a.c.Add(ctx(t), Item{ID: id, Due: t0}, AddOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// c has lost its index row: the mover must still remove it.
	if _, err := a.table.Submit(ctx(t), []table.Op{{Kind: table.Delete, PartitionKey: "00", RowKey: "id~c"}}); err != nil {
		t.Fatal(err)
	}
	q := &fakeQueue{}
	q.hook = func(env queue.Envelope) error {
		if env.ID == "b" {
			_, err := a.c.Add(context.Background(), Item{ID: "b", Due: t0, Payload: "replaced"}, AddOptions{Replace: true})
			return err
		}
		return nil
	}
	m := a.mover(t, 1, q, MoverOptions{MoverSettings: MoverSettings{Concurrency: 1}})
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	got, err := a.c.Get(ctx(t), "b")
	if err != nil || got.Payload != "replaced" {
		t.Fatalf("replaced row lost: %+v %v", got, err)
	}
	if keys := a.allKeys(t); len(keys) != 3 { // b, id~b, fence
		t.Fatalf("rows %v", keys)
	}
	if st := m.Stats(); st.Skipped != 1 || st.Moved != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAzureRecurringReplacedAtomically(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	first, err := a.c.Add(ctx(t), Item{ID: "beat", Due: t0, Recurrence: "@every 1m", Payload: "hb"}, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := &fakeQueue{}
	m := a.mover(t, 9, q, MoverOptions{MoverSettings: MoverSettings{Early: -1}})
	if err := m.takeFence(ctx(t), "00", 9); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := m.pass(ctx(t), 9); err != nil {
			t.Fatal(err)
		}
		next, err := a.c.Get(ctx(t), "beat")
		want := t0.Add(time.Duration(i+1) * time.Minute)
		if err != nil || !next.Due.Equal(want) || next.Payload != "hb" {
			t.Fatalf("after pass %d: %+v %v (want due %s)", i, next, err, want)
		}
		if keys := a.allKeys(t); len(keys) != 3 || keys[0] != next.RowKey {
			t.Fatalf("rows %v", keys)
		}
		a.fc.Advance(time.Minute)
	}
	ids := q.ids()
	if len(ids) != 3 || ids[0] != "beat@"+first.Due.Format(time.RFC3339Nano) {
		t.Fatalf("sent %v", ids)
	}
	if _, err := a.c.Cancel(ctx(t), "beat"); err != nil {
		t.Fatal(err)
	}
	if keys := a.allKeys(t); len(keys) != 1 {
		t.Fatalf("rows after cancel %v", keys)
	}
}

func TestAzureLargePayloadRoundTrip(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	big := strings.Repeat(`{"k":"ünïcødé"}`, 8<<10) // ~150 KiB
	it, err := a.c.Add(ctx(t), Item{ID: "big", Due: t0, Payload: big}, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if it.Payload != "" || !strings.HasPrefix(it.PayloadBlob, a.store.Container()+"/payloads/big-") {
		t.Fatalf("not claim-checked: %+v", it.PayloadBlob)
	}
	got, _ := a.c.Get(ctx(t), "big")
	if p, err := a.store.Get(ctx(t), got.PayloadBlob); err != nil || string(p) != big {
		t.Fatalf("payload blob: %d bytes, %v", len(p), err)
	}
	// A refused duplicate leaves no blob behind.
	if _, err := a.c.Add(ctx(t), Item{ID: "big", Due: t0, Payload: big}, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
		t.Fatal(err)
	}
	if n := countBlobs(t, a); n != 1 {
		t.Fatalf("%d blobs after refused duplicate", n)
	}
	q := &fakeQueue{}
	m := a.mover(t, 1, q, MoverOptions{})
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.pass(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	s, ok := q.byID("big")
	if !ok || s.env.PayloadBlob != it.PayloadBlob || s.env.Payload != "" {
		t.Fatalf("envelope %+v", s.env)
	}
	if b, err := a.store.Get(ctx(t), s.env.PayloadBlob); err != nil || string(b) != big {
		t.Fatalf("blob via envelope: %d bytes, %v", len(b), err)
	}
	// Cancel deletes the blob of what it cancels.
	if _, err := a.c.Add(ctx(t), Item{ID: "big2", Due: t0.Add(time.Hour), Payload: big}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Cancel(ctx(t), "big2"); err != nil {
		t.Fatal(err)
	}
	if n := countBlobs(t, a); n != 1 {
		t.Fatalf("%d blobs after cancel, want 1 (the moved task's)", n)
	}
}

func countBlobs(t *testing.T, a *azEnv) int {
	t.Helper()
	n := 0
	pager := a.clients.Blob.NewContainerClient(a.store.Container()).NewListBlobsFlatPager(nil)
	for pager.More() {
		p, err := pager.NextPage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Segment.BlobItems)
	}
	return n
}

func TestAzureThousandRowsInOrderNoLoss(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	const n = 1000
	var ops []table.Op
	flush := func() {
		if _, err := a.table.Submit(ctx(t), ops); err != nil {
			t.Fatal(err)
		}
		ops = nil
	}
	for i := range n {
		// Inserted in a shuffled order; due times spread over the last hour.
		j := (i * 7919) % n
		ops = append(ops, table.Op{Kind: table.Insert, PartitionKey: "00", RowKey: mustKey(t0.Add(-time.Hour+time.Duration(j)*time.Second), fmt.Sprintf("r%04d", j)), Props: map[string]any{"Message": fmt.Sprint(j)}})
		if len(ops) == 100 {
			flush()
		}
	}
	q := &fakeQueue{}
	var mu sync.Mutex
	var order []string
	batches := 0
	m := a.mover(t, 1, q, MoverOptions{OnMoved: func(_ context.Context, envs []queue.Envelope) {
		mu.Lock()
		defer mu.Unlock()
		batches++
		for _, e := range envs {
			order = append(order, e.ID)
		}
	}})
	start := time.Now()
	if err := m.takeFence(ctx(t), "00", 1); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		full, err := m.pass(ctx(t), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !full {
			break
		}
	}
	t.Logf("moved %d rows in %d batches in %s", len(order), batches, time.Since(start))
	if len(order) != n || len(q.ids()) != n {
		t.Fatalf("moved %d, sent %d", len(order), len(q.ids()))
	}
	for i, id := range order {
		if id != fmt.Sprintf("r%04d", i) {
			t.Fatalf("out of order at %d: %s", i, id)
		}
	}
	if keys := a.allKeys(t); len(keys) != 1 || keys[0] != FenceRowKey {
		t.Fatalf("left %d rows", len(keys))
	}
}

func TestAzureRunLoop(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	for i := range 3 {
		if _, err := a.c.Add(ctx(t), Item{ID: fmt.Sprintf("l%d", i), Due: t0.Add(time.Duration(i) * time.Second)}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	q := &fakeQueue{}
	m := a.mover(t, 1, q, MoverOptions{MoverSettings: MoverSettings{PollEvery: time.Second, Early: -1}})
	cancel, wait := runMover(t, m)
	if err := a.fc.WaitForTimers(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if ids := q.ids(); len(ids) != 1 {
		t.Fatalf("first poll sent %v", ids)
	}
	a.fc.Advance(2 * time.Second)
	if err := a.fc.WaitForTimers(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	if ids := q.ids(); len(ids) != 3 {
		t.Fatalf("second poll sent %v", ids)
	}
	cancel()
	if err, ok := wait(10 * time.Second); !ok || err != nil {
		t.Fatalf("Run = %v (returned %v)", err, ok)
	}
	if keys := a.allKeys(t); len(keys) != 1 {
		t.Fatalf("rows %v", keys)
	}
}

// TestAzureFenceTakeover: two movers taking control of an empty
// partition at once both succeed in order, and the older one then fails.
func TestAzureFenceTakeover(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	q := &fakeQueue{}
	m5 := a.mover(t, 5, q, MoverOptions{})
	m6 := a.mover(t, 6, q, MoverOptions{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, m := range []*Mover{m5, m6} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.takeFence(ctx(t), "00", int64(5+i))
		}()
	}
	wg.Wait()
	if errs[1] != nil {
		t.Fatalf("newest generation refused: %v", errs[1])
	}
	if errs[0] != nil && !errors.Is(errs[0], ErrFenced) {
		t.Fatalf("older generation: %v", errs[0])
	}
	e, err := a.raw.GetEntity(ctx(t), "00", FenceRowKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	var fence aztables.EDMEntity
	if err := json.Unmarshal(e.Value, &fence); err != nil {
		t.Fatal(err)
	}
	if g, ok := fence.Properties[PropGeneration].(aztables.EDMInt64); !ok || g != 6 {
		t.Fatalf("fence holds %#v", fence.Properties[PropGeneration])
	}
	// A merge with If-Match on the stale ETag is refused by the service.
	_, err = a.raw.UpdateEntity(ctx(t), []byte(`{"PartitionKey":"00","RowKey":"~fence","Generation":"5","Generation@odata.type":"Edm.Int64"}`),
		&aztables.UpdateEntityOptions{IfMatch: to.Ptr(azcore.ETag(`W/"datetime'2000-01-01T00%3A00%3A00.0000000Z'"`)), UpdateMode: aztables.UpdateModeMerge})
	if !errors.Is(storage.Translate(err), storage.ErrPreconditionFailed) {
		t.Fatalf("stale merge: %v", err)
	}
}

// TestAzureFreshAccount: a Client over a table and payload container that
// do not exist yet reads an empty schedule and creates both on the first
// Add — no Ensure call needed.
func TestAzureFreshAccount(t *testing.T) {
	t.Parallel()
	srv := azuritetest.Shared(t)
	clients, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	// The public constructor, over a container client the caller built.
	store, err := NewPayloadStore(clients.Blob.NewContainerClient(azuritetest.Name(t, "c")))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewAzure(clients.Table, Options{Table: azuritetest.Name(t, "t"), PayloadStore: store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if items, next, err := c.List(ctx(t), ListOptions{}); err != nil || len(items) != 0 || next != "" {
		t.Fatalf("List on a missing table = %v, %q, %v; want empty", items, next, err)
	}
	if st, err := c.Due(ctx(t), time.Now()); err != nil || st.Count != 0 {
		t.Fatalf("Due on a missing table = %+v, %v", st, err)
	}
	for name, op := range map[string]func() error{
		"Get":        func() error { _, err := c.Get(ctx(t), "x"); return err },
		"Cancel":     func() error { _, err := c.Cancel(ctx(t), "x"); return err },
		"Reschedule": func() error { _, err := c.Reschedule(ctx(t), "x", time.Now()); return err },
	} {
		t.Run(fmt.Sprint(name), func(t *testing.T) {
			if err := op(); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s on a missing table: %v, want ErrNotFound", name, err)
			}
		})
	}
	big := strings.Repeat("p", 80<<10) // over the inline limit: goes to the missing container
	if _, err := c.Add(ctx(t), Item{ID: "first", Due: time.Now().Add(time.Hour), Payload: big}, AddOptions{}); err != nil {
		t.Fatalf("first Add on a fresh account: %v", err)
	}
	got, err := c.Get(ctx(t), "first")
	if err != nil || got.PayloadBlob == "" {
		t.Fatalf("Get after the first Add = %+v, %v", got, err)
	}
	if p, err := store.Get(ctx(t), got.PayloadBlob); err != nil || string(p) != big {
		t.Fatalf("payload after the first Add: %d bytes, %v", len(p), err)
	}
}

// On Azurite, a unique take's requirement of its shard's open row (a
// merge of nothing in its transaction) passes while the row stands, and
// fails the whole transaction once the walk under a new count deleted it.
func TestAzureATakeByTheOldCountLandingAfterTheChangeEndedIsPlacedAgain(t *testing.T) {
	t.Parallel()
	a := newAzEnv(t, Options{})
	testLateTakeAfterTheChange(t, a.table)
}
