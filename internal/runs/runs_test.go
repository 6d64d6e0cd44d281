package runs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv("RUNS_CLEANER_CHILD"); spec != "" {
		if err := cleanerChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "cleaner child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	azuritetest.Main(m)
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func TestDecideClaim(t *testing.T) {
	now := t0
	until := now.Add(time.Minute)
	meta := Meta{Type: "email", Due: now.Add(-time.Second), Generation: 7}
	cases := []struct {
		name      string
		cur       *Run
		want      error
		wantState State
		wantDup   int
	}{
		{"missing row is claimed", nil, nil, Running, 0},
		{"queued is claimed", &Run{Run: leasecrontype.Run{ID: "a", State: Queued}}, nil, Running, 0},
		{"failed is claimed", &Run{Run: leasecrontype.Run{ID: "a", State: Failed, Attempts: 1}}, nil, Running, 0},
		{"succeeded is a duplicate", &Run{Run: leasecrontype.Run{ID: "a", State: Succeeded, Due: meta.Due}}, ErrAlreadySucceeded, Succeeded, 1},
		{"an earlier run of the id is not", &Run{Run: leasecrontype.Run{ID: "a", State: Succeeded, Due: meta.Due.Add(-time.Hour)}}, nil, Running, 0},
		{"cancelled is not run", &Run{Run: leasecrontype.Run{ID: "a", State: Cancelled}}, ErrCancelled, Cancelled, 0},
		{"cancelled under this due is not run", &Run{Run: leasecrontype.Run{ID: "a", State: Cancelled, Due: meta.Due}}, ErrCancelled, Cancelled, 0},
		// The id scheduled again after its task was cancelled before it ran,
		// due earlier than that task was: another run (issue 38, found by
		// the simulator: such a task was acknowledged as cancelled and
		// never ran).
		{"a cancelled run of the id due later is not this one", &Run{Run: leasecrontype.Run{ID: "a", State: Cancelled, Due: meta.Due.Add(time.Hour)}}, nil, Running, 0},
		{"a later dead run of the id is not this one", &Run{Run: leasecrontype.Run{ID: "a", State: Dead, Due: meta.Due.Add(time.Hour)}}, nil, Running, 0},
		{"running elsewhere unexpired", &Run{Run: leasecrontype.Run{ID: "a", State: Running, Worker: "w2", ClaimUntil: now.Add(time.Second)}}, ErrClaimedElsewhere, Running, 0},
		{"running elsewhere expired is taken over", &Run{Run: leasecrontype.Run{ID: "a", State: Running, Worker: "w2", ClaimUntil: now}}, nil, Running, 0},
		{"running here is reclaimed", &Run{Run: leasecrontype.Run{ID: "a", State: Running, Worker: "w1", ClaimUntil: now.Add(time.Hour)}}, nil, Running, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decideClaim(c.cur, "a", "w1", 2, until, meta, now)
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if got.State != c.wantState || got.Duplicates != c.wantDup {
				t.Fatalf("row = %+v", got)
			}
			if got.Type != "email" || got.Generation != 7 || !got.Due.Equal(meta.Due) {
				t.Fatalf("meta not recorded: %+v", got)
			}
			if c.want == nil && (got.Worker != "w1" || got.Attempts != 2 || !got.ClaimUntil.Equal(until) || !got.Started.Equal(now)) {
				t.Fatalf("claim not recorded: %+v", got)
			}
		})
	}
}

// The id scheduled again (or replaced) while an earlier run of it ran or
// waited for its retry: the new scheduling's claim waits until that run
// has ended, and writes nothing (issue 38, found by the simulator, seed
// 23: the new message took the record over, the earlier run's retry was
// then acknowledged as stale, and the tasks waiting for its end waited
// for good). Once it has ended the new one is claimed as a run of its own.
func TestClaimWaitsForAnotherSchedulingsRun(t *testing.T) {
	now := t0
	meta := Meta{Type: "email", Due: now.Add(-time.Second)}
	earlier := meta.Due.Add(-time.Minute)
	for _, cur := range []Run{
		{Run: leasecrontype.Run{ID: "a", State: Failed, Attempts: 1, Due: earlier}},
		{Run: leasecrontype.Run{ID: "a", State: Snoozed, Attempts: 1, Due: earlier}}, // by its handler
		// Noted as waiting for its rate limit before any attempt, its
		// message sent early and confirmed (TestMemClaimWaitsForAConfirmedEarlierScheduling).
		{Run: leasecrontype.Run{ID: "a", State: Snoozed, Due: earlier, Updated: now}, Token: "tok"},
		{Run: leasecrontype.Run{ID: "a", State: Running, Worker: "w1", ClaimUntil: now.Add(time.Hour), Due: earlier}},
		{Run: leasecrontype.Run{ID: "a", State: Running, Worker: "w2", ClaimUntil: now.Add(-time.Hour), Due: earlier}},
	} {
		t.Run(string(cur.State)+" "+cur.Worker, func(t *testing.T) {
			got, err := decideClaim(&cur, "a", "w1", 1, now.Add(time.Minute), meta, now)
			if !errors.Is(err, ErrClaimedElsewhere) || got.State != cur.State || !got.Due.Equal(earlier) {
				t.Fatalf("claim = %+v, %v; want the earlier run left alone and ErrClaimedElsewhere", got, err)
			}
			ended := cur
			ended.State = Dead
			if got, err := decideClaim(&ended, "a", "w1", 1, now.Add(time.Minute), meta, now); err != nil || got.State != Running || got.Attempts != 1 || !got.Due.Equal(meta.Due) {
				t.Fatalf("after the earlier run died: claim = %+v, %v; want a run of its own", got, err)
			}
		})
	}
}

