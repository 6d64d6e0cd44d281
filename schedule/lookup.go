package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// found is an item row located by id, with its index row when it has one.
type found struct {
	row   table.Entity
	index *table.Entity
}

// locate finds the pending row of id: through the id index when there is
// one, else by scanning the item rows (directly inserted rows have no
// index). orphan is an index row whose item is gone.
func (c *Client) locate(ctx context.Context, id string) (f found, orphan *table.Entity, err error) {
	return c.locateWith(ctx, id, true)
}

// locateWith is locate, with scan false not looking for a row without an
// id index: such a row is not found.
func (c *Client) locateWith(ctx context.Context, id string, scan bool) (f found, orphan *table.Entity, err error) {
	if err := validateLookupID(id); err != nil {
		return found{}, nil, err
	}
	pl, err := c.place(ctx)
	if err != nil {
		return found{}, nil, err
	}
	f, orphan, err = c.locateBy(ctx, pl, id, scan)
	if errors.Is(err, ErrNotFound) {
		// Placed, maybe, by a client that read a new shard count before
		// this one: one more read of the map on a miss.
		if now, changed := c.mapChanged(ctx, pl); changed {
			return c.locateBy(ctx, now, id, scan)
		}
	}
	return f, orphan, err
}

// locateBy is locateWith by the placement pl.
func (c *Client) locateBy(ctx context.Context, pl placement, id string, scan bool) (f found, orphan *table.Entity, err error) {
	if mutate.On(mutate.NoPointers) && ValidateID(id) == nil {
		f, _, err := c.viaIndex(ctx, pl.of(id), id)
		if err == nil && f.index == nil {
			err = fmt.Errorf("%w: task %s", ErrNotFound, id)
		}
		return f, nil, err
	}
	var orphans []*table.Entity
	if ValidateID(id) == nil {
		shards := []string{pl.of(id)}
		if prev, ok := pl.prevOf(id); ok {
			shards = append(shards, prev) // the count is changing: maybe no pointer yet
		}
		for _, shard := range shards {
			f, orph, err := c.viaIndex(ctx, shard, id)
			if err != nil || f.index != nil {
				return f, nil, err
			}
			if orph != nil {
				orphans = append(orphans, orph)
			}
		}
	}
	if len(orphans) > 0 {
		orphan = orphans[0]
	}
	if !scan {
		return found{}, orphan, fmt.Errorf("%w: task %s (no id index row; a row written without one was not looked for)", ErrNotFound, id)
	}
	row, err := c.scan(ctx, pl, id)
	if err != nil {
		return found{}, orphan, err
	}
	for _, o := range orphans {
		if indexes(*o, row) {
			// The row landed between the index row's read and its own:
			// an AddMany writes the index row first (issue 38, sim seed
			// 99748: a cancel racing a batch deleted the row and left
			// its index row, still marked as being written, refusing
			// the id for IndexingHold).
			return found{row: row, index: o}, nil, nil
		}
	}
	return found{row: row}, orphan, nil
}

// indexes reports whether the id index row idx names row: in row's
// partition (not a pointer to another shard), by row's key.
func indexes(idx, row table.Entity) bool {
	home, _, _ := idx.Props.StrictString(PropShard)
	rk, _, _ := idx.Props.StrictString(PropItem)
	return idx.PartitionKey == row.PartitionKey && (home == "" || home == row.PartitionKey) && rk == row.RowKey
}

// viaIndex finds id's row through its index row in shard, following a
// pointer to the shard an earlier count placed it in. It returns an empty
// found when there is no index row, and orphan when the index row's task
// is gone.
func (c *Client) viaIndex(ctx context.Context, shard, id string) (f found, orphan *table.Entity, err error) {
	idx, err := c.t.Get(ctx, shard, indexKey(id))
	switch {
	case errors.Is(err, storage.ErrTableNotFound):
		return found{}, nil, noTable(id)
	case errors.Is(err, storage.ErrNotFound):
		return found{}, nil, nil
	case err != nil:
		return found{}, nil, fmt.Errorf("read id index of %s: %w", id, err)
	}
	home, hidx, gone, err := c.follow(ctx, shard, idx)
	switch {
	case err != nil:
		return found{}, nil, err
	case gone:
		return found{}, &idx, nil
	}
	shard, idx = home, hidx
	if rk, _, _ := idx.Props.StrictString(PropItem); rk != "" {
		row, err := c.t.Get(ctx, shard, rk)
		if err == nil {
			return found{row: row, index: &idx}, nil, nil
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return found{}, nil, fmt.Errorf("read task %s: %w", id, err)
		}
	}
	return found{}, &idx, nil
}

