package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
)

// The blackboard in the simulation: every worker walks the board while the
// clients add keys, replace their definitions, remove them and run them
// now, under the same kills, freezes and storage faults as the rest; the
// checker holds the board to the README's promises (README "The
// blackboard"; package blackboard): a key runs on one worker at a time,
// starts at most once per interval, never after its removal answered,
// and, while workers are up, starts again within about a cycle of coming
// due.

// TypeBoard is the handler type of the blackboard's keys.
const TypeBoard = "board"

// The blackboard's operations.
const (
	OpBoardAdd    OpKind = "board-add" // Task: the key, Dur: its interval, Spec.Behaviour: its runs; N 1: replace
	OpBoardRemove OpKind = "board-remove"
	OpBoardRunNow OpKind = "board-run-now"
)

// The blackboard's invariants.
const (
	InvBoardOnce     = "a blackboard key runs on one worker at a time"
	InvBoardInterval = "a blackboard key starts at most once per interval"
	InvBoardRemoved  = "a removed blackboard key does not start"
	InvBoardLive     = "a blackboard key starts again within about a cycle of coming due"
)

// BoardSpec is the blackboard the workers walk: their blackboard.*
// settings.
type BoardSpec struct {
	Cycle, LockTTL time.Duration
	MaxConcurrent  int
}

// ttl is the lock TTL of a key of interval iv.
func (b *BoardSpec) ttl(iv time.Duration) time.Duration {
	if b.LockTTL > 0 {
		return b.LockTTL
	}
	return iv
}

// boardIntervals are the keys' intervals: at least 15 s, so that a lock's
// margin (a tenth of it) exceeds what two hosts' clocks may differ by.
var boardIntervals = []time.Duration{15 * time.Second, 20 * time.Second, 30 * time.Second, 45 * time.Second, time.Minute, 90 * time.Second}

// board plans the blackboard: the workers' settings, a few keys at the
// start and, through the active phase, operations on them. It draws from
// its own stream, so the rest of a seed's plan is what it was without it.
func (p *planner) board() {
	c := &p.sc.Config
	r := rand.New(rand.NewPCG(uint64(c.Seed), 0xb0a4d)) //nolint:gosec // a simulation's plan, not a secret
	b := &BoardSpec{Cycle: []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 30 * time.Second}[r.IntN(4)]}
	if r.IntN(3) == 0 {
		b.LockTTL = []time.Duration{15 * time.Second, 30 * time.Second}[r.IntN(2)]
	}
	if r.IntN(3) == 0 {
		b.MaxConcurrent = 2
	}
	c.Board = b
	n := 0
	var keys, removed []string
	add := func(at time.Duration, key string, replace bool) {
		var bh Behaviour
		switch x := r.IntN(100); {
		case x < 60:
			bh.Sleep = time.Duration(r.IntN(3000)) * time.Millisecond
		case x < 85:
			bh.Sleep = time.Duration(5+r.IntN(10)) * time.Second
		default:
			bh.Sleep = time.Duration(20+r.IntN(30)) * time.Second // past a heartbeat or two
		}
		if r.IntN(5) == 0 {
			bh.Fail = -1
		}
		op := Op{At: at, Kind: OpBoardAdd, Client: r.IntN(2), Task: key, Dur: boardIntervals[r.IntN(len(boardIntervals))],
			Spec: &TaskSpec{ID: key, Type: TypeBoard, Behaviour: bh}}
		if replace {
			op.N = 1
		}
		p.add(op)
	}
	newKey := func(at time.Duration) {
		n++
		k := fmt.Sprintf("b%d", n)
		keys = append(keys, k)
		add(at, k, false)
	}
	for range 2 + r.IntN(3) {
		newKey(time.Duration(1+r.IntN(10)) * time.Second)
	}
	for t := 20*time.Second + time.Duration(r.IntN(20))*time.Second; t < c.Active; t += time.Duration(15+r.IntN(45)) * time.Second {
		switch x := r.IntN(100); {
		case x < 15:
			newKey(t)
		case x < 25 && len(removed) > 0:
			// A removed key added again: due at once, a new key.
			i := r.IntN(len(removed))
			k := removed[i]
			removed = slices.Delete(removed, i, i+1)
			keys = append(keys, k)
			add(t, k, false)
		case x < 25:
			newKey(t)
		case x < 40:
			add(t, keys[r.IntN(len(keys))], true)
		case x < 55 && len(keys) > 1:
			i := r.IntN(len(keys))
			k := keys[i]
			keys = slices.Delete(keys, i, i+1)
			removed = append(removed, k)
			p.add(Op{At: t, Kind: OpBoardRemove, Client: r.IntN(2), Task: k})
		default:
			p.add(Op{At: t, Kind: OpBoardRunNow, Client: r.IntN(2), Task: keys[r.IntN(len(keys))]})
		}
	}
}