// A run handed back at a worker's shutdown whose record nobody touched
// for QueuedWait is taken over by another scheduling's claim as a run
// whose message is gone; the new run counts its own attempts, not that
// run's (a review of simulator row 99's last case).
func TestATakeOverCountsItsOwnAttempts(t *testing.T) {
	now := t0
	meta := Meta{Type: "email", Due: now.Add(-time.Second)}
	cur := Run{Run: leasecrontype.Run{ID: "a", State: Queued, Attempts: 2, Due: meta.Due.Add(-time.Hour), Updated: now.Add(-QueuedWait - time.Second)}}
	got, err := decideClaim(&cur, "a", "w1", 1, now.Add(time.Minute), meta, now)
	if err != nil || got.State != Running || got.Attempts != 1 || !got.Due.Equal(meta.Due) {
		t.Fatalf("claim = %s after %d attempts due %s, %v; want running, its first attempt, due %s", got.State, got.Attempts, got.Due, err, meta.Due)
	}
}

func TestParseState(t *testing.T) {
	if s, err := ParseState(" Running "); err != nil || s != Running {
		t.Fatalf("ParseState = %v, %v", s, err)
	}
	_, err := ParseState("done")
	if err == nil || !strings.Contains(err.Error(), "succeeded") {
		t.Fatalf("want an error naming the accepted states, got %v", err)
	}
}

func TestKeys(t *testing.T) {
	due := time.Date(2026, 11, 23, 2, 0, 0, 0, time.UTC)
	occ := OccurrenceID("nightly", due)
	if occ != "nightly@2026-11-23T02:00:00Z" {
		t.Fatalf("OccurrenceID = %q", occ)
	}
	if s, d, ok := occurrence(occ); !ok || s != "nightly" || !d.Equal(due) {
		t.Fatalf("occurrence(%q) = %q %v %v", occ, s, d, ok)
	}
	for _, id := range []string{"plain", "a@b", "x@2026-11-23T02:00:00+01:00", "x@2026-11-23T02:00:00.000Z", "a~b@2026-11-23T02:00:00Z", "@2026-11-23T02:00:00Z"} {
		t.Run(id, func(t *testing.T) {
			if _, _, ok := occurrence(id); ok {
				t.Errorf("%q taken for an occurrence", id)
			}
			if runKey(id) != prefixRun+id {
				t.Errorf("runKey(%q) = %q", id, runKey(id))
			}
		})
	}
	for _, l := range []Layout{DefaultLayout, {Write: 8, Read: []int{4, 8}}, {Write: 24, Read: []int{4, 8, 24}}} {
		if l.home(bucketKey(occ)) != l.home(bucketKey(OccurrenceID("nightly", due.Add(time.Hour)))) {
			t.Fatalf("%+v: occurrences of one series are in different partitions", l)
		}
		seen := map[string]bool{}
		for i := 0; i < 2000; i++ {
			id := fmt.Sprintf("task-%d", i)
			seen[l.home(id)] = true
			// Every partition an id may be in is among those a listing
			// reads, and the one it is written to is tried first.
			homes := l.homes(id)
			if homes[0] != l.home(id) || len(homes) > len(l.Read) {
				t.Fatalf("%+v: %s may be in %v", l, id, homes)
			}
			for _, pk := range homes {
				if !slices.Contains(l.all(), pk) {
					t.Fatalf("%+v: %s may be in %s, which a listing does not read (%v)", l, id, pk, l.all())
				}
			}
		}
		if len(seen) != l.Write || len(l.all()) != l.widest() {
			t.Fatalf("%+v: 2,000 ids fall into %d partitions, want %d", l, len(seen), l.Write)
		}
	}
	// Later due times sort first; ties by id.
	a, b := listKey("a", due), listKey("a", due.Add(time.Nanosecond*100))
	if !(b < a) || !(listKey("a", due) < listKey("b", due)) {
		t.Fatal("list keys do not sort newest first")
	}
	if k := stateKey(Queued, "a", due, "w"); !(k >= "x~queued~" && k < "x~queued~~") {
		t.Fatalf("state key %q outside its range", k)
	}
	if stateKey(Running, "a", due, "w1") == stateKey(Running, "a", due, "w2") {
		t.Fatal("a running state row does not name its worker")
	}
	if lo, hi := invertedAfter(due), inverted(due); !(hi < lo) {
		t.Fatalf("invertedAfter %s not after %s", lo, hi)
	}
}

func TestInvalidIDs(t *testing.T) {
	m := NewMemory(nil)
	for _, id := range []string{"", "a/b", "a#b", "a?b", "a\\b", "a\nb", "it's", strings.Repeat("x", MaxIDLen+1)} {
		t.Run(id, func(t *testing.T) {
			if _, err := m.Claim(context.Background(), id, "w", 1, time.Now(), Meta{}); !errors.Is(err, ErrInvalid) {
				t.Errorf("Claim(%.20q) = %v, want ErrInvalid", id, err)
			}
		})
	}
}

func TestOptionsValidation(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Table: "bad-name"}, "Options.Table"},
		{Options{Retention: time.Second}, "Options.Retention = 1s"},
		{Options{RetentionFailed: -time.Hour}, "Options.RetentionFailed = -1h0m0s"},
	} {
		t.Run(c.want, func(t *testing.T) {
			_, err := New(&storage.Clients{}, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New(%+v) = %v, want an error naming %q", c.o, err, c.want)
			}
		})
	}
}

