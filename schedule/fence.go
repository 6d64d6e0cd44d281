package schedule

import (
	"context"
	"errors"
	"fmt"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// takeFence writes gen into shard's fence row unless a newer generation is
// already there.
func (m *Mover) takeFence(ctx context.Context, shard string, gen int64) error {
	for range retries {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, err := m.t.Get(ctx, shard, FenceRowKey)
		var op table.Op
		switch {
		case errors.Is(err, storage.ErrNotFound):
			op = table.Op{Kind: table.Insert, PartitionKey: shard, RowKey: FenceRowKey, Props: map[string]any{PropGeneration: gen}}
		case err != nil:
			return fmt.Errorf("read fence of shard %s: %w", shard, err)
		default:
			g, _, perr := e.Props.StrictInt(PropGeneration)
			if perr != nil {
				return fmt.Errorf("fence of shard %s: %w", shard, perr)
			}
			if g > gen {
				return fmt.Errorf("%w: shard %s fence holds generation %d, ours is %d", ErrFenced, shard, g, gen)
			}
			op = table.Op{Kind: table.Merge, PartitionKey: shard, RowKey: FenceRowKey, Props: map[string]any{PropGeneration: gen}, IfMatch: e.ETag}
		}
		etags, err := m.t.Submit(ctx, []table.Op{op})
		if err == nil {
			return m.adoptFence(ctx, shard, gen, etags)
		}
		if !conflict(err) {
			return fmt.Errorf("write fence of shard %s: %w", shard, err)
		}
	}
	return fmt.Errorf("write fence of shard %s: still conflicting after %d attempts", shard, retries)
}

// refreshFence re-reads shard's fence row after a write: it must still hold
// gen, and its new ETag conditions the next batch.
func (m *Mover) refreshFence(ctx context.Context, shard string, gen int64) error {
	e, err := m.t.Get(ctx, shard, FenceRowKey)
	if err != nil {
		return fmt.Errorf("read fence of shard %s: %w", shard, err)
	}
	g, _, err := e.Props.StrictInt(PropGeneration)
	if err != nil {
		return fmt.Errorf("fence of shard %s: %w", shard, err)
	}
	if g != gen {
		return fmt.Errorf("%w: shard %s fence holds generation %d, ours is %d", ErrFenced, shard, g, gen)
	}
	m.mu.Lock()
	m.fence[shard] = e.ETag
	m.mu.Unlock()
	return nil
}

// adoptFence takes the fence row's new ETag from a committed transaction's
// response (the fence update is its last operation), or re-reads the row
// when the table could not tell.
func (m *Mover) adoptFence(ctx context.Context, shard string, gen int64, etags []string) error {
	if n := len(etags); n > 0 && etags[n-1] != "" {
		m.mu.Lock()
		m.fence[shard] = etags[n-1]
		m.mu.Unlock()
		return nil
	}
	if ctx.Err() != nil {
		return nil
	}
	return m.refreshFence(ctx, shard, gen)
}

// fenceOp is the conditional fence update every batch carries.
func (m *Mover) fenceOp(shard string, gen int64) table.Op {
	m.mu.Lock()
	etag := m.fence[shard]
	m.mu.Unlock()
	if mutate.On(mutate.NoFence) {
		etag = ""
	}
	return table.Op{Kind: table.Merge, PartitionKey: shard, RowKey: FenceRowKey, Props: map[string]any{PropGeneration: gen}, IfMatch: etag}
}

// checkFence re-reads shard's fence row after a failed batch. It reports
// ErrFenced when another generation has written it. When the row holds our
// generation under a new ETag (a batch of ours committed although its
// response was lost) it adopts that ETag and reports changed, so the caller
// retries.
func (m *Mover) checkFence(ctx context.Context, shard string, gen int64) (changed bool, err error) {
	e, err := m.t.Get(ctx, shard, FenceRowKey)
	if err != nil {
		return false, fmt.Errorf("read fence of shard %s: %w", shard, err)
	}
	g, _, _ := e.Props.StrictInt(PropGeneration)
	if g != gen {
		return false, fmt.Errorf("%w: shard %s fence holds generation %d, ours is %d", ErrFenced, shard, g, gen)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.ETag != m.fence[shard] {
		m.fence[shard] = e.ETag
		return true, nil
	}
	return false, nil
}
