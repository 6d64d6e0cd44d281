package schedule

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
)

// rowOps are the table operations that retire one row.
func rowOps(shard string, p *plan, withNext, withIndex bool) []Op {
	var ops []Op
	recurring := p.nextRK != "" && p.bad == ""
	if recurring && withNext {
		next := p.next
		if p.indexed && !withIndex {
			// The index row is gone: the series continues unindexed (found
			// by scanning) instead of failing every move.
			next = copyProps(p.next)
			delete(next, PropIndexed)
		}
		ops = append(ops, Op{Kind: OpInsert, PartitionKey: shard, RowKey: p.nextRK, Props: next})
	}
	ops = append(ops, Op{Kind: OpDelete, PartitionKey: shard, RowKey: p.e.RowKey, IfMatch: p.e.ETag})
	if p.indexed && withIndex && p.keyOK {
		if recurring {
			ops = append(ops, Op{Kind: OpMerge, PartitionKey: shard, RowKey: indexKey(p.id), Props: map[string]any{PropItem: p.nextRK}})
		} else {
			ops = append(ops, Op{Kind: OpDelete, PartitionKey: shard, RowKey: indexKey(p.id)})
		}
	}
	return ops
}

// commit removes the ready rows in fenced transactions of at most MaxOps
// operations, in RowKey order.
func (m *Mover) commit(ctx context.Context, shard string, gen int64, ready []*plan) error {
	for i := 0; i < len(ready); {
		var ops []Op
		keys := map[string]bool{}
		j := i
		for ; j < len(ready); j++ {
			rops := rowOps(shard, ready[j], true, true)
			clash := false
			for _, op := range rops {
				clash = clash || keys[op.RowKey]
			}
			if len(ops)+len(rops) > MaxOps-1 || (clash && j > i) {
				break
			}
			for _, op := range rops {
				keys[op.RowKey] = true
			}
			ops = append(ops, rops...)
		}
		batch := ready[i:j]
		i = j
		var err error
		for attempt := 0; ; attempt++ {
			if ctx.Err() != nil {
				return nil
			}
			err = m.t.Submit(ctx, append(ops, m.fenceOp(shard, gen)))
			if err == nil || ctx.Err() != nil {
				break
			}
			changed, ferr := m.checkFence(ctx, shard, gen)
			if ferr != nil {
				return ferr
			}
			if !changed || attempt > 0 {
				break
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			m.committed(ctx, batch)
			if ctx.Err() != nil {
				return nil
			}
			if err := m.refreshFence(ctx, shard, gen); err != nil {
				return err
			}
			continue
		}
		if !conflict(err) && !errors.Is(err, storage.ErrBadRequest) {
			return fmt.Errorf("remove moved rows: %w", err)
		}
		// Some row changed since it was read (or an index row or the next
		// occurrence is in the way): settle the batch row by row.
		for _, p := range batch {
			if err := m.commitOne(ctx, shard, gen, p); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return nil
			}
		}
	}
	return nil
}

// commitOne retires one row in its own fenced transaction, working around
// an index row that is gone or a next occurrence that already exists. A row
// that changed since it was read is left alone (its run was enqueued: a
// possible duplicate, never a loss).
func (m *Mover) commitOne(ctx context.Context, shard string, gen int64, p *plan) error {
	withNext, withIndex := true, true
	for range 5 {
		if ctx.Err() != nil {
			return nil
		}
		err := m.t.Submit(ctx, append(rowOps(shard, p, withNext, withIndex), m.fenceOp(shard, gen)))
		if err == nil {
			m.committed(ctx, []*plan{p})
			if ctx.Err() != nil {
				return nil
			}
			return m.refreshFence(ctx, shard, gen)
		}
		if ctx.Err() != nil {
			return nil
		}
		changed, ferr := m.checkFence(ctx, shard, gen)
		if ferr != nil {
			return ferr
		}
		switch {
		case changed:
			continue // our fence ETag was stale; try again with the new one
		case errors.Is(err, storage.ErrAlreadyExists):
			withNext = false // the next occurrence is already there
			continue
		case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrPreconditionFailed), errors.Is(err, storage.ErrBadRequest):
			cur, gerr := m.t.Get(ctx, shard, p.e.RowKey)
			if errors.Is(gerr, storage.ErrNotFound) || (gerr == nil && cur.ETag != p.e.ETag) {
				m.count(func(s *MoverStats) { s.Skipped++ })
				m.o.Logger.Info("leasecron mover: row changed while it was moved; left as it is (its run may be enqueued twice)", "row", p.e.RowKey)
				return nil
			}
			if gerr != nil {
				return fmt.Errorf("re-read row %s: %w", p.e.RowKey, gerr)
			}
			if !withIndex {
				return fmt.Errorf("remove moved row %s: %w", p.e.RowKey, err)
			}
			withIndex = false // the row is unchanged: its index row is missing
			continue
		default:
			return fmt.Errorf("remove moved row %s: %w", p.e.RowKey, err)
		}
	}
	return fmt.Errorf("remove moved row %s: gave up", p.e.RowKey)
}

// committed records a committed batch and reports it to OnMoved.
func (m *Mover) committed(ctx context.Context, batch []*plan) {
	var envs []queue.Envelope
	var moved, aside int64
	for _, p := range batch {
		if p.bad != "" {
			aside++
			continue
		}
		moved++
		envs = append(envs, p.env)
	}
	m.count(func(s *MoverStats) { s.Batches++; s.Moved += moved; s.SetAside += aside })
	if m.o.OnMoved != nil && len(envs) > 0 {
		m.o.OnMoved(ctx, envs)
	}
}