func TestMemFailWith(t *testing.T) {
	m := NewMemory(nil)
	outage := errors.New("table down")
	m.FailWith(outage)
	if _, err := m.Claim(context.Background(), "a", "w", 1, time.Now(), Meta{}); !errors.Is(err, outage) {
		t.Fatalf("Claim during outage: %v", err)
	}
	m.FailWith(nil)
	if _, err := m.Claim(context.Background(), "a", "w", 1, time.Now(), Meta{}); err != nil {
		t.Fatal(err)
	}
}

// env is one Store under test with its request count and clock.
type env struct {
	s *Store
	// other is a second Store on the same table: another worker process.
	other    *Store
	requests func() int64
	now      func() time.Time
	advance  func(time.Duration) // nil on the real clock
}

func memEnv(t *testing.T) env {
	clk := clock.NewFake(t0)
	m := NewMemory(clk)
	other := &Store{t: m.mt, o: m.o}
	if err := m.ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return env{s: m.Store, other: other, requests: m.Requests, now: clk.Now, advance: clk.Advance}
}

// azureEnv is a Store over a fresh table of the shared Azurite, its
// requests counted by storage.Counter.
func azureEnv(t testing.TB, o Options) env {
	t.Helper()
	srv := azuritetest.Shared(t)
	cnt := storage.NewCounter()
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString(), Counter: cnt})
	if err != nil {
		t.Fatal(err)
	}
	o.Table = azuritetest.Name(t, "r")
	s, err := New(sc, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	other, err := New(sc, o)
	if err != nil {
		t.Fatal(err)
	}
	e := env{s: s, other: other, requests: cnt.Total, now: time.Now}
	if fc, ok := o.Clock.(*clock.Fake); ok {
		e.now, e.advance = fc.Now, fc.Advance
	}
	return e
}

// cost runs f and returns how many requests it made.
func (e env) cost(f func()) int64 {
	before := e.requests()
	f()
	return e.requests() - before
}

func (e env) mustState(t *testing.T, id string, want State) Run {
	t.Helper()
	r, err := e.s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if r.State != want {
		t.Fatalf("%s is %s, want %s (%+v)", id, r.State, want, r)
	}
	return r
}

func (e env) verify(t *testing.T) int {
	t.Helper()
	problems, n, err := e.s.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("rows disagree:\n%s", strings.Join(problems, "\n"))
	}
	return n
}

func (e env) wantCost(t *testing.T, what string, want int64, f func()) {
	t.Helper()
	if got := e.cost(f); got != want {
		t.Errorf("%s cost %d requests, want %d", what, got, want)
	}
}

