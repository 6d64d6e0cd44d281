package shard

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// Rows and properties of the map partition.
const (
	// Partition is the PartitionKey of the map's rows in the schedule
	// table. It sorts after every shard name made of digits and is never
	// read by a mover or a listing.
	Partition = "~shards"
	// MapRow is the RowKey of the row that fences the balancers.
	MapRow = "~map"

	PropGeneration = "Generation"
	PropCount      = "Count"
	PropOwner      = "Owner"
	PropEpoch      = "Epoch"
	PropSince      = "Since"
	PropFrom       = "From"
	PropPrevCount  = "PrevCount"
	PropSpan       = "Span"
	PropDone       = "Done"
	// PropRunParts and PropRunPartsNext are RunParts.Written (counts
	// separated by commas) and RunParts.Next.
	PropRunParts     = "RunParts"
	PropRunPartsNext = "RunPartsNext"
	// PropOpen is Map.Open.
	PropOpen = "Open"
	// PropOpenSet holds the token of the OpenRows call that wrote an
	// open row (for a count a map names or is about to), as against one
	// Reopen wrote again: a Reopen's take-back that finds it leaves the
	// row alone, and SetCount takes back only rows with its own.
	PropOpenSet = "Set"

	// epochShift places a balancer generation above every epoch an
	// earlier balancer (or an unsharded leader, whose fence holds its
	// lease generation) can have written: epochs of term g start at
	// g<<epochShift.
	epochShift = 20
)

// ErrFenced reports that a balancer of a newer generation has written the
// map: this one must stop balancing.
var ErrFenced = errors.New("shard map: a newer balancer has written it")

// Assignment is one shard's row.
type Assignment struct {
	Shard string
	// Owner is the member name of the instance that moves the shard ("":
	// none).
	Owner string
	// Epoch is the shard's fencing epoch; it grows with every change of
	// owner.
	Epoch int64
	// Since is when the balancer gave the shard to Owner.
	Since time.Time
	// From is the live owner the shard was taken from while it still
	// moves it: Owner starts only once From has stopped and cleared this
	// (or has died, and the balancer cleared it), so that a planned move
	// never has two movers at once. "" when there is none.
	From string
	// WakeBefore: the owner has gone quiet; a row due before this needs
	// a wake (zero while it polls).
	WakeBefore time.Time
	// Done is the count the shard's owner has finished pointing its tasks
	// for (see Map.PrevCount).
	Done int
	etag string
	wake string
}

// Map is the shard map as read.
type Map struct {
	// Generation is the balancer term that last wrote the map (0: never
	// written).
	Generation int64
	// Count is the shard count new tasks are placed by (0: the map was
	// never written).
	Count int
	// PrevCount is the count before the last change of Count while the
	// owners still write the pointers that make tasks placed under it
	// findable under Count (0: no change under way).
	PrevCount int
	// Span is how many shard partitions may hold tasks: the largest count
	// ever used. Every one of them is owned and moved.
	Span int
	// Shards are the shard rows, by shard.
	Shards map[string]Assignment
	// Runs is how the run records are spread over partitions.
	Runs RunParts
	// Open is the count whose open rows (OpenRowKey) stand in every shard
	// of it: a unique take placed by Open requires its shard's row in its
	// transaction, and the walk under a later count deletes the row, so
	// a take placed by the old count that lands after the walk fails and
	// is placed again (0: none; a map of a release before them).
	Open int
	etag string // of the "~map" row; "" when it is missing
}

// RunParts is how many partitions the run records are spread over, which
// grows with the shards (Balancer.RunParts): Written lists every count
// records have been written under, oldest first, the last the one
// written under now (empty: only the runs package's default); Next is a
// larger count that every process reads from before, once it has been in
// the map for RunPartsSettle, anyone writes under it (0: none).
type RunParts struct {
	Written []int
	Next    int
}

// RunPartsSettle is how long a new run-record partition count stays
// Next, read but not written under: every sharded worker reads the map at
// least once a minute (shards.cycle is at most 1m), every sharded client
// once a second and every process that is not sharded (a worker still on
// one shard during the rolling switch) every RunPartsSettle/4 while it
// uses run records, so by then all of them look for records under it.
const RunPartsSettle = 2 * time.Minute

// Layout returns the counts records are written under now (0: the
// default) and may be in, given base, the count before any was recorded.
func (r RunParts) Layout(base int) (write int, read []int) {
	read = slices.Clone(r.Written)
	if len(read) == 0 {
		read = []int{base}
	}
	write = read[len(read)-1]
	if r.Next != 0 && !slices.Contains(read, r.Next) {
		read = append(read, r.Next)
	}
	return write, read
}

