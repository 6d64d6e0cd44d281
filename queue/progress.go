package queue

import (
	"context"
	"sync"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// ProgressRecorder is implemented by a RunRecorder that keeps the progress
// running tasks report (leasecron's Runs table does). The consumer
// writes through it at most once per ConsumerSettings.ProgressEvery per
// task, and the last report before the attempt's outcome. A RunRecorder
// without it drops progress reports.
type ProgressRecorder interface {
	// Progress records worker's running attempt of id at p. It writes
	// nothing when the claim is no longer worker's.
	Progress(ctx context.Context, id, worker string, p leasecrontype.RunProgress) error
}

// progressWriter passes one attempt's progress reports to the recorder:
// the first at once, then the latest at most once per ProgressEvery, from
// a goroutine started at the first report (a handler that never reports
// costs nothing), and the last one unwritten when the attempt ends.
type progressWriter struct {
	c    *Consumer
	rec  ProgressRecorder
	hctx context.Context
	d    *delivery

	mu      sync.Mutex
	latest  leasecrontype.RunProgress
	pending bool // latest is not written yet
	started bool
	ended   bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// newProgress returns the progress writer of d's attempt, or nil when
// reports go nowhere: no recorder that keeps them, or no claim of the run
// (a claim that failed and a task that runs anyway).
func (c *Consumer) newProgress(hctx context.Context, d *delivery) *progressWriter {
	rec, ok := c.o.Runs.(ProgressRecorder)
	if !ok || !d.claimed {
		return nil
	}
	return &progressWriter{c: c, rec: rec, hctx: hctx, d: d,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// report takes a report from the handler (leasecrontype.ReportProgress).
func (p *progressWriter) report(r leasecrontype.RunProgress) {
	r.At = p.c.clk.Now().UTC()
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.latest, p.pending = r, true
	if !p.started {
		p.started = true
		go p.loop()
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// loop writes the latest report when one arrives, waiting until
// ProgressEvery has passed since the last write.
func (p *progressWriter) loop() {
	defer close(p.done)
	var last time.Time
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
		if !last.IsZero() {
			if wait := last.Add(p.c.o.ProgressEvery).Sub(p.c.clk.Now()); wait > 0 {
				t := p.c.clk.NewTimer(wait)
				select {
				case <-p.stop:
					t.Stop()
					return
				case <-t.C():
				}
			}
		}
		last = p.c.clk.Now()
		p.write()
	}
}

// write writes the latest report unless it is written already.
func (p *progressWriter) write() {
	p.mu.Lock()
	if !p.pending {
		p.mu.Unlock()
		return
	}
	r := p.latest
	p.pending = false
	p.mu.Unlock()
	ctx, cancel := p.c.opCtx(p.hctx)
	defer cancel()
	if err := p.rec.Progress(ctx, p.d.env.ID, p.c.o.InstanceID, r); err != nil {
		p.d.log.Debug("recording progress failed", "err", err)
	}
}

// end stops the writer when the handler has returned and writes the last
// report if it is not written yet, so that the outcome keeps it.
func (p *progressWriter) end() {
	p.mu.Lock()
	p.ended = true
	started := p.started
	p.mu.Unlock()
	if !started {
		return
	}
	close(p.stop)
	<-p.done
	p.write()
}
