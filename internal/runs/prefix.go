package runs

import (
	"context"
	"fmt"
	"sort"

	"github.com/leasecron/leasecron/internal/table"
)

// ByIDPrefix returns up to limit run records of one-off tasks whose id
// starts with prefix, newest due first: one range query of the run rows per
// partition (ids use no character above '~', which ends the range). An
// occurrence's record is found by its series instead.
func (s *Store) ByIDPrefix(ctx context.Context, prefix string, limit int) ([]Run, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	var out []Run
	now := s.now()
	l, err := s.fullLayout(ctx)
	if err != nil {
		return nil, err
	}
	for _, pk := range l.all() {
		q := table.Query{Partition: pk, From: prefixRun + prefix, To: prefixRun + prefix + "~", Select: listSelect, Where: []table.Cond{hasState}}
		rows, _, err := s.collect(ctx, q, limit)
		if err != nil {
			return nil, fmt.Errorf("runs: ids starting %q: %w", prefix, err)
		}
		for _, rw := range rows {
			if r := decodeRun(rw); !r.pointer() && !s.expired(r, now) {
				out = append(out, r)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Due.After(out[j].Due) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
