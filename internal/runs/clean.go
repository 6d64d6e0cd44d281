package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// CleanStats says what a Clean pass did.
type CleanStats struct {
	// Expired counts run records removed.
	Expired int `json:"expired"`
	// Counters counts per-minute counters rows removed.
	Counters int `json:"counters"`
	// Summaries counts series summary rows removed (every slot expired).
	Summaries int `json:"summaries,omitempty"`
	// Audit counts audit entries removed (older than their retention).
	Audit int `json:"audit,omitempty"`
}

// Clean removes the run records that have passed their retention and the
// per-minute counters older than CountersKept. It never scans the table:
// per partition it reads the expired end of each retention class's rows —
// the state rows of cancelled, failed and dead runs (few), and the time rows
// of runs due before the shorter retention's cutoff for succeeded ones (the
// bulk: oldest first, so the read stops where the young ones begin) — with
// the service filtering on the finish time, and deletes every row of an
// expired run in one transaction with others of its partition (up to 50
// runs per request). A transaction is conditional on the ETag of the row
// that proved the run expired, so a run that changed since (requeued, its
// id scheduled again) is left alone. Stopped at any point — killed, or its
// context cancelled — it leaves whole runs, never part of one; the next
// pass finishes the job.
func (s *Store) Clean(ctx context.Context) (CleanStats, error) {
	var st CleanStats
	if err := s.ensure(ctx); err != nil {
		return st, err
	}
	now := s.now()
	short := now.Add(-s.o.Retention)
	long := now.Add(-s.o.RetentionFailed)
	sel := []string{"Id", "State", "Due", "Worker", "Finished"}
	l, err := s.fullLayout(ctx)
	if err != nil {
		return st, err
	}
	for _, pk := range l.all() {
		occurrences := false
		// Succeeded: time rows of runs due before the cutoff (a run
		// finishes after it is due), newest of them first.
		lq := table.Query{Partition: pk, From: prefixList + invertedAfter(short), To: prefixList + "~", Select: sel,
			Where: []table.Cond{{Prop: "State", Op: table.Eq, Value: string(Succeeded)}, {Prop: "Finished", Op: table.Lt, Value: short}}}
		n, err := s.expire(ctx, lq, false, &occurrences)
		st.Expired += n
		if err != nil {
			return st, err
		}
		for _, c := range []struct {
			st     State
			cutoff time.Time
		}{{Cancelled, short}, {Failed, long}, {Dead, long}} {
			from, to := stateRange(c.st)
			n, err := s.expire(ctx, table.Query{Partition: pk, From: from, To: to, Select: sel, Where: []table.Cond{{Prop: "Finished", Op: table.Lt, Value: c.cutoff}}}, true, &occurrences)
			st.Expired += n
			if err != nil {
				return st, err
			}
		}
		if occurrences {
			// Only a pass that expired occurrences can have emptied a
			// summary: one more query of this partition.
			n, err := s.cleanSummaries(ctx, pk, now)
			st.Summaries += n
			if err != nil {
				return st, err
			}
		}
	}
	n, err := s.cleanCounters(ctx, now.Add(-CountersKept))
	st.Counters = n
	if err != nil {
		return st, err
	}
	if st.Audit, err = s.cleanAudit(ctx, now.Add(-s.o.AuditRetention)); err != nil {
		return st, err
	}
	if err := s.rollup(ctx, now); err != nil {
		s.o.Logger.Warn("rolling up the hourly counters failed; the next pass tries again", "err", err)
	}
	// Remember the pass, so that a new leader does not clean again at once.
	if err := submit(ctx, s.t, []table.Op{{Kind: table.Upsert, PartitionKey: metaPK, RowKey: metaCleaned, Props: table.Props{"At": now, "Expired": int64(st.Expired)}}}); err != nil {
		s.o.Logger.Debug("recording the cleaning pass failed", "err", err)
	}
	return st, nil
}

