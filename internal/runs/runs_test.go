package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite/azuritetest"
	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

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
		{"queued is claimed", &Run{ID: "a", State: Queued}, nil, Running, 0},
		{"failed is claimed", &Run{ID: "a", State: Failed, Attempts: 1}, nil, Running, 0},
		{"succeeded is a duplicate", &Run{ID: "a", State: Succeeded}, ErrAlreadySucceeded, Succeeded, 1},
		{"cancelled is not run", &Run{ID: "a", State: Cancelled}, ErrCancelled, Cancelled, 0},
		{"running elsewhere unexpired", &Run{ID: "a", State: Running, Worker: "w2", ClaimUntil: now.Add(time.Second)}, ErrClaimedElsewhere, Running, 0},
		{"running elsewhere expired is taken over", &Run{ID: "a", State: Running, Worker: "w2", ClaimUntil: now}, nil, Running, 0},
		{"running here is reclaimed", &Run{ID: "a", State: Running, Worker: "w1", ClaimUntil: now.Add(time.Hour)}, nil, Running, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decideClaim(c.cur, "a", "w1", 2, until, meta, now)
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, c.want)
			}
			if got.State != c.wantState || got.Duplicates != c.wantDup || got.Deliveries != 1 {
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

func TestParseState(t *testing.T) {
	if s, err := ParseState(" Running "); err != nil || s != Running {
		t.Fatalf("ParseState = %v, %v", s, err)
	}
	_, err := ParseState("done")
	if err == nil || !strings.Contains(err.Error(), "succeeded") {
		t.Fatalf("want an error naming the accepted states, got %v", err)
	}
	for _, s := range []State{Succeeded, Dead, Cancelled} {
		if !s.Finished() {
			t.Fatalf("%s should be finished", s)
		}
	}
	if Failed.Finished() || Running.Finished() {
		t.Fatal("failed/running are not finished")
	}
}

func TestPartitionFor(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		pk := partitionFor(fmt.Sprintf("task-%d", i))
		if len(pk) != 2 || pk[0] != 'r' || !strings.ContainsRune("0123456789abcdef", rune(pk[1])) {
			t.Fatalf("bad partition %q", pk)
		}
		seen[pk] = true
	}
	if len(seen) < 12 {
		t.Fatalf("ids spread over only %d buckets", len(seen))
	}
	a, b := "same-id", "same-"+"id"
	if partitionFor(a) != partitionFor(b) {
		t.Fatal("not deterministic")
	}
}

// api is what both Store and Mem implement; the behaviour suite runs on both.
type api interface {
	Get(ctx context.Context, id string) (Run, error)
	MarkScheduled(ctx context.Context, id string, m Meta) error
	MarkQueued(ctx context.Context, id string, m Meta) error
	MarkRequeued(ctx context.Context, id string) error
	Claim(ctx context.Context, id, worker string, attempt int, leaseUntil time.Time, m Meta) (leasecrontype.Run, error)
	Extend(ctx context.Context, id, worker string, until time.Time) error
	Finish(ctx context.Context, id string, state State, err error, outputTail string) error
	Cancel(ctx context.Context, id string) (Run, error)
	List(ctx context.Context, f Filter) ([]Run, error)
	FlushCounters(ctx context.Context, c Counters) error
	SumCounters(ctx context.Context) (Counters, error)
}

var (
	_ api = (*Store)(nil)
	_ api = (*Mem)(nil)
)

func mustState(t *testing.T, s api, id string, want State) Run {
	t.Helper()
	r, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if r.State != want {
		t.Fatalf("run %s state = %s, want %s (%+v)", id, r.State, want, r)
	}
	return r
}