// boardOpString describes a blackboard operation for Op.String.
func boardOpString(o Op) string {
	switch o.Kind {
	case OpBoardAdd:
		s := fmt.Sprintf(" %s every %v sleep %v", o.Task, o.Dur, o.Spec.Behaviour.Sleep.Round(time.Millisecond))
		if o.Spec.Behaviour.Fail != 0 {
			s += " fails"
		}
		if o.N == 1 {
			s += " replace"
		}
		return s
	default:
		return " " + o.Task
	}
}

// describe is the board's part of Scenario.Describe.
func (b *BoardSpec) describe() string {
	if b == nil {
		return ""
	}
	s := fmt.Sprintf(", blackboard cycle %v", b.Cycle)
	if b.LockTTL > 0 {
		s += fmt.Sprintf(" lock_ttl %v", b.LockTTL)
	}
	if b.MaxConcurrent > 0 {
		s += fmt.Sprintf(" max_concurrent %d", b.MaxConcurrent)
	}
	return s
}

// boardSettings are the worker settings of the scenario's board.
func (w *World) boardSettings(o *leasecron.WorkerOptions) {
	b := w.plan.Board
	if b == nil {
		o.NoBlackboard = true
		return
	}
	o.Blackboard = blackboard.Settings{Cycle: b.Cycle, LockTTL: b.LockTTL, MaxConcurrent: b.MaxConcurrent}
}

// boardOp runs a blackboard operation through client c and tells the
// checker what it answered.
func (w *World) boardOp(ctx context.Context, c *proc, op *Op) {
	cl := c.client
	ev := w.chk.boardIssued(boardOpEv{kind: op.Kind, key: op.Task, interval: op.Dur, sleep: sleepOf(op), replace: op.N == 1, issued: w.now()})
	var err error
	switch op.Kind {
	case OpBoardAdd:
		pl, merr := json.Marshal(payload{B: op.Spec.Behaviour})
		if merr != nil {
			panic(merr)
		}
		err = cl.AddBlackboardKey(ctx, blackboard.Entry{Key: op.Task, Interval: op.Dur, Type: TypeBoard, Payload: string(pl)},
			&blackboard.AddOptions{Replace: op.N == 1})
	case OpBoardRemove:
		err = cl.RemoveBlackboardKey(ctx, op.Task)
	case OpBoardRunNow:
		err = cl.RunBlackboardKeyNow(ctx, op.Task)
	}
	w.answer(op, "", err)
	w.chk.boardAnswered(ev, err)
}

func sleepOf(op *Op) time.Duration {
	if op.Spec == nil {
		return 0
	}
	return op.Spec.Behaviour.Sleep
}

// --- the checker's view ----------------------------------------------------

// boardOpEv is a blackboard operation and its answer.
type boardOpEv struct {
	kind             OpKind
	key              string
	interval, sleep  time.Duration
	replace          bool
	issued, answered time.Time
	err              error
}

// boardRun is one run of a key: its handler's start and end in true time,
// and its claim's start as the claimer's clock read it (the key's Start,
// which the next claim's interval counts from).
type boardRun struct {
	key        string
	proc       *proc
	start, end time.Time
	due        time.Time // Start, by the claimer's clock
	claimed    time.Time // the same instant in true time
	outcome    string
}

// boardKey is what the checker knows of one key.
type boardKey struct {
	ops  []*boardOpEv // from when each was issued (answered zero until it answers)
	runs []*boardRun
}

