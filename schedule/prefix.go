package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// ByIDPrefix returns up to limit pending tasks whose id starts with prefix,
// soonest due first, from their id index rows: one range query per shard
// (ids use no character above '~', which ends the range). The items carry
// their id, due time, shard and row key only; Rows or Get has the rest.
// Rows inserted directly, without an index row, are not found.
func (c *Client) ByIDPrefix(ctx context.Context, prefix string, limit int) ([]Item, error) {
	seen := map[string]Item{}
	pl, err := c.place(ctx)
	if err != nil {
		return nil, err
	}
	for _, shard := range pl.span {
		q := table.Query{Partition: shard, From: indexKey(prefix), To: indexKey(prefix) + "~", Select: []string{PropItem, PropShard}, Top: limit}
		p, err := c.t.Query(ctx, q)
		if errors.Is(err, storage.ErrTableNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("pending ids starting %q: %w", prefix, err)
		}
		for _, e := range p.Entities {
			if home, _, _ := e.Props.StrictString(PropShard); home != "" && home != shard {
				continue // a pointer: the home shard's index row is read too
			}
			rk, _, _ := e.Props.StrictString(PropItem)
			due, _, err := ParseRowKey(rk)
			if err != nil {
				continue
			}
			id := strings.TrimPrefix(e.RowKey, IndexPrefix)
			seen[id] = Item{ID: id, Due: due, Shard: shard, RowKey: rk, Indexed: true}
		}
	}
	out := make([]Item, 0, len(seen))
	for _, it := range seen {
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Due.Before(out[j].Due) || out[i].Due.Equal(out[j].Due) && out[i].ID < out[j].ID
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// rowReads is how many of Rows' point reads are in flight at once.
const rowReads = 8

// Rows returns ByIDPrefix's items whole (type, payload, recurrence and the
// rest), each read at its shard and row key: one point read per item,
// rowReads at a time. An item whose row cannot be read — no longer there
// (it was sent, cancelled or moved to another due time after its index
// row was read), or its read failed — comes back as it was given: a
// listing shows it without its type rather than failing.
func (c *Client) Rows(ctx context.Context, items []Item) []Item {
	out := slices.Clone(items)
	var g errgroup.Group
	g.SetLimit(rowReads)
	for i, it := range items {
		g.Go(func() error {
			if e, err := c.t.Get(ctx, it.Shard, it.RowKey); err == nil {
				out[i] = readItem(e)
			}
			return nil
		})
	}
	_ = g.Wait() // (nothing fails)
	return out
}
