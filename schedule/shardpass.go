package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// batchBuffer bounds how many batches a pass keeps in flight
// between sending and committing.
const batchBuffer = 16

// shardPass is one pass over one shard. It is a pipeline: the reader reads
// the due rows page by page and plans them; their messages are sent
// concurrently (at most Concurrency at a time) as soon as a batch's worth
// of rows is planned (after MoverOptions.BeforeSend); and the committer removes (or marks) each batch's
// rows in its own fenced transaction as soon as that batch's messages are
// in the queue, while later pages are still being read and sent. Batches
// commit one after another, in RowKey order: each carries the fence row's
// ETag as the previous one left it.
type shardPass struct {
	m      *Mover
	shard  string
	gen    int64
	now    time.Time
	since  time.Time // the previous pass of the term (see Mover.plan)
	budget int       // messages (or rows) this pass may still act on
	room   int       // messages the queue may still take (queue.max_depth; -1: no bound)
	early  int       // of them, messages that may go ahead of their due time (-1: no bound)
	sent   int       // messages sent
	// sentEarly is how many of the messages sent went ahead of their due
	// time.
	sentEarly int
	rows      int // rows read (due within the early window)
	sem       chan struct{}
	mu        sync.Mutex
	lagSet    bool
}

// txBatch is the rows of one fenced transaction of a pass.
type txBatch struct {
	plans []*plan
	ops   int
	keys  map[string]bool
	sends sync.WaitGroup
	// confirming is the confirmation of the batch's plans that only retire
	// rows sent early, started as the batch is handed on, so that it
	// overlaps the commits of the batches before it.
	confirming sync.WaitGroup
}

func (m *Mover) newShardPass(shard string, gen int64, now time.Time, budget, room, early int) *shardPass {
	m.mu.Lock()
	since := m.lastPass
	m.mu.Unlock()
	if since.IsZero() || since.After(now) {
		since = now
	}
	sem := m.o.SendSlots
	if sem == nil {
		sem = make(chan struct{}, m.o.Concurrency)
	}
	return &shardPass{m: m, shard: shard, gen: gen, now: now, since: since, budget: budget, room: room, early: early, sem: sem}
}

// run moves what is due in the shard. more reports that the budget ran out
// before the due rows did.
func (sp *shardPass) run(ctx context.Context) (more bool, err error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan *txBatch, batchBuffer)
	var cerr error
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		for c := range batches {
			if cerr != nil || pctx.Err() != nil {
				c.sends.Wait()
				continue
			}
			if cerr = sp.settle(pctx, c); cerr != nil {
				cancel() // stop reading and sending: the pass has failed
			}
		}
	}()
	more, rerr := sp.read(pctx, batches)
	close(batches)
	<-committed
	switch {
	case ctx.Err() != nil:
		return false, nil
	case cerr != nil:
		return false, cerr
	case rerr != nil:
		return false, rerr
	}
	return more, nil
}

