package runs

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// groupTimeout bounds one shared transaction: the callers that wait on it
// may have different deadlines, so it carries none of theirs.
const groupTimeout = 30 * time.Second

// groupLanes is how many transactions of one partition a Store has on
// their way at once before callers wait to share the next one: a request
// stuck in retries during a storage outage holds up one lane, not the
// partition.
const groupLanes = 4

// grouper combines the one-run transactions that callers submit while
// every lane of their partition has one on its way into shared
// transactions (group commit). Claims and finishes of a busy worker's
// deliveries thus cost fewer requests, while a caller that finds a lane
// free goes out at once, alone: nothing waits for company.
//
// Every caller still gets its own outcome. A shared transaction is all or
// nothing, so when one fails on a condition (a row changed, appeared or
// vanished) the service cannot say whose; each caller's operations are
// then submitted again alone. Any other failure is every caller's.
type grouper struct {
	t     table.Table
	lanes int
	mu    sync.Mutex
	parts map[string]*groupQueue
	// onSubmit, when set (tests), is told the size of each transaction
	// the grouper submits.
	onSubmit func(callers int)
}

type groupQueue struct {
	busy    int // lanes with a transaction on its way
	waiting []*groupCall
}

type groupCall struct {
	ops  []table.Op
	done chan error
}

func newGrouper(t table.Table) *grouper {
	return &grouper{t: t, lanes: groupLanes, parts: map[string]*groupQueue{}}
}

// submit applies ops (one run's transaction: one partition, at most maxOps
// rows, each once) atomically, possibly together with other callers'.
func (g *grouper) submit(ctx context.Context, ops []table.Op) error {
	if len(ops) == 0 {
		return nil
	}
	call := &groupCall{ops: ops, done: make(chan error, 1)}
	pk := ops[0].PartitionKey
	g.mu.Lock()
	q := g.parts[pk]
	if q == nil {
		q = &groupQueue{}
		g.parts[pk] = q
	}
	q.waiting = append(q.waiting, call)
	start := q.busy < g.lanes
	if start {
		q.busy++
	}
	g.mu.Unlock()
	if start {
		go g.drain(context.WithoutCancel(ctx), pk, q)
	}
	select {
	case err := <-call.done:
		return err
	case <-ctx.Done():
		// The transaction may still be applied: like a request whose
		// answer was lost.
		return ctx.Err()
	}
}

// drain is one lane: it submits q's waiting calls, as many per
// transaction as fit, until none is left.
func (g *grouper) drain(ctx context.Context, pk string, q *groupQueue) {
	for {
		g.mu.Lock()
		group, rest := takeGroup(q.waiting)
		q.waiting = rest
		if len(group) == 0 {
			q.busy--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.run(ctx, group)
	}
}

// takeGroup returns the longest run of calls from the front of waiting,
// in order, whose operations fit one transaction (at most maxOps, no row
// twice); a call that would not fit is left, with those after it, for the
// next transaction.
func takeGroup(waiting []*groupCall) (group, rest []*groupCall) {
	rows := map[string]bool{}
	n := 0
	for i, c := range waiting {
		if i > 0 && n+len(c.ops) > table.MaxOps {
			return waiting[:i], waiting[i:]
		}
		for _, o := range c.ops {
			if rows[o.RowKey] {
				return waiting[:i], waiting[i:]
			}
		}
		for _, o := range c.ops {
			rows[o.RowKey] = true
		}
		n += len(c.ops)
	}
	return waiting, nil
}

// run submits one group and tells each caller its outcome.
func (g *grouper) run(ctx context.Context, group []*groupCall) {
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	var ops []table.Op
	for _, c := range group {
		ops = append(ops, c.ops...)
	}
	if g.onSubmit != nil {
		g.onSubmit(len(group))
	}
	err := submit(ctx, g.t, ops)
	if err == nil || len(group) == 1 || !(isConflict(err) || errors.Is(err, storage.ErrBadRequest)) {
		for _, c := range group {
			c.done <- err
		}
		return
	}
	// Someone's condition failed, and nobody's operations were applied:
	// each alone finds out whose.
	for _, c := range group {
		if g.onSubmit != nil {
			g.onSubmit(1)
		}
		c.done <- submit(ctx, g.t, c.ops)
	}
}
