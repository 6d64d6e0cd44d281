package leasecron

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/queue"
)

// beforeWrite is a transport that, armed, runs before once just before
// the first write whose URL and body (unescaped) match accepts.
type beforeWrite struct {
	next   policy.Transporter
	match  func(text string) bool
	armed  atomic.Bool
	before func()
}

// contains matches a write whose text holds every one of parts.
func contains(parts ...string) func(string) bool {
	return func(text string) bool {
		for _, p := range parts {
			if !strings.Contains(text, p) {
				return false
			}
		}
		return true
	}
}

func (b *beforeWrite) Do(req *http.Request) (*http.Response, error) {
	if b.armed.Load() {
		ok, err := writeMatches(req, b.match)
		if err != nil {
			return nil, err
		}
		if ok && b.armed.CompareAndSwap(true, false) {
			b.before()
		}
	}
	return b.next.Do(req)
}

// writeMatches reports whether req is a write whose text (writeText)
// match accepts.
func writeMatches(req *http.Request, match func(text string) bool) (bool, error) {
	if req.Method == http.MethodGet {
		return false, nil
	}
	text, err := writeText(req)
	if err != nil {
		return false, err
	}
	return match(text), nil
}

// writeText is a write's URL and body, unescaped, for a matcher; the body
// is put back to be sent.
func writeText(req *http.Request) (string, error) {
	text := req.URL.String()
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return "", err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		text += string(body)
	}
	if u, err := url.QueryUnescape(text); err == nil {
		text = u
	}
	return text, nil
}

// A child that saw its parent pending and already waited for, and wrote
// its dependency only after a cancel of the parent had run whole, hears
// of the cancel: the mark it saw is read again (a review of issue 38's
// fixes: the child trusted it, watched nothing, and waited for good).
func TestChildWhoseParentWasCancelledBeforeItsDependencyHearsOfIt(t *testing.T) {
	ctx := context.Background()
	var tr *beforeWrite
	c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
		tr = &beforeWrite{next: next, match: contains("parent~late")}
		return tr
	})
	due := time.Now().Add(time.Hour)
	for _, it := range []Item{
		{ID: "parent", Type: "t", Due: due},
		{ID: "first", Type: "t", Due: due, After: []string{"parent"}, AfterAny: true},
	} {
		if _, err := c.Schedule(ctx, it, nil); err != nil {
			t.Fatal(err)
		}
	}
	tr.before = func() {
		if _, err := c.Cancel(ctx, "parent"); err != nil {
			t.Errorf("cancel: %v", err)
		}
	}
	tr.armed.Store(true)
	if _, err := c.Schedule(ctx, Item{ID: "late", Type: "t", Due: due, After: []string{"parent"}, AfterAny: true}, nil); err != nil {
		t.Fatal(err)
	}
	if tr.armed.Load() {
		t.Fatal("the child's dependency was not written")
	}
	it, err := c.sched.Get(ctx, "late")
	if err != nil || it.Waiting {
		t.Fatalf("the late child: waiting %v, %v; want it released", it.Waiting, err)
	}
}

// lateChildHearsOfTheCancel schedules tasks (among them "parent" and
// "first", waiting for it with after-any), then runs cancel, which
// removes parent's row; just before the removal another child, "late",
// begins waiting for parent. Both children must then be released.
func lateChildHearsOfTheCancel(t *testing.T, tasks []Item, cancel func(ctx context.Context, c *Client) error) {
	t.Helper()
	ctx := context.Background()
	var tr *beforeWrite
	c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
		tr = &beforeWrite{next: next, match: contains("DELETE ", "_parent')")}
		return tr
	})
	for _, it := range tasks {
		if _, err := c.Schedule(ctx, it, nil); err != nil {
			t.Fatal(err)
		}
	}
	due := tasks[0].Due
	var scheduled error
	tr.before = func() {
		_, scheduled = c.Schedule(ctx, Item{ID: "late", Type: "t", Due: due, After: []string{"parent"}, AfterAny: true}, nil)
	}
	tr.armed.Store(true)
	if err := cancel(ctx, c); err != nil {
		t.Fatal(err)
	}
	if tr.armed.Load() {
		t.Fatal("the parent's row was not removed")
	}
	if scheduled != nil {
		t.Fatalf("the child scheduled during the cancel: %v", scheduled)
	}
	for _, id := range []string{"first", "late"} {
		it, err := c.sched.Get(ctx, id)
		if err != nil || it.Waiting {
			t.Errorf("%s after its parent was cancelled: waiting %v, %v; want it released (it waits for any end)", id, it.Waiting, err)
		}
	}
}

