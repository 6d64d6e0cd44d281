package sim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"
)

// Scenario is one simulated run as a seed describes it: the fleet's
// configuration, the operations of users, operators and the world at
// their moments, and the storage faults in force when.
type Scenario struct {
	Config
	Ops    []Op
	Faults []FaultWindow
}

// Config is the fleet a scenario runs.
type Config struct {
	Seed int64
	// Start is the true time the run begins at (near a daylight-saving
	// change of one of the zones the series use).
	Start time.Time
	// Workers are started at the beginning ("w1", "w2", …); more may join.
	Workers int
	// Shards is the workers' shards.count (1: unsharded). With Switch the
	// fleet starts unsharded and is switched to Shards by a rolling
	// restart, as the README describes.
	Shards int
	Switch bool
	// Queues is the workers' and the first client's names.queues;
	// ClientQueues the second client's (the README allows a client with
	// more queues than the workers: the workers find them).
	Queues, ClientQueues int
	// Active is how long operations are issued; Settle how long the fleet
	// then runs without faults for every task to end.
	Active, Settle time.Duration
	// Fast runs the fleet on short timings (15 s leases, 1 s mover polls
	// and shard cycles) instead of leasecron's defaults (60 s, 5 s, 5 s):
	// more failovers and handovers in a run, at more requests per
	// virtual minute.
	Fast bool
	// Clocks are the processes' clock offsets and rates (ppm).
	Clocks map[string]ClockSpec
	// Mutation, when set, names a deliberate defect switched on for the
	// run (builds with the leasecron_mutate tag only).
	Mutation string
	// Board is the blackboard the workers walk (nil: none).
	Board *BoardSpec
	// MaxDepth is the fleet's queue.max_depth (0: no backpressure), the
	// workers' and the clients' alike; resume_below is its default.
	MaxDepth int
	// API has the second client schedule through the HTTP API, as a
	// program of another language would (SIM_API=1, or the fixed API
	// seeds); the first keeps the Go client. Not drawn from the seed, so
	// that it changes no seed's plan.
	API bool
}

// ClockSpec is a process clock's offset from true time and its rate.
type ClockSpec struct {
	Offset time.Duration
	PPM    float64
}

// FaultWindow puts fault rates in force for a while, for one process or
// (Target "") every one, on the requests of one service ("" every one).
type FaultWindow struct {
	From, To time.Duration
	Target   string
	Service  string
	Rates    Rates
}

// OpKind is what an operation does.
type OpKind string

// The operations.
const (
	OpSchedule   OpKind = "schedule"
	OpMany       OpKind = "schedule-many" // a schedule --file, or a batch with a callback
	OpCancel     OpKind = "cancel"
	OpReschedule OpKind = "reschedule"
	OpRunNow     OpKind = "run-now"
	OpPause      OpKind = "pause"
	OpResume     OpKind = "resume"
	OpDisable    OpKind = "disable"
	OpEnable     OpKind = "enable"
	OpRequeue    OpKind = "requeue-dead"
	OpBulk       OpKind = "bulk"
	OpDrain      OpKind = "drain"
	OpSetShards  OpKind = "shards-set"
	OpStart      OpKind = "start"  // a worker starts (or restarts with N shards)
	OpStop       OpKind = "stop"   // SIGTERM
	OpKill       OpKind = "kill"   // SIGKILL: no cleanup
	OpFreeze     OpKind = "freeze" // SIGSTOP for Dur, then SIGCONT
	OpLookup     OpKind = "lookup" // status of every task that should be pending
	OpKillClient OpKind = "kill-client"
	OpRow        OpKind = "insert-row" // a task row written from another language
	OpRowDelete  OpKind = "delete-row" // that row deleted by its writer
)

// Op is one operation of a scenario.
type Op struct {
	At   time.Duration
	Kind OpKind
	// Client is the client process that issues it (0 or 1).
	Client int
	Task   string
	Worker string
	Spec   *TaskSpec
	Many   []TaskSpec
	// Batch and Callback make a schedule-many a batch.
	Batch    string
	Callback *TaskSpec
	Type     string
	Bulk     string // requeue-dead, cancel-pending, disable-series
	Dur      time.Duration
	N        int
	// FailAt, on a schedule-many, makes the FailAt-th transaction of task
	// rows its client sends for it, with every retry, answer 503
	// ServerBusy: the file is rolled back after rows of it were written
	// (planner.rollback).
	FailAt int
}

// TaskSpec is a task as a scenario schedules it.
type TaskSpec struct {
	ID   string
	Type string
	// Due is relative to the operation's moment.
	Due         time.Duration
	Recurrence  string
	TZ          string
	MaxAttempts int
	Behaviour   Behaviour
	Unique      *UniqueSpec
	After       []string
	AfterAny    bool
	Replace     bool
	// Row: written as a table row from another language (README, the
	// table contract), with no id index. Bad, for such a row, names the
	// property written malformed (badRows): the mover must set the row
	// aside, never run it nor drop it.
	Row bool
	Bad string
}

// UniqueSpec is a unique key, its window and states.
type UniqueSpec struct {
	Key    string
	For    time.Duration
	States string // "" for the default, or a --unique-states list
}

