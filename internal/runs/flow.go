package runs

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Workflow rows. Dependencies are kept from the parent's side, so that
// the end of a task finds what waits for it with one query:
//
//   - partition "~d", RowKey "{parent}~{child}": child waits for parent
//     (written before the child's row; removed once the parent's end has
//     been applied to the child);
//   - partition "~l", RowKey "{parent}": a parent that was already in the
//     queue when a task began waiting for it, so its message does not say
//     so; the traffic cop looks at these parents' records every pass.
//
// A batch has a partition of its own, "~c{batch}": a header row "h"
// (Total, Sealed, Callback, Created, Finished), counter rows "c0".."c7"
// (Succeeded, Dead, Cancelled: a member counts in the row its id hashes
// to, which spreads the writes of members ending at once), a row per
// member "a~{id}" (written with the batch) and a row per member that has
// ended "m~{id}" (State), inserted in the transaction that counts it, so
// a member is never counted twice.
const (
	depsPK        = "~d"
	latePK        = "~l"
	batchPKPrefix = "~c"
	batchHeader   = "h"
	batchCounter  = "c"
	batchCounters = 8
	batchMember   = "a~"
	batchEnded    = "m~"
	// batchSumsEnd ends the key range of the header and counter rows
	// (from "c", after the member list "a~…", to before "m~…").
	batchSumsEnd = "i"
)

// batchTries bounds the attempts to count a member's end while others
// count theirs.
const batchTries = 30

// ErrNoBatch: no batch has that id.
var ErrNoBatch = errors.New("no such batch")

// Dependent is a task waiting for a parent.
type Dependent struct {
	Parent, Child string
	// Created is when the dependency was written.
	Created time.Time
}

// AddDependents writes dependencies (a transaction per 100).
func (s *Store) AddDependents(ctx context.Context, deps []Dependent) error {
	if len(deps) == 0 {
		return nil
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	ops := make([]table.Op, len(deps))
	for i, d := range deps {
		ops[i] = table.Op{Kind: table.Upsert, PartitionKey: depsPK, RowKey: d.Parent + "~" + d.Child, Props: table.Props{"Created": s.now()}}
	}
	if err := submitChunked(ctx, s.t, ops); err != nil {
		return fmt.Errorf("runs: write dependencies: %w", err)
	}
	return nil
}

// Dependents returns what waits for parent (one query per 1,000).
func (s *Store) Dependents(ctx context.Context, parent string) ([]Dependent, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	rows, err := table.All(ctx, s.t, table.Query{Partition: depsPK, From: parent + "~", To: parent + "\x7f"}, 0)
	if err != nil {
		return nil, fmt.Errorf("runs: read what waits for %s: %w", parent, err)
	}
	out := make([]Dependent, len(rows))
	for i, e := range rows {
		out[i] = Dependent{Parent: parent, Child: strings.TrimPrefix(e.RowKey, parent+"~"), Created: e.Props.Time("Created")}
	}
	return out, nil
}

// DropDependent removes the dependency d once applied.
func (s *Store) DropDependent(ctx context.Context, d Dependent) error {
	return s.dropRow(ctx, depsPK, d.Parent+"~"+d.Child)
}

// dropRow deletes one row; a row already gone is not an error.
func (s *Store) dropRow(ctx context.Context, pk, rk string) error {
	err := submit(ctx, s.t, []table.Op{{Kind: table.Delete, PartitionKey: pk, RowKey: rk}})
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("runs: delete %s/%s: %w", pk, rk, err)
	}
	return nil
}

