package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/throttle"
)

// The capacity scenario's targets (issue 41): Azure's own ratio, about
// 2,000 messages/s per queue, 2,000 entities/s per table partition and
// 20,000 requests/s per account, scaled down 1/50, with 5 ms added to
// every request; handlers that take no time and enough of them that the
// storage layout, not the handlers, is what is measured.
const (
	capacityQueueRate     = 40
	capacityPartitionRate = 40
	capacityAccountRate   = 400 // per service proxy: the blob, queue and table proxies each
	capacityLatency       = 5 * time.Millisecond
	capacityConcurrency   = 32
	capacityShards        = 8
	capacityQueues        = 4
	// The shared series: instances of a few handlers that take a while,
	// each good for about a quarter of the layout's limit, so that the
	// series shows capacity growing with instances up to that limit.
	capacitySharedConcurrency = 4
	capacitySharedWork        = 250 * time.Millisecond
)

// runCapacity drains a backlog of due tasks with 1, 2 and 4 instances at
// Azure's ratio, first with handlers that take no time and then with
// instances of a few slow handlers each (the shared series), and works
// out, from the requests and entity operations per task the proxy counted
// in every queue and partition, the layout's physical limit: the rate at
// which the first of them would reach its target. Throughput ÷ that limit
// says how close the fleet runs to what the layout allows; the bucket
// that limits says what binds.
func runCapacity(ctx context.Context, b *bench) error {
	res := results.Capacity{QueueRate: capacityQueueRate, PartitionRate: capacityPartitionRate, AccountRate: capacityAccountRate,
		LatencyMS: float64(capacityLatency) / float64(time.Millisecond), Concurrency: capacityConcurrency,
		Shards: capacityShards, Queues: capacityQueues, Tasks: b.s.capacityTasks}
	res.SharedConcurrency, res.SharedWorkMS = capacitySharedConcurrency, float64(capacitySharedWork)/float64(time.Millisecond)
	for _, series := range []struct {
		label       string
		concurrency int
		work        time.Duration
		cases       *[]results.CapacityCase
	}{
		{"fast handlers", capacityConcurrency, 0, &res.Cases},
		{"shared", capacitySharedConcurrency, capacitySharedWork, &res.Shared},
	} {
		for _, n := range b.s.instances {
			d, err := b.drain(ctx, drainSpec{shards: capacityShards, queues: capacityQueues, instances: n, tasks: res.Tasks,
				concurrency: series.concurrency, work: series.work, latency: capacityLatency, coldStart: true,
				limits: throttle.Limits{QueueMessages: capacityQueueRate, PartitionEntities: capacityPartitionRate, AccountRequests: capacityAccountRate}})
			if err != nil {
				return fmt.Errorf("capacity, %s, %d instances: %w", series.label, n, err)
			}
			c := capacityCase(n, res.Tasks, d)
			b.logf("capacity", "%s, %d instances: %d tasks in %.1f s, %.1f tasks/s (steady %.1f); limit %.1f tasks/s (%s), %.2f of it; per task: %.2f runs entity ops, %.2f schedule entity ops, %.2f queue message ops, %.2f requests; %d refused (%d partition, %d queue, %d account)",
				series.label, n, res.Tasks, c.Seconds, c.PerSecond, c.SteadyPerSecond, c.Limit, c.LimitBy, c.OfLimit, c.PerTask.RunsEntities, c.PerTask.ScheduleEntities, c.PerTask.QueueMessages,
				c.PerTask.Requests, c.Refused, c.PartitionRefused, c.QueueRefused, c.AccountRefused)
			*series.cases = append(*series.cases, c)
		}
	}
	return results.Write(b.out, results.CapacityFile, res)
}

// capacityCase works out a drain's figures.
func capacityCase(instances, tasks int, d drained) results.CapacityCase {
	c := results.CapacityCase{Instances: instances, Seconds: d.seconds, PerSecond: float64(tasks) / d.seconds, SteadyPerSecond: d.steady,
		Requests: d.stats.Requests, Refused: d.stats.Refused, QueueRefused: d.stats.QueueLimit,
		PartitionRefused: d.stats.PartitionLimit, AccountRefused: d.stats.AccountLimit}
	n := float64(tasks)
	c.PerTask.Requests = float64(d.stats.Requests-d.stats.Refused) / n
	c.Limit, c.LimitBy = math.Inf(1), ""
	// Every proxy counts its requests against its own account target.
	if c.PerTask.Requests > 0 {
		c.Limit, c.LimitBy = 3*capacityAccountRate/c.PerTask.Requests, "the account's request target"
	}
	for key, st := range d.buckets {
		kind, rate := bucketKind(key)
		perTask := st.Cost / n
		switch kind {
		case "runs":
			c.PerTask.RunsEntities += perTask
		case "schedule":
			c.PerTask.ScheduleEntities += perTask
		case "queue":
			c.PerTask.QueueMessages += perTask
		case "table":
			c.PerTask.OtherEntities += perTask
		}
		if st.Refused > 0 || perTask > 0.01 {
			c.Buckets = append(c.Buckets, results.CapacityBucket{Key: key, Kind: kind, PerTask: perTask, Refused: st.Refused})
		}
		if rate > 0 && perTask > 0 {
			if l := rate / perTask; l < c.Limit {
				c.Limit, c.LimitBy = l, key
			}
		}
	}
	sort.Slice(c.Buckets, func(i, j int) bool { return c.Buckets[i].Key < c.Buckets[j].Key })
	c.OfLimit = c.PerSecond / c.Limit
	return c
}

// bucketKind says what a proxy key is and its target rate.
func bucketKind(key string) (string, float64) {
	switch {
	case strings.HasPrefix(key, "queue/"):
		return "queue", capacityQueueRate
	case strings.HasPrefix(key, "partition/Runs/"):
		return "runs", capacityPartitionRate
	case strings.HasPrefix(key, "partition/ScheduledItems/"):
		return "schedule", capacityPartitionRate
	case strings.HasPrefix(key, "partition/"):
		return "table", capacityPartitionRate
	}
	return "blob", 0
}