// Behaviour is what a task's handler does, carried in its payload.
type Behaviour struct {
	// Fail: the first Fail attempts fail (-1: every one).
	Fail int `json:"fail,omitempty"`
	// Sleep: how long each attempt takes.
	Sleep time.Duration `json:"sleep,omitempty"`
	// Snooze: the first attempt snoozes this long, Snoozes times.
	Snooze  time.Duration `json:"snooze,omitempty"`
	Snoozes int           `json:"snoozes,omitempty"`
	// Progress: report progress while it runs.
	Progress bool `json:"progress,omitempty"`
}

// The task types the scenarios use, and their limits.
const (
	TypePlain    = "plain"
	TypePausable = "pausable"
	TypeLimited  = "limited" // at most LimitedConcurrency at once
	TypeRated    = "rated"   // at most RatedCount starts per RatedPer
	TypeCallback = "callback"
	TypeSlow     = "slow"

	LimitedConcurrency = 2
	RatedCount         = 3
	RatedPer           = 10 * time.Second
)

var taskTypes = []string{TypePlain, TypePlain, TypePlain, TypePausable, TypeLimited, TypeRated, TypeSlow}

// Zones whose daylight-saving changes the scenarios start near.
var dstStarts = []time.Time{
	time.Date(2026, 3, 29, 0, 50, 0, 0, time.UTC),  // Europe: 02:00 CET → 03:00 CEST at 01:00 UTC
	time.Date(2026, 10, 25, 0, 50, 0, 0, time.UTC), // Europe: 03:00 CEST → 02:00 CET at 01:00 UTC
	time.Date(2026, 3, 8, 6, 50, 0, 0, time.UTC),   // US: 02:00 EST → 03:00 EDT at 07:00 UTC
	time.Date(2026, 11, 1, 5, 50, 0, 0, time.UTC),  // US: 02:00 EDT → 01:00 EST at 06:00 UTC
	time.Date(2026, 6, 15, 11, 58, 0, 0, time.UTC), // no change
}

var zones = []string{"Europe/Amsterdam", "America/New_York", "UTC", ""}

// planner generates a scenario from a seed.
type planner struct {
	r   *rand.Rand
	sc  *Scenario
	ids int
	// what has been planned, for the operations that act on it
	oneOffs, series, dead, callbacks []string
	spec                             map[string]*TaskSpec
	workers                          map[string]bool // planned alive
	frozenUntil                      map[string]time.Duration
	shardCounts                      []int
}

// Plan generates the scenario of seed.
func Plan(seed int64) *Scenario {
	r := rand.New(rand.NewPCG(uint64(seed), 0x1ea5ec40))
	p := &planner{r: r, sc: &Scenario{}, spec: map[string]*TaskSpec{}, workers: map[string]bool{}, frozenUntil: map[string]time.Duration{}}
	c := &p.sc.Config
	c.Seed = seed
	c.API = os.Getenv("SIM_API") != ""
	c.Start = dstStarts[r.IntN(len(dstStarts))].Add(time.Duration(r.IntN(300)) * time.Second)
	c.Workers = 2 + r.IntN(3)
	switch x := r.IntN(10); {
	case x < 4:
		c.Shards = 1
	case x < 8:
		c.Shards = []int{2, 3, 4, 8}[r.IntN(4)]
	default:
		c.Shards, c.Switch = []int{4, 8}[r.IntN(2)], true
	}
	c.Queues = 1 + r.IntN(3)
	c.ClientQueues = c.Queues
	if r.IntN(4) == 0 {
		c.ClientQueues = c.Queues + 1
	}
	c.Active = time.Duration(4+r.IntN(5)) * time.Minute
	c.Fast = r.IntN(3) == 0
	c.Settle = 25 * time.Minute
	c.Clocks = map[string]ClockSpec{}
	for i := 1; i <= 6; i++ {
		// Hosts kept by NTP: within a second of each other, rates within
		// 100 ppm (what the README allows; see "Delivery guarantees").
		c.Clocks[workerName(i)] = ClockSpec{Offset: time.Duration(r.IntN(1000)-500) * time.Millisecond, PPM: float64(r.IntN(200) - 100)}
	}
	c.Clocks["c0"] = ClockSpec{Offset: time.Duration(r.IntN(1000)-500) * time.Millisecond}
	c.Clocks["c1"] = ClockSpec{Offset: time.Duration(r.IntN(1000)-500) * time.Millisecond}
	for i := 1; i <= c.Workers; i++ {
		p.workers[workerName(i)] = true
	}
	if c.Shards > 1 && !c.Switch {
		p.shardCounts = []int{c.Shards}
	}
	p.faults()
	p.ops()
	p.episode()
	p.board()
	p.rows()
	p.backpressure()
	p.rollback()
	p.earlyBurst()
	slices.SortStableFunc(p.sc.Ops, func(a, b Op) int { return int(a.At - b.At) })
	return p.sc
}

func workerName(i int) string { return fmt.Sprintf("w%d", i) }