// The row that records the last cleaning pass.
const (
	metaPK      = "~clean" // sorts before the counters partitions ("~m...")
	metaCleaned = "cleaned"
)

// LastClean returns when the last Clean pass finished (zero if none has):
// one point read.
func (s *Store) LastClean(ctx context.Context) (time.Time, error) {
	if err := s.ensure(ctx); err != nil {
		return time.Time{}, err
	}
	rw, err := s.t.Get(ctx, metaPK, metaCleaned)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return time.Time{}, nil
	case err != nil:
		return time.Time{}, fmt.Errorf("runs: read the last cleaning pass: %w", err)
	}
	return rw.Props.Time("At"), nil
}

// expire deletes the runs whose rows q finds: q reads their state rows
// (byState) or their time rows. It sets *occurrences when any of them was
// an occurrence of a series.
func (s *Store) expire(ctx context.Context, q table.Query, byState bool, occurrences *bool) (int, error) {
	size := 2
	if byState {
		size = 3
	}
	var batch []table.Op
	done := 0
	flush := func() {
		n := s.submitEach(ctx, batch, size)
		done += n
		batch = batch[:0]
		if s.onCleaned != nil && n > 0 {
			s.onCleaned(n)
		}
	}
	for {
		p, err := s.t.Query(ctx, q)
		if err != nil {
			return done, fmt.Errorf("runs: clean %s: %w", q.Partition, err)
		}
		for _, rw := range p.Entities {
			r := decodeRun(rw)
			if _, _, ok := occurrence(r.ID); ok {
				*occurrences = true
			}
			if len(batch)+size > table.MaxOps {
				flush()
			}
			// The row read goes conditionally; the others of the run
			// change only together with it.
			batch = append(batch, table.Op{Kind: table.Delete, PartitionKey: q.Partition, RowKey: rw.RowKey, IfMatch: rw.ETag})
			if byState {
				batch = append(batch, table.Op{Kind: table.Delete, PartitionKey: q.Partition, RowKey: listKey(r.ID, r.Due)})
			}
			batch = append(batch, table.Op{Kind: table.Delete, PartitionKey: q.Partition, RowKey: runKey(r.ID)})
		}
		if p.Continuation == "" {
			break
		}
		q.Continuation = p.Continuation
		if ctx.Err() != nil {
			break
		}
	}
	flush()
	return done, ctx.Err()
}

// cleanSummaries deletes the summary rows of partition pk whose every
// slot has passed its retention (conditionally on the ETag read, so a
// slot written meanwhile keeps the row), and returns how many it deleted.
func (s *Store) cleanSummaries(ctx context.Context, pk string, now time.Time) (int, error) {
	q := table.Query{Partition: pk, From: prefixSummary, To: prefixSummary + "~"}
	var gone []table.Entity
	for {
		p, err := s.t.Query(ctx, q)
		if err != nil {
			return 0, fmt.Errorf("runs: clean summaries of %s: %w", pk, err)
		}
		for _, rw := range p.Entities {
			if len(s.liveSlots(rw, now)) == 0 {
				gone = append(gone, rw)
			}
		}
		if p.Continuation == "" || ctx.Err() != nil {
			break
		}
		q.Continuation = p.Continuation
	}
	return s.deleteRows(ctx, gone), ctx.Err()
}

// cleanCounters deletes the per-minute counters rows of minutes before
// cutoff.
func (s *Store) cleanCounters(ctx context.Context, cutoff time.Time) (int, error) {
	rows, err := table.All(ctx, s.t, table.Query{PartitionFrom: minutePrefix, PartitionTo: minutePartition(cutoff), Select: []string{"Minute"}}, 0)
	if err != nil {
		return 0, fmt.Errorf("runs: clean counters: %w", err)
	}
	var old []table.Entity
	for _, rw := range rows {
		if t := rw.Props.Time("Minute"); !t.IsZero() && t.Before(cutoff) {
			old = append(old, rw)
		}
	}
	return s.deleteRows(ctx, old), nil
}