// read plans the due rows of the shard and hands them to the committer a
// batch at a time, starting their sends on the way.
func (sp *shardPass) read(ctx context.Context, out chan<- *txBatch) (more bool, err error) {
	m := sp.m
	q := table.Query{Partition: sp.shard, To: dueBound(sp.now.Add(m.o.Early))}
	cur := &txBatch{keys: map[string]bool{}}
	flush := func() {
		if len(cur.plans) == 0 || ctx.Err() != nil {
			return
		}
		m.beforeSend(ctx, cur.plans)
		for _, p := range cur.plans {
			sp.start(ctx, cur, p)
		}
		if pre := retiringOnly(cur.plans); len(pre) > 0 && m.o.Confirm != nil {
			c := cur
			c.confirming.Add(1)
			go func() {
				defer c.confirming.Done()
				m.confirmPlans(ctx, pre)
			}()
		}
		out <- cur
		cur = &txBatch{keys: map[string]bool{}}
	}
	defer flush()
	var next <-chan fetched
	// readFrom starts reading the page at cont (the first: "").
	readFrom := func(cont string) {
		q.Continuation = cont
		// Rows that act on nothing cost no budget, and rows that only
		// retire take no room: a page after the first is read by the
		// budget alone, so rows stuck waiting to be retired (their
		// confirmations refused) cost one more query, not one each.
		top := sp.budget
		if cont == "" {
			top = sp.allowance()
		}
		q.Top = min(table.MaxPage, max(top, 1))
		next = sp.fetch(ctx, q)
	}
	readFrom("")
	for {
		if ctx.Err() != nil {
			return false, nil
		}
		got := <-next
		page, err := got.page, got.err
		if err != nil {
			if ctx.Err() != nil {
				return false, nil
			}
			return false, fmt.Errorf("query due rows of shard %s: %w", sp.shard, err)
		}
		sp.mu.Lock()
		sp.rows += len(page.Entities)
		sp.mu.Unlock()
		// Read the next page while this one is planned and sent, when the
		// budget will most likely outlast this page: otherwise the sends
		// in flight drain while the query makes its round trip.
		next = nil
		if page.Continuation != "" && sp.allowance() > len(page.Entities) {
			readFrom(page.Continuation)
		}
		blocked := false
		for i, e := range page.Entities {
			if sp.budget <= 0 {
				return i < len(page.Entities) || page.Continuation != "", nil
			}
			since := m.sinceOf(e, sp.since)
			p := m.plan(e, sp.now, since, sp.gen)
			if !p.acts() {
				continue
			}
			if sp.room == 0 && len(p.sends) > 0 {
				// The queue has no room left for its messages: it waits
				// for a pass after the queue drained. A row that only
				// waits to be retired (sent early) takes no room, so one
				// whose confirmation is refused does not hold back the
				// due rows behind it (issue 38, sim seed 300106).
				return true, nil
			}
			ahead := p.ahead()
			if sp.early == 0 && ahead > 0 && !p.retire {
				// The row is not moved now, only sent early, and those
				// already waiting fill the room: it is sent at a later
				// pass, when room is left or it is moved. The rows after
				// it are due later still; the rest of this page is
				// planned (one an earlier term sent early is noted as
				// waiting), but no page after it is read.
				blocked = true
				continue
			}
			m.unsettle(p, since)
			sp.budget -= max(1, len(p.sends))
			if sp.room > 0 {
				sp.room = max(0, sp.room-len(p.sends))
			}
			if sp.early > 0 {
				sp.early = max(0, sp.early-ahead)
			}
			if !cur.add(p, sp.shard) {
				flush()
				cur.add(p, sp.shard)
			}
			if cur.ops >= table.MaxOps-1 {
				flush()
			}
		}
		if page.Continuation == "" || blocked {
			return false, nil
		}
		if sp.allowance() <= 0 {
			return true, nil
		}
		if next == nil {
			readFrom(page.Continuation)
		}
	}
}

// allowance is how many more rows the pass expects to act on: its budget,
// or the room left in the queue when that is less (pages are read that
// many rows at a time).
func (sp *shardPass) allowance() int {
	if sp.room >= 0 {
		return min(sp.budget, sp.room)
	}
	return sp.budget
}

// fetched is a page of due rows read ahead, or the error reading it.
type fetched struct {
	page table.Page
	err  error
}

// fetch reads a page of due rows in the background. The channel is
// buffered: a page the pass no longer wants leaves nothing waiting.
func (sp *shardPass) fetch(ctx context.Context, q table.Query) <-chan fetched {
	out := make(chan fetched, 1)
	go func() {
		page, err := sp.m.t.Query(ctx, q)
		out <- fetched{page, err}
	}()
	return out
}