// boardState is the checker's blackboard.
type boardState struct {
	keys map[string]*boardKey
	// hits are the storage faults that struck a process's requests to
	// the blackboard table.
	hits map[*proc][]time.Time
	// stopping is when the fleet began to stop: dues after it are not
	// held to the liveness bound.
	stopping time.Time
}

func (c *checker) boardKeyLocked(key string) *boardKey {
	if c.board.keys == nil {
		c.board.keys = map[string]*boardKey{}
	}
	k := c.board.keys[key]
	if k == nil {
		k = &boardKey{}
		c.board.keys[key] = k
	}
	return k
}

// boardHit records a fault on p's request to the blackboard table.
func (c *checker) boardHitLocked(p *proc, at time.Time) {
	if c.board.hits == nil {
		c.board.hits = map[*proc][]time.Time{}
	}
	c.board.hits[p] = append(c.board.hits[p], at)
}

// boardIssued records a blackboard operation as it is issued: it may
// take effect before it answers.
func (c *checker) boardIssued(ev boardOpEv) *boardOpEv {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.boardKeyLocked(ev.key)
	k.ops = append(k.ops, &ev)
	return &ev
}

// boardAnswered records a blackboard operation's answer.
func (c *checker) boardAnswered(ev *boardOpEv, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ev.answered, ev.err = c.w.now(), err
	k := c.boardKeyLocked(ev.key)
	if ev.kind == OpBoardAdd && !ev.replace && errors.Is(err, blackboard.ErrExists) &&
		!slices.ContainsFunc(k.ops, func(o *boardOpEv) bool { return o != ev && o.kind == OpBoardAdd }) {
		c.violate(InvAccepted, "blackboard add of the new key %s answered that it exists: %v", ev.key, err)
	}
}

// boardStopping records when the fleet began to stop.
func (c *checker) boardStopping(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.board.stopping = at
}

// boardHandler is the handler of the blackboard's keys: it records the
// run and does what the key's payload says.
func (c *checker) boardHandler(p *proc) leasecron.Handler {
	return func(ctx context.Context, task leasecron.Task) error {
		if p.killed() {
			return errKilled
		}
		var pl payload
		if err := json.Unmarshal(task.Payload, &pl); err != nil {
			return fmt.Errorf("sim: payload %q: %w", task.Payload, err)
		}
		r := c.boardStarted(p, task)
		p.waitUnpaused(ctx)
		if err := runFor(ctx, p, pl.B.Sleep, func(how string) { c.boardEnded(r, how) }); err != nil {
			return err
		}
		if pl.B.Fail != 0 {
			c.boardEnded(r, "fail")
			return errors.New("sim: the key's runs fail as planned")
		}
		c.boardEnded(r, "ok")
		return nil
	}
}

func (c *checker) boardEnded(r *boardRun, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.end, r.outcome = c.w.now(), outcome
}

// boardTroubled reports whether p was killed or frozen within [from − 1
// minute, to], or a request of its to the blackboard table failed within
// [from, to]: its claim may then have lapsed, or its end gone unrecorded.
func (c *checker) boardTroubled(p *proc, from, to time.Time) bool {
	return c.downAround(p, from, to) || p.killed() || hitBetween(c.board.hits[p], from, to)
}

// drainIssued notes that a drain of p was issued: from then on it may
// take effect, whatever it answers.
func (c *checker) drainIssued(p *proc) { c.note(p, "drain requested") }

// stoppedBetween reports whether p was stopped (SIGTERM) or drained
// within [from, to], or a drain of it was issued by to (however long
// before: the request stays in its presence record until it acts on it,
// which a failed listing and a change of leader can put off past a
// minute — seed 82037, 62 s): a run it interrupted is recorded to run
// again now.
func (c *checker) stoppedBetween(p *proc, from, to time.Time) bool {
	return slices.ContainsFunc(c.notes[p], func(n procNote) bool {
		switch n.what {
		case "stopped", "drained":
			return !n.at.Before(from) && !n.at.After(to)
		case "drain requested":
			return !n.at.After(to)
		}
		return false
	})
}

