package schedule

import (
	"context"
	"fmt"

	"github.com/leasecron/leasecron/internal/table"
)

// sweepRanges are the RowKey ranges no due query reaches: keys from "0:"
// up to the index rows — '0' then a character after the digits (ticks
// forgotten, such as "0_invoice-42"; ':' sorts right after '9', so no
// well-formed key of these centuries falls there), keys starting with
// '1'..'9' (ticks beyond year 3169, or malformed) and letters before the
// index rows —, letters other than the index rows and the unique guards
// ("uq~…", up to "ur"), and anything after the fence row. (A key of
// digits, then garbage, past the due bound waits until the bound reaches
// it.)
var sweepRanges = [][2]string{{"0:", IndexPrefix}, {indexEnd, GuardPrefix}, {guardEnd, FenceRowKey}, {FenceRowKey + " ", ""}}

// sweep removes unique guards whose task no longer holds the key, and sets
// aside malformed rows that would never come due.
func (m *Mover) sweep(ctx context.Context, gen int64) error {
	for _, shard := range m.o.Shards {
		if m.o.GuardLive != nil {
			if n, err := sweepGuards(ctx, m.t, shard, m.o.Clock.Now(), m.o.GuardLive); err != nil {
				m.o.Logger.Warn("unique guards not swept", "shard", shard, "err", err)
			} else if n > 0 {
				m.o.Logger.Debug("unique guards removed", "shard", shard, "count", n)
			}
		}
		var plans []*plan
		for _, r := range sweepRanges {
			if ctx.Err() != nil {
				return nil
			}
			p, err := m.t.Query(ctx, table.Query{Partition: shard, From: r[0], To: r[1], Top: sweepTop})
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
			sp := m.newShardPass(shard, gen, m.o.Clock.Now(), len(plans), -1, -1)
			for len(plans) > 0 && ctx.Err() == nil {
				c := &txBatch{keys: map[string]bool{}}
				for len(plans) > 0 && c.add(plans[0], shard) {
					plans = plans[1:]
				}
				if err := sp.settle(ctx, c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