// A child scheduled while its parent is being cancelled — after the cancel
// has told the parent's waiting children, before it removes the parent's
// row — hears of the cancel too: the cancel tells the waiting children
// again once the row is gone (issue 38, seed 1330: a bulk cancel removed
// the row a second after telling the children, the child scheduled in
// between had seen the row pending and marked as waited for already, and
// it waited for good).
func TestChildScheduledWhileItsParentIsCancelledHearsOfIt(t *testing.T) {
	due := time.Now().Add(time.Hour)
	lateChildHearsOfTheCancel(t, []Item{
		{ID: "parent", Type: "t", Due: due},
		{ID: "first", Type: "t", Due: due, After: []string{"parent"}, AfterAny: true}, // marks parent as waited for
	}, func(ctx context.Context, c *Client) error {
		_, err := c.Cancel(ctx, "parent")
		return err
	})
}

// The same for a parent cancelled because its own parent died (a
// review's find: cancelDependent told the waiting tasks, then removed the
// row, and a task that began waiting in between was never told).
func TestChildScheduledWhileItsParentIsDoomedHearsOfIt(t *testing.T) {
	due := time.Now().Add(time.Hour)
	lateChildHearsOfTheCancel(t, []Item{
		{ID: "grand", Type: "t", Due: due},
		{ID: "parent", Type: "t", Due: due, After: []string{"grand"}},
		{ID: "first", Type: "t", Due: due, After: []string{"parent"}, AfterAny: true},
	}, func(ctx context.Context, c *Client) error {
		return c.parentEnded(ctx, "grand", RunDead)
	})
}

