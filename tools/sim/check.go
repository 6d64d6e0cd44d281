package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/pause"
	payloadblob "github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// The invariants: every promise of the README that the checker states as
// code. Each violation names one.
const (
	InvAtLeastOnce = "at-least-once: a scheduled, not cancelled task runs and ends"
	InvOccurrences = "a series' occurrences are not lost"
	InvNoRerun     = "a run that succeeded is not run again (but in the documented window)"
	InvNoTwoAtOnce = "two workers never run one run at once"
	InvCancelled   = "a task cancelled before it starts never runs"
	InvNeverEarly  = "never early: a task starts at or after its due time"
	InvOneMover    = "one mover per shard at a time"
	InvLookup      = "a lookup by id finds every pending task through any shard change"
	InvUnique      = "two live tasks never hold one unique key"
	InvAfter       = "a child starts only after its parents ended as --after/--after-any requires"
	InvAfterLive   = "a child starts once its parents have ended"
	InvBatch       = "a batch callback runs exactly once, after every member ended"
	InvRate        = "a rate limit's window is never exceeded"
	InvConcurrency = "a concurrency limit is never exceeded"
	InvPaused      = "a paused type never starts"
	InvDisabled    = "a disabled series never runs"
	InvBulkOnce    = "a dead task runs again only when requeued, once per requeue (a bulk operation touches each matching item once)"
	InvAccepted    = "status tells the truth, and an operation that answers success did what it said"
	InvPayloadGone = "a one-off task's payload blob is deleted once it succeeded"
	// InvPayloadThere: no attempt fails for want of its payload (README's
	// payload paragraph: a blob is deleted after the task's success, or
	// with a row no message or run names).
	InvPayloadThere = "a task's payload blob is there for each of its attempts"
	// InvEarlyDepth: README's backpressure paragraph (a pass sends a task
	// ahead of its due time only while those already waiting leave room
	// under queue.max_depth), per mover term.
	InvEarlyDepth = "a mover has at most queue.max_depth tasks sent ahead of their due time waiting"
)

// Invariants lists every invariant the checker states.
var Invariants = []string{InvAtLeastOnce, InvOccurrences, InvNoRerun, InvNoTwoAtOnce, InvCancelled, InvNeverEarly,
	InvOneMover, InvLookup, InvUnique, InvAfter, InvAfterLive, InvBatch, InvRate, InvConcurrency, InvPaused, InvDisabled, InvBulkOnce, InvAccepted,
	InvPayloadGone, InvPayloadThere, InvEarlyDepth, InvBoardOnce, InvBoardInterval, InvBoardRemoved, InvBoardLive}

// Violation is a broken promise.
type Violation struct {
	Invariant string
	At        time.Duration // when (since the start), 0 when found at the end
	Detail    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%v  %s: %s", v.At.Truncate(time.Millisecond), v.Invariant, v.Detail)
}

// payload is what the simulation puts in each task's payload: which
// scheduling of its id it is and what its handler does.
type payload struct {
	Inc int       `json:"inc"`
	B   Behaviour `json:"b"`
	// Tenant is the fair key of the tasks that carry theirs in the payload
	// (routing.FairKeys).
	Tenant string `json:"tenant,omitempty"`
	// Pad makes the payload of one task in sixteen larger than the inline
	// limit (bigPayload), so that it is stored as a blob.
	Pad string `json:"pad,omitempty"`
}

// bigPayload reports whether the task of spec s carries a payload larger
// than the inline limit (24 KiB), which leasecron stores in a blob and
// deletes after success (README, retries): one in sixteen by a hash of
// its planned id (not drawn from the plan's stream, so that no seed's
// plan changed), but never a row written from another language, whose
// payload is inline by contract.
func bigPayload(s TaskSpec) bool {
	return !s.Row && fnv32(s.ID)/7%16 == 0
}

// ti is one scheduling of a task id (a task incarnation): an id is
// scheduled again after its task ended, or replaced while pending.
type ti struct {
	inc    int
	spec   TaskSpec
	id     string // the id as stored (generated for unique tasks)
	client *proc
	op     *Op
	// unfound are the parents (--after) not yet tried when t was: see
	// newTI.
	unfound []string

	issued, returned time.Time
	accepted         bool
	ambiguous        bool // the schedule failed: it may or may not exist
	refusal          error
	due              time.Time
	schedDue         time.Time // the due time the schedule wrote
	retimes          []retime  // reschedules and runs-now of it

	// shared: another scheduling of the id was still under way when this
	// one was scheduled (or the other way round): the two share one run
	// record, and the README allows one of them to be acknowledged as a
	// duplicate.
	shared bool

	cancelled time.Time // a cancel returned success
	cancelTry time.Time // a cancel was tried (and failed: it may have happened)
	// uniqueRechecks are the schedules over its unique key accepted while
	// a cancel of it was under way: checked again when the cancel answers.
	uniqueRechecks []uniqueCheck
	// cancelErred: a cancel of it answered an error (it may have removed
	// the row without writing the run record).
	cancelErred bool
	// cancelIncomplete: a cancel of this one-off task removed its row but
	// could not mark its run (ErrIncomplete, done in part).
	cancelIncomplete bool
	// cancelPart is when a cancel of this series was issued that answered
	// ErrIncomplete: the series is cancelled, but an occurrence already
	// moved to the queue by then may still run once.
	cancelPart   time.Time
	cancelling   time.Time // a cancel issued then is under way (zero once answered)
	cancelTried  bool      // a cancel of it was issued, whatever it answered
	superseded   time.Time // replaced by a later scheduling
	supersededBy *ti       // the replace that superseded it
	tried        time.Time // when its schedule was tried (issued is set with the answer)
	// alts are later schedulings of the id that may have taken this one's
	// place: a replace of it due by then, whose row may already have been
	// moved. Children wait for the id, so the first of them to end
	// releases (or, under --after, cancels) a child waiting for this one.
	alts []*ti
	// again are later schedulings of the id (not replaces): a child whose
	// parent's end reaches it only once the id is pending again waits for
	// that scheduling instead (README, workflows; seed 1115: a dead
	// parent's end was applied after the id was scheduled anew).
	again    []*ti
	disabled []window
	// enables are the enables of this series answered (issued, and
	// answered at from), whatever they answered.
	enables []window
	// disableTry: a disable of this series answered an error (it may
	// have happened: seeds 52708, 52678, a write committed with its
	// answer lost).
	disableTry time.Time
	requeued   []time.Time // a requeue of its dead letter returned success
	// requeuedFrom are when those requeues were issued, in their order.
	requeuedFrom []time.Time
	// requeueFailed: a requeue of its dead letter answered an error (it
	// may have marked the run queued without sending it).
	requeueFailed bool
	// requeueMaybe are when the requeues of its dead letter were issued,
	// once it had died, that answered an error which may come after the
	// task was sent (sending it again, then removing the dead letter, come
	// last): not "no such dead letter", and not a refusal to requeue it.
	// The task may have run again at any time after the issue, before the
	// answer (seed 140420: the dead letter's removal retried for 12 s
	// after the task had been sent, run, and died again).
	requeueMaybe []time.Time
	// requeueTries are the requeues of its dead letter by id, whatever
	// they answered.
	requeueTries []requeueTry
	parents      []*ti
	batch        *batch
	callbackOf   *batch
	starts       []*runEv
	snoozes      map[string]int
	// rowShard and rowKey: where a task written as a table row (spec.Row)
	// was written; rowGone: when its writer's delete of it answered that
	// it removed it.
	rowShard, rowKey string
	rowGone          time.Time
	rowDeleted       bool // a delete of its row answered found, or an error
}

// window is a pause or a disable: asked at issued, in force from from
// (its answer) to to. partial marks a disable that answered
// ErrIncomplete: the series is disabled, but an occurrence already in the
// queue may still run once.
// requeueTry is a requeue by id of a dead letter: issued at from,
// answered at to; held when refused because another task held the key.
type requeueTry struct {
	from, to time.Time
	held     bool
}

type window struct {
	issued, from, to time.Time
	partial          bool
}

type batch struct {
	id       string
	members  []*ti
	callback *ti
	accepted bool
	// alt are the tasks that may have taken a member's place: a replace
	// of a member due by then, whose row may already have been moved (the
	// replacement takes the member's place when the member's run has not
	// ended: leasecron carries the batch over). A member ends when it or
	// one of them ends.
	alt map[*ti][]*ti
}

// memberEnd is when member m of b ended, as endedFor says, counting the
// tasks that may have taken its place.
func (c *checker) memberEnd(b *batch, m *ti, by time.Time) (time.Time, string) {
	end, how := c.endedFor(m, true, by)
	// The schedulings that may have taken m's place, and theirs in turn.
	alts := slices.Clone(b.alt[m])
	for i := 0; i < len(alts); i++ {
		a := alts[i]
		if e, h := c.endedFor(a, true, by); !e.IsZero() && (end.IsZero() || e.Before(end)) {
			end, how = e, h
		}
		for _, n := range b.alt[a] {
			if n != m && !slices.Contains(alts, n) {
				alts = append(alts, n)
			}
		}
	}
	return end, how
}

// runEv is one attempt of a run, as its handler saw it.
type runEv struct {
	ti          *ti
	runID       string
	due         time.Time
	attempt     int
	proc        *proc
	start, end  time.Time // true time
	workerStart time.Time // on the worker's clock
	outcome     string    // ok, fail, snooze, killed, cancelled; "" while running
	// startSeq and endSeq order the start and the end among every
	// attempt's (checker.seq): within one virtual instant the order
	// they happened in. A handler begins after its concurrency slot is
	// taken and ends before it is let go, so a slot handed on in one
	// instant shows as an end before the next start (row 239).
	startSeq, endSeq uint64
}

type pauseEv struct {
	typ              string
	issued, returned time.Time
	until            time.Time
	ok               bool
}

type bulkEv struct {
	id, kind, typ string
	started       time.Time
	// ended is when the operation was seen finished (zero: not seen).
	ended time.Time
	// ok: its start was not refused (it may have begun: true until its
	// start answers).
	ok bool
	// failed: the operation, seen finished, counted items it could not
	// act on wholly (a cancel done in part among them).
	failed bool
}

// requeuesDeadOf reports whether the operation is a bulk requeue of dead
// letters, not refused at its start, whose filter takes tasks of type typ.
func (b bulkEv) requeuesDeadOf(typ string) bool {
	return b.kind == "requeue-dead" && b.ok && (b.typ == "" || b.typ == typ)
}

// reaches reports whether the operation may act on a task scheduled at
// issued, and from when: it acts on what matches when its walk reaches it
// (README "Bulk operations"), so on tasks scheduled before it started and
// on those scheduled while it ran. One whose start was refused acts on
// nothing.
func (b bulkEv) reaches(issued time.Time) (time.Time, bool) {
	switch {
	case !b.ok:
		return time.Time{}, false
	case b.started.After(issued):
		return b.started, true
	case b.ended.IsZero() || issued.Before(b.ended):
		return issued, true
	}
	return time.Time{}, false
}

type procNote struct {
	at   time.Time
	what string
}

type checker struct {
	w  *World
	mu sync.Mutex

	nextInc int
	tis     []*ti
	byInc   map[int]*ti
	byID    map[string][]*ti
	logical map[string]string
	batches map[string]*batch
	runs    []*runEv
	// afterLater are the starts whose parent was a line of a file that
	// had not answered yet: checked at the end (finalAfter).
	afterLater []afterCheck
	// retiming counts, by id, the reschedules and run-nows under way
	// (retimeIssued, retimed); rerunLater are the starts made while one
	// was, whose check against an earlier success waits for its answer:
	// checked at the end (finalRerun).
	retiming   map[string]int
	rerunLater []*runEv
	// ownFile, while finalAfter checks a child its file's roll-back took
	// back whole, is that file: its roll-back ends none of its lines for
	// that child (rolledBackLocked).
	ownFile *Op

	notes map[*proc][]procNote
	hits  map[*proc][]time.Time // storage faults that struck a process
	// pauseHits are the faults that struck a process's reads of the
	// pause state (its blob).
	pauseHits map[*proc][]time.Time
	// runHits are the faults that struck a request naming a task's run
	// record or schedule row, by task id.
	runHits map[string][]time.Time
	// cancelAcks: when deliveries of a run (by task id) were acknowledged
	// as cancelled without running.
	cancelAcks map[string][]time.Time
	// firstDequeue: when a message of a run (by task id) was first
	// dequeued.
	firstDequeue map[string]time.Time
	// hiddenUntil: until when a dequeue whose answer never reached its
	// worker (lost, or the worker killed meanwhile) hid a message of a
	// run (by task id): nobody saw it, and nobody can take it before.
	hiddenUntil map[string]time.Time
	// noShows: when deliveries of a run's message (by task id) came to
	// nothing for a fault's sake: a dequeue whose answer never reached its
	// worker (lost, answered 500 after it was served, or the worker killed
	// meanwhile: unseen), or a message the queue service handed out and
	// left visible (its holder's receipt then goes stale: handedTwice).
	// Each raises the message's dequeue count, which the crash guard
	// counts (seed 150469).
	noShows map[string][]time.Time
	// rowWrites: the commits of a task's schedule rows, by id.
	rowWrites map[string][]rowWrite
	// runStates: the state list rows a run's record was given, by run
	// id, as committed (runsCommit).
	runStates map[string][]runState
	// payloadMissed are the runs (id and due time) whose record said an
	// attempt failed for want of its payload blob (InvPayloadThere), each
	// told once.
	payloadMissed map[string]bool
	pauses        []pauseEv
	bulks         []bulkEv
	status        map[string]leasecron.Status // the latest status of each id, at the end
	// deadLeft are the run ids with a dead letter in the poison queue at
	// the end.
	deadLeft map[string]bool
	// deadWhy are the reasons of those dead letters, every one of a run's.
	deadWhy map[string][]string
	// deadReasons are the reasons of every dead letter at the end, and
	// badRows the malformed rows written (finalBadRows).
	deadReasons []string
	deadListed  bool // the list was read
	badRows     []badRowEv
	moved       map[string][]movedRow // the schedule rows of an id a mover removed
	holdSpans   []holdSpan            // movers holding back under queue.max_depth
	// sends are the messages of a task (by id) workers put on a queue.
	sends map[string][]sentMsg
	// early: per mover term, the due time of each one-off task it sent
	// ahead of it, by id (checkEarlyLocked).
	early map[earlyKey]map[string]time.Time

	board boardState

	// keptPayloads are the tasks a consumer may have left the payload
	// blob of after their success (payloadKept); payloadBlobs the
	// payload blobs left at the end (blobsLeft).
	keptPayloads map[string]bool
	payloadBlobs []string

	violations []Violation
	// seq counts the attempts' starts and ends (runEv.startSeq, endSeq).
	seq uint64
	// skew bounds how far two processes' clocks differ; offset how far
	// one differs from the true time (the simulator's).
	skew, offset time.Duration
}

func newChecker(w *World) *checker {
	c := &checker{w: w, byInc: map[int]*ti{}, byID: map[string][]*ti{}, logical: map[string]string{}, batches: map[string]*batch{},
		notes: map[*proc][]procNote{}, hits: map[*proc][]time.Time{},
		pauseHits: map[*proc][]time.Time{}, runHits: map[string][]time.Time{}, cancelAcks: map[string][]time.Time{}, firstDequeue: map[string]time.Time{}, hiddenUntil: map[string]time.Time{}, noShows: map[string][]time.Time{}, rowWrites: map[string][]rowWrite{}, runStates: map[string][]runState{}, payloadMissed: map[string]bool{}, status: map[string]leasecron.Status{}, keptPayloads: map[string]bool{},
		moved: map[string][]movedRow{}, sends: map[string][]sentMsg{}}
	var most time.Duration
	for _, cs := range w.plan.Clocks {
		most = max(most, cs.Offset.Abs())
	}
	// Two clocks differ by at most twice the largest offset, plus what
	// 100 ppm adds up to over an hour.
	c.skew = 2*most + 400*time.Millisecond
	c.offset = most + 400*time.Millisecond
	return c
}

func (c *checker) violate(inv, format string, args ...any) {
	c.violations = append(c.violations, Violation{Invariant: inv, At: c.w.elapsed(), Detail: fmt.Sprintf(format, args...)})
}

// violateAt records a violation found at the end about an event at `at`.
func (c *checker) violateAt(at time.Time, inv, format string, args ...any) {
	c.violations = append(c.violations, Violation{Invariant: inv, At: at.Sub(c.w.plan.Start), Detail: fmt.Sprintf(format, args...)})
}

// note records what happened to a process.
func (c *checker) note(p *proc, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.w.now()
	c.notes[p] = append(c.notes[p], procNote{now, what})
	if what == "killed" || what == "stopped" || what == "drained" {
		// Its movers are gone: none holds back from now on.
		c.endHoldsLocked(now, func(h holdSpan) bool { return h.p == p })
	}
}

// hit records a storage fault striking p's request to svc for path,
// which names the rows of the tasks ids.
func (c *checker) hit(p *proc, svc, path string, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.w.now()
	c.hits[p] = append(c.hits[p], now)
	for _, id := range ids {
		c.runHits[id] = append(c.runHits[id], now)
	}
	if svc == "table" && isBoardPath(path) {
		c.boardHitLocked(p, now)
	}
	if svc == "blob" {
		if strings.HasSuffix(path, pause.DefaultBlob) {
			c.pauseHits[p] = append(c.pauseHits[p], now)
		}
	}
}

// downAround reports whether p was killed or frozen within [from − 1
// minute, to].
func (c *checker) downAround(p *proc, from, to time.Time) bool {
	return slices.ContainsFunc(c.notes[p], func(n procNote) bool {
		return (n.what == "killed" || n.what == "frozen") && !n.at.Before(from.Add(-time.Minute)) && !n.at.After(to)
	})
}

// slotTroubled reports whether p's hold on a concurrency slot (a blob
// lease it renews) can have lapsed within [from, to] with its handler
// running on: p was killed or frozen then. A slot lost for want of
// renewals (its Blob requests failing) cancels its handler before its
// lease ends at the service, and a slot lost before its handler began
// runs nothing (README "Limits"; row 230): storage faults excuse no
// overlap.
func (c *checker) slotTroubled(p *proc, from, to time.Time) bool {
	return c.downAround(p, from, to)
}

// troubled reports whether p was killed, frozen or struck by a storage
// fault within [from, to]: what the README's documented duplicates and
// overlaps need.
func (c *checker) troubled(p *proc, from, to time.Time) bool {
	return c.downAround(p, from, to) || hitBetween(c.hits[p], from, to) || p.killed()
}

// claimTroubled reports whether the start of run id on p at start may
// come later than the check that let it through (a pause check, a rate
// limit's start), as the README allows: p was killed or frozen then. A
// wait before the check — for a handler slot (seed 2949), a concurrency
// slot, the rate budget, or the run's claim retried through failing
// storage (seeds 3174, 8456: a rated start taken 4.6 and 7 seconds
// before its handler) — is no excuse: the pause is checked again after
// it, and the rate's start moved to its end. Faults cannot move a start.
func (c *checker) claimTroubled(p *proc, start time.Time) bool {
	return c.downAround(p, start, start)
}

// pauseTroubled is claimTroubled for a start of a paused type, the pause
// having returned at paused; a failed read of the pause state of p's
// since shortly before the pause excuses it too (a consumer keeps the
// last state it read until a read succeeds).
func (c *checker) pauseTroubled(p *proc, paused, start time.Time) bool {
	return c.claimTroubled(p, start) || hitBetween(c.pauseHits[p], paused.Add(-5*time.Second), start)
}

// hitBetween reports whether a fault of hits struck within [from, to].
func hitBetween(hits []time.Time, from, to time.Time) bool {
	return slices.ContainsFunc(hits, func(h time.Time) bool { return !h.Before(from) && !h.After(to) })
}

// newTI registers a scheduling about to be tried.
func (c *checker) newTI(s TaskSpec, op *Op, cl *proc) *ti {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextInc++
	t := &ti{inc: c.nextInc, spec: s, client: cl, op: op, snoozes: map[string]int{}, tried: c.w.now()}
	t.id = s.ID
	if s.Unique != nil {
		t.id = "" // generated: a unique task's id must share its key's shard
	}
	c.tis = append(c.tis, t)
	c.byInc[t.inc] = t
	if t.id != "" {
		// Known by its id from now: an operation on the id may race the
		// schedule's answer.
		c.byID[t.id] = append(c.byID[t.id], t)
	}
	if t.id != "" {
		// A child planned after this scheduling whose operation, delayed
		// with it, was tried first (each user operation runs on its own
		// goroutine) waits for it all the same: its schedule finds the
		// id's rows once they are written (seed 9737: a parent and its
		// child tried 0.2 ms apart, the child first, and the child's
		// cancel with its parent's bulk cancel was unexplained). So does
		// one planned before it whose schedule is still on its way: held
		// up, both were sent in one instant, and this one's rows were
		// written before the child's looked for them (seed 85868).
		for _, o := range c.tis {
			if i := slices.Index(o.unfound, t.id); i >= 0 && o.op != nil && op != nil && (c.plannedAfter(o.op, op) || o.returned.IsZero()) {
				o.unfound = slices.Delete(o.unfound, i, i+1)
				o.parents = append(o.parents, t)
			}
		}
	}
	for _, p := range s.After {
		if pt := c.latestLocked(c.realID(p)); pt != nil {
			t.parents = append(t.parents, c.waitedForLocked(pt))
		} else {
			t.unfound = append(t.unfound, c.realID(p))
		}
	}
	return t
}

