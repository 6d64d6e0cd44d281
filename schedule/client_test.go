package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

func TestAddGetCancel(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	it, err := c.Add(ctx(t), Item{ID: "job-1", Due: t0.Add(time.Hour), Payload: `{"a":1}`, Type: "mail", MaxAttempts: 3}, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rows := mt.Rows("00")
	if len(rows) != 2 || rows[0].RowKey != it.RowKey || rows[1].RowKey != "id~job-1" {
		t.Fatalf("rows = %v", keysOf(rows))
	}
	if rows[1].Props[PropItem] != it.RowKey || rows[0].Props[PropIndexed] != true {
		t.Fatalf("index row %v, item %v", rows[1].Props, rows[0].Props)
	}
	got, err := c.Get(ctx(t), "job-1")
	if err != nil || got.Payload != `{"a":1}` || got.Type != "mail" || got.MaxAttempts != 3 || !got.Due.Equal(t0.Add(time.Hour)) || !got.Indexed {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "job-1", Due: t0}, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
		t.Fatalf("duplicate: %v", err)
	}
	gone, err := c.Cancel(ctx(t), "job-1")
	if err != nil || gone.ID != "job-1" {
		t.Fatalf("Cancel = %+v, %v", gone, err)
	}
	if mt.Len("00") != 0 {
		t.Fatalf("rows left: %v", keysOf(mt.Rows("00")))
	}
	if _, err := c.Get(ctx(t), "job-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after cancel: %v", err)
	}
	if _, err := c.Cancel(ctx(t), "job-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Cancel twice: %v", err)
	}
}

func keysOf(es []table.Entity) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.RowKey)
	}
	return out
}