// follow returns, for the id index row idx read in shard, the shard that
// holds the id's task and its index row there: shard and idx, or, when
// idx is a pointer (PropShard), the shard it names and the index row read
// there. gone reports a pointer whose shard has no index row of the id
// any more (its task has run or was cancelled).
func (c *Client) follow(ctx context.Context, shard string, idx table.Entity) (home string, hidx table.Entity, gone bool, err error) {
	home, _, _ = idx.Props.StrictString(PropShard)
	if home == "" || home == shard {
		return shard, idx, false, nil
	}
	id := strings.TrimPrefix(idx.RowKey, IndexPrefix)
	hidx, err = c.t.Get(ctx, home, idx.RowKey)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return home, table.Entity{}, true, nil
	case err != nil:
		return home, table.Entity{}, false, fmt.Errorf("read the id index of %s in shard %s: %w", id, home, err)
	}
	return home, hidx, false, nil
}

// scan looks for an unindexed row of id: RowKey suffix or Id property equal
// to id. It reads at most ScanLimit rows.
func (c *Client) scan(ctx context.Context, pl placement, id string) (table.Entity, error) {
	scanned := 0
	for _, shard := range pl.span {
		q := table.Query{Partition: shard, To: IndexPrefix, Select: []string{PropID}}
		for {
			p, err := c.t.Query(ctx, q)
			if errors.Is(err, storage.ErrTableNotFound) {
				return table.Entity{}, noTable(id)
			}
			if err != nil {
				return table.Entity{}, fmt.Errorf("look up task %s: %w", id, err)
			}
			for _, e := range p.Entities {
				_, suffix, perr := ParseRowKey(e.RowKey)
				pid, _, _ := e.Props.StrictString(PropID)
				if (perr == nil && suffix == id && pid == "") || pid == id {
					full, err := c.t.Get(ctx, shard, e.RowKey)
					if errors.Is(err, storage.ErrNotFound) {
						continue
					}
					if err != nil {
						return table.Entity{}, fmt.Errorf("read task %s: %w", id, err)
					}
					return full, nil
				}
			}
			scanned += len(p.Entities)
			if p.Continuation == "" {
				break
			}
			if scanned >= c.opts.ScanLimit {
				return table.Entity{}, fmt.Errorf("%w: task %s (no id index; %w after scanning %d rows, Options.ScanLimit)", ErrNotFound, id, ErrScanGaveUp, scanned)
			}
			q.Continuation = p.Continuation
		}
	}
	return table.Entity{}, fmt.Errorf("%w: task %s", ErrNotFound, id)
}

// ErrScanGaveUp is wrapped by a lookup's error (Get, Cancel, Reschedule
// and the like) when the task has no id index row and the scan for its
// row read Options.ScanLimit rows without finding it: the task may still
// exist, further on. Such an error also matches ErrNotFound, so callers
// that only ask errors.Is(err, ErrNotFound) see a miss; those that must
// not take "not found" for an answer check ErrScanGaveUp first.
var ErrScanGaveUp = errors.New("gave up")

// noTable is the lookup error when the table does not exist yet (a fresh
// account): nothing is scheduled.
func noTable(id string) error {
	return fmt.Errorf("%w: task %s (nothing has been scheduled yet: the table does not exist)", ErrNotFound, id)
}

// Get returns the pending task with this id (for a recurring series, its
// next occurrence). Unknown ids fail with ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (Item, error) {
	f, _, err := c.locate(ctx, id)
	if err != nil {
		return Item{}, err
	}
	return readItem(f.row), nil
}

// GetIndexed is Get through the id index alone: a few point reads
// whatever the schedule holds, where Get, on a miss, scans the schedule
// for a row written without an index (by another program) — up to
// Options.ScanLimit rows. Such a row is not found (ErrNotFound).
func (c *Client) GetIndexed(ctx context.Context, id string) (Item, error) {
	f, _, err := c.locateWith(ctx, id, false)
	if err != nil {
		return Item{}, err
	}
	return readItem(f.row), nil
}
