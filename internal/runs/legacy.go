package runs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// The previous layout (up to the version that introduced this one) kept one
// row per run id in partition "r0".."rf" (a hash bucket of the id) with the
// id as RowKey, and one cumulative counters row per worker instance in
// partition "~stats". Reads fall back to such rows while the table holds
// any; a write converts the run it touches; Migrate converts them all.
const (
	legacyFirst    = "r0"
	legacyLast     = "rf"
	legacyStatsPK  = "~stats"
	legacyRecheck  = 10 * time.Minute
	legacyPageSize = 1000
)

// legacyProbe remembers whether the table holds rows of the previous
// layout: one query when a Store first uses the table.
type legacyProbe struct {
	mu      ctxlock.Mutex // held across the look
	checked time.Time
	present bool
}

func legacyPartition(id string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return fmt.Sprintf("r%x", h.Sum32()%16)
}

// hasLegacy reports whether the table holds run rows of the previous
// layout.
func (s *Store) hasLegacy(ctx context.Context) (bool, error) {
	if err := s.legacy.mu.LockContext(ctx); err != nil {
		return false, err
	}
	defer s.legacy.mu.Unlock()
	now := s.now()
	// A table found without old rows never gets them again (only workers of
	// the previous version write them); one with old rows is looked at
	// again every legacyRecheck until Migrate has removed them.
	if !s.legacy.checked.IsZero() && (!s.legacy.present || now.Sub(s.legacy.checked) < legacyRecheck) {
		return s.legacy.present, nil
	}
	p, err := s.t.Query(ctx, table.Query{PartitionFrom: legacyFirst, PartitionTo: legacyLast, Top: 1, Select: []string{"State"}})
	if err != nil {
		return false, fmt.Errorf("runs: look for records of the previous layout: %w", err)
	}
	s.legacy.checked, s.legacy.present = now, len(p.Entities) > 0 || p.Continuation != ""
	return s.legacy.present, nil
}

// legacyPresent reports what the last look found (true until a look has
// found none).
func (s *Store) legacyPresent() bool {
	s.legacy.mu.Lock()
	defer s.legacy.mu.Unlock()
	return s.legacy.checked.IsZero() || s.legacy.present
}

// readLegacy reads id's record of the previous layout, if the table holds
// that layout at all.
func (s *Store) readLegacy(ctx context.Context, id string) (Run, bool, error) {
	if ok, err := s.hasLegacy(ctx); err != nil || !ok {
		return Run{}, false, err
	}
	r, ok, err := s.pointRead(ctx, legacyPartition(id), id, id)
	if err != nil || !ok {
		return Run{}, false, err
	}
	r.ID = id
	r.legacy = true
	return r, true, nil
}

// convert writes next, the successor of a record of the previous layout,
// in the current layout and then removes the old row (a crash in between
// leaves the old row, which reads no longer reach once the new one exists).
func (s *Store) convert(ctx context.Context, old, next Run) error {
	next.pk = s.home(ctx, nil, next.ID)
	if err := submit(ctx, s.t, transition(nil, next)); err != nil {
		return err
	}
	err := submit(ctx, s.t, []table.Op{{Kind: table.Delete, PartitionKey: legacyPartition(old.ID), RowKey: old.ID, IfMatch: old.ETag}})
	if err != nil && !isConflict(err) {
		s.o.Logger.Warn("removing a converted record of the previous layout failed", "run", old.ID, "err", err)
	}
	return nil
}

// MigrateStats says what Migrate did.
type MigrateStats struct {
	// Converted counts records written in the current layout.
	Converted int `json:"converted"`
	// Skipped counts old records not converted: a newer record of the same
	// run existed, or the record was of a task still pending (scheduled),
	// whose pending row is its record now.
	Skipped int `json:"skipped"`
	// Removed counts old rows deleted (records and counters rows).
	Removed int `json:"removed"`
}

// Migrate converts every record of the previous layout into the current
// one and removes the old rows and the old cumulative counters rows. It can
// be stopped and run again at any time: a record is written in the new
// layout before its old row is removed, and one already converted is
// skipped.
func (s *Store) Migrate(ctx context.Context) (MigrateStats, error) {
	var st MigrateStats
	if err := s.ensure(ctx); err != nil {
		return st, err
	}
	for _, q := range []table.Query{
		{PartitionFrom: legacyFirst, PartitionTo: legacyLast, Top: legacyPageSize},
		{Partition: legacyStatsPK, Top: legacyPageSize},
	} {
		for {
			p, err := s.t.Query(ctx, q)
			if err != nil {
				return st, fmt.Errorf("runs: migrate: %w", err)
			}
			var gone []table.Entity
			var conv []Run
			var convRows []table.Entity
			for _, rw := range p.Entities {
				switch {
				case len(rw.PartitionKey) != 2 && rw.PartitionKey != legacyStatsPK:
					// not a partition of the previous layout
				case rw.PartitionKey == legacyStatsPK:
					gone = append(gone, rw)
				default:
					if r, ok := migrateOne(rw); ok {
						conv, convRows = append(conv, r), append(convRows, rw)
					} else {
						st.Skipped++
						gone = append(gone, rw)
					}
				}
			}
			res := s.importRuns(ctx, conv)
			for i, out := range res {
				switch out {
				case imported:
					st.Converted++
				case existed:
					st.Skipped++
				default:
					continue // its old row stays for the next run
				}
				gone = append(gone, convRows[i])
			}
			st.Removed += s.deleteRows(ctx, gone)
			if p.Continuation == "" {
				break
			}
			q.Continuation = p.Continuation
		}
	}
	s.legacy.mu.Lock()
	s.legacy.checked, s.legacy.present = s.now(), false
	s.legacy.mu.Unlock()
	return st, nil
}