// boardStarted records a run's start and checks what must hold then.
func (c *checker) boardStarted(p *proc, task leasecron.Task) *boardRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.w.now()
	r := &boardRun{key: task.Key, proc: p, start: now, due: task.Due, claimed: p.clock.toTrue(task.Due)}
	k := c.boardKeyLocked(task.Key)
	c.w.stats.feature(append([]string{"blackboard"}, c.w.moment(p)...))
	for _, o := range k.runs {
		// One at a time: a run still under way elsewhere is one whose
		// worker went down (its claim lapsed and was taken over).
		if o.outcome == "" && !c.downAround(o.proc, o.start, now) && !o.proc.killed() {
			c.violate(InvBoardOnce, "blackboard key %s started on %s while %s still ran it (since %s)", task.Key, p.id, o.proc.id, c.at(o.start))
		}
	}
	if prev := lastClaimed(k.runs); prev != nil {
		// (With no least gap the two claims' starts, read on two hosts'
		// clocks, may even come in either order.)
		least, why := c.boardLeastGapLocked(k, prev, r)
		if gap := r.due.Sub(prev.due); least > 0 && gap < least-time.Millisecond {
			c.violate(InvBoardInterval, "blackboard key %s started on %s %v after its run on %s (their claims' starts by the claimers' clocks) against an interval of %v (%s)",
				task.Key, p.id, gap, prev.proc.id, least, why)
		}
	}
	for _, o := range k.ops {
		if o.kind != OpBoardRemove || o.err != nil || o.answered.IsZero() || !o.answered.Before(now) {
			continue
		}
		again := slices.ContainsFunc(k.ops, func(a *boardOpEv) bool {
			return a.kind == OpBoardAdd && !a.issued.After(now) && (a.answered.IsZero() || !a.answered.Before(o.issued))
		})
		if !again && r.claimed.After(o.issued.Add(c.skew)) {
			c.violate(InvBoardRemoved, "blackboard key %s started on %s, claimed at %s, after its removal answered at %s", task.Key, p.id, c.at(r.claimed), c.at(o.answered))
		}
	}
	k.runs = append(k.runs, r)
	return r
}

// lastClaimed is the run claimed last, in true time (claims of a key
// follow one another: each reads the row the one before wrote).
func lastClaimed(runs []*boardRun) *boardRun {
	var last *boardRun
	for _, r := range runs {
		if last == nil || r.claimed.After(last.claimed) {
			last = r
		}
	}
	return last
}

// boardLeastGapLocked is how long after prev's claim r's claim may start,
// by the claimers' clocks, and why: the key's interval; none when a run
// now, a new add of the key, or a shutdown that interrupted prev came
// between them; the lock TTL if shorter, when prev's claim may have been
// abandoned.
func (c *checker) boardLeastGapLocked(k *boardKey, prev, r *boardRun) (time.Duration, string) {
	from, to := prev.claimed.Add(-5*time.Second), r.start
	var intervals []time.Duration
	var settled []*boardOpEv // the definitions answered before prev
	for _, o := range k.ops {
		if o.kind != OpBoardAdd && o.kind != OpBoardRunNow || o.issued.After(to) {
			continue
		}
		if o.kind == OpBoardAdd && !o.answered.IsZero() && o.answered.Before(from) {
			if o.err == nil {
				settled = append(settled, o)
			} else {
				intervals = append(intervals, o.interval) // maybe written
			}
			continue
		}
		if !o.answered.IsZero() && o.answered.Before(from) {
			continue
		}
		if o.kind == OpBoardRunNow || !o.replace {
			return 0, "a run-now or a new add came between them"
		}
		if removedBefore(k, o, from, to) {
			return 0, "a replace that may have added the key again after a remove came between them"
		}
		intervals = append(intervals, o.interval)
	}
	intervals = append(intervals, mayBeInForce(settled)...)
	if len(intervals) == 0 {
		return 0, "no definition known"
	}
	// (Only a run cut short: the product asks for the next run at once
	// only when the handler returned an error.)
	if prev.outcome != "ok" && c.stoppedBetween(prev.proc, prev.start, to) {
		return 0, "the earlier run's worker was stopped: an interrupted run runs again"
	}
	iv := slices.Min(intervals)
	if ttl := c.w.plan.Board.ttl(iv); ttl < iv && c.boardTroubled(prev.proc, prev.start, to) {
		return ttl, "the lock TTL: the earlier run's worker went down or met faults, and its claim may have lapsed"
	}
	return iv, "the interval"
}

