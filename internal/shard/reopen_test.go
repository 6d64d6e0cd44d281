package shard

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// steadyMap is a map of count shards with no change under way, written
// by one member's balancer.
func steadyMap(t *testing.T, count int) (context.Context, table.Table, *Balancer) {
	t.Helper()
	ctx, tb, b, log := oneMemberBalancer(count)
	if err := b.cycle(ctx, 1, true, log); err != nil {
		t.Fatal(err)
	}
	m, _ := Read(ctx, tb)
	for _, a := range m.Sorted() {
		if err := markDone(ctx, tb, a, count); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.cycle(ctx, 1, false, log); err != nil {
		t.Fatal(err)
	}
	if m, _ := Read(ctx, tb); m.Count != count || m.PrevCount != 0 {
		t.Fatalf("map %+v; want %d shards, no change under way", m.Layout(0), count)
	}
	return ctx, tb, b
}

// openRowFaults is a table that, before the first take-back of an open
// row, runs beforeDelete, before the first conditional write of the map
// row beforeMapWrite, fails the first failDeletes take-backs, loses the
// answer to the first map write when loseMapAnswer is set (and the map
// cannot be read from then when it is "and the read"), and fails reads
// of the map while mapDown is set and inserts of open rows while
// insertDown is. With insertRetried, the first insert of an open row
// commits and answers 409, as the storage client's retry of an insert
// whose first answer was lost does.
type openRowFaults struct {
	table.Table
	beforeDelete, beforeMapWrite func()
	beforeUpsert                 func() // before the first upsert of an open row
	failDeletes                  int
	loseMapAnswer                string
	mapDown, insertDown          bool
	insertRetried                bool
	insertGone                   bool // the first insert answers 409 and leaves no row
}

func (f *openRowFaults) Query(ctx context.Context, q table.Query) (table.Page, error) {
	if f.mapDown && q.Partition == Partition {
		return table.Page{}, storage.ErrServerBusy
	}
	return f.Table.Query(ctx, q)
}

func (f *openRowFaults) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	op := ops[0]
	if strings.HasPrefix(op.RowKey, OpenRowPrefix) {
		switch {
		case op.Kind == table.Insert && f.insertDown:
			return nil, storage.ErrServerBusy
		case op.Kind == table.Insert && f.insertGone:
			f.insertGone = false
			return nil, storage.ErrAlreadyExists
		case op.Kind == table.Insert && f.insertRetried:
			f.insertRetried = false
			if _, err := f.Table.Submit(ctx, ops); err != nil {
				return nil, err
			}
			return nil, storage.ErrAlreadyExists
		case op.Kind == table.Delete && f.beforeDelete != nil:
			do := f.beforeDelete
			f.beforeDelete = nil
			do()
		case op.Kind == table.Upsert && f.beforeUpsert != nil:
			do := f.beforeUpsert
			f.beforeUpsert = nil
			do()
		case op.Kind == table.Delete && f.failDeletes > 0:
			f.failDeletes--
			return nil, storage.ErrServerBusy
		}
	}
	if op.RowKey == MapRow && op.Kind == table.Merge && op.IfMatch != "" {
		if f.beforeMapWrite != nil {
			do := f.beforeMapWrite
			f.beforeMapWrite = nil
			do()
		}
		if lose := f.loseMapAnswer; lose != "" {
			f.loseMapAnswer = ""
			f.mapDown = lose == "and the read"
			if _, err := f.Table.Submit(ctx, ops); err != nil {
				return nil, err
			}
			return nil, storage.ErrServerBusy
		}
	}
	return f.Table.Submit(ctx, ops)
}

// allOpen fails t unless every shard of count holds its open row.
func allOpen(t *testing.T, ctx context.Context, tb table.Table, count int, why string) {
	t.Helper()
	for _, s := range Names(count) {
		if !openRow(t, ctx, tb, s, count) {
			t.Fatalf("shard %s lacks the open row of %d: %s", s, count, why)
		}
	}
}

// mustSubmit submits op to tb, failing t on an error.
func mustSubmit(t *testing.T, ctx context.Context, tb table.Table, op table.Op) {
	t.Helper()
	if _, err := tb.Submit(ctx, []table.Op{op}); err != nil {
		t.Fatal(err)
	}
}

