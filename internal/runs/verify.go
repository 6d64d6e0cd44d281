package runs

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/leasecron/leasecron/internal/table"
)

// Verify reads every run partition whole and reports each place where the
// rows of a run disagree: a run row without its time list row or with a
// state list row that does not match its state, or a list row without its
// run row. The writes keep these in step (each change to a run is one
// transaction); Verify is how tests and `leasecron runs check` show it. It
// costs one request per 1,000 rows.
func (s *Store) Verify(ctx context.Context) (problems []string, runs int, err error) {
	if err := s.ensure(ctx); err != nil {
		return nil, 0, err
	}
	l, err := s.fullLayout(ctx)
	if err != nil {
		return nil, 0, err
	}
	for _, pk := range l.all() {
		all := map[string]table.Entity{}
		q := table.Query{Partition: pk, Select: []string{"Id", "State", "Due", "Worker", "Token"}}
		for {
			p, err := s.t.Query(ctx, q)
			if err != nil {
				return nil, runs, fmt.Errorf("runs: verify %s: %w", pk, err)
			}
			for _, rw := range p.Entities {
				all[rw.RowKey] = rw
			}
			if p.Continuation == "" {
				break
			}
			q.Continuation = p.Continuation
		}
		want := map[string]string{} // list/state row key → run row key that needs it
		for rk, rw := range all {
			if !strings.HasPrefix(rk, prefixRun) && !strings.HasPrefix(rk, prefixOcc) {
				continue
			}
			r := decodeRun(rw)
			if r.pointer() {
				continue // not a record (pointTo)
			}
			runs++
			if homes := l.homes(bucketKey(r.ID)); runKey(r.ID) != rk || !slices.Contains(homes, pk) {
				problems = append(problems, fmt.Sprintf("%s/%s: run row of %q belongs at %s/%s", pk, rk, r.ID, strings.Join(homes, " or "), runKey(r.ID)))
			}
			want[listKey(r.ID, r.Due)] = rk
			if k := stateRowKey(r); k != "" {
				want[k] = rk
			}
		}
		for k, rk := range want {
			l, ok := all[k]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s/%s: list row %s is missing", pk, rk, k))
			case l.Props.Str("State") != all[rk].Props.Str("State"):
				problems = append(problems, fmt.Sprintf("%s/%s: list row %s says %s, the run row %s", pk, rk, k, l.Props.Str("State"), all[rk].Props.Str("State")))
			}
		}
		for rk := range all {
			if (strings.HasPrefix(rk, prefixList) || strings.HasPrefix(rk, prefixState)) && want[rk] == "" {
				problems = append(problems, fmt.Sprintf("%s/%s: list row without its run", pk, rk))
			}
		}
	}
	sort.Strings(problems)
	return problems, runs, nil
}