// WatchParents records parents whose end the traffic cop must watch for
// (their messages were sent before anything waited for them).
func (s *Store) WatchParents(ctx context.Context, parents []string) error {
	if len(parents) == 0 {
		return nil
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	ops := make([]table.Op, len(parents))
	for i, p := range parents {
		ops[i] = table.Op{Kind: table.Upsert, PartitionKey: latePK, RowKey: p, Props: table.Props{"Created": s.now()}}
	}
	if err := submitChunked(ctx, s.t, ops); err != nil {
		return fmt.Errorf("runs: watch parents: %w", err)
	}
	return nil
}

// Watched returns the parents to watch (one query per 1,000).
func (s *Store) Watched(ctx context.Context) ([]string, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	rows, err := table.All(ctx, s.t, table.Query{Partition: latePK, Select: []string{"Created"}}, 0)
	if err != nil {
		return nil, fmt.Errorf("runs: read the watched parents: %w", err)
	}
	out := make([]string, len(rows))
	for i, e := range rows {
		out[i] = e.RowKey
	}
	return out, nil
}

// Unwatch stops watching parent.
func (s *Store) Unwatch(ctx context.Context, parent string) error {
	return s.dropRow(ctx, latePK, parent)
}

// CancelDependent records a task that waited for a parent cancelled, with
// why: its parent ended without succeeding.
func (s *Store) CancelDependent(ctx context.Context, id string, m Meta, why string) error {
	if err := validateID(id); err != nil {
		return err
	}
	now := s.now()
	return s.modify(ctx, id, func(cur *Run) (Run, bool, error) {
		if cur != nil && cur.State.Finished() && !newer(cur, m) {
			return Run{}, false, nil
		}
		next := successor(cur, id, Cancelled)
		next.Finished, next.LastError = now, why
		fillMeta(&next, m)
		return next, true, nil
	})
}

// Batch is a batch's state.
type Batch struct {
	ID string
	leasecrontype.BatchCounts
	// Sealed: every member was written (a batch whose scheduler died
	// midway never seals, and never completes).
	Sealed bool
	// Callback is the id of the completion callback, if any.
	Callback          string
	Created, Finished time.Time
}

// Complete reports whether every member of a sealed batch has ended.
func (b Batch) Complete() bool {
	return b.Sealed && (b.Ended() >= b.Total || mutate.On(mutate.CallbackEarly) && b.Ended() > 0)
}

func batchPK(id string) string { return batchPKPrefix + id }

// CreateBatch writes a batch's header (refused if the id exists) with
// total members expected and its callback's id; the batch is sealed by
// SealBatch once its members are written. It returns the header's
// creation time, which names this call's header (DeleteBatch), also when
// the write's outcome is unknown.
func (s *Store) CreateBatch(ctx context.Context, id string, total int, callback string) (time.Time, error) {
	created := stored(s.now())
	return created, s.createBatch(ctx, id, total, callback, created)
}

func (s *Store) createBatch(ctx context.Context, id string, total int, callback string, created time.Time) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	err := submit(ctx, s.t, []table.Op{{Kind: table.Insert, PartitionKey: batchPK(id), RowKey: batchHeader,
		Props: table.Props{"Total": int64(total), "Sealed": false, "Callback": callback, "Created": created}}})
	if errors.Is(err, storage.ErrAlreadyExists) {
		// This call's own header, if it holds exactly what this call
		// wrote: an insert that committed though its answer was lost,
		// and the SDK's retry of it met it (issue 38, the simulator's
		// seed 73350: the whole file was refused, and the batch id left
		// taken by a header with no members).
		h, gerr := s.t.Get(ctx, batchPK(id), batchHeader)
		if gerr != nil {
			return fmt.Errorf("runs: create batch %s: it exists, and reading it to tell whether this call wrote it failed: %w", id, gerr)
		}
		if h.Props.Int("Total") == int64(total) && !h.Props.Bool("Sealed") &&
			h.Props.Str("Callback") == callback && h.Props.Time("Created").Equal(created) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("runs: create batch %s: %w", id, err)
	}
	return nil
}

// AddBatchMembers lists the members of batch (a transaction per 100).
func (s *Store) AddBatchMembers(ctx context.Context, id string, members []string) error {
	ops := make([]table.Op, len(members))
	for i, m := range members {
		ops[i] = table.Op{Kind: table.Upsert, PartitionKey: batchPK(id), RowKey: batchMember + m, Props: table.Props{}}
	}
	if err := submitChunked(ctx, s.t, ops); err != nil {
		return fmt.Errorf("runs: list the members of batch %s: %w", id, err)
	}
	return nil
}

// SealBatch sets the batch's member count to total, now that its members
// are written, and seals it.
func (s *Store) SealBatch(ctx context.Context, id string, total int) error {
	err := submit(ctx, s.t, []table.Op{{Kind: table.Merge, PartitionKey: batchPK(id), RowKey: batchHeader,
		Props: table.Props{"Total": int64(total), "Sealed": true}}})
	if err != nil {
		return fmt.Errorf("runs: seal batch %s: %w", id, err)
	}
	return nil
}

