package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

func batchItems(n int, prefix string) []Item {
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{ID: fmt.Sprintf("%s%04d", prefix, i), Type: "mail", Payload: fmt.Sprintf(`{"n":%d}`, i), Due: t0.Add(time.Duration(i) * time.Second)}
	}
	return items
}

// 250 items: three index transactions and three item transactions, and
// every task readable as if added one by one.
func TestAddManyWritesInTransactions(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	items := batchItems(250, "b")
	res, err := c.AddMany(ctx(t), items, AddManyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Item.ID != items[i].ID || r.Item.RowKey == "" {
			t.Fatalf("result %d = %+v", i, r)
		}
	}
	if n := mt.Calls()["Submit"]; n != 6 {
		t.Fatalf("%d transactions for 250 items, want 6 (3 of index rows, 3 of item rows)", n)
	}
	if mt.Len("00") != 500 {
		t.Fatalf("%d rows, want 500", mt.Len("00"))
	}
	got, err := c.Get(ctx(t), "b0123")
	if err != nil || got.Payload != `{"n":123}` || !got.Indexed || !got.Due.Equal(t0.Add(123*time.Second)) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

// Without Partial: one invalid item, one id twice, or one id already
// scheduled, and nothing of the batch is left in the table.
func TestAddManyAllOrNothing(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	if _, err := c.Add(ctx(t), Item{ID: "b0150", Due: t0}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	before := mt.Len("00")

	bad := batchItems(200, "b")
	bad[7].Type = "no spaces"
	res, err := c.AddMany(ctx(t), bad, AddManyOptions{})
	if !errors.Is(err, ErrNotWritten) || !errors.Is(res[7].Err, ErrInvalid) || !errors.Is(res[8].Err, ErrNotWritten) {
		t.Fatalf("invalid item: err %v, res[7] %v, res[8] %v", err, res[7].Err, res[8].Err)
	}
	if n := mt.Calls()["Submit"]; n != 1 || mt.Len("00") != before {
		t.Fatalf("an invalid batch wrote: %d transactions, %d rows", n-1, mt.Len("00")-before)
	}

	twice := batchItems(3, "t")
	twice[2].ID = twice[0].ID
	res, _ = c.AddMany(ctx(t), twice, AddManyOptions{})
	if !errors.Is(res[2].Err, ErrInvalid) || !strings.Contains(res[2].Err.Error(), "also item 1") {
		t.Fatalf("an id twice: %v", res[2].Err)
	}

	dup := batchItems(200, "b") // b0150 is pending
	res, err = c.AddMany(ctx(t), dup, AddManyOptions{})
	if !errors.Is(err, ErrNotWritten) || !errors.Is(res[150].Err, ErrAlreadyScheduled) {
		t.Fatalf("duplicate: err %v, res[150] %v", err, res[150].Err)
	}
	for i, r := range res {
		if i != 150 && !errors.Is(r.Err, ErrNotWritten) {
			t.Fatalf("res[%d] = %v, want not written", i, r.Err)
		}
	}
	if mt.Len("00") != before {
		t.Fatalf("a refused batch left %d rows: %v", mt.Len("00")-before, keysOf(mt.Rows("00")))
	}
}

// With Partial, what can be written is; the rest is reported, and the
// index rows of duplicates are not left behind.
func TestAddManyPartial(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	if _, err := c.Add(ctx(t), Item{ID: "p0005", Due: t0}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	items := batchItems(10, "p")
	items[3].Due = time.Time{}
	res, err := c.AddMany(ctx(t), items, AddManyOptions{Partial: true})
	if !errors.Is(err, ErrNotWritten) || !strings.Contains(err.Error(), "2 of 10") {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(res[3].Err, ErrInvalid) || !errors.Is(res[5].Err, ErrAlreadyScheduled) {
		t.Fatalf("res[3] %v, res[5] %v", res[3].Err, res[5].Err)
	}
	for _, i := range []int{0, 1, 2, 4, 6, 7, 8, 9} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if res[i].Err != nil {
				t.Fatalf("res[%d] = %v", i, res[i].Err)
			}
			if _, err := c.Get(ctx(t), items[i].ID); err != nil {
				t.Fatal(err)
			}
		})
	}
	if mt.Len("00") != 2*9 {
		t.Fatalf("%d rows, want 18 (nine tasks with their index rows)", mt.Len("00"))
	}
	got, _ := c.Get(ctx(t), "p0005")
	if !got.Due.Equal(t0) {
		t.Fatalf("the pending p0005 was changed: %+v", got)
	}
}

// A failure after some item rows were written rolls them back; the item
// rows are written latest first, and a row moved before the rollback is
// reported as such.
func TestAddManyRollsBackAfterAFailure(t *testing.T) {
	c, mt, _ := newMemClient(t, Options{})
	items := batchItems(300, "r")
	var submits atomic.Int32
	mt.BeforeSubmit(func(ops []table.Op) error {
		if ops[0].Kind != table.Insert || strings.HasPrefix(ops[0].RowKey, IndexPrefix) {
			return nil
		}
		n := submits.Add(1)
		if n == 1 {
			// The first item rows written are the latest due.
			if !strings.HasSuffix(ops[0].RowKey, "r0299") {
				return fmt.Errorf("first item transaction starts with %s, want the latest due", ops[0].RowKey)
			}
			return nil
		}
		if n == 2 {
			// Meanwhile the mover takes one written row (with its id
			// index row, as it does).
			for _, e := range mt.Rows("00") {
				if strings.HasSuffix(e.RowKey, "_r0250") {
					mt.Remove("00", e.RowKey)
					mt.Remove("00", indexKey("r0250"))
				}
			}
		}
		return fmt.Errorf("%w: injected", storage.ErrBadRequest)
	})
	res, err := c.AddMany(ctx(t), items, AddManyOptions{Concurrency: 1})
	if !errors.Is(err, ErrNotWritten) {
		t.Fatalf("err = %v", err)
	}
	if !errors.Is(res[250].Err, ErrMovedBeforeRollback) {
		t.Fatalf("res[250] = %v, want moved before rollback", res[250].Err)
	}
	for i, r := range res {
		if i != 250 && !errors.Is(r.Err, ErrNotWritten) {
			t.Fatalf("res[%d] = %v", i, r.Err)
		}
	}
	if mt.Len("00") != 0 {
		t.Fatalf("rows left after the rollback: %d", mt.Len("00"))
	}
}

// A roll-back keeps the payload blob of a row it could not take back (the
// mover moved it meanwhile: its task runs, and needs its payload), and
// deletes those of the rows it did take back or never wrote.
func TestAddManyKeepsTheBlobOfARowItCouldNotTakeBack(t *testing.T) {
	store := payload.NewMemory()
	c, mt, _ := newMemClient(t, Options{PayloadStore: store, InlineLimit: 64})
	items := batchItems(300, "r")
	for _, i := range []int{10, 250, 260} {
		items[i].Payload = strings.Repeat("x", 200)
	}
	var submits atomic.Int32
	mt.BeforeSubmit(func(ops []table.Op) error {
		if ops[0].Kind != table.Insert || strings.HasPrefix(ops[0].RowKey, IndexPrefix) {
			return nil
		}
		switch submits.Add(1) {
		case 1:
			return nil // r0299 to r0200
		case 2:
			for _, e := range mt.Rows("00") {
				if strings.HasSuffix(e.RowKey, "_r0250") {
					mt.Remove("00", e.RowKey) // the mover takes it, index and all
					mt.Remove("00", indexKey("r0250"))
				}
			}
		}
		return fmt.Errorf("%w: injected", storage.ErrBadRequest)
	})
	res, err := c.AddMany(ctx(t), items, AddManyOptions{Concurrency: 1})
	if !errors.Is(err, ErrNotWritten) || !errors.Is(res[250].Err, ErrMovedBeforeRollback) {
		t.Fatalf("AddMany: %v, res[250] %v; want the roll-back, r0250 moved before it", err, res[250].Err)
	}
	if names := store.Names(); len(names) != 1 || !strings.HasSuffix(res[250].Item.PayloadBlob, names[0]) {
		t.Fatalf("blobs after the roll-back: %v; want only the moved task's, %s", names, res[250].Item.PayloadBlob)
	}
}

// A roll-back keeps the payload blob of a row it took back that was due
// by then: a traffic-cop pass sends a row's message before it retires the
// row, so the task may be in the queue though the delete went through
// (README: reported not written, it may run once), and would run without
// its payload (issue 38, row 193's remainder). A row due later, or a line
// never written, loses its blob.
func TestARollBackKeepsTheBlobOfARowDueByThen(t *testing.T) {
	store := payload.NewMemory()
	c, mt, fc := newMemClient(t, Options{PayloadStore: store, InlineLimit: 64})
	items := batchItems(300, "r")
	for _, i := range []int{10, 210, 220, 280, 290} {
		items[i].Payload = strings.Repeat("x", 200)
	}
	items[290].Due = t0.Add(time.Hour)
	items[220].Recurrence = "@every 1h" // a series' first occurrence, too
	// A series due later, too: a pass sends its occurrences unmarked as
	// far ahead as its series window, which slow passes and a long
	// mover.early widen past the undo's horizon.
	items[280].Due, items[280].Recurrence = t0.Add(2*time.Hour), "@every 1h"
	var submits atomic.Int32
	mt.BeforeSubmit(func(ops []table.Op) error {
		if ops[0].Kind != table.Insert || strings.HasPrefix(ops[0].RowKey, IndexPrefix) {
			return nil
		}
		if submits.Add(1) == 1 {
			return nil // r0290 (due in an hour), r0299 to r0201
		}
		fc.Advance(3 * time.Minute) // r0210 due within ClockSlack
		return fmt.Errorf("%w: injected", storage.ErrBadRequest)
	})
	res, err := c.AddMany(ctx(t), items, AddManyOptions{Concurrency: 1})
	if !errors.Is(err, ErrNotWritten) || mt.Len("00") != 0 {
		t.Fatalf("AddMany: %v, %d rows left; want the roll-back, nothing left", err, mt.Len("00"))
	}
	if !errors.Is(res[210].Err, ErrNotWritten) || errors.Is(res[210].Err, ErrMovedBeforeRollback) {
		t.Fatalf("res[210] = %v; want not written (README: it may run once)", res[210].Err)
	}
	names := store.Names()
	for _, i := range []int{210, 220, 280} {
		if !slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(res[i].Item.PayloadBlob, n) }) {
			t.Errorf("the blob of r%04d is gone", i)
		}
	}
	if len(names) != 3 {
		t.Fatalf("blobs after the roll-back: %v; want only those of the rows due by then and the series'", names)
	}
}