// behaviour exercises the lifecycle; now returns the store's current time.
func behaviour(t *testing.T, s api, now func() time.Time) {
	ctx := context.Background()
	id := "nightly@2030-01-02T03:04:05Z:it's" // '@', ':' and a quote
	due := now().Add(-time.Minute).UTC().Truncate(time.Second)

	if _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Cancel(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Cancel missing: %v, want ErrNotFound", err)
	}
	if err := s.MarkScheduled(ctx, id, Meta{Type: "report", Due: due}); err != nil {
		t.Fatal(err)
	}
	mustState(t, s, id, Scheduled)
	if err := s.MarkQueued(ctx, id, Meta{Type: "report", Due: due, Generation: 3}); err != nil {
		t.Fatal(err)
	}
	r := mustState(t, s, id, Queued)
	if r.Type != "report" || r.Generation != 3 || !r.Due.Equal(due) {
		t.Fatalf("queued row = %+v", r)
	}

	// First claim wins; a second worker is refused while the claim holds.
	c, err := s.Claim(ctx, id, "w1", 1, now().Add(time.Minute), Meta{})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if c.State != Running || c.Worker != "w1" || c.Attempts != 1 {
		t.Fatalf("claimed row = %+v", c)
	}
	c, err = s.Claim(ctx, id, "w2", 1, now().Add(time.Minute), Meta{})
	if !errors.Is(err, ErrClaimedElsewhere) || c.Worker != "w1" || c.ClaimUntil.Before(now()) {
		t.Fatalf("second Claim = %+v, %v; want ErrClaimedElsewhere with w1's claim", c, err)
	}
	if err := s.Extend(ctx, id, "w1", now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if r := mustState(t, s, id, Running); r.ClaimUntil.Before(now().Add(90 * time.Second)) {
		t.Fatalf("claim not extended: %v", r.ClaimUntil)
	}
	// A late MarkQueued never moves it backwards.
	if err := s.MarkQueued(ctx, id, Meta{Type: "report"}); err != nil {
		t.Fatal(err)
	}
	mustState(t, s, id, Running)

	if err := s.Finish(ctx, id, Failed, errors.New("boom"), "line 1\nline 2"); err != nil {
		t.Fatal(err)
	}
	r = mustState(t, s, id, Failed)
	if r.LastError != "boom" || r.OutputTail != "line 1\nline 2" || r.Finished.IsZero() {
		t.Fatalf("failed row = %+v", r)
	}
	// After a failure the claim is released: another worker may retry at once.
	if _, err := s.Claim(ctx, id, "w2", 2, now().Add(time.Minute), Meta{}); err != nil {
		t.Fatalf("retry claim: %v", err)
	}
	if err := s.Finish(ctx, id, Succeeded, nil, strings.Repeat("x", 10000)+"done"); err != nil {
		t.Fatal(err)
	}
	r = mustState(t, s, id, Succeeded)
	if r.LastError != "boom" || len(r.OutputTail) > MaxOutputTail || !strings.HasSuffix(r.OutputTail, "done") {
		t.Fatalf("succeeded row: last error %q, tail %d bytes", r.LastError, len(r.OutputTail))
	}
	// A redelivery is a duplicate and is counted.
	c, err = s.Claim(ctx, id, "w3", 1, now().Add(time.Minute), Meta{})
	if !errors.Is(err, ErrAlreadySucceeded) || c.Duplicates != 1 {
		t.Fatalf("duplicate Claim = %+v, %v", c, err)
	}
	if r := mustState(t, s, id, Succeeded); r.Duplicates != 1 || r.Deliveries != 4 {
		t.Fatalf("duplicates/deliveries = %d/%d, want 1/4", r.Duplicates, r.Deliveries)
	}
	if _, err := s.Cancel(ctx, id); !errors.Is(err, ErrAlreadyFinished) {
		t.Fatalf("Cancel finished: %v, want ErrAlreadyFinished", err)
	}

	// Cancel after move: the delivery is refused and a late Finish keeps it cancelled.
	id2 := "cancel-me"
	if err := s.MarkQueued(ctx, id2, Meta{Type: "report"}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Cancel(ctx, id2); err != nil || r.State != Cancelled {
		t.Fatalf("Cancel = %+v, %v", r, err)
	}
	if _, err := s.Claim(ctx, id2, "w1", 1, now().Add(time.Minute), Meta{}); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Claim cancelled: %v", err)
	}
	if err := s.Finish(ctx, id2, Succeeded, nil, "late"); err != nil {
		t.Fatal(err)
	}
	if r := mustState(t, s, id2, Cancelled); r.OutputTail != "late" {
		t.Fatalf("late finish not recorded: %+v", r)
	}

	// Dead, then requeued.
	id3 := "dies"
	if _, err := s.Claim(ctx, id3, "w1", 3, now().Add(time.Minute), Meta{Type: "flaky"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, id3, Dead, errors.New("gave up"), ""); err != nil {
		t.Fatal(err)
	}
	mustState(t, s, id3, Dead)
	if err := s.MarkRequeued(ctx, id3); err != nil {
		t.Fatal(err)
	}
	if r := mustState(t, s, id3, Queued); r.Attempts != 0 || r.Type != "flaky" {
		t.Fatalf("requeued row = %+v", r)
	}

	// List filters.
	all, err := s.List(ctx, Filter{})
	if err != nil || len(all) != 3 {
		t.Fatalf("List all = %d rows, %v", len(all), err)
	}
	got, err := s.List(ctx, Filter{States: []State{Cancelled, Succeeded}})
	if err != nil || len(got) != 2 {
		t.Fatalf("List states = %+v, %v", got, err)
	}
	got, err = s.List(ctx, Filter{Type: "flaky"})
	if err != nil || len(got) != 1 || got[0].ID != id3 {
		t.Fatalf("List type = %+v, %v", got, err)
	}
	got, err = s.List(ctx, Filter{Limit: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("List limit = %+v, %v", got, err)
	}

	// Counters.
	if err := s.FlushCounters(ctx, Counters{Instance: "host/1", Total: Counts{Handled: 3, Failed: 1},
		ByType: map[string]Counts{"a": {Handled: 2}, "b": {Handled: 1, Failed: 1}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.FlushCounters(ctx, Counters{Instance: "host-2", Total: Counts{Handled: 5, Dead: 2},
		ByType: map[string]Counts{"a": {Handled: 5, Dead: 2}}}); err != nil {
		t.Fatal(err)
	}
	// A later flush replaces the instance's row (counts are cumulative).
	if err := s.FlushCounters(ctx, Counters{Instance: "host-2", Total: Counts{Handled: 6, Dead: 2},
		ByType: map[string]Counts{"a": {Handled: 6, Dead: 2}}}); err != nil {
		t.Fatal(err)
	}
	sum, err := s.SumCounters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Instances != 2 || sum.Total.Handled != 9 || sum.Total.Dead != 2 || sum.Total.Failed != 1 ||
		sum.ByType["a"].Handled != 8 || sum.ByType["b"].Failed != 1 {
		t.Fatalf("SumCounters = %+v", sum)
	}
}

func TestMemBehaviour(t *testing.T) {
	clk := clock.NewFake(t0)
	behaviour(t, NewMem(clk), clk.Now)
}

func TestMemFailWith(t *testing.T) {
	m := NewMem(nil)
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

func TestInvalidIDs(t *testing.T) {
	m := NewMem(nil)
	for _, id := range []string{"", "a/b", "a#b", "a?b", "a\\b", "a\nb"} {
		if err := m.MarkQueued(context.Background(), id, Meta{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("MarkQueued(%q) = %v, want ErrInvalid", id, err)
		}
	}
}

func TestOptionsValidation(t *testing.T) {
	_, err := New(&storage.Clients{}, Options{Table: "bad-name"})
	if err == nil || !strings.Contains(err.Error(), "Options.Table") || !strings.Contains(err.Error(), "bad-name") {
		t.Fatalf("want an error naming Options.Table and the value, got %v", err)
	}
}

// --- Azurite -----------------------------------------------------------

func newStore(t *testing.T) *Store {
	t.Helper()
	srv := azuritetest.Shared(t)
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(sc, Options{Table: azuritetest.Name(t, "r")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStoreBehaviour(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	behaviour(t, s, time.Now)
}

// Two (here: eight) workers that receive the same message at once: exactly
// one claim wins, the others see ErrClaimedElsewhere.
func TestStoreConcurrentClaim(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		id := fmt.Sprintf("race-%d", round)
		if round == 1 {
			if err := s.MarkQueued(ctx, id, Meta{Type: "t"}); err != nil {
				t.Fatal(err)
			}
		}
		const n = 8
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, errs[i] = s.Claim(ctx, id, fmt.Sprintf("w%d", i), 1, time.Now().Add(time.Minute), Meta{Type: "t"})
			}(i)
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, ErrClaimedElsewhere):
			default:
				t.Fatalf("round %d worker %d: %v", round, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d claims won, want exactly 1 (%v)", round, won, errs)
		}
		r, err := s.Get(ctx, id)
		// Deliveries recorded by refusals are best effort under contention.
		if err != nil || r.Deliveries < 1 || r.Deliveries > n || r.State != Running {
			t.Fatalf("round %d row = %+v, %v; want 1..%d deliveries", round, r, err, n)
		}
	}
}

func TestStoreMissingRowsAndUpserts(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	// Writes that need no row never fail for a missing one.
	if err := s.Finish(ctx, "never-queued", Succeeded, nil, "out"); err != nil {
		t.Fatal(err)
	}
	mustState(t, s, "never-queued", Succeeded)
	if err := s.Extend(ctx, "ghost", "w", time.Now()); err != nil {
		t.Fatalf("Extend missing row: %v", err)
	}
	if _, err := s.Get(ctx, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Extend created a row: %v", err)
	}
	if err := s.MarkRequeued(ctx, "fresh"); err != nil {
		t.Fatal(err)
	}
	mustState(t, s, "fresh", Queued)
	// Scheduling an id again starts a new run.
	if err := s.MarkScheduled(ctx, "never-queued", Meta{Type: "again"}); err != nil {
		t.Fatal(err)
	}
	if r := mustState(t, s, "never-queued", Scheduled); r.OutputTail != "" || r.Type != "again" {
		t.Fatalf("rescheduled row kept old fields: %+v", r)
	}
}