// FinishBatch notes when the batch's callback was released.
func (s *Store) FinishBatch(ctx context.Context, id string) error {
	err := submit(ctx, s.t, []table.Op{{Kind: table.Merge, PartitionKey: batchPK(id), RowKey: batchHeader,
		Props: table.Props{"Finished": s.now()}}})
	if err != nil {
		return fmt.Errorf("runs: finish batch %s: %w", id, err)
	}
	return nil
}

// DeleteBatch removes a batch that was never written whole (its
// scheduler undid it): its header and member rows — only while the
// header is the one written at created (CreateBatch's answer): a batch of
// that id written since by another call is left alone, and so is a batch
// already gone. It fails while the header stays.
func (s *Store) DeleteBatch(ctx context.Context, id string, created time.Time) error {
	// mine lists the batch's rows and says whose its header is: this
	// call's (1), another's (-1), or none (0: the rows left are
	// orphans, their header deleted before them).
	mine := func() ([]table.Entity, int, error) {
		rows, err := table.All(ctx, s.t, table.Query{Partition: batchPK(id), Select: []string{"Created"}}, 0)
		if err != nil {
			return nil, 0, fmt.Errorf("runs: delete batch %s: %w", id, err)
		}
		switch i := slices.IndexFunc(rows, func(e table.Entity) bool { return e.RowKey == batchHeader }); {
		case i < 0:
			return rows, 0, nil
		case rows[i].Props.Time("Created").Equal(stored(created)):
			return rows, 1, nil
		}
		return rows, -1, nil
	}
	rows, whose, err := mine()
	if err != nil || whose < 0 {
		return err
	}
	s.deleteRows(ctx, rows)
	if rows, whose, err = mine(); err == nil && whose >= 0 && len(rows) > 0 {
		err = fmt.Errorf("runs: delete batch %s: %d of its rows could not be deleted", id, len(rows))
	}
	return err
}

// GetBatch reads a batch's header and counters (one query).
func (s *Store) GetBatch(ctx context.Context, id string) (Batch, error) {
	if err := s.ensure(ctx); err != nil {
		return Batch{}, err
	}
	p, err := s.t.Query(ctx, table.Query{Partition: batchPK(id), From: batchCounter, To: batchSumsEnd})
	if err != nil {
		return Batch{}, fmt.Errorf("runs: read batch %s: %w", id, err)
	}
	b, _, ok := batchFrom(id, p.Entities, "")
	if !ok {
		return Batch{}, fmt.Errorf("%w: %q", ErrNoBatch, id)
	}
	return b, nil
}

// batchFrom sums a batch's header and counter rows; the counter row
// named want is returned too (a zero entity when it has none yet).
func batchFrom(id string, rows []table.Entity, want string) (Batch, table.Entity, bool) {
	b := Batch{ID: id}
	var found bool
	var mine table.Entity
	for _, e := range rows {
		p := e.Props
		switch {
		case e.RowKey == batchHeader:
			found = true
			b.Total, b.Sealed, b.Callback = int(p.Int("Total")), p.Bool("Sealed"), p.Str("Callback")
			b.Created, b.Finished = p.Time("Created"), p.Time("Finished")
		case strings.HasPrefix(e.RowKey, batchCounter):
			b.Succeeded += int(p.Int("Succeeded"))
			b.Dead += int(p.Int("Dead"))
			b.Cancelled += int(p.Int("Cancelled"))
			if e.RowKey == want {
				mine = e
			}
		}
	}
	return b, mine, found
}

// counterOf is the counter row a member counts in.
func counterOf(member string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(member))
	return batchCounter + strconv.Itoa(int(h.Sum32()%batchCounters))
}