// A roll-back that finds, where a row whose write's answer was lost would
// be, what another writer wrote (the id replaced at the same due time)
// leaves that row, and keeps the item's blob: its row was written after
// all, and a traffic-cop pass may have sent it before the replace. A
// series' row due by the roll-back, written after all and taken back,
// keeps its blob too: the pass sends its occurrence before the row says
// so (reviews of issue 38's row 199).
func TestARollBackAfterALostAnswerKeepsABlobAMessageMayName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace bool // another writer replaces r0250 after the batch's lost write
		series  bool // r0250 is a series, due by the roll-back
	}{
		{name: "replaced by another writer", replace: true},
		{name: "a series due by then", series: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt := table.NewMemory("", nil)
			store := payload.NewMemory()
			clk := clock.NewFake(t0)
			wt := &markingTable{Table: mt, lose: true}
			wt.mark = func() {
				clk.Advance(5 * time.Minute)
				for _, e := range mt.Rows("00") {
					if !tc.replace || !strings.HasSuffix(e.RowKey, "_r0250") {
						continue
					}
					p := table.Props(e.Props).Clone()
					p[PropMessage] = "another writer's"
					delete(p, PropPayloadBlob)
					if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Replace, PartitionKey: "00", RowKey: e.RowKey, Props: p}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			c, err := newClient(wt, Options{Clock: clk, Logger: quiet, PayloadStore: store, InlineLimit: 64})
			if err != nil {
				t.Fatal(err)
			}
			items := batchItems(300, "r")
			items[250].Payload = strings.Repeat("x", 200)
			if tc.series {
				items[250].Recurrence = "@every 1h"
			}
			res, err := c.AddMany(ctx(t), items, AddManyOptions{Concurrency: 1})
			if !errors.Is(err, ErrNotWritten) || !errors.Is(res[250].Err, ErrNotWritten) {
				t.Fatalf("AddMany: %v, res[250] %v; want the roll-back", err, res[250].Err)
			}
			if names := store.Names(); len(names) != 1 {
				t.Fatalf("blobs after the roll-back: %v; want r0250's kept", names)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.replace]; mt.Len("00") != want {
				t.Fatalf("%d rows left; want %d (another writer's row stands)", mt.Len("00"), want)
			}
		})
	}
}

// Large payloads go through blobs, which a refused batch deletes again.
func TestAddManyLargePayloads(t *testing.T) {
	store := payload.NewMemory()
	c, _, _ := newMemClient(t, Options{PayloadStore: store, InlineLimit: 64})
	items := batchItems(3, "l")
	items[1].Payload = strings.Repeat("x", 200)
	res, err := c.AddMany(ctx(t), items, AddManyOptions{})
	if err != nil || res[1].Item.PayloadBlob == "" {
		t.Fatalf("AddMany = %+v, %v", res, err)
	}
	if b, err := store.Get(ctx(t), res[1].Item.PayloadBlob); err != nil || string(b) != items[1].Payload {
		t.Fatalf("payload = %q, %v", b, err)
	}
	refused := batchItems(3, "l") // all three pending now
	refused[0].ID, refused[2].ID = "fresh0", "fresh2"
	refused[2].Payload = strings.Repeat("y", 200)
	res, _ = c.AddMany(ctx(t), refused, AddManyOptions{})
	if !errors.Is(res[1].Err, ErrAlreadyScheduled) || len(store.Names()) != 1 {
		t.Fatalf("refused batch: %v, blobs %v (want the first batch's one)", res[1].Err, store.Names())
	}
}