// backpressure gives a quarter of the fleets a queue.max_depth of 16, 32
// or 64: small enough for bursts (a file or a batch of a few hundred due
// together, the workers' own runs, whose messages count while invisible)
// to reach it, so that the mover holds back and moves a part of what is
// due and the clients send fewer tasks due now themselves, beside every
// other feature; and a third of those one of 3, 6 or 12, below what a
// sharded fleet's series keep waiting early. With those alone, 21 of 500
// seeds once failed: a shard's owner held back for good by messages other
// owners sent early (row 188, seed 113833: eight shards, max_depth 3). A
// held-back mover now reads the other shards' early sends from their
// rows. It draws from a stream of its own, so the rest of a seed's plan is
// what it was without it (and a fleet given 16, 32 or 64 before keeps it
// unless its next draw makes it small).
func (p *planner) backpressure() {
	c := &p.sc.Config
	r := rand.New(rand.NewPCG(uint64(c.Seed), 0xde97)) //nolint:gosec // a simulation's plan, not a secret
	if r.IntN(4) == 0 {
		c.MaxDepth = []int{16, 32, 64}[r.IntN(3)]
		if r.IntN(3) == 0 {
			c.MaxDepth = []int{3, 6, 12}[r.IntN(3)]
		}
	}
}

// MoverTarget, as a freeze's worker, is the next worker to send a
// mover's commit: it is frozen with that request in hand.
const MoverTarget = "@mover"

// QueueTarget is a fault window's target for the queue service itself: its
// Lost rate is how often a dequeue hands a message out without hiding it
// (a second delivery), while no process's own requests fail, so the
// workers that run the two deliveries are not excused as troubled.
const QueueTarget = "@queue"

// episode plans, in every seed, a few operations aimed at a
// meeting of features the random stream reaches too seldom for the fixed
// seeds to show that the checker sees it broken (make sim-mutants):
//
//   - a key asked for again while its task waits between attempts (a
//     snooze or a retry's backoff): two live tasks would hold it if the
//     key were freed by the wait;
//   - a bulk requeue of many dead letters of tasks that die again at
//     once: the walk meets their new dead letters, which it must keep;
//   - the mover frozen past its lease in the middle of a burst of due
//     tasks: it sends the commit it had in hand after its successor
//     committed, which the fence must refuse;
//   - slow tasks due together while the queue service hands messages out
//     twice: a second delivery meets its run under way on a worker that
//     met no fault, which a claim must refuse.
//   - (the fifth) changes that race what they change (races).
//
// They come after the random stream and draw from their own, so the rest
// of a seed's plan is what it was without them.
func (p *planner) episode() {
	c := &p.sc.Config
	r := rand.New(rand.NewPCG(uint64(c.Seed), 0xe915)) //nolint:gosec // a simulation's plan, not a secret
	at := 20*time.Second + time.Duration(r.Int64N(int64(c.Active-80*time.Second)))
	cl := r.IntN(2)
	switch c.Seed % 5 {
	case 1:
		key := fmt.Sprintf("ke%d", c.Seed)
		first := &TaskSpec{ID: p.newID("t"), Type: TypePlain, Unique: &UniqueSpec{Key: key}}
		if r.IntN(2) == 0 {
			first.Behaviour = Behaviour{Snooze: 10 * time.Second, Snoozes: 2}
		} else {
			first.Behaviour, first.MaxAttempts = Behaviour{Fail: 3}, 4 // backoffs of about 2, 4 and 8 s
		}
		p.oneOffs = append(p.oneOffs, first.ID)
		p.spec[first.ID] = first
		p.add(Op{At: at, Kind: OpSchedule, Client: cl, Task: first.ID, Spec: first})
		for d := time.Second; d <= 20*time.Second; d += 1500 * time.Millisecond {
			again := &TaskSpec{ID: p.newID("t"), Type: TypePlain, Unique: &UniqueSpec{Key: key}}
			p.oneOffs = append(p.oneOffs, again.ID)
			p.spec[again.ID] = again
			p.add(Op{At: at + d, Kind: OpSchedule, Client: r.IntN(2), Task: again.ID, Spec: again})
		}
	case 2:
		op := Op{At: at, Kind: OpMany, Client: cl}
		for range 150 {
			s := TaskSpec{ID: p.newID("t"), Type: TypePlain, MaxAttempts: 1, Behaviour: Behaviour{Fail: -1}}
			p.oneOffs = append(p.oneOffs, s.ID)
			p.dead = append(p.dead, s.ID)
			p.spec[s.ID] = &s
			op.Many = append(op.Many, s)
		}
		p.add(op)
		p.add(Op{At: at + time.Minute, Kind: OpBulk, Client: r.IntN(2), Bulk: "requeue-dead", Type: TypePlain})
	case 3:
		op := Op{At: at, Kind: OpMany, Client: cl}
		for i := range 200 {
			s := TaskSpec{ID: p.newID("t"), Type: TypePlain, Due: 10*time.Second + time.Duration(i)*20*time.Millisecond}
			p.oneOffs = append(p.oneOffs, s.ID)
			p.spec[s.ID] = &s
			op.Many = append(op.Many, s)
		}
		p.add(op)
		// Past the lease and the next worker's poll for it (15 s and 3 s
		// fast, 60 s and 15 s by default).
		freeze := 30 * time.Second
		if !c.Fast {
			freeze = 100 * time.Second
		}
		p.add(Op{At: at + time.Second, Kind: OpFreeze, Worker: MoverTarget, Dur: freeze})
		if len(p.workers) < 6 {
			// A worker joins, so that one is there to take over.
			w := workerName(len(p.workers) + 1)
			p.workers[w] = true
			p.add(Op{At: at, Kind: OpStart, Worker: w})
		}
	case 4:
		op := Op{At: at, Kind: OpMany, Client: cl}
		for range 6 {
			s := TaskSpec{ID: p.newID("t"), Type: TypeSlow, Behaviour: Behaviour{Sleep: 40 * time.Second}}
			p.oneOffs = append(p.oneOffs, s.ID)
			p.spec[s.ID] = &s
			op.Many = append(op.Many, s)
		}
		p.add(op)
		var dup Rates
		dup[Lost] = 0.5
		p.sc.Faults = append(p.sc.Faults, FaultWindow{From: at, To: at + time.Minute, Target: QueueTarget, Service: "queue", Rates: dup})
	case 0:
		p.races(r, at)
	}
}