// removedBefore reports whether a remove of k may have deleted its row
// after from and before the replace add o wrote: o then added the key
// again, a new key due at once (README, the blackboard: a key added
// again after a remove starts as a new key), whatever --replace says of
// a key still on the board (sweep seed 99442: a remove and a replace
// issued together, the remove's delete landing first). A remove that
// answered an error may have deleted the row too.
func removedBefore(k *boardKey, o *boardOpEv, from, to time.Time) bool {
	return slices.ContainsFunc(k.ops, func(rm *boardOpEv) bool {
		return rm.kind == OpBoardRemove && !rm.issued.After(to) &&
			(rm.answered.IsZero() || !rm.answered.Before(from)) &&
			(o.answered.IsZero() || !rm.issued.After(o.answered))
	})
}

// boardDue is a moment a key became due, and what a start after which
// answers it.
type boardDue struct {
	at    time.Time
	after time.Time // a claim after this answers it
	why   string
	// troubled: the previous claim may have been abandoned, to be taken
	// over only once its lock expired.
	troubled bool
}

// finalBoard checks that every key kept starting while the fleet ran:
// each time it came due — added, run now, or its interval passed since its
// last claim — a claim followed within two cycles, plus the runs the walk
// may wait for, plus the lock TTL when a claim may have been abandoned,
// plus twice the fault storms on the way.
func (c *checker) finalBoard() {
	b := c.w.plan.Board
	if b == nil {
		return
	}
	end := c.board.stopping
	if end.IsZero() {
		end = c.w.now()
	}
	var sleeps time.Duration
	for _, k := range c.board.keys {
		var most time.Duration
		for _, o := range k.ops {
			most = max(most, o.sleep)
		}
		sleeps += most
	}
	keys := make([]string, 0, len(c.board.keys))
	for key := range c.board.keys {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		k := c.board.keys[key]
		for _, d := range c.boardDuesLocked(k) {
			iv := c.intervalAt(k, d.at)
			// Two walks (the first may meet a claim answered too late
			// to run, which runs at the next), a slow request or two.
			bound := 2*b.Cycle + b.Cycle/5 + sleeps + 30*time.Second
			if d.troubled || c.anyDown(d.at.Add(-b.ttl(iv)-time.Minute), d.at.Add(bound)) {
				bound += b.ttl(iv) + b.Cycle
			}
			bound += 2 * c.stormsBetween(d.at.Add(-10*time.Second), d.at.Add(bound))
			if d.at.Add(bound).After(end) || c.removedBy(k, d.at.Add(bound)) {
				continue
			}
			if !slices.ContainsFunc(k.runs, func(r *boardRun) bool {
				return r.claimed.After(d.after) && !r.claimed.After(d.at.Add(bound))
			}) {
				c.violateAt(d.at, InvBoardLive, "blackboard key %s came due at %s (%s) and no worker started it within %v", key, c.at(d.at), d.why, bound.Round(time.Second))
			}
		}
	}
}

