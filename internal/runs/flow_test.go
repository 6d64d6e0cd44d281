package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Members are counted once each, whatever the number of deliveries, and
// the batch is complete only once sealed and every member has ended.
func TestBatchCountsEachMemberOnce(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testBatchCounts(t, NewMemory(nil).Store) })
	t.Run("azurite", func(t *testing.T) { testBatchCounts(t, azureEnv(t, Options{}).s) })
}

func testBatchCounts(t *testing.T, s *Store) {
	ctx := context.Background()
	if _, err := s.CreateBatch(ctx, "b", 50, "b-done"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateBatch(ctx, "b", 50, ""); err == nil {
		t.Error("a second batch with the same id was written")
	}
	var members []string
	for i := range 50 {
		members = append(members, fmt.Sprint("m", i))
	}
	if err := s.AddBatchMembers(ctx, "b", members); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	completes := 0
	for i, m := range members {
		st := Succeeded
		switch {
		case i < 5:
			st = Dead
		case i < 8:
			st = Cancelled
		}
		for range 2 { // every end is reported twice, at once
			wg.Go(func() {
				b, err := s.EndMember(ctx, "b", m, st)
				if err != nil {
					t.Error(err)
					return
				}
				if b.Complete() {
					mu.Lock()
					completes++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	b, err := s.GetBatch(ctx, "b")
	want := leasecrontype.BatchCounts{Total: 50, Succeeded: 42, Dead: 5, Cancelled: 3}
	if err != nil || b.BatchCounts != want || b.Complete() || b.Callback != "b-done" {
		t.Fatalf("before sealing: %+v %v; want %+v, not complete", b, err, want)
	}
	if completes != 0 {
		t.Errorf("%d ends saw an unsealed batch complete", completes)
	}
	if err := s.SealBatch(ctx, "b", 50); err != nil {
		t.Fatal(err)
	}
	if b, err = s.EndMember(ctx, "b", "m9", Succeeded); err != nil || !b.Complete() || b.BatchCounts != want {
		t.Errorf("a repeated end after sealing: %+v %v", b, err)
	}
	ms, err := s.BatchMembers(ctx, "b")
	if err != nil || len(ms) != 50 || ms[0].ID != "m0" || ms[0].State != Dead {
		t.Errorf("members: %+v %v", ms, err)
	}
	if _, err := s.EndMember(ctx, "b", "m1", Running); !errors.Is(err, ErrInvalid) {
		t.Errorf("ending as running: %v", err)
	}
	// More members than a page: the sums are read past the member list.
	var many []string
	for i := range 1100 {
		many = append(many, fmt.Sprintf("n%04d", i))
	}
	if _, err := s.CreateBatch(ctx, "big", len(many), ""); err != nil {
		t.Fatal(err)
	}
	if err := s.AddBatchMembers(ctx, "big", many); err != nil {
		t.Fatal(err)
	}
	if b, err := s.EndMember(ctx, "big", "n1099", Succeeded); err != nil || b.Total != 1100 || b.Succeeded != 1 {
		t.Errorf("a batch of 1,100: %+v %v", b, err)
	}
	if ms, err := s.BatchMembers(ctx, "big"); err != nil || len(ms) != 1100 || ms[1099].State != Succeeded {
		t.Errorf("members of a batch of 1,100: %d %v", len(ms), err)
	}
	if _, err := s.GetBatch(ctx, "nope"); !errors.Is(err, ErrNoBatch) {
		t.Errorf("unknown batch: %v", err)
	}
}

// Dependencies are found from the parent, and watched parents listed.
func TestDependentsAndWatchedParents(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testDependents(t, NewMemory(nil).Store) })
	t.Run("azurite", func(t *testing.T) { testDependents(t, azureEnv(t, Options{}).s) })
}

func testDependents(t *testing.T, s *Store) {
	ctx := context.Background()
	deps := []Dependent{{Parent: "a", Child: "b"}, {Parent: "a", Child: "c"}, {Parent: "ab", Child: "d"}}
	if err := s.AddDependents(ctx, deps); err != nil {
		t.Fatal(err)
	}
	got, err := s.Dependents(ctx, "a")
	if err != nil || len(got) != 2 || got[0].Child != "b" || got[1].Child != "c" || got[0].Created.IsZero() {
		t.Fatalf("dependents of a: %+v %v", got, err)
	}
	if err := s.DropDependent(ctx, got[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.DropDependent(ctx, got[0]); err != nil {
		t.Errorf("dropping twice: %v", err)
	}
	if got, _ := s.Dependents(ctx, "a"); len(got) != 1 {
		t.Errorf("after the drop: %+v", got)
	}
	if err := s.WatchParents(ctx, []string{"x", "y"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Unwatch(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if w, err := s.Watched(ctx); err != nil || len(w) != 1 || w[0] != "y" {
		t.Errorf("watched: %v %v", w, err)
	}
}

// lostInsert is a table whose first lone insert of a row whose key
// starts with prefix commits and answers as the SDK's retry of it would:
// the row is in the way.
type lostInsert struct {
	table.Table
	prefix string
	lost   bool
}

func (l *lostInsert) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if !l.lost && len(ops) == 1 && strings.HasPrefix(ops[0].RowKey, l.prefix) && ops[0].Kind == table.Insert {
		l.lost = true
		if _, err := l.Table.Submit(ctx, ops); err != nil {
			return nil, err
		}
	}
	return l.Table.Submit(ctx, ops)
}

// A batch whose header insert committed with its answer lost takes the
// header for its own — it holds exactly what this call wrote — instead of
// answering that the batch exists, which refused the whole file and left
// its id taken by a header with no members (issue 38, the simulator's
// seed 73350). Another call's header of the same id still refuses.
func TestCreateBatchTakesItsOwnHeaderAfterALostAnswer(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC)) // finer than the table keeps
	m := NewMemory(clk)
	lh := &lostInsert{Table: m.mt, prefix: batchHeader}
	m.t = lh
	if _, err := m.CreateBatch(context.Background(), "b1", 3, "b1-done"); err != nil || !lh.lost {
		t.Fatalf("CreateBatch after a lost answer: %v (lost %v); want it created", err, lh.lost)
	}
	clk.Advance(time.Second)
	other, err := m.CreateBatch(context.Background(), "b1", 3, "b1-done")
	if !errors.Is(err, storage.ErrAlreadyExists) {
		t.Fatalf("another call of the same batch: %v; want it refused as existing", err)
	}
	// That other call, taking back what it wrote, leaves this call's
	// header alone: its own was never written.
	if err := m.DeleteBatch(context.Background(), "b1", other); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetBatch(context.Background(), "b1"); err != nil {
		t.Fatalf("the batch after another call's take-back: %v; want it there", err)
	}
}

// A bulk operation whose row's insert committed with its answer lost
// takes the row for its own, instead of failing to start and leaving an
// operation running for good with no task to run it (a review of issue
// 38's row 122).
func TestCreateBulkTakesItsOwnRowAfterALostAnswer(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.UTC))
	m := NewMemory(clk)
	li := &lostInsert{Table: m.mt, prefix: "bulk-"}
	m.t = li
	b := BulkRow{ID: "bulk-1", Kind: "cancel-pending", Filter: "type=plain", By: "me", Expect: 3}
	if err := m.CreateBulk(context.Background(), b); err != nil || !li.lost {
		t.Fatalf("CreateBulk after a lost answer: %v (lost %v); want it created", err, li.lost)
	}
	clk.Advance(time.Second)
	if err := m.CreateBulk(context.Background(), b); !errors.Is(err, storage.ErrAlreadyExists) {
		t.Fatalf("another call of the same id: %v; want it refused as existing", err)
	}
}