// races plans the episode of the seeds the others leave out: changes that
// race what they change, which the random stream makes too seldom for
// every pairing to show (the coverage report's "never met"):
//
//   - cancels aimed at the moment a task comes due (up to 1.5 s either side),
//     of tasks of every type and behaviour: a cancel landing before the
//     move must keep the task from running, one landing after may lose
//     the race but must not lose or double anything;
//   - a dead letter requeued and then, within seconds, replaced or
//     cancelled by id, and a child waiting `--after` it: the requeued run
//     meets the change while it is queued or running.
func (p *planner) races(r *rand.Rand, at time.Duration) {
	types := []string{TypePlain, TypePausable, TypeLimited, TypeRated, TypeSlow}
	for i := range 10 {
		s := &TaskSpec{ID: p.newID("t"), Type: types[i%len(types)], Due: 5*time.Second + time.Duration(i)*1500*time.Millisecond}
		switch r.IntN(4) {
		case 0:
			s.Behaviour = Behaviour{Sleep: 3 * time.Second, Progress: true}
		case 1:
			s.Behaviour = Behaviour{Snooze: 2 * time.Second, Snoozes: 1}
		case 2:
			s.Behaviour, s.MaxAttempts = Behaviour{Fail: 1}, 3
		}
		if i > 0 && r.IntN(3) == 0 {
			s.After, s.AfterAny = []string{p.oneOffs[len(p.oneOffs)-1]}, r.IntN(2) == 0
		}
		p.oneOffs = append(p.oneOffs, s.ID)
		p.spec[s.ID] = s
		p.add(Op{At: at, Kind: OpSchedule, Client: r.IntN(2), Task: s.ID, Spec: s})
		jitter := time.Duration(r.Int64N(int64(3*time.Second))) - 1500*time.Millisecond
		p.add(Op{At: at + s.Due + jitter, Kind: OpCancel, Client: r.IntN(2), Task: s.ID})
	}
	// A task that dies, its child, its requeue and a change of it.
	// It runs 4 s before it fails, so that the change meets its run.
	dead := &TaskSpec{ID: p.newID("t"), Type: TypeSlow, MaxAttempts: 1, Behaviour: Behaviour{Fail: -1, Sleep: 4 * time.Second}}
	child := &TaskSpec{ID: p.newID("t"), Type: TypePlain, After: []string{dead.ID}, AfterAny: r.IntN(2) == 0}
	for _, s := range []*TaskSpec{dead, child} {
		p.oneOffs = append(p.oneOffs, s.ID)
		p.spec[s.ID] = s
		p.add(Op{At: at, Kind: OpSchedule, Client: r.IntN(2), Task: s.ID, Spec: s})
	}
	p.dead = append(p.dead, dead.ID)
	again := at + 40*time.Second
	p.add(Op{At: again, Kind: OpRequeue, Client: r.IntN(2), Task: dead.ID})
	change := again + time.Duration(r.Int64N(int64(3*time.Second)))
	if r.IntN(2) == 0 {
		p.add(Op{At: change, Kind: OpCancel, Client: r.IntN(2), Task: dead.ID})
		return
	}
	s := &TaskSpec{ID: dead.ID, Type: TypePlain, Replace: true}
	p.add(Op{At: change, Kind: OpSchedule, Client: r.IntN(2), Task: s.ID, Spec: s})
}

func (p *planner) pick(s []string) string { return s[p.r.IntN(len(s))] }

func (p *planner) chance(pct int) bool { return p.r.IntN(100) < pct }

func (p *planner) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(p.r.Int64N(int64(hi-lo)+1))
}