// openRow reports whether shard s holds the open row of count.
func openRow(t *testing.T, ctx context.Context, tb table.Table, s string, count int) bool {
	t.Helper()
	_, err := tb.Get(ctx, s, OpenRowKey(count))
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// A Reopen that cannot read the map after its write takes its row back:
// the count it read before may be one the fleet has left, and its row
// left standing would let that count's takes commit beside the key's
// holder, while a row missing costs the next take one failed transaction
// (issue 38, a third review of the open rows).
func TestAReopenThatCannotReadTheMapAfterTakesItsRowBack(t *testing.T) {
	ctx, tb, _ := steadyMap(t, 8)
	f := &openRowFaults{Table: tb, mapDown: true}
	if err := Reopen(ctx, f, "02", 4); err == nil {
		t.Fatal("a Reopen that could not read the map after its write returned no error")
	}
	if openRow(t, ctx, tb, "02", 4) {
		t.Fatal("an open row of 4 written under 8 shards stands after a Reopen that could not read the map")
	}
}

// A take placed by the row's count that merges into it between Reopen's
// write and its take-back changes its ETag; Reopen reads it and the map
// again and deletes it, rather than leaving the shard open to a count the
// fleet has left (issue 38, a third review: the 412 was taken for done).
func TestAReopenTakesBackARowATakeChangedAfterItsWrite(t *testing.T) {
	ctx, tb, _ := steadyMap(t, 8)
	f := &openRowFaults{Table: tb}
	f.beforeDelete = func() {
		mustSubmit(t, ctx, tb, table.Op{Kind: table.Merge, PartitionKey: "02", RowKey: OpenRowKey(4), Props: table.Props{}})
	}
	if err := Reopen(ctx, f, "02", 4); err != nil {
		t.Fatal(err)
	}
	if openRow(t, ctx, tb, "02", 4) {
		t.Fatal("an open row of 4 a take merged into stands under 8 shards")
	}
}

// A Reopen of count N that read the map at M and is about to take its row
// back while `shards set N` writes N's open rows leaves the row standing,
// whether the set has named N in the map yet or not: OpenRows writes the
// row again marked as set, so the take-back fails its condition, reads
// the row and leaves it. Taken back, the row's shard would refuse every
// take placed by N until the change ended (issue 38, the third and fourth
// reviews of the open rows).
func TestAReopenMeetingAShardsSetOfItsCountLeavesTheRow(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(ctx context.Context, tb table.Table) error
	}{
		{"the set's rows written, its map not yet", func(ctx context.Context, tb table.Table) error {
			return OpenRows(ctx, tb, 8, OpenToken())
		}},
		{"the whole set", func(ctx context.Context, tb table.Table) error {
			_, err := SetCount(ctx, tb, 8)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, tb, _ := steadyMap(t, 4)
			f := &openRowFaults{Table: tb}
			f.beforeDelete = func() {
				if err := tc.set(ctx, tb); err != nil {
					t.Fatal(err)
				}
			}
			if err := Reopen(ctx, f, "02", 8); err != nil {
				t.Fatal(err)
			}
			allOpen(t, ctx, tb, 8, "that shards set wrote")
		})
	}
}

// A Reopen whose insert answers 409 reads the map all the same: the row
// there may be its own insert, tried again after its answer was lost, and
// left standing for a count the map no longer names it would let that
// count's takes commit beside the key's holder (issue 38, a review of the
// README's open-row repair). Under a map that names the count, a row
// already there stays.
func TestAReopenWhoseInsertAnswers409ChecksTheMap(t *testing.T) {
	t.Run("the map moved on", func(t *testing.T) {
		ctx, tb, _ := steadyMap(t, 8)
		f := &openRowFaults{Table: tb, insertRetried: true}
		if err := Reopen(ctx, f, "02", 4); err != nil {
			t.Fatal(err)
		}
		if openRow(t, ctx, tb, "02", 4) {
			t.Fatal("an open row of 4 stands under 8 shards after its insert answered 409")
		}
	})
	t.Run("the map names the count", func(t *testing.T) {
		ctx, tb, _ := steadyMap(t, 4)
		mustSubmit(t, ctx, tb, table.Op{Kind: table.Delete, PartitionKey: "02", RowKey: OpenRowKey(4)})
		f := &openRowFaults{Table: tb, insertRetried: true}
		if err := Reopen(ctx, f, "02", 4); err != nil {
			t.Fatal(err)
		}
		allOpen(t, ctx, tb, 4, "the map names 4")
	})
	t.Run("the map unreadable and the row gone", func(t *testing.T) {
		ctx, tb, _ := steadyMap(t, 8)
		f := &openRowFaults{Table: tb, insertGone: true, mapDown: true}
		if err := Reopen(ctx, f, "02", 4); err == nil {
			t.Fatal("a Reopen that never read the map returned no error")
		}
	})
	t.Run("the map unreadable", func(t *testing.T) {
		ctx, tb, _ := steadyMap(t, 8)
		f := &openRowFaults{Table: tb, insertRetried: true, mapDown: true}
		if err := Reopen(ctx, f, "02", 4); err == nil {
			t.Fatal("a Reopen that could not read the map after a 409 returned no error")
		}
		if openRow(t, ctx, tb, "02", 4) {
			t.Fatal("an open row of 4 stands under 8 shards after a Reopen that could not read the map")
		}
	})
}