// Add and AddMany take the trace context of their context when an item
// names none; an item's own traceparent wins, and a malformed one is
// refused.
func TestTraceParentFromContext(t *testing.T) {
	c, _, _ := newMemClient(t, Options{})
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	tctx := trace.ContextWithSpanContext(ctx(t), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	const want = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	it, err := c.Add(tctx, Item{ID: "a", Due: t0}, AddOptions{})
	if err != nil || it.TraceParent != want {
		t.Fatalf("Add = %+v, %v", it, err)
	}
	if got, _ := c.Get(ctx(t), "a"); got.TraceParent != want {
		t.Fatalf("stored TraceParent %q", got.TraceParent)
	}
	own := "00-11111111111111111111111111111111-2222222222222222-00"
	res, err := c.AddMany(tctx, []Item{{ID: "b", Due: t0}, {ID: "c", Due: t0, TraceParent: own}}, AddManyOptions{})
	if err != nil || res[0].Item.TraceParent != want || res[1].Item.TraceParent != own {
		t.Fatalf("AddMany = %+v, %v", res, err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "d", Due: t0, TraceParent: "00-xyz"}, AddOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a malformed traceparent: %v", err)
	}
	if _, err := c.Add(ctx(t), Item{ID: "e", Due: t0}, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Get(ctx(t), "e"); got.TraceParent != "" {
		t.Fatalf("untraced task got TraceParent %q", got.TraceParent)
	}
}

// lostAnswer is a table whose first transaction that lose matches commits
// but answers as the SDK's retry of it would: the rows are in the way (or
// gone, for a delete).
type lostAnswer struct {
	table.Table
	lose func(ops []table.Op) bool
	lost bool
	// between, when set, runs after the lost transaction committed and
	// before its retry: another writer's change in that moment.
	between func(ops []table.Op)
}

func (l *lostAnswer) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if !l.lost && len(ops) > 0 && l.lose(ops) {
		l.lost = true
		if _, err := l.Table.Submit(ctx, ops); err != nil {
			return nil, err
		}
		if l.between != nil {
			l.between(ops)
		}
	}
	return l.Table.Submit(ctx, ops)
}

// clientOver returns a client of the schedule in tb, on a fake clock.
func clientOver(t *testing.T, tb table.Table) *Client {
	t.Helper()
	c, err := newClient(tb, Options{Clock: clock.NewFake(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// itemInsert matches a transaction that inserts item rows.
func itemInsert(ops []table.Op) bool {
	return ops[0].Kind == table.Insert && !strings.HasPrefix(ops[0].RowKey, "id~")
}

// A batch whose item transaction committed with its answer lost takes the
// rows it meets for its own — they hold exactly what it writes — instead
// of refusing the whole batch as already scheduled (issue 38, seed 1059).
func TestAddManyTakesItsOwnRowsAfterALostAnswer(t *testing.T) {
	mt := table.NewMemory("", nil)
	lt := &lostAnswer{Table: mt, lose: itemInsert}
	c := clientOver(t, lt)
	items := batchItems(10, "la")
	res, err := c.AddMany(ctx(t), items, AddManyOptions{})
	if err != nil || !lt.lost {
		t.Fatalf("AddMany after a lost answer: %v (lost %v)", err, lt.lost)
	}
	for i, r := range res {
		if r.Err != nil || r.Item.ETag == "" {
			t.Fatalf("res[%d] = %+v", i, r)
		}
		if got, err := c.Get(ctx(t), items[i].ID); err != nil || got.ETag != r.Item.ETag {
			t.Fatalf("%s: %+v, %v; want it pending as answered", items[i].ID, got, err)
		}
	}
	// A row that holds something else is still a duplicate.
	other := batchItems(10, "la")
	other[4].Payload = "changed"
	if res, err := c.AddMany(ctx(t), other, AddManyOptions{}); !errors.Is(err, ErrNotWritten) || !errors.Is(res[4].Err, ErrAlreadyScheduled) {
		t.Fatalf("a different task under a pending id: %v, %v", err, res[4].Err)
	}
}

// A schedule whose answer was lost takes its row for its own although
// another writer marked it meanwhile: a child began waiting for it
// (Waiters), or a parent of a waiting task noted its end (Met). Those
// marks are progress of the task asked for, not another task (issue 38,
// the simulator's seed 12185: a task's insert lost its answer, a child
// scheduled at that moment marked it as waited for, and the retry
// answered "already scheduled" for the task it had written; the user,
// told it was not scheduled, took its cancel for a cancel of nothing).
func TestAddTakesItsOwnRowMarkedByAWorkflowAfterALostAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		it   Item
		mark table.Props
	}{
		{"waiters", Item{ID: "parent", Due: t0.Add(time.Hour)}, table.Props{PropWaiters: true}},
		{"met", Item{ID: "child", Due: t0.Add(time.Hour), After: []string{"x", "y"}, Waiting: true}, table.Props{PropMet: "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt := table.NewMemory("", nil)
			lt := &lostAnswer{Table: mt, lose: itemInsert, between: func(ops []table.Op) {
				if _, err := mt.Submit(ctx(t), []table.Op{{Kind: table.Merge, PartitionKey: ops[0].PartitionKey, RowKey: ops[0].RowKey, Props: tc.mark}}); err != nil {
					t.Error(err)
				}
			}}
			c := clientOver(t, lt)
			it, err := c.Add(ctx(t), tc.it, AddOptions{})
			if err != nil || !lt.lost {
				t.Fatalf("Add after a lost answer and a mark of %v: %v (lost %v); want it taken for its own", tc.mark, err, lt.lost)
			}
			if got, err := c.Get(ctx(t), tc.it.ID); err != nil || got.ETag != it.ETag {
				t.Fatalf("%s: %+v, %v; want it pending as answered", tc.it.ID, got, err)
			}
			// Another task under the id is still refused.
			other := tc.it
			other.Payload = "another"
			if _, err := c.Add(ctx(t), other, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
				t.Fatalf("a different task under a pending id: %v, want ErrAlreadyScheduled", err)
			}
		})
	}
}

// lostThenUnreadable commits the first item transaction but answers an
// error, as a lost answer does, and fails the next read of an item row:
// the batch cannot tell at once whether its rows are there.
type lostThenUnreadable struct {
	table.Table
	lost      bool
	failReads int
}

func (l *lostThenUnreadable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if !l.lost && len(ops) > 0 && itemInsert(ops) {
		l.lost, l.failReads = true, 1
		if _, err := l.Table.Submit(ctx, ops); err != nil {
			return nil, err
		}
		return nil, errors.New("the answer was lost")
	}
	return l.Table.Submit(ctx, ops)
}

func (l *lostThenUnreadable) Get(ctx context.Context, pk, rk string) (table.Entity, error) {
	if l.failReads > 0 && !strings.HasPrefix(rk, "id~") {
		l.failReads--
		return table.Entity{}, errors.New("read timed out")
	}
	return l.Table.Get(ctx, pk, rk)
}

// A batch whose item rows may have been written (the transaction's answer
// lost) does not report them plainly not written while they are there:
// an all-or-nothing batch takes them back in its roll-back, and says so
// of one it could not; a partial one reads them back, and reports one it
// cannot read as maybe scheduled, keeping what finds it by id (issue 38,
// seed 5527: "not written: 14 of 14 items", and two of them ran).
func TestAddManyRollsBackRowsWhoseWriteIsUnknown(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			mt := table.NewMemory("", nil)
			lt := &lostThenUnreadable{Table: mt}
			c := clientOver(t, lt)
			items := batchItems(10, "lu")
			for i := range items {
				items[i].Due = t0.Add(time.Hour)
			}
			res, err := c.AddMany(ctx(t), items, AddManyOptions{Partial: partial})
			if !errors.Is(err, ErrNotWritten) || !lt.lost {
				t.Fatalf("AddMany after a lost answer and a failed read: %v (lost %v)", err, lt.lost)
			}
			pending, maybe := 0, 0
			for i, r := range res {
				_, gerr := c.Get(ctx(t), items[i].ID)
				if gerr == nil {
					pending++
				}
				said := strings.Contains(fmt.Sprint(r.Err), "may have been written") || strings.Contains(fmt.Sprint(r.Err), "may be scheduled")
				if said {
					maybe++
				}
				switch {
				case gerr == nil && r.Err != nil && !said:
					t.Errorf("%s is pending, reported %v", items[i].ID, r.Err)
				case gerr != nil && !errors.Is(gerr, ErrNotFound):
					t.Errorf("%s: lookup %v", items[i].ID, gerr)
				case gerr != nil && r.Err == nil:
					t.Errorf("%s reported written, not found", items[i].ID)
				}
			}
			// All but the one whose read failed are settled: taken back,
			// or (partial) found written.
			if maybe != 1 || !partial && pending != 1 || partial && pending != 10 {
				t.Fatalf("%d pending, %d reported maybe; want 1 maybe and %s", pending, maybe, map[bool]string{false: "1 pending", true: "all pending"}[partial])
			}
		})
	}
}