// boardDuesLocked lists the moments key k came due while it was on the
// board: each add that answered, each run-now that answered (once the run
// under way then ended), and each interval after a claim (once that run
// ended).
func (c *checker) boardDuesLocked(k *boardKey) []boardDue {
	var out []boardDue
	runEnd := func(at time.Time) (time.Time, bool) {
		// The end of a run under way at at; false when one never ended.
		for _, r := range k.runs {
			if r.start.After(at) || !r.end.IsZero() && r.end.Before(at) {
				continue
			}
			if r.end.IsZero() {
				return time.Time{}, false
			}
			at = r.end
		}
		return at, true
	}
	for _, o := range k.ops {
		if o.err != nil || o.kind == OpBoardRemove || o.kind == OpBoardAdd && o.replace {
			continue
		}
		at, ok := runEnd(o.answered)
		if !ok {
			continue
		}
		out = append(out, boardDue{at: at, after: o.issued.Add(-c.skew), why: string(o.kind) + " answered at " + c.at(o.answered)})
	}
	for _, r := range k.runs {
		if r.end.IsZero() {
			continue // killed: its claim lapses in its own time
		}
		iv := c.intervalAt(k, r.claimed)
		// A definition replaced after the claim and before the key came
		// due counts from the same start (the README: a key is claimed
		// once its last start is older than its interval), so a longer
		// interval put in by then moves the due time (sweep seed 31365:
		// 15 s became 1m30s ten seconds after a claim).
		// A replace answered within a cycle after the old due time comes
		// before the walk that would have claimed the key, which then
		// counts by the new interval (sweep seed 52181: 15 s became
		// 1m30s 3 s after the key came due, with a 5 s cycle).
		var walk time.Duration
		if b := c.w.plan.Board; b != nil {
			walk = b.Cycle
		}
		for range 3 {
			next := c.intervalAt(k, r.claimed.Add(iv).Add(walk))
			if next <= iv {
				break
			}
			iv = next
		}
		at := r.claimed.Add(iv)
		if r.end.After(at) {
			at = r.end
		}
		out = append(out, boardDue{at: at, after: r.claimed, why: fmt.Sprintf("%v after its claim on %s at %s", iv, r.proc.id, c.at(r.claimed)),
			troubled: c.boardTroubled(r.proc, r.start, r.end.Add(35*time.Second)) || c.stoppedBetween(r.proc, r.start, r.end)})
	}
	return out
}

// intervalAt is the key's longest interval defined by at (the
// definitions that answered and may be in force, and any still in flight).
func (c *checker) intervalAt(k *boardKey, at time.Time) time.Duration {
	var iv time.Duration
	var settled []*boardOpEv
	for _, o := range k.ops {
		if o.kind != OpBoardAdd || o.issued.After(at) {
			continue
		}
		if o.answered.After(at) || o.err != nil {
			iv = max(iv, o.interval)
			continue
		}
		settled = append(settled, o)
	}
	for _, in := range mayBeInForce(settled) {
		iv = max(iv, in)
	}
	return iv
}

// mayBeInForce returns the intervals of the definitions among settled
// (adds that answered success, in the order they were issued) that may
// hold the key's row: the latest, and each that overlapped every one
// issued after it — writes under way together land in either order
// (seed 74192: of two replaces, the one issued first landed last, and
// its 20 s held while the checker took the other's 1m30s for the key's).
func mayBeInForce(settled []*boardOpEv) []time.Duration {
	var out []time.Duration
	for _, o := range settled {
		if !slices.ContainsFunc(settled, func(n *boardOpEv) bool { return n.issued.After(o.answered) }) {
			out = append(out, o.interval)
		}
	}
	return out
}

// removedBy reports whether a remove of the key was issued by at.
func (c *checker) removedBy(k *boardKey, at time.Time) bool {
	return slices.ContainsFunc(k.ops, func(o *boardOpEv) bool { return o.kind == OpBoardRemove && !o.issued.After(at) })
}

// anyDown reports whether any worker was killed, frozen, stopped or
// drained within [from, to].
func (c *checker) anyDown(from, to time.Time) bool {
	for _, ns := range c.notes {
		if slices.ContainsFunc(ns, func(n procNote) bool {
			return n.what != "started" && n.what != "drain requested" && !n.at.Before(from) && !n.at.After(to)
		}) {
			return true
		}
	}
	return false
}

// stormsBetween is how long fault windows other than the background
// overlapped [from, to].
func (c *checker) stormsBetween(from, to time.Time) time.Duration {
	var sum time.Duration
	start := c.w.plan.Start
	for _, f := range c.w.plan.Faults {
		if f.From == 0 && f.To == c.w.plan.Active {
			continue // the background
		}
		a, b := start.Add(f.From), start.Add(f.To)
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			sum += b.Sub(a)
		}
	}
	return sum
}

// isBoardPath reports whether a request's path is the blackboard table's.
func isBoardPath(path string) bool {
	return strings.Contains(path, "/"+blackboard.DefaultTable)
}