// parseCounts reads a RunParts.Written property: positive counts
// separated by commas; anything else is left out.
func parseCounts(s string) []int {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func formatCounts(ns []int) string {
	fs := make([]string, len(ns))
	for i, n := range ns {
		fs[i] = strconv.Itoa(n)
	}
	return strings.Join(fs, ",")
}

// Owned returns the shards m gives to member and that it may move now
// (their previous owner has let go), with their epochs.
func (m Map) Owned(member string) map[string]int64 {
	out := map[string]int64{}
	for s, a := range m.Shards {
		if a.Owner == member && member != "" && a.From == "" {
			out[s] = a.Epoch
		}
	}
	return out
}

// Releasing returns the shards taken from member that still wait for it
// to let go.
func (m Map) Releasing(member string) []Assignment {
	var out []Assignment
	for _, a := range m.Sorted() {
		if a.From == member && member != "" {
			out = append(out, a)
		}
	}
	return out
}

// Sorted returns the shard rows in shard order.
func (m Map) Sorted() []Assignment {
	out := make([]Assignment, 0, len(m.Shards))
	for _, a := range m.Shards {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out
}

// Read reads the map: one query of its partition (a page per 1,000 shards).
func Read(ctx context.Context, t table.Table) (Map, error) {
	rows, err := table.All(ctx, t, table.Query{Partition: Partition}, 0)
	switch {
	case errors.Is(err, storage.ErrTableNotFound):
		// A fresh account: no schedule table yet, so no map.
		return Map{Shards: map[string]Assignment{}}, nil
	case err != nil:
		return Map{}, fmt.Errorf("read the shard map: %w", err)
	}
	m := Map{Shards: map[string]Assignment{}}
	for _, e := range rows {
		if e.RowKey == MapRow {
			m.Generation = e.Props.Int(PropGeneration)
			m.Count = int(e.Props.Int(PropCount))
			m.PrevCount = int(e.Props.Int(PropPrevCount))
			m.Span = max(int(e.Props.Int(PropSpan)), m.Count)
			m.Runs = RunParts{Written: parseCounts(e.Props.Str(PropRunParts)), Next: int(e.Props.Int(PropRunPartsNext))}
			m.Open = int(e.Props.Int(PropOpen))
			m.etag = e.ETag
			continue
		}
		m.Shards[e.RowKey] = Assignment{Shard: e.RowKey, Owner: e.Props.Str(PropOwner), Epoch: e.Props.Int(PropEpoch),
			Since: e.Props.Time(PropSince), From: e.Props.Str(PropFrom), WakeBefore: e.Props.Time(PropWakeBefore),
			Done: int(e.Props.Int(PropDone)),
			etag: e.ETag, wake: e.Props.Str(PropWake)}
	}
	return m, nil
}

// write stores changes as balancer generation gen for count shards, in
// transactions of up to 99 rows, each conditional on the "~map" row as the
// one before left it. It returns ErrFenced when a newer balancer has
// written the map, and an error wrapping storage.ErrPreconditionFailed when
// another write of this generation came between (read again and retry).
func write(ctx context.Context, t table.Table, m Map, gen int64, l Layout, rp RunParts, changes []Assignment) error {
	etag := m.etag
	for first := true; first || len(changes) > 0; first = false {
		n := min(len(changes), table.MaxOps-1)
		ops := make([]table.Op, 0, n+1)
		head := table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, IfMatch: etag,
			Props: table.Props{PropGeneration: gen, PropCount: int64(l.Count), PropPrevCount: int64(l.PrevCount), PropSpan: int64(l.Span),
				PropRunParts: formatCounts(rp.Written), PropRunPartsNext: int64(rp.Next), PropOpen: int64(l.Open)}}
		if etag == "" {
			head.Kind = table.Insert
		}
		ops = append(ops, head)
		for _, a := range changes[:n] {
			ops = append(ops, table.Op{Kind: table.Upsert, PartitionKey: Partition, RowKey: a.Shard,
				Props: table.Props{PropOwner: a.Owner, PropEpoch: a.Epoch, PropSince: a.Since.UTC(), PropFrom: a.From, PropDone: int64(a.Done)}})
		}
		changes = changes[n:]
		if _, err := t.Submit(ctx, ops); err != nil {
			if errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrAlreadyExists) {
				if cur, rerr := Read(ctx, t); rerr == nil && cur.Generation > gen {
					return fmt.Errorf("%w: it holds generation %d, ours is %d", ErrFenced, cur.Generation, gen)
				}
			}
			return fmt.Errorf("write the shard map: %w", err)
		}
		if len(changes) == 0 {
			return nil
		}
		e, err := t.Get(ctx, Partition, MapRow)
		if err != nil {
			return fmt.Errorf("write the shard map: %w", err)
		}
		if g := e.Props.Int(PropGeneration); g != gen {
			return fmt.Errorf("%w: it holds generation %d, ours is %d", ErrFenced, g, gen)
		}
		etag = e.ETag
	}
	return nil
}

