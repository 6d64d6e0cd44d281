package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/schedule"
)

// opTimeout bounds one user operation (the CLI's commands have none, but
// a scheduler gives up at some point).
const opTimeout = 2 * time.Minute

// userOp runs an operation a user or operator issues, through client c,
// and tells the checker what it answered.
func (w *World) userOp(c *proc, op *Op) {
	ctx, cancel := context.WithTimeout(w.rootCtx, opTimeout)
	defer cancel()
	cl := c.client
	chk := w.chk
	switch op.Kind {
	case OpSchedule:
		w.schedule(ctx, c, *op.Spec, op)
	case OpMany:
		w.scheduleMany(ctx, c, op)
	case OpRow:
		w.insertRow(ctx, c, *op.Spec, op)
	case OpRowDelete:
		w.deleteRow(ctx, c, op)
	case OpCancel:
		incomplete := false
		for try := 0; ; try++ {
			issued := w.now()
			aim := chk.cancelIssued(chk.RealID(op.Task), issued)
			res, err := cl.Cancel(ctx, chk.RealID(op.Task))
			w.answer(op, fmt.Sprintf("removed=%v marked=%v", res.Removed, res.Marked), err)
			chk.cancelled(aim, chk.RealID(op.Task), issued, res, err, w.moment(c))
			// A one-off task's cancel done in part (its row removed, its
			// run not marked) is tried again until it answers, as the
			// README says to: until then the task may still run once, and
			// its run says queued.
			incomplete = incomplete || errors.Is(err, leasecron.ErrIncomplete) && res.Removed && aim != nil && aim.spec.Recurrence == ""
			if !incomplete || err == nil || errors.Is(err, leasecron.ErrNotFound) || errors.Is(err, leasecron.ErrAlreadyFinished) || try == 5 {
				break
			}
			time.Sleep(time.Second << try)
		}
	case OpReschedule:
		issued := w.now()
		chk.retimeIssued(chk.RealID(op.Task))
		it, err := cl.Reschedule(ctx, chk.RealID(op.Task), c.clock.Now().Add(op.Dur))
		w.answer(op, "", err)
		chk.retimed(chk.RealID(op.Task), issued, it, err)
	case OpRunNow:
		issued := w.now()
		chk.retimeIssued(chk.RealID(op.Task))
		it, err := cl.RunNow(ctx, chk.RealID(op.Task))
		w.answer(op, "", err)
		chk.retimed(chk.RealID(op.Task), issued, it, err)
	case OpPause:
		var until time.Time
		if op.Dur > 0 {
			until = c.clock.Now().Add(op.Dur)
		}
		issued := w.now()
		err := cl.Pause(ctx, op.Type, until)
		w.answer(op, "", err)
		ev := pauseEv{typ: op.Type, issued: issued, returned: w.now(), ok: err == nil}
		if !until.IsZero() {
			ev.until = c.clock.toTrue(until)
		}
		if err != nil {
			// It may have taken effect: treat it as a pause with no
			// promise (ok false) — and a resume must still follow.
			ev.ok = false
		}
		chk.paused(ev)
	case OpResume:
		issued := w.now()
		err := cl.Resume(ctx, op.Type)
		w.answer(op, "", err)
		chk.paused(pauseEv{typ: "resume:" + op.Type, issued: issued, returned: w.now(), ok: true})
	case OpDisable, OpEnable:
		issued := w.now()
		var err error
		if op.Kind == OpDisable {
			_, err = cl.Disable(ctx, chk.RealID(op.Task))
		} else {
			_, err = cl.Enable(ctx, chk.RealID(op.Task))
		}
		w.answer(op, "", err)
		chk.disabled(chk.RealID(op.Task), op.Kind == OpDisable, issued, err)
	case OpRequeue:
		issued := w.now()
		err := cl.DeadLetters().Requeue(ctx, chk.RealID(op.Task))
		w.answer(op, "", err)
		chk.requeued(chk.RealID(op.Task), issued, err)
	case OpBulk:
		bop, err := leasecron.ParseBulkOp(op.Bulk, op.Type, "", "", "", "", c.clock.Now())
		if err != nil {
			w.chk.mu.Lock()
			w.chk.violate(InvAccepted, "bulk %s type %s refused: %v", op.Bulk, op.Type, err)
			w.chk.mu.Unlock()
			return
		}
		n, err := cl.CountBulk(ctx, bop)
		if err != nil {
			return
		}
		i := chk.bulk(bulkEv{kind: op.Bulk, typ: op.Type, started: w.now(), ok: true})
		b, err := w.startBulk(ctx, cl, op, bop, n)
		w.answer(op, fmt.Sprintf("%s of %d", b.ID, n), err)
		chk.bulkAnswered(i, b.ID, err == nil || !errors.Is(err, leasecron.ErrInvalidTask))
		if err == nil {
			go w.watchBulk(cl, b.ID)
		}
	case OpDrain:
		if p := w.worker(op.Worker); p != nil {
			// Noted when issued: the drain may take effect before it
			// answers, or under an error whose write committed (seed
			// 81913: a board run it interrupted ran again at once
			// elsewhere, as the README allows, before the answer).
			chk.drainIssued(p)
			_, err := cl.Drain(ctx, p.id, "sim")
			w.answer(op, p.id, err)
		}
	case OpSetShards:
		_ = cl.SetShards(ctx, op.N)
	case OpLookup:
		chk.lookup(ctx, cl)
	case OpBoardAdd, OpBoardRemove, OpBoardRunNow:
		w.boardOp(ctx, c, op)
	}
}