// A take-back that fails is tried again: left, the row would keep its
// shard open to a count the fleet has left (issue 38, a fourth review of
// the open rows).
func TestAReopenTriesItsTakeBackAgain(t *testing.T) {
	ctx, tb, _ := steadyMap(t, 8)
	f := &openRowFaults{Table: tb, failDeletes: 2}
	if err := Reopen(ctx, f, "02", 4); err != nil {
		t.Fatal(err)
	}
	if openRow(t, ctx, tb, "02", 4) {
		t.Fatal("an open row of 4 stands under 8 shards after its take-back failed twice")
	}
}

// `shards set` whose map write meets a cop's cycle that wrote the map
// since it was read (an owner given, a term's claim) reads it again and
// makes the change; one that meets a change under way since fails and
// takes its open rows back (a fourth review of the open rows: the rows of
// a count the map did not name stood until the next change).
func TestAShardsSetMeetingAMapWrittenSince(t *testing.T) {
	t.Run("a cop's cycle", func(t *testing.T) {
		ctx, tb, _ := steadyMap(t, 4)
		f := &openRowFaults{Table: tb}
		f.beforeMapWrite = func() {
			mustSubmit(t, ctx, tb, table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, Props: table.Props{PropGeneration: int64(2)}})
		}
		if _, err := SetCount(ctx, f, 8); err != nil {
			t.Fatalf("shards set 8 after a cop's cycle wrote the map: %v; want it made", err)
		}
		if m, _ := Read(ctx, tb); m.Count != 8 || m.PrevCount != 4 || m.Open != 8 {
			t.Fatalf("map %+v; want a change from 4 to 8", m.Layout(0))
		}
	})
	t.Run("another set", func(t *testing.T) {
		ctx, tb, _ := steadyMap(t, 4)
		f := &openRowFaults{Table: tb}
		f.beforeMapWrite = func() {
			if _, err := SetCount(ctx, tb, 2); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := SetCount(ctx, f, 8); !errors.Is(err, ErrChanging) {
			t.Fatalf("shards set 8 after another set to 2: %v; want ErrChanging", err)
		}
		for _, s := range Names(8) {
			if openRow(t, ctx, tb, s, 8) {
				t.Fatalf("shard %s holds the open row of 8 that a failed shards set wrote", s)
			}
		}
	})
}

// A failed write of the current count's open rows again at a term's first
// cycle does not hold up the cycle (its claim of the map, the owners): the
// rows stood before the map named the count, and the next cycle writes
// them again (issue 38, a third review of the open rows).
func TestAFailedWriteOfOpenRowsAgainDoesNotHoldUpTheCycle(t *testing.T) {
	ctx, tb, b := steadyMap(t, 4)
	mustSubmit(t, ctx, tb, table.Op{Kind: table.Delete, PartitionKey: "02", RowKey: OpenRowKey(4)})
	f := &openRowFaults{Table: tb, insertDown: true}
	b.T = f
	if err := b.cycle(ctx, 2, true, b.Logger); err != nil {
		t.Fatalf("a new term's first cycle with the open rows unwritable: %v; want it to claim the map all the same", err)
	}
	if m, _ := Read(ctx, tb); m.Generation != 2 {
		t.Fatalf("map generation %d after the first cycle of term 2; want 2", m.Generation)
	}
	f.insertDown = false
	if err := b.cycle(ctx, 2, false, b.Logger); err != nil {
		t.Fatal(err)
	}
	if !openRow(t, ctx, tb, "02", 4) {
		t.Fatal("the next cycle did not write the open row of 4 again")
	}
}

// A `shards set` whose map write was made but answered with an error
// reads the map and answers success; when that read fails too it says
// so and leaves its rows: taken back, the map would name the count open
// with none (a fifth review of the open rows).
func TestAShardsSetWhoseAnswerWasLost(t *testing.T) {
	for _, lose := range []string{"the answer", "and the read"} {
		t.Run(lose, func(t *testing.T) {
			ctx, tb, _ := steadyMap(t, 4)
			f := &openRowFaults{Table: tb, loseMapAnswer: lose}
			_, err := SetCount(ctx, f, 8)
			if (err != nil) != (lose == "and the read") {
				t.Fatalf("shards set 8 whose answer was lost (%s): %v", lose, err)
			}
			if m, _ := Read(ctx, tb); m.Count != 8 || m.Open != 8 {
				t.Fatalf("map %+v; want 8 shards open", m.Layout(0))
			}
			allOpen(t, ctx, tb, 8, "while the map names 8 open")
		})
	}
}