// A batch that takes its rows for its own after a lost answer sends only
// those that still hold the SendingUntil it wrote: a row whose
// SendingUntil another writer changed meanwhile (a RunNow rewriting it to
// send it itself) is that writer's to send, and two senders of one row
// made a task never run (issue 38, seed 6183).
func TestAddManyLeavesARowRewrittenSinceItsLostAnswerToItsWriter(t *testing.T) {
	mt := table.NewMemory("", nil)
	sending := t0.Add(15 * time.Second)
	items := batchItems(5, "rs")
	lt := &lostAnswer{Table: mt, lose: itemInsert}
	rw := &rewriteAfterLoss{lostAnswer: lt, rk: "", sending: sending.Add(time.Second)}
	c, err := newClient(rw, Options{Clock: clock.NewFake(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rk, err := RowKey(items[2].Due, items[2].ID)
	if err != nil {
		t.Fatal(err)
	}
	rw.rk = rk
	res, err := c.AddMany(ctx(t), items, AddManyOptions{Sending: sending, SendDueBy: t0.Add(time.Hour)})
	if err != nil || !lt.lost || !rw.done {
		t.Fatalf("AddMany after a lost answer: %v (lost %v, rewritten %v)", err, lt.lost, rw.done)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("res[%d]: %v", i, r.Err)
		}
		if mine := !r.Item.SendingUntil.IsZero(); mine != (i != 2) {
			t.Errorf("res[%d] SendingUntil %v: the batch sends it %v; want only the rows still holding its own", i, r.Item.SendingUntil, mine)
		}
	}
}

// rewriteAfterLoss is lostAnswer that, once the answer was lost, merges
// another SendingUntil into the row rk before the batch reads it back.
type rewriteAfterLoss struct {
	*lostAnswer
	rk      string
	sending time.Time
	done    bool
}

func (r *rewriteAfterLoss) Get(ctx context.Context, pk, rk string) (table.Entity, error) {
	if r.lost && !r.done && rk == r.rk {
		r.done = true
		if _, err := r.Table.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: pk, RowKey: rk,
			Props: table.Props{PropSendingUntil: r.sending.UTC().Format(time.RFC3339Nano)}}}); err != nil {
			return table.Entity{}, err
		}
	}
	return r.lostAnswer.Get(ctx, pk, rk)
}

// AddMany writes its id index rows before its item rows. Between the two,
// the index row names a row that is not there yet: a schedule of the id
// by another call meanwhile — `schedule --replace` beside a `schedule
// --file` — must not take the index row over as stale, or AddMany's row,
// landing after it, stands unindexed beside the other call's (issue 38,
// sim seed 50668: a bulk cancel of its type then cancelled that orphan,
// and the record of the id, whose task had succeeded, said cancelled).
// Such an index row (PropIndexing) refuses the id as being scheduled, a
// cancel leaves it be, and another AddMany's refuses the id as a
// duplicate; past IndexingHold the index row is stale as before.
func TestAnIdBeingScheduledByAddManyIsNotTakenOver(t *testing.T) {
	c, mt, fc := newMemClient(t, Options{})
	ctxt := ctx(t)
	due := fc.Now().Add(time.Hour)
	// The state between AddMany's two phases: its index row of "t6",
	// naming the row still to come.
	if _, err := c.Add(ctxt, Item{ID: "other", Due: due}, AddOptions{}); err != nil {
		t.Fatal(err) // (creates the table)
	}
	shard := c.ShardOf("t6")
	rk, err := RowKey(due, "t6")
	if err != nil {
		t.Fatal(err)
	}
	b := &batch{c: c, res: []AddResult{{Item: Item{ID: "t6", RowKey: rk}}}}
	if _, err := mt.Submit(ctxt, b.indexOps(chunk{shard: shard, items: []int{0}})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctxt, Item{ID: "t6", Due: due.Add(time.Minute)}, AddOptions{Replace: true}); !errors.Is(err, ErrAlreadyScheduled) || !strings.Contains(err.Error(), "being scheduled") {
		t.Errorf("replace of an id whose AddMany is under way: %v, want ErrAlreadyScheduled (being scheduled)", err)
	}
	if _, err := c.Add(ctxt, Item{ID: "t6", Due: due.Add(time.Minute)}, AddOptions{}); !errors.Is(err, ErrAlreadyScheduled) {
		t.Errorf("schedule of an id whose AddMany is under way: %v, want ErrAlreadyScheduled", err)
	}
	if _, err := c.Cancel(ctxt, "t6"); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel of an id whose AddMany is under way: %v, want ErrNotFound", err)
	}
	for _, d := range []time.Duration{2 * time.Minute, 0} {
		// Of another due time, or of the same one (the row key the index
		// row names: the review's find, taken for this call's own).
		res, err := c.AddMany(ctxt, []Item{{ID: "t6", Due: due.Add(d), Payload: "another"}}, AddManyOptions{Partial: true})
		if err == nil || !errors.Is(res[0].Err, ErrAlreadyScheduled) {
			t.Errorf("another AddMany of the id due %v later: %+v, %v; want it refused as a duplicate", d, res, err)
		}
	}
	// AddMany's row lands: the one row of the id, found through its index.
	if _, err := mt.Submit(ctxt, []table.Op{{Kind: table.Insert, PartitionKey: shard, RowKey: rk, Props: itemProps(Item{ID: "t6", Due: due}, true)}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctxt, "t6")
	if err != nil || !got.Due.Equal(due) {
		t.Fatalf("the id's task once AddMany's row landed: %+v, %v", got, err)
	}
	if rows := rowsOf(t, mt, shard, "t6"); rows != 1 {
		t.Errorf("%d rows of t6, want 1", rows)
	}

	// An index row left by an AddMany that stopped before its rows is
	// stale once the hold has passed: a schedule of the id takes it over.
	rk2, _ := RowKey(due, "t7")
	b.res[0].Item = Item{ID: "t7", RowKey: rk2}
	if _, err := mt.Submit(ctxt, b.indexOps(chunk{shard: c.ShardOf("t7"), items: []int{0}})); err != nil {
		t.Fatal(err)
	}
	fc.Advance(IndexingHold + time.Second)
	if _, err := c.Add(ctxt, Item{ID: "t7", Due: due.Add(time.Minute)}, AddOptions{}); err != nil {
		t.Errorf("schedule of an id whose AddMany index row is stale: %v", err)
	}
}

// landsOnMiss is a table on which the row pk/rk, looked for and missed
// once, is inserted with props just after: an AddMany's item row landing
// between a lookup's read of the id's index row and the read of the row
// it names.
type landsOnMiss struct {
	table.Table
	pk, rk string
	props  table.Props
	landed bool
}