// migrateOne reads the record of rw and reports whether it is to be
// converted (a record of a pending task, or one no key can hold, is not:
// its old row just goes).
func migrateOne(rw table.Entity) (Run, bool) {
	r := decodeRun(rw)
	r.ID = rw.RowKey
	if validateID(r.ID) != nil || r.State == Scheduled || !r.State.Valid() {
		return r, false
	}
	if series, _, ok := occurrence(r.ID); ok {
		r.Series = series
	}
	return r, true
}

// Import writes finished (or any) records as they are, each run's rows
// in one transaction with up to 32 others of its partition: for tools that
// fill a table (benchmarks, tests) and for Migrate. A run whose id already
// has a record is left as it is; Import returns how many it wrote.
func (s *Store) Import(ctx context.Context, rs []Run) (int, error) {
	if err := s.ensure(ctx); err != nil {
		return 0, err
	}
	n := 0
	for _, out := range s.importRuns(ctx, rs) {
		if out == imported {
			n++
		}
	}
	return n, ctx.Err()
}

type importOutcome int

const (
	importFailed importOutcome = iota
	imported
	existed
)

// importRuns inserts the runs' rows, 33 runs per partition and
// transaction, several transactions at once; a transaction that fails is
// retried run by run.
func (s *Store) importRuns(ctx context.Context, rs []Run) []importOutcome {
	out := make([]importOutcome, len(rs))
	l := s.layout(ctx)
	byPK := map[string][]int{}
	for i, r := range rs {
		if validateID(r.ID) == nil {
			rs[i].pk = l.home(bucketKey(r.ID))
			byPK[rs[i].pk] = append(byPK[rs[i].pk], i)
		}
	}
	var g errgroup.Group
	g.SetLimit(8)
	for _, idx := range byPK {
		for len(idx) > 0 {
			k := min(len(idx), table.MaxOps/3)
			chunk := idx[:k]
			idx = idx[k:]
			g.Go(func() error {
				var ops []table.Op
				for _, i := range chunk {
					ops = append(ops, transition(nil, rs[i])...)
				}
				if submit(ctx, s.t, ops) == nil {
					for _, i := range chunk {
						out[i] = imported
					}
					return nil
				}
				for _, i := range chunk {
					err := submit(ctx, s.t, transition(nil, rs[i]))
					switch {
					case err == nil:
						out[i] = imported
					case errors.Is(err, storage.ErrAlreadyExists):
						out[i] = existed
					default:
						s.o.Logger.Warn("writing a record failed", "run", rs[i].ID, "err", err)
					}
				}
				return nil
			})
		}
	}
	_ = g.Wait()
	return out
}

// deleteRows deletes rows (conditionally on their ETags) in transactions
// of one partition each, and returns how many it deleted. A transaction
// that fails (a row changed) is retried row by row.
func (s *Store) deleteRows(ctx context.Context, rows []table.Entity) int {
	ops := make([]table.Op, len(rows))
	for i, rw := range rows {
		ops[i] = table.Op{Kind: table.Delete, PartitionKey: rw.PartitionKey, RowKey: rw.RowKey, IfMatch: rw.ETag}
	}
	n := 0
	for _, chunk := range chunks(ops) {
		n += s.submitEach(ctx, chunk, 1)
	}
	return n
}

// submitEach submits ops as one transaction of groups of size ops each; if
// it fails, each group alone. It returns how many groups were applied.
func (s *Store) submitEach(ctx context.Context, ops []table.Op, size int) int {
	if len(ops) == 0 {
		return 0
	}
	if err := submit(ctx, s.t, ops); err == nil {
		return len(ops) / size
	}
	n := 0
	for i := 0; i+size <= len(ops); i += size {
		if err := submit(ctx, s.t, ops[i:i+size]); err == nil {
			n++
		} else if !isConflict(err) {
			s.o.Logger.Warn("deleting rows failed", "row", ops[i].RowKey, "err", err)
		}
	}
	return n
}
