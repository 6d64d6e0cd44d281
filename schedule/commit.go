package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// ops are the table operations that settle one row after its messages are
// in the queue: remove it (a series: replace it by its next occurrence),
// or mark it as sent early. withNext and withIndex leave out the next
// occurrence's insert and the index row update when those are in the way.
func (p *plan) ops(shard string, withNext, withIndex bool) []table.Op {
	if p.mark != nil && p.bad == "" {
		return []table.Op{{Kind: table.Merge, PartitionKey: shard, RowKey: p.e.RowKey, Props: p.mark, IfMatch: p.e.ETag}}
	}
	var ops []table.Op
	recurring := p.nextRK != "" && p.bad == ""
	if recurring && withNext {
		next := p.next
		if p.indexed && !withIndex {
			// The index row is gone: the series continues unindexed (found
			// by scanning) instead of failing every move.
			next = table.Props(p.next).Clone()
			delete(next, PropIndexed)
		}
		ops = append(ops, table.Op{Kind: table.Insert, PartitionKey: shard, RowKey: p.nextRK, Props: next})
	}
	ops = append(ops, table.Op{Kind: table.Delete, PartitionKey: shard, RowKey: p.e.RowKey, IfMatch: p.e.ETag})
	if p.indexed && withIndex && p.keyOK {
		if recurring {
			ops = append(ops, table.Op{Kind: table.Merge, PartitionKey: shard, RowKey: indexKey(p.id), Props: map[string]any{PropItem: p.nextRK}})
		} else if !mutate.On(mutate.RefuseStale) {
			ops = append(ops, table.Op{Kind: table.Delete, PartitionKey: shard, RowKey: indexKey(p.id)})
		}
	}
	return ops
}

// A batch's transaction refused for a transient reason is tried up to
// commitTries times in all, commitRetryBase apart and more.
const (
	commitTries     = 3
	commitRetryBase = 500 * time.Millisecond
)

