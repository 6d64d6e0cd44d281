package queue

import (
	"context"
	"reflect"

	"github.com/leasecron/leasecron/internal/runs"
)

// counterSink receives the consumer's counters. leasecron's own Runs table
// implements it beside RunRecorder (its counter rows are what `leasecron
// stats` sums); a RunRecorder that does not is simply not sent counters.
type counterSink interface {
	FlushCounters(ctx context.Context, c runs.Counters) error
}

// startCounters flushes the counters to the run recorder, when it keeps
// them, every CountersEvery while they change. The returned stop ends
// that and flushes once more (on hctx, which outlives shutdown).
func (c *Consumer) startCounters(hctx context.Context) (stop func()) {
	sink, ok := c.o.Runs.(counterSink)
	if !ok {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		c.flushLoop(sink, quit)
	}()
	return func() {
		close(quit)
		<-done
		ctx, cancel := c.opCtx(hctx)
		defer cancel()
		if err := sink.FlushCounters(ctx, c.Stats().toRuns()); err != nil {
			c.log.Warn("flushing counters failed", "err", err)
		}
	}
}

// flushLoop flushes every CountersEvery until stop closes, skipping
// flushes when nothing changed: an idle worker writes nothing.
func (c *Consumer) flushLoop(sink counterSink, stop <-chan struct{}) {
	var last runs.Counters
	flushed := false
	for {
		t := c.clk.NewTimer(c.o.CountersEvery)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
		cur := c.Stats().toRuns()
		if flushed && cur.Total == last.Total && reflect.DeepEqual(cur.ByType, last.ByType) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.o.StorageTimeout)
		if err := sink.FlushCounters(ctx, cur); err != nil {
			c.log.Warn("flushing counters failed", "err", err)
		} else {
			last, flushed = cur, true
		}
		cancel()
	}
}

// toRuns converts a snapshot for the Runs table's counters row.
func (st Stats) toRuns() runs.Counters {
	return runs.Counters{Instance: st.Instance, Total: st.Total, ByType: st.ByType, Lat: st.lat}
}