// A `shards set` paused across two whole changes (4 to 2 and back), whose
// walks deleted the rows it wrote, writes them again before it names its
// count: the map must not name a count open without its rows (a fifth
// review of the open rows).
func TestAShardsSetPausedAcrossTwoChangesWritesItsRowsAgain(t *testing.T) {
	ctx, tb, _ := steadyMap(t, 4)
	f := &openRowFaults{Table: tb}
	f.beforeMapWrite = func() {
		for _, s := range Names(8) {
			mustSubmit(t, ctx, tb, table.Op{Kind: table.Delete, PartitionKey: s, RowKey: OpenRowKey(8)})
		}
		mustSubmit(t, ctx, tb, table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, Props: table.Props{PropGeneration: int64(3)}})
	}
	if _, err := SetCount(ctx, f, 8); err != nil {
		t.Fatal(err)
	}
	allOpen(t, ctx, tb, 8, "while the map names 8 open")
}

// A failed `shards set` takes back its rows a take placed by that count
// merged into meanwhile (the token stays through a merge), and leaves the
// rows another set of the same count wrote since (a fifth review).
func TestAFailedShardsSetTakesBackOnlyItsOwnRows(t *testing.T) {
	ctx, tb, _ := steadyMap(t, 4)
	f := &openRowFaults{Table: tb}
	f.beforeMapWrite = func() {
		mustSubmit(t, ctx, tb, table.Op{Kind: table.Merge, PartitionKey: "03", RowKey: OpenRowKey(8), Props: table.Props{}})
		mustSubmit(t, ctx, tb, table.Op{Kind: table.Upsert, PartitionKey: "05", RowKey: OpenRowKey(8), Props: table.Props{PropCount: int64(8), PropOpenSet: "another"}})
		if _, err := SetCount(ctx, tb, 2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := SetCount(ctx, f, 8); !errors.Is(err, ErrChanging) {
		t.Fatalf("shards set 8 after another set to 2: %v; want ErrChanging", err)
	}
	for _, s := range Names(8) {
		if got := openRow(t, ctx, tb, s, 8); got != (s == "05") {
			t.Errorf("open row of 8 in shard %s stands: %v, want %v", s, got, s == "05")
		}
	}
}

// Two operators set 8 at once after a change the first did not see: the
// second reads the map (2) and writes its rows, the first replaces them
// with its own, fails its map write (it read 4), and takes its rows back.
// The second's map write, conditional on the map it read, must not land
// then, or the map names 8 open with no row of it anywhere: the first
// fences the map before it takes its rows back (a sixth review of the
// open rows).
func TestAFailedShardsSetFencesAnotherBeforeTakingItsRowsBack(t *testing.T) {
	ctx, tb, _ := steadyMap(t, 4)
	var second Map
	f := &openRowFaults{Table: tb}
	f.beforeUpsert = func() {
		mustSubmit(t, ctx, tb, table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, Props: table.Props{PropCount: int64(2)}}) // a change to 2, ended
		var err error
		if second, err = Read(ctx, tb); err != nil {
			t.Fatal(err)
		}
		if err := OpenRows(ctx, tb, 8, OpenToken()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := SetCount(ctx, f, 8); !errors.Is(err, ErrChanging) {
		t.Fatalf("the first set of 8, its map read under 4: %v; want ErrChanging", err)
	}
	_, err := tb.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, IfMatch: second.etag,
		Props: table.Props{PropCount: int64(8), PropPrevCount: int64(2), PropSpan: int64(8), PropOpen: int64(8)}}})
	m, rerr := Read(ctx, tb)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if m.Open != 8 && !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("the second set's map write: %v; want it fenced", err)
	}
	for _, s := range Names(8) {
		if got := openRow(t, ctx, tb, s, 8); got != (m.Open == 8) {
			t.Fatalf("the map names %d open, and the row of 8 in shard %s stands: %v", m.Open, s, got)
		}
	}
}

// A failed `shards set` whose fence meets a write of the map since its
// last read (a cop's cycle, another set's fence) reads the map and fences
// again, and takes its rows back: left, they would stand for a count the
// map does not name until the next change (a seventh review).
func TestAFailedShardsSetFencesAgain(t *testing.T) {
	ctx, tb, _ := steadyMap(t, 4)
	f := &openRowFaults{Table: tb}
	f.beforeMapWrite = func() { // the set's map write
		mustSubmit(t, ctx, tb, table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, Props: table.Props{PropCount: int64(2)}}) // a change to 2, ended
		f.beforeMapWrite = func() {                                                                                                           // its fence
			mustSubmit(t, ctx, tb, table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, Props: table.Props{PropGeneration: int64(5)}})
		}
	}
	if _, err := SetCount(ctx, f, 8); !errors.Is(err, ErrChanging) {
		t.Fatalf("shards set 8 after a change to 2: %v; want ErrChanging", err)
	}
	for _, s := range Names(8) {
		if openRow(t, ctx, tb, s, 8) {
			t.Fatalf("shard %s holds the open row of 8 after a failed set whose first fence failed", s)
		}
	}
}