// start sends p's messages in the background, at most Concurrency plans
// at a time across the pass.
func (sp *shardPass) start(ctx context.Context, c *txBatch, p *plan) {
	if p.bad != "" || len(p.sends) == 0 {
		p.ok = p.bad == ""
		return
	}
	select {
	case sp.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	c.sends.Add(1)
	go func() {
		defer func() { <-sp.sem; c.sends.Done() }()
		p.ok = sp.m.sendAll(ctx, sp.now, p)
		if p.ok {
			sp.mu.Lock()
			sp.sent += len(p.sends)
			sp.sentEarly += p.ahead()
			sp.mu.Unlock()
		}
	}()
}

// settle waits for a batch's sends, sets its malformed rows aside, confirms
// the early-sent runs it retires and commits what is ready.
func (sp *shardPass) settle(ctx context.Context, c *txBatch) error {
	c.sends.Wait()
	c.confirming.Wait()
	if ctx.Err() != nil {
		return nil
	}
	m := sp.m
	for _, p := range c.plans {
		if p.bad == "" || p.ok {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		reason := fmt.Sprintf("malformed row %s/%s: %s", p.e.PartitionKey, p.e.RowKey, p.bad)
		if err := m.o.SetAside.SetAside(ctx, p.e.Raw, reason); err != nil {
			m.count(func(s *MoverStats) { s.Errors++ })
			m.o.Logger.Warn("cannot set a malformed row aside; it stays", "row", p.e.RowKey, "err", err)
			continue
		}
		m.o.Logger.Warn("set a malformed row aside", "row", p.e.RowKey, "reason", p.bad)
		p.ok = true
	}
	var ready []*plan
	for _, p := range c.plans {
		if p.ok {
			ready = append(ready, p)
		}
	}
	ready = m.confirmAll(ctx, ready)
	if len(ready) == 0 || ctx.Err() != nil {
		return nil
	}
	sp.mu.Lock()
	if !sp.lagSet && ready[0].bad == "" && ready[0].retire {
		sp.lagSet = true
		m.count(func(s *MoverStats) { s.LastMoveLag = max(0, sp.now.Sub(ready[0].due)) })
	}
	sp.mu.Unlock()
	return m.commit(ctx, sp.shard, sp.gen, ready)
}

// add puts p into the batch unless its operations would not fit in the
// batch's transaction (with the fence update) or touch a row it already
// touches. An empty batch takes any plan.
func (c *txBatch) add(p *plan, shard string) bool {
	ops := p.ops(shard, true, true)
	clash := false
	for _, op := range ops {
		clash = clash || c.keys[op.RowKey]
	}
	if len(c.plans) > 0 && (c.ops+len(ops) > table.MaxOps-1 || clash) {
		return false
	}
	for _, op := range ops {
		c.keys[op.RowKey] = true
	}
	c.ops += len(ops)
	c.plans = append(c.plans, p)
	return true
}

// acts reports whether the plan has anything to do.
func (p *plan) acts() bool {
	return p.bad != "" || p.retire || p.mark != nil
}

// confirmAll tells MoverOptions.Confirm about the early-sent runs the
// ready plans retire, and returns the plans that may be committed: a plan
// whose confirmation failed keeps its row for the next pass (its messages
// are in the queue; a worker that receives one checks the row).
func (m *Mover) confirmAll(ctx context.Context, ready []*plan) []*plan {
	if m.o.Confirm == nil || ctx.Err() != nil {
		return ready
	}
	var todo []*plan
	for _, p := range ready {
		if !p.preconfirmed {
			todo = append(todo, p)
		}
	}
	m.confirmPlans(ctx, todo)
	out := ready[:0]
	for _, p := range ready {
		if p.confirmFailed {
			m.unconfirm(ctx, p)
		} else {
			out = append(out, p)
		}
	}
	return out
}

// retiringOnly returns the plans that retire rows sent early and send
// nothing: their confirmation need not wait for any send.
func retiringOnly(plans []*plan) []*plan {
	var out []*plan
	for _, p := range plans {
		if p.bad == "" && len(p.confirm) > 0 && len(p.sends) == 0 {
			out = append(out, p)
		}
	}
	return out
}

// confirmPlans tells MoverOptions.Confirm about the early-sent runs plans
// retire, in one call, and marks each plan confirmed (preconfirmed) or
// failed.
func (m *Mover) confirmPlans(ctx context.Context, plans []*plan) {
	var envs []queue.Envelope
	var of []*plan
	for _, p := range plans {
		p.preconfirmed = true
		for _, env := range p.confirm {
			envs, of = append(envs, env), append(of, p)
		}
	}
	if len(envs) == 0 || ctx.Err() != nil {
		return
	}
	ok := m.o.Confirm(ctx, envs)
	failed := 0
	for i, p := range of {
		m.o.Logger.Debug("confirmed", "task_id", envs[i].ID, "token", envs[i].Token, "ok", i < len(ok) && ok[i], "row", p.e.RowKey)
		if i < len(ok) && ok[i] {
			p.confirmed++
		} else if !p.confirmFailed {
			p.confirmFailed = true
			failed++
		}
	}
	if failed > 0 {
		m.count(func(s *MoverStats) { s.Errors++ })
		m.o.Logger.Warn("early-sent runs not confirmed; their rows stay for the next pass", "rows", failed)
	}
}

// unconfirm takes back the confirmations of a plan whose row was not
// retired after all (it changed meanwhile).
func (m *Mover) unconfirm(ctx context.Context, p *plan) {
	if m.o.Unconfirm == nil || p.confirmed == 0 {
		return
	}
	for _, env := range p.confirm {
		if err := m.o.Unconfirm(ctx, env); err != nil && !errors.Is(err, context.Canceled) {
			m.count(func(s *MoverStats) { s.Errors++ })
			m.o.Logger.Warn("cannot take back the confirmation of a run whose row changed", "run", env.ID, "err", err)
		}
	}
}