func TestAddReplace(t *testing.T) {
	store := payload.NewMemory()
	c, mt, _ := newMemClient(t, Options{PayloadStore: store, InlineLimit: 64})
	big := strings.Repeat("b", 100)
	// (Due later: a row due by now keeps its blob, which a traffic-cop
	// pass may be sending.)
	if _, err := c.Add(ctx(t), Item{ID: "r", Due: t0.Add(time.Hour), Payload: big}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(store.Names()) != 1 {
		t.Fatalf("blobs %v", store.Names())
	}
	// Same due: replaced in place. Different due: moved. Both keep one row + index.
	if _, err := c.Add(ctx(t), Item{ID: "r", Due: t0.Add(time.Hour), Payload: "v2"}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	if len(store.Names()) != 0 {
		t.Fatalf("replaced payload blob not deleted: %v", store.Names())
	}
	it, err := c.Add(ctx(t), Item{ID: "r", Due: t0.Add(time.Minute), Payload: "v3", Recurrence: "@every 1m"}, AddOptions{Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	rows := mt.Rows("00")
	if len(rows) != 2 || rows[0].RowKey != it.RowKey || rows[1].Props[PropItem] != it.RowKey {
		t.Fatalf("rows after replace: %v", rows)
	}
	got, _ := c.Get(ctx(t), "r")
	if got.Payload != "v3" || got.Recurrence != "@every 1m" {
		t.Fatalf("Get = %+v", got)
	}
}

func TestRescheduleAndList(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	for i := range 5 {
		if _, err := c.Add(ctx(t), Item{ID: fmt.Sprintf("t%d", i), Due: t0.Add(time.Duration(i-2) * time.Minute)}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	it, err := c.Reschedule(ctx(t), "t0", t0.Add(time.Hour))
	if err != nil || !it.Due.Equal(t0.Add(time.Hour)) {
		t.Fatalf("Reschedule = %+v, %v", it, err)
	}
	got, _ := c.Get(ctx(t), "t0")
	if !got.Due.Equal(t0.Add(time.Hour)) || mt.Len("00") != 10 {
		t.Fatalf("after reschedule: %+v, %d rows", got, mt.Len("00"))
	}
	if _, err := c.Reschedule(ctx(t), "nope", t0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reschedule unknown: %v", err)
	}
	if _, err := c.Reschedule(ctx(t), "t1", time.Time{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reschedule to zero: %v", err)
	}
	// Page through everything two at a time: due order, no index rows.
	var ids []string
	tok := ""
	for pages := 0; ; pages++ {
		items, next, err := c.List(ctx(t), ListOptions{Limit: 2, Continuation: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		if next == "" {
			break
		}
		tok = next
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if strings.Join(ids, ",") != "t1,t2,t3,t4,t0" {
		t.Fatalf("List order %v", ids)
	}
	due, _, err := c.List(ctx(t), ListOptions{Due: true})
	if err != nil || len(due) != 2 || due[0].ID != "t1" || due[1].ID != "t2" {
		t.Fatalf("due list %+v %v", due, err)
	}
	st, err := c.Due(ctx(t), t0)
	if err != nil || st.Count != 2 || !st.Oldest.Equal(t0.Add(-time.Minute)) || st.Lag != time.Minute || st.Capped {
		t.Fatalf("Due = %+v, %v", st, err)
	}
	if _, _, err := c.List(ctx(t), ListOptions{Continuation: "garbage"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad token: %v", err)
	}
}

func TestDirectRowsFoundByScan(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	rk, _ := RowKey(t0, "raw-guid-1")
	if err := mt.PutRaw("00", rk, map[string]any{"Message": "hi"}); err != nil {
		t.Fatal(err)
	}
	rk2, _ := RowKey(t0, "other")
	_ = mt.PutRaw("00", rk2, map[string]any{"Message": "x", "Id": "named"})
	got, err := c.Get(ctx(t), "raw-guid-1")
	if err != nil || got.Payload != "hi" || got.Type != DefaultType || got.Indexed {
		t.Fatalf("Get direct = %+v, %v", got, err)
	}
	// GetIndexed goes by the id index alone, and a direct row has none.
	if got, err := c.GetIndexed(ctx(t), "raw-guid-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetIndexed of a direct row = %+v, %v; want ErrNotFound", got, err)
	}
	if got, err := c.Get(ctx(t), "named"); err != nil || got.Payload != "x" {
		t.Fatalf("Get by Id property = %+v, %v", got, err)
	}
	if _, err := c.Reschedule(ctx(t), "raw-guid-1", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx(t), "raw-guid-1"); err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(mt.Rows("00")); len(keys) != 1 || keys[0] != rk2 {
		t.Fatalf("rows %v", keys)
	}
	// Lookups accept ids Add would refuse (rows written by other clients).
	rk3, _ := RowKey(t0, "o'brien report")
	_ = mt.PutRaw("00", rk3, map[string]any{"Message": "q"})
	if got, err := c.Get(ctx(t), "o'brien report"); err != nil || got.Payload != "q" {
		t.Fatalf("Get quoted = %+v, %v", got, err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "indexed", Due: t0, Payload: "i"}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetIndexed(ctx(t), "indexed"); err != nil || got.Payload != "i" {
		t.Fatalf("GetIndexed of an indexed task = %+v, %v", got, err)
	}
}

// A row written without an id index and a task of its id scheduled
// through the client are two tasks (README, the table contract): a
// cancel finds the indexed one by its index and cancels it alone, and a
// second cancel finds the row by a scan.
func TestCancelBesideADirectRowCancelsTheIndexedTask(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	rk, _ := RowKey(t0, "twin")
	if err := mt.PutRaw("00", rk, map[string]any{"Message": "row"}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Add(ctx(t), Item{ID: "twin", Due: t0.Add(time.Minute), Payload: "indexed"}, AddOptions{Replace: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Cancel(ctx(t), "twin"); err != nil || got.RowKey != it.RowKey {
		t.Fatalf("first cancel = %+v, %v; want the indexed task %s", got, err, it.RowKey)
	}
	if keys := keysOf(mt.Rows("00")); len(keys) != 1 || keys[0] != rk {
		t.Fatalf("after the first cancel, rows %v; want the direct row %s alone", keys, rk)
	}
	if got, err := c.Cancel(ctx(t), "twin"); err != nil || got.RowKey != rk {
		t.Fatalf("second cancel = %+v, %v; want the direct row", got, err)
	}
	if keys := keysOf(mt.Rows("00")); len(keys) != 0 {
		t.Fatalf("after the second cancel, rows %v", keys)
	}
}

func TestScanLimit(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{ScanLimit: 5})
	mt.SetMaxPage(2)
	for i := range 10 {
		rk, _ := RowKey(t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("d%d", i))
		_ = mt.PutRaw("00", rk, map[string]any{"Message": ""})
	}
	_, err := c.Get(ctx(t), "d9")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "gave up after scanning 6 rows") {
		t.Fatalf("err = %v", err)
	}
	if _, err := c.Get(ctx(t), "d2"); err != nil {
		t.Fatal(err)
	}
}

// A lookup that gave up scanning says so to callers outside the package:
// ErrScanGaveUp, still an ErrNotFound; a plain miss is not ErrScanGaveUp.
func TestScanGaveUpIsExported(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{ScanLimit: 5})
	mt.SetMaxPage(2)
	for i := range 10 {
		_ = mt.PutRaw("00", mustKey(t0.Add(time.Duration(i)*time.Second), fmt.Sprintf("d%d", i)), map[string]any{"Message": ""})
	}
	_, err := c.Get(ctx(t), "d9")
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, ErrScanGaveUp) {
		t.Fatalf("past ScanLimit: err = %v; want ErrNotFound and ErrScanGaveUp", err)
	}
	c2, _, _ := newMemClient(t, Options{})
	if _, err := c2.Add(ctx(t), Item{ID: "x", Due: t0.Add(time.Hour)}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Get(ctx(t), "nosuch"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrScanGaveUp) {
		t.Fatalf("a plain miss: err = %v; want ErrNotFound only", err)
	}
}

func TestOrphanIndexIsTakenOver(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	_ = mt.PutRaw("00", "id~ghost", map[string]any{PropItem: "0638000000000000000_ghost"})
	if _, err := c.Get(ctx(t), "ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get orphan: %v", err)
	}
	it, err := c.Add(ctx(t), Item{ID: "ghost", Due: t0}, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx(t), "ghost"); err != nil || got.RowKey != it.RowKey {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	// An orphan index is tidied by Cancel.
	_ = mt.PutRaw("00", "id~ghost2", map[string]any{PropItem: "0638000000000000000_ghost2"})
	if _, err := c.Cancel(ctx(t), "ghost2"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := mt.Get(ctx(t), "00", "id~ghost2"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("orphan index left: %v", err)
	}
}

func TestAddDirectRowSameKey(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	rk, _ := RowKey(t0, "dup")
	_ = mt.PutRaw("00", rk, map[string]any{"Message": "theirs"})
	if _, err := c.Add(ctx(t), Item{ID: "dup", Due: t0, Payload: "ours"}, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
		t.Fatalf("err = %v", err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "dup", Due: t0, Payload: "ours"}, AddOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	got, _ := c.Get(ctx(t), "dup")
	if got.Payload != "ours" || !got.Indexed {
		t.Fatalf("Get = %+v", got)
	}
}

func TestLargePayloadClaimCheck(t *testing.T) {
	store := payload.NewMemory()
	c, mt, _ := newMemClient(t, Options{PayloadStore: store})
	big := strings.Repeat("é", 20<<10) // 40 KiB of UTF-8
	it, err := c.Add(ctx(t), Item{ID: "big", Due: t0.Add(time.Hour), Payload: big}, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if it.Payload != "" || !strings.HasPrefix(it.PayloadBlob, "memory/payloads/big-") {
		t.Fatalf("not claim-checked: %q", it.PayloadBlob)
	}
	got, _ := c.Get(ctx(t), "big")
	p, err := store.Get(ctx(t), got.PayloadBlob)
	if err != nil || string(p) != big {
		t.Fatalf("payload blob: %d bytes, %v", len(p), err)
	}
	// A failed table write deletes the blob it wrote.
	mt.BeforeSubmit(func([]table.Op) error { return fmt.Errorf("boom: %w", storage.ErrAuth) })
	if _, err := c.Add(ctx(t), Item{ID: "big2", Due: t0, Payload: big}, AddOptions{}); !errors.Is(err, storage.ErrAuth) {
		t.Fatalf("err = %v", err)
	}
	mt.BeforeSubmit(nil)
	if n := store.Names(); len(n) != 1 {
		t.Fatalf("blobs after failed add: %v", n)
	}
	// Refused duplicate: its blob is deleted too.
	if _, err := c.Add(ctx(t), Item{ID: "big", Due: t0.Add(time.Hour), Payload: big}, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
		t.Fatal(err)
	}
	if n := store.Names(); len(n) != 1 {
		t.Fatalf("blobs after refused duplicate: %v", n)
	}
	if _, err := c.Cancel(ctx(t), "big"); err != nil {
		t.Fatal(err)
	}
	if n := store.Names(); len(n) != 0 {
		t.Fatalf("blob left after cancel: %v", n)
	}
	// Payload at exactly the inline limit stays inline.
	edge := strings.Repeat("a", DefaultInlineLimit-2)
	it, err = c.Add(ctx(t), Item{ID: "edge", Due: t0, Payload: edge}, AddOptions{})
	if err != nil || it.PayloadBlob != "" || it.Payload != edge {
		t.Fatalf("edge payload: blob %q, %v", it.PayloadBlob, err)
	}
}

func TestShardsSpreadAndFind(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{Shards: []string{"00", "01", "02"}})
	for i := range 30 {
		if _, err := c.Add(ctx(t), Item{ID: fmt.Sprintf("s%02d", i), Due: t0}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"00", "01", "02"} {
		t.Run(s, func(t *testing.T) {
			if mt.Len(s) == 0 {
				t.Fatalf("shard %s unused", s)
			}
		})
	}
	for i := range 30 {
		if _, err := c.Get(ctx(t), fmt.Sprintf("s%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	tok := ""
	for {
		items, next, err := c.List(ctx(t), ListOptions{Limit: 7, Continuation: tok})
		if err != nil {
			t.Fatal(err)
		}
		n += len(items)
		if next == "" {
			break
		}
		tok = next
	}
	if n != 30 {
		t.Fatalf("listed %d of 30", n)
	}
}

// TestMissingTableIsAnEmptySchedule: on a table that does not exist yet,
// reads see nothing scheduled and the first Add creates the table.
func TestMissingTableIsAnEmptySchedule(t *testing.T) {
	tbl := table.NewMissingMemory("", nil)
	c, err := newClient(tbl, Options{Clock: clock.NewFake(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if items, _, err := c.List(ctx(t), ListOptions{}); err != nil || len(items) != 0 {
		t.Fatalf("List = %v, %v", items, err)
	}
	if st, err := c.Due(ctx(t), t0); err != nil || st != (DueStats{}) {
		t.Fatalf("Due = %+v, %v", st, err)
	}
	if _, err := c.Get(ctx(t), "a"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Get = %v, want ErrNotFound saying the table does not exist", err)
	}
	if tbl.Calls()["Create"] != 0 {
		t.Fatal("a read created the table")
	}
	if _, err := c.Add(ctx(t), Item{ID: "a", Due: t0.Add(time.Minute)}, AddOptions{}); err != nil {
		t.Fatalf("first Add: %v", err)
	}
	if tbl.Calls()["Create"] != 1 {
		t.Fatalf("Create called %d times, want 1", tbl.Calls()["Create"])
	}
	if got, err := c.Get(ctx(t), "a"); err != nil || got.ID != "a" {
		t.Fatalf("Get after Add = %+v, %v", got, err)
	}
}

// TestListMergesShardsInDueOrder: with four shards, pages of List come in
// due order across the shards, filters apply, and a row removed between
// pages does not disturb the paging.
func TestListMergesShardsInDueOrder(t *testing.T) {
	c, _, _ := newMemClient(t, Options{Shards: []string{"00", "01", "02", "03"}})
	var want []string
	for i := range 40 {
		id := fmt.Sprintf("m%02d", i)
		typ := "even"
		if i%2 == 1 {
			typ = "odd"
		}
		if _, err := c.Add(ctx(t), Item{ID: id, Type: typ, Due: t0.Add(time.Duration(i) * time.Minute)}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	shards := map[string]bool{}
	for _, id := range want {
		shards[c.ShardOf(id)] = true
	}
	if len(shards) < 3 {
		t.Fatalf("the ids fall into %d shards; the test wants them spread", len(shards))
	}
	page := func(lo ListOptions) []string {
		var ids []string
		for pages := 0; ; pages++ {
			items, next, err := c.List(ctx(t), lo)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				ids = append(ids, it.ID)
			}
			if next == "" {
				return ids
			}
			if len(ids) == 7 {
				// Removed between pages: the next page starts after it all
				// the same.
				if _, err := c.Cancel(ctx(t), ids[6]); err != nil {
					t.Fatal(err)
				}
			}
			lo.Continuation = next
			if pages > 50 {
				t.Fatal("paging does not end")
			}
		}
	}
	if got := page(ListOptions{Limit: 7}); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pages of 7:\n got %v\nwant %v", got, want)
	}
	var odd []string
	for i, id := range want {
		if i%2 == 1 && id != want[6] && id != "m13" {
			odd = append(odd, id)
		}
	}
	got := page(ListOptions{Limit: 3, Type: "odd"})
	// m06 was cancelled by the first paging, m13 (the 7th odd) by this one.
	if strings.Join(got, ",") != strings.Join(append(odd[:6:6], append([]string{"m13"}, odd[6:]...)...), ",") {
		t.Fatalf("odd tasks in pages of 3:\n got %v", got)
	}
	if _, _, err := c.List(ctx(t), ListOptions{Continuation: "garbage"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad token: %v", err)
	}
}

// TestPointWritesPointersInBatches: after the count grows from one shard
// to four, Point makes every task of "00" findable by id under four,
// writing its pointers in one transaction per shard they go to; a second
// walk (an owner that restarted midway) writes nothing twice.
func TestPointWritesPointersInBatches(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	for i := range 250 {
		if _, err := c.Add(ctx(t), Item{ID: fmt.Sprintf("p%03d", i), Due: t0.Add(time.Hour)}, AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	four := table.Numbered("", 4, 2)
	away := map[string]int{}
	for i := range 250 {
		if s := four.Of(fmt.Sprintf("p%03d", i)); s != "00" {
			away[s]++
		}
	}
	batches := 0
	for _, n := range away {
		batches += (n + table.MaxOps - 1) / table.MaxOps
	}
	for walk := range 2 {
		before := mt.Requests()
		if err := c.Point(ctx(t), "00", 4); err != nil {
			t.Fatal(err)
		}
		got := mt.Requests() - before
		want := 3 + batches // the open rows, the index rows, the guard rows, the batches
		if walk == 1 {
			// Every batch finds its rows there and is written row by row.
			for _, n := range away {
				want += n
			}
		}
		if got != want {
			t.Errorf("walk %d: %d requests, want %d (pointers to %v)", walk+1, got, want, away)
		}
	}
	for s, n := range away {
		if got := mt.Len(s); got != n {
			t.Errorf("shard %s holds %d pointers, want %d", s, got, n)
		}
	}
	c4, _, _ := newMemClient(t, Options{Shards: four.Names()})
	c4.t = c.t
	for i := range 250 {
		if _, err := c4.Get(ctx(t), fmt.Sprintf("p%03d", i)); err != nil {
			t.Fatalf("p%03d under four shards: %v", i, err)
		}
	}
}

// A schedule whose answer was lost — its insert committed, and the retry
// finds its own row — succeeds, as it would have the first time: a row in
// the way that holds exactly what the insert writes is taken as written
// (issue 38, found by the simulator: such a schedule reported "already
// scheduled"). A row that differs in anything is still refused.
func TestAddIsIdempotentByContent(t *testing.T) {
	c, _, _ := newMemClient(t, Options{})
	it := Item{ID: "same", Type: "mail", Payload: `{"to":"x"}`, Due: t0.Add(time.Hour), MaxAttempts: 2}
	first, err := c.Add(ctx(t), it, AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Add(ctx(t), it, AddOptions{})
	if err != nil || again.RowKey != first.RowKey || again.ETag != first.ETag {
		t.Fatalf("the same task again: %+v, %v; want it as first written (%s, %s)", again, err, first.RowKey, first.ETag)
	}
	for _, other := range []Item{
		{ID: "same", Type: "mail", Payload: `{"to":"y"}`, Due: it.Due, MaxAttempts: 2},
		{ID: "same", Type: "mail", Payload: it.Payload, Due: it.Due.Add(time.Second), MaxAttempts: 2},
		{ID: "same", Type: "sms", Payload: it.Payload, Due: it.Due, MaxAttempts: 2},
		{ID: "same", Type: "mail", Payload: it.Payload, Due: it.Due},
	} {
		if _, err := c.Add(ctx(t), other, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
			t.Fatalf("a different task with the id (%+v): %v; want ErrAlreadyScheduled", other, err)
		}
	}
}

// A cancel whose delete committed with its answer lost — the SDK's retry
// then meets no row — succeeds, as it would have the first time, instead
// of answering that no such task exists (issue 38, seed 1164: the task,
// cancelled, was taken for lost).
func TestCancelIsIdempotentAfterALostAnswer(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	lt := &lostAnswer{Table: mt, lose: func(ops []table.Op) bool { return ops[0].Kind == table.Delete }}
	c.t = lt
	if _, err := c.Add(ctx(t), Item{ID: "gone", Type: "mail", Due: t0.Add(time.Hour)}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Cancel(ctx(t), "gone")
	if err != nil || !lt.lost || it.ID != "gone" || it.Type != "mail" {
		t.Fatalf("cancel after a lost answer: %+v, %v (lost %v); want the task cancelled", it, err, lt.lost)
	}
	if _, err := c.Get(ctx(t), "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after the cancel: %v; want ErrNotFound", err)
	}
	// Without a delete of its own in flight, an unknown id is unknown.
	if _, err := c.Cancel(ctx(t), "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cancel again: %v; want ErrNotFound", err)
	}
	// A delete refused because the row had changed did not commit: a row
	// gone after that was removed by another (the mover), not by us.
	c.t = &movedFirst{Table: mt}
	if _, err := c.Add(ctx(t), Item{ID: "moved", Type: "mail", Due: t0.Add(time.Hour)}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, unsure, err := c.CancelReport(ctx(t), "moved", CancelSteps{}); !errors.Is(err, ErrNotFound) || unsure {
		t.Fatalf("cancel of a row moved before our delete: %v (unsure %v); want ErrNotFound", err, unsure)
	}
}

// A cancel whose delete failed without saying whether it committed looks
// the task up again to tell; when that look fails too, it is tried again
// while tries are left, and after the last the cancel answers the error
// with the row it tried to delete and unsure set, for its caller to treat
// the task as perhaps removed (issue 38, sweep seed 151245: the delete
// committed, the scan after it failed, and the error alone went back, so
// the task's run was never marked and stayed recorded queued).
func TestACancelWhoseLookAfterALostDeleteFailsSaysItMayHaveRemoved(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails int // scans failing after the lost delete
		err   bool
	}{
		{"the look fails once", 1, false},
		{"the look fails every time", 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mt, _ := newMemClient(t, Options{})
			fs := &failingScans{Table: mt}
			lt := &lostAnswer{Table: fs, lose: func(ops []table.Op) bool { return ops[0].Kind == table.Delete },
				between: func([]table.Op) { fs.left = tc.fails }}
			c.t = lt
			if _, err := c.Add(ctx(t), Item{ID: "gone", Type: "mail", Due: t0.Add(time.Hour)}, AddOptions{}); err != nil {
				t.Fatal(err)
			}
			it, unsure, err := c.CancelReport(ctx(t), "gone", CancelSteps{})
			if !lt.lost || fs.failed == 0 {
				t.Fatalf("the delete's answer lost %v, scans failed %d; want both", lt.lost, fs.failed)
			}
			if !unsure || it.ID != "gone" || it.Type != "mail" || (err != nil) != tc.err {
				t.Fatalf("cancel: %+v, unsure %v, %v; want the row tried, unsure, error %v", it, unsure, err, tc.err)
			}
			if tc.err && (errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "without saying whether it committed")) {
				t.Fatalf("cancel: %v; want an error saying the delete may have committed", err)
			}
		})
	}
}

// failingScans is a table whose scans for rows without an id index fail,
// left times, with a connection error.
type failingScans struct {
	table.Table
	left, failed int
}

func (f *failingScans) Query(ctx context.Context, q table.Query) (table.Page, error) {
	if f.left > 0 && q.To == IndexPrefix {
		f.left--
		f.failed++
		return table.Page{}, errors.New("read tcp: connection reset by peer")
	}
	return f.Table.Query(ctx, q)
}

// movedFirst is a table on which the first delete transaction finds its
// rows removed by another writer just before it: refused, as changed.
type movedFirst struct {
	table.Table
	done bool
}

func (m *movedFirst) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if !m.done && len(ops) > 0 && ops[0].Kind == table.Delete {
		m.done = true
		var plain []table.Op
		for _, op := range ops {
			op.IfMatch = ""
			plain = append(plain, op)
		}
		if _, err := m.Table.Submit(ctx, plain); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("delete: %w", storage.ErrPreconditionFailed)
	}
	return m.Table.Submit(ctx, ops)
}

// A cancel deletes a task's payload blob with its row, but not when the
// task's message may be in the queue already (its client sending it for
// now, or the mover having sent it early): the cancel may not reach the
// run before a consumer claims it, and a run whose blob is gone fails
// for want of its payload (issue 38, sim seed 116107: a bulk cancel met
// a task of a `--file` its client was sending for now, and the task,
// whose handler never fails, died of "payload blob not found").
func TestACancelKeepsTheBlobOfATaskWhoseMessageWasSent(t *testing.T) {
	store := payload.NewMemory()
	c, _, _ := newMemClient(t, Options{PayloadStore: store})
	big := strings.Repeat("x", 40<<10)
	if _, err := c.Add(ctx(t), Item{ID: "sending", Due: t0, Payload: big}, AddOptions{Sending: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx(t), "sending"); err != nil {
		t.Fatal(err)
	}
	if n := store.Names(); len(n) != 1 {
		t.Fatalf("blobs after cancelling a task being sent: %v; want its blob kept", n)
	}
}

// A task given without an id is named as new in the errors that refuse
// it, not by an id generated for it that the caller never saw (the HTTP
// API and the CLI check their fields first; a Go caller did not).
func TestARefusedTaskWithoutAnIDIsNamedAsNew(t *testing.T) {
	c, _, _ := newMemClient(t, Options{})
	for _, it := range []Item{
		{Due: t0.Add(time.Hour), FairKey: strings.Repeat("k", 300)},
		{Due: t0.Add(time.Hour), Queue: "Billing"},
		{Due: t0.Add(time.Hour), After: []string{"bad id"}},
		{},
	} {
		_, err := c.Add(ctx(t), it, AddOptions{})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "the new task") || strings.Contains(err.Error(), "task 0") {
			t.Errorf("Add(%+v): %v; want ErrInvalid naming the new task", it, err)
		}
	}
	it, err := c.Add(ctx(t), Item{Due: t0.Add(time.Hour)}, AddOptions{})
	if err != nil || ValidateID(it.ID) != nil {
		t.Fatalf("a valid task without an id: %+v, %v; want it stored under a generated id", it, err)
	}
}