// letGo clears From on a shard taken from its writer, once that writer has
// stopped moving it: conditional on the row as read, so that a newer
// change by the balancer is kept (the next cycle looks again).
func letGo(ctx context.Context, t table.Table, a Assignment) error {
	_, err := t.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: a.Shard, IfMatch: a.etag,
		Props: table.Props{PropFrom: ""}}})
	if err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
		return fmt.Errorf("let go of shard %s: %w", a.Shard, err)
	}
	return nil
}

// Layout is how tasks are placed: by Count, with PrevCount while a change
// is under way, over Span partitions; Open is Map.Open.
type Layout struct {
	Count, PrevCount, Span, Open int
}

// Layout returns m's layout, or, when the map was never written, one of
// count shards that an unsharded schedule (one shard, "00") is becoming.
func (m Map) Layout(count int) Layout {
	if m.Count == 0 {
		l := Layout{Count: count, Span: max(count, 1)}
		if count > 1 {
			l.PrevCount = 1
		}
		return l
	}
	return Layout{Count: m.Count, PrevCount: m.PrevCount, Span: max(m.Span, m.Count), Open: m.Open}
}

// OpenRowPrefix starts the RowKey of every open row: "uq~~open~{count}"
// in a shard's partition of the schedule table, among the unique guards
// ("uq~{type}~{key}"; a type never starts with '~'), where a due-time
// query never reaches and the guards' sweep (which selects rows by their
// CheckAfter, which an open row lacks) never selects it.
const OpenRowPrefix = "uq~~open~"

// OpenRowKey is the RowKey of the open row of count in each of its
// shards (see Map.Open).
func OpenRowKey(count int) string { return OpenRowPrefix + strconv.Itoa(count) }

// OpenRows writes the open row of count into each of its shards (a
// request each), marked with token (PropOpenSet): one already there is
// replaced, so a Reopen paused before it takes back the row it wrote,
// or a walk that read the row before, fails its conditional delete and
// reads the row (and the map) again, and the Reopen leaves a row so
// marked alone. A map may name count as Open only after it returned.
func OpenRows(ctx context.Context, t table.Table, count int, token string) error {
	for _, s := range Names(count) {
		_, err := t.Submit(ctx, []table.Op{{Kind: table.Upsert, PartitionKey: s, RowKey: OpenRowKey(count), Props: table.Props{PropCount: int64(count), PropOpenSet: token}}})
		if err != nil {
			return fmt.Errorf("open shard %s for %d shards: %w", s, count, err)
		}
	}
	return nil
}

// OpenToken returns a token for a call of OpenRows, its own among every
// process's.
func OpenToken() string { return rand.Text() }

// closeSet takes back the open rows of count that OpenRows wrote with
// token and nobody wrote since (a take's merge keeps the token; another
// OpenRows replaces it), for a SetCount whose map write was not made.
// It returns the shards whose row it could not take back.
func closeSet(ctx context.Context, t table.Table, count int, token string) []string {
	var left []string
	for _, s := range Names(count) {
		gone := false
		for range reopenTries {
			e, err := t.Get(ctx, s, OpenRowKey(count))
			if errors.Is(err, storage.ErrNotFound) || err == nil && e.Props.Str(PropOpenSet) != token {
				gone = true
				break
			}
			if err != nil {
				continue
			}
			_, err = t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: s, RowKey: e.RowKey, IfMatch: e.ETag}})
			if err == nil || errors.Is(err, storage.ErrNotFound) {
				gone = true
				break
			}
		}
		if !gone {
			left = append(left, s)
		}
	}
	return left
}

// reopenTries bounds Reopen's tries to take its row back.
const reopenTries = 5

