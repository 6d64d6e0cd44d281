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
)

// growingLayout is a layout two Stores share, changed as a sharded
// fleet's shard map changes it: first the new count is read (pending),
// then written under.
type growingLayout struct {
	mu sync.Mutex
	l  Layout
}

func (g *growingLayout) get(context.Context) Layout {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l
}

func (g *growingLayout) set(l Layout) {
	g.mu.Lock()
	g.l = l
	g.mu.Unlock()
}

// growth: runs recorded under four partitions keep every guarantee after
// the count grows to eight — found by id, claimed once, finished, listed,
// cleaned — and new runs spread over all eight.
func growth(t *testing.T, e env, lay *growingLayout) {
	ctx := context.Background()
	due := e.now().Add(-time.Second).Truncate(time.Second)
	meta := Meta{Type: "email", Due: due}
	mq := meta
	mq.Queued = true
	var old, fresh, checked []Mark
	for i := range 40 {
		old = append(old, Mark{fmt.Sprintf("old-%02d", i), meta})
		fresh = append(fresh, Mark{fmt.Sprintf("new-%02d", i), meta})
	}
	for i := range 8 {
		checked = append(checked, Mark{fmt.Sprintf("checked-%02d", i), meta})
	}
	series := "nightly"
	occ := func(i int) string { return OccurrenceID(series, due.Add(-time.Duration(i)*time.Hour)) }

	// Under four partitions: marked, half claimed, a quarter finished,
	// and two occurrences of a series.
	if got := e.s.MarkQueued(ctx, old); strings.Contains(fmt.Sprint(got), "false") {
		t.Fatalf("marked %v", got)
	}
	for i, m := range old[:20] {
		if _, err := e.s.Claim(ctx, m.ID, "w1", 1, e.now().Add(time.Hour), mq); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := e.s.Finish(ctx, m.ID, Succeeded, nil, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 2 {
		om := Meta{Type: "report", Due: due.Add(-time.Duration(i) * time.Hour), Seq: int64(i + 1)}
		if _, err := e.s.Claim(ctx, occ(i), "w1", 1, e.now().Add(time.Hour), om); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Finish(ctx, occ(i), Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
	}

	// Runs claimed before any mark (a worker took an early-sent message
	// after checking its row, the mark of the send never landed: its
	// mover died), and succeeded.
	for _, m := range checked {
		if _, err := e.s.Claim(ctx, m.ID, "w1", 1, e.now().Add(time.Hour), meta); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Finish(ctx, m.ID, Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
	}

	// Eight partitions are read first (every process learns the count),
	// then written under.
	lay.set(Layout{Write: Buckets, Read: []int{Buckets, 8}})
	if r := e.mustState(t, "old-01", Running); r.Worker != "w1" {
		t.Fatalf("old-01 is %+v", r)
	}
	lay.set(Layout{Write: 8, Read: []int{Buckets, 8}})

	// Old runs: found, their duplicates refused, finished where they are.
	for i, m := range old {
		want := Queued
		switch {
		case i < 20 && i%2 == 0:
			want = Succeeded
		case i < 20:
			want = Running
		}
		e.mustState(t, m.ID, want)
	}
	for _, m := range old[20:] {
		if _, err := e.other.Claim(ctx, m.ID, "w2", 1, e.now().Add(time.Hour), mq); err != nil {
			t.Fatalf("claim of %s marked under four partitions: %v", m.ID, err)
		}
		if _, err := e.s.Claim(ctx, m.ID, "w3", 1, e.now().Add(time.Hour), mq); !errors.Is(err, ErrClaimedElsewhere) {
			t.Fatalf("a second claim of %s: %v, want ErrClaimedElsewhere", m.ID, err)
		}
		if err := e.other.Finish(ctx, m.ID, Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	moved := 0 // succeeded old runs whose partition differs under eight
	for i := 0; i < 20; i += 2 {
		m := old[i]
		if DefaultLayout.home(m.ID) != lay.get(ctx).home(m.ID) {
			moved++
		}
		for _, attempt := range []int{1, 2} { // an unmarked first delivery, a retry
			if _, err := e.other.Claim(ctx, m.ID, "w2", attempt, e.now().Add(time.Hour), meta); !errors.Is(err, ErrAlreadySucceeded) {
				t.Fatalf("a late delivery of %s (attempt %d): %v, want ErrAlreadySucceeded", m.ID, attempt, err)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no succeeded old run lives in a partition the eight do not write: pick other ids")
	}
	// The next owner of their shard finds their rows unmarked and sends
	// them again: the runs are not marked queued beside their records,
	// and their second messages do not run (issue 38, seed 5558).
	moved = 0
	for i, ok := range e.other.MarkQueued(ctx, checked) {
		m := checked[i]
		if DefaultLayout.home(m.ID) != lay.get(ctx).home(m.ID) {
			moved++
		}
		if ok {
			t.Errorf("%s, succeeded, was marked queued again", m.ID)
		}
		if _, err := e.other.Claim(ctx, m.ID, "w2", 1, e.now().Add(time.Hour), mq); !errors.Is(err, ErrAlreadySucceeded) {
			t.Errorf("the second message of %s: %v, want ErrAlreadySucceeded", m.ID, err)
		}
	}
	if moved == 0 {
		t.Fatal("no checked run lives in a partition the eight do not write: pick other ids")
	}
	if _, err := e.other.Cancel(ctx, "old-01"); err != nil {
		t.Fatalf("cancel of old-01: %v", err)
	}

	// New runs spread over eight partitions, claimed once.
	if got := e.s.MarkQueued(ctx, fresh); strings.Contains(fmt.Sprint(got), "false") {
		t.Fatalf("marked %v", got)
	}
	wide := map[string]bool{}
	for _, m := range fresh {
		wide[lay.l.home(m.ID)] = true
		if _, err := e.other.Claim(ctx, m.ID, "w2", 1, e.now().Add(time.Hour), mq); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Claim(ctx, m.ID, "w3", 1, e.now().Add(time.Hour), mq); !errors.Is(err, ErrClaimedElsewhere) {
			t.Fatalf("a second claim of %s: %v, want ErrClaimedElsewhere", m.ID, err)
		}
		if err := e.other.Finish(ctx, m.ID, Failed, errors.New("boom"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if len(wide) != 8 {
		t.Fatalf("40 new runs went to %d partitions, want 8", len(wide))
	}
	for i := 2; i < 4; i++ {
		om := Meta{Type: "report", Due: due.Add(-time.Duration(i) * time.Hour), Seq: int64(i + 1)}
		if _, err := e.s.Claim(ctx, occ(i), "w1", 1, e.now().Add(time.Hour), om); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Finish(ctx, occ(i), Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.verify(t); n != 92 {
		t.Fatalf("Verify counted %d runs, want 92", n)
	}

	// Listings read every partition; a series' both.
	all, err := e.s.Query(ctx, Query{Limit: 200})
	if err != nil || len(all.Runs) != 92 {
		t.Fatalf("listing: %d runs, %v; want 92", len(all.Runs), err)
	}
	failed, err := e.s.Query(ctx, Query{State: Failed})
	if err != nil || len(failed.Runs) != 40 {
		t.Fatalf("failed runs: %d, %v; want the 40 new ones", len(failed.Runs), err)
	}
	occs, err := e.s.Query(ctx, Query{Series: series})
	if err != nil || len(occs.Runs) != 4 {
		t.Fatalf("the series' runs: %d, %v; want 4", len(occs.Runs), err)
	}
	if rs, ok, err := e.s.Recent(ctx, series); err != nil || !ok || len(rs) == 0 {
		t.Fatalf("the series' summary: %v, %v, %v", rs, ok, err)
	}

	// Retention removes the runs of both counts.
	e.advance(DefaultRetentionFailed + time.Hour)
	st, err := e.s.Clean(ctx)
	// Nine old runs are still running (old-03, -05, … -19): kept.
	if err != nil || st.Expired != 83 {
		left, _ := e.s.Query(ctx, Query{Limit: 200})
		t.Fatalf("Clean: %+v, %v; %d runs left", st, err, len(left.Runs))
	}
}

func TestMemLayoutGrowth(t *testing.T) {
	e := memEnv(t)
	lay := &growingLayout{l: DefaultLayout}
	e.s.o.Layout, e.other.o.Layout = lay.get, lay.get
	growth(t, e, lay)
}

func TestStoreLayoutGrowth(t *testing.T) {
	t.Parallel()
	lay := &growingLayout{l: DefaultLayout}
	growth(t, azureEnv(t, Options{Clock: clock.NewFake(time.Now()), Layout: lay.get}), lay)
}

// hookTable calls onMiss once, when a read of a run row finds nothing
// for the second time (a run with two homes: after the read looked in
// both).
type hookTable struct {
	table.Table
	misses int
	onMiss func()
}

func (h *hookTable) Get(ctx context.Context, pk, rk string) (table.Entity, error) {
	e, err := h.Table.Get(ctx, pk, rk)
	if errors.Is(err, storage.ErrNotFound) && strings.HasPrefix(rk, prefixRun) && h.onMiss != nil {
		if h.misses++; h.misses == 2 {
			f := h.onMiss
			h.onMiss, h.misses = nil, 0
			f()
		}
	}
	return e, err
}

// A write after a miss goes where the miss was: between a process's read
// of a run (nothing there) and its write, another process still writing
// under four partitions records the run, and the count written under
// grows to eight; the write then meets that record instead of making a
// second one in the run's home under eight (issue 38, seed 5866: a
// client's confirmation of a task it sent read before a worker's claim
// and wrote after the count grew).
func TestMemWriteAfterAMissGoesWhereTheMissWas(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	m := NewMemory(clk)
	if err := m.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	lay := &growingLayout{l: Layout{Write: Buckets, Read: []int{Buckets, 8}}}
	wide := Layout{Write: 8, Read: []int{Buckets, 8}}
	hooked := &hookTable{Table: m.mt}
	s := &Store{t: hooked, o: m.o, group: newGrouper(hooked)}
	s.o.Layout = lay.get
	other := &Store{t: m.mt, o: m.o, group: newGrouper(m.mt)}
	other.o.Layout = lay.get
	due := t0.Add(-time.Second)
	// The other way round too: the other process already writes under
	// eight, and this one learns the count between its miss and its write.
	otherWide := &Store{t: m.mt, o: m.o, group: newGrouper(m.mt)}
	otherWide.o.Layout = func(context.Context) Layout { return wide }
	for n, o := range []*Store{other, otherWide} {
		id := ""
		for i := 0; id == ""; i++ {
			if c := fmt.Sprintf("straddle-%d-%d", n, i); DefaultLayout.home(bucketKey(c)) != wide.home(bucketKey(c)) {
				id = c
			}
		}
		lay.set(Layout{Write: Buckets, Read: []int{Buckets, 8}})
		hooked.onMiss = func() {
			if _, err := o.Claim(ctx, id, "w1", 1, t0.Add(time.Hour), Meta{Type: "email", Due: due}); err != nil {
				t.Errorf("the other process's claim: %v", err)
			}
			lay.set(wide)
		}
		s.Confirm(ctx, []Mark{{id, Meta{Type: "email", Due: due, Token: "0123456789ab"}}})
		if hooked.onMiss != nil {
			t.Fatal("the confirmation never missed")
		}
		if homes := recordHomes(ctx, m.mt, wide, id); len(homes) != 1 {
			t.Fatalf("run %s has records in %v, want one", id, homes)
		}
		if r, err := other.Get(ctx, id); err != nil || r.State != Running || r.Worker != "w1" {
			t.Fatalf("the run %s is %+v, %v; want running on w1", id, r, err)
		}
	}
}

// TestMemUnknownLayoutWritesNothing (issue 41): while the layout cannot be
// known (Refresh fails: the process never read it and cannot now), a
// claim, a queued mark, a write after a miss and a listing fail instead of
// writing or reading under the default, which on a fresh account of four
// queues is not where the fleet looks; and Prepare runs before the table
// is first made, its failure failing the operation until it succeeds.
func TestMemUnknownLayoutWritesNothing(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(clock.NewFake(t0))
	unknown := errors.New("the map cannot be read")
	var refreshErr, prepareErr error
	prepared := 0
	m.o.Refresh = func(context.Context) (bool, error) { return false, refreshErr }
	m.o.Prepare = func(context.Context) error { prepared++; return prepareErr }
	meta := Meta{Type: "email", Due: t0.Add(-time.Second)}

	prepareErr = unknown
	if _, err := m.Get(ctx, "a"); !errors.Is(err, unknown) {
		t.Fatalf("Get while Prepare fails: %v; want its error", err)
	}
	prepareErr = nil
	if _, err := m.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get once prepared: %v; want not found", err)
	}
	if _, err := m.Get(ctx, "b"); !errors.Is(err, ErrNotFound) || prepared != 2 {
		t.Fatalf("Get again: %v, Prepare called %d times; want not found, 2 (not again once the table is made)", err, prepared)
	}

	refreshErr = unknown
	before := m.Requests()
	if got := m.MarkQueued(ctx, []Mark{{"a", meta}}); got[0] {
		t.Fatal("a queued mark was written while the layout was unknown")
	}
	if _, err := m.Claim(ctx, "a", "w1", 1, t0.Add(time.Hour), meta); !errors.Is(err, unknown) {
		t.Fatalf("Claim while the layout is unknown: %v; want its error", err)
	}
	if _, err := m.Get(ctx, "a"); !errors.Is(err, unknown) {
		t.Fatalf("Get that missed while the layout is unknown: %v; want its error, not a miss", err)
	}
	if _, err := m.Query(ctx, Query{}); !errors.Is(err, unknown) {
		t.Fatalf("a listing while the layout is unknown: %v; want its error", err)
	}
	if _, err := m.CancelPending(ctx, "a", meta); !errors.Is(err, unknown) {
		t.Fatalf("a write after a miss while the layout is unknown: %v; want its error", err)
	}
	refreshErr = nil
	if _, err := m.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after %d requests while the layout was unknown, the run reads %v; want nothing written", m.Requests()-before, err)
	}
	if _, err := m.Claim(ctx, "a", "w1", 1, t0.Add(time.Hour), meta); err != nil {
		t.Fatalf("Claim once the layout is known: %v", err)
	}
}

// The first records of one run written at the same moment under the two
// counts of a growing layout meet (issue 38, sweep seed 68612, simulator
// row 129): each process read both of the run's homes and found nothing,
// then one recorded it under four partitions (a worker still unsharded
// claiming it) and the other under eight (the traffic cop confirming it
// sent). Both ways round, and with a pointer left whose record is gone,
// the run ends with one record, which both processes, a listing and
// Verify see.
func TestMemFirstRecordsUnderTwoCountsMeet(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(t0)
	m := NewMemory(clk)
	if err := m.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	narrow := Layout{Write: Buckets, Read: []int{Buckets, 8}}
	wide := Layout{Write: 8, Read: []int{Buckets, 8}}
	store := func(tb table.Table, l Layout) *Store {
		s := &Store{t: tb, o: m.o, group: newGrouper(tb)}
		s.o.Layout = func(context.Context) Layout { return l }
		return s
	}
	due := t0.Add(-time.Second)
	meta := Meta{Type: "email", Due: due}
	sent := Meta{Type: "email", Due: due, Token: "0123456789ab"}
	n := 0
	straddling := func() string {
		for {
			n++
			if c := fmt.Sprintf("straddle-%d", n); narrow.home(bucketKey(c)) != wide.home(bucketKey(c)) {
				return c
			}
		}
	}
	check := func(t *testing.T, id string, want string) {
		t.Helper()
		if at := recordHomes(ctx, m.mt, wide, id); len(at) != 1 || at[0] != want {
			t.Fatalf("run %s has records in %v, want one in %s", id, at, want)
		}
		for _, l := range []Layout{narrow, wide} {
			if r, err := store(m.mt, l).Get(ctx, id); err != nil || r.State != Running || r.Worker != "w1" {
				t.Fatalf("under %v the run %s is %+v, %v; want running on w1", l, id, r, err)
			}
		}
		got, err := store(m.mt, wide).ByIDPrefix(ctx, id, 10)
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Fatalf("the listing of %s finds %+v, %v; want the one record", id, got, err)
		}
		if problems, _, err := store(m.mt, wide).Verify(ctx); err != nil || len(problems) > 0 {
			t.Fatalf("Verify: %v, %v", problems, err)
		}
	}
	for _, c := range []struct {
		name             string
		first, meanwhile Layout
	}{
		// The confirmation under eight read both homes; the claim under
		// four is written before its insert.
		{"eight read, four written first", wide, narrow},
		// The other way round: the confirmation under four read both
		// homes; the claim under eight is written before its insert.
		{"four read, eight written first", narrow, wide},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := straddling()
			hooked := &hookTable{Table: m.mt}
			hooked.onMiss = func() {
				if _, err := store(m.mt, c.meanwhile).Claim(ctx, id, "w1", 1, t0.Add(time.Hour), meta); err != nil {
					t.Errorf("the other process's claim: %v", err)
				}
			}
			store(hooked, c.first).Confirm(ctx, []Mark{{id, sent}})
			if hooked.onMiss != nil {
				t.Fatal("the confirmation never missed")
			}
			check(t, id, c.meanwhile.home(bucketKey(id)))
		})
	}
	t.Run("a pointer whose record is gone", func(t *testing.T) {
		// The record a pointer was left for is gone (cleaned, or its
		// writer died before writing it): a first record under eight goes
		// where the pointer says, where one under four goes too.
		id := straddling()
		if err := store(m.mt, narrow).pointTo(ctx, narrow, id, narrow.home(bucketKey(id))); err != nil {
			t.Fatal(err)
		}
		if _, err := store(m.mt, wide).Claim(ctx, id, "w1", 1, t0.Add(time.Hour), meta); err != nil {
			t.Fatal(err)
		}
		check(t, id, narrow.home(bucketKey(id)))
		if _, err := store(m.mt, narrow).Claim(ctx, id, "w2", 1, t0.Add(time.Hour), meta); !errors.Is(err, ErrClaimedElsewhere) {
			t.Fatalf("a second claim under four: %v, want ErrClaimedElsewhere", err)
		}
	})
	t.Run("pointers of three counts", func(t *testing.T) {
		// Eight written under and sixteen read: a process still writing
		// under four left a pointer under eight and died before its
		// record; one under eight left a pointer under sixteen and met
		// the first. It follows both to the partition under four, where
		// every process then finds the record.
		four, eight := Layout{Write: 4, Read: []int{4, 8}}, Layout{Write: 8, Read: []int{4, 8, 16}}
		sixteen := Layout{Write: 16, Read: []int{4, 8, 16}}
		id := ""
		for id == "" {
			c := straddling()
			if h := sixteen.home(bucketKey(c)); h != four.home(bucketKey(c)) && h != eight.home(bucketKey(c)) {
				id = c
			}
		}
		h4 := four.home(bucketKey(id))
		if err := store(m.mt, four).pointTo(ctx, four, id, h4); err != nil {
			t.Fatal(err)
		}
		if err := store(m.mt, eight).pointTo(ctx, eight, id, eight.home(bucketKey(id))); err != nil {
			t.Fatal(err)
		}
		if _, err := store(m.mt, eight).Claim(ctx, id, "w1", 1, t0.Add(time.Hour), meta); err != nil {
			t.Fatalf("the claim under eight: %v", err)
		}
		if at := recordHomes(ctx, m.mt, sixteen, id); len(at) != 1 || at[0] != h4 {
			t.Fatalf("run %s has records in %v, want one in %s", id, at, h4)
		}
		for _, l := range []Layout{four, eight, sixteen} {
			if r, err := store(m.mt, l).Get(ctx, id); err != nil || r.Worker != "w1" {
				t.Fatalf("under %v the run %s is %+v, %v; want running on w1", l, id, r, err)
			}
		}
	})
	t.Run("pointers in a loop", func(t *testing.T) {
		// Counts 4, 8 and 12 (not multiples of each other): the id's home
		// under 12 is its home under 4. A process writing under 4 left a
		// pointer in its home under 8; one writing under 8, reading 12,
		// left one in its home under 12, which is the first's record's
		// home: each pointer points at the other's, and each insert met
		// a pointer. The next write takes the loop's first pointer's
		// place (a review of row 129's fix: both kept meeting them until
		// ErrContention, for good), and the other process finds it.
		four, eight := Layout{Write: 4, Read: []int{4, 8}}, Layout{Write: 8, Read: []int{4, 8, 12}}
		twelve := Layout{Write: 12, Read: []int{4, 8, 12}}
		id := ""
		for id == "" {
			c := straddling()
			if twelve.home(bucketKey(c)) == four.home(bucketKey(c)) && eight.home(bucketKey(c)) != four.home(bucketKey(c)) {
				id = c
			}
		}
		h4, h8 := four.home(bucketKey(id)), eight.home(bucketKey(id))
		if err := store(m.mt, four).pointTo(ctx, four, id, h4); err != nil {
			t.Fatal(err)
		}
		if err := store(m.mt, eight).pointTo(ctx, eight, id, h8); err != nil {
			t.Fatal(err)
		}
		if _, err := store(m.mt, four).Claim(ctx, id, "w1", 1, t0.Add(time.Hour), meta); err != nil {
			t.Fatalf("the claim under four: %v", err)
		}
		if _, err := store(m.mt, eight).Claim(ctx, id, "w2", 1, t0.Add(time.Hour), meta); !errors.Is(err, ErrClaimedElsewhere) {
			t.Fatalf("the claim under eight: %v, want ErrClaimedElsewhere", err)
		}
		if at := recordHomes(ctx, m.mt, twelve, id); len(at) != 1 || at[0] != min(h4, h8) {
			t.Fatalf("run %s has records in %v, want one in %s", id, at, min(h4, h8))
		}
		for _, l := range []Layout{four, eight, twelve} {
			if r, err := store(m.mt, l).Get(ctx, id); err != nil || r.Worker != "w1" {
				t.Fatalf("under %v the run %s is %+v, %v; want running on w1", l, id, r, err)
			}
		}
	})
	t.Run("listings leave pointers out", func(t *testing.T) {
		// A series' occurrence first recorded under four leaves a
		// pointer under eight, among the series' rows there: a listing of
		// the series, and one by id prefix, show the record once, and a
		// limit of one finds it.
		series := ""
		for i := 0; series == ""; i++ {
			if c := fmt.Sprintf("series-%d", i); narrow.home(c) != wide.home(c) {
				series = c
			}
		}
		occ := OccurrenceID(series, due)
		if _, err := store(m.mt, narrow).Claim(ctx, occ, "w1", 1, t0.Add(time.Hour), meta); err != nil {
			t.Fatal(err)
		}
		if rw, err := m.mt.Get(ctx, wide.home(series), runKey(occ)); err != nil || !decodeRun(rw).pointer() {
			t.Fatalf("no pointer under eight: %v", err)
		}
		p, err := store(m.mt, wide).Query(ctx, Query{Series: series, Limit: 1})
		if err != nil || len(p.Runs) != 1 || p.Runs[0].ID != occ {
			t.Fatalf("the series' listing: %+v, %v; want its one occurrence", p.Runs, err)
		}
		one := straddling()
		if _, err := store(m.mt, narrow).Claim(ctx, one, "w1", 1, t0.Add(time.Hour), meta); err != nil {
			t.Fatal(err)
		}
		got, err := store(m.mt, wide).ByIDPrefix(ctx, one, 1)
		if err != nil || len(got) != 1 || got[0].ID != one {
			t.Fatalf("the listing by prefix: %+v, %v; want the one task", got, err)
		}
	})
}

// recordHomes lists the partitions of l that hold a record of id (its
// pointers left out).
func recordHomes(ctx context.Context, mt *table.Memory, l Layout, id string) []string {
	var at []string
	for _, pk := range l.all() {
		if rw, err := mt.Get(ctx, pk, runKey(id)); err == nil && !decodeRun(rw).pointer() {
			at = append(at, pk)
		}
	}
	return at
}