// commit settles the ready rows of one chunk in one fenced transaction
// (falling back to one transaction per row when some row changed).
func (m *Mover) commit(ctx context.Context, shard string, gen int64, batch []*plan) error {
	var ops []table.Op
	for _, p := range batch {
		ops = append(ops, p.ops(shard, true, true)...)
	}
	if ctx.Err() != nil {
		return nil
	}
	var err error
	for try := 1; ; try++ {
		var etags []string
		etags, err = m.t.Submit(ctx, append(ops, m.fenceOp(shard, gen)))
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			m.committed(ctx, batch)
			return m.adoptFence(ctx, shard, gen, etags)
		}
		if done, ferr := m.lostResponse(ctx, shard, gen); ferr != nil || done {
			if done {
				m.committed(ctx, batch)
			}
			return ferr
		}
		// A busy account: try the same transaction again within the pass
		// rather than give up every batch after it until the next pass.
		if try >= commitTries || !storage.IsTransient(err) {
			break
		}
		if clock.Sleep(ctx, m.o.Clock, retry.After(err, commitRetryBase, 4*commitRetryBase, try, rand.Float64())) != nil {
			return nil
		}
	}
	if !conflict(err) && !errors.Is(err, storage.ErrBadRequest) {
		m.takeBackChanged(ctx, shard, gen, batch)
		return fmt.Errorf("remove moved rows: %w", err)
	}
	// Some row changed since it was read (or an index row or the next
	// occurrence is in the way): settle the batch row by row.
	for i, p := range batch {
		if uncommitted, err := m.commitOne(ctx, shard, gen, p); err != nil {
			if uncommitted {
				m.takeBackChanged(ctx, shard, gen, batch[i:])
			}
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

// takeBackChanged takes back the confirmations of the early-sent runs of
// plans whose rows changed or went since they were read, after a commit
// that failed and — the fence said — had not landed: a disable, cancel or
// reschedule removed the row while the pass moved it, and the
// confirmations, written before the commit, would otherwise stand, and
// the runs they confirm run (issue 38, sweep seed 73944: a disabled
// series' two occurrences ran). Each is taken back only while the fence,
// read after the row, still holds this term's generation under the ETag
// it last saw (rowChangedNotByUs): a request that timed out may still
// land later, deleting the row and moving the fence in one transaction,
// and another term may have moved the row since this one's lease lapsed;
// either way its confirmations stand. A row that cannot be read is left
// with its confirmations (logged).
func (m *Mover) takeBackChanged(ctx context.Context, shard string, gen int64, plans []*plan) {
	for _, p := range plans {
		if p.confirmed == 0 || ctx.Err() != nil {
			continue
		}
		changed, err := m.rowChangedNotByUs(ctx, shard, gen, p)
		switch {
		case err != nil:
			m.count(func(s *MoverStats) { s.Errors++ })
			m.o.Logger.Warn("cannot tell whether a row whose early-sent runs were confirmed was changed by another; the confirmations stand", "row", p.e.RowKey, "err", err)
			return
		case changed:
			m.o.Logger.Info("row changed while it was moved; taking back the confirmations of its early-sent runs", "row", p.e.RowKey)
			m.settled(p)
			m.unconfirm(ctx, p)
		}
	}
}

// rowChangedNotByUs reports whether p's row is gone or changed since it
// was read, by another than this term's transactions: read after the row,
// the fence still holds gen under the ETag this term last saw, so none of
// its transactions landed meanwhile (one that removes the row moves the
// fence with it) and no other term has taken the shard. A fence that moved
// is an error: what changed the row may be this term's own transaction,
// landed late, or another term's move.
func (m *Mover) rowChangedNotByUs(ctx context.Context, shard string, gen int64, p *plan) (bool, error) {
	changed, err := m.rowChanged(ctx, shard, p)
	if err != nil || !changed {
		return false, err
	}
	moved, err := m.lostResponse(ctx, shard, gen)
	switch {
	case err != nil:
		return false, err
	case moved:
		return false, fmt.Errorf("the fence of shard %s moved since this term's last transaction: it may have landed late", shard)
	}
	return true, nil
}

// rowChanged reports whether p's row is gone or changed since it was read.
func (m *Mover) rowChanged(ctx context.Context, shard string, p *plan) (bool, error) {
	var cur table.Entity
	err := retry.Transient(ctx, retry.Policy{Clock: m.o.Clock}, func(ctx context.Context) error {
		var gerr error
		cur, gerr = m.t.Get(ctx, shard, p.e.RowKey)
		return gerr
	})
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("re-read row %s: %w", p.e.RowKey, err)
	}
	return cur.ETag != p.e.ETag, nil
}

// commitOne settles one row in its own fenced transaction, working around
// an index row that is gone or a next occurrence that already exists. A row
// that changed since it was read is left alone (its run was enqueued: a
// possible duplicate, never a loss; an early-sent message of a changed row
// is a no-op for workers that check it). On an error, uncommitted says
// whether the fence showed that its transaction did not land (false when
// that is not known, or another term holds the shard).
func (m *Mover) commitOne(ctx context.Context, shard string, gen int64, p *plan) (uncommitted bool, err error) {
	withNext, withIndex := true, true
	for range 5 {
		if ctx.Err() != nil {
			return false, nil
		}
		etags, err := m.t.Submit(ctx, append(p.ops(shard, withNext, withIndex), m.fenceOp(shard, gen)))
		if err == nil {
			m.committed(ctx, []*plan{p})
			return false, m.adoptFence(ctx, shard, gen, etags)
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if done, ferr := m.lostResponse(ctx, shard, gen); ferr != nil || done {
			if done {
				m.committed(ctx, []*plan{p})
			}
			return false, ferr
		}
		switch {
		case errors.Is(err, storage.ErrAlreadyExists):
			withNext = false // the next occurrence is already there
			continue
		case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrPreconditionFailed), errors.Is(err, storage.ErrBadRequest):
			changed, gerr := m.rowChangedNotByUs(ctx, shard, gen, p)
			if gerr != nil {
				return false, gerr
			}
			if changed {
				m.count(func(s *MoverStats) { s.Skipped++ })
				m.o.Logger.Info("row changed while it was moved; left as it is (its run may be enqueued twice)", "row", p.e.RowKey)
				m.settled(p)
				m.unconfirm(ctx, p)
				return false, nil
			}
			if !withIndex || p.mark != nil {
				return true, fmt.Errorf("settle moved row %s: %w", p.e.RowKey, err)
			}
			withIndex = false // the row is unchanged: its index row is missing
			continue
		default:
			return true, fmt.Errorf("settle moved row %s: %w", p.e.RowKey, err)
		}
	}
	return true, fmt.Errorf("settle moved row %s: gave up", p.e.RowKey)
}

// lostResponse tells, after a transaction failed, whether it committed all
// the same (its response was lost): the fence row then holds our generation
// under an ETag we have not seen. Only this mover's transactions write the
// fence with its generation, one at a time, each adopting the ETag it
// leaves, so a changed fence means the transaction in flight committed. The
// new ETag is adopted. ErrFenced when another generation has taken over.
func (m *Mover) lostResponse(ctx context.Context, shard string, gen int64) (bool, error) {
	changed, err := m.checkFence(ctx, shard, gen)
	if err != nil && ctx.Err() != nil {
		return false, nil
	}
	return changed, err
}

// committed records a committed batch and reports the runs whose rows it
// removed to OnMoved.
func (m *Mover) committed(ctx context.Context, batch []*plan) {
	var envs []queue.Envelope
	var moved, marked, aside int64
	m.settled(batch...)
	for _, p := range batch {
		switch {
		case p.bad != "":
			aside++
			continue
		case !p.retire:
			marked++
			continue
		}
		moved++
		m.o.Logger.Debug("moved", "task_id", p.id, "row", p.e.RowKey)
		envs = append(envs, p.confirm...)
		for _, s := range p.sends {
			if s.env.Token == "" { // sent and moved in this pass
				envs = append(envs, s.env)
			}
		}
	}
	m.count(func(s *MoverStats) { s.Batches++; s.Moved += moved; s.SentEarly += marked; s.SetAside += aside })
	if m.o.OnMoved != nil && len(envs) > 0 {
		m.o.OnMoved(ctx, envs)
	}
}

// maxUnsettled bounds the rows Mover.unsettled remembers.
const maxUnsettled = 10000

// sinceOf returns the since a plan of row e uses: since, or, for a series'
// row a pass of this term planned to move and did not settle, the since
// of that first plan (unsettle). A pass that failed to send the row's
// occurrences still completes, and counted from it the next pass skipped
// an occurrence the term had seen due as missed while nobody moved; an
// early-sent message of it, which only the commit records on the row,
// was then acknowledged as stale (issue 38, sweep seed 29729: the
// occurrence never ran).
func (m *Mover) sinceOf(e table.Entity, since time.Time) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.unsettled) == 0 {
		return since // every row read by a pass takes this path
	}
	if first, ok := m.unsettled[unsettledKey(e)]; ok && first.Before(since) {
		return first
	}
	return since
}

// unsettle notes p, a plan about to be carried out with since, when it
// moves a series' row (its occurrences are skipped from since): until the
// row is settled (committed, or found changed), later plans of it skip
// only from there (sinceOf). At most maxUnsettled rows are remembered; a
// new term, or holding back, forgets them.
func (m *Mover) unsettle(p *plan, since time.Time) {
	if !p.retire || p.next == nil || p.bad != "" {
		return
	}
	key := unsettledKey(p.e)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.unsettled[key]; ok || len(m.unsettled) >= maxUnsettled {
		return
	}
	if m.unsettled == nil {
		m.unsettled = map[string]time.Time{}
	}
	m.unsettled[key] = since
}

// settled forgets the rows of plans as unsettled: they were moved, or
// changed since.
func (m *Mover) settled(plans ...*plan) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.unsettled) == 0 {
		return
	}
	for _, p := range plans {
		delete(m.unsettled, unsettledKey(p.e))
	}
}

// unsettledKey is row e's key in Mover.unsettled: shard/RowKey.
func unsettledKey(e table.Entity) string { return e.PartitionKey + "/" + e.RowKey }
