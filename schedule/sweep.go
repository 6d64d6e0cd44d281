package schedule

import (
	"context"
	"fmt"
)

// sweepRanges are the RowKey ranges no due query reaches: keys starting
// with '1'..'9' (ticks beyond year 3169, or malformed), letters other than
// the index rows, and anything after the fence row.
var sweepRanges = [][2]string{{"1", IndexPrefix}, {"ie", FenceRowKey}, {FenceRowKey + " ", ""}}

// sweep sets aside malformed rows that would never come due.
func (m *Mover) sweep(ctx context.Context, gen int64) error {
	for _, shard := range m.o.Shards {
		var plans []*plan
		for _, r := range sweepRanges {
			if ctx.Err() != nil {
				return nil
			}
			p, err := m.t.Query(ctx, Query{Partition: shard, From: r[0], To: r[1], Top: sweepTop})
			if err != nil {
				return fmt.Errorf("sweep shard %s: %w", shard, err)
			}
			for _, e := range p.Entities {
				if r, err := parseRow(e); err != nil {
					_, _, kerr := ParseRowKey(e.RowKey)
					plans = append(plans, &plan{e: e, bad: err.Error(), indexed: r.indexed, id: r.item.ID, keyOK: kerr == nil})
				}
			}
		}
		if len(plans) > 0 {
			if err := m.move(ctx, shard, gen, m.o.Clock.Now(), plans); err != nil {
				return err
			}
		}
	}
	return nil
}