// faults plans a background of rare faults over the whole active phase
// and, in most scenarios, storms: short windows of many faults, for every
// process or one.
func (p *planner) faults() {
	c := &p.sc.Config
	level := p.r.IntN(4)
	if level == 0 {
		return
	}
	bg := 0.002 * float64(level)
	p.sc.Faults = append(p.sc.Faults, FaultWindow{From: 0, To: c.Active, Rates: Rates{0, bg, bg / 2, bg, bg / 2, bg / 2}})
	for range p.r.IntN(2 * level) {
		from := p.dur(0, c.Active-time.Minute)
		w := FaultWindow{From: from, To: from + p.dur(5*time.Second, 40*time.Second)}
		if p.chance(50) {
			w.Target = workerName(1 + p.r.IntN(c.Workers))
		}
		if p.chance(30) {
			w.Service = p.pick([]string{"blob", "queue", "table"})
		}
		x := 0.05 + 0.25*p.r.Float64()
		w.Rates = Rates{0, x, x / 3, x / 3, x / 6, x / 6}
		p.sc.Faults = append(p.sc.Faults, w)
	}
}

// ops plans the operations of the active phase: a stream of schedules and
// of what users and operators do to what was scheduled, and what happens
// to the workers.
func (p *planner) ops() {
	c := &p.sc.Config
	for t := 5 * time.Second; t < c.Active; t += p.dur(500*time.Millisecond, 6*time.Second) {
		p.userOp(t)
	}
	// The world: kills, stops, freezes, joins; drains by an operator.
	for t := p.dur(20*time.Second, time.Minute); t < c.Active-30*time.Second; t += p.dur(30*time.Second, 2*time.Minute) {
		p.workerOp(t)
	}
	if c.Switch {
		p.rollingSwitch()
	}
	if c.Shards > 1 && !c.Switch {
		for range p.r.IntN(3) {
			n := []int{2, 3, 4, 8, 16, c.Shards}[p.r.IntN(6)]
			p.add(Op{At: p.dur(time.Minute, c.Active-time.Minute), Kind: OpSetShards, N: n})
		}
	}
	// Lookups by id of every pending task, now and then.
	for t := p.dur(30*time.Second, 90*time.Second); t < c.Active; t += p.dur(time.Minute, 3*time.Minute) {
		p.add(Op{At: t, Kind: OpLookup, Client: p.r.IntN(2)})
	}
	if p.chance(10) {
		p.add(Op{At: p.dur(0, c.Active/2), Kind: OpKillClient, Client: p.r.IntN(2)})
	}
}

func (p *planner) add(op Op) { p.sc.Ops = append(p.sc.Ops, op) }

func (p *planner) newID(prefix string) string {
	p.ids++
	return fmt.Sprintf("%s%d", prefix, p.ids)
}

// userOp plans one operation of a user at t.
func (p *planner) userOp(t time.Duration) {
	cl := p.r.IntN(2)
	x := p.r.IntN(100)
	switch {
	case x < 45 || len(p.oneOffs) < 3:
		s := p.task(t)
		p.add(Op{At: t, Kind: OpSchedule, Client: cl, Task: s.ID, Spec: s})
	case x < 52:
		p.many(t, cl)
	case x < 58 && len(p.series) > 0 || x < 54:
		p.seriesOp(t, cl)
	case x < 64:
		// A batch's callback too, waiting for its members or released
		// (one draw, as before callbacks were among them: every other
		// operation of a seed stays as it was, and only the target of a
		// cancel planned after a batch may change).
		id := p.pick(slices.Concat(p.oneOffs, p.series, p.callbacks))
		p.add(Op{At: t, Kind: OpCancel, Client: cl, Task: id})
	case x < 69:
		id := p.pick(p.oneOffs)
		p.add(Op{At: t, Kind: OpReschedule, Client: cl, Task: id, Dur: p.due()})
	case x < 73:
		// Replace: the same id scheduled again with Replace.
		id := p.pick(p.oneOffs)
		s := p.task(t)
		s.ID, s.Replace, s.After, s.AfterAny, s.Unique = id, true, nil, false, nil
		p.add(Op{At: t, Kind: OpSchedule, Client: cl, Task: id, Spec: s})
	case x < 76:
		p.add(Op{At: t, Kind: OpRunNow, Client: cl, Task: p.pick(p.oneOffs)})
	case x < 81:
		d := time.Duration(0)
		if p.chance(40) {
			d = p.dur(10*time.Second, 2*time.Minute)
		}
		p.add(Op{At: t, Kind: OpPause, Client: cl, Type: TypePausable, Dur: d})
		if d == 0 || p.chance(50) {
			p.add(Op{At: t + p.dur(5*time.Second, 90*time.Second), Kind: OpResume, Client: cl, Type: TypePausable})
		}
	case x < 86 && len(p.dead) > 0:
		p.add(Op{At: t, Kind: OpRequeue, Client: cl, Task: p.pick(p.dead)})
	case x < 90:
		kind := p.pick([]string{"requeue-dead", "requeue-dead", "cancel-pending", "disable-series"})
		typ := p.pick(taskTypes)
		if kind == "disable-series" {
			typ = TypePlain
		}
		p.add(Op{At: t, Kind: OpBulk, Client: cl, Bulk: kind, Type: typ})
	case x < 94:
		// Again a task id that ran or was cancelled: ids are reused.
		s := p.task(t)
		s.ID, s.Unique, s.After, s.AfterAny = p.pick(p.oneOffs), nil, nil, false
		p.add(Op{At: t, Kind: OpSchedule, Client: cl, Task: s.ID, Spec: s})
	default:
		s := p.task(t)
		p.add(Op{At: t, Kind: OpSchedule, Client: cl, Task: s.ID, Spec: s})
	}
}

