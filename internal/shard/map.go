package shard

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	etag       string
	wake       string
}

// Map is the shard map as read.
type Map struct {
	// Generation is the balancer term that last wrote the map (0: never
	// written).
	Generation int64
	// Count is the shard count the balancer last balanced for.
	Count int
	// Shards are the shard rows, by shard.
	Shards map[string]Assignment
	etag   string // of the "~map" row; "" when it is missing
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
	if err != nil {
		return Map{}, fmt.Errorf("read the shard map: %w", err)
	}
	m := Map{Shards: map[string]Assignment{}}
	for _, e := range rows {
		if e.RowKey == MapRow {
			m.Generation = e.Props.Int(PropGeneration)
			m.Count = int(e.Props.Int(PropCount))
			m.etag = e.ETag
			continue
		}
		m.Shards[e.RowKey] = Assignment{Shard: e.RowKey, Owner: e.Props.Str(PropOwner), Epoch: e.Props.Int(PropEpoch),
			Since: e.Props.Time(PropSince), From: e.Props.Str(PropFrom), WakeBefore: e.Props.Time(PropWakeBefore),
			etag: e.ETag, wake: e.Props.Str(PropWake)}
	}
	return m, nil
}

// write stores changes as balancer generation gen for count shards, in
// transactions of up to 99 rows, each conditional on the "~map" row as the
// one before left it. It returns ErrFenced when a newer balancer has
// written the map, and an error wrapping storage.ErrPreconditionFailed when
// another write of this generation came between (read again and retry).
func write(ctx context.Context, t table.Table, m Map, gen int64, count int, changes []Assignment) error {
	etag := m.etag
	for first := true; first || len(changes) > 0; first = false {
		n := min(len(changes), table.MaxOps-1)
		ops := make([]table.Op, 0, n+1)
		head := table.Op{Kind: table.Merge, PartitionKey: Partition, RowKey: MapRow, IfMatch: etag,
			Props: table.Props{PropGeneration: gen, PropCount: int64(count)}}
		if etag == "" {
			head.Kind = table.Insert
		}
		ops = append(ops, head)
		for _, a := range changes[:n] {
			ops = append(ops, table.Op{Kind: table.Upsert, PartitionKey: Partition, RowKey: a.Shard,
				Props: table.Props{PropOwner: a.Owner, PropEpoch: a.Epoch, PropSince: a.Since.UTC(), PropFrom: a.From}})
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