// startBulk starts a bulk operation as a program would: half of them
// (by the operation's moment) with an id of the program's, sent again
// once when the first start answers an error that is not a refusal
// (README: the second start finds the first's operation, ErrBulkExists,
// and starts nothing; the checker counts the two sends as one
// operation, started unless the first's record says its start failed);
// the others with an id the client draws, not sent again.
func (w *World) startBulk(ctx context.Context, cl *leasecron.Client, op *Op, bop leasecron.BulkOp, n int) (leasecron.Bulk, error) {
	if op.At.Milliseconds()%2 == 1 {
		return cl.StartBulk(ctx, bop, n, "sim")
	}
	id := fmt.Sprintf("bulk-sim-%d-%d", op.Client, op.At.Milliseconds())
	b, err := cl.StartBulkAs(ctx, id, bop, n, "sim")
	if err == nil || errors.Is(err, leasecron.ErrInvalidTask) || ctx.Err() != nil {
		return b, err
	}
	w.logs.add(fmt.Sprintf("%s  bulk %s answered %v; sent again", w.elapsed().Truncate(time.Millisecond), id, err))
	b, err = cl.StartBulkAs(ctx, id, bop, n, "sim")
	if errors.Is(err, leasecron.ErrBulkExists) {
		// The first send's operation: started, unless its own start
		// failed before it ran.
		if got, gerr := cl.Bulk(ctx, id); gerr == nil && (got.State != leasecron.BulkFailed || got.Attempts > 0) {
			return got, nil
		}
	}
	return b, err
}

// answer logs what an operation answered, for a failing seed's report.
func (w *World) answer(op *Op, what string, err error) {
	line := fmt.Sprintf("%s  answer to %s %s %s: %s", w.elapsed().Truncate(time.Millisecond), op.Kind, op.Task, op.Type, what)
	if err != nil {
		line += " error: " + err.Error()
	}
	w.logs.add(line)
}

// item is the leasecron item of a spec scheduled now by c.
func (w *World) item(c *proc, s TaskSpec, t *ti) leasecron.Item {
	it := leasecron.Item{ID: t.id, Type: s.Type, Payload: t.payload(), Due: c.clock.Now().Add(s.Due), Recurrence: s.Recurrence, TZ: s.TZ,
		MaxAttempts: s.MaxAttempts, AfterAny: s.AfterAny}
	if routed() {
		it.Queue, it.Priority, it.FairKey = route(t.id)
		if _, _, tenant := payloadRoute(t.id); tenant != "" {
			it.FairKey = "" // the payload carries it
		}
	}
	for _, p := range s.After {
		it.After = append(it.After, w.chk.RealID(p))
	}
	return it
}

// route gives a task a named queue, a priority and a fair key from a hash
// of its id (not from the plan's random stream, so that adding routes
// changed no seed's plan): a fifth at each level 1 to 4 (and the default),
// a third for each of two tenants (tenant-a weighted, see routing), a
// quarter in the named queue "bulk" that every worker consumes too.
func route(id string) (string, int, string) {
	n := fnv32(id)
	q := ""
	if n/15%4 == 0 {
		q = "bulk"
	}
	return q, int(n % 5), []string{"", "tenant-a", "tenant-b"}[n/5%3]
}