// waitedForLocked is the scheduling of pt's id whose end a child waiting
// for the id from now hears of first: a child waits for the id, and the
// first run of it to end releases the child (README, workflows) — an
// earlier scheduling in the queue or under way beside pt, pending again
// (seed 12603: a parent in the queue replaced by one due minutes later; a
// child scheduled after the replace was released by the first one's
// end), or pt itself. The family of the one returned holds pt.
func (c *checker) waitedForLocked(pt *ti) *ti {
	now := c.w.now()
	for _, o := range c.byID[pt.id] {
		if o == pt {
			break
		}
		inFlight := len(o.starts) > 0 || c.movedLocked(o.id, o.due, o.issued, now)
		// Nothing of its family has surely ended yet (succeeded, died, or
		// cancelled by a cancel that returned): an end before the child
		// existed is not the one it waits for. One that may have been
		// cancelled (a cancel that erred, a bulk cancel under way) keeps
		// its end a candidate.
		fam := c.family(o)
		ended := slices.ContainsFunc(fam, func(x *ti) bool {
			_, done := x.finalEnd()
			return done || !x.cancelled.IsZero()
		})
		if o.accepted && inFlight && !ended && slices.Contains(fam, pt) {
			return o
		}
	}
	return pt
}

// plannedAfter reports whether operation a comes after b in the plan:
// later, or at the same moment and after it in the plan's order (seed
// 11880: a parent and its child planned for one instant, tried on their
// own goroutines, the child first).
func (c *checker) plannedAfter(a, b *Op) bool {
	if a.At != b.At {
		return a.At > b.At
	}
	ia, ib := -1, -1
	for i := range c.w.plan.Ops {
		switch &c.w.plan.Ops[i] {
		case a:
			ia = i
		case b:
			ib = i
		}
	}
	return ia > ib && ib >= 0
}

func (c *checker) realID(logical string) string {
	if id, ok := c.logical[logical]; ok {
		return id
	}
	return logical
}

// RealID maps a scenario's task name to the id it was stored under.
func (c *checker) RealID(logical string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.realID(logical)
}

func (c *checker) latestLocked(id string) *ti {
	l := c.byID[id]
	for i := len(l) - 1; i >= 0; i-- {
		if !l[i].superseded.IsZero() {
			// Replaced (its replacement is in l too): two schedules issued
			// at one virtual instant are listed in the order their
			// goroutines ran (seed 71720: the replaced one came last, and
			// a child scheduled after the replace was taken to wait for
			// it, which never ran).
			continue
		}
		if l[i].accepted || l[i].ambiguous || l[i].returned.IsZero() {
			return l[i] // scheduled, maybe scheduled, or not answered yet
		}
	}
	return nil
}

// latestAtLocked is latestLocked as it stood when a change of id was
// issued at at: the newest scheduling issued by then and not replaced by
// then. A change answers for the scheduling it found, not for one issued
// after it and answered first (seed 76740: a run-now, answered while a
// replace issued after it was still under way, was filed against the
// replace).
func (c *checker) latestAtLocked(id string, at time.Time) *ti {
	l := c.byID[id]
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].tried.After(at) || !l[i].superseded.IsZero() && !l[i].superseded.After(at) {
			continue
		}
		if l[i].accepted || l[i].ambiguous || l[i].returned.IsZero() {
			return l[i]
		}
	}
	return nil
}

