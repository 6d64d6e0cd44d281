package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// runFootprint is scenario 6: one worker process (default settings, the
// no-op "log" handler at log.level warn) drains M messages. The messages
// are enqueued first, all invisible until the same moment, so the worker
// starts, idles (its idle RSS and CPU are read), then works; RSS is sampled
// from /proc every 200 ms, and VmHWM and utime+stime are read at the end.
func runFootprint(ctx context.Context, b *bench) error {
	const name = "footprint"
	m := b.s.fpTasks
	srv, err := b.startAzurite(ctx, name)
	if err != nil {
		return err
	}
	defer srv.Stop()
	sc, err := clients(srv, nil)
	if err != nil {
		return err
	}
	for _, q := range []string{workQueue, queue.DefaultPoisonQueue} {
		if err := sc.EnsureQueue(ctx, q); err != nil {
			return err
		}
	}
	qc := sc.Queue.NewQueueClient(workQueue)
	// Estimate the enqueue rate to pick a moment when all will be visible.
	probe, err := rawEnqueue(ctx, qc, 200, rawConcurrency, func(int) int32 { return 3600 })
	if err != nil {
		return err
	}
	// Those 200 stay invisible for an hour; clear them.
	if _, err := qc.ClearMessages(ctx, nil); err != nil {
		return err
	}
	est := time.Duration(float64(m)/max(probe.PerSec, 50)*1.5*float64(time.Second)) + b.s.fpIdle
	visible := time.Now().Add(est).Truncate(time.Second).Add(time.Second)
	b.logf(name, "enqueueing %d messages, all visible at %s", m, visible.Format("15:04:05"))
	fill, err := rawEnqueue(ctx, qc, m, rawConcurrency, func(int) int32 {
		return int32(math.Ceil(time.Until(visible).Seconds()))
	})
	if err != nil {
		return err
	}
	if time.Until(visible) < 3*time.Second {
		return fmt.Errorf("enqueueing took %.1fs, longer than estimated: too little idle time left", fill.Seconds)
	}
	dir, err := b.scratch("footprint")
	if err != nil {
		return err
	}
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Workers: 1, Azurite: srv, Config: workerConfig(nil)})
	if err != nil {
		return err
	}
	defer f.Stop()
	pid := f.Worker(f.Names()[0]).Pid()
	res := results.Footprint{Tasks: m, Concurrency: defaultWorkerConcurrency, Runs: true}
	if err := sleep(ctx, time.Until(visible)-500*time.Millisecond); err != nil {
		return err
	}
	idle, err := readProc(pid)
	if err != nil {
		return err
	}
	res.RSSIdleMiB, res.CPUIdleSeconds = kib2mib(idle.RSSKiB), idle.CPU
	b.logf(name, "worker idle: RSS %.1f MiB, CPU %.2fs since start; draining", res.RSSIdleMiB, idle.CPU)

	// Sample until the queue is empty.
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var last procUsage
	done := 0
	for {
		el := time.Since(visible).Seconds()
		u, err := readProc(pid)
		if err != nil {
			return fmt.Errorf("worker gone? %w (logs in %s)", err, dir)
		}
		last = u
		res.RSS = append(res.RSS, results.Point{X: el, Y: kib2mib(u.RSSKiB)})
		if d, err := depth(dctx, qc); err == nil {
			done = m - d
			res.Done = append(res.Done, results.Point{X: el, Y: float64(done)})
			if d == 0 {
				break
			}
		}
		if err := sleep(dctx, 200*time.Millisecond); err != nil {
			return fmt.Errorf("drained %d of %d: %w", done, m, err)
		}
	}
	// The worker's idle polling had backed off: it notices the messages
	// some seconds after they become visible. The drain rate counts from
	// the last sample before the first task was done.
	end := time.Since(visible).Seconds()
	for _, p := range res.Done {
		if p.Y > 0 {
			break
		}
		res.PickupSeconds = max(0, p.X)
	}
	res.Seconds = end - res.PickupSeconds
	res.TasksPerSec = float64(m) / res.Seconds
	res.RSSPeakMiB, res.RSSEndMiB = kib2mib(last.HWMKiB), kib2mib(last.RSSKiB)
	res.CPUSeconds = last.CPU - idle.CPU
	res.CPUPer1000 = res.CPUSeconds / float64(m) * 1000
	b.logf(name, "first task done %.1fs after the messages became visible; %d tasks in %.1fs = %.0f/s; RSS idle %.1f MiB, peak %.1f MiB; CPU %.2fs = %.3fs per 1,000 tasks",
		res.PickupSeconds, m, res.Seconds, res.TasksPerSec, res.RSSIdleMiB, res.RSSPeakMiB, res.CPUSeconds, res.CPUPer1000)
	return results.Write(b.out, results.FootprintFile, res)
}

func kib2mib(k int64) float64 { return float64(k) / 1024 }