// lifecycle drives runs through every path and checks each write's cost:
// the happy path is a batched mark, one claim write and one finish write.
func lifecycle(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	due := e.now().Add(-time.Second).Truncate(time.Second)
	meta := Meta{Type: "email", Due: due, Generation: 3}

	// Marked, claimed, failed, retried, succeeded.
	var marked []bool
	e.wantCost(t, "marking 3 runs queued", 3, func() { // one transaction per partition at most
		marked = s.MarkQueued(ctx, []Mark{{"a1", meta}, {"a2", meta}, {"a3", meta}})
	})
	if fmt.Sprint(marked) != "[true true true]" {
		t.Fatalf("marked = %v", marked)
	}
	mq := meta
	mq.Queued = true
	e.wantCost(t, "a claim of a marked run", 1, func() {
		if r, err := s.Claim(ctx, "a1", "w1", 1, e.now().Add(time.Minute), mq); err != nil || r.State != Running || r.Worker != "w1" {
			t.Fatalf("Claim = %+v, %v", r, err)
		}
	})
	e.mustState(t, "a1", Running)
	e.wantCost(t, "a finish", 1, func() {
		if err := s.Finish(ctx, "a1", Failed, errors.New("boom"), "line 1\nline 2"); err != nil {
			t.Fatal(err)
		}
	})
	r := e.mustState(t, "a1", Failed)
	if r.LastError != "boom" || r.OutputTail != "line 1\nline 2" || r.Finished.IsZero() || r.Type != "email" || r.Generation != 3 {
		t.Fatalf("failed record = %+v", r)
	}
	// A retry reads the record (its attempt is the record's count, which
	// a second message of the run does not know) and writes the claim.
	e.wantCost(t, "a retry's claim", 2, func() {
		if _, err := s.Claim(ctx, "a1", "w2", 2, e.now().Add(time.Minute), mq); err != nil {
			t.Fatal(err)
		}
	})
	e.wantCost(t, "a heartbeat", 1, func() {
		if err := s.Extend(ctx, "a1", "w2", e.now().Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
	})
	if err := s.Finish(ctx, "a1", Succeeded, nil, strings.Repeat("x", 10000)+"done"); err != nil {
		t.Fatal(err)
	}
	r = e.mustState(t, "a1", Succeeded)
	if r.LastError != "boom" || len(r.OutputTail) > MaxOutputTail || !strings.HasSuffix(r.OutputTail, "done") || r.Attempts != 2 || r.Worker != "w2" {
		t.Fatalf("succeeded record: %+v", r)
	}
	// A redelivery is a duplicate and is counted.
	c, err := s.Claim(ctx, "a1", "w3", 1, e.now().Add(time.Minute), mq)
	if !errors.Is(err, ErrAlreadySucceeded) || c.Duplicates != 1 {
		t.Fatalf("duplicate Claim = %+v, %v", c, err)
	}
	if r := e.mustState(t, "a1", Succeeded); r.Duplicates != 1 {
		t.Fatalf("duplicates = %d, want 1", r.Duplicates)
	}
	if _, err := s.Cancel(ctx, "a1"); !errors.Is(err, ErrAlreadyFinished) {
		t.Fatalf("Cancel finished: %v, want ErrAlreadyFinished", err)
	}

	// Two workers claim the same marked run: one wins.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.Claim(ctx, "a2", fmt.Sprintf("w%d", i), 1, e.now().Add(time.Minute), mq)
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, ErrClaimedElsewhere):
			t.Fatalf("concurrent claim: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of 4 concurrent claims won (%v)", won, errs)
	}

	// Cancel after the move: the delivery is refused; a late finish keeps
	// it cancelled.
	if r, err := s.Cancel(ctx, "a3"); err != nil || r.State != Cancelled {
		t.Fatalf("Cancel = %+v, %v", r, err)
	}
	if _, err := s.Claim(ctx, "a3", "w1", 1, e.now().Add(time.Minute), mq); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Claim cancelled: %v", err)
	}
	if _, err := s.Cancel(ctx, "nobody"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Cancel unknown: %v", err)
	}

	// A run without a mark (its message sent by something else): one
	// write too, and a cancel while it runs wins over its finish.
	e.wantCost(t, "a claim of an unmarked run", 1, func() {
		if _, err := s.Claim(ctx, "b1", "w1", 1, e.now().Add(time.Minute), meta); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := s.Cancel(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "b1", Succeeded, nil, "late"); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "b1", Cancelled); r.OutputTail != "late" {
		t.Fatalf("late finish not recorded: %+v", r)
	}

	// Dead, then requeued: a marked run again.
	if _, err := s.Claim(ctx, "c1", "w1", 3, e.now().Add(time.Minute), Meta{Type: "flaky", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "c1", Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	e.mustState(t, "c1", Dead)
	// A dead letter of an earlier task with the id (another due time):
	// the record is not its; refused.
	if _, _, err := s.MarkRequeued(ctx, "c1", Meta{Type: "flaky", Due: due.Add(-time.Hour)}, "m0-3", ""); !errors.Is(err, leasecrontype.ErrScheduledAgain) {
		t.Fatalf("MarkRequeued of an earlier task's dead letter: %v; want ErrScheduledAgain", err)
	}
	// A requeue's Meta carries its token (RequeueToken), as its message
	// does.
	rq := func(death string) Meta { return Meta{Type: "flaky", Due: due, Token: RequeueToken(death)} }
	if earlier, _, err := s.MarkRequeued(ctx, "c1", rq("m1-3"), "m1-3", ""); err != nil || earlier {
		t.Fatalf("MarkRequeued: earlier %v, %v", earlier, err)
	}
	if r := e.mustState(t, "c1", Queued); r.Attempts != 0 || r.Type != "flaky" {
		t.Fatalf("requeued record = %+v", r)
	}
	// The same death again (its requeue was cut short): nothing written;
	// the run is still queued as it left it.
	if earlier, queued, err := s.MarkRequeued(ctx, "c1", rq("m1-3"), "m1-3", ""); err != nil || !earlier || !queued {
		t.Fatalf("MarkRequeued of the same death: earlier %v, queued %v, %v; want true, true", earlier, queued, err)
	}
	// Messages of the run from before its death — unmarked (the mover
	// sent its row again while the run was dead, and that message came
	// late), marked by the mover's first send, or early-sent with a token
	// — do not take the requeue's run: they are the dead run's (issue 38,
	// seed 5527: one ran, died, and its dead letter, not the operation's,
	// was requeued by the same operation). A confirmation of the early
	// send does not take it either.
	for _, old := range []Meta{{Type: "flaky", Due: due}, {Type: "flaky", Due: due, Queued: true}, {Type: "flaky", Due: due, Token: "0123456789ab"}} {
		_, err := s.Claim(ctx, "c1", "w1", 1, e.now().Add(time.Minute), old)
		if !errors.Is(err, ErrDead) && !errors.Is(err, ErrUnconfirmed) {
			t.Fatalf("a message of the dead run (%+v): %v; want ErrDead or ErrUnconfirmed", old, err)
		}
	}
	// (The confirmation lets the mover retire the row; it writes nothing,
	// and the requeue's message still claims the run in one write below.)
	s.Confirm(ctx, []Mark{{"c1", Meta{Type: "flaky", Due: due, Token: "0123456789ab"}}})
	e.mustState(t, "c1", Queued)
	e.wantCost(t, "a claim of a requeued run", 1, func() {
		if _, err := s.Claim(ctx, "c1", "w1", 1, e.now().Add(time.Minute), Meta{Type: "flaky", Due: due, Token: RequeueToken("m1-3"), Queued: true}); err != nil {
			t.Fatal(err)
		}
	})
	// Its next attempt is still the requeue message's alone.
	if _, err := s.Claim(ctx, "c1", "w2", 2, e.now().Add(time.Minute), Meta{Type: "flaky", Due: due, Queued: true}); !errors.Is(err, ErrDead) {
		t.Fatalf("a message of the dead run while the requeued one runs: %v; want ErrDead", err)
	}
	// Claimed since: the death's dead letter is only left over.
	if earlier, queued, err := s.MarkRequeued(ctx, "c1", rq("m1-3"), "m1-3", ""); err != nil || !earlier || queued {
		t.Fatalf("MarkRequeued of the same death after a claim: earlier %v, queued %v, %v; want true, false", earlier, queued, err)
	}
	// Another dead letter of the same death (a duplicate delivery that died
	// too) while the run is live again: left over as well, nothing written
	// (issue 38: requeued, the task ran once more for each).
	if earlier, queued, err := s.MarkRequeued(ctx, "c1", rq("m1-3b"), "m1-3b", ""); err != nil || !earlier || queued {
		t.Fatalf("MarkRequeued of a second dead letter of a live run: earlier %v, queued %v, %v; want true, false", earlier, queued, err)
	}
	if r := e.mustState(t, "c1", Running); slices.Contains(r.Requeued, "m1-3b") {
		t.Fatalf("the second dead letter was recorded as requeued: %+v", r)
	}
	// Dead again. A second dead letter of the death requeued — the same
	// message set aside again at a later delivery, its first set-aside's
	// answer lost — is left over too, whether the run is dead again or
	// still queued: the death was requeued once (issue 38, seed 5527:
	// requeued, the task ran a third time for one operation). A death of
	// another message is requeued.
	if err := s.Finish(ctx, "c1", Dead, errors.New("gave up again"), ""); err != nil {
		t.Fatal(err)
	}
	if earlier, queued, err := s.MarkRequeued(ctx, "c1", rq("m1-4"), "m1-4", ""); err != nil || !earlier || queued {
		t.Fatalf("MarkRequeued of the same message's later set-aside: earlier %v, queued %v, %v; want true, false", earlier, queued, err)
	}
	e.mustState(t, "c1", Dead)
	if earlier, _, err := s.MarkRequeued(ctx, "c1", rq("m2-1"), "m2-1", ""); err != nil || earlier {
		t.Fatalf("MarkRequeued of another message's death: earlier %v, %v; want false", earlier, err)
	}
	if earlier, queued, err := s.MarkRequeued(ctx, "c1", rq("m2-2"), "m2-2", ""); err != nil || !earlier || queued {
		t.Fatalf("MarkRequeued of a second dead letter of the death just requeued: earlier %v, queued %v, %v; want true, false", earlier, queued, err)
	}
	e.mustState(t, "c1", Queued)
	if _, err := s.Claim(ctx, "c1", "w1", 1, e.now().Add(time.Minute), Meta{Type: "flaky", Due: due, Token: RequeueToken("m2-1"), Queued: true}); err != nil {
		t.Fatal(err)
	}

	// A claim taken over after it lapsed: the first worker's late failure
	// does not overwrite the second worker's claim (a late success does:
	// lateEnds).
	if _, err := s.Claim(ctx, "d1", "slow", 1, e.now().Add(-time.Second), meta); err != nil {
		t.Fatal(err)
	}
	if _, err := e.other.Claim(ctx, "d1", "fast", 1, e.now().Add(time.Minute), meta); err != nil {
		t.Fatalf("takeover of a lapsed claim: %v", err)
	}
	// Its heartbeat says so (a delivery checking before its handler
	// begins does not run it then: the simulator's seed 87398).
	if err := s.Extend(ctx, "d1", "slow", e.now().Add(time.Hour)); !errors.Is(err, leasecrontype.ErrClaimLost) {
		t.Fatalf("the first worker's heartbeat after the takeover: %v, want ErrClaimLost", err)
	}
	if r := e.mustState(t, "d1", Running); r.Worker != "fast" || r.ClaimUntil.After(e.now().Add(2*time.Minute)) {
		t.Fatalf("the first worker's heartbeat changed the second worker's claim: %+v", r)
	}
	if err := s.Finish(ctx, "d1", Failed, errors.New("late"), ""); err != nil {
		t.Fatal(err)
	}
	if r := e.mustState(t, "d1", Running); r.Worker != "fast" {
		t.Fatalf("after the first worker's late finish the run is %+v", r)
	}
	// An id scheduled again after its run finished starts a new record.
	later := Meta{Type: "email", Due: due.Add(time.Hour)}
	if m := s.MarkQueued(ctx, []Mark{{"a1", later}}); !m[0] {
		t.Fatal("a new run of a finished id was not marked")
	}
	if r := e.mustState(t, "a1", Queued); !r.Due.Equal(later.Due) || r.Duplicates != 0 || r.LastError != "" {
		t.Fatalf("new run of a1 kept the old one's fields: %+v", r)
	}
	// A repeated mark of a run that has moved on leaves it alone.
	if m := s.MarkQueued(ctx, []Mark{{"c1", Meta{Type: "flaky", Due: due}}}); m[0] {
		t.Fatal("a running run was marked queued again")
	}
	e.mustState(t, "c1", Running)

	// Missing records.
	if _, err := s.Get(ctx, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get ghost: %v", err)
	}
	if err := s.Extend(ctx, "ghost", "w", e.now()); err != nil {
		t.Fatalf("Extend missing row: %v", err)
	}
	if err := s.Finish(ctx, "never-claimed", Succeeded, nil, "out"); err != nil {
		t.Fatal(err)
	}
	e.mustState(t, "never-claimed", Succeeded)

	// Occurrences of a series.
	for i := 0; i < 3; i++ {
		id := OccurrenceID("nightly", due.Add(time.Duration(i)*time.Hour))
		if _, err := s.Claim(ctx, id, "w1", 1, e.now().Add(time.Minute), Meta{Type: "report", Due: due.Add(time.Duration(i) * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx, id, Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
		if r := e.mustState(t, id, Succeeded); r.Series != "nightly" {
			t.Fatalf("occurrence record %+v has no series", r)
		}
	}
	if n := e.verify(t); n != 10 {
		t.Fatalf("%d runs, want 10", n)
	}

	// Listings.
	ids := func(q Query) []string {
		t.Helper()
		p, err := s.Query(ctx, q)
		if err != nil {
			t.Fatalf("Query(%+v): %v", q, err)
		}
		var out []string
		for _, r := range p.Runs {
			out = append(out, r.ID+":"+string(r.State))
		}
		return out
	}
	check := func(q Query, want string) {
		t.Helper()
		if got := strings.Join(ids(q), " "); got != want {
			t.Errorf("Query(%+v) = %s\nwant %s", q, got, want)
		}
	}
	n0 := OccurrenceID("nightly", due)
	n1 := OccurrenceID("nightly", due.Add(time.Hour))
	n2 := OccurrenceID("nightly", due.Add(2*time.Hour))
	check(Query{Series: "nightly"}, n2+":succeeded "+n1+":succeeded "+n0+":succeeded")
	check(Query{State: Running}, "a2:running c1:running d1:running")
	check(Query{State: Cancelled}, "a3:cancelled b1:cancelled")
	check(Query{Type: "report", State: Succeeded, Limit: 2}, n2+":succeeded "+n1+":succeeded")
	check(Query{State: Succeeded, Since: due.Add(30 * time.Minute)}, n2+":succeeded "+n1+":succeeded")
	check(Query{State: Queued}, "a1:queued")
	// Paging through everything gives each run once, newest first.
	var all []string
	q := Query{Limit: 3}
	for pages := 0; ; pages++ {
		p, err := s.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Runs {
			all = append(all, r.ID)
		}
		if p.Continue == "" {
			break
		}
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		q.Continue = p.Continue
	}
	if got := strings.Join(all, " "); got != n2+" a1 "+n1+" a2 a3 b1 c1 d1 "+n0+" never-claimed" {
		t.Errorf("pages = %s", got)
	}
	for _, bad := range []Query{{State: Scheduled}, {Limit: MaxLimit + 1}, {State: "done"}, {Continue: "garbage"}, {Series: "a~b"}} {
		if _, err := s.Query(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Query(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := s.Query(ctx, Query{State: Failed, Continue: q.Continue}); !errors.Is(err, ErrBadContinue) {
		t.Errorf("a token of another query: %v", err)
	}
	// A since given relative to now ("2h" ago) is a later time on the next
	// page's request: the pages after the first keep the first's since
	// (an API review found the token refused).
	first, err := s.Query(ctx, Query{Series: "nightly", Since: due, Limit: 2})
	if err != nil || first.Continue == "" {
		t.Fatalf("since, page 1: %+v, %v", first, err)
	}
	next, err := s.Query(ctx, Query{Series: "nightly", Since: due.Add(30 * time.Minute), Limit: 2, Continue: first.Continue})
	if err != nil || len(next.Runs) != 1 || next.Runs[0].ID != n0 {
		t.Errorf("since, page 2 asked with a later since: %+v, %v; want %s, by the first page's since", next, err, n0)
	}
	if _, err := s.Query(ctx, Query{Series: "nightly", Limit: 2, Continue: first.Continue}); !errors.Is(err, ErrBadContinue) {
		t.Errorf("a since query's token without a since: %v; want ErrBadContinue", err)
	}
}

func TestMemLifecycle(t *testing.T) { lifecycle(t, memEnv(t)) }

func TestStoreLifecycle(t *testing.T) {
	t.Parallel()
	lifecycle(t, azureEnv(t, Options{}))
}

// Counters are kept per minute: Throughput returns every minute, SumCounters
// the last 24 hours, and Clean drops minutes older than CountersKept.
func counters(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	start := e.now().Truncate(time.Minute)
	flush := func(inst string, handled, failed int64, byType map[string]Counts) {
		t.Helper()
		if err := s.FlushCounters(ctx, Counters{Instance: inst, Total: Counts{Handled: handled, Failed: failed}, ByType: byType}); err != nil {
			t.Fatal(err)
		}
	}
	s.o.Version = "v1.0.0" // the writer's version goes on its rows
	flush("host/1", 3, 1, map[string]Counts{"a": {Handled: 2}, "b": {Handled: 1, Failed: 1}})
	s.o.Version = ""
	flush("host-2", 5, 0, map[string]Counts{"a": {Handled: 5}})
	e.advance(30 * time.Second)
	flush("host-2", 6, 0, map[string]Counts{"a": {Handled: 6}}) // cumulative: +1
	e.advance(time.Minute)
	// host/1 upgraded.
	s.o.Version = "v1.1.0"
	flush("host/1", 10, 1, map[string]Counts{"a": {Handled: 9}, "b": {Handled: 1, Failed: 1}}) // +7 in the next minute
	e.advance(time.Minute)
	flush("host/1", 10, 1, map[string]Counts{"a": {Handled: 9}, "b": {Handled: 1, Failed: 1}}) // nothing new
	s.o.Version = ""

	insts, err := s.ListCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, c := range insts {
		seen = append(seen, fmt.Sprintf("%s=%q:%d", c.Instance, c.Version, c.Total.Handled))
	}
	if want := `host-2="":6 host/1="v1.1.0":10`; strings.Join(seen, " ") != want {
		t.Fatalf("ListCounters = %v, want %s (each instance's latest version)", seen, want)
	}

	mins, err := s.Throughput(ctx, start.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mins {
		got = append(got, fmt.Sprintf("%s:%d/%d", m.Minute.Sub(start), m.Handled, m.Failed))
	}
	if want := "-1m0s:0/0 0s:9/1 1m0s:7/0 2m0s:0/0"; strings.Join(got, " ") != want {
		t.Fatalf("Throughput = %v, want %s", got, want)
	}
	sum, err := s.SumCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Instances != 2 || sum.Total.Handled != 16 || sum.Total.Failed != 1 || sum.ByType["a"].Handled != 15 || sum.ByType["b"].Failed != 1 {
		t.Fatalf("SumCounters = %+v", sum)
	}
	// A day later the stats window has moved on; two days later Clean
	// removes the rows.
	e.advance(25 * time.Hour)
	if sum, _ := s.SumCounters(ctx); sum.Total.Handled != 0 {
		t.Fatalf("SumCounters a day later = %+v", sum.Total)
	}
	if m, _ := s.Throughput(ctx, start); len(m) == 0 || m[0].Handled != 9 {
		t.Fatalf("a day later the first minute is %+v, want it kept", m[:1])
	}
	e.advance(CountersKept)
	st, err := s.Clean(ctx)
	if err != nil || st.Counters != 3 {
		t.Fatalf("Clean = %+v, %v; want the 3 counters rows removed", st, err)
	}
}

func TestMemCounters(t *testing.T) { counters(t, memEnv(t)) }

func TestStoreCounters(t *testing.T) {
	t.Parallel()
	counters(t, azureEnv(t, Options{Clock: clock.NewFake(time.Now().Truncate(time.Minute))}))
}

// A run cancelled while its last attempt ran, which then failed and left
// a dead letter, is not brought back by a requeue (found by the
// simulator, seed 4: a bulk requeue ran a cancelled task again).
func TestRequeueOfACancelledRun(t *testing.T) {
	e := memEnv(t)
	s := e.s
	ctx := context.Background()
	due := t0.Add(-time.Minute)
	if _, err := s.Claim(ctx, "c2", "w1", 1, e.now().Add(time.Minute), Meta{Type: "flaky", Due: due}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "c2", Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.MarkRequeued(ctx, "c2", Meta{Type: "flaky", Due: due}, "m2-1", ""); !errors.Is(err, leasecrontype.ErrRunCancelled) {
		t.Fatalf("MarkRequeued of a cancelled run: %v; want ErrRunCancelled", err)
	}
	e.mustState(t, "c2", Cancelled)
}

func TestMemLateEndOfALapsedClaim(t *testing.T) { lateEnds(t, memEnv(t)) }

func TestStoreLateEndOfALapsedClaim(t *testing.T) {
	t.Parallel()
	lateEnds(t, azureEnv(t, Options{}))
}

// lateEnds: a worker whose claim lapsed while its handler ran ends its
// attempt after another worker took the run over and ended it. The first
// end stands (issue 38, seed 11184: a late "failed" over a death left the
// run failed for good, its message set aside as dead), and so does a
// requeue of that death; FinishClaimed reports the end not recorded and
// the record found, so the worker sets no dead letter aside. The worker's
// own end, met again (its answer lost), counts as recorded.
func lateEnds(t *testing.T, e env) {
	ctx := context.Background()
	s := e.s
	meta := Meta{Type: "email", Due: e.now().Add(-time.Second).Truncate(time.Second)}
	lateEnd := func(id string, other, late State, between func()) (Run, Run, bool) {
		t.Helper()
		if _, err := s.Claim(ctx, id, "slow", 2, e.now().Add(-time.Second), meta); err != nil {
			t.Fatal(err)
		}
		if _, err := e.other.Claim(ctx, id, "fast", 2, e.now().Add(time.Minute), meta); err != nil {
			t.Fatalf("takeover of a lapsed claim: %v", err)
		}
		if err := e.other.Finish(ctx, id, other, errors.New("first end"), ""); err != nil {
			t.Fatal(err)
		}
		if between != nil {
			between()
		}
		found, recorded, err := s.FinishClaimed(ctx, id, late, errors.New("late end"), "")
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r, Run{Run: found}, recorded
	}
	if r, found, recorded := lateEnd("failed-over-dead", Dead, Failed, nil); r.State != Dead || r.Worker != "fast" || recorded || found.State != Dead {
		t.Errorf("a late failure over a death: the run is %s by %s; recorded %v, found %s", r.State, r.Worker, recorded, found.State)
	}
	if r, _, recorded := lateEnd("dead-over-succeeded", Succeeded, Dead, nil); r.State != Succeeded || recorded {
		t.Errorf("a late death over a success: the run is %s; recorded %v", r.State, recorded)
	}
	requeue := func() {
		if _, _, err := s.MarkRequeued(ctx, "dead-over-requeued", Meta{Type: meta.Type, Due: meta.Due, Token: RequeueToken("m1")}, "m1", ""); err != nil {
			t.Fatal(err)
		}
	}
	if r, found, recorded := lateEnd("dead-over-requeued", Dead, Dead, requeue); r.State != Queued || r.Token != RequeueToken("m1") || recorded || found.State != Queued {
		t.Errorf("a late death over a requeued run: the run is %s with token %q; recorded %v, found %s", r.State, r.Token, recorded, found.State)
	}

	// A success whose claim lapsed and whose run another worker now holds
	// is recorded over that claim: the task's work was done, and left
	// unrecorded, the other attempt was killed and the crash guard set the
	// task aside as dead, cancelling its --after child (issue 38, sweep
	// seed 68031). That attempt's end then finds the run succeeded. A
	// failure over a live claim stays unrecorded, the other attempt live.
	for _, late := range []State{Succeeded, Failed} {
		id := "over-a-live-claim-" + string(late)
		if _, err := s.Claim(ctx, id, "slow", 1, e.now().Add(-time.Second), meta); err != nil {
			t.Fatal(err)
		}
		if _, err := e.other.Claim(ctx, id, "fast", 1, e.now().Add(time.Minute), meta); err != nil {
			t.Fatalf("takeover of a lapsed claim: %v", err)
		}
		_, recorded, err := s.FinishClaimed(ctx, id, late, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want, by := Running, "fast"
		if late == Succeeded {
			want, by = Succeeded, "slow"
		}
		if recorded != (late == Succeeded) || r.State != want || r.Worker != by {
			t.Errorf("%s over another worker's live claim: recorded %v, the run %s by %s; want %s by %s", late, recorded, r.State, r.Worker, want, by)
		}
		if late == Succeeded {
			found, recorded, err := e.other.FinishClaimed(ctx, id, Failed, errors.New("killed"), "")
			if err != nil || recorded || found.State != Succeeded {
				t.Errorf("the other attempt's end after the success: recorded %v, found %s, %v; want the success standing", recorded, found.State, err)
			}
		}
	}

	// Its own end met again — its first write committed, the answer lost —
	// is recorded; a death written without a claim over its lapsed claim
	// (FinishOwn keeps the claim's worker, attempt and start) is not.
	if _, err := s.Claim(ctx, "own", "w1", 1, e.now().Add(time.Minute), meta); err != nil {
		t.Fatal(err)
	}
	real, grouped := s.t, s.group
	s.t = &loseAnswer{Table: real}
	s.group = newGrouper(s.t)
	if _, _, err := s.FinishClaimed(ctx, "own", Dead, errors.New("gave up"), ""); err == nil {
		t.Fatal("the end whose answer was lost reported no error")
	}
	s.t, s.group = real, grouped
	if e.advance != nil {
		e.advance(time.Second)
	}
	if _, recorded, err := s.FinishClaimed(ctx, "own", Dead, errors.New("gave up"), ""); err != nil || !recorded {
		t.Errorf("its own end met again: recorded %v, %v; want recorded", recorded, err)
	}
	// Within one end: its transaction committed, and the SDK's retry of
	// it, the answer lost, met the running row gone (make sim's seeds 11
	// and 15 on a first version: the worker took its own success for
	// another delivery's, and its batch never heard of it).
	if _, err := s.Claim(ctx, "own-retried", "w1", 1, e.now().Add(time.Minute), meta); err != nil {
		t.Fatal(err)
	}
	s.t = &loseAnswer{Table: real, err: storage.ErrPreconditionFailed}
	s.group = newGrouper(s.t)
	_, recorded, err := s.FinishClaimed(ctx, "own-retried", Succeeded, nil, "")
	s.t, s.group = real, grouped
	if err != nil || !recorded {
		t.Errorf("its own end, its answer lost inside the call: recorded %v, %v; want recorded", recorded, err)
	}
	if _, err := s.Claim(ctx, "owned", "w1", 1, e.now().Add(-time.Second), meta); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.other.FinishOwn(ctx, "owned", meta, Dead, errors.New("set aside"), ""); err != nil || !ok {
		t.Fatalf("FinishOwn over a lapsed claim: %v, %v", ok, err)
	}
	if e.advance != nil {
		e.advance(time.Second)
	}
	if _, recorded, err := s.FinishClaimed(ctx, "owned", Dead, errors.New("late"), ""); err != nil || recorded {
		t.Errorf("a late end over a death written without a claim: recorded %v, %v; want not recorded", recorded, err)
	}
	v, _ := s.claims.Load("own")
	if v != nil {
		t.Error("the claim is still kept after its end was recorded")
	}
	c := Run{Run: leasecrontype.Run{Worker: "w1", Attempts: 1, Started: e.now()}}
	cur := c
	cur.Started = stored(c.Started)
	c.Started = stored(c.Started).Add(50 * time.Nanosecond)
	if !sameClaim(&cur, &c) {
		t.Error("a start differing below the table's 100 ns tick is not the same claim")
	}
}

// loseAnswer is a table whose every transaction commits and then answers
// an error: err, or a connection reset (nil err) — as a reset after the
// commit does, or the SDK's retry of a committed transaction meeting what
// it changed.
type loseAnswer struct {
	table.Table
	err error
}

func (l *loseAnswer) Submit(ctx context.Context, ops []table.Op) ([]string, error) {
	if _, err := l.Table.Submit(ctx, ops); err != nil {
		return nil, err
	}
	if l.err != nil {
		return nil, l.err
	}
	return nil, errors.New("read tcp: connection reset by peer")
}

// A requeue whose mark committed though its answer was lost (the dead
// letter stays, no message sent), then a cancel of the queued run, then
// the dead letter requeued again: the run was cancelled, so the requeue
// is refused, not taken for one "requeued before" and answered success
// with nothing brought back (simulator seed 87976).
func TestRequeueAgainAfterACancelOfAHalfDoneRequeue(t *testing.T) {
	e := memEnv(t)
	s := e.s
	ctx := context.Background()
	due := t0.Add(-time.Minute)
	if _, err := s.Claim(ctx, "c3", "w1", 1, e.now().Add(time.Minute), Meta{Type: "plain", Due: due}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, "c3", Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	rq := Meta{Type: "plain", Due: due, Token: RequeueToken("m3-1")}
	if _, _, err := s.MarkRequeued(ctx, "c3", rq, "m3-1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, "c3"); err != nil {
		t.Fatal(err)
	}
	earlier, queued, err := s.MarkRequeued(ctx, "c3", rq, "m3-1", "")
	if !errors.Is(err, leasecrontype.ErrRunCancelled) {
		t.Fatalf("MarkRequeued of the same death after a cancel: earlier %v, queued %v, %v; want ErrRunCancelled", earlier, queued, err)
	}
	e.mustState(t, "c3", Cancelled)
}

// A claim whose run was cancelled while it ran is no longer the worker's:
// its heartbeat says so.
func TestExtendOfACancelledRunSaysTheClaimIsLost(t *testing.T) {
	e := memEnv(t)
	ctx := context.Background()
	if _, err := e.s.Claim(ctx, "x1", "w1", 1, e.now().Add(time.Minute), Meta{Type: "plain", Due: t0}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Extend(ctx, "x1", "w1", e.now().Add(2*time.Minute)); err != nil {
		t.Fatalf("heartbeat of a live claim: %v", err)
	}
	if _, err := e.other.Cancel(ctx, "x1"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Extend(ctx, "x1", "w1", e.now().Add(3*time.Minute)); !errors.Is(err, leasecrontype.ErrClaimLost) {
		t.Fatalf("heartbeat after a cancel: %v, want ErrClaimLost", err)
	}
}
