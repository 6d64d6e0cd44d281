package leasecron

import (
	"context"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/table"
)

// runLayout is how a sharded fleet's run records are spread over
// partitions (runs.Layout), as the shard map last said: the count grows
// with the shards (docs/run-history.md). A worker's shard owner tells it
// every map read; until then, and in a client, it reads the map itself at
// most once per shard.ClientMapTTL.
type runLayout struct {
	t   table.Table // the schedule table, where the map lives
	clk clock.Clock

	mu   sync.Mutex
	l    runs.Layout
	at   time.Time // when l was read (zero: never)
	told bool      // an owner keeps l current
}

func newRunLayout(t table.Table, clk clock.Clock) *runLayout {
	return &runLayout{t: t, clk: clk, l: runs.DefaultLayout}
}

// get is runs.Options.Layout.
func (r *runLayout) get(ctx context.Context) runs.Layout {
	now := r.clk.Now()
	r.mu.Lock()
	l, fresh := r.l, r.told || !r.at.IsZero() && now.Sub(r.at) < shard.ClientMapTTL
	r.mu.Unlock()
	if fresh {
		return l
	}
	m, err := shard.Read(ctx, r.t)
	if err != nil {
		return l // the last one read (a failed write or read is retried as any other)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.told {
		r.l, r.at = layoutOf(m), now
	}
	return r.l
}

// tell is shard.Owner.OnRead.
func (r *runLayout) tell(m shard.Map) {
	r.mu.Lock()
	r.l, r.told = layoutOf(m), true
	r.mu.Unlock()
}

func layoutOf(m shard.Map) runs.Layout {
	w, rd := m.Runs.Layout(runs.Buckets)
	return runs.Layout{Write: w, Read: rd}
}