func (l *landsOnMiss) Get(ctx context.Context, pk, rk string) (table.Entity, error) {
	e, err := l.Table.Get(ctx, pk, rk)
	if !l.landed && pk == l.pk && rk == l.rk && errors.Is(err, storage.ErrNotFound) {
		l.landed = true
		if _, ierr := l.Table.Submit(ctx, []table.Op{{Kind: table.Insert, PartitionKey: pk, RowKey: rk, Props: l.props}}); ierr != nil {
			return e, ierr
		}
	}
	return e, err
}

// A cancel whose lookup reads an AddMany's index row before the row it
// names has landed, and finds the row by its scan once it has, deletes
// the index row with the row: left, still marked as being written, it
// refused the id as "being scheduled by another call" for IndexingHold
// after the task was cancelled (issue 38, sim seed 99748). A reschedule
// racing the same way points the index row at the moved row.
func TestACancelRacingAnAddManyTakesItsIndexRowToo(t *testing.T) {
	for _, verb := range []string{"cancel", "reschedule"} {
		t.Run(verb, func(t *testing.T) {
			mt := table.NewMemory("", nil)
			fc := clock.NewFake(t0)
			ctxt := ctx(t)
			due := fc.Now().Add(time.Hour)
			rk, err := RowKey(due, "t15")
			if err != nil {
				t.Fatal(err)
			}
			lt := &landsOnMiss{Table: mt, rk: rk, props: itemProps(Item{ID: "t15", Due: due}, true)}
			c, err := newClient(lt, Options{Clock: fc, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Add(ctxt, Item{ID: "other", Due: due}, AddOptions{}); err != nil {
				t.Fatal(err) // (creates the table)
			}
			shard := c.ShardOf("t15")
			lt.pk = shard
			b := &batch{c: c, res: []AddResult{{Item: Item{ID: "t15", RowKey: rk}}}}
			if _, err := mt.Submit(ctxt, b.indexOps(chunk{shard: shard, items: []int{0}})); err != nil {
				t.Fatal(err)
			}
			later := due.Add(time.Minute)
			if verb == "cancel" {
				if _, err := c.Cancel(ctxt, "t15"); err != nil {
					t.Fatalf("cancel of the row that landed: %v", err)
				}
				if _, err := mt.Get(ctxt, shard, indexKey("t15")); !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("the cancelled task's index row is left: %v", err)
				}
				if _, err := c.Add(ctxt, Item{ID: "t15", Due: later}, AddOptions{}); err != nil {
					t.Fatalf("schedule of the cancelled id: %v", err)
				}
			} else {
				if _, err := c.Reschedule(ctxt, "t15", later); err != nil {
					t.Fatalf("reschedule of the row that landed: %v", err)
				}
				idx, err := mt.Get(ctxt, shard, indexKey("t15"))
				if err != nil {
					t.Fatal(err)
				}
				if want, _ := RowKey(later, "t15"); idx.Props.Str(PropItem) != want {
					t.Errorf("the index row names %q, want the moved row %q", idx.Props.Str(PropItem), want)
				}
			}
			if got, err := c.Get(ctxt, "t15"); !lt.landed || err != nil || !got.Due.Equal(later) || !got.Indexed {
				t.Errorf("the id's task afterwards: %+v, %v (landed %v); want due %v, found through its index", got, err, lt.landed, later)
			}
			if rows := rowsOf(t, mt, shard, "t15"); rows != 1 {
				t.Errorf("%d rows of t15, want 1", rows)
			}
		})
	}
}

// An index row an AddMany under way wrote names the row still to come; a
// cancel that finds, by its scan, another row of the id (one inserted
// without an index, of another due time) deletes that row alone: the
// index row is not its, and still holds the id for the batch.
func TestACancelOfAnotherRowLeavesAnAddManysIndexRow(t *testing.T) {
	c, mt, fc := newMemClient(t, Options{})
	ctxt := ctx(t)
	due := fc.Now().Add(time.Hour)
	if _, err := c.Add(ctxt, Item{ID: "other", Due: due}, AddOptions{}); err != nil {
		t.Fatal(err) // (creates the table)
	}
	shard := c.ShardOf("t16")
	coming, _ := RowKey(due, "t16")
	direct, _ := RowKey(due.Add(time.Minute), "t16")
	b := &batch{c: c, res: []AddResult{{Item: Item{ID: "t16", RowKey: coming}}}}
	if _, err := mt.Submit(ctxt, b.indexOps(chunk{shard: shard, items: []int{0}})); err != nil {
		t.Fatal(err)
	}
	if err := mt.PutRaw(shard, direct, table.Props{"Message": ""}); err != nil {
		t.Fatal(err)
	}
	if it, err := c.Cancel(ctxt, "t16"); err != nil || it.RowKey != direct {
		t.Fatalf("cancel: %+v, %v; want the unindexed row %s cancelled", it, err, direct)
	}
	idx, err := mt.Get(ctxt, shard, indexKey("t16"))
	if err != nil || idx.Props.Str(PropItem) != coming {
		t.Errorf("the batch's index row after the cancel of another row: %+v, %v; want it left naming %s", idx.Props, err, coming)
	}
}

// A batch rolled back after one of its tasks landed, was cancelled and
// was scheduled again under its id by another call deletes only the index
// rows it wrote: the new task's index row, written since, stays, and the
// task is found through it. The roll-back deleted every index row of its
// ids whatever it held, leaving the new task unindexed (a review's find).
func TestARollBackLeavesTheIndexRowOfAnIdScheduledAgainMeanwhile(t *testing.T) {
	c, mt, fc := newMemClient(t, Options{Shards: []string{"00", "01"}})
	ctxt := ctx(t)
	due := fc.Now().Add(time.Hour)
	x, y := "x0", "y0"
	for i := 0; c.ShardOf(x) == c.ShardOf(y); i++ {
		y = fmt.Sprintf("y%d", i)
	}
	later := due.Add(time.Hour)
	var again Item
	var inHook bool
	mt.BeforeSubmit(func(ops []table.Op) error {
		if inHook || len(ops) == 0 || ops[0].Kind != table.Insert || ops[0].PartitionKey != c.ShardOf(y) || strings.HasPrefix(ops[0].RowKey, IndexPrefix) {
			return nil
		}
		// y's row is next; x's has landed (the latest due first).
		inHook = true
		defer func() { inHook = false }()
		if _, err := c.Cancel(ctxt, x); err != nil {
			t.Errorf("cancel of the batch's landed task: %v", err)
		}
		var err error
		if again, err = c.Add(ctxt, Item{ID: x, Due: later.Add(time.Minute), Payload: "again"}, AddOptions{}); err != nil {
			t.Errorf("schedule of the cancelled id: %v", err)
		}
		return fmt.Errorf("%w: the write of y's row fails", storage.ErrServerBusy)
	})
	if _, err := c.AddMany(ctxt, []Item{{ID: x, Due: later}, {ID: y, Due: due}}, AddManyOptions{Concurrency: 1}); !errors.Is(err, ErrNotWritten) {
		t.Fatalf("the batch: %v; want it rolled back", err)
	}
	if again.RowKey == "" {
		t.Fatal("the hook never ran")
	}
	idx, err := mt.Get(ctxt, c.ShardOf(x), indexKey(x))
	if err != nil || idx.Props.Str(PropItem) != again.RowKey {
		t.Errorf("the index row of the id scheduled again after the roll-back: %+v, %v; want it naming %s", idx.Props, err, again.RowKey)
	}
	if got, err := c.Get(ctxt, x); err != nil || got.Payload != "again" {
		t.Errorf("the id scheduled again: %+v, %v", got, err)
	}
	if _, err := mt.Get(ctxt, c.ShardOf(y), indexKey(y)); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the rolled-back item's own index row: %v; want it deleted", err)
	}
}