// fnv32 is the 32-bit FNV-1a hash of s: the one the README gives for an
// id's shard, and what the plan picks routes and payloads by.
func fnv32(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// routed reports whether tasks are routed (SIM_NOROUTE unset).
func routed() bool { return os.Getenv("SIM_NOROUTE") == "" }

// payloadRoute is route, but the fair key only for the tasks that carry
// it in their payload instead of Item.FairKey: half of tenant-b's, by a
// hash of the id.
func payloadRoute(id string) (string, int, string) {
	q, p, key := route(id)
	if key != "tenant-b" || fnv32(id)/45%2 == 0 {
		key = ""
	}
	return q, p, key
}

// routing is the fleet's routing: the fair lanes of the tenants, and a
// fair key from the payload's "tenant" field for every type.
var routing = leasecron.Routing{FairLanes: 4, FairWeights: map[string]int{"tenant-a": 2}, FairKeys: payloadTenant()}

func payloadTenant() map[string]string {
	m := map[string]string{}
	for _, typ := range append(taskTypes, TypeCallback) {
		m[typ] = "payload.tenant"
	}
	return m
}

func (w *World) unique(s TaskSpec) *leasecron.Unique {
	if s.Unique == nil {
		return nil
	}
	u := &leasecron.Unique{Key: s.Unique.Key, For: s.Unique.For}
	if s.Unique.States != "" {
		st, err := schedule.ParseUniqueStates(s.Unique.States)
		if err != nil {
			w.t.Fatalf("unique states %q: %v", s.Unique.States, err)
		}
		u.States = st
	}
	return u
}

func (w *World) schedule(ctx context.Context, c *proc, s TaskSpec, op *Op) {
	t := w.chk.newTI(s, op, c)
	it := w.item(c, s, t)
	o := &leasecron.ScheduleOptions{Replace: s.Replace, Unique: w.unique(s)}
	issued := w.now()
	var got leasecron.Item
	var err error
	if c.api != nil && !(o.Replace && o.Unique != nil) { // (the API's PUT takes no unique key)
		got, err = w.scheduleAPI(ctx, c, it, o)
	} else {
		got, err = c.client.Schedule(ctx, it, o)
	}
	w.answer(op, got.ID, err)
	w.chk.scheduled(t, issued, got, err)
}

// scheduleMany is a schedule --file, or a batch with a callback.
func (w *World) scheduleMany(ctx context.Context, c *proc, op *Op) {
	var tis []*ti
	var items []leasecron.Item
	for _, s := range op.Many {
		t := w.chk.newTI(s, op, c)
		tis = append(tis, t)
		items = append(items, w.item(c, s, t))
	}
	o := leasecron.ScheduleManyOptions{Batch: op.Batch}
	var b *batch
	if op.Batch != "" {
		b = w.chk.newBatch(op.Batch)
		cb := w.chk.newTI(*op.Callback, op, c)
		cbItem := w.item(c, *op.Callback, cb)
		o.OnComplete = &cbItem
		w.chk.mu.Lock()
		b.callback, cb.callbackOf = cb, b
		for _, t := range tis {
			t.batch = b
			b.members = append(b.members, t)
		}
		w.chk.mu.Unlock()
	}
	issued := w.now()
	if op.FailAt > 0 {
		ids := make([]string, len(tis))
		for i, t := range tis {
			ids[i] = t.id
		}
		c.failRows.arm(op.FailAt, ids)
	}
	res, err := c.client.ScheduleMany(ctx, items, o)
	if op.FailAt > 0 {
		c.failRows.arm(0, nil)
	}
	w.answer(op, fmt.Sprintf("%d results", len(res)), err)
	if slices.ContainsFunc(res, func(r leasecron.ScheduleResult) bool {
		return r.Err != nil && strings.Contains(r.Err.Error(), "the batch was rolled back")
	}) {
		w.stats.fault("a schedule --file rolled back")
	}
	for i, t := range tis {
		var r leasecron.ScheduleResult
		if i < len(res) {
			r = res[i]
		} else {
			r.Err = err
		}
		if r.Err == nil && err != nil {
			r.Err = err
		}
		w.chk.scheduled(t, issued, r.Item, r.Err)
	}
	if b != nil {
		w.chk.mu.Lock()
		b.accepted = err == nil
		w.chk.mu.Unlock()
		w.chk.scheduled(b.callback, issued, *o.OnComplete, err)
	}
}

// watchBulk tells the checker when the bulk operation id is seen finished
// (the tasks it may act on are those scheduled before then).
func (w *World) watchBulk(cl *leasecron.Client, id string) {
	ctx := w.rootCtx
	for ctx.Err() == nil {
		if b, err := cl.Bulk(ctx, id); err == nil && b.State != "running" {
			w.chk.bulkEnded(id, w.now(), b.Failed > 0)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}