// due picks a due time relative to now: due now (sent by the client),
// soon, within the early-send window, beyond it, or past.
func (p *planner) due() time.Duration {
	switch x := p.r.IntN(100); {
	case x < 30:
		return 0
	case x < 45:
		return p.dur(time.Second, 5*time.Second)
	case x < 70:
		return p.dur(6*time.Second, 40*time.Second)
	case x < 90:
		return p.dur(40*time.Second, 4*time.Minute)
	default:
		return -p.dur(time.Second, time.Minute)
	}
}

// task plans a one-off task scheduled at t.
func (p *planner) task(t time.Duration) *TaskSpec {
	s := &TaskSpec{ID: p.newID("t"), Type: p.pick(taskTypes), Due: p.due()}
	s.Behaviour = p.behaviour(s.Type)
	if p.chance(20) {
		s.MaxAttempts = 1 + p.r.IntN(3)
	}
	if s.Behaviour.Fail == -1 {
		p.dead = append(p.dead, s.ID)
	}
	if p.chance(15) {
		s.Unique = p.unique()
	}
	if p.chance(12) && len(p.oneOffs) > 2 {
		for range 1 + p.r.IntN(3) {
			parent := p.pick(p.oneOffs[max(0, len(p.oneOffs)-12):])
			if !slices.Contains(s.After, parent) {
				s.After = append(s.After, parent)
			}
		}
		s.AfterAny = p.chance(30)
	}
	p.oneOffs = append(p.oneOffs, s.ID)
	p.spec[s.ID] = s
	return s
}

func (p *planner) unique() *UniqueSpec {
	u := &UniqueSpec{Key: fmt.Sprintf("k%d", p.r.IntN(4))}
	switch p.r.IntN(4) {
	case 1:
		u.For = 5 * time.Second
	case 2:
		u.For = 30 * time.Second
	}
	if p.chance(25) {
		u.States = "scheduled,queued,running"
	}
	return u
}

func (p *planner) behaviour(typ string) Behaviour {
	var b Behaviour
	switch x := p.r.IntN(100); {
	case x < 12:
		b.Fail = 1
	case x < 20:
		b.Fail = -1
	}
	if p.chance(7) {
		b.Snooze, b.Snoozes = p.dur(time.Second, 10*time.Second), 1+p.r.IntN(2)
	}
	switch {
	case typ == TypeSlow:
		b.Sleep = p.dur(5*time.Second, 90*time.Second)
	case typ == TypeLimited:
		b.Sleep = p.dur(time.Second, 8*time.Second)
	case p.chance(30):
		b.Sleep = p.dur(100*time.Millisecond, 3*time.Second)
	}
	b.Progress = b.Sleep > 0 && p.chance(30)
	return b
}

// many plans a schedule --file of many lines, or a batch with a callback.
func (p *planner) many(t time.Duration, cl int) {
	n := 3 + p.r.IntN(12)
	if p.chance(4) {
		n = 300 + p.r.IntN(900) // a big file
	}
	op := Op{At: t, Kind: OpMany, Client: cl}
	for i := range n {
		s := p.task(t)
		s.After, s.AfterAny, s.Unique = nil, false, nil // no unique keys in a batch here
		if n > 50 {
			s.Behaviour, s.Type = Behaviour{}, TypePlain
		} else if i > 0 && p.chance(15) {
			// A line waiting for an earlier line of the same file.
			s.After, s.AfterAny = []string{op.Many[p.r.IntN(i)].ID}, p.chance(30)
		}
		op.Many = append(op.Many, *s)
	}
	if n <= 50 && p.chance(60) {
		op.Batch = p.newID("b")
		cb := &TaskSpec{ID: p.newID("cb"), Type: TypeCallback, Behaviour: p.behaviour(TypeCallback)}
		cb.Behaviour.Fail = min(cb.Behaviour.Fail, 0) // a callback that never succeeds helps nobody
		if p.chance(20) {
			cb.Behaviour.Fail = 1
		}
		op.Callback = cb
		p.callbacks = append(p.callbacks, cb.ID)
	}
	p.add(op)
}