// EndMember counts the end of member in batch (state succeeded, dead or
// cancelled) unless it was counted before, and returns the batch as it
// stands after: about three requests (read the counters, count the
// member and its counter row in one transaction, read them again).
func (s *Store) EndMember(ctx context.Context, id, member string, state State) (Batch, error) {
	field := map[State]string{Succeeded: "Succeeded", Dead: "Dead", Cancelled: "Cancelled"}[state]
	if field == "" {
		return Batch{}, fmt.Errorf("%w: a batch member ends succeeded, dead or cancelled, not %q", ErrInvalid, state)
	}
	pk, ck := batchPK(id), counterOf(member)
	for try := 0; ; try++ {
		switch {
		case try == batchTries:
			return Batch{}, fmt.Errorf("runs: batch %s: %w", id, ErrContention)
		case try > 0:
			// Members ending at once contend for the counter rows (real
			// time: a fake clock would never end this wait).
			if err := clock.Sleep(ctx, clock.Real{}, time.Duration(rand.Int64N(int64(try)*int64(10*time.Millisecond)))); err != nil {
				return Batch{}, err
			}
		}
		p, err := s.t.Query(ctx, table.Query{Partition: pk, From: batchCounter, To: batchSumsEnd})
		if err != nil {
			return Batch{}, fmt.Errorf("runs: read batch %s: %w", id, err)
		}
		b, row, ok := batchFrom(id, p.Entities, ck)
		if !ok {
			return Batch{}, fmt.Errorf("%w: %q (member %s)", ErrNoBatch, id, member)
		}
		counter := table.Op{Kind: table.Insert, PartitionKey: pk, RowKey: ck, Props: table.Props{field: int64(1)}}
		if row.ETag != "" {
			counter = table.Op{Kind: table.Merge, PartitionKey: pk, RowKey: ck, IfMatch: row.ETag, Props: table.Props{field: row.Props.Int(field) + 1}}
		}
		err = submit(ctx, s.t, []table.Op{
			{Kind: table.Insert, PartitionKey: pk, RowKey: batchEnded + member, Props: table.Props{"State": string(state), "Ended": s.now()}},
			counter,
		})
		switch {
		case err == nil:
		case isConflict(err):
			if _, gerr := s.t.Get(ctx, pk, batchEnded+member); gerr == nil {
				// Counted before (a second delivery, or a crash after
				// counting): only the batch as it stands is wanted.
				return s.GetBatch(ctx, id)
			} else if !errors.Is(gerr, storage.ErrNotFound) {
				return Batch{}, fmt.Errorf("runs: batch %s: %w", id, gerr)
			}
			continue
		default:
			return Batch{}, fmt.Errorf("runs: count member %s of batch %s: %w", member, id, err)
		}
		b.BatchCounts = addCount(b.BatchCounts, state)
		if b.Complete() {
			return b, nil // complete even without the others' writes since
		}
		return s.GetBatch(ctx, id)
	}
}

func addCount(c leasecrontype.BatchCounts, st State) leasecrontype.BatchCounts {
	switch st {
	case Succeeded:
		c.Succeeded++
	case Dead:
		c.Dead++
	case Cancelled:
		c.Cancelled++
	}
	return c
}

// BatchMember is a member of a batch and, once it has ended, how.
type BatchMember struct {
	ID    string
	State State // "" while it has not ended
}

// BatchMembers lists the members of batch, in id order, with the state of
// those that have ended (one query per 1,000 members, and one per 1,000
// ended).
func (s *Store) BatchMembers(ctx context.Context, id string) ([]BatchMember, error) {
	pk := batchPK(id)
	all, err := table.All(ctx, s.t, table.Query{Partition: pk, From: batchMember, To: batchMember + "\x7f", Select: []string{"RowKey"}}, 0)
	if err != nil {
		return nil, fmt.Errorf("runs: list batch %s: %w", id, err)
	}
	ended, err := table.All(ctx, s.t, table.Query{Partition: pk, From: batchEnded, To: batchEnded + "\x7f", Select: []string{"State"}}, 0)
	if err != nil {
		return nil, fmt.Errorf("runs: list batch %s: %w", id, err)
	}
	st := make(map[string]State, len(ended))
	for _, e := range ended {
		st[strings.TrimPrefix(e.RowKey, batchEnded)] = State(e.Props.Str("State"))
	}
	out := make([]BatchMember, len(all))
	for i, e := range all {
		m := strings.TrimPrefix(e.RowKey, batchMember)
		out[i] = BatchMember{ID: m, State: st[m]}
	}
	return out, nil
}