// Reopen writes the open row of count into shard s again for a map
// that names count (one already there stays), and takes a row it wrote
// back out unless the map, read after the write, still names count: a
// process paused between its read of the map and this write must not
// open a shard that the walk under a later count has closed since. A
// row missing costs the next take in s one failed transaction (it writes
// the row again); a row left standing for a count the fleet has left
// lets a take placed by it commit beside the key's holder. So the row is
// taken back when the map cannot be read after the write too, and a
// take-back that fails is tried again, reading the row and the map again
// first: a row changed since it was written (a late take merged into it)
// is deleted again, and one OpenRows wrote since (`shards set` of count
// is under way) is left. A row already there is checked the same way:
// it may be this very insert, which the storage client tried again after
// its answer was lost.
func Reopen(ctx context.Context, t table.Table, s string, count int) error {
	row := OpenRowKey(count)
	etags, err := t.Submit(ctx, []table.Op{{Kind: table.Insert, PartitionKey: s, RowKey: row, Props: table.Props{PropCount: int64(count)}}})
	var etag string        // "": read the row before taking it back
	var last, unread error // unread: the last read of the map failed
	switch {
	case errors.Is(err, storage.ErrAlreadyExists):
		// Another's, or ours: stands only while the map names count.
		m, rerr := Read(ctx, t)
		if rerr == nil && max(m.Count, 1) == count {
			return nil
		}
		unread = rerr
	case err != nil:
		return fmt.Errorf("open shard %s for %d shards again: %w", s, count, err)
	default:
		etag = etags[0]
	}
	for range reopenTries {
		if etag == "" { // the last take-back failed: read the row again
			e, err := t.Get(ctx, s, row)
			switch {
			case errors.Is(err, storage.ErrNotFound):
				// Taken back (by a delete whose answer was lost): an error
				// still when the map could not be read, so that a caller
				// writing the rows before naming a count does not name it.
				if unread != nil {
					return fmt.Errorf("open shard %s for %d shards again: read the map after (its row taken back): %w", s, count, unread)
				}
				return nil
			case err != nil:
				last = fmt.Errorf("shard %s: read its open row of %d shards again: %w", s, count, err)
				continue
			case e.Props.Str(PropOpenSet) != "":
				return nil // shards set wrote it: the map names count, or is about to
			}
			etag = e.ETag
		}
		m, rerr := Read(ctx, t)
		if rerr == nil && max(m.Count, 1) == count { // no map: one shard
			return nil
		}
		unread = rerr
		_, err := t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: s, RowKey: row, IfMatch: etag}})
		switch {
		case err == nil, errors.Is(err, storage.ErrNotFound):
			if rerr != nil {
				return fmt.Errorf("open shard %s for %d shards again: read the map after (its row taken back): %w", s, count, rerr)
			}
			return nil
		case errors.Is(err, storage.ErrPreconditionFailed):
			last = nil
		default:
			last = fmt.Errorf("shard %s: take back its open row of %d shards, which the map may no longer name: %w", s, count, err)
		}
		etag = ""
	}
	if last == nil {
		last = errors.New("the row changed on each try")
	}
	return fmt.Errorf("shard %s: take back its open row of %d shards after %d tries: %w", s, count, reopenTries, last)
}

// Names returns the partition names of n shards (at least one): "00",
// "01", … (table.Numbered with two digits).
func Names(n int) []string { return table.Numbered("", max(n, 1), 2).Names() }

// ErrChanging refuses a change of the shard count while the last one is
// still being applied.
var ErrChanging = errors.New("the shard count is still changing")

// ErrNoMap refuses a change of the shard count before any sharded worker
// has written the map.
var ErrNoMap = errors.New("no shard map yet")

// SetCount changes the shard count new tasks are placed by to n (one
// conditional write of the map row). It returns the layout written.
func SetCount(ctx context.Context, t table.Table, n int) (Layout, error) {
	m, err := Read(ctx, t)
	if err != nil {
		return Layout{}, err
	}
	switch {
	case m.Count == 0:
		return Layout{}, fmt.Errorf("%w (no sharded worker has run on this account): start the workers with shards.count: %d and the first to lead writes the map with that count; the count of a sharded schedule can then be changed online", ErrNoMap, n)
	case m.PrevCount != 0:
		return m.Layout(0), fmt.Errorf("%w: from %d to %d; try again once every shard is done (leasecron shards)", ErrChanging, m.PrevCount, m.Count)
	case n == m.Count:
		return m.Layout(0), nil
	}
	token, from := OpenToken(), m.Count
	for range reopenTries {
		// The rows are written again before each try of the map write: a
		// change that ended since the last (its walk deleted them) fails
		// this write on the map's ETag, and one that ends after it finds
		// the map naming n and leaves them.
		if err = OpenRows(ctx, t, n, token); err == nil {
			l := Layout{Count: n, PrevCount: m.Count, Span: max(m.Span, n), Open: n}
			_, err = t.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, IfMatch: m.etag,
				Props: table.Props{PropCount: int64(l.Count), PropPrevCount: int64(l.PrevCount), PropSpan: int64(l.Span), PropOpen: int64(l.Open)}}})
			if err == nil {
				return l, nil
			}
		}
		now, rerr := Read(ctx, t)
		switch {
		case rerr != nil:
			// Whether the change was made is unknown: its rows stay (a
			// map naming n without them would refuse every unique take
			// placed by n until the change ended).
			return Layout{}, fmt.Errorf("change the shard count to %d: %w; the map could not be read after it (%w): see leasecron shards, and run shards set %d again if it is not changing to %d", n, err, rerr, n, n)
		case now.Count == n:
			return now.Layout(0), nil // made (its answer lost), or by another call
		case now.Count != from || now.PrevCount != 0:
			err = fmt.Errorf("%w: another change was made meanwhile (now %d shards, from %d; 0: done): see leasecron shards", ErrChanging, now.Count, now.PrevCount)
			return setFailed(ctx, t, n, token, now, err)
		}
		m = now // written by a cop's cycle (owners, a term's claim): try again
	}
	return setFailed(ctx, t, n, token, m, fmt.Errorf("%w (tried %d times)", err, reopenTries))
}