// seriesOp plans a recurring series, or disables or enables one.
func (p *planner) seriesOp(t time.Duration, cl int) {
	if len(p.series) > 0 && p.chance(50) {
		kind := OpDisable
		if p.chance(40) {
			kind = OpEnable
		}
		p.add(Op{At: t, Kind: kind, Client: cl, Task: p.pick(p.series)})
		return
	}
	s := &TaskSpec{ID: p.newID("s"), Type: p.pick([]string{TypePlain, TypePlain, TypePausable, TypeLimited, TypeRated, TypeSlow}), Due: p.dur(0, 30*time.Second)}
	switch p.r.IntN(4) {
	case 0:
		s.Recurrence = "@every 20s"
	case 1:
		s.Recurrence = "@every 1m"
	case 2:
		s.Recurrence, s.TZ = "*/2 * * * *", p.pick(zones)
	default:
		// Minutes of the hours that daylight saving skips or repeats.
		s.Recurrence, s.TZ = "0,15,30,45 * * * *", p.pick(zones)
	}
	s.Behaviour = p.behaviour(s.Type)
	if s.Behaviour.Fail == -1 {
		s.Behaviour.Fail = 1 // occurrences that die: via Fail 1 and max attempts 1
	}
	if s.Behaviour.Sleep > 10*time.Second {
		s.Behaviour.Sleep = 10 * time.Second // shorter than the interval
	}
	if p.chance(10) {
		s.MaxAttempts = 1
	}
	if p.chance(10) {
		s.Unique = p.unique()
	}
	p.series = append(p.series, s.ID)
	p.spec[s.ID] = s
	p.add(Op{At: t, Kind: OpSchedule, Client: cl, Task: s.ID, Spec: s})
}

// workerOp plans what happens to a worker at t.
func (p *planner) workerOp(t time.Duration) {
	var alive []string
	for w, ok := range p.workers {
		if ok && p.frozenUntil[w] < t {
			alive = append(alive, w)
		}
	}
	slices.Sort(alive)
	var down []string
	for w, ok := range p.workers {
		if !ok {
			down = append(down, w)
		}
	}
	slices.Sort(down)
	x := p.r.IntN(100)
	switch {
	case len(down) > 0 && (x < 35 || len(alive) < 2):
		w := p.pick(down)
		p.add(Op{At: t, Kind: OpStart, Worker: w})
		p.workers[w] = true
	case len(alive) < 2 || x < 45:
		// A new worker joins.
		w := workerName(len(p.workers) + 1)
		if len(p.workers) >= 6 {
			return
		}
		p.add(Op{At: t, Kind: OpStart, Worker: w})
		p.workers[w] = true
	case x < 65:
		w := p.pick(alive)
		p.add(Op{At: t, Kind: OpKill, Worker: w})
		p.workers[w] = false
	case x < 75:
		w := p.pick(alive)
		p.add(Op{At: t, Kind: OpStop, Worker: w})
		p.workers[w] = false
	case x < 88:
		w := p.pick(alive)
		d := p.dur(3*time.Second, 40*time.Second) // past the 15 s lease at times
		p.add(Op{At: t, Kind: OpFreeze, Worker: w, Dur: d})
		p.frozenUntil[w] = t + d
	default:
		w := p.pick(alive)
		p.add(Op{At: t, Kind: OpDrain, Client: p.r.IntN(2), Worker: w})
		p.workers[w] = false
	}
}

// rollingSwitch plans the README's switch to sharding: every worker is
// restarted with the new count, one at a time, a while apart (longer than
// two minutes at times: the run records then grow under the sharded
// workers while unsharded ones still run).
func (p *planner) rollingSwitch() {
	c := &p.sc.Config
	t := p.dur(30*time.Second, 2*time.Minute)
	for i := 1; i <= c.Workers; i++ {
		p.add(Op{At: t, Kind: OpStart, Worker: workerName(i), N: c.Shards})
		t += p.dur(20*time.Second, 3*time.Minute)
	}
}

// rollback plans, in a quarter of the seeds, a schedule --file whose
// task rows' second transaction fails whatever its retries (Op.FailAt),
// so that the file is rolled back after rows of it were written: README's
// "Nothing half-applied" says each line is then reported not written and
// never runs, which the random stream's faults reach too seldom for the
// fixed seeds to show the checker sees it broken (make sim-mutants,
// keep-rolled-back). Its lines are due 2.5 to 3.5 minutes after the file
// is written, past the two minutes within which a line taken back may
// have been sent already (the quiet phase after the active time runs what
// is due by then). From a stream of its own, so the rest of a seed's plan
// is as it was.
func (p *planner) rollback() {
	c := &p.sc.Config
	if c.Seed%4 != 3 {
		return
	}
	r := rand.New(rand.NewPCG(uint64(c.Seed), 0x0b4c)) //nolint:gosec // a simulation's plan, not a secret
	at := 20*time.Second + time.Duration(r.Int64N(int64(c.Active-40*time.Second)))
	op := Op{At: at, Kind: OpMany, Client: r.IntN(2), FailAt: 2}
	for i := range 150 {
		s := TaskSpec{ID: p.newID("t"), Type: TypePlain, Due: 150*time.Second + time.Duration(i)*400*time.Millisecond}
		p.spec[s.ID] = &s
		op.Many = append(op.Many, s)
	}
	p.add(op)
}