// rowsOf counts the item rows of id in shard.
func rowsOf(t *testing.T, mt table.Table, shard, id string) int {
	t.Helper()
	es, err := table.All(context.Background(), mt, table.Query{Partition: shard, To: IndexPrefix}, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if _, suffix, err := ParseRowKey(e.RowKey); err == nil && suffix == id {
			n++
		}
	}
	return n
}

// A roll-back whose delete of a chunk of rows committed with its answer
// lost (the SDK's retry and the delete of each row then find them gone)
// does not take those rows for moved to the queue: their tasks were taken
// back, reported not written, and their blobs deleted. Reported moved,
// each made ScheduleMany cancel the run of an earlier scheduling of its id
// that had nothing to do with the batch (a review's find).
func TestAddManyRollBackWhoseDeleteLostItsAnswer(t *testing.T) {
	for _, perRow := range []bool{false, true} {
		t.Run(fmt.Sprintf("a row at a time=%v", perRow), func(t *testing.T) {
			rollBackWhoseDeleteLostItsAnswer(t, perRow)
		})
	}
}

// rollBackWhoseDeleteLostItsAnswer is TestAddManyRollBackWhoseDeleteLostItsAnswer;
// with perRow the lost answer is a single row's delete, whose row, read
// gone, is taken back with its index row (a review of row 197's fix: the
// row was taken to stand, and its index row held the id for IndexingHold).
func rollBackWhoseDeleteLostItsAnswer(t *testing.T, perRow bool) {
	mt := table.NewMemory("", nil)
	lt := &lostDelete{Table: mt, perRow: perRow}
	store := payload.NewMemory()
	// (An hour before the items' due times: a row due by the roll-back's
	// end keeps its blob, which a traffic-cop pass may be sending.)
	c, err := newClient(lt, Options{Clock: clock.NewFake(t0.Add(-time.Hour)), Logger: quiet, PayloadStore: store, InlineLimit: 64})
	if err != nil {
		t.Fatal(err)
	}
	items := batchItems(150, "ld")
	items[120].Payload = strings.Repeat("x", 200) // written in the first chunk
	var submits atomic.Int32
	mt.BeforeSubmit(func(ops []table.Op) error {
		if ops[0].Kind != table.Insert || strings.HasPrefix(ops[0].RowKey, IndexPrefix) {
			return nil
		}
		if submits.Add(1) == 1 {
			return nil
		}
		return fmt.Errorf("%w: injected", storage.ErrBadRequest)
	})
	res, err := c.AddMany(ctx(t), items, AddManyOptions{Concurrency: 1})
	if !errors.Is(err, ErrNotWritten) || !lt.lost {
		t.Fatalf("AddMany: %v (a delete's answer lost: %v); want the roll-back", err, lt.lost)
	}
	for i, r := range res {
		if errors.Is(r.Err, ErrMovedBeforeRollback) || !errors.Is(r.Err, ErrNotWritten) {
			t.Fatalf("res[%d] = %v; want not written (taken back)", i, r.Err)
		}
	}
	if names := store.Names(); len(names) != 0 {
		t.Fatalf("blobs after the roll-back: %v; want none", names)
	}
	if n := mt.Len("00"); n != 0 {
		t.Fatalf("%d rows left after the roll-back; want none", n)
	}
}

// lostDelete commits the first transaction of item-row deletes with more
// than one row and answers a connection error for it.
type lostDelete struct {
	table.Table
	lost bool
	// perRow: the chunk's delete fails uncommitted, and the first of the
	// deletes a row at a time loses its answer instead, and so does every
	// delete of that row tried again.
	perRow bool
	row    string
}

func (l *lostDelete) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	rowDelete := len(ops) > 0 && ops[0].Kind == table.Delete && !strings.HasPrefix(ops[0].RowKey, IndexPrefix)
	switch {
	case l.perRow && rowDelete && len(ops) > 1:
		return nil, fmt.Errorf("%w: injected", storage.ErrServerBusy)
	case l.lost && rowDelete && ops[0].RowKey == l.row:
		return nil, errors.New("connection reset by peer")
	}
	if !l.lost && rowDelete && (len(ops) > 1 || l.perRow) {
		l.lost, l.row = true, ops[0].RowKey
		if _, err := l.Table.Submit(ctx, ops); err != nil {
			return nil, err
		}
		return nil, errors.New("connection reset by peer")
	}
	return l.Table.Submit(ctx, ops)
}

// An AddMany whose index transaction committed but answered an error (a
// lost answer) and which then gives up takes those index rows back, as it
// does the ones it knows it wrote: left, each would hold its id as being
// scheduled for IndexingHold (a review's find).
func TestAddManyTakesBackIndexRowsWhoseAnswerWasLost(t *testing.T) {
	mt := table.NewMemory("", nil)
	ft := &failAfterCommit{Table: mt}
	c, err := newClient(ft, Options{Clock: clock.NewFake(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	items := batchItems(5, "li")
	if _, err := c.AddMany(ctx(t), items, AddManyOptions{}); !errors.Is(err, ErrNotWritten) || !ft.failed {
		t.Fatalf("AddMany whose index transaction lost its answer: %v (failed %v); want not written", err, ft.failed)
	}
	for _, it := range items {
		if _, err := mt.Get(ctx(t), c.ShardOf(it.ID), indexKey(it.ID)); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("the index row of %s after the roll-back: %v, want it gone", it.ID, err)
		}
	}
	if _, err := c.Add(ctx(t), items[0], AddOptions{}); err != nil {
		t.Errorf("schedule of an id the rolled-back batch held: %v", err)
	}
}

// failAfterCommit commits the first transaction of id index rows and
// answers a connection error, as a transaction whose answer was lost
// does, and fails every retry of it.
type failAfterCommit struct {
	table.Table
	failed bool
}

func (f *failAfterCommit) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if len(ops) > 0 && ops[0].Kind == table.Insert && strings.HasPrefix(ops[0].RowKey, "id~") {
		if !f.failed {
			f.failed = true
			if _, err := f.Table.Submit(ctx, ops); err != nil {
				return nil, err
			}
		}
		return nil, errors.New("connection reset by peer")
	}
	return f.Table.Submit(ctx, ops)
}

// markingTable commits the first item transaction of a batch and then
// marks a row as waited for (as a task scheduled --after it meanwhile
// does), its answer lost (lose), answered "already exists" as the SDK's
// retry of a lost answer is (exists), or without ETags (noETags); every
// later item transaction fails, so that the batch is rolled back.
type markingTable struct {
	table.Table
	mark                  func()
	lose, exists, noETags bool
	n                     int
	// loseDelete: the roll-back's delete of r0250's row commits and its
	// answer is lost, and so are those of its retries.
	loseDelete, lostDelete bool
}

func (m *markingTable) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if m.loseDelete && len(ops) == 1 && ops[0].Kind == table.Delete && strings.HasSuffix(ops[0].RowKey, "_r0250") {
		// Its retries lose theirs too.
		if !m.lostDelete {
			if _, err := m.Table.Submit(ctx, ops); err != nil {
				return nil, err
			}
			m.lostDelete = true
		}
		return nil, errors.New("connection reset by peer")
	}
	if len(ops) == 0 || !itemInsert(ops) {
		return m.Table.Submit(ctx, ops)
	}
	if m.n++; m.n > 1 {
		return nil, fmt.Errorf("%w: injected", storage.ErrBadRequest)
	}
	etags, err := m.Table.Submit(ctx, ops)
	if err != nil {
		return nil, err
	}
	m.mark()
	switch {
	case m.lose:
		return nil, errors.New("the answer was lost")
	case m.exists:
		return nil, fmt.Errorf("%w: the retry of a lost answer", storage.ErrAlreadyExists)
	case m.noETags:
		return nil, nil
	}
	return etags, nil
}