// A client that has never read the shard map, because reading it fails,
// refuses to place or look up tasks instead of guessing its configured
// count: a client still on one shard in a sharded fleet would put the task
// where no other process looks (issue 38, a review of seed 1356's fix).
// So does one that found no map when it last read it and cannot read it
// again: a map may have been written since.
func TestUnreadShardMapIsAnError(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	ms := memstore.New(memstore.Options{})
	tr := &failWhile{next: ms.Transport(), match: "shards"}
	c, err := NewClient(ClientOptions{Storage: Storage{ConnectionString: ms.ConnectionString(), Transport: tr}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	due := clk.Now().Add(time.Hour)
	tr.armed.Store(true)
	if _, err := c.Schedule(ctx, Item{ID: "x", Type: "t", Due: due}, nil); err == nil || !strings.Contains(err.Error(), "shard map") {
		t.Fatalf("a schedule with the map unread: %v; want an error about the shard map", err)
	}
	if _, err := c.Status(ctx, "x"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("a lookup with the map unread: %v; want an error, not an answer", err)
	}
	if tr.failed.Load() == 0 {
		t.Fatal("the map was not read")
	}
	tr.armed.Store(false)
	if _, err := c.Schedule(ctx, Item{ID: "x", Type: "t", Due: due}, nil); err != nil {
		t.Fatalf("with the map readable: %v", err)
	}
	// No map there: trusted for shard.UnshardedMapTTL, then read again.
	tr.armed.Store(true)
	if _, err := c.Status(ctx, "x"); err != nil {
		t.Fatalf("a lookup while the absence just read is trusted: %v", err)
	}
	clk.Advance(shard.UnshardedMapTTL + time.Second)
	if _, err := c.Status(ctx, "x"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("a lookup once that absence is stale and the map cannot be read: %v; want an error", err)
	}
}

// failWrites is a transport that fails every write whose URL and body
// (unescaped) match while armed.
type failWrites struct {
	next   policy.Transporter
	match  func(text string) bool
	armed  atomic.Bool
	failed atomic.Int32
}

func (f *failWrites) Do(req *http.Request) (*http.Response, error) {
	if f.armed.Load() {
		ok, err := writeMatches(req, f.match)
		if err != nil {
			return nil, err
		}
		if ok {
			f.failed.Add(1)
			return nil, errors.New("connection reset by peer")
		}
	}
	return f.next.Do(req)
}

// A task that waits for a parent is written only once the parent's end is
// sure to be heard of — the parent marked as waited for, or watched by the
// traffic cop. When neither can be written the schedule fails and leaves
// nothing behind (issue 38, the simulator's seed 3152: the child's row was
// written first, the client died before marking its parents, and the
// child waited for good although they ended). With the watch written, the
// child is scheduled even though the mark failed.
func TestChildIsWrittenOnlyOnceItsParentsEndWillBeHeardOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		watch bool // the watch can be written
	}{{"mark and watch fail", false}, {"mark fails, watch written", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var tr *failWrites
			c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
				tr = &failWrites{next: next, match: func(s string) bool {
					return strings.Contains(s, "_par'") || !tc.watch && strings.Contains(s, `"PartitionKey":"~l"`)
				}}
				return tr
			})
			if _, err := c.Schedule(ctx, Item{ID: "par", Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
				t.Fatal(err)
			}
			tr.armed.Store(true)
			_, err := c.Schedule(ctx, Item{ID: "kid", Type: "t", Due: time.Now(), After: []string{"par"}}, nil)
			tr.armed.Store(false)
			if tr.failed.Load() == 0 {
				t.Fatal("no write failed: the test's match is stale")
			}
			watched, werr := c.runs.Watched(ctx)
			if werr != nil {
				t.Fatal(werr)
			}
			_, gerr := c.Get(ctx, "kid")
			deps, derr := c.Dependents(ctx, "par")
			if derr != nil {
				t.Fatal(derr)
			}
			if tc.watch {
				if err != nil || gerr != nil || !slices.Contains(watched, "par") || len(deps) != 1 {
					t.Fatalf("schedule: %v; child row: %v; watched %v; dependents %v; want the child scheduled and its parent watched", err, gerr, watched, deps)
				}
				return
			}
			if err == nil || !errors.Is(gerr, ErrNotFound) || len(deps) != 0 {
				t.Fatalf("schedule: %v; child row: %v; dependents %v; want an error, no child row and no dependency left", err, gerr, deps)
			}
		})
	}
}