// earlyBurst gives the fleets with queue.max_depth a burst: three times
// max_depth one-off tasks due together, scheduled 20 s before the early
// window reaches them, so that passes send them ahead of their due time
// as far as the early room allows, and move the rest as the queue
// drains (README, limits and backpressure; row 204: the room was
// unbounded, and such a burst came due as many times max_depth of
// backlog). It draws from a stream of its own, after the rest of the
// plan, so the rest of a seed's plan is what it was without it.
func (p *planner) earlyBurst() {
	c := &p.sc.Config
	if c.MaxDepth <= 0 {
		return
	}
	window := earlyWindowOf(c.Fast)
	r := rand.New(rand.NewPCG(uint64(c.Seed), 0xea71)) //nolint:gosec // a simulation's plan, not a secret
	at := 20*time.Second + time.Duration(r.Int64N(int64(max(20*time.Second, c.Active-window-2*time.Minute))))
	op := Op{At: at, Kind: OpMany, Client: r.IntN(2)}
	for range 3 * c.MaxDepth {
		s := TaskSpec{ID: p.newID("t"), Type: TypePlain, Due: window + 20*time.Second}
		p.spec[s.ID] = &s
		op.Many = append(op.Many, s)
	}
	p.add(op)
}

// String is the operation as a line of the log.
func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%8s  c%d %-13s", o.At.Truncate(time.Millisecond), o.Client, o.Kind)
	switch o.Kind {
	case OpSchedule, OpRow:
		b.WriteString(" " + o.Spec.String())
	case OpMany:
		fmt.Fprintf(&b, " %d tasks", len(o.Many))
		if o.Batch != "" {
			fmt.Fprintf(&b, " batch %s callback %s", o.Batch, o.Callback.ID)
		}
		if o.FailAt > 0 {
			fmt.Fprintf(&b, " (its task rows' transaction %d fails)", o.FailAt)
		}
		for i, s := range o.Many {
			if i == 4 {
				fmt.Fprintf(&b, " …")
				break
			}
			b.WriteString(" [" + s.String() + "]")
		}
	case OpReschedule:
		fmt.Fprintf(&b, " %s due=%+v", o.Task, o.Dur.Round(time.Millisecond))
	case OpPause:
		fmt.Fprintf(&b, " %s for=%v", o.Type, o.Dur.Round(time.Millisecond))
	case OpResume:
		fmt.Fprintf(&b, " %s", o.Type)
	case OpBulk:
		fmt.Fprintf(&b, " %s type=%s", o.Bulk, o.Type)
	case OpStart:
		fmt.Fprintf(&b, " %s", o.Worker)
		if o.N > 0 {
			fmt.Fprintf(&b, " shards=%d", o.N)
		}
	case OpStop, OpKill, OpDrain:
		fmt.Fprintf(&b, " %s", o.Worker)
	case OpFreeze:
		fmt.Fprintf(&b, " %s for %v", o.Worker, o.Dur.Round(time.Millisecond))
	case OpSetShards:
		fmt.Fprintf(&b, " %d", o.N)
	case OpLookup, OpKillClient:
	case OpBoardAdd, OpBoardRemove, OpBoardRunNow:
		b.WriteString(boardOpString(o))
	default:
		fmt.Fprintf(&b, " %s", o.Task)
	}
	return b.String()
}

// WorkerMaxAttempts is the workers' retry.max_attempts: what a task
// without its own MaxAttempts is allowed.
const WorkerMaxAttempts = 3

// String describes a task spec in a line.
func (s TaskSpec) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s due=%+v", s.ID, s.Type, s.Due.Round(time.Millisecond))
	if s.Recurrence != "" {
		fmt.Fprintf(&b, " every=%q", s.Recurrence)
		if s.TZ != "" {
			fmt.Fprintf(&b, " tz=%s", s.TZ)
		}
	}
	if s.MaxAttempts > 0 {
		fmt.Fprintf(&b, " max=%d", s.MaxAttempts)
	}
	bh := s.Behaviour
	if bh.Fail != 0 {
		fmt.Fprintf(&b, " fail=%d", bh.Fail)
	}
	if bh.Sleep > 0 {
		fmt.Fprintf(&b, " sleep=%v", bh.Sleep.Round(time.Millisecond))
	}
	if bh.Snooze > 0 {
		fmt.Fprintf(&b, " snooze=%v×%d", bh.Snooze.Round(time.Millisecond), bh.Snoozes)
	}
	if s.Unique != nil {
		fmt.Fprintf(&b, " unique=%s/%v", s.Unique.Key, s.Unique.For)
		if s.Unique.States != "" {
			fmt.Fprintf(&b, "/%s", s.Unique.States)
		}
	}
	if len(s.After) > 0 {
		w := "after"
		if s.AfterAny {
			w = "after-any"
		}
		fmt.Fprintf(&b, " %s=%s", w, strings.Join(s.After, ","))
	}
	if s.Replace {
		b.WriteString(" replace")
	}
	if s.Row {
		b.WriteString(" row")
	}
	if s.Bad != "" {
		fmt.Fprintf(&b, " bad=%s", s.Bad)
	}
	return b.String()
}

// ratesAt returns the fault rates in force at elapsed for process proc's
// requests to svc (op is for future use: a fault on one operation).
func (sc *Scenario) ratesAt(elapsed time.Duration, proc, svc, op string) Rates {
	var r Rates
	for _, w := range sc.Faults {
		if elapsed < w.From || elapsed >= w.To || w.Target != "" && w.Target != proc || w.Service != "" && w.Service != svc {
			continue
		}
		for k := range r {
			r[k] = max(r[k], w.Rates[k])
		}
	}
	return r
}