// A roll-back that takes back a row a task began waiting for while the
// batch was under way hands it to WaitedFor first, while the row is still
// there: no message of the row will ever tell that task of its end (issue
// 38, row 197, seeds 300088 and 119804: a task --after a line of a
// rolled-back file waited for good). When WaitedFor fails the row is left
// for its message to tell them, and the item says so.
func TestARollBackTellsWhoMarkedARowItTakesBack(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		lose, exists, noETags bool
		refuse                bool
		due                   bool // due by the roll-back: the mover may be sending it
		loseDelete            bool
	}{
		{name: "marked after its write"},
		{name: "its delete's answer lost", loseDelete: true},
		{name: "due by the roll-back", due: true},
		{name: "its write's answer lost", lose: true},
		{name: "its write met as already there, marked", exists: true},
		{name: "its ETag not given", noETags: true},
		{name: "telling refused", refuse: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mt := table.NewMemory("", nil)
			var c *Client
			clk := clock.NewFake(t0)
			wt := &markingTable{Table: mt, lose: tc.lose, exists: tc.exists, noETags: tc.noETags, loseDelete: tc.loseDelete}
			wt.mark = func() {
				if ok, _, err := c.NoteWaitersFound(ctx(t), "r0250", Item{}); !ok || err != nil {
					t.Errorf("marking r0250: %v %v", ok, err)
				}
				if tc.due {
					clk.Advance(5 * time.Minute)
				}
			}
			c, err := newClient(wt, Options{Clock: clk, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			var told, tookBack []string
			o := AddManyOptions{Concurrency: 1, TookBack: func(ctx context.Context, it Item) {
				// Gone, its index row still holding the id.
				if _, err := c.Get(ctx, it.ID); !errors.Is(err, ErrNotFound) {
					t.Errorf("TookBack(%s) with its row still found: %v", it.ID, err)
				}
				if _, err := mt.Get(ctx, it.Shard, indexKey(it.ID)); err != nil {
					t.Errorf("TookBack(%s) with its index row gone: %v", it.ID, err)
				}
				tookBack = append(tookBack, it.ID)
			}, WaitedFor: func(ctx context.Context, it Item) error {
				got, err := c.Get(ctx, it.ID)
				if err != nil || !got.Waiters {
					t.Errorf("WaitedFor(%s) with its row %+v, %v; want it still there, marked", it.ID, got, err)
				}
				told = append(told, it.ID)
				if tc.refuse {
					return errors.New("watch refused")
				}
				return nil
			}}
			res, err := c.AddMany(ctx(t), batchItems(300, "r"), o)
			if !errors.Is(err, ErrNotWritten) {
				t.Fatalf("AddMany: %v; want it rolled back", err)
			}
			if len(told) != 1 || told[0] != "r0250" {
				t.Fatalf("WaitedFor heard of %v; want r0250 alone", told)
			}
			if want := map[bool]int{false: 1, true: 0}[tc.refuse || tc.due]; len(tookBack) != want || want == 1 && tookBack[0] != "r0250" {
				t.Fatalf("TookBack heard of %v; want r0250 %d times", tookBack, want)
			}
			if tc.loseDelete != wt.lostDelete {
				t.Fatal("no delete of r0250 lost its answer: the test's match is stale")
			}
			if tc.due && !errors.Is(res[250].Err, ErrMovedBeforeRollback) {
				t.Fatalf("res[250] = %v; want moved before the roll-back (its run is to be recorded cancelled)", res[250].Err)
			}
			for i, r := range res {
				if tc.due && i == 250 {
					continue
				}
				if !errors.Is(r.Err, ErrNotWritten) {
					t.Fatalf("res[%d] = %v; want not written", i, r.Err)
				}
			}
			got, gerr := c.Get(ctx(t), "r0250")
			switch {
			case !tc.refuse && (mt.Len("00") != 0 || !errors.Is(gerr, ErrNotFound)):
				t.Fatalf("%d rows left, r0250 %v; want everything taken back", mt.Len("00"), gerr)
			case tc.refuse && (mt.Len("00") != 2 || gerr != nil || !got.Waiters):
				t.Fatalf("%d rows left, r0250 %+v %v; want its marked row and index row alone", mt.Len("00"), got, gerr)
			case tc.refuse && !strings.Contains(res[250].Err.Error(), "making sure they hear of its end failed"):
				t.Fatalf("res[250] = %v; want it to say why its row stays", res[250].Err)
			}
		})
	}
}

// A roll-back takes back a row moved within the schedule since its write
// (rescheduled, or released once its parents ended), where it is now,
// with its id index row: it was taken for taken back, and stayed to run,
// reported not written, its payload blob deleted (a review of row 197's
// fix). A moved row marked as waited for is handed to WaitedFor and
// TookBack; one due now, whose message the mover may be sending, is
// reported moved before the roll-back with its new due time, for its run
// to be recorded cancelled, and keeps its blob.
func TestARollBackTakesBackARowMovedSinceItsWrite(t *testing.T) {
	for _, tc := range []struct {
		name        string
		to          time.Duration // the new due time, from t0
		mark, moved bool
		series      bool // r0250 recurs: its moved row counts as the mover's next occurrence
	}{
		{name: "rescheduled", to: 2 * time.Hour},
		{name: "rescheduled and waited for", to: 2 * time.Hour, mark: true},
		{name: "rescheduled due now", to: 0, moved: true},
		{name: "a series rescheduled", to: 2 * time.Hour, moved: true, series: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := payload.NewMemory()
			c, mt, _ := newMemClient(t, Options{PayloadStore: store, InlineLimit: 64})
			items := batchItems(300, "r")
			items[250].Payload = strings.Repeat("x", 200)
			if tc.series {
				// A series' row gone from its written key reads as sent
				// by the mover, which inserted the next occurrence: the
				// series is cancelled, so that it does not go on, and
				// the line reported moved before the roll-back. Its
				// blob stays: a series' row does not reliably say
				// whether an occurrence naming it was sent
				// (blobNamedOut).
				items[250].Recurrence = "@every 1h"
			}
			var submits atomic.Int32
			var moving atomic.Bool
			mt.BeforeSubmit(func(ops []table.Op) error {
				if moving.Load() || ops[0].Kind != table.Insert || strings.HasPrefix(ops[0].RowKey, IndexPrefix) {
					return nil
				}
				switch submits.Add(1) {
				case 1:
					return nil // r0299 to r0200
				case 2:
					moving.Store(true)
					if _, err := c.Reschedule(ctx(t), "r0250", t0.Add(tc.to)); err != nil {
						t.Errorf("reschedule r0250: %v", err)
					}
					if ok, _, err := c.NoteWaitersFound(ctx(t), "r0250", Item{}); tc.mark && (!ok || err != nil) {
						t.Errorf("mark r0250: %v %v", ok, err)
					}
					moving.Store(false)
				}
				return fmt.Errorf("%w: injected", storage.ErrBadRequest)
			})
			var told, tookBack []string
			o := AddManyOptions{Concurrency: 1,
				WaitedFor: func(_ context.Context, it Item) error { told = append(told, it.ID); return nil },
				TookBack:  func(_ context.Context, it Item) { tookBack = append(tookBack, it.ID) },
			}
			if !tc.mark {
				o.WaitedFor, o.TookBack = nil, nil
			}
			res, err := c.AddMany(ctx(t), items, o)
			if !errors.Is(err, ErrNotWritten) {
				t.Fatalf("AddMany: %v; want the roll-back", err)
			}
			if _, gerr := c.Get(ctx(t), "r0250"); !errors.Is(gerr, ErrNotFound) || mt.Len("00") != 0 {
				t.Fatalf("r0250 after the roll-back: %v, %d rows left; want nothing left", gerr, mt.Len("00"))
			}
			if tc.mark && (len(told) != 1 || len(tookBack) != 1) {
				t.Fatalf("WaitedFor heard of %v, TookBack of %v; want r0250 once each", told, tookBack)
			}
			names := store.Names()
			if !tc.moved {
				if errors.Is(res[250].Err, ErrMovedBeforeRollback) || !errors.Is(res[250].Err, ErrNotWritten) || len(names) != 0 {
					t.Fatalf("res[250] = %v, blobs %v; want not written (taken back), no blob", res[250].Err, names)
				}
				return
			}
			if tc.series {
				if !errors.Is(res[250].Err, ErrMovedBeforeRollback) || len(names) != 1 {
					t.Fatalf("res[250] = %v, blobs %v; want moved before the roll-back (the series cancelled), its blob kept", res[250].Err, names)
				}
				return
			}
			if !errors.Is(res[250].Err, ErrMovedBeforeRollback) || !res[250].Item.Due.Equal(t0) || len(names) != 1 {
				t.Fatalf("res[250] = %v, due %s, blobs %v; want moved before the roll-back, due at its new time, its blob kept", res[250].Err, res[250].Item.Due, names)
			}
		})
	}
}