// A parent that ends while a child's row is still being written (it was
// marked first, as it is now) cannot release the child yet: its end keeps
// the dependency and has the traffic cop watch the parent, and the cop's
// sweep keeps watching while the child's row is missing (a review of
// seed 3152's fix). Once the row is older than orphanGrace and still
// missing, the dependency is dropped as an orphan and the watch goes.
func TestParentEndingBeforeItsChildsRowIsWrittenIsWatched(t *testing.T) {
	ctx := context.Background()
	c := memClient(t)
	clk := clock.NewFake(time.Now())
	c.o.Clock = clk
	if err := c.runs.AddDependents(ctx, []runs.Dependent{{Parent: "par", Child: "kid"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.parentEnded(ctx, "par", RunSucceeded); err != nil {
		t.Fatal(err)
	}
	watched, err := c.runs.Watched(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := c.Dependents(ctx, "par")
	if err != nil || !slices.Contains(watched, "par") || len(deps) != 1 {
		t.Fatalf("after the parent's end: watched %v, dependents %v (%v); want the parent watched and the dependency kept", watched, deps, err)
	}
	// The sweep sees the parent ended (no row, no record: cancelled) and
	// the child still missing: it keeps watching.
	if err := c.SweepWatched(ctx); err != nil {
		t.Fatal(err)
	}
	if watched, _ = c.runs.Watched(ctx); !slices.Contains(watched, "par") {
		t.Fatalf("the sweep stopped watching while the child's row was missing: %v", watched)
	}
	clk.Advance(2 * orphanGrace)
	if err := c.SweepWatched(ctx); err != nil {
		t.Fatal(err)
	}
	watched, _ = c.runs.Watched(ctx)
	deps, _ = c.Dependents(ctx, "par")
	if slices.Contains(watched, "par") || len(deps) != 0 {
		t.Fatalf("past orphanGrace: watched %v, dependents %v; want the orphan dropped and the watch gone", watched, deps)
	}
}

// A stale early-sent message of a task others wait for has the traffic
// cop watch the id before it is acknowledged without running: it may be
// the last thing that would tell them of the id's end (issue 38, row 80:
// a parent died, telling its child failed, the id was scheduled again by
// a row that never knew of the child, and the dead run's message, back
// once its record was the replacement's, was acknowledged as stale; the
// child waited for good). Once the replacement's run has ended, the
// cop's sweep applies that end to the child.
func TestStaleMessageOfAWaitedForTaskIsWatched(t *testing.T) {
	ctx := context.Background()
	c := memClient(t)
	gone := queue.Envelope{ID: "par", Type: "t", Token: "0123456789ab", Row: "00/0639103424626350387_par", Due: time.Now()}
	// "other" was rescheduled: its row waits in the schedule, marked as
	// waited for, and its message will tell the child.
	if _, err := c.Schedule(ctx, Item{ID: "other", Type: "t", Due: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, Item{ID: "kid2", Type: "t", Due: time.Now(), After: []string{"other"}}, nil); err != nil {
		t.Fatal(err)
	}
	rescheduled := gone
	rescheduled.ID, rescheduled.Waiters = "other", true
	for _, tc := range []struct {
		env     queue.Envelope
		current bool
	}{
		{gone, false},        // nobody waits
		{rescheduled, false}, // its row will tell
		{queue.Envelope{ID: "par", Type: "t", Waiters: true}, true}, // not sent early
	} {
		if current, err := c.currentOrWatched(ctx, tc.env); err != nil || current != tc.current {
			t.Fatalf("%+v: current %v, %v; want %v", tc.env, current, err, tc.current)
		}
		if watched, err := c.runs.Watched(ctx); err != nil || len(watched) != 0 {
			t.Fatalf("%+v: watched %v, %v; want nothing watched", tc.env, watched, err)
		}
	}
	// The replacement's run, claimed (the child, scheduled now, has the
	// cop watch it: its message does not say the child waits), then
	// ended; the watch is taken back to show the stale message's own.
	m := runs.Meta{Type: "t", Due: time.Now().Add(time.Minute)}
	if _, err := c.runs.Claim(ctx, "par", "w1", 1, time.Now().Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, Item{ID: "kid", Type: "t", Due: time.Now(), After: []string{"par"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.runs.Finish(ctx, "par", runs.Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.runs.Unwatch(ctx, "par"); err != nil {
		t.Fatal(err)
	}
	waiting := gone
	waiting.Waiters = true
	if current, err := c.currentOrWatched(ctx, waiting); err != nil || current {
		t.Fatalf("a stale message: current %v, %v; want false", current, err)
	}
	if watched, err := c.runs.Watched(ctx); err != nil || !slices.Contains(watched, "par") {
		t.Fatalf("watched %v, %v; want par watched", watched, err)
	}
	if err := c.SweepWatched(ctx); err != nil {
		t.Fatal(err)
	}
	if deps, err := c.Dependents(ctx, "par"); err != nil || len(deps) != 0 {
		t.Fatalf("dependents of par after the sweep: %v, %v; want none", deps, err)
	}
	if it, err := c.Get(ctx, "kid"); err != nil || it.Waiting {
		t.Fatalf("the child after the sweep: %+v, %v; want it released", it, err)
	}
}

// A child scheduled while its parent's row is still pending and marked as
// waited for by another child, although the mover has sent the parent,
// whose run has ended and told the children waiting then, is released: it
// looks at the run of a parent it found marked by someone else once its
// own row is written (issue 38, seed 32048: the mover's removal of the
// sent row was slow, and the late child trusted the mark, watched nothing
// and waited for good) — whether the mark was there when it read the
// parent or was written between that read and its own mark (a review's
// find). A finished record of an earlier scheduling of the parent's id
// is not taken for the end of the row found marked, even once that row
// is gone.
func TestChildOfAMarkedParentThatAlreadyEndedIsReleased(t *testing.T) {
	due := time.Now().Add(time.Hour)
	type world struct {
		ctx      context.Context
		c        *Client
		t        *testing.T
		failRead *atomic.Bool // reads of parent's run record fail
	}
	first := func(w world) {
		if _, err := w.c.Schedule(w.ctx, Item{ID: "first", Type: "t", Due: due, After: []string{"parent"}}, nil); err != nil {
			w.t.Fatal(err)
		}
	}
	// ran: the mover sent parent (its row stays until its commit), and the
	// run succeeded and told the children waiting then.
	ran := func(w world) {
		if _, err := w.c.runs.Claim(w.ctx, "parent", "w1", 1, time.Now().Add(time.Minute), runs.Meta{Type: "t", Due: due}); err != nil {
			w.t.Fatal(err)
		}
		if err := w.c.runs.Finish(w.ctx, "parent", runs.Succeeded, nil, ""); err != nil {
			w.t.Fatal(err)
		}
		if err := w.c.parentEnded(w.ctx, "parent", RunSucceeded); err != nil {
			w.t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		// before runs before late is scheduled; during, before the write
		// that matches match.
		before, during func(w world)
		match          func(string) bool
		released       bool
		// watched: the look at the parent's run fails, so the traffic
		// cop watches it, and its sweep releases the child.
		watched bool
	}{
		{name: "marked before the read", before: func(w world) { first(w); ran(w) }, released: true},
		{name: "marked between the read and the mark", match: contains("parent~late"),
			during: func(w world) { first(w); ran(w) }, released: true},
		{name: "the look at its run fails", match: contains("id~late"), watched: true, released: true,
			before: func(w world) { first(w); ran(w) },
			during: func(w world) { w.failRead.Store(true) }},
		{name: "an earlier release's record, which knows no due time", before: func(w world) {
			if _, err := w.c.runs.Claim(w.ctx, "parent", "w1", 1, time.Now().Add(time.Minute), runs.Meta{Type: "t"}); err != nil {
				w.t.Fatal(err)
			}
			if err := w.c.runs.Finish(w.ctx, "parent", runs.Succeeded, nil, ""); err != nil {
				w.t.Fatal(err)
			}
			first(w)
		}},
		{name: "an earlier scheduling's end, the row then gone", match: contains("id~late"),
			before: func(w world) {
				m := runs.Meta{Type: "t", Due: due.Add(-time.Hour)}
				if _, err := w.c.runs.Claim(w.ctx, "parent", "w1", 1, time.Now().Add(time.Minute), m); err != nil {
					w.t.Fatal(err)
				}
				if err := w.c.runs.Finish(w.ctx, "parent", runs.Succeeded, nil, ""); err != nil {
					w.t.Fatal(err)
				}
				first(w)
			},
			during: func(w world) { // the mover moved the row, its mark of the run failing
				if _, err := w.c.sched.Cancel(w.ctx, "parent"); err != nil {
					w.t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			tr := &beforeWrite{match: func(string) bool { return false }}
			var failRead atomic.Bool
			c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
				tr.next = failingReads{next: next, armed: &failRead, match: "r~parent"}
				return tr
			})
			w := world{ctx, c, t, &failRead}
			if _, err := c.Schedule(ctx, Item{ID: "parent", Type: "t", Due: due}, nil); err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				tc.before(w)
			}
			if tc.during != nil {
				tr.match, tr.before = tc.match, func() { tc.during(w) }
				tr.armed.Store(true)
			}
			if _, err := c.Schedule(ctx, Item{ID: "late", Type: "t", Due: due, After: []string{"parent"}}, nil); err != nil {
				t.Fatal(err)
			}
			if tr.armed.Load() {
				t.Fatal("the write to step in before was not made")
			}
			if tc.watched {
				failRead.Store(false)
				if watched, err := c.runs.Watched(ctx); err != nil || !slices.Contains(watched, "parent") {
					t.Fatalf("watched %v, %v; want parent watched", watched, err)
				}
				if err := c.SweepWatched(ctx); err != nil {
					t.Fatal(err)
				}
			}
			it, err := c.sched.Get(ctx, "late")
			if err != nil || it.Waiting == tc.released {
				t.Fatalf("late: waiting %v, %v; want released %v", it.Waiting, err, tc.released)
			}
			if tc.released {
				if deps, err := c.Dependents(ctx, "parent"); err != nil || len(deps) != 0 {
					t.Errorf("dependents of parent: %v, %v; want none", deps, err)
				}
			}
		})
	}
}

// failingReads fails every read whose unescaped URL holds match while
// armed.
type failingReads struct {
	next  policy.Transporter
	armed *atomic.Bool
	match string
}

func (f failingReads) Do(req *http.Request) (*http.Response, error) {
	if f.armed.Load() && req.Method == http.MethodGet {
		if u, err := url.QueryUnescape(req.URL.String()); err == nil && strings.Contains(u, f.match) {
			return nil, errors.New("connection reset by peer")
		}
	}
	return f.next.Do(req)
}

// A child that began waiting for a parent whose row was still pending
// although the mover had sent it (its removal failed) marked the row;
// the parent's run died before the row's second message came, and its
// dead letter was requeued before that message was claimed. The second
// message, the only one that says the child waits, has the traffic cop
// watch the id, and the requeued run's end releases the child (issue 38,
// seed 70823: the message was acknowledged untold, and the child waited
// for good).
func TestARequeuedDeathsSecondMessageHasItsWaitersWatched(t *testing.T) {
	ctx := context.Background()
	c := memClient(t)
	due := time.Now().Add(time.Hour)
	m := parentThatDied(ctx, t, c, due, Item{ID: "kid", Type: "t", Due: time.Now()})
	requeued := m
	requeued.Token = runs.RequeueToken("msg-1-1")
	if _, _, err := c.runs.MarkRequeued(ctx, "par", requeued, "msg-1-1", ""); err != nil {
		t.Fatal(err)
	}
	if err := c.taskEnded(ctx, queue.Envelope{ID: "par", Type: "t", Due: due, Waiters: true}, RunDead); err != nil {
		t.Fatalf("the second message's end: %v", err)
	}
	if watched, err := c.runs.Watched(ctx); err != nil || !slices.Contains(watched, "par") {
		t.Fatalf("watched %v, %v; want par watched", watched, err)
	}
	if err := c.SweepWatched(ctx); err != nil {
		t.Fatal(err)
	}
	if it, err := c.Get(ctx, "kid"); err != nil || !it.Waiting {
		t.Fatalf("the child while the requeued run is queued: %+v, %v; want it waiting", it, err)
	}
	if _, err := c.runs.Claim(ctx, "par", "w2", 1, time.Now().Add(time.Minute), requeued); err != nil {
		t.Fatalf("the requeued run's claim: %v", err)
	}
	if err := c.runs.Finish(ctx, "par", runs.Succeeded, nil, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.SweepWatched(ctx); err != nil {
		t.Fatal(err)
	}
	if it, err := c.Get(ctx, "kid"); err != nil || it.Waiting {
		t.Fatalf("the child after the requeued run's end: %+v, %v; want it released", it, err)
	}
}

// beforeRead runs before once before the at-th read whose unescaped URL
// holds match.
type beforeRead struct {
	next   policy.Transporter
	match  string
	at     int
	seen   atomic.Int32
	before func()
}

func (b *beforeRead) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && b.before != nil {
		if u, err := url.QueryUnescape(req.URL.String()); err == nil && strings.Contains(u, b.match) && int(b.seen.Add(1)) == b.at {
			b.before()
		}
	}
	return b.next.Do(req)
}

// A child that found its parent's row marked by another child and the
// row's run ended, but at the second look the parent not ended (its death
// requeued between the two reads) — or the run's death requeued already
// at the first — has the traffic cop watch the parent: the death may have
// been told before the child's dependency was written, and the requeued
// run's message need not say that anyone waits (reviews of seed 32048's
// fix).
func TestAMarkedParentRequeuedBetweenTheLooksIsWatched(t *testing.T) {
	for _, tc := range []struct{ before, all bool }{{false, false}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("requeued before the first look %v, every parent looked at %v", tc.before, tc.all), func(t *testing.T) {
			markedParentRequeued(t, tc.before, tc.all)
		})
	}
}

// markedParentRequeued is one case of
// TestAMarkedParentRequeuedBetweenTheLooksIsWatched; all: the child's
// dependencies are looked at as after a replace (every parent).
func markedParentRequeued(t *testing.T, before, all bool) {
	ctx := context.Background()
	hook := &beforeRead{match: "'r~par'"}
	c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
		hook.next = next
		return hook
	})
	due := time.Now().Add(time.Hour)
	m := parentThatDied(ctx, t, c, due, Item{ID: "first", Type: "t", Due: due})
	row, err := c.sched.Get(ctx, "par")
	if err != nil || !row.Waiters {
		t.Fatalf("par's row: %+v, %v; want it pending and marked", row, err)
	}
	hook.at = int(hook.seen.Load()) + 2 // endOf's read, after lookAgain's own
	if before {
		hook.at--
	}
	hook.before = func() {
		requeued := m
		requeued.Token = runs.RequeueToken("msg-1-1")
		if _, _, err := c.runs.MarkRequeued(ctx, "par", requeued, "msg-1-1", ""); err != nil {
			t.Error(err)
		}
	}
	deps := []runs.Dependent{{Parent: "par", Child: "late", Created: time.Now()}}
	c.lookAgain(ctx, deps, map[string]parentState{"par": {pending: row}}, noted{marked: map[string]Item{"par": row}}, time.Now(), all)
	if int(hook.seen.Load()) < hook.at {
		t.Fatalf("%d reads of par's record; the requeue was to come before read %d", hook.seen.Load(), hook.at)
	}
	if watched, err := c.runs.Watched(ctx); err != nil || !slices.Contains(watched, "par") {
		t.Fatalf("watched %v, %v; want par watched", watched, err)
	}
}

// parentThatDied schedules par (due at due) and child, which waits for it
// with --after-any, and records par's run dead on its first attempt; it
// returns the run's meta.
func parentThatDied(ctx context.Context, t *testing.T, c *Client, due time.Time, child Item) runs.Meta {
	t.Helper()
	if _, err := c.Schedule(ctx, Item{ID: "par", Type: "t", Due: due}, nil); err != nil {
		t.Fatal(err)
	}
	child.After, child.AfterAny = []string{"par"}, true
	if _, err := c.Schedule(ctx, child, nil); err != nil {
		t.Fatal(err)
	}
	m := runs.Meta{Type: "t", Due: due}
	if _, err := c.runs.Claim(ctx, "par", "w1", 1, time.Now().Add(time.Minute), m); err != nil {
		t.Fatal(err)
	}
	if err := c.runs.Finish(ctx, "par", runs.Dead, errors.New("boom"), ""); err != nil {
		t.Fatal(err)
	}
	return m
}

// beforeFailing is a transport that, once a write matches, runs before
// and then fails that write and every matching write after it.
type beforeFailing struct {
	next    policy.Transporter
	match   func(text string) bool
	before  func()
	tripped atomic.Bool
}

func (b *beforeFailing) Do(req *http.Request) (*http.Response, error) {
	ok, err := writeMatches(req, b.match)
	if err != nil {
		return nil, err
	}
	if ok {
		if b.tripped.CompareAndSwap(false, true) {
			b.before()
		}
		return nil, errors.New("connection reset by peer")
	}
	return b.next.Do(req)
}

// A task that began waiting for a line of a ScheduleMany while the call
// was under way hears of the line's end when the call's roll-back takes
// the line's row back: the row goes unsent, so no message tells of its
// end. The roll-back tells it "cancelled", as a cancel would, having had
// the traffic cop watch the id first (for a client that dies in between).
// A child --after it is cancelled; one --after-any it meets that end
// (issue 38, row 197, the simulator's seeds 300088 and 119804: such a
// child waited for good) — also when an earlier run of the id succeeded,
// whose record the cop's watch would read (a review of the fix).
func TestAChildOfALineTakenBackByItsRollBackHearsOfIt(t *testing.T) {
	for _, earlier := range []bool{false, true} {
		t.Run(fmt.Sprintf("earlier run succeeded=%v", earlier), func(t *testing.T) {
			childOfALineTakenBack(t, earlier)
		})
	}
}

func childOfALineTakenBack(t *testing.T, earlier bool) {
	ctx := context.Background()
	var tr *beforeFailing
	c := memClientThrough(t, func(next policy.Transporter) policy.Transporter {
		// The second transaction of item rows (latest due first) holds
		// line0; the id index rows, written first, name it too.
		tr = &beforeFailing{next: next, match: func(s string) bool {
			return strings.Contains(s, `_line0"`) && !strings.Contains(s, "id~")
		}}
		return tr
	})
	due := time.Now().Add(time.Hour)
	if _, err := c.Schedule(ctx, Item{ID: "other", Type: "t", Due: due}, nil); err != nil {
		t.Fatal(err)
	}
	if earlier {
		m := runs.Meta{Type: "t", Due: time.Now().Add(-time.Hour)}
		if _, err := c.runs.Claim(ctx, "line149", "w1", 1, time.Now().Add(time.Minute), m); err != nil {
			t.Fatal(err)
		}
		if err := c.runs.Finish(ctx, "line149", runs.Succeeded, nil, ""); err != nil {
			t.Fatal(err)
		}
	}
	lines := make([]Item, 150)
	for i := range lines {
		lines[i] = Item{ID: fmt.Sprintf("line%d", i), Type: "t", Due: due.Add(time.Duration(i) * time.Second)}
	}
	tr.before = func() {
		// The transactions go at once: the one holding line149 may still
		// be on its way.
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if _, err := c.Get(ctx, "line149"); err == nil || time.Now().After(end) {
				break
			}
		}
		for _, it := range []Item{
			{ID: "kid", Type: "t", Due: due, After: []string{"line149"}},
			{ID: "anykid", Type: "t", Due: due, After: []string{"line149", "other"}, AfterAny: true},
		} {
			if _, err := c.Schedule(ctx, it, nil); err != nil {
				t.Errorf("schedule %s while the lines are written: %v", it.ID, err)
			}
		}
	}
	if _, err := c.ScheduleMany(ctx, lines, ScheduleManyOptions{}); err == nil {
		t.Fatal("ScheduleMany answered no error; want its roll-back")
	}
	if !tr.tripped.Load() {
		t.Fatal("no write failed: the test's match is stale")
	}
	if _, err := c.Get(ctx, "line149"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("line149 after the roll-back: %v; want it taken back", err)
	}
	if watched, err := c.runs.Watched(ctx); err != nil || !slices.Contains(watched, "line149") {
		t.Fatalf("watched after the roll-back: %v, %v; want line149 watched", watched, err)
	}
	// The traffic cop's sweep comes after, and changes nothing.
	for _, sweep := range []bool{false, true} {
		if sweep {
			if err := c.SweepWatched(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Get(ctx, "kid"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("kid (sweep %v): %v; want it cancelled with its parent", sweep, err)
		}
		if st, err := c.Status(ctx, "kid"); err != nil || st.State() != string(RunCancelled) {
			t.Fatalf("status of kid (sweep %v): %+v, %v; want cancelled", sweep, st, err)
		}
		if it, err := c.Get(ctx, "anykid"); err != nil || !slices.Contains(it.Met, "line149") {
			t.Fatalf("anykid (sweep %v): met %v, %v; want line149's end met (it still waits for other)", sweep, it.Met, err)
		}
	}
	if watched, err := c.runs.Watched(ctx); err != nil || slices.Contains(watched, "line149") {
		t.Fatalf("watched after the sweep: %v, %v; want line149's watch gone", watched, err)
	}
}