// setFailed takes back the open rows a SetCount of n wrote with token,
// and returns its error err, naming the rows it could not take back. It
// first fences the map (a conditional write of nothing on the map as just
// read): another set of n that read the map before, and whose rows this
// one's replaced, must not name n after they are taken back; fenced, it
// reads the map again and writes its rows anew. A map that names n by
// then made the change (another set of n, or this one's answer lost);
// one that changed before the fence landed is read and fenced again.
func setFailed(ctx context.Context, t table.Table, n int, token string, m Map, err error) (Layout, error) {
	fenced := false
	for try := 0; try < reopenTries && !fenced; try++ {
		if try > 0 {
			now, rerr := Read(ctx, t)
			if rerr != nil {
				return Layout{}, fmt.Errorf("change the shard count to %d: %w; its open rows stand (the map could not be read to take them back: %w)", n, err, rerr)
			}
			m = now
		}
		if m.Count == n {
			return m.Layout(0), nil
		}
		_, ferr := t.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, IfMatch: m.etag, Props: table.Props{}}})
		fenced = ferr == nil
	}
	if !fenced {
		return Layout{}, fmt.Errorf("change the shard count to %d: %w; its open rows stand (the map changed on each of %d tries to take them back)", n, err, reopenTries)
	}
	if left := closeSet(ctx, t, n, token); len(left) > 0 {
		return Layout{}, fmt.Errorf("change the shard count to %d: %w; its open rows in shards %s could not be taken back: they stand until the next change of count", n, err, strings.Join(left, ", "))
	}
	return Layout{}, fmt.Errorf("change the shard count to %d: %w", n, err)
}

// SizeRuns records n as the count run records are written under when the
// map records none yet, and returns what the map records afterwards (n,
// or what another process recorded first). A worker calls it before it
// creates the run-records table: with n sized for the fleet when the
// table does not exist yet (no record can be anywhere), with the runs
// package's default when it does (every record written before is under
// it). Recording it before the table exists is what lets every process
// of a fresh account agree: a process reads the map before its first
// write of a record (runLayout), and no record can be written before the
// table exists.
func SizeRuns(ctx context.Context, t table.Table, n int) (RunParts, error) {
	if n <= 0 {
		return RunParts{}, fmt.Errorf("size the run records: %d partitions: want a count above 0", n)
	}
	for try := 0; ; try++ {
		m, err := Read(ctx, t)
		if err != nil {
			return RunParts{}, err
		}
		if len(m.Runs.Written) > 0 || m.Runs.Next != 0 {
			return m.Runs, nil
		}
		op := table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, IfMatch: m.etag,
			Props: table.Props{PropRunParts: formatCounts([]int{n})}}
		if m.etag == "" {
			op.Kind = table.Insert
		}
		_, err = t.Submit(ctx, []table.Op{op})
		switch {
		case err == nil:
			return RunParts{Written: []int{n}}, nil
		case try < 4 && (errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrAlreadyExists)):
			// Another process wrote the map between: read what it holds.
		default:
			// A lost answer is read back by the caller's retry: the
			// write holds only n, so a second try finds it recorded.
			return RunParts{}, fmt.Errorf("record the run records' partition count %d: %w", n, err)
		}
	}
}

// markDone records that shard's tasks are findable under count.
func markDone(ctx context.Context, t table.Table, a Assignment, count int) error {
	_, err := t.Submit(ctx, []table.Op{{Kind: table.Merge, PartitionKey: Partition, RowKey: a.Shard, IfMatch: a.etag,
		Props: table.Props{PropDone: int64(count)}}})
	return err
}