// A roll-back takes back a line waiting for another line of its own file
// before that parent: taken back first, the parent (marked as waited for)
// is handed to WaitedFor, whose watch finds it gone — ended, to an
// --after-any child — and releases the child, which could run before the
// roll-back reached its row (issue 38, sim seed 142826, row 234).
func TestARollBackTakesBackAWaitingLineBeforeItsParent(t *testing.T) {
	mt := table.NewMemory("", nil)
	var c *Client
	wt := &markingTable{Table: mt, lose: true, mark: func() {}}
	c, err := newClient(wt, Options{Clock: clock.NewFake(t0), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	items := batchItems(300, "r")
	// A chain in the file's order: r0252 waits for r0251, which waits
	// for r0250.
	items[250].Waiters = true
	items[251].After, items[251].AfterAny, items[251].Waiters = []string{"r0250"}, true, true
	items[252].After, items[252].AfterAny = []string{"r0251"}, true
	var told []string
	o := AddManyOptions{Concurrency: 1, WaitedFor: func(ctx context.Context, it Item) error {
		for _, w := range []string{"r0251", "r0252"} {
			if w == it.ID {
				continue
			}
			if got, err := c.Get(ctx, w); err == nil && slices.Contains(got.After, it.ID) {
				t.Errorf("WaitedFor(%s) while %s, which waits for it, is still there: its watch may release it", it.ID, w)
			}
		}
		told = append(told, it.ID)
		return nil
	}}
	if _, err := c.AddMany(ctx(t), items, o); !errors.Is(err, ErrNotWritten) {
		t.Fatalf("AddMany: %v; want it rolled back", err)
	}
	if !slices.Equal(told, []string{"r0251", "r0250"}) {
		t.Fatalf("WaitedFor heard of %v; want r0251, then r0250 (the lines others wait for, children first)", told)
	}
	if n := mt.Len("00"); n != 0 {
		t.Fatalf("%d rows left; want everything taken back", n)
	}
}

// A batch whose item transaction committed with its answer lost does not
// write again a row taken away before the retry (a cancel, a parent's
// end told to a child): the retry meets the rows still there and takes
// them for its own, and the missing ones were its own too, as their id
// index rows, gone, say (issue 38, sim seed 161494: a child cancelled
// with its parent in that moment was written again and waited for good).
func TestAddManyDoesNotWriteAgainARowCancelledAfterItsLostAnswer(t *testing.T) {
	mt := table.NewMemory("", nil)
	lt := &lostAnswer{Table: mt, lose: itemInsert}
	c := clientOver(t, lt)
	lt.between = func([]table.Op) {
		if _, err := c.Cancel(ctx(t), "la0003"); err != nil {
			t.Errorf("cancel between the lost answer and the retry: %v", err)
		}
	}
	res, err := c.AddMany(ctx(t), batchItems(10, "la"), AddManyOptions{})
	if err != nil || !lt.lost {
		t.Fatalf("AddMany after a lost answer: %v (lost %v)", err, lt.lost)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("res[%d] = %+v; want written", i, r)
		}
	}
	if got, err := c.Get(ctx(t), "la0003"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("la0003, cancelled after its write, is back: %+v, %v", got, err)
	}
	if rows := len(itemKeys(mt)); rows != 9 {
		t.Fatalf("%d item rows; want the 9 not cancelled", rows)
	}
	if got, err := c.Get(ctx(t), "la0004"); err != nil || got.ETag == "" {
		t.Fatalf("la0004: %+v, %v; want it pending", got, err)
	}
}

// beforeItems runs hook once before the first item transaction: another
// writer's change between the index rows and the item rows.
type beforeItems struct {
	table.Table
	hook func()
}

func (b *beforeItems) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if b.hook != nil && len(ops) > 0 && itemInsert(ops) {
		hook := b.hook
		b.hook = nil
		hook()
	}
	return b.Table.Submit(ctx, ops)
}

// A transaction refused because another writer's row is in the way did
// not commit: a row of it found missing then is written, although its id
// index row went meanwhile (taken as an orphan once IndexingHold ran
// out), not taken for one that landed and was cancelled (a review of the
// fix of sim seed 161494).
func TestAddManyWritesARowItsRefusedTransactionLeftOut(t *testing.T) {
	mt := table.NewMemory("", nil)
	items := batchItems(2, "lb")
	bt := &beforeItems{Table: mt}
	c := clientOver(t, bt)
	bt.hook = func() {
		ops := []table.Op{
			{Kind: table.Delete, PartitionKey: "00", RowKey: indexKey("lb0000")},
			{Kind: table.Insert, PartitionKey: "00", RowKey: mustKey(items[1].Due, "lb0001"), Props: map[string]any{PropID: "lb0001", PropType: "other"}},
		}
		for _, op := range ops {
			if _, err := mt.Submit(ctx(t), []table.Op{op}); err != nil {
				t.Error(err)
			}
		}
	}
	res, _ := c.AddMany(ctx(t), items, AddManyOptions{Partial: true})
	if !errors.Is(res[1].Err, ErrAlreadyScheduled) {
		t.Fatalf("lb0001, another writer's row at its key: %+v; want ErrAlreadyScheduled", res[1])
	}
	if res[0].Err == nil {
		if _, err := mt.Get(ctx(t), "00", mustKey(items[0].Due, "lb0000")); err != nil {
			t.Fatalf("lb0000 answered written, but its row is not there: %v", err)
		}
	}
}
