package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/trafficcop"
)

// The log messages the analysis reads. They are written by trafficcop.Cop
// (control) and schedule.Mover (moving; component "mover", and from
// releases before the component attribute with a "leasecron mover: "
// prefix).
const (
	MsgAcquired    = "acquired control"
	MsgLost        = "lost control"
	MsgGaveUp      = "gave up control"
	MsgMoverStart  = "in control"
	MsgMoverFenced = "stopping"
	// The owner of a sharded schedule's shards (component "shards").
	MsgShardStart    = "moving shard"
	MsgShardTaken    = "shard taken away"
	MsgShardStopped  = "stopped moving shard"
	MsgShardsStopped = "stopped moving shards"
)

// LogEvent is one line of interest from a worker's JSON log.
type LogEvent struct {
	Time       time.Time
	Worker     string
	Msg        string
	Generation int64
	Reason     string
	// Shard and Epoch are a shard event's (Msg*Shard*).
	Shard string
	Epoch int64
}

// ParseWorkerLog reads the control and mover events from a worker's log
// (JSON lines as written by the leasecron binary). Other lines, and lines
// that are not JSON (a line torn by a kill), are skipped.
func ParseWorkerLog(path, worker string) ([]LogEvent, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []LogEvent
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var l struct {
			Time       time.Time `json:"time"`
			Msg        string    `json:"msg"`
			Generation int64     `json:"generation"`
			Reason     string    `json:"reason"`
			Err        string    `json:"err"`
			Component  string    `json:"component"`
			Shard      string    `json:"shard"`
			Epoch      int64     `json:"epoch"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		if m, ok := strings.CutPrefix(l.Msg, "leasecron mover: "); ok {
			l.Msg, l.Component = m, "mover"
		}
		if (l.Msg == MsgMoverStart || l.Msg == MsgMoverFenced) && l.Component != "mover" {
			continue
		}
		switch l.Msg {
		case MsgAcquired, MsgLost, MsgGaveUp, MsgMoverStart, MsgMoverFenced,
			MsgShardStart, MsgShardTaken, MsgShardStopped, MsgShardsStopped:
			r := l.Reason
			if r == "" {
				r = l.Err
			}
			out = append(out, LogEvent{Time: l.Time, Worker: worker, Msg: l.Msg, Generation: l.Generation, Reason: r, Shard: l.Shard, Epoch: l.Epoch})
		}
	}
	return out, sc.Err()
}

// Term is one instance's term of control as its log tells it: from
// "acquired control" (logged before the lead function, and so the mover,
// starts) to "lost control" or "gave up control" (logged after the lead
// function has returned), or to the process's death when it was killed.
// The mover can only make storage calls inside its term.
type Term struct {
	Worker string
	// Shard is the shard of a shard term (ShardTerms; "" for a term of the
	// traffic cop's lease). Its Generation is then the shard's epoch.
	Shard      string
	Generation int64
	Start      time.Time
	// End is when the term ended; Open is true when the log shows no end
	// and the process did not die (the analysis then uses its own end).
	End  time.Time
	Open bool
	// EndReason is "lost", "gave up", "killed" or "open"; Cause is the
	// logged reason.
	EndReason string
	Cause     string
	// MoverStart is when the mover took the fence ("in control"); zero if
	// it never did.
	MoverStart time.Time
	// Fenced is true when the mover stopped because a newer generation
	// owned the fence.
	Fenced bool
}

// byWorker groups events by worker, each worker's in time order.
func byWorker(events []LogEvent) map[string][]LogEvent {
	out := map[string][]LogEvent{}
	for _, e := range events {
		out[e.Worker] = append(out[e.Worker], e)
	}
	for _, es := range out {
		sort.SliceStable(es, func(i, j int) bool { return es[i].Time.Before(es[j].Time) })
	}
	return out
}

// sortTerms orders terms by start, then worker.
func sortTerms(terms []Term) {
	sort.Slice(terms, func(i, j int) bool {
		if !terms[i].Start.Equal(terms[j].Start) {
			return terms[i].Start.Before(terms[j].Start)
		}
		return terms[i].Worker < terms[j].Worker
	})
}

// Terms builds the terms of control from the workers' log events. deaths
// holds when each worker process was known to be dead (killed, or seen to
// exit); a term still open at a worker's death ends there. until closes
// terms that are still open.
func Terms(events []LogEvent, deaths map[string]time.Time, until time.Time) []Term {
	var out []Term
	for w, es := range byWorker(events) {
		var cur *Term
		closeAt := func(at time.Time, reason, cause string) {
			if cur == nil {
				return
			}
			cur.End, cur.EndReason, cur.Cause = at, reason, cause
			out = append(out, *cur)
			cur = nil
		}
		for _, e := range es {
			switch e.Msg {
			case MsgAcquired:
				closeAt(e.Time, "gave up", "a new term began without an end line")
				cur = &Term{Worker: w, Generation: e.Generation, Start: e.Time}
			case MsgMoverStart:
				if cur != nil && cur.Generation == e.Generation && cur.MoverStart.IsZero() {
					cur.MoverStart = e.Time
				}
			case MsgMoverFenced:
				if cur != nil && cur.Generation == e.Generation {
					cur.Fenced = true
				}
			case MsgLost:
				if cur != nil && cur.Generation == e.Generation {
					closeAt(e.Time, "lost", e.Reason)
				}
			case MsgGaveUp:
				if cur != nil && cur.Generation == e.Generation {
					closeAt(e.Time, "gave up", e.Reason)
				}
			}
		}
		if cur != nil {
			if d, ok := deaths[w]; ok && !d.Before(cur.Start) {
				closeAt(d, "killed", "process killed while in control")
			} else {
				cur.Open = true
				closeAt(until, "open", "still in control at the end of the run")
			}
		}
	}
	sortTerms(out)
	return out
}

// ShardTerms builds the terms in which workers moved shards of a sharded
// schedule: from "moving shard" to "shard taken away" or "stopped moving
// shard" (same shard and epoch), "stopped moving shards" (all of the
// worker's), the worker's death, or until.
func ShardTerms(events []LogEvent, deaths map[string]time.Time, until time.Time) []Term {
	var out []Term
	for w, es := range byWorker(events) {
		open := map[string]*Term{}
		closeAt := func(s string, at time.Time, reason string) {
			if t := open[s]; t != nil {
				t.End, t.EndReason = at, reason
				out = append(out, *t)
				delete(open, s)
			}
		}
		for _, e := range es {
			switch e.Msg {
			case MsgShardStart:
				closeAt(e.Shard, e.Time, "gave up")
				open[e.Shard] = &Term{Worker: w, Shard: e.Shard, Generation: e.Epoch, Start: e.Time}
			case MsgShardTaken, MsgShardStopped:
				if t := open[e.Shard]; t != nil && t.Generation == e.Epoch {
					closeAt(e.Shard, e.Time, "gave up")
				}
			case MsgShardsStopped:
				for s := range open {
					closeAt(s, e.Time, "gave up")
				}
			}
		}
		for s, t := range open {
			if d, ok := deaths[w]; ok && !d.Before(t.Start) {
				closeAt(s, d, "killed")
			} else {
				t.Open = true
				closeAt(s, until, "open")
			}
		}
	}
	sortTerms(out)
	return out
}

// MaxShardOverlap is MaxOverlap of each shard's terms: the most movers of
// one shard at one instant, over all shards, and the overlapping pairs.
func MaxShardOverlap(terms []Term) (int, []Overlap) {
	byShard := map[string][]Term{}
	for _, t := range terms {
		byShard[t.Shard] = append(byShard[t.Shard], t)
	}
	maxN := 0
	var all []Overlap
	for _, ts := range byShard {
		n, ov := MaxOverlap(ts)
		maxN = max(maxN, n)
		all = append(all, ov...)
	}
	return maxN, all
}

// Overlap is a time when two terms held control at once.
type Overlap struct {
	A, B     Term
	Duration time.Duration
}

// MaxOverlap returns the largest number of terms in force at one instant
// (a term is in force over [Start, End]) and every pair of terms that
// overlapped. Terms of one worker never overlap each other.
func MaxOverlap(terms []Term) (int, []Overlap) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, t := range terms {
		edges = append(edges, edge{t.Start, +1}, edge{t.End, -1})
	}
	// At equal instants count starts first: touching terms count as
	// overlapping, the conservative reading at millisecond log precision.
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta > edges[j].delta
	})
	maxN, n := 0, 0
	for _, e := range edges {
		n += e.delta
		maxN = max(maxN, n)
	}
	var ov []Overlap
	for i := range terms {
		for j := i + 1; j < len(terms); j++ {
			a, b := terms[i], terms[j]
			if a.Worker == b.Worker {
				continue
			}
			lo, hi := a.Start, a.End
			if b.Start.After(lo) {
				lo = b.Start
			}
			if b.End.Before(hi) {
				hi = b.End
			}
			if !hi.Before(lo) {
				ov = append(ov, Overlap{A: a, B: b, Duration: hi.Sub(lo)})
			}
		}
	}
	return maxN, ov
}

// Executions summarises the record file against the tasks scheduled.
type Executions struct {
	// Tasks is how many tasks were scheduled (acknowledged).
	Tasks int
	// Executed counts tasks with at least one start record.
	Executed int
	// Missing lists scheduled tasks without a start record, sorted.
	Missing []string
	// Duplicates counts start records beyond the first per task;
	// DuplicatedTasks counts tasks run more than once.
	Duplicates, DuplicatedTasks int
	// Unexpected counts start records of ids that were never scheduled.
	Unexpected int
	// UnknownGeneration lists generations found on records that no term in
	// the logs carries (a task moved by an instance that never logged
	// taking control).
	UnknownGeneration []int64
	// ClientSent counts start records of messages no mover sent: the
	// scheduling client sent them itself because they were due now
	// (generation 0).
	ClientSent int
	// BeforeTerm counts records that started before the earliest term of
	// their generation began (impossible if the evidence is sound).
	BeforeTerm int
	// First is the first start record of each task.
	First map[string]fleet.Record
}

// Summarise checks records against the scheduled ids and the terms.
func Summarise(scheduled []string, records []fleet.Record, terms []Term) Executions {
	x := Executions{Tasks: len(scheduled), First: map[string]fleet.Record{}}
	want := make(map[string]bool, len(scheduled))
	for _, id := range scheduled {
		want[id] = true
	}
	termStart := map[int64]time.Time{}
	for _, t := range terms {
		if s, ok := termStart[t.Generation]; !ok || t.Start.Before(s) {
			termStart[t.Generation] = t.Start
		}
	}
	count := map[string]int{}
	unknown := map[int64]bool{}
	for _, r := range records {
		if r.Phase != "start" {
			continue
		}
		if !want[r.ID] {
			x.Unexpected++
			continue
		}
		count[r.ID]++
		if f, ok := x.First[r.ID]; !ok || r.At.Before(f.At) {
			x.First[r.ID] = r
		}
		if r.Generation == 0 {
			x.ClientSent++ // sent by its client, not moved by a leader
		} else if s, ok := termStart[r.Generation]; !ok {
			unknown[r.Generation] = true
		} else if r.At.Before(s) {
			x.BeforeTerm++
		}
	}
	for _, id := range scheduled {
		n := count[id]
		if n == 0 {
			x.Missing = append(x.Missing, id)
			continue
		}
		x.Executed++
		if n > 1 {
			x.Duplicates += n - 1
			x.DuplicatedTasks++
		}
	}
	sort.Strings(x.Missing)
	for g := range unknown {
		x.UnknownGeneration = append(x.UnknownGeneration, g)
	}
	sort.Slice(x.UnknownGeneration, func(i, j int) bool { return x.UnknownGeneration[i] < x.UnknownGeneration[j] })
	return x
}

// FirstStartAfter returns the earliest start record at or after t that
// satisfies keep (nil keeps all), and false if there is none.
func FirstStartAfter(records []fleet.Record, t time.Time, keep func(fleet.Record) bool) (fleet.Record, bool) {
	var best fleet.Record
	found := false
	for _, r := range records {
		if r.Phase != "start" || r.At.Before(t) || (keep != nil && !keep(r)) {
			continue
		}
		if !found || r.At.Before(best.At) {
			best, found = r, true
		}
	}
	return best, found
}

// LeaseSample is one reading of the lease blob.
type LeaseSample struct {
	At         time.Time
	Holder     string
	Generation int64
	Held       bool
	Err        string
}

// LeasePoller reads the lease holder every interval and keeps the history.
type LeasePoller struct {
	read   func(context.Context) (trafficcop.HolderInfo, error)
	every  time.Duration
	mu     sync.Mutex
	hist   []LeaseSample
	cancel context.CancelFunc
	done   chan struct{}
}

// StartLeasePoller starts polling read every interval until Stop.
func StartLeasePoller(read func(context.Context) (trafficcop.HolderInfo, error), every time.Duration) *LeasePoller {
	ctx, cancel := context.WithCancel(context.Background())
	p := &LeasePoller{read: read, every: every, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			h, err := p.read(cctx)
			ccancel()
			s := LeaseSample{At: time.Now(), Holder: h.Holder, Generation: h.Generation, Held: h.Held()}
			if err != nil {
				s = LeaseSample{At: s.At, Err: err.Error()}
			}
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.hist = append(p.hist, s)
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// Stop ends polling; it is idempotent.
func (p *LeasePoller) Stop() {
	p.cancel()
	<-p.done
}

// History returns the samples so far.
func (p *LeasePoller) History() []LeaseSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]LeaseSample(nil), p.hist...)
}

// FirstHeldAfter returns the first sample at or after t showing the lease
// held with a generation above gen.
func FirstHeldAfter(hist []LeaseSample, t time.Time, gen int64) (LeaseSample, bool) {
	for _, s := range hist {
		if !s.At.Before(t) && s.Err == "" && s.Held && s.Generation > gen {
			return s, true
		}
	}
	return LeaseSample{}, false
}

// GenerationsSeen returns the distinct generations the poller saw, in
// order, and whether any generation went backwards (metadata rolled back).
func GenerationsSeen(hist []LeaseSample) (gens []int64, backwards bool) {
	var last int64 = -1
	for _, s := range hist {
		if s.Err != "" || s.Generation == 0 {
			continue
		}
		if s.Generation < last {
			backwards = true
		}
		if s.Generation != last {
			gens = append(gens, s.Generation)
			last = s.Generation
		}
	}
	return gens, backwards
}

// TermOf returns the term of worker w with generation g.
func TermOf(terms []Term, w string, g int64) (Term, bool) {
	for _, t := range terms {
		if t.Worker == w && t.Generation == g {
			return t, true
		}
	}
	return Term{}, false
}

// FirstTermAfter returns the first term starting at or after t (of a
// worker other than not, when not is set).
func FirstTermAfter(terms []Term, t time.Time, not string) (Term, bool) {
	for _, x := range terms { // sorted by Start
		if !x.Start.Before(t) && (not == "" || x.Worker != not) {
			return x, true
		}
	}
	return Term{}, false
}

// describe formats a term for reports.
func (t Term) String() string {
	fenced := ""
	if t.Fenced {
		fenced = ", mover fenced"
	}
	return fmt.Sprintf("%s gen %d [%s – %s, %s%s]", t.Worker, t.Generation, t.Start.Format("15:04:05.000"), t.End.Format("15:04:05.000"), t.EndReason, fenced)
}