func (t *ti) payload() string {
	p := payload{Inc: t.inc, B: t.spec.Behaviour}
	if routed() {
		_, _, p.Tenant = payloadRoute(t.id)
	}
	if bigPayload(t.spec) {
		p.Pad = strings.Repeat("x", 25<<10)
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// scheduled records the answer to a schedule.
func (c *checker) scheduled(t *ti, issued time.Time, got leasecron.Item, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t.issued, t.returned = issued, c.w.now()
	switch {
	case err == nil:
		t.accepted = true
	case errors.Is(err, leasecron.ErrDuplicate), errors.Is(err, leasecron.ErrInvalidTask), errors.Is(err, schedule.ErrAlreadyScheduled),
		errors.Is(err, errRowRefused):
		t.refusal = err
	default:
		t.ambiguous = true
		t.refusal = err
	}
	if got.ID != "" && (t.accepted || t.ambiguous) && t.id == "" {
		t.id = got.ID
		c.logical[t.spec.ID] = got.ID
		c.byID[t.id] = append(c.byID[t.id], t)
	}
	if t.id == "" {
		return
	}
	if !t.accepted && !t.ambiguous {
		// Refused: it never existed, and a child scheduled while it was
		// under way waits for the scheduling of the id that does (seed
		// 21: a schedule of a batch member's id answered "already
		// scheduled", and the child scheduled meanwhile started once the
		// member succeeded).
		if latest := c.latestLocked(t.id); latest != nil {
			for _, o := range c.tis {
				for i, p := range o.parents {
					if p == t {
						o.parents[i] = latest
					}
				}
			}
		}
		return
	}
	if t.ambiguous {
		for _, old := range c.byID[t.id] {
			if old != t && (old.accepted || old.ambiguous || old.returned.IsZero()) && !slices.Contains(t.alts, old) {
				// It may never have been written: a task waiting for the
				// id may hear of the scheduling before it (seed 1330: a
				// replace that failed, and the child of the id waited for
				// the task it would have replaced) — or of one still
				// under way, which may be what it meets (seed 71901: a
				// batch's member, answered after this schedule's error).
				c.alternativeLocked(t, old)
				if t.spec.Replace && old.accepted && len(old.starts) == 0 {
					// Written all the same, a replace takes old's place:
					// a batch with old as a member may hear of its end
					// (seed 69565: the replace answered "busy", its
					// replacement ran and died, and the callback ran),
					// and so may a child waiting for the id (README,
					// workflows: a child waits for its parent's id; seed
					// 95753: the replace of a waiting parent lost its
					// answer, its replacement ran and succeeded, and
					// released the --after-any child).
					c.alternativeLocked(old, t)
				}
			}
		}
	}
	if t.accepted {
		t.schedDue = got.Due
		if t.due.IsZero() {
			// (A reschedule that answered first has moved it already:
			// its due time stands.)
			t.due = got.Due
		}
		for _, old := range c.byID[t.id] {
			if old == t {
				continue
			}
			if t.spec.Replace {
				c.metLocked(old, "replace", t.issued, nil)
			}
			switch {
			case t.spec.Replace && unseenRow(old, t):
				// A task written as a row from another language has no id
				// index: a replace does not see it, and schedules the id
				// beside it (README, the table contract; seed 200005).
			case t.spec.Replace && (old.accepted || old.ambiguous) && len(old.starts) == 0 && old.superseded.IsZero():
				c.replacedLocked(old, t)
			case t.spec.Replace && old.accepted && len(old.starts) > 0 && old.batch != nil && old.callbackOf == nil &&
				!c.endedBeforeLocked(old, t.issued) && c.lastBeforeLocked(old, t):
				// A replace of a batch member under way (retrying,
				// snoozing), with no other scheduling of the id written
				// after it: the replacement takes the member's place, and
				// its end is the member's (README, workflows; seed 14083:
				// a snoozing member replaced, then cancelled, its batch
				// told while the cancel was under way). A replace of it
				// in turn joins the batch as well.
				c.batchAltLocked(old, t)
				t.batch = old.batch
			case old.spec.Replace && old.accepted && !t.spec.Replace && !old.issued.After(t.returned):
				// A replace that answered first while this schedule was
				// under way, both accepted: the replace wrote last (this
				// insert would have met its row), or its task was moved
				// and ran before this insert (seed 1142, under a freeze).
				// Either may be the one a child waiting for the id, or the
				// batch this one joins, hears of, even when the replace has
				// run already (seed 5351: a batch's answer came 5 s after
				// its commit, and a replace of a member in between ran and
				// ended it). Issued at the same instant counts (seed 6763:
				// a batch and a replace of a member, both held up by a
				// busy client, issued and answered at one instant).
				c.alternativeLocked(t, old)
				if c.landedAfterMoveLocked(t, old) && !slices.Contains(old.again, t) {
					// The replace's task moved before this insert landed:
					// this one is the id's pending row from then on, and a
					// child waiting for the id after the replace waits for
					// it (seed 134685: a replace answered at once and ran;
					// the schedule it overtook, held 10 s by faults, wrote
					// its row after, and a child scheduled then was
					// cancelled when that one died).
					old.again = append(old.again, t)
				}
			}
		}
		for _, old := range c.byID[t.id] {
			// A replace of a task that has started schedules the id
			// again, beside its run, as a schedule without Replace does
			// (seed 3407: a retrying parent replaced, its death seen by
			// the traffic cop's watch once the replacement was pending;
			// the child waited for the replacement, which succeeded).
			if old != t && old.accepted && old.issued.Before(t.issued) && (!t.spec.Replace || len(old.starts) > 0 || unseenRow(old, t)) {
				old.again = append(old.again, t)
			}
		}
		c.checkUniqueLocked(t, t.issued, t.returned, "scheduled")
		for _, old := range c.byID[t.id] {
			if old == t || !old.superseded.IsZero() || !(old.accepted || old.ambiguous) || !old.cancelled.IsZero() {
				continue
			}
			if _, ended := old.finalEnd(); !ended {
				old.shared, t.shared = true, true
			}
		}
	}
}

// moverCommit notes the schedule rows a mover's commit removed (a
// mover's commit is the one that writes its shard's fence row): a task
// whose row it moved or retired is in the queue, no longer pending; and
// every commit's writes of schedule rows (lateWriteLocked).
func (c *checker) moverCommit(cm memstore.Commit) {
	if cm.Table != scheduleTable {
		return
	}
	now := c.w.now()
	i := slices.IndexFunc(cm.Rows, func(r memstore.CommittedRow) bool { return r.RowKey == fenceRow && !r.Deleted })
	var gen int64
	if i >= 0 {
		gen, _ = tokenOf(cm.Rows[i].Props["Generation"])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range cm.Rows {
		due, id, err := schedule.ParseRowKey(r.RowKey)
		if err != nil {
			continue
		}
		c.rowWrites[id] = append(c.rowWrites[id], rowWrite{at: now, due: due, removed: r.Deleted, partition: cm.Partition})
		if i >= 0 && r.Deleted {
			c.moved[id] = append(c.moved[id], movedRow{at: now, due: due, gen: gen})
		}
	}
}

// runsCommit notes the state list rows (x~{state}~…) a commit of the
// run records inserted: when each run's record was claimed, put back or
// ended, as the product saw it (startedByLocked).
func (c *checker) runsCommit(cm memstore.Commit) {
	if cm.Table != runsTable {
		return
	}
	now := c.w.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range cm.Rows {
		id, _ := r.Props["Id"].(string)
		if r.Deleted || !strings.HasPrefix(r.RowKey, "x~") || id == "" {
			continue
		}
		st, _ := r.Props["State"].(string)
		n, _ := tokenOf(r.Props["Attempts"])
		due, _ := r.Props["Due"].(time.Time)
		c.runStates[id] = append(c.runStates[id], runState{at: now, state: leasecron.RunState(st), attempts: n, due: due})
		run := id + " " + due.Format(time.RFC3339Nano) // (an id scheduled again is another run)
		if last, _ := r.Props["LastError"].(string); strings.Contains(last, payloadblob.ErrNotFound.Error()) && !c.payloadMissed[run] {
			// (Told once per run: its later records carry the error on.)
			c.payloadMissed[run] = true
			c.violate(InvPayloadThere, "%s (due %s) recorded %s after attempt %d failed for want of its payload: %s", id, due.Format(time.RFC3339Nano), st, n, last)
		}
	}
}

// runState is a state list row committed for a run: when, its state,
// its attempts and the due time of the scheduling it describes.
type runState struct {
	at       time.Time
	state    leasecron.RunState
	attempts int64
	due      time.Time
}

// queuedByLocked reports whether the run runID of the scheduling due then
// was recorded queued within [from, at]: a mover was moving its row (it
// records the run before it sends the message, and removes the row after).
func (c *checker) queuedByLocked(runID string, due, from, at time.Time) bool {
	return slices.ContainsFunc(c.runStates[runID], func(r runState) bool {
		return r.state == leasecron.RunQueued && sameDue(r.due, due) && !r.at.Before(from) && !r.at.After(at)
	})
}

// startedByLocked reports whether the run runID had started by at as its
// record says: the last state row it was given by then is past queued —
// claimed (running), failed and waiting for its retry, or snoozed after
// an attempt — though its handler may begin later (seed 14895: a claimed
// occurrence's payload and slot took 14 s under storage faults, and the
// series was disabled in between).
func (c *checker) startedByLocked(runID string, at time.Time) bool {
	var last *runState
	for i, r := range c.runStates[runID] {
		if !r.at.After(at) {
			last = &c.runStates[runID][i]
		}
	}
	if last == nil {
		return false
	}
	switch last.state {
	case leasecron.RunRunning, leasecron.RunFailed:
		return true
	case leasecron.RunSnoozed:
		return last.attempts > 0
	}
	return false
}

// endUnrecordedLocked reports whether the run runID's record said running
// at attempt from from until to: the claim made before from stood, and
// every state row it was given in between is a claim of that attempt
// (another worker's takeover), none an end.
func (c *checker) endUnrecordedLocked(runID string, attempt int, from, to time.Time) bool {
	claimed := false
	for _, r := range c.runStates[runID] {
		switch {
		case r.at.After(to):
			return claimed
		case !r.at.After(from):
			claimed = r.state == leasecron.RunRunning && r.attempts == int64(attempt)
		case r.state != leasecron.RunRunning || r.attempts != int64(attempt):
			return false
		}
	}
	return claimed
}

// movedRow is a schedule row a mover removed: when, the due time its key
// holds, and the mover's fencing token (its lease generation or its
// shard's epoch).
type movedRow struct {
	at, due time.Time
	gen     int64
}

// rowWrite is a commit of a schedule row: when, the due time its key
// holds, and whether it removed the row.
type rowWrite struct {
	at, due time.Time
	removed bool
	// partition is the schedule shard the row is in (its PartitionKey).
	partition string
}

// rowRemovedLocked reports whether a commit other than a mover's removed
// the row of id due at due (its very row key) between from and to.
func (c *checker) rowRemovedLocked(id string, due, from, to time.Time) bool {
	rk, err := schedule.RowKey(due, id)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(c.rowWrites[id], func(w rowWrite) bool {
		k, err := schedule.RowKey(w.due, id)
		return err == nil && w.removed && k == rk && !w.at.Before(from) && !w.at.After(to) && !c.movedLocked(id, w.due, w.at, w.at)
	})
}

// movedLocked reports whether a mover removed the row of id due at due
// from the schedule between from and to.
func (c *checker) movedLocked(id string, due, from, to time.Time) bool {
	return slices.ContainsFunc(c.moved[id], func(m movedRow) bool {
		return sameDue(m.due, due) && !m.at.Before(from) && !m.at.After(to)
	})
}

// sentMsg is a message of task id a worker put on a queue: when, the
// due time it carries, when the traffic-cop pass that sent it began
// (Envelope.Enqueued, on the worker's clock) and whether it carries an
// early-send token. (A message of a run's end alone is not one: it
// carries the envelope of a message sent before.)
type sentMsg struct {
	id                 string
	at, due, passBegan time.Time
	token              bool
	// series: an occurrence of a series; gen: the term (shard epoch)
	// of the mover that sent it, 0 when no mover did; shard: the
	// schedule partition of its row (messages sent early name it); proc:
	// the process that sent it.
	series      bool
	gen         int64
	shard, proc string
}

// earlyKey is one mover's term: the process, the shard and the term's
// generation that its messages carry.
type earlyKey struct {
	proc, shard string
	gen         int64
}

// sent records messages the service took from a worker.
func (c *checker) sent(ms []sentMsg) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.w.now()
	for _, m := range ms {
		m.at = now
		c.sends[m.id] = append(c.sends[m.id], m)
		c.checkEarlyLocked(m)
	}
}

// checkEarlyLocked checks, under queue.max_depth, that the mover term that
// sent m a one-off task ahead of its due time (with an early-send token;
// a task moved now has none) has at most max_depth of them waiting:
// README's early room. A series' occurrences are left out (a series
// moved now sends its window's whatever the room), and so are messages
// due within the clocks' offset of now (a mover whose clock runs ahead
// forgets them that much sooner); an id sent again counts once, as the
// mover counts it.
func (c *checker) checkEarlyLocked(m sentMsg) {
	limit := c.w.plan.MaxDepth
	if limit <= 0 || !m.token || m.series || m.gen <= 0 || m.shard == "" {
		return
	}
	k := earlyKey{proc: m.proc, shard: m.shard, gen: m.gen}
	if c.early == nil {
		c.early = map[earlyKey]map[string]time.Time{}
	}
	set := c.early[k]
	if set == nil {
		set = map[string]time.Time{}
		c.early[k] = set
	}
	set[m.id] = m.due
	c.w.stats.fault("a task sent early under queue.max_depth")
	n := 0
	for id, due := range set {
		switch {
		case due.After(m.at.Add(c.offset)):
			n++
		case !due.After(m.at.Add(-c.offset)):
			delete(set, id)
		}
	}
	if n > limit {
		c.violate(InvEarlyDepth, "%s's mover of shard %s (term %d) had %d tasks sent ahead of their due time waiting when it sent %s (due %s), more than queue.max_depth %d",
			m.proc, m.shard, m.gen, n, m.id, c.at(m.due), limit)
	}
}

// sentLateLocked reports whether a traffic-cop pass read the row of id's
// version due at due before a change issued at from removed it (by to),
// and sent that version without an early-send token: the pass began by
// the removal (give or take the clocks' skew: a pass begun after it could
// not have read the row) and the row was not written again before the
// send. That is the race of a change with the move that the README
// allows, from when the mover reads the row until it removes it, longer
// while requests fail or the mover is stopped between the two (seed
// 66219: a pass's mark came before a reschedule, its send 8 s after it,
// and the old version ran beside the new). A row the change left, or one
// written again, is not excused.
func (c *checker) sentLateLocked(id string, due, from, to time.Time) bool {
	writes := c.rowWrites[id]
	for _, rm := range writes {
		if !rm.removed || !sameDue(rm.due, due) || rm.at.Before(from) || rm.at.After(to) {
			continue
		}
		if slices.ContainsFunc(c.sends[id], func(m sentMsg) bool {
			return !m.token && sameDue(m.due, due) && !m.passBegan.IsZero() &&
				!m.passBegan.After(rm.at.Add(c.offset)) && !writtenBetween(writes, due, rm.at, m.at)
		}) {
			return true
		}
	}
	return false
}

// writtenBetween reports whether writes hold a write (not a removal) of
// the row due at due after from and by to.
func writtenBetween(writes []rowWrite, due, from, to time.Time) bool {
	return slices.ContainsFunc(writes, func(w rowWrite) bool {
		return !w.removed && sameDue(w.due, due) && w.at.After(from) && !w.at.After(to)
	})
}

// cancelAcked records a delivery of run id acknowledged as cancelled
// without running.
func (c *checker) cancelAcked(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelAcks[id] = append(c.cancelAcks[id], c.w.now())
}

// cancelAckedLocked reports whether series id's occurrence due at o
// waited in the queue, never taken, until stop, and was then cancelled by
// it: no message of it was dequeued before stop, and a delivery of it was
// acknowledged as cancelled at or after stop (seed 12976: a low-priority
// occurrence waited two minutes behind slow handlers and higher levels,
// and a disable then cancelled it). However long it waited, the README
// lets a stop cancel an occurrence that has not started.
func (c *checker) cancelAckedLocked(id string, o, stop time.Time) bool {
	for run := range c.cancelAcks {
		if d, ok := occurrenceOf(run, id); !ok || !sameDue(d, o) {
			continue
		}
		if c.waitedUntilCancelledLocked(run, stop) {
			return true
		}
	}
	return false
}

// waitedUntilCancelledLocked reports whether the message of run waited in
// the queue, never taken, until stop, and was then cancelled by it: no
// message of it was dequeued before stop, and a delivery of it was
// acknowledged as cancelled at or after stop.
func (c *checker) waitedUntilCancelledLocked(run string, stop time.Time) bool {
	if first, ok := c.firstDequeue[run]; ok && first.Before(stop) {
		return false
	}
	return slices.ContainsFunc(c.cancelAcks[run], func(a time.Time) bool { return !a.Before(stop) })
}

// dequeued records the messages of runs (by task id) a dequeue returned.
func (c *checker) dequeued(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.w.now()
	for _, id := range ids {
		if _, ok := c.firstDequeue[id]; !ok {
			c.firstDequeue[id] = now
		}
	}
}

// unseen records the messages of runs (by task id) that a dequeue whose
// answer never reached its worker hid for visibility: they reappear only
// then, as at-least-once delivery says.
func (c *checker) unseen(ids []string, visibility time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.w.now()
	until := now.Add(visibility)
	for _, id := range ids {
		if until.After(c.hiddenUntil[id]) {
			c.hiddenUntil[id] = until
		}
	}
	c.noShowsLocked(ids, now)
}

// noShowsLocked records deliveries of runs (by task id) at now that came
// to nothing (noShows).
func (c *checker) noShowsLocked(ids []string, now time.Time) {
	for _, id := range ids {
		c.noShows[id] = append(c.noShows[id], now)
	}
}

// handedTwice records the messages of runs (by task id) that the queue
// service handed out and left visible (World.duplicateDelivery): a second
// taker's receipt makes the first one's stale, and that delivery may come
// to nothing.
func (c *checker) handedTwice(ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noShowsLocked(ids, c.w.now())
}

// hiddenUntilLocked returns until when a dequeue nobody saw hid the
// message of series id's occurrence due at o (zero when none did).
func (c *checker) hiddenUntilLocked(id string, o time.Time) time.Time {
	var until time.Time
	for run, at := range c.hiddenUntil {
		if d, ok := occurrenceOf(run, id); ok && sameDue(d, o) && at.After(until) {
			until = at
		}
	}
	return until
}

// occurrenceOf returns the due time of run, when it is an occurrence of
// series id ("{id}@{due}").
func occurrenceOf(run, id string) (time.Time, bool) {
	at := strings.LastIndex(run, "@")
	if at < 0 || run[:at] != id {
		return time.Time{}, false
	}
	d, err := time.Parse(time.RFC3339Nano, run[at+1:])
	return d, err == nil
}

// behindLocked reports whether no mover was there for series id when its
// occurrence o came due: a row of the series due before o was still in
// the schedule then (a mover removes a series' row as it sends the
// occurrence, before it is due), and the mover that removed it at last
// was not the one that removed the series' row before (a new leader or
// shard owner, or the first). Occurrences missed so are skipped, as the
// README says ("missed while no instance led"; seed 1336: the shard's
// owner was killed, and the next one resumed the series at its first
// occurrence after now). A mover that was there and late is not
// excused: every occurrence runs, a fast series catching up.
func (c *checker) behindLocked(id string, o time.Time) bool {
	rows := c.moved[id]
	for i, m := range rows {
		if m.due.Before(o) && m.at.After(o) && (i == 0 || rows[i-1].gen != m.gen) {
			return true
		}
	}
	return false
}

// holdSpan is a time a mover held back under queue.max_depth: from its
// log of holding back to its log of resuming, or to the end of its term
// (off zero: neither came before the run ended). A mover is one term
// (gen) of one process over its shards: a sharded worker runs one per
// shard, all logging through the process's logger, and a new term's
// mover starts afresh, not holding back.
type holdSpan struct {
	p       *proc
	gen     string
	shards  []string
	on, off time.Time
}

// What a mover's log says of its holding back (holdLog).
const (
	holdOn      = iota // holding back
	holdOff            // resuming
	holdControl        // in control: a new term of its shards began
)

// holdLog records a mover's log line of kind (holdOn, holdOff,
// holdControl) from p, naming the mover's term gen and its shards, and
// counts hold-backs in the coverage report. A term that begins over a
// shard ends the hold of any other mover of that shard: the old one is
// fenced off, and the new one moves unless it holds back itself.
func (c *checker) holdLog(p *proc, kind int, gen string, shards []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.w.now()
	if gen == "" || len(shards) == 0 {
		// Without them no resume or term could end its span, which would
		// then excuse every occurrence missed to the end of the run.
		c.violate(InvOccurrences, "%s's mover logged holding back or resuming without naming its term and shards (generation %q, shards %v): the checker cannot follow it", p.id, gen, shards)
		return
	}
	same := func(h holdSpan) bool { return h.p == p && h.gen == gen && slices.Equal(h.shards, shards) }
	switch i := slices.IndexFunc(c.holdSpans, func(h holdSpan) bool { return h.off.IsZero() && same(h) }); kind {
	case holdOn:
		c.w.stats.fault("mover held back (queue.max_depth)")
		if i < 0 {
			c.holdSpans = append(c.holdSpans, holdSpan{p: p, gen: gen, shards: shards, on: now})
		}
	case holdOff:
		if i >= 0 {
			c.holdSpans[i].off = now
		}
	case holdControl:
		c.endHoldsLocked(now, func(h holdSpan) bool {
			return !same(h) && slices.ContainsFunc(h.shards, func(s string) bool { return slices.Contains(shards, s) })
		})
	}
}

// endHoldsLocked ends at now the open hold spans that match.
func (c *checker) endHoldsLocked(now time.Time, match func(holdSpan) bool) {
	for i, h := range c.holdSpans {
		if h.off.IsZero() && match(h) {
			c.holdSpans[i].off = now
		}
	}
}

// heldBackPendingLocked reports whether series id's occurrence o may have
// been missed while a mover held back under queue.max_depth, and the
// series stopped before its row was moved again: a mover held back at
// some time from o to stop, and none moved a row of the series
// meanwhile. Missed while moving was held back, the overdue occurrence
// runs once moving resumes (README), not once the series has stopped
// (seed 114598: the leaders held back behind a burst for three minutes,
// and a bulk disable of the type came before any reached the series'
// row).
func (c *checker) heldBackPendingLocked(id string, o, stop time.Time) bool {
	// Only a mover of a shard the series' row was written in by then
	// held it back (a review's find: any mover's hold excused every
	// series). Rows written by no commit seen leave any shard possible.
	var shards []string
	for _, w := range c.rowWrites[id] {
		if !w.removed && w.at.Before(stop) && !slices.Contains(shards, w.partition) {
			shards = append(shards, w.partition)
		}
	}
	held := slices.ContainsFunc(c.holdSpans, func(h holdSpan) bool {
		return h.on.Before(stop) && (h.off.IsZero() || !h.off.Before(o)) &&
			(len(shards) == 0 || slices.ContainsFunc(h.shards, func(s string) bool { return slices.Contains(shards, s) }))
	})
	return held && !slices.ContainsFunc(c.moved[id], func(m movedRow) bool { return m.at.After(o) && m.at.Before(stop) })
}

// metLocked records in the coverage report that a change (cancel,
// replace) issued then met t while it was live: t's features meet the
// change's whether or not t then starts (c.mu held).
func (c *checker) metLocked(t *ti, change string, issued time.Time, moment []string) {
	end, ended := t.finalEnd()
	requeued := slices.ContainsFunc(t.requeued, func(q time.Time) bool { return q.After(end) })
	if !t.accepted || ended && !end.After(issued) && !requeued {
		return
	}
	fs := featureOf(t, leasecron.Task{})
	if slices.ContainsFunc(t.starts, func(r *runEv) bool { return r.outcome == "fail" }) {
		fs = append(fs, "retry") // it waits for its next attempt, or runs it
	}
	if !slices.Contains(fs, change) {
		fs = append(fs, change)
	}
	c.w.stats.meet(append(fs, moment...))
}

// replacedLocked records that t, a schedule with Replace, took the place of
// old's row.
func (c *checker) replacedLocked(old, t *ti) {
	_, cancelled := c.cancelledBy(old, t.returned)
	if at, doomed := c.doomedBy(old); doomed && !at.After(t.returned) {
		// Cancelled with a parent before the replace answered (seed
		// 7174: its --after parent was cancelled, and the task waiting
		// for it with --after-any was released then): the replace
		// schedules a task of its own.
		cancelled = true
	}
	if !old.returned.After(t.issued) && !cancelled && c.surelyPendingLocked(old, t) {
		// Its row was surely still pending (sent early at most, not
		// retired: a mover retires a row a pass or two before it is due,
		// and none was seen to): the replacement takes its place. A
		// replace that comes after the row was retired (seed 1223: a
		// slow pass retired it 15 s before it was due, 0.2 s before the
		// replace) schedules another task beside one already in the
		// queue (README: a change that races with the move). So does one
		// that comes after a cancel (or a bulk cancel that may have
		// reached it) removed the row (seed 1241: the old task's child
		// was cancelled with it, and stays so). Nor is the row pending
		// once the mover recorded its run queued: it sends the message
		// next and removes the row after, and a pass slowed by storage
		// faults reaches further ahead (2 × its last pass's time) and
		// takes longer to remove it (seed 15500: sent 8.6 s before due,
		// its row left 13 s, replaced in between).
		old.superseded, old.supersededBy = t.returned, t
		c.inheritLocked(old, t)
		return
	}
	// Due by now or nearly: its row may have been moved already, and the
	// replace then scheduled another task with the id. Or old's schedule
	// was still under way as the replace began: its insert may have come
	// after the replacement had been moved and had run (seed 1142).
	c.alternativeLocked(old, t)
}

// surelyPendingLocked reports whether every version of old — its due
// time as scheduled, and each a reschedule of it issued before the replace
// t answered moved it to — was surely still pending while t ran: due more
// than 5 s after t was issued, not seen removed by a mover nor recorded
// queued meanwhile, and not sent by a pass that had read its row before
// t removed it (sentLateLocked: seed 123763, a replace slowed by faults
// answered after the rescheduled version's due time, and a pass that read
// that row before the replace's commit sent it 1.2 s after; README: a
// change that races with the move may let the old version run once).
func (c *checker) surelyPendingLocked(old, t *ti) bool {
	dues := []time.Time{old.due}
	for _, r := range old.retimes {
		switch {
		case !r.issued.Before(t.returned):
		case !r.ok:
			return false // it may have moved old to a due time not known
		case c.movedLocked(old.id, r.from, old.issued, t.returned) || c.queuedByLocked(old.id, r.from, old.issued, t.returned):
			// Moved at the due time it had before: a change applied to
			// old while the replace was under way (retimed) came after
			// old's row was moved, and found the replacement's (sim seed
			// 143316, row 237: a run-now 5.6 s into a slow replace, its
			// new due time alone making a moved scheduling look surely
			// pending).
			return false
		default:
			dues = append(dues, r.to)
		}
	}
	for _, due := range dues {
		if !due.After(t.issued.Add(5*time.Second)) || c.movedLocked(old.id, due, old.issued, t.returned) ||
			c.queuedByLocked(old.id, due, old.issued, t.returned) || c.sentLateLocked(old.id, due, t.issued, t.returned) {
			return false
		}
	}
	return true
}

// alternativeLocked records that t may have taken old's place: a child
// waiting for the id, or a batch for old as its member, may hear of either
// one's end.
func (c *checker) alternativeLocked(old, t *ti) {
	old.shared, t.shared = true, true
	old.alts = append(old.alts, t)
	c.batchAltLocked(old, t)
}

// batchAltLocked records that t may have taken old's place in old's batch,
// when old is a member: the batch may hear of either one's end.
func (c *checker) batchAltLocked(old, t *ti) {
	if b := old.batch; b != nil && old.callbackOf == nil {
		if b.alt == nil {
			b.alt = map[*ti][]*ti{}
		}
		b.alt[old] = append(b.alt[old], t)
	}
}

// lastBeforeLocked reports whether old is the last live scheduling of
// its id issued before t: the product's replace reads the id's pending
// row first, and a later scheduling of the id pending beside old, not a
// member, is what t replaces. One that surely ended before t, was
// replaced itself, or may never have been written does not count.
func (c *checker) lastBeforeLocked(old, t *ti) bool {
	return !slices.ContainsFunc(c.byID[t.id], func(o *ti) bool {
		return o != t && o != old && o.accepted && o.superseded.IsZero() && o.issued.After(old.issued) && o.issued.Before(t.issued) &&
			!c.endedBeforeLocked(o, t.issued)
	})
}

// endedBeforeLocked reports whether t surely ended (succeeded, died, or
// cancelled by a cancel that answered) before at: what replaces it then
// is a task of its own.
func (c *checker) endedBeforeLocked(t *ti, at time.Time) bool {
	end, how := c.endedFor(t, true, at)
	return !end.IsZero() && end.Before(at) && how != howBeingCancelled
}

// inheritLocked makes the replacement of a pending task take its place:
// a replaced task keeps its batch and the tasks waiting for it (README,
// workflows).
func (c *checker) inheritLocked(old, t *ti) {
	if b := old.batch; b != nil {
		i := slices.Index(b.members, old)
		if i >= 0 && old.cancelUnderWay(t.returned) {
			// A cancel of the member was under way: it may have counted
			// the member's end before the replace wrote, and what
			// replaced it is then a task of its own (README: a member
			// that has already ended was counted), or it held the
			// replacement too and removed it (sim seed 162586, row 253:
			// the callback ran as the replacement began). The batch may
			// hear of either one's end.
			c.batchAltLocked(old, t)
			c.reparentLocked(old, t)
			return
		}
		t.batch = b
		if i >= 0 {
			b.members[i] = t
			// The schedulings that may have taken old's place before t did
			// (a replace answered while old's batch was under way: seed
			// 80978, whose replace ran and ended the member before a later
			// replace was taken for the pending member's) may still have:
			// the batch may have heard of their end.
			if alts := b.alt[old]; len(alts) > 0 {
				b.alt[t] = append(b.alt[t], alts...)
			}
		} else {
			c.batchAltLocked(old, t) // old took a member's place
		}
	}
	c.reparentLocked(old, t)
}

// reparentLocked makes the tasks waiting for old wait for t, its
// replacement.
func (c *checker) reparentLocked(old, t *ti) {
	for _, o := range c.tis {
		for i, p := range o.parents {
			if p == old {
				o.parents[i] = t
			}
		}
	}
}

// checkUniqueLocked: when t takes its unique key, at some moment within
// [from, at] (scheduled, or requeued from the dead letters), no other task
// of its type may hold it.
func (c *checker) checkUniqueLocked(t *ti, from, at time.Time, how string) {
	if t.spec.Unique == nil {
		return
	}
	for _, o := range c.tis {
		if o == t || o.spec.Unique == nil || o.spec.Type != t.spec.Type || o.spec.Unique.Key != t.spec.Unique.Key || !o.accepted {
			continue
		}
		// t was written at some moment in [from, at]: only a key held
		// from the one to the other was surely held when t took it (seed
		// 16496: a schedule answered 21 s late had been written at once,
		// before another task took the key while it waited between
		// attempts, its key free under its states).
		if !c.holdsBarCancelUnderWay(o, from) || !c.holdsBarCancelUnderWay(o, at) {
			continue
		}
		if o.cancelUnderWay(at) {
			// A cancel of o under way may have freed the key already
			// (seed 18079): its answer decides.
			o.uniqueRechecks = append(o.uniqueRechecks, uniqueCheck{t: t, from: from, at: at, how: how})
			continue
		}
		c.violateUniqueLocked(t, o, how)
	}
}

// uniqueCheck is a check of checkUniqueLocked left to the answer of a
// cancel of the key's holder.
type uniqueCheck struct {
	t        *ti
	from, at time.Time
	how      string
}

// recheckUniqueLocked makes the checks left to the answer of a cancel of
// o, now that it has answered: a cancel that did nothing (not found,
// already finished) left the key held all along.
func (c *checker) recheckUniqueLocked(o *ti) {
	for _, u := range o.uniqueRechecks {
		if c.holds(o, u.from) && c.holds(o, u.at) {
			c.violateUniqueLocked(u.t, o, u.how)
		}
	}
	o.uniqueRechecks = nil
}

func (c *checker) violateUniqueLocked(t, o *ti, how string) {
	c.violate(InvUnique, "%s (%s) %s while %s held key %s (%s)", t.id, t.spec, how, o.id, o.spec.Unique.Key, o.spec)
}

// holds reports whether t surely held its unique key at `at`, as far as
// the events show: pending before its first start, between attempts,
// running, and for its window after it ended; only in the states listed
// when they are given. Moments the record may lag behind the handler
// (between an attempt's end and its record) count as not held, and so do
// those after a cancel of it was issued, answered or still under way.
func (c *checker) holds(t *ti, at time.Time) bool {
	return c.holdsBarCancelUnderWay(t, at) && !t.cancelUnderWay(at)
}

// cancelUnderWay reports whether a cancel of t issued by at (in that
// very instant too) had not answered yet.
func (t *ti) cancelUnderWay(at time.Time) bool {
	return !t.cancelling.IsZero() && !t.cancelling.After(at)
}

// holdsBarCancelUnderWay is holds but for a cancel of t still under way.
func (c *checker) holdsBarCancelUnderWay(t *ti, at time.Time) bool {
	skew := c.skew
	if !at.After(t.returned) {
		return false
	}
	// A cancel issued by then, even in the same virtual instant, may have
	// freed the key already (seed 18079).
	if _, ok := c.cancelledBy(t, at.Add(time.Nanosecond)); ok || !t.superseded.IsZero() && at.After(t.superseded) {
		return false
	}
	if t.spec.Recurrence != "" {
		return true // a series holds its key for as long as it lasts
	}
	end, ended := t.finalEnd()
	narrow := t.spec.Unique.States != ""
	if narrow {
		// scheduled, queued, running: pending before the first start, and
		// during each attempt.
		if len(t.starts) == 0 || at.Before(t.starts[0].start) {
			return !ended || at.Before(end)
		}
		for _, r := range t.starts {
			if ended && !at.Before(end) && r.start.Before(end) {
				// An attempt begun before the task's end and still running
				// after it is a duplicate whose end is not its task's: a
				// worker whose claim lapsed records its late success over
				// the live claim of the worker that took the run over
				// (README, "At least once"; row 127), and the record says
				// succeeded while that other attempt runs on. A succeeded
				// task holds nothing under states without "succeeded"
				// (README, "Unique tasks"; row 171, seed 93978).
				continue
			}
			if !at.Before(r.start) && (r.end.IsZero() && r.outcome == "" || at.Before(r.end)) {
				// Another task that took the key while t waited between
				// attempts (its key free under these states) holds it
				// from then on: t's later attempts hold nothing (README,
				// "Unique tasks"; row 194, seed 117378: t82 took the key
				// while t78 was snoozed, died and was requeued while
				// t78's third attempt ran).
				return !c.keyTakenWhileItWaited(t, r)
			}
		}
		return false
	}
	// A requeue from the dead letters makes it live again, from some
	// moment between its issue and its answer, until it dies again: a
	// death after the requeue was issued may come before its answer
	// (seed 75550: a requeue answered 7 s late, its task brought back,
	// run and dead again 2 s before).
	for i, q := range t.requeued {
		if at.After(q) && (!ended || end.Before(t.requeuedFrom[i])) {
			return true
		}
	}
	if !ended {
		// Still live, unless its last attempt was cut short by a kill (the
		// record may say anything then).
		if n := len(t.starts); n > 0 && t.starts[n-1].outcome == "killed" {
			return false
		}
		return true
	}
	return at.Before(end.Add(t.spec.Unique.For - skew))
}

// keyTakenWhileItWaited reports whether a task other than o, of o's type
// and unique key, may have taken the key while o waited between attempts
// before r (its key free then under states that leave those out), since
// o last took the key: its first attempt, or the latest requeue that
// brought it back from the dead letters (which takes the key again). A
// take is a schedule (issued in a gap, or answered in one, or not
// answered), a requeue by id of the other's dead letter (whatever it
// answered but a refusal over a held key: its take comes before its
// other checks), or a bulk requeue of its type running in a gap after
// the other died. A take that lies wholly within o's attempts took
// nothing: o held the key then.
func (c *checker) keyTakenWhileItWaited(o *ti, r *runEv) bool {
	from := o.starts[0].start
	var died time.Time // o's last death before r
	for _, a := range o.starts {
		if a.outcome == "fail" && a.attempt >= o.maxAttempts() && a.end.Before(r.start) && a.end.After(died) {
			died = a.end
		}
	}
	if !died.IsZero() {
		from = died
		for _, w := range o.requeueTries {
			if w.from.After(from) && w.from.Before(r.start) {
				from = w.from
			}
		}
		for _, b := range c.bulks {
			if b.requeuesDeadOf(o.spec.Type) && b.started.Before(r.start) && b.started.After(from) {
				from = b.started
			}
		}
	}
	// The gaps: [from, r.start) less o's attempts that began before r (one
	// whose end is unknown, cut short by a kill, ends at once).
	type span struct{ from, to time.Time }
	gaps, at := []span{}, from
	for _, a := range o.starts {
		if a == r || !a.start.Before(r.start) {
			continue
		}
		end := a.end
		if end.IsZero() {
			end = a.start
		}
		if a.start.After(at) {
			gaps = append(gaps, span{at, a.start})
		}
		if end.After(at) {
			at = end
		}
	}
	if r.start.After(at) {
		gaps = append(gaps, span{at, r.start})
	}
	inGap := func(a, b time.Time) bool {
		return slices.ContainsFunc(gaps, func(g span) bool { return a.Before(g.to) && (b.IsZero() || b.After(g.from)) })
	}
	return slices.ContainsFunc(c.tis, func(t *ti) bool {
		if t == o || t.spec.Unique == nil || t.spec.Type != o.spec.Type || t.spec.Unique.Key != o.spec.Unique.Key {
			return false
		}
		if (t.accepted || t.ambiguous || t.returned.IsZero()) && inGap(t.issued, t.returned) ||
			slices.ContainsFunc(t.requeueTries, func(w requeueTry) bool { return !w.held && inGap(w.from, w.to) }) {
			return true
		}
		died, ok := t.firstDeath()
		return ok && slices.ContainsFunc(c.bulks, func(b bulkEv) bool {
			return b.requeuesDeadOf(t.spec.Type) &&
				(b.ended.IsZero() || died.Before(b.ended)) && inGap(latest(b.started, died), b.ended)
		})
	})
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// finalEnd is when t's task ended for good: its success, or the failure of
// its last attempt.
func (t *ti) finalEnd() (time.Time, bool) {
	for _, r := range t.starts {
		if r.outcome == "ok" {
			return r.end, true
		}
	}
	maxA := t.maxAttempts()
	var last time.Time
	for _, r := range t.starts {
		if r.outcome == "fail" && r.attempt >= maxA {
			last = r.end
		}
	}
	return last, !last.IsZero()
}

// firstDeath is when t's task first died: the failure of an attempt that
// used up its attempts, before any success.
func (t *ti) firstDeath() (time.Time, bool) {
	first, _, died := t.deaths()
	return first, died
}

// deaths returns when t first and last died (a requeued dead letter may
// die again), and whether it died and never succeeded.
func (t *ti) deaths() (first, last time.Time, died bool) {
	maxA := t.maxAttempts()
	for _, r := range t.starts {
		if r.outcome == "ok" {
			return time.Time{}, time.Time{}, false
		}
		if r.outcome == "fail" && r.attempt >= maxA {
			if first.IsZero() || r.end.Before(first) {
				first = r.end
			}
			if r.end.After(last) {
				last = r.end
			}
		}
	}
	return first, last, !first.IsZero()
}

func (t *ti) maxAttempts() int {
	if t.spec.MaxAttempts > 0 {
		return t.spec.MaxAttempts
	}
	return WorkerMaxAttempts
}

// started records an attempt beginning; the handler calls it first thing.
func (c *checker) started(p *proc, task leasecron.Task, pl payload) *runEv {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	ev := &runEv{runID: task.ID, due: task.Due, attempt: task.Attempt, proc: p, start: c.w.now(), workerStart: p.clock.Now(), startSeq: c.seq}
	c.runs = append(c.runs, ev)
	t := c.byInc[pl.Inc]
	if t == nil {
		c.violate(InvAccepted, "%s started %s (attempt %d) of no known scheduling (payload inc %d)", p.id, task.ID, task.Attempt, pl.Inc)
		return ev
	}
	ev.ti = t
	c.w.stats.feature(append(featureOf(t, task), c.w.moment(p)...))
	// Never early, on the worker's own clock (the consumer holds a message
	// until its due time by that clock).
	if ev.workerStart.Before(task.Due.Add(-time.Millisecond)) {
		c.violate(InvNeverEarly, "%s started %s at %s by its clock, due %s", p.id, task.ID, ev.workerStart.Format(time.RFC3339Nano), task.Due.Format(time.RFC3339Nano))
	}
	c.checkStartLocked(t, ev)
	t.starts = append(t.starts, ev)
	return ev
}

// continuesLocked reports whether ev is an attempt of an occurrence of
// the series t that had started before t was cancelled: a cancel stops
// the series and the occurrences in the queue that have not started, and
// one under way carries on, its retries too (README, recurring tasks;
// seed 1637). One whose record was claimed by then has started, though
// its handler begins later (seed 74562: a claim 4 s before the cancel
// was issued waited 15 s for its rate budget's slow answer; as seed 14895
// for a disable). So has one claimed while the cancel was under way, its
// record not cancelled before the claim: the cancel found it started and
// left it (seed 88193: a claim 0.36 s after the cancel was issued, whose
// handler began after the cancel returned; a disable's window is the same,
// checkDisabledLocked).
func (c *checker) continuesLocked(t *ti, ev *runEv) bool {
	if t.spec.Recurrence == "" {
		// A one-off task's run claimed before the cancel marked it had
		// started: the cancel marks it (its batch and children hear so)
		// and the README lets a claim made before the mark run. Its
		// handler begins within markedStartSlack of the mark: a claim not made
		// or confirmed within a second is confirmed before the handler,
		// and a cancel's mark refuses that (seed 95331: t8, rated, claimed
		// under a table fault window, began 7 s after the cancel answered
		// marked; fixed in queue/delivery.go's stillHeld).
		mark, ok := c.claimedBeforeMarkLocked(ev.runID, ev.due, ev.attempt, t.cancelled)
		return ok && !ev.start.After(mark.Add(markedStartSlack))
	}
	issued := t.cancelIssued()
	return c.startedByLocked(ev.runID, issued) || c.claimedAheadLocked(ev.runID, issued, t.cancelled) ||
		slices.ContainsFunc(t.starts, func(o *runEv) bool { return o.runID == ev.runID && o.start.Before(issued) })
}

// claimedAheadLocked reports whether the run runID's record was claimed
// (started, as startedByLocked reads it) within (from, to] — while a
// cancel of its series was under way — before any cancelled state it was
// given in that window: the cancel reached the record after the claim
// and, as the README says of an occurrence that has started, left it.
// A claim after a cancelled state is not one (the record refuses it).
func (c *checker) claimedAheadLocked(runID string, from, to time.Time) bool {
	for _, r := range c.runStates[runID] {
		switch {
		case !r.at.After(from):
			continue
		case r.at.After(to):
			return false
		}
		switch r.state {
		case leasecron.RunCancelled:
			return false
		case leasecron.RunRunning, leasecron.RunFailed:
			return true
		case leasecron.RunSnoozed:
			if r.attempts > 0 {
				return true
			}
		}
	}
	return false
}

// claimedBeforeMarkLocked reports whether the record of the run runID's
// scheduling due then said running, claimed for attempt, when a cancel
// first recorded it cancelled (mark), no later than to (the cancel's answer):
// that attempt's claim stood when the cancel marked the run. A claim
// after the cancelled state is not one (the record refuses it), nor is a
// run failed or snoozing at the mark (the mark stops its next attempt).
func (c *checker) claimedBeforeMarkLocked(runID string, due time.Time, attempt int, to time.Time) (mark time.Time, ok bool) {
	claimed := false
	for _, r := range c.runStates[runID] {
		switch {
		case r.at.After(to):
			return time.Time{}, false
		case !sameDue(r.due, due):
			continue
		case r.state == leasecron.RunCancelled:
			return r.at, claimed
		}
		claimed = r.state == leasecron.RunRunning && r.attempts == int64(attempt)
	}
	return time.Time{}, false
}

// markedStartSlack bounds how long after a cancel's mark the handler of a run
// claimed before it may begin: the consumer confirms a claim older than
// a second (queue's claimFresh) before the handler, within half a second
// of the pause and rate checks (queue's pauseRecheck), and the rest is
// room for the handler's own start.
const markedStartSlack = 2500 * time.Millisecond

// takenBackRanLocked reports whether ev starts a line of a ScheduleMany
// (schedule --file) that its call answered not written because the file
// was rolled back (README "Nothing half-applied": everything written is
// deleted again). README allows a line reported moved, maybe written or
// not deleted again to run, and one the traffic cop had sent but not yet
// removed when the roll-back deleted its row (row 193): one due within
// two minutes (the longest early window) of the answer is not checked.
// Nor is an id another scheduling used. (Issue 38, row 198: a line
// rescheduled or released while its file was written ran, reported not
// written.)
func (c *checker) takenBackRanLocked(t *ti, ev *runEv) bool {
	if !t.ambiguous || t.op == nil || t.op.Kind != OpMany || t.refusal == nil || t.returned.IsZero() || t.id == "" || len(c.byID[t.id]) != 1 {
		return false
	}
	msg := t.refusal.Error()
	if !errors.Is(t.refusal, schedule.ErrNotWritten) || errors.Is(t.refusal, schedule.ErrMovedBeforeRollback) ||
		!strings.Contains(msg, "rolled back") || strings.Contains(msg, "may ") || strings.Contains(msg, "could not") {
		return false
	}
	return ev.due.After(t.returned.Add(2 * time.Minute))
}

// landedAfterMoveLocked reports whether t's row was written after the
// traffic cop moved the row of old, a replace that answered first: a row
// of t's due time written since that move, while t was on its way.
func (c *checker) landedAfterMoveLocked(t, old *ti) bool {
	for _, m := range c.moved[old.id] {
		if !sameDue(m.due, old.due) || m.at.Before(old.issued) || m.at.After(t.returned) {
			continue
		}
		if slices.ContainsFunc(c.rowWrites[t.id], func(w rowWrite) bool {
			return !w.removed && sameDue(w.due, t.schedDue) && !w.at.Before(m.at) && !w.at.After(t.returned)
		}) {
			return true
		}
	}
	return false
}

// since is when t's schedule was issued: with its answer, the moment
// the answer names (issued); before it, when it was tried.
func (t *ti) since() time.Time { return cmp.Or(t.issued, t.tried) }

// cancelIssued is when the cancel that returned at t.cancelled (non-zero)
// was issued: from then on it may have taken effect.
func (t *ti) cancelIssued() time.Time {
	if !t.cancelTry.IsZero() && t.cancelTry.Before(t.cancelled) {
		return t.cancelTry
	}
	return t.cancelled
}

// afterCheck is a start whose parent's end is checked at the end of the
// run (checker.afterLater).
type afterCheck struct {
	t, parent *ti
	ev        *runEv
}

// checkParentLocked checks that the start ev of t came after its parent
// pt ended as t's --after or --after-any requires.
func (c *checker) checkParentLocked(t *ti, ev *runEv, pt *ti) {
	end, how := c.parentEnd(pt, t.spec.AfterAny, ev.start, t.issued)
	if end.IsZero() || ev.start.Before(end) {
		c.violate(InvAfter, "%s started at %s before its parent %s had ended as %s requires (%s)", ev.runID, c.at(ev.start), pt.id, afterWord(t.spec.AfterAny), how)
	}
}

// checkRerunLocked checks that t's start ev is no second run of a run
// that succeeded, but in the documented windows.
func (c *checker) checkRerunLocked(t *ti, ev *runEv) {
	for _, o := range t.starts {
		if o.runID == ev.runID && o.outcome == "ok" && !o.end.After(ev.start) && o != ev && !c.troubled(o.proc, o.start, o.end.Add(45*time.Second)) &&
			!(!sameDue(o.due, ev.due) && (c.racedMoveLocked(t, o.due) || c.racedMoveLocked(t, ev.due) ||
				c.lateWriteLocked(t, o.due) || c.lateWriteLocked(t, ev.due))) {
			// (Two versions of a rescheduled task, one moved as the
			// reschedule changed its row, may each run once: seed 1043.
			// So may the version the task's own schedule wrote again:
			// seed 13477.)
			c.violate(InvNoRerun, "%s started on %s (attempt %d) after it succeeded on %s at %s, which was neither killed, frozen nor struck by a fault then",
				ev.runID, ev.proc.id, ev.attempt, o.proc.id, c.at(o.end))
			break
		}
	}
}

// retimeIssued records a reschedule or run-now of id under way (retimed
// records its answer).
func (c *checker) retimeIssued(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retiming == nil {
		c.retiming = map[string]int{}
	}
	c.retiming[id]++
}

// finalRerun makes the checks of starts against an earlier success that
// waited for a change of the id under way to answer (row 256, seed
// 164153: a reschedule issued while the task's message for now was on
// its way answered 9 s later; the old version ran, then the new one, and
// the check at the second start knew nothing of the change yet).
func (c *checker) finalRerun() {
	for _, ev := range c.rerunLater {
		c.checkRerunLocked(ev.ti, ev)
	}
}

// finalAfter makes the parent checks that waited for their parent's file
// to answer. A child of the same file that the roll-back took back whole
// is not released by that roll-back's end of its parent: the roll-back
// takes back a line waiting for another line of its file before that one
// (README, "Nothing half-applied"; row 234).
func (c *checker) finalAfter() {
	for _, a := range c.afterLater {
		if a.t.op == a.parent.op && takenBackWhole(a.t.refusal) {
			c.ownFile = a.t.op
		}
		c.checkParentLocked(a.t, a.ev, a.parent)
		c.ownFile = nil
	}
}

// takenBackWhole reports whether err, a line's answer from a file that
// failed, says the roll-back took the line back with nothing of it left:
// not moved to the queue, not standing, not unknown.
func takenBackWhole(err error) bool {
	return errors.Is(err, schedule.ErrNotWritten) && !errors.Is(err, schedule.ErrMovedBeforeRollback) &&
		strings.Contains(err.Error(), "the batch was rolled back: ")
}

// checkStartLocked checks what must hold the moment an attempt starts.
func (c *checker) checkStartLocked(t *ti, ev *runEv) {
	now := ev.start
	// An occurrence moved before a cancel done in part may run once: one
	// due by then, or sent early within the longest early window.
	movedBefore := !t.cancelPart.IsZero() && ev.due.Before(t.cancelPart.Add(2*time.Minute))
	if !t.cancelled.IsZero() && now.After(t.cancelled) && !c.continuesLocked(t, ev) && !movedBefore && !c.lateWriteLocked(t, ev.due) &&
		!c.writtenAfterCancelLocked(t) {
		c.violate(InvCancelled, "%s started on %s after a cancel returned at %s", ev.runID, ev.proc.id, c.at(t.cancelled))
	}
	c.checkRowGoneLocked(t, ev)
	if c.takenBackRanLocked(t, ev) {
		c.violate(InvCancelled, "%s started on %s (due %s), a line its file answered at %s was taken back: %v",
			ev.runID, ev.proc.id, ev.due.Format(time.RFC3339Nano), c.at(t.returned), t.refusal)
	}
	if r := t.supersededBy; r != nil && now.After(t.superseded) && len(t.starts) == 0 {
		// A replaced task's old scheduling must not run once the replace
		// returned (an early-sent message of it is stale), but where a
		// pass that read its row before the replace removed it sent it
		// after (README: a change that races with the move may let the
		// old version run once; seed 123763, sent 1.2 s after the
		// replace answered). Run so, the batch and the children that
		// the replace handed to the replacement may hear of its end too.
		switch {
		case !c.sentLateLocked(t.id, ev.due, r.issued, t.superseded):
			c.violate(InvCancelled, "%s (scheduling %d) started on %s after it was replaced at %s", ev.runID, t.inc, ev.proc.id, c.at(t.superseded))
		case !slices.Contains(r.alts, t):
			c.alternativeLocked(r, t)
		}
	}
	// Another attempt of the same run still running elsewhere?
	for _, o := range t.starts {
		if o.runID == ev.runID && o.proc != ev.proc && o.outcome == "" && !c.troubled(o.proc, o.start, now) {
			c.violate(InvNoTwoAtOnce, "%s started on %s while %s still ran it (since %s)", ev.runID, ev.proc.id, o.proc.id, c.at(o.start))
		}
	}
	// The version a reschedule or run-now moved away from, started after
	// the change answered (README: the task runs once, at its new time),
	// but where the change raced the version's move or the schedule's own
	// write landed again after it.
	if t.spec.Recurrence == "" && !c.racedMoveLocked(t, ev.due) && !c.lateWriteLocked(t, ev.due) {
		if r, ok := c.movedAwayLocked(t, ev); ok {
			c.violate(InvCancelled, "%s started on %s at its old due time %s, which a change answered at %s had moved",
				ev.runID, ev.proc.id, ev.due.Format(time.RFC3339Nano), c.at(r.returned))
		}
	}
	// Run again after it succeeded? (With a change of the id under way,
	// whether it raced the earlier version's move is known only once it
	// answers: row 256.)
	if c.retiming[t.id] > 0 {
		c.rerunLater = append(c.rerunLater, ev)
	} else {
		c.checkRerunLocked(t, ev)
	}
	// Parents.
	for _, pt := range t.parents {
		if pt.returned.IsZero() && pt.op != nil && pt.op.Kind == OpMany {
			// A line of a file still under way: a roll-back may take it
			// back and so end it (rolledBackLocked), which is known only
			// once the file answers (sim seed 142826, row 234: a child
			// --after-any a line of its own file started while the file,
			// failed, was taking its lines back). Checked at the end.
			c.afterLater = append(c.afterLater, afterCheck{t: t, parent: pt, ev: ev})
			continue
		}
		c.checkParentLocked(t, ev, pt)
	}
	// A batch's callback: after every member ended.
	if b := t.callbackOf; b != nil {
		for _, m := range b.members {
			if end, how := c.memberEnd(b, m, now); end.IsZero() || now.Before(end) {
				c.violate(InvBatch, "callback %s of batch %s started at %s before member %s ended (%s)", ev.runID, b.id, c.at(now), m.id, how)
				break
			}
		}
	}
}

// finalWindows checks the starts against pauses and disables once every
// operation has answered: a start may come a moment before the answer of
// the resume or enable that allowed it.
func (c *checker) finalWindows() {
	for _, ev := range c.runs {
		if ev.ti == nil {
			continue
		}
		c.checkPausedLocked(ev.ti, ev)
		c.checkDisabledLocked(ev.ti, ev)
	}
}

func afterWord(any bool) string {
	if any {
		return "--after-any"
	}
	return "--after"
}

// endedFor returns when t ended in a way that releases a child: success
// (any end with after-any: success, death or cancellation), as far as the
// events show by `by`. A cancellation may have come from a cancel that
// failed to answer, or from a bulk cancel of its type under way: any
// moment after those began counts.
func (c *checker) endedFor(t *ti, any bool, by time.Time) (time.Time, string) {
	if !t.cancelled.IsZero() && len(t.starts) > 0 {
		// Cancelled after its move: the run ends cancelled the moment the
		// cancel returns, even if a handler it had already started then
		// succeeds (README, workflows; seed 1723: its --after child was
		// cancelled with it, and the batch counted both). That moment
		// counts: the cancel told the batch and the children before it
		// returned (row 195, seed 117028: issued, answered and the
		// callback run in one instant).
		at := t.cancelIssued()
		switch {
		case !any:
			return time.Time{}, "it was cancelled"
		case !at.After(by):
			return at, "cancelled"
		}
	}
	for _, r := range t.starts {
		if r.outcome == "ok" {
			return r.end, "succeeded"
		}
	}
	if !any {
		return time.Time{}, "it has not succeeded"
	}
	if end, ok := t.firstDeath(); ok {
		// Its first death, not its last: that is when its --after
		// children were cancelled and its batch counted it, and a requeue
		// of the dead letter does not take either back (seed 6112: a
		// parent requeued and dead again at 8 min; a replace of its child
		// at 5 min, which succeeded, was taken for the child's end).
		return end, "dead"
	}
	if end, ok := c.recordedDeathLocked(t, by); ok {
		// Set aside by the crash guard: no attempt failed, but its
		// record says dead, and its batch and --after children were
		// told so then (row 170, seed 92773).
		return end, "dead without a failing attempt (the crash guard)"
	}
	// Cancelled, or cancelled with a parent that did not succeed: the
	// earlier of the two (seed 137206: a parent of a file's chain was
	// cancelled with its own parent at 40 s, and a bulk cancel of its
	// type at 4 min 54 s was taken for its end; a scheduling of its id
	// that succeeded in between was then taken for the end its --after
	// child waited for, and the child's cancel for a violation).
	// A cancel counts from the instant it was issued: it tells the batch
	// and the children before it answers, and the storage requests in
	// between take no virtual time, so what it released may start in
	// that instant (row 249, seed 156200: a cancel issued late, its
	// client's operations held up behind a worker's restart, and the
	// callback it released started in the instant it was issued).
	at, how := time.Time{}, ""
	if x, ok := c.cancelledBy(t, by.Add(time.Nanosecond)); ok {
		at, how = x, "cancelled"
	}
	if x, ok := c.doomedBy(t); ok && (at.IsZero() || x.Before(at)) {
		at, how = x, "cancelled with a parent"
	}
	if !at.IsZero() {
		return at, how
	}
	if at, ok := c.rolledBackLocked(t, by); ok {
		return at, "cancelled by its file's roll-back"
	}
	if !t.cancelling.IsZero() && !t.cancelling.After(by) {
		// A cancel under way may have taken effect already (seed 1330:
		// the callback of a batch whose member's cancel had counted it,
		// answered seven seconds later).
		return t.cancelling, howBeingCancelled
	}
	return time.Time{}, "it has not ended"
}

// recordedDeathLocked returns when the run record of t was first given a
// dead state row of t's due time, by `by`, for a death no failing attempt
// shows: the crash guard's, which sets aside a message delivered
// MaxAttempts+CrashMargin times without an outcome recorded (workers
// killed on it; a snooze whose message's visibility was lost records
// none either), records the run dead and tells its batch and dependents
// (queue/doc.go, queue.Options.CrashMargin). Only a death the final check
// accepts counts (finalTasks): its handler fails, or an attempt of it was
// cut short or met a fault (mayDie). Issue 38, row 170, seed 92773: a
// member of one attempt, killed twice and snoozed once with its
// visibility lost, set aside dead, and its batch's callback taken for
// early.
func (c *checker) recordedDeathLocked(t *ti, by time.Time) (time.Time, bool) {
	if !c.mayDie(t) {
		return time.Time{}, false
	}
	return c.recordedLocked(t, leasecron.RunDead, by, true)
}

// mayDie reports whether a death of t is one the README allows: its
// handler fails, or an attempt of it was cut short or met a fault, or a
// delivery of its message came to nothing for a fault's sake (README,
// the crash guard: a dequeue whose answer was lost, or one the queue
// service handed out again, counts as a delivery; seed 150469), or
// whether it was scheduled at all is not known.
func (c *checker) mayDie(t *ti) bool {
	return t.spec.Behaviour.Fail != 0 || c.anyTroubled(t) || t.ambiguous || c.noShowBeforeDeathLocked(t)
}

// noShowBeforeDeathLocked reports whether a delivery of t's message came
// to nothing for a fault's sake (noShows) after t was tried, before its
// death was recorded and before it was replaced, and the death is the
// crash guard's as far as its dead letters tell (their reasons are read
// at the end; none yet, or none left, tells nothing).
func (c *checker) noShowBeforeDeathLocked(t *ti) bool {
	if len(c.noShows[t.id]) == 0 {
		return false // (mayDie is asked at every recorded death: no scan)
	}
	died, dead := c.recordedLocked(t, leasecron.RunDead, c.w.now(), false)
	if !slices.ContainsFunc(c.noShows[t.id], func(at time.Time) bool {
		return !at.Before(t.tried) && (!dead || at.Before(died)) && (t.superseded.IsZero() || at.Before(t.superseded))
	}) {
		return false
	}
	why := c.deadWhy[t.id]
	return len(why) == 0 || slices.ContainsFunc(why, func(w string) bool { return strings.Contains(w, "without an outcome being recorded") })
}

// recordedLocked returns when the run record of t was first committed in
// state st after t was issued, by `by`; ofDue asks that the row be of t's
// due time too.
func (c *checker) recordedLocked(t *ti, st leasecron.RunState, by time.Time, ofDue bool) (time.Time, bool) {
	for _, r := range c.runStates[t.id] {
		if r.state == st && !r.at.Before(t.issued) && !r.at.After(by) &&
			(!ofDue || t.dueIs(r.due)) {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// rolledBackLocked returns when the run record of t, a line of a file
// that answered an error, was committed cancelled, by `by`: a roll-back
// marks cancelled the runs of lines it could not take back (README,
// "Nothing half-applied"), and a task waiting for the id then finds it
// ended (sim seed 66036: a child --after-any a rolled-back line started
// once the other parent succeeded).
func (c *checker) rolledBackLocked(t *ti, by time.Time) (time.Time, bool) {
	if !t.ambiguous || t.op == nil || t.op.Kind != OpMany || t.op == c.ownFile {
		return time.Time{}, false
	}
	if at, ok := c.recordedLocked(t, leasecron.RunCancelled, by, false); ok {
		return at, true
	}
	return c.takenBackLocked(t, by)
}

// takenBackLocked returns when t's row, written by its file while the
// file was under way, was deleted again by `by` — not moved by a mover —
// with no row of the id written since: its roll-back took the row back,
// and a task waiting for the id finds neither a row nor a record of it,
// which the product reads as cancelled (sim seed 103454: a child
// --after-any a line whose file was rolled back started once the line's
// row was deleted; the line never ran). (An errored line's due time is not
// known: any row of the id counts.)
func (c *checker) takenBackLocked(t *ti, by time.Time) (time.Time, bool) {
	until := by
	if !t.returned.IsZero() && t.returned.Before(by) {
		until = t.returned
	}
	var wrote, at time.Time
	for _, w := range c.rowWrites[t.id] {
		switch {
		case w.at.Before(t.issued) || w.at.After(by):
		case !w.removed && wrote.IsZero() && !w.at.After(until):
			wrote = w.at
		case w.removed && !wrote.IsZero() && at.IsZero() && !c.movedLocked(t.id, w.due, w.at, w.at):
			at = w.at
		}
	}
	if at.IsZero() || slices.ContainsFunc(c.rowWrites[t.id], func(w rowWrite) bool { return !w.removed && !w.at.Before(at) && !w.at.After(by) }) {
		return time.Time{}, false
	}
	return at, true
}

// howBeingCancelled is endedFor's word for a task whose cancel is under
// way: it may have ended, not surely.
const howBeingCancelled = "being cancelled"

// parentEnd is endedFor of a parent, counting the schedulings of its id
// that may have taken its place (ti.alts): the first of them to end as the
// child requires.
func (c *checker) parentEnd(pt *ti, any bool, by, seen time.Time) (time.Time, string) {
	end, how := c.endedFor(pt, any, by)
	family := c.family(pt)[1:]
	// A replace of the id since pt may have taken its place before an
	// answer linked the two (ti.alts):
	//   - answered, while pt's own schedule has not (seed 5527: a batch's
	//     answer came 26 s late, and a replace of a member in between ran
	//     and released the member's children);
	//   - not answered yet, its replacement run (its write landed): once
	//     it answers it is pt's alternative (replacedLocked) or a
	//     scheduling again (seed 97681: the replace answered 9 s after
	//     the child started).
	for _, o := range c.byID[c.idOfLocked(pt)] {
		if o == pt || !o.spec.Replace || slices.Contains(family, o) {
			continue
		}
		answered := pt.returned.IsZero() && o.accepted && o.issued.After(pt.since())
		ran := o.returned.IsZero() && len(o.starts) > 0 && o.tried.After(pt.since())
		if answered || ran {
			family = append(family, o)
		}
	}
	if prev := c.unwrittenParentLocked(pt, seen); prev != nil {
		family = append(family, c.family(prev)...)
	}
	family = append(family, c.runBesideBulkCancelledLocked(pt, seen)...)
	for _, p := range family {
		if e, h := c.endedFor(p, any, by); !e.IsZero() && (end.IsZero() || e.Before(end)) {
			end, how = e, h
		}
	}
	return end, how
}

// unseenRow reports whether old is a row written without an id index
// that a scheduling t of its id does not see: unless t is due at the
// very same time, and so meets the row at its key (schedule.Client.Add
// then overwrites it for a replace).
func unseenRow(old, t *ti) bool {
	if !old.spec.Row {
		return false
	}
	// (At the row key's 100 ns, not sameDue's millisecond.)
	a, aerr := schedule.RowKey(old.schedDue, t.id)
	b, berr := schedule.RowKey(t.schedDue, t.id)
	return aerr != nil || berr != nil || a != b
}

// runBesideBulkCancelledLocked returns, when pt never started and a bulk
// cancel of its type issued before by (when a child waiting for the id
// was issued) may have removed it, the schedulings of the id accepted
// before pt whose runs had started, or were in the queue, by then and
// are of another type: the bulk cancel leaves such a run going and
// notes only pt's due time as cancelled on the id's record, so the
// record ends as that run does, and a child scheduled afterwards hears
// of that end (seed 108727: a running slow task replaced as limited, the
// replacement bulk-cancelled by type, the slow run succeeded; a child
// scheduled 30 s later found the id succeeded and started). The earlier run must still have been
// going when pt could first have been cancelled or moved, unless the
// bulk may not have written its end of pt by the time the child looked:
//   - pt's row removed by the bulk: a run that had ended by then left
//     its end on the record, and the bulk wrote a cancelled record over
//     it (runs.Store.CancelPendingOf) — after the row's delete, and not
//     at all when that write failed (the bulk then counts the item
//     failed), so a child scheduled before every bulk that may have
//     reached pt ended whole may still read the run's end;
//   - pt moved to the queue first, while the run went on (seed 108727):
//     pt waits noted beside the run from the pass that marked it, and the
//     bulk takes only that note off, so the record keeps the run's end
//     whenever it came (runs.Store.CancelOf).
func (c *checker) runBesideBulkCancelledLocked(pt *ti, by time.Time) []*ti {
	if len(pt.starts) > 0 || pt.spec.Recurrence != "" {
		return nil
	}
	at, ok := c.bulkReach("cancel-pending", pt.spec.Type, pt.issued)
	if !ok || !at.Before(by) {
		return nil
	}
	id := c.idOfLocked(pt)
	for _, m := range c.moved[id] {
		if pt.dueIs(m.due) && !m.at.Before(pt.issued) && m.at.Before(at) {
			at = m.at
		}
	}
	for _, m := range c.sends[id] {
		// (The pass that sent it marked it first: from its beginning, on
		// the sender's clock, up to offset off the true time. Not a send
		// early under a token: its run is recorded only when the mover
		// confirms it, or after the client's send.)
		if began := m.passBegan.Add(-c.offset); !m.token && pt.dueIs(m.due) && !m.at.Before(pt.issued) && began.Before(at) {
			at = began
		}
	}
	settled := c.bulkSettledLocked("cancel-pending", pt.spec.Type, pt.issued, by)
	var out []*ti
	for _, o := range c.byID[id] {
		going := func(r *runEv) bool {
			// Begun before pt, or its message in the queue by then (its
			// row moved, or its run recorded queued by whoever sent it):
			// the record was the run's either way (row 203,
			// seed 127869: a released --after child held back by its
			// rate limit was replaced, and began after the replace).
			queued := r.start.Before(pt.issued) || c.movedLocked(id, r.due, o.issued, pt.issued) || c.queuedByLocked(r.runID, r.due, o.issued, pt.issued)
			end := o.runEnd(r.runID)
			return queued && (!settled || end.IsZero() || !end.Before(at))
		}
		if o != pt && o.accepted && o.issued.Before(pt.issued) && o.spec.Type != pt.spec.Type && slices.ContainsFunc(o.starts, going) {
			out = append(out, o)
		}
	}
	return out
}

// runEnd returns when t's run runID ended, as far as its attempts show:
// its earliest success, or else, while no attempt runs, its last
// attempt's end (zero while one runs). A snooze, a failure or a killed
// attempt does not end the run: its record stays the run's until a
// later attempt ends it (row 202, seed 124818: a run snoozed before a
// bulk cancel reached the task beside it, which succeeded on its next
// attempt, after the bulk). An attempt left frozen does not hold the run
// open past another attempt's success.
func (t *ti) runEnd(runID string) time.Time {
	var ok, last time.Time
	running := false
	for _, r := range t.starts {
		switch {
		case r.runID != runID:
		case r.outcome == "ok":
			if ok.IsZero() || r.end.Before(ok) {
				ok = r.end
			}
		case r.end.IsZero():
			running = true
		case r.end.After(last):
			last = r.end
		}
	}
	switch {
	case !ok.IsZero():
		return ok
	case running:
		return time.Time{}
	}
	return last
}

// bulkSettledLocked reports whether every bulk operation of kind that may
// have reached a task of typ scheduled at issued was seen to end, whole
// (nothing failed), before by: what it wrote of that task was written by
// then.
func (c *checker) bulkSettledLocked(kind, typ string, issued, by time.Time) bool {
	for _, b := range c.bulks {
		if b.kind != kind || b.typ != "" && b.typ != typ {
			continue
		}
		if _, ok := b.reaches(issued); ok && (b.failed || b.ended.IsZero() || !b.ended.Before(by)) {
			return false
		}
	}
	return true
}

// idOfLocked is the id pt's schedulings go by: its own, or the one its
// logical id (a generated id's name in the plan) stands for.
func (c *checker) idOfLocked(pt *ti) string {
	return cmp.Or(pt.id, c.logical[pt.spec.ID], pt.spec.ID)
}

// unwrittenParentLocked returns, when no row of pt's id was written
// between pt's issue and by (when a child waiting for the id was
// issued), the scheduling of the id accepted before pt: the child's call
// may have read the id before pt's row was there, and waits for what it
// found — that earlier scheduling, ended already perhaps (seed 68039: a
// parent's schedule held 5 s by faults; the child, scheduled meanwhile,
// found the id's earlier run succeeded and started at once). pt may not
// have answered yet: its issue is then when it was tried (seed 134818: a
// replace held 10 s by faults, whose issue, still unset, was read as the
// beginning of time, so the earlier scheduling's own row writes were
// taken for the replace's).
func (c *checker) unwrittenParentLocked(pt *ti, by time.Time) *ti {
	id := c.idOfLocked(pt)
	from := pt.since()
	if slices.ContainsFunc(c.rowWrites[id], func(w rowWrite) bool { return !w.removed && !w.at.Before(from) && !w.at.After(by) }) {
		return nil
	}
	var prev *ti
	for _, o := range c.byID[id] {
		if o != pt && o.accepted && o.issued.Before(from) && (prev == nil || o.issued.After(prev.issued)) {
			prev = o
		}
	}
	return prev
}

// firstEnded is the scheduling of pt's family (pt, or one that may have
// taken its place) that ended first, however it ended: the one whose end
// a child waiting for the id hears of (pt when none has ended).
func (c *checker) firstEnded(pt *ti) *ti {
	first, at := pt, time.Time{}
	for _, p := range c.family(pt) {
		if e, _ := c.endedFor(p, true, c.w.now()); !e.IsZero() && (at.IsZero() || e.Before(at)) {
			first, at = p, e
		}
	}
	return first
}

// family is pt and, transitively, the schedulings that may have taken its
// place (alts) or that a child waiting for its id may wait for (again).
func (c *checker) family(pt *ti) []*ti {
	out := []*ti{pt}
	for i := 0; i < len(out); i++ {
		for _, a := range slices.Concat(out[i].alts, out[i].again) {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// doomedBy returns when t was cancelled because a parent it waited for
// (--after) did not succeed: the parent's end.
func (c *checker) doomedBy(t *ti) (time.Time, bool) {
	if t.spec.AfterAny {
		return time.Time{}, false
	}
	for _, pt := range t.parents {
		p := c.firstEnded(pt)
		if _, ok := c.endedFor(p, false, c.w.now()); ok != "succeeded" {
			if end, how := c.endedFor(p, true, c.w.now()); !end.IsZero() && how != "succeeded" {
				return end, true
			}
		}
		// The scheduling of the id the child waited for instead, which
		// did not succeed (seed 17727: its batch counted the child
		// cancelled by it).
		if end, ok := c.deferredBadEnd(t, pt, p); ok {
			return end, true
		}
		// A parent a cancel may have reached while its handler ran stays
		// cancelled though the handler then succeeds, and dooms its
		// --after children as parentFailed allows (seed 4357: a bulk
		// cancel-pending of its type met its row, still pending beside
		// its early-sent message, and its batch's callback ran once the
		// child was counted cancelled).
		if at, ok := c.cancelledBy(p, c.w.now()); ok && len(p.starts) > 0 {
			return at, true
		}
	}
	return time.Time{}, false
}

// cancelledBy returns the earliest moment before by at which t may have
// been cancelled: by a cancel that returned, one that failed (it may have
// happened), or a bulk cancel of its type that started after t was
// scheduled — or of the type of a later scheduling of its id, which
// cancels t's run with it while t has not finished (README, cancel; seed
// 4055: a batch member held in the queue, and a bulk cancel-pending of
// another type reaching its id's new task).
func (c *checker) cancelledBy(t *ti, by time.Time) (time.Time, bool) {
	var at time.Time
	consider := func(x time.Time) {
		if !x.IsZero() && x.Before(by) && (at.IsZero() || x.Before(at)) {
			at = x
		}
	}
	consider(t.cancelled)
	consider(t.cancelTry)
	for _, o := range c.byID[t.id] {
		if o == t || o.issued.After(t.issued) {
			if at, ok := c.bulkReach("cancel-pending", o.spec.Type, o.issued); ok {
				consider(at)
			}
		}
	}
	return at, !at.IsZero()
}

// bulkCancelInPart reports whether a bulk cancel that counted failures
// (or was never seen to finish) may have reached t, a one-off task: one
// of its failures may be a cancel of t done in part.
func (c *checker) bulkCancelInPart(t *ti) bool {
	if t.spec.Recurrence != "" {
		return false
	}
	for _, b := range c.bulks {
		if b.kind != "cancel-pending" || b.typ != "" && b.typ != t.spec.Type || !(b.failed || b.ended.IsZero()) {
			continue
		}
		if _, ok := b.reaches(t.issued); ok && !c.retiredBefore(t, b.started) {
			return true
		}
	}
	return false
}

// retiredBefore reports whether the traffic cop removed t's row (of its
// due time) before at: a bulk operation begun then could not list it.
func (c *checker) retiredBefore(t *ti, at time.Time) bool {
	return slices.ContainsFunc(c.moved[t.id], func(m movedRow) bool { return m.due.Equal(t.due) && m.at.Before(at) })
}

// bulkReach returns the earliest moment a bulk operation of kind whose
// filter selects type typ may act on a task scheduled at issued (bulkEv's
// reaches), if one may.
func (c *checker) bulkReach(kind, typ string, issued time.Time) (time.Time, bool) {
	var first time.Time
	for _, b := range c.bulks {
		if b.kind != kind || b.typ != "" && b.typ != typ {
			continue
		}
		if at, ok := b.reaches(issued); ok && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// ended records an attempt's outcome.
func (c *checker) ended(ev *runEv, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	ev.end, ev.outcome, ev.endSeq = c.w.now(), outcome, c.seq
}

func (c *checker) at(t time.Time) string {
	return t.Sub(c.w.plan.Start).Truncate(time.Millisecond).String()
}

// handler is the handler every simulated type runs: it records its
// attempt and does what the task's payload says.
func (c *checker) handler(p *proc) leasecron.Handler {
	return func(ctx context.Context, task leasecron.Task) error {
		if p.killed() {
			return errKilled
		}
		var pl payload
		if err := json.Unmarshal(task.Payload, &pl); err != nil {
			return fmt.Errorf("sim: payload %q: %w", task.Payload, err)
		}
		ev := c.started(p, task, pl)
		p.waitUnpaused(ctx)
		b := pl.B
		if b.Progress {
			_ = leasecron.Progress(ctx, 50, "half way")
		}
		if err := runFor(ctx, p, b.Sleep, func(how string) { c.ended(ev, how) }); err != nil {
			return err
		}
		c.mu.Lock()
		key := task.ID
		snoozed := 0
		if ev.ti != nil {
			snoozed = ev.ti.snoozes[key]
			if b.Snooze > 0 && snoozed < b.Snoozes {
				ev.ti.snoozes[key]++
			}
		}
		c.mu.Unlock()
		switch {
		case b.Snooze > 0 && snoozed < b.Snoozes:
			c.ended(ev, "snooze")
			return leasecron.Snooze(b.Snooze)
		case b.Fail == -1 || task.Attempt <= b.Fail:
			c.ended(ev, "fail")
			return fmt.Errorf("sim: attempt %d fails as planned", task.Attempt)
		}
		c.ended(ev, "ok")
		return nil
	}
}

// runFor is a handler's work: d long (cut short when its context ends),
// then, once p runs again if frozen, nothing more if p was killed
// meanwhile. It ends the run (end: "cancelled" or "killed") and returns
// the handler's error when the handler stops there; nil to go on.
func runFor(ctx context.Context, p *proc, d time.Duration, end func(how string)) error {
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			end("cancelled")
			return ctx.Err()
		case <-t.C:
		}
	}
	p.waitUnpaused(ctx)
	if p.killed() {
		end("killed")
		return errKilled
	}
	return nil
}

// --- operations' answers -------------------------------------------------

// cancelIssued records a cancel of id under way since issued: until its
// answer, the task may have ended cancelled at any moment.
// It returns the scheduling the cancel is taken to aim at, for
// cancelled.
func (c *checker) cancelIssued(id string, issued time.Time) *ti {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.latestLocked(id)
	if t != nil && t.cancelling.IsZero() {
		t.cancelling = issued
	}
	if t != nil {
		t.cancelTried = true
	}
	return t
}

// markedInDoubt is what the answer of a cancel whose delete was in doubt
// and whose look afterwards failed says when it marked the run cancelled
// (leasecron's cancel; README: the task does not run).
const markedInDoubt = "its run record is marked cancelled, so it does not run"

// cancelled records the answer to a cancel of id issued then, aimed at t
// (cancelIssued's; nil: the id's latest scheduling now).
func (c *checker) cancelled(t *ti, id string, issued time.Time, res leasecron.CancelResult, err error, moment []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t == nil {
		t = c.latestLocked(id)
	}
	if t == nil {
		return
	}
	c.metLocked(t, "cancel", issued, moment)
	t.cancelling = time.Time{}
	defer c.recheckUniqueLocked(t) // once the answer is applied
	now := c.w.now()
	if errors.Is(err, leasecron.ErrIncomplete) && res.Removed && t.spec.Recurrence != "" {
		// Done in part (README, recurring tasks): the series is
		// cancelled; an occurrence already in the queue may run once.
		t.cancelPart, err = issued, nil
	}
	if errors.Is(err, leasecron.ErrIncomplete) && res.Removed && t.spec.Recurrence == "" && strings.Contains(err.Error(), markedInDoubt) {
		// README (cancel): a delete in doubt whose look afterwards
		// failed marks the run cancelled, and the task does not run: a
		// cancel that took effect (row 247).
		err = nil
	}
	switch {
	case err == nil && (res.Removed || res.Marked):
		// A scheduling that had not answered when the cancel did may
		// have been written after it, the cancel acting on an earlier
		// scheduling of the id instead (seed 4981): then it may have
		// been cancelled, not surely. So may one that answered after
		// the cancel was issued, when the cancel removed no row (it
		// read the rows before this one's was written, and marked the
		// earlier scheduling's run: seed 8669), unless its row was moved
		// before the cancel was issued, when the cancel reached its run
		// for sure.
		overlapped := t.returned.IsZero() || !res.Removed && t.returned.After(issued) && !c.movedLocked(id, t.due, time.Time{}, issued)
		inFlight := overlapped && slices.ContainsFunc(c.byID[id], func(o *ti) bool {
			_, ended := o.finalEnd()
			// (Not answered yet counts: its row may be written, its run
			// under way — seed 80178: the first scheduling's client
			// answered 58 ms after the cancel, which had marked that
			// scheduling's started run.)
			return o != t && (o.accepted || o.ambiguous || o.returned.IsZero()) && !ended
		})
		// A row written without an id index beside a scheduling of its
		// id through leasecron: the cancel finds that one by its index
		// and cancels it alone (README, the table contract; seed 128436:
		// a replace issued with the cancel landed first, the cancel
		// removed it, and the row ran).
		// Unless the row itself was removed meanwhile, not by a mover:
		// the cancel found no index (the task beside it moved, or
		// written after the cancel's read), scanned, and removed the row
		// (a review of the excuse).
		besideIndexed := t.spec.Row && slices.ContainsFunc(c.byID[id], func(o *ti) bool {
			_, ended := o.finalEnd()
			return o != t && !o.spec.Row && (o.accepted || o.ambiguous || o.returned.IsZero()) && !ended && !o.issued.After(now) && unseenRow(t, o)
		}) && !c.rowRemovedLocked(id, t.schedDue, issued, now)
		if t.cancelled.IsZero() && !inFlight && !besideIndexed {
			t.cancelled = now
		}
		if t.cancelTry.IsZero() {
			t.cancelTry = issued // it took effect somewhere in between
		}
		// The id has one run record: an earlier scheduling of it still
		// in the queue or under way may be the run the cancel marked
		// (README: cancel marks the run cancelled; seed 1687: a batch
		// member, its id scheduled again and that task cancelled).
		for _, o := range c.byID[id] {
			if o != t && (o.accepted || o.ambiguous || o.returned.IsZero()) && o.cancelTry.IsZero() {
				if _, ended := o.finalEnd(); !ended {
					o.cancelTry = issued
				}
			}
		}
	case err != nil && !errors.Is(err, leasecron.ErrNotFound) && !errors.Is(err, leasecron.ErrAlreadyFinished):
		if t.cancelTry.IsZero() {
			t.cancelTry = issued // it may have taken effect
		}
		t.cancelErred = true
		t.cancelIncomplete = t.cancelIncomplete || errors.Is(err, leasecron.ErrIncomplete) && res.Removed && t.spec.Recurrence == ""
	}
}

func (c *checker) retimed(id string, issued time.Time, it leasecron.Item, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retiming[id] > 0 {
		c.retiming[id]--
	}
	t := c.latestAtLocked(id, issued)
	if t == nil {
		return
	}
	targets := []*ti{t}
	if t.spec.Replace && t.returned.IsZero() {
		// A replace still under way may not have written its row yet:
		// the change may have moved the scheduling it is replacing (seed
		// 105438: a run-now answered while a replace issued before it
		// was under way; the old scheduling's row, moved to now, was sent
		// and ran just after the replace answered).
		if prev := c.replacingLocked(t); prev != nil {
			targets = append(targets, prev)
		}
	} else if !t.spec.Replace && !t.accepted {
		// A plain schedule of an id still pending is refused, its error
		// (or no answer yet) saying nothing of which: the change may have
		// moved the earlier scheduling, still pending, instead (sweep
		// seed 153605, row 248: a run-now answered after a schedule of a
		// reused id had failed in its lookup; the line of a file it had
		// moved ran at its old due time and at now).
		if prev := c.replacingLocked(t); prev != nil {
			if _, ended := prev.finalEnd(); !ended {
				targets = append(targets, prev)
			}
		}
	}
	for _, t := range targets {
		// An error may hide a change that was made: it counts as a
		// retime all the same.
		t.retimes = append(t.retimes, retime{issued: issued, returned: c.w.now(), from: t.due, ok: err == nil})
		if err == nil {
			t.retimes[len(t.retimes)-1].to = it.Due
			t.due = it.Due
		}
	}
}

// replacingLocked is the scheduling of t's id that t, a replace, would
// replace: the newest tried before it that may have been written and
// has not been replaced, nil when none.
func (c *checker) replacingLocked(t *ti) *ti {
	l := c.byID[t.id]
	for i := len(l) - 1; i >= 0; i-- {
		o := l[i]
		if o == t || o.tried.After(t.tried) || !o.superseded.IsZero() {
			continue
		}
		if o.accepted || o.ambiguous || o.returned.IsZero() {
			return o
		}
	}
	return nil
}

// sameDue reports whether two due times are one (as a client's answer and
// a delivery may round it differently).
func sameDue(a, b time.Time) bool { return a.Sub(b).Abs() < time.Millisecond }

// retime is a reschedule (or run-now) of a task: when it was issued and
// answered, and the due time it moved the task from.
type retime struct {
	issued, returned, from time.Time
	to                     time.Time // the due time it moved the task to (when ok)
	ok                     bool      // answered success
}

// movedAwayLocked returns the change of t that moved the version ev
// runs away from before ev started, when the checker can tell: a change
// that answered success, with no other change of t under way beside it
// nor an earlier one that answered an error (either makes the version it
// moved from unknown), that had not started before the change, and
// that was due more than a mover's pass and a slow request after the
// change answered (a pass that read it before may have been sending it:
// README, the race of a change with the move). A change whose taking
// back of the old message's confirmation met failing run records leaves
// the old message to run once (it logs so).
func (c *checker) movedAwayLocked(t *ti, ev *runEv) (retime, bool) {
	const pass = 20 * time.Second // a mover's pass, slowed by a slow request
	for i, r := range t.retimes {
		if !r.ok || r.from.IsZero() || !sameDue(r.from, ev.due) || sameDue(r.from, t.due) || !ev.start.After(r.returned) {
			continue
		}
		clear := true
		for j, o := range t.retimes {
			if j != i && (j < i && !o.ok || o.issued.Before(r.returned) && o.returned.After(r.issued)) {
				clear = false
			}
		}
		begun := slices.ContainsFunc(t.starts, func(o *runEv) bool { return sameDue(o.due, ev.due) && o.start.Before(r.issued) })
		if !clear || begun || !ev.due.After(r.returned.Add(pass+c.skew)) || hitBetween(c.runHits[t.id], r.issued, r.returned) {
			continue
		}
		return r, true
	}
	return retime{}, false
}

// racedMoveLocked reports whether t's version due at due may have been
// moved by a mover pass while a reschedule changed it (README: a change
// that races with the move itself may still let the old version run
// once): the version was due, or nearly, when the reschedule was
// answered, a mover was seen removing a row of the id meanwhile, or a
// pass that read the version's row before the change removed it sent it
// after the change was issued (sentLateLocked).
func (c *checker) racedMoveLocked(t *ti, due time.Time) bool {
	return slices.ContainsFunc(t.retimes, func(r retime) bool {
		from := r.from
		if from.IsZero() {
			// Issued before the schedule answered: it moved the version
			// the schedule wrote (its due time unknown until the answer,
			// but none a change moved the task to).
			from = t.schedDue
			if from.IsZero() && !slices.ContainsFunc(t.retimes, func(o retime) bool { return sameDue(o.to, due) }) {
				from = due
			}
		}
		return sameDue(from, due) && (!due.After(r.returned.Add(5*time.Second)) || c.movedLocked(t.id, from, r.issued, r.returned) ||
			c.sentLateLocked(t.id, from, r.issued, r.returned))
	})
}

// racedVersionsLocked counts t's versions other than its current one that
// may have run beside it (README, early enqueue and failover: a change
// that races with the move itself may still let the old version run
// once; or the schedule's own write landing again after a change) and
// had no attempt begun when the change that moved it was issued (one
// begun must be refused, exit 3: row 113). Each such version has a first
// attempt and a retry budget of its own (seed 150664: a reschedule 1.1 s
// after a raw row's insert raced the move; the old version failed its
// three attempts and the new one three more).
func (c *checker) racedVersionsLocked(t *ti) int {
	if t.spec.Recurrence != "" {
		return 0
	}
	var dues []time.Time
	for _, s := range t.starts {
		due := s.due
		if sameDue(due, t.due) || slices.ContainsFunc(dues, func(d time.Time) bool { return sameDue(d, due) }) ||
			!c.racedMoveLocked(t, due) && !c.lateWriteLocked(t, due) {
			continue
		}
		if slices.ContainsFunc(t.retimes, func(r retime) bool {
			return (r.from.IsZero() || sameDue(r.from, due)) &&
				!slices.ContainsFunc(t.starts, func(o *runEv) bool { return sameDue(o.due, due) && o.start.Before(r.issued) })
		}) {
			dues = append(dues, due)
		}
	}
	return len(dues)
}

// lateWriteLocked reports whether t's version due at due is the one its
// own schedule wrote, written again after a reschedule (or run-now) had
// changed it (README, delivery guarantees: the SDK's retry of a write
// whose answer was lost lands after the change, the new version having
// been moved meanwhile; seed 13477): the change answered before the
// schedule did (or it has not yet), and the row of that version, removed
// by then, was written again after the change's answer.
func (c *checker) lateWriteLocked(t *ti, due time.Time) bool {
	if t.schedDue.IsZero() || !sameDue(due, t.schedDue) {
		return false
	}
	return slices.ContainsFunc(t.retimes, func(r retime) bool {
		// (A change made before the schedule answered knows no due time
		// it moved the task from: r.from is zero.)
		return (r.from.IsZero() || sameDue(r.from, due)) && (t.returned.IsZero() || r.returned.Before(t.returned)) &&
			c.rewrittenLocked(t.id, due, r.returned)
	})
}

// writtenAfterCancelLocked reports whether t's own schedule wrote its
// row again after a cancel sent before the schedule answered had removed
// it (README, delivery guarantees: the schedule's write committed with
// its answer lost, the cancel removed the row, and the SDK's retry,
// meeting no row, wrote it again; seed 88325: `cancel t222` answered
// removed=true 0.5 s before `schedule t222 --after-any t221` answered
// success, and t222 ran; seed 146736: a raw series row's insert retried
// during a cancel answered 1.4 s before the cancel did, and the series
// ran on). A row of the id removed while the cancel was under way, and
// one written after that removal and no later than the schedule's
// answer: nothing else writes a row of an id that has none (a release or
// a change rewrites a row it found; another scheduling of the id runs as
// itself).
func (c *checker) writtenAfterCancelLocked(t *ti) bool {
	if t.cancelled.IsZero() || !t.accepted && !t.ambiguous || t.returned.Before(t.cancelIssued()) {
		return false
	}
	from := t.cancelIssued()
	removed := false
	for _, w := range c.rowWrites[t.id] {
		switch {
		case w.at.After(t.returned):
			return false
		case w.removed && !w.at.Before(from) && !w.at.After(t.cancelled):
			removed = true
		case !w.removed && removed:
			return true
		}
	}
	return false
}

// rewrittenLocked reports whether id's schedule row due at due was
// removed by at and written again after it.
func (c *checker) rewrittenLocked(id string, due, at time.Time) bool {
	removed := false
	for _, w := range c.rowWrites[id] {
		switch {
		case !sameDue(w.due, due):
		case w.removed && !w.at.After(at):
			removed = true
		case !w.removed && w.at.After(at) && removed:
			return true
		}
	}
	return false
}

func (c *checker) paused(ev pauseEv) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pauses = append(c.pauses, ev)
}

// resumedAll records the resume of every type at the end of the active
// phase.
func (c *checker) resumedAll(at time.Time) {
	c.paused(pauseEv{typ: TypePausable, issued: at, returned: at, ok: true, until: time.Time{}})
	c.mu.Lock()
	c.pauses[len(c.pauses)-1].typ = "resume:" + TypePausable
	c.mu.Unlock()
}

// checkPausedLocked: no task of a paused type starts once every worker
// has had the time to see the pause (worker.pause_check), until the pause
// lapses, is resumed, or is replaced by the next pause of the type (the
// latest pause sets its end).
func (c *checker) checkPausedLocked(t *ti, ev *runEv) {
	const pauseCheck = 5 * time.Second // queue.DefaultPauseCheck
	mine := c.pausesOfLocked(t.spec.Type)
	for i, p := range mine {
		if p.typ != t.spec.Type || !p.ok || c.resumedDuring(mine, p) {
			continue
		}
		// A delivery past its check may still start: one held the last
		// two seconds before its due time, or one whose claim is retried
		// through faults (troubled below).
		from := p.returned.Add(pauseCheck + 2*time.Second + c.skew + time.Second)
		to := time.Time{}
		if !p.until.IsZero() {
			to = p.until.Add(-c.skew)
		}
		if i+1 < len(mine) && (to.IsZero() || mine[i+1].issued.Before(to)) {
			to = mine[i+1].issued
		}
		for _, q := range mine {
			// A timed pause under way while p was may have been written
			// after it, and lapse at its own until (seed 70642: a pause
			// for 18 s, slowed, was written after the pause for good
			// asked while it was on its way, and the type ran on once it
			// lapsed).
			if q.typ == p.typ && q.issued != p.issued && q.issued.Before(p.returned) && (q.returned.IsZero() || q.returned.After(p.issued)) &&
				!q.until.IsZero() && (to.IsZero() || q.until.Add(-c.skew).Before(to)) {
				to = q.until.Add(-c.skew)
			}
		}
		if ev.start.After(from) && (to.IsZero() || ev.start.Before(to)) && !c.pauseTroubled(ev.proc, p.returned, ev.start) {
			c.violateAt(ev.start, InvPaused, "%s of paused type %s started on %s at %s (paused at %s, until %s)", ev.runID, t.spec.Type, ev.proc.id, c.at(ev.start), c.at(p.returned), c.atOr(to))
		}
	}
}

// pausesOfLocked are the pauses and resumes of typ, in the order they
// were issued.
func (c *checker) pausesOfLocked(typ string) []pauseEv {
	var mine []pauseEv
	for _, p := range c.pauses {
		if p.typ == typ || p.typ == "resume:"+typ {
			mine = append(mine, p)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].issued.Before(mine[j].issued) })
	return mine
}

// resumedDuring reports whether a resume among mine was under way while
// the pause p was: it read the state before p wrote it, and can have
// written its resume after p answered (a read-modify-write retried past a
// conflict), so p promises nothing (seed 10064: a resume whose write was
// slowed past the next pause ended it).
func (c *checker) resumedDuring(mine []pauseEv, p pauseEv) bool {
	return slices.ContainsFunc(mine, func(r pauseEv) bool {
		return r.typ == "resume:"+p.typ && r.issued.Before(p.returned) && r.returned.After(p.issued)
	})
}

// pausedDuringLocked reports whether a pause of typ was in force at some
// moment of [from, to]: from its answer to its end (its until, the next
// pause or resume of the type, or never).
func (c *checker) pausedDuringLocked(typ string, from, to time.Time) bool {
	mine := c.pausesOfLocked(typ)
	for i, p := range mine {
		if p.typ != typ || !p.ok && p.returned.IsZero() {
			continue
		}
		start, end := p.issued, p.until
		if i+1 < len(mine) && (end.IsZero() || mine[i+1].returned.Before(end)) {
			end = mine[i+1].returned
		}
		if start.Before(to) && (end.IsZero() || end.After(from)) {
			return true
		}
	}
	return false
}

func (c *checker) atOr(t time.Time) string {
	if t.IsZero() {
		return "resumed"
	}
	return c.at(t)
}

func (c *checker) disabled(id string, on bool, issued time.Time, err error) {
	partial := errors.Is(err, leasecron.ErrIncomplete)
	if partial {
		err = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.latestAtLocked(id, issued)
	if t == nil || t.spec.Recurrence == "" {
		return
	}
	now := c.w.now()
	n := len(t.disabled)
	if on && err != nil && t.disableTry.IsZero() {
		t.disableTry = issued
	}
	switch {
	case on && err == nil && (n == 0 || !t.disabled[n-1].to.IsZero()):
		d := window{issued: issued, from: now, partial: partial}
		for _, e := range t.enables {
			if !e.from.Before(issued) {
				// An enable answered after this disable was asked may
				// have been written after it (seed 70226: an enable slowed
				// by faults committed after the disable it was asked
				// before, and the series ran on, enabled) — and so may
				// one answered in the very instant it was asked (seed
				// 85604: a disable, a second disable and an enable held up
				// together and sent in one virtual instant).
				d.to = e.issued
			}
		}
		t.disabled = append(t.disabled, d)
	case !on && n > 0 && t.disabled[n-1].to.IsZero():
		// Enabled, or an enable that may have happened.
		t.disabled[n-1].to = issued
	}
	if !on {
		t.enables = append(t.enables, window{issued: issued, from: now})
	}
}

func (c *checker) checkDisabledLocked(t *ti, ev *runEv) {
	for _, d := range t.disabled {
		// An occurrence already under way when the series was disabled
		// finishes (its retries run); none starts afresh.
		begun := c.startedByLocked(ev.runID, d.from)
		for _, o := range t.starts {
			if o.runID == ev.runID && o.start.Before(d.from) {
				begun = true
			}
		}
		// Moved before a partial disable (due by then, or within the
		// mover's send-ahead): the README lets it run once.
		moved := d.partial && ev.due.Before(d.from.Add(30*time.Second))
		if !begun && !moved && ev.start.After(d.from) && (d.to.IsZero() || ev.start.Before(d.to)) {
			c.violateAt(ev.start, InvDisabled, "%s of series %s started on %s at %s, disabled at %s", ev.runID, t.id, ev.proc.id, c.at(ev.start), c.at(d.from))
		}
	}
}

func (c *checker) requeued(id string, issued time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.latestLocked(id)
	if t == nil {
		return
	}
	// A dead letter is a scheduling that died: the latest of the id that
	// did, when a later one has not (seed 7382: a replace of the id that
	// answered an error, and may never have been written, was taken for
	// the task the requeue brought back).
	if _, died := t.firstDeath(); !died {
		l := c.byID[id]
		for i := len(l) - 1; i >= 0; i-- {
			if _, died := l[i].firstDeath(); died {
				t = l[i]
				break
			}
		}
	}
	t.requeueTries = append(t.requeueTries, requeueTry{from: issued, to: c.w.now(), held: errors.Is(err, leasecron.ErrDuplicate)})
	if err != nil {
		t.requeueFailed = true
		if _, died := t.firstDeath(); died && !errors.Is(err, leasecron.ErrNotFound) && !errors.Is(err, queue.ErrNotRequeueable) {
			t.requeueMaybe = append(t.requeueMaybe, issued)
		}
		return
	}
	now := c.w.now()
	t.requeued, t.requeuedFrom = append(t.requeued, now), append(t.requeuedFrom, issued)
	c.checkUniqueLocked(t, now, now, "was requeued")
}

// bulk records an operation about to be started, and returns its index
// for bulkAnswered: it may act before its start answers (its task is
// picked up by a worker while the answer is still on its way; seed
// 13160: a bulk cancel counted a batch member cancelled and released the
// callback 9 s before the start's answer came).
func (c *checker) bulk(ev bulkEv) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bulks = append(c.bulks, ev)
	return len(c.bulks) - 1
}

// bulkAnswered records the start's answer for the operation at i: its id,
// and whether it may have started.
func (c *checker) bulkAnswered(i int, id string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bulks[i].id, c.bulks[i].ok = id, ok
}

// bulkEnded records when the operation id was seen finished, and whether
// it counted failures.
func (c *checker) bulkEnded(id string, at time.Time, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.bulks {
		if c.bulks[i].id == id && c.bulks[i].ended.IsZero() {
			c.bulks[i].ended, c.bulks[i].failed = at, failed
		}
	}
}

func (c *checker) newBatch(id string) *batch {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := &batch{id: id}
	c.batches[id] = b
	return b
}

// lookup checks that every task that should be pending is found by id.
func (c *checker) lookup(ctx context.Context, cl *leasecron.Client) {
	c.mu.Lock()
	now := c.w.now()
	var want []*ti
	for _, t := range c.tis {
		if !t.accepted || t.id == "" || len(t.starts) > 0 || c.mayBeCancelledLocked(t, now) || !t.superseded.IsZero() ||
			t.due.Before(now.Add(15*time.Second)) || c.latestLocked(t.id) != t || len(t.parents) > 0 {
			continue
		}
		want = append(want, t)
	}
	c.mu.Unlock()
	for _, t := range want {
		_, err := cl.Status(ctx, t.id)
		if errors.Is(err, leasecron.ErrNotFound) {
			c.mu.Lock()
			if len(t.starts) == 0 && !c.mayBeCancelledLocked(t, c.w.now()) {
				c.violate(InvLookup, "status %s: %v (scheduled at %s, due %s, never started)", t.id, err, c.at(t.returned), c.at(t.due))
			}
			c.mu.Unlock()
		}
	}
}

// mayBeCancelledLocked reports whether a cancel of t (its own, answered or
// not, or a bulk cancel that reaches it) may have removed it by now (seed
// 5480: a lookup while the task's cancel, slowed by faults, was still
// under way found it gone).
func (c *checker) mayBeCancelledLocked(t *ti, now time.Time) bool {
	_, cancelled := c.cancelledBy(t, now.Add(time.Nanosecond))
	return cancelled || t.cancelUnderWay(now)
}

// allEnded reads the status of every task's latest scheduling and reports
// whether each has ended (the series aside), and no malformed row may
// still be out of the movers' reach.
func (c *checker) allEnded(ctx context.Context, cl *leasecron.Client) bool {
	c.mu.Lock()
	var ids []string
	for id := range c.byID {
		ids = append(ids, id)
	}
	done := !c.badRowsDueLocked(c.w.now())
	c.mu.Unlock()
	sort.Strings(ids)
	for _, id := range ids {
		c.mu.Lock()
		t := c.latestLocked(id)
		if t != nil {
			t = c.writtenLastLocked(id, t) // the one finalTasks judges
		}
		c.mu.Unlock()
		if t == nil || t.spec.Recurrence != "" {
			continue
		}
		c.mu.Lock()
		prev, seen := c.status[id]
		c.mu.Unlock()
		if seen && ended(prev.State()) {
			continue // after the active phase nothing brings it back
		}
		st, err := cl.Status(ctx, id)
		if err != nil && !errors.Is(err, leasecron.ErrNotFound) {
			return false
		}
		c.mu.Lock()
		c.status[id] = st
		if c.quietWaitsForLocked(t, st.State()) {
			done = false
		}
		c.mu.Unlock()
	}
	return done
}

// quietWaitsForLocked reports whether the quiet phase goes on waiting
// for t, whose status shows state: for one not ended, and for one
// unknown that finalTasks would call lost. A task a cancel removed
// before it ran stays unknown, and nothing after the active phase
// brings it back (seed 300002 waited 16 virtual minutes for a row a bulk
// cancel had removed).
func (c *checker) quietWaitsForLocked(t *ti, state string) bool {
	switch state {
	case "succeeded", "dead", "cancelled":
		return false
	case "unknown":
		return !t.shared && c.lostIfUnknownLocked(t)
	}
	return true
}

func ended(state string) bool { return state == "succeeded" || state == "dead" || state == "cancelled" }

// final checks what can be checked only at the end.
func (c *checker) final() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.finalTasks()
	c.finalBadRows()
	c.finalWindows()
	c.finalAfter()
	c.finalRerun()
	c.finalLimits()
	c.finalBatches()
	c.finalBulk()
	c.retryBudget()
	c.requeuesBringBack()
	c.refusedRightly()
	c.refusedAsDuplicateRightly()
	c.finalSeries()
	c.checkFences()
	c.finalBoard()
	c.finalPayloads()
	sort.SliceStable(c.violations, func(i, j int) bool { return c.violations[i].At < c.violations[j].At })
	return c.violations
}

// payloadKept records that a consumer said something of task id that may
// leave its payload blob after its success (keptPayloadLogs): the blob's
// deletion failed, or the run had moved on.
func (c *checker) payloadKept(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keptPayloads[id] = true
}

// blobsLeft records the payload blobs left at the end of the run.
func (c *checker) blobsLeft(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.payloadBlobs = names
}

// finalPayloads: a one-off task's payload blob is deleted once its task
// succeeded (README, "Payloads over 24 KiB"). Checked only where nothing
// else may keep or need it: its id scheduled once, surely written, never
// cancelled (or tried), replaced, rescheduled or reached by a bulk
// cancel; status says it succeeded; no process that ran it was killed,
// frozen, stopped or drained from a minute before an attempt to a minute
// after it; and no consumer said of it that the blob's deletion failed
// or that the run had moved on (payloadKept: README says the blob is
// left over then, or another delivery answers for it). A message that
// comes back after the success deletes the blob as a duplicate: the
// settle waits up to 150 s for that before the blobs are listed.
func (c *checker) finalPayloads() {
	for _, l := range c.payloadsLeftLocked(c.payloadBlobs) {
		c.violateAt(l.t.starts[l.ok].end, InvPayloadGone, "%s (%s) succeeded and its payload blob %s is still there", l.t.id, l.t.spec, l.name)
	}
}

// leftPayload is a payload blob left after its task's success, and the
// task and its attempt that succeeded.
type leftPayload struct {
	name string
	t    *ti
	ok   int
}

// payloadsLeft reports whether any of the blobs names is one that
// finalPayloads would find left: what the settle waits for to go.
func (c *checker) payloadsLeft(names []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.payloadsLeftLocked(names)) > 0
}

// payloadsLeftLocked returns the blobs of names that finalPayloads finds
// left.
func (c *checker) payloadsLeftLocked(names []string) []leftPayload {
	var out []leftPayload
	for _, name := range names {
		rest := strings.TrimPrefix(name, payloadblob.Prefix)
		i := strings.LastIndexByte(rest, '-')
		if i <= 0 {
			continue
		}
		id := rest[:i]
		tis := c.byID[id]
		if len(tis) != 1 || c.keptPayloads[id] {
			continue
		}
		t := tis[0]
		if !t.accepted || t.ambiguous || t.spec.Recurrence != "" || t.spec.Replace || t.cancelTried || !t.cancelled.IsZero() ||
			!t.superseded.IsZero() || len(t.retimes) > 0 || len(t.again) > 0 || t.shared {
			continue
		}
		if _, reached := c.bulkReach("cancel-pending", t.spec.Type, t.issued); reached {
			continue
		}
		if st, ok := c.status[id]; !ok || st.State() != "succeeded" {
			continue
		}
		ok := slices.IndexFunc(t.starts, func(r *runEv) bool { return r.outcome == "ok" })
		if ok < 0 || slices.ContainsFunc(t.starts, func(r *runEv) bool {
			end := r.end
			if end.IsZero() {
				end = c.w.now()
			}
			return slices.ContainsFunc(c.notes[r.proc], func(n procNote) bool {
				return n.what != "started" && !n.at.Before(r.start.Add(-time.Minute)) && !n.at.After(end.Add(time.Minute))
			})
		}) {
			continue
		}
		out = append(out, leftPayload{name: name, t: t, ok: ok})
	}
	return out
}

// writtenLastLocked returns, instead of t (the latest scheduling of id by
// when it was tried), an earlier-tried one that was still under way when t
// was tried and answered success after it, when the last write of the id's
// schedule row is of that one's due time and not t's. A schedule --file
// holds an id only from its index rows' write, so a schedule of one of its
// ids tried meanwhile may be written, run and end before the file writes
// that line (README, Scheduling many tasks at once; seed 80188: the
// file's plain line, written after the pausable schedule of its id had
// succeeded, was then cancelled by a bulk cancel of plain tasks).
func (c *checker) writtenLastLocked(id string, t *ti) *ti {
	var last *rowWrite
	for i := range c.rowWrites[id] {
		if w := &c.rowWrites[id][i]; !w.removed {
			last = w
		}
	}
	if last == nil || last.of(t) {
		return t
	}
	for _, o := range c.byID[id] {
		if o != t && o.accepted && o.superseded.IsZero() && o.tried.Before(t.tried) &&
			o.returned.After(t.tried) && last.of(o) {
			return o
		}
	}
	return t
}

// of reports whether w can be the write of t's row: at t's due time, or,
// for a task waiting for parents, at the time a waiting row is kept at
// (seed 86172: a child tried before a plain schedule of its id and
// written after that one had run, then cancelled with its parent, was
// taken for the plain one).
func (w *rowWrite) of(t *ti) bool {
	return t.dueIs(w.due) || len(t.spec.After) > 0 && sameDue(w.due, schedule.MaxTime)
}

// dueIs reports whether due is t's due time, as it stands or as its
// schedule wrote it.
func (t *ti) dueIs(due time.Time) bool {
	return sameDue(due, t.due) || sameDue(due, t.schedDue)
}

// finalTasks: every task's latest scheduling has ended as it should.
func (c *checker) finalTasks() {
	for id := range c.byID {
		t := c.latestLocked(id)
		if t != nil {
			t = c.writtenLastLocked(id, t)
		}
		if t == nil || t.spec.Recurrence != "" {
			continue
		}
		if t.shared {
			continue // see ti.shared
		}
		st := c.status[id]
		state := st.State()
		switch state {
		case "succeeded":
			ok := false
			for _, r := range t.starts {
				if r.outcome == "ok" {
					ok = true
				}
			}
			// An earlier scheduling's success shows until this one is
			// recorded; the ambiguous ones may never have been.
			if !ok && !t.ambiguous && !c.anyOK(id) {
				c.violate(InvAccepted, "%s is recorded succeeded but no attempt of it succeeded (%s)", id, t.spec)
			}
		case "dead":
			// A latest scheduling cancelled before it started (a bulk
			// cancel reaches tasks scheduled while it walks) leaves the
			// record to the earlier one beside whose run it was noted,
			// and that one's death shows (seed 12400: a dying task's
			// requeued run, replaced while it worked, the replacement
			// cancelled by a bulk cancel begun just before).
			if len(t.starts) == 0 && c.deathOfEarlierShows(t) || c.earlierDeathAfterSuccess(t, st) {
				continue
			}
			if !c.mayDie(t) {
				c.violate(InvAtLeastOnce, "%s ended dead though its handler never fails and no attempt of it was cut short (%s)", id, t.spec)
			}
			// README (retries): a task dies once its attempts are used;
			// one whose handler fails only its first Fail attempts, with
			// more allowed, succeeds at the next.
			if c.diedEarly(t) {
				c.violate(InvAtLeastOnce, "%s ended dead though only its first %d attempts fail and it has %d (%d failed attempts seen; dead letters: %q) (%s)",
					id, t.spec.Behaviour.Fail, t.maxAttempts(), t.fails(), strings.Join(c.deadWhy[t.id], "; "), t.spec)
			}
		case "cancelled":
			if t.cancelled.IsZero() && t.cancelTry.IsZero() && !c.parentFailed(t) && !c.bulkCancelled(t) && !t.ambiguous {
				c.violate(InvAtLeastOnce, "%s was cancelled though nobody cancelled it and its parents did not fail (%s)", id, t.spec)
			}
		case "unknown":
			if c.lostIfUnknownLocked(t) {
				c.violate(InvAtLeastOnce, "%s is unknown at the end: lost (%s, scheduled at %s)", id, t.spec, c.at(t.returned))
			}
		case "waiting":
			if !t.ambiguous {
				c.violate(InvAfterLive, "%s is still waiting at the end of a %v quiet phase, its parents %s ended (%s)", id, c.w.plan.Settle, parentIDs(t), t.spec)
			}
		default:
			if state == "queued" && t.cancelIncomplete && len(t.starts) == 0 {
				// README (cancel): a cancel done in part leaves a task
				// the traffic cop had sent early to be checked against
				// its missing row and dropped; that pass's confirmation
				// may still record it queued afterwards, which status
				// then shows until the id is scheduled again (seed
				// 34188).
				continue
			}
			if state == "queued" && len(t.starts) == 0 && c.bulkCancelInPart(t) {
				// The same, for a bulk cancel that reached it: a cancel
				// done in part counts among the operation's failures
				// (sim seed 50693: its row removed, its run's mark
				// failing, an early message of it dropped).
				continue
			}
			if state == "queued" && c.rowDeleteLeftQueuedLocked(t) {
				continue
			}
			if state == "queued" && c.requeueLeftQueued(t, st) {
				// README (bulk operations): a requeue whose tries all
				// failed after the run was marked queued leaves it so,
				// beside its dead letter, until that is requeued again
				// (seed 5527).
				continue
			}
			if !t.ambiguous || len(t.starts) > 0 || c.movedAlone(t) {
				c.violate(InvAtLeastOnce, "%s is %s at the end of a %v quiet phase (%s, scheduled at %s, %d attempts seen)", id, state, c.w.plan.Settle, t.spec, c.at(t.returned), len(t.starts))
			}
		}
	}
}

// lostIfUnknownLocked reports whether t, unknown to status (no pending
// task, no run record), was lost: it was written for sure (or moved on
// its own), and neither a cancel nor a bulk cancel took it away.
func (c *checker) lostIfUnknownLocked(t *ti) bool {
	return (!t.ambiguous || c.movedAlone(t)) && (t.cancelled.IsZero() && t.cancelTry.IsZero() || len(t.starts) == 0) && !c.bulkCancelled(t)
}

// diedEarly reports whether t, dead, died before its attempts were used:
// its handler fails only its first attempts, with more allowed, fewer
// failed attempts were seen than it is allowed, and what could count
// more did not happen — the crash guard, which counts deliveries that
// recorded no outcome (its dead letter says so; without one, any attempt
// cut short or struck by a fault may have been), or an attempt cut
// short (its end, or a kill or freeze of the worker that ran it).
func (c *checker) diedEarly(t *ti) bool {
	f := t.spec.Behaviour.Fail
	if f <= 0 || f >= t.maxAttempts() || t.fails() >= t.maxAttempts() || t.ambiguous {
		return false
	}
	why, left := c.deadWhy[t.id]
	switch {
	case !left:
		return !c.anyTroubled(t)
	case slices.ContainsFunc(why, func(w string) bool { return strings.Contains(w, "without an outcome being recorded") }):
		return false
	}
	return !slices.ContainsFunc(t.starts, func(r *runEv) bool {
		return r.outcome != "ok" && r.outcome != "fail" && r.outcome != "snooze" || c.downAround(r.proc, r.start, r.end.Add(time.Minute))
	})
}

// fails counts t's attempts that failed.
func (t *ti) fails() int {
	n := 0
	for _, r := range t.starts {
		if r.outcome == "fail" {
			n++
		}
	}
	return n
}

// retryBudget: no scheduling of a one-off task fails more attempts than
// it is allowed before it dies (README, retries), but for attempts cut
// short or whose run record's requests failed (an end not recorded, its
// message met again), which may be counted again, attempts made again
// by another worker after their first worker's claim lapsed (remadeFails),
// dead letters requeued, which start over, and a version that raced a
// change of it, which has attempts of its own (racedVersionsLocked).
func (c *checker) retryBudget() {
	for _, t := range c.tis {
		if t.spec.Recurrence != "" || t.ambiguous || c.runsTroubled(t) || c.requeuedAny(t) {
			continue
		}
		remade, n := c.remadeFails(t), t.maxAttempts()
		if c.racedVersionsLocked(t) == 0 {
			if fails := t.fails() - remade; fails > n {
				c.violate(InvAtLeastOnce, "%s (scheduling %d) failed %d attempts, more than the %d it is allowed (%s)", t.id, t.inc, fails, n, t.spec)
			}
			continue
		}
		// Versions that raced a change each have a budget of their own
		// (racedVersionsLocked): each version's failures are held to it.
		byDue := map[time.Time]int{}
		for _, r := range t.starts {
			if r.outcome == "fail" {
				byDue[r.due.Truncate(time.Millisecond)]++
			}
		}
		for due, fails := range byDue {
			if fails-remade > n {
				c.violate(InvAtLeastOnce, "%s (scheduling %d) failed %d attempts of its version due %s, more than the %d it is allowed (%s)", t.id, t.inc, fails-remade, due.Format(time.RFC3339Nano), n, t.spec)
			}
		}
	}
}

// requeuesBringBack: a requeue of a dead letter that answered success
// brought its task back (README, dead letters): an attempt of it starts
// afterwards, unless a cancel of it (one that may have happened, a bulk
// cancel of its type among them) or a later scheduling of its id, which
// takes its record over, came after the requeue.
func (c *checker) requeuesBringBack() {
	for _, t := range c.tis {
		for i, q := range t.requeued {
			from := t.requeuedFrom[i]
			// (Its attempts may begin before the requeue answers, and in
			// the very instant it was issued: seed 82509, operations held
			// up by a restart issued together.)
			if slices.ContainsFunc(t.starts, func(r *runEv) bool { return !r.start.Before(from) }) {
				continue
			}
			// Not dead when the requeue was issued — brought back already
			// by an earlier requeue, or set aside by the crash guard with
			// no attempt seen to die: a dead letter left by an earlier
			// requeue, or a second one of the same death, is only removed
			// (README, dead letters).
			if !t.deadAt(from) {
				continue
			}
			if !t.cancelled.IsZero() && !t.cancelled.Before(from) || !t.cancelTry.IsZero() && !t.cancelTry.Before(from) {
				continue
			}
			if _, ok := c.bulkReach("cancel-pending", t.spec.Type, q); ok {
				continue
			}
			if slices.ContainsFunc(c.byID[t.id], func(o *ti) bool { return o != t && o.issued.After(q.Add(-time.Minute)) }) {
				continue
			}
			c.violate(InvAccepted, "%s (scheduling %d) was requeued at %s with success, and no attempt of it started afterwards (%s)", t.id, t.inc, c.at(q), t.spec)
		}
	}
}

// refusedRightly: a schedule is refused as already scheduled only while
// its id is pending (README: "a second schedule of the same id is
// refused while the first is pending"): a row of the id stood at some
// moment of the call, or another scheduling of the id was under way
// beside it (a file's index rows hold their ids while its rows are
// written), or one that may have left its index rows behind (a file that
// answered an error, whose hold lasts schedule.IndexingHold).
func (c *checker) refusedRightly() {
	for _, t := range c.tis {
		if !errors.Is(t.refusal, schedule.ErrAlreadyScheduled) || t.spec.Replace {
			continue
		}
		// A file is refused whole when one of its ids is pending.
		lines := []*ti{t}
		if t.op != nil && t.op.Kind == OpMany {
			lines = slices.DeleteFunc(slices.Clone(c.tis), func(o *ti) bool { return o.op != t.op })
		}
		if slices.ContainsFunc(lines, c.pendingDuringLocked) {
			continue
		}
		c.violate(InvAccepted, "a schedule of %s issued at %s was refused as already scheduled, but no row of the id stood during the call and no other scheduling of it was under way (%s)",
			cmp.Or(t.id, t.spec.ID), c.at(t.issued), t.spec)
	}
}

// pendingDuringLocked reports whether t's id may have been pending while
// t's schedule was under way: a row of it stood, or another scheduling
// of it was under way beside it, or one that may have left its index
// rows behind (a file that answered an error) was tried within
// schedule.IndexingHold.
func (c *checker) pendingDuringLocked(t *ti) bool {
	id := cmp.Or(t.id, t.spec.ID)
	if c.rowStoodLocked(id, t.issued, t.returned) {
		return true
	}
	return slices.ContainsFunc(c.byID[id], func(o *ti) bool {
		if o == t || o.issued.After(t.returned) {
			return false
		}
		under := o.returned.IsZero() || o.returned.After(t.issued)
		held := o.ambiguous && o.op != nil && o.op.Kind == OpMany && o.issued.Add(schedule.IndexingHold).After(t.issued)
		return under || held
	})
}

// refusedAsDuplicateRightly: a unique task is refused as a duplicate
// only while another task may hold its key (README, unique tasks): one of
// its type and key, tried before the refusal answered, and not surely
// released before the refusal was issued — by a cancel or replace that
// answered, or by the end of its task and its window (a series holds its
// key as long as it lasts; a requeued dead letter holds it again).
func (c *checker) refusedAsDuplicateRightly() {
	const lag = 2 * time.Second // a record's write after the handler's end
	for _, t := range c.tis {
		if !errors.Is(t.refusal, leasecron.ErrDuplicate) || t.spec.Unique == nil {
			continue
		}
		held := slices.ContainsFunc(c.tis, func(o *ti) bool {
			if o == t || o.spec.Unique == nil || o.spec.Type != t.spec.Type || o.spec.Unique.Key != t.spec.Unique.Key ||
				!(o.accepted || o.ambiguous) || o.issued.After(t.returned) {
				return false
			}
			released, ok := c.releasedLocked(o)
			return !ok || released.Add(lag+c.skew).After(t.issued)
		})
		if !held {
			c.violate(InvAccepted, "%s (%s) was refused as a duplicate (issued at %s), but no task that may hold key %s was live then", t.spec.ID, t.spec, c.at(t.issued), t.spec.Unique.Key)
		}
	}
}

// releasedLocked is when o surely no longer held its unique key, if it
// is known to have let it go: a cancel or replace that answered, or the
// end of its task and window.
func (c *checker) releasedLocked(o *ti) (time.Time, bool) {
	var at time.Time
	consider := func(x time.Time) {
		if !x.IsZero() && (at.IsZero() || x.Before(at)) {
			at = x
		}
	}
	consider(o.cancelled)
	consider(o.superseded)
	// The window starts from the end its record holds, written after the
	// handler's: much later when its worker was killed or frozen, or its
	// storage failed, in between (README: the task may even run again).
	if o.spec.Recurrence == "" && !c.runsTroubled(o) {
		if end, ended := o.finalEnd(); ended && !c.requeuedAny(o) {
			if o.spec.Unique.States == "" {
				end = end.Add(o.spec.Unique.For)
			}
			consider(end)
		}
	}
	return at, !at.IsZero()
}

// rowStoodLocked reports whether a schedule row of id stood at some
// moment of [from, to], as the commits of its rows show.
func (c *checker) rowStoodLocked(id string, from, to time.Time) bool {
	standing := map[int64]bool{} // by due, as of the commits so far
	for _, w := range c.rowWrites[id] {
		if w.at.After(to) {
			break
		}
		if !w.at.Before(from) && len(standing) > 0 {
			return true // standing as the call went on
		}
		if w.removed {
			delete(standing, w.due.UnixNano())
		} else {
			standing[w.due.UnixNano()] = true
			if !w.at.Before(from) {
				return true
			}
		}
	}
	return len(standing) > 0
}

// deadAt reports whether the last attempt of t that started before at
// was its death: a failure that used its attempts.
func (t *ti) deadAt(at time.Time) bool {
	var last *runEv
	for _, r := range t.starts {
		if r.start.Before(at) && (last == nil || r.start.After(last.start)) {
			last = r
		}
	}
	return last != nil && last.outcome == "fail" && last.attempt >= t.maxAttempts() && last.end.Before(at)
}

// requeuedAny reports whether t's dead letter may have been requeued: by
// id (answered or not) or by a bulk requeue of its type.
func (c *checker) requeuedAny(t *ti) bool {
	return len(t.requeued) > 0 || t.requeueFailed || len(t.requeueMaybe) > 0 ||
		slices.ContainsFunc(c.bulks, func(b bulkEv) bool { return b.kind == "requeue-dead" && (b.typ == "" || b.typ == t.spec.Type) })
}

// movedAlone reports whether t, a schedule that answered an error (it
// may never have been written), was written all the same and reached
// the queue: a traffic cop moved a row of its id after it was issued, and
// no other scheduling of the id was ever tried. Such a task is owed its
// run as an accepted one is (README: a scheduler that dies midway loses
// nothing).
func (c *checker) movedAlone(t *ti) bool {
	if !t.ambiguous || len(c.byID[t.id]) != 1 || t.spec.Recurrence != "" {
		return false
	}
	return slices.ContainsFunc(c.moved[t.id], func(m movedRow) bool { return m.at.After(t.issued) })
}

// requeueLeftQueued reports whether st, queued, is what a requeue of t's
// dead letter that failed after marking the run leaves: no attempt since
// the mark, the dead letter still in the poison queue, and a requeue that
// reached it (one by id that failed, or a bulk requeue of its type).
func (c *checker) requeueLeftQueued(t *ti, st leasecron.Status) bool {
	if st.Run == nil || st.Run.Attempts != 0 || !c.deadLeft[t.id] {
		return false
	}
	return t.requeueFailed || slices.ContainsFunc(c.bulks, func(b bulkEv) bool {
		return b.requeuesDeadOf(t.spec.Type)
	})
}

// deadLettersLeft records which runs have a dead letter at the end.
func (c *checker) deadLettersLeft(ctx context.Context, cl *leasecron.Client) {
	dls, err := cl.DeadLetters().List(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadLeft, c.deadWhy, c.deadReasons, c.deadListed = map[string]bool{}, map[string][]string{}, nil, false
	if err != nil {
		return
	}
	c.deadListed = true
	for _, d := range dls {
		c.deadLeft[d.RunID] = true
		c.deadWhy[d.RunID] = append(c.deadWhy[d.RunID], d.Reason)
		c.deadReasons = append(c.deadReasons, d.Reason)
	}
}

func parentIDs(t *ti) string {
	var ids []string
	for _, p := range t.parents {
		ids = append(ids, p.id)
	}
	return strings.Join(ids, ",")
}

func (c *checker) anyOK(id string) bool {
	for _, t := range c.byID[id] {
		for _, r := range t.starts {
			if r.outcome == "ok" {
				return true
			}
		}
	}
	return false
}

// runsTroubled is anyTroubled narrowed to the faults that can make a
// run of t start again: its process killed or frozen around an attempt,
// or a request for its run record failing (the end of an attempt not
// recorded, and its message met again).
func (c *checker) runsTroubled(t *ti) bool {
	return startsTroubled(t, func(r *runEv) bool {
		return c.downAround(r.proc, r.start, r.end.Add(time.Minute)) ||
			hitBetween(c.runHits[r.runID], r.start.Add(-time.Minute), r.end.Add(time.Minute))
	})
}

func (c *checker) anyTroubled(t *ti) bool {
	return startsTroubled(t, func(r *runEv) bool { return c.troubled(r.proc, r.start, r.end.Add(time.Minute)) })
}

// startsTroubled reports whether an attempt of t ended without an
// outcome (killed, snoozed, cancelled …) or met what troubled says.
func startsTroubled(t *ti, troubled func(*runEv) bool) bool {
	return slices.ContainsFunc(t.starts, func(r *runEv) bool { return r.outcome != "ok" && r.outcome != "fail" || troubled(r) })
}

func (c *checker) parentFailed(t *ti) bool {
	for _, pt := range t.parents {
		// The very scheduling the child waited for, cancelled — by a
		// bulk cancel of its type too — before it ended, whatever
		// scheduling of the id ended first since (seed 51068: a bulk
		// cancel reached the parent as it ran, and a replace of another
		// type took the id's record over and succeeded first).
		by := c.w.now()
		if e, _ := c.endedFor(pt, true, by); !e.IsZero() {
			by = e
		}
		if at, ok := c.bulkReach("cancel-pending", pt.spec.Type, pt.issued); ok && at.Before(by) && !c.retiredBefore(pt, at) {
			return true // a bulk of its own type, while its row still stood
		}
		p := c.firstEnded(pt)
		if end, _ := c.endedFor(p, false, c.w.now()); end.IsZero() {
			return true
		}
		// A parent cancelled while its handler ran stays cancelled (its
		// success is not recorded over the cancel): its children are.
		if _, ok := c.cancelledBy(p, c.w.now()); ok {
			return true
		}
		if c.parentFailed(p) {
			return true
		}
		// When the first run of the id ended, another scheduling of it
		// already moved to the queue is the one the child waits for
		// (README, workflows; seed 6593: a parent moved and held by a
		// pause was replaced, the replacement took the record over and
		// succeeded, and the old message, back after the pause, died).
		if _, ok := c.deferredBadEnd(t, pt, p); ok {
			return true
		}
		// A parent already in the queue when the child began waiting is
		// watched by the traffic cop; if by its next pass the id is
		// pending again, the child waits for that scheduling instead
		// (README, workflows; seed 6855: the first run succeeded, the id
		// was moved again 15 s later before a pass saw the success, and
		// the second run died).
		// A replace of it issued after the child counts as well (seed
		// 9629: the replacement, sent early, waited behind the parent's
		// held message, was moved 2 ms after that message's run
		// succeeded, and died; the pass after the success found the id
		// pending again).
		for _, a := range slices.Concat(pt.again, pt.alts) {
			if _, bad := c.endedBadly(a); bad && !a.issued.Before(t.issued) {
				return true
			}
		}
	}
	return false
}

// deferredBadEnd returns the end of the scheduling of the id of t's
// parent pt that t waits for instead of p, the one of pt's family that
// ended first, when that scheduling ended without succeeding after p: one
// already moved to the queue when p ended (README, workflows; seed 6593:
// a parent moved and held by a pause was replaced, the replacement took
// the record over and succeeded, and the old message, back after the
// pause, died) or, p watched, one pending then and moved after. A parent
// already in the queue when the child began waiting is watched by the
// traffic cop, whose pass after its end finds the id pending again if
// another scheduling's row is still in the table: the child waits for
// that one, scheduled before the child or after (seed 16054: a running
// parent replaced, the replacement's early-sent row waiting for its
// confirmation behind the run, moved 4 s after the run succeeded; it
// died).
func (c *checker) deferredBadEnd(t, pt, p *ti) (time.Time, bool) {
	pEnd, _ := c.endedFor(p, true, c.w.now())
	if pEnd.IsZero() {
		return time.Time{}, false
	}
	watched := c.movedLocked(p.id, p.due, p.issued, t.issued) || slices.ContainsFunc(p.starts, func(r *runEv) bool { return r.start.Before(t.issued) })
	for _, a := range c.family(pt) {
		end, bad := c.endedBadly(a)
		if a == p || a.id == "" || !bad || !end.After(pEnd) {
			continue
		}
		// Or, p watched, one whose row was pending when t began waiting:
		// t's schedule marked that row, and t waits for its run, not for
		// p's (row 255, seed 163441: a running parent replaced, a child
		// scheduled after the replace answered, the run succeeded, and
		// the replacement was cancelled before its move).
		pendingThen := a.accepted && !a.returned.IsZero() && !a.returned.After(t.issued) && !c.movedLocked(a.id, a.due, a.issued, t.issued)
		if c.movedLocked(a.id, a.due, a.issued, pEnd) ||
			watched && a.accepted && !a.returned.After(pEnd) && c.movedLocked(a.id, a.due, pEnd, c.w.now()) ||
			watched && pendingThen {
			return end, true
		}
	}
	return time.Time{}, false
}

// endedBadly returns when t ended without succeeding (died, or was
// cancelled), as far as the events show now.
func (c *checker) endedBadly(t *ti) (time.Time, bool) {
	if ok, _ := c.endedFor(t, false, c.w.now()); !ok.IsZero() {
		return time.Time{}, false
	}
	end, _ := c.endedFor(t, true, c.w.now())
	return end, !end.IsZero()
}

func (c *checker) bulkCancelled(t *ti) bool {
	_, ok := c.cancelledBy(t, c.w.now())
	return ok
}

// finalLimits: at no moment did more handlers of the limited type run than
// its limit, and no window held more starts of the rated type than its
// rate.
func (c *checker) finalLimits() {
	type edge struct {
		at    time.Time
		seq   uint64
		delta int
		ev    *runEv
	}
	var edges []edge
	var rated []*runEv
	for _, ev := range c.runs {
		if ev.ti == nil {
			continue
		}
		switch ev.ti.spec.Type {
		case TypeLimited:
			end, seq := ev.end, ev.endSeq
			if end.IsZero() {
				// Never recorded: it ran to the end, or its process was
				// killed and it ended there, in the order of its start
				// (before everything of a later instant).
				// (A kill in the start's own instant ties the two edges;
				// the stable sort keeps the start, appended first, first.)
				end, seq = c.w.now(), math.MaxUint64
				for _, n := range c.notes[ev.proc] {
					if n.what == "killed" && !n.at.Before(ev.start) && n.at.Before(end) {
						end, seq = n.at, ev.startSeq
					}
				}
			}
			edges = append(edges, edge{ev.start, ev.startSeq, 1, ev}, edge{end, seq, -1, ev})
		case TypeRated:
			rated = append(rated, ev)
		}
	}
	// Within one instant, in the order the starts and ends happened: a
	// handler with no work (in virtual time) ends in the instant it
	// begins, and its slot can pass to another start in that instant.
	sort.SliceStable(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].seq < edges[j].seq
	})
	running := map[*runEv]bool{}
	for _, e := range edges {
		if e.delta < 0 {
			delete(running, e.ev)
			continue
		}
		running[e.ev] = true
		if len(running) > LimitedConcurrency {
			documented := false
			var who []string
			for r := range running {
				who = append(who, fmt.Sprintf("%s#%d@%s from %s", r.runID, r.attempt, r.proc.id, c.at(r.start)))
				if c.slotTroubled(r.proc, r.start, e.at) {
					documented = true
				}
			}
			sort.Strings(who)
			if !documented {
				c.violate(InvConcurrency, "%d handlers of %s ran at once at %s (limit %d): %s", len(running), TypeLimited, c.at(e.at), LimitedConcurrency, strings.Join(who, ", "))
			}
		}
	}
	sort.Slice(rated, func(i, j int) bool { return rated[i].start.Before(rated[j].start) })
	// Recorded starts are a window and its second of margin apart; a
	// handler begins up to half a second after its recorded start (later,
	// the start is moved), on a clock up to skew off another's.
	win := RatedPer + time.Second - 500*time.Millisecond - c.skew
	for i := range rated {
		n := 0
		for j := i; j < len(rated) && rated[j].start.Sub(rated[i].start) < win; j++ {
			n++
		}
		if n > RatedCount {
			var who []string
			documented := false
			for _, r := range rated[i : i+n] {
				who = append(who, fmt.Sprintf("%s@%s at %s", r.runID, r.proc.id, c.at(r.start)))
				if c.claimTroubled(r.proc, r.start) {
					documented = true
				}
			}
			if !documented {
				c.violate(InvRate, "%d starts of %s within %v (rate %d/%v): %s", n, TypeRated, win, RatedCount, RatedPer, strings.Join(who, ", "))
				break
			}
		}
	}
}

// finalBatches: a batch that was scheduled whole had its callback run
// exactly once.
func (c *checker) finalBatches() {
	for _, b := range c.batches {
		if !b.accepted || b.callback == nil {
			continue
		}
		ended := true
		for _, m := range b.members {
			st := c.status[m.id].State()
			if st != "succeeded" && st != "dead" && st != "cancelled" {
				ended = false
			}
		}
		runs := map[string]int{}
		for _, r := range b.callback.starts {
			if r.outcome == "ok" || r.outcome == "" {
				runs[r.runID]++
			}
		}
		ok := 0
		for _, r := range b.callback.starts {
			if r.outcome == "ok" {
				ok++
			}
		}
		switch {
		case ended && len(b.callback.starts) == 0 && !c.callbackCancelledInTime(b):
			c.violate(InvBatch, "batch %s: every member ended, its callback %s never ran (%s)", b.id, b.callback.id, c.batchEndsLocked(b))
		case ok > 1 && !c.anyTroubled(b.callback):
			c.violate(InvBatch, "batch %s: callback %s succeeded %d times", b.id, b.callback.id, ok)
		}
	}
}

// batchEndsLocked says when and how each member of b ended, as memberEnd
// reads it, and when a cancel of its callback was issued: what a reader
// of a callback violation needs first.
func (c *checker) batchEndsLocked(b *batch) string {
	now := c.w.now()
	var parts []string
	for _, m := range b.members {
		end, how := c.memberEnd(b, m, now)
		at := "-"
		if !end.IsZero() {
			at = c.at(end)
		}
		parts = append(parts, fmt.Sprintf("%s %s at %s", m.id, how, at))
	}
	if issued := b.callback.cancelIssued(); !issued.IsZero() {
		parts = append(parts, fmt.Sprintf("callback's cancel issued at %s", c.at(issued)))
	}
	return strings.Join(parts, "; ")
}

// callbackCancelledInTime reports whether b's callback was cancelled, or
// may have been, before it was due to run: by a minute after its last
// member ended (a cancel long after that does not excuse a callback that
// was never released), or, released by then, while its message waited in
// the queue, never taken. A released callback is a task in the queue like
// any other, and the README lets a cancel stop one that has not started
// however long it waited there: a low-priority callback waits while the
// workers have higher levels to run (strict priorities), and an idle
// worker comes back to its queue only in its turn (sweep seed 89124: cb9,
// priority 4, released and sent at once 1m7.7s in, waited 2.5 min in a
// queue no worker asked, and a cancel at 3m38s stopped it).
func (c *checker) callbackCancelledInTime(b *batch) bool {
	cb := b.callback
	if cb.cancelled.IsZero() && cb.cancelTry.IsZero() {
		return false
	}
	now := c.w.now()
	var last time.Time
	for _, m := range b.members {
		if e, _ := c.memberEnd(b, m, now); e.After(last) {
			last = e
		}
	}
	due := last.Add(time.Minute)
	issued := cb.cancelIssued()
	if issued.IsZero() {
		issued = cb.cancelTry // a cancel that only failed: when it was tried
	}
	if issued.Before(due) {
		return true
	}
	released := slices.ContainsFunc(c.runStates[cb.id], func(r runState) bool {
		return r.state == leasecron.RunQueued && !r.at.After(due)
	})
	return released && c.waitedUntilCancelledLocked(cb.id, issued)
}

// earlierDeathAfterSuccess reports whether the id's dead record describes
// an earlier scheduling's run, not t's, which succeeded: the record's due
// time is one an earlier scheduling's attempts ran under and none of t's,
// and that scheduling died after t's last attempt ended. A run of an
// earlier scheduling still in the queue (a requeued dead letter held by a
// pause past runs.QueuedWait) runs after the id was scheduled again, and
// its claim takes the id's one record back (README, cancel; simulator
// row 63; seed 80893: t2's requeued pausable run died 5 min after its
// replacement succeeded).
func (c *checker) earlierDeathAfterSuccess(t *ti, st leasecron.Status) bool {
	if st.Run == nil || st.Run.Due.IsZero() {
		return false
	}
	var okEnd time.Time
	for _, r := range t.starts {
		if sameDue(r.due, st.Run.Due) {
			return false // the record is t's own
		}
		if r.outcome == "ok" && r.end.After(okEnd) {
			okEnd = r.end
		}
	}
	if okEnd.IsZero() {
		return false // t did not succeed: its own fate must still show
	}
	for _, o := range c.byID[t.id] {
		if o == t || !slices.ContainsFunc(o.starts, func(r *runEv) bool { return sameDue(r.due, st.Run.Due) }) {
			continue
		}
		if _, last, died := o.deaths(); died && last.After(okEnd) {
			return true
		}
	}
	return false
}

// deathOfEarlierShows reports whether t, the latest scheduling of its id,
// cancelled before it started, may leave the id's record to an earlier
// scheduling's death: a bulk cancel reached t while an earlier scheduling
// of another type was under way, and that one died after (a bulk cancel
// leaves a run of another type alone: runs.Store.CancelPendingOf; seed
// 12400), or a cancel of t answered an error (its record may not have
// been written).
func (c *checker) deathOfEarlierShows(t *ti) bool {
	for _, o := range c.byID[t.id] {
		first, last, died := o.deaths()
		if o == t || !died {
			continue
		}
		if t.cancelErred && first.Before(t.cancelTry) {
			return true
		}
		if o.spec.Type == t.spec.Type {
			continue
		}
		// Its last death: a dead letter requeued before the bulk cancel
		// may die again after it (seed 13379).
		if at, ok := c.bulkReach("cancel-pending", t.spec.Type, t.issued); ok && last.After(at) {
			return true
		}
	}
	return false
}

// finalBulk: a task is run again after dying only as often as requeues
// could have brought it back (a bulk requeue brings each back once).
func (c *checker) finalBulk() {
	for _, t := range c.tis {
		if t.spec.Behaviour.Fail != -1 || len(t.starts) == 0 || t.spec.Recurrence != "" {
			continue
		}
		firsts := 0
		lapsed := map[*runEv]bool{} // first attempts whose lapse excused a start
		for _, r := range t.starts {
			// A snooze or a hand-back at shutdown ends an attempt without
			// using it: the next start is the same attempt (seed 1032: two
			// of each before attempt 1 failed).
			if r.attempt != 1 || r.outcome == "snooze" || r.outcome == "cancelled" {
				continue
			}
			if o := c.lapsedBefore(t, r, lapsed); o != nil {
				lapsed[o] = true
				continue
			}
			firsts++
		}
		allowed := 1 + len(t.requeued) + c.racedVersionsLocked(t)
		for _, m := range t.requeueMaybe {
			// A requeue that may have sent it explains a first attempt
			// after it.
			if slices.ContainsFunc(t.starts, func(r *runEv) bool { return r.attempt == 1 && r.start.After(m) }) {
				allowed++
			}
		}
		var death time.Time // the first
		for _, r := range t.starts {
			if r.outcome == "fail" && r.attempt >= t.maxAttempts() {
				death = r.end
				break
			}
		}
		for _, b := range c.bulks {
			// Each operation of its type that started after it first died,
			// or was still walking then, may bring it back once (README:
			// an operation acts on what matches when its walk reaches it;
			// seed 4027: a task died during a walk begun before it was
			// scheduled).
			if b.requeuesDeadOf(t.spec.Type) && !death.IsZero() &&
				(b.started.After(death.Add(-time.Minute)) || b.ended.IsZero() || b.ended.After(death)) {
				allowed++
			}
		}
		switch {
		case firsts > allowed && !c.runsTroubled(t):
			c.violate(InvBulkOnce, "%s (always failing) made %d first attempts; the requeues that could bring it back allow %d", t.id, firsts, allowed)
		case firsts > allowed+2:
			c.violate(InvBulkOnce, "%s (always failing) made %d first attempts; the requeues that could bring it back allow %d (a crash explains one or two more, not these)", t.id, firsts, allowed)
		}
	}
}

// remadeFails counts t's failed starts that made an attempt again
// because the claim of an earlier start of that attempt lapsed
// (lapsedBefore): at-least-once delivery, not an attempt of the budget.
func (c *checker) remadeFails(t *ti) int {
	n := 0
	used := map[*runEv]bool{}
	for _, r := range t.starts {
		if o := c.lapsedBefore(t, r, used); o != nil {
			used[o] = true
			if r.outcome == "fail" {
				n++
			}
		}
	}
	return n
}

// lapsedBefore returns the earlier start of r's attempt of t whose lapsed
// claim explains r, a start that began while it was under way on a
// process killed, frozen or struck by a storage fault since it began: r
// is that attempt delivered again (at-least-once delivery), not one
// brought back by a requeue (seed 15368). Each lapse explains one start
// (those in used have): a second start beside the same attempt — the task
// dead meanwhile, say — is counted. Nil when none does. (Not bounded by
// the task's first death: the worker whose claim lapsed records the end
// of its attempt, a death at the last, while the message lives on with
// the worker that took it over.) A handler that had returned before r
// began counts while its end was still unrecorded when r began (seed
// 76185: the worker's visibility update hung 10 s after a failed
// attempt, the message reappeared and another worker took the run over
// at the same attempt, as the README allows).
func (c *checker) lapsedBefore(t *ti, r *runEv, used map[*runEv]bool) *runEv {
	for _, o := range t.starts {
		if o != r && !used[o] && o.attempt == r.attempt && o.start.Before(r.start) &&
			(o.end.IsZero() || o.end.After(r.start) || c.endUnrecordedLocked(o.runID, o.attempt, o.start, r.start)) &&
			(c.downAround(o.proc, o.start, r.start) || hitBetween(c.hits[o.proc], o.start, r.start)) {
			return o
		}
	}
	return nil
}

// finalSeries: every occurrence of a series that fell due while it was
// live ran, unless the fleet was behind then (an earlier occurrence was
// still to start: occurrences missed while nobody led run once).
func (c *checker) finalSeries() {
	end := c.w.plan.Start.Add(c.w.plan.Active)
	horizon := end.Add(-2 * time.Minute)
	for _, t := range c.tis {
		if t.spec.Recurrence == "" || !t.accepted || t.ambiguous {
			continue
		}
		// A stop after the horizon counts too: it cancels an occurrence
		// moved before it and not yet started (seed 1064: one held back
		// by a pause, due 44 s before a disable two minutes from the end).
		stop := end
		for _, s := range []time.Time{t.cancelled, t.cancelTry, t.superseded, t.disableTry} {
			if !s.IsZero() && s.Before(stop) {
				stop = s
			}
		}
		if len(t.disabled) > 0 && t.disabled[0].issued.Before(stop) {
			stop = t.disabled[0].issued // a disable under way may stop an occurrence already moved
		}
		if at, ok := c.cancelledBy(t, stop); ok {
			stop = at
		}
		if at, ok := c.bulkReach("disable-series", t.spec.Type, t.issued); ok && at.Before(stop) {
			stop = at
		}
		occ, err := schedule.Upcoming(t.spec.Recurrence, t.spec.TZ, t.due, 400)
		if err != nil {
			c.violate(InvOccurrences, "series %s: %v", t.id, err)
			continue
		}
		dues := map[int64]bool{}
		var starts []*runEv
		for _, r := range t.starts {
			dues[r.due.UnixNano()] = true
			starts = append(starts, r)
		}
		// A disable or cancel cancels the occurrences moved to the queue
		// that have not started: one due shortly before it may not run.
		excuse := stop.Add(-2 * time.Minute)
		if stop.Equal(end) || excuse.After(horizon) {
			excuse = horizon
		}
		for _, o := range occ {
			if !o.Before(excuse) {
				break
			}
			if dues[o.UnixNano()] {
				continue
			}
			// One whose message a dequeue nobody saw hid counts as due
			// when it reappeared (seed 72288: a lost answer hid a
			// low-priority occurrence for the visibility timeout, and a
			// fleet down to one worker busy with slow handlers and
			// higher levels had not taken it when a disable cancelled it).
			if !c.hiddenUntilLocked(t.id, o).Before(excuse) {
				continue
			}
			// One held in the queue by a pause of its type until the stop
			// is cancelled by it, however long before the stop it was due
			// (seed 6197: a pause held an occurrence for three minutes,
			// and a disable of its series then cancelled it).
			// So is one its type's concurrency or rate limit held back
			// until the stop (seed 52641: a limited series' occurrence put
			// back for want of a slot for two minutes, then cancelled by
			// a disable).
			limitHeld := !stop.Equal(end) && (t.spec.Type == TypeLimited || t.spec.Type == TypeRated)
			behind := limitHeld || c.behindLocked(t.id, o) || c.pausedDuringLocked(t.spec.Type, o, stop) || c.cancelAckedLocked(t.id, o, stop) ||
				!stop.Equal(end) && c.heldBackPendingLocked(t.id, o, stop)
			for _, r := range starts {
				if r.due.Before(o) && !r.start.Before(o) {
					behind = true
				}
			}
			if !behind {
				c.violate(InvOccurrences, "series %s (%q %s): the occurrence due %s never ran", t.id, t.spec.Recurrence, t.spec.TZ, o.UTC().Format(time.RFC3339))
				break
			}
		}
	}
}

// checkFences: the mover commits of every shard came in the order of
// their fencing tokens (a commit of an older token after a newer one's
// means two movers acted on one shard).
func (c *checker) checkFences() {
	for _, v := range c.w.fenceViolations() {
		c.violations = append(c.violations, Violation{Invariant: InvOneMover, At: v.at, Detail: v.detail})
	}
}

// featureOf names the features a start exercises, for the coverage
// report.
func featureOf(t *ti, task leasecron.Task) []string {
	f := []string{"type:" + t.spec.Type}
	s := t.spec
	switch {
	case s.Recurrence != "" && strings.HasPrefix(s.Recurrence, "@"):
		f = append(f, "every")
	case s.Recurrence != "":
		f = append(f, "cron")
	case s.Due <= 0:
		f = append(f, "due-now")
	case s.Due <= 40*time.Second:
		f = append(f, "early")
	default:
		f = append(f, "later")
	}
	if s.Unique != nil {
		f = append(f, "unique")
	}
	if len(s.After) > 0 {
		f = append(f, afterWord(s.AfterAny)[2:])
	}
	if t.batch != nil {
		f = append(f, "batch")
	}
	if t.callbackOf != nil {
		f = append(f, "callback")
	}
	if task.Attempt > 1 {
		f = append(f, "retry")
	}
	if s.Behaviour.Snooze > 0 {
		f = append(f, "snooze")
	}
	if s.Behaviour.Progress {
		f = append(f, "progress")
	}
	if len(t.requeued) > 0 {
		f = append(f, "requeued")
	}
	if s.Replace {
		f = append(f, "replace")
	}
	if s.Row {
		f = append(f, "row")
	}
	if bigPayload(s) {
		f = append(f, "payload-blob")
	}
	if !t.cancelTry.IsZero() || !t.cancelled.IsZero() {
		f = append(f, "cancel")
	}
	return f
}
