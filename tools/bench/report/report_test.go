package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/tools/bench/results"
)

// fixture writes a complete set of records into a temporary directory:
// some targets met, some missed.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	start := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	write := func(name string, v any) {
		if err := results.Write(dir, name, v); err != nil {
			t.Fatal(err)
		}
	}
	write(results.MachineFile, results.Machine{Cores: 2, CPUModel: "AMD EPYC", MemoryMiB: 24105, GoVersion: "go1.26.8", AzuriteVersion: "3.37.0",
		OS: "linux/amd64", Kernel: "6.1", Commit: "abc123", Started: start, Finished: start.Add(25 * time.Minute), LoadStart: "1.0 1.0 1.0", LoadEnd: "2.0 2.0 2.0",
		Scenarios: []results.ScenarioTime{{Name: "mover", Seconds: 120}, {Name: "footprint", Seconds: 60, Error: "boom"}}})
	prog := []results.Point{{X: 0, Y: 0}, {X: 10, Y: 5000}, {X: 20, Y: 10000}}
	rate := func(n int, s float64) results.Rate {
		return results.NewRate(n, time.Duration(s*float64(time.Second)), prog)
	}
	withCPU := func(r results.Rate, client, server float64) results.Rate {
		r.ClientCPU, r.ServerCPU = client, server
		return r
	}
	write(results.MoverFile, results.Mover{Concurrency: 32, MoverRequests: map[string]int64{"queue enqueue": 10000, "table batch": 101, "table get-entity": 102, "table query": 11},
		Sets: []results.MoverSet{
			{Rows: 10000, NaiveRows: 1000, Raw: []results.Rate{withCPU(rate(10000, 20), 4, 18), withCPU(rate(10000, 22), 4, 18)}, Mover: []results.Rate{withCPU(rate(10000, 25), 6, 24), withCPU(rate(10000, 26), 6, 24)}, Naive: []results.Rate{rate(1000, 4), rate(1000, 4)}, MoverTableSeconds: []float64{5, 7.8}},
			{AddedLatencyMS: 10, Rows: 10000, NaiveRows: 500, Raw: []results.Rate{rate(10000, 30)}, Mover: []results.Rate{rate(10000, 31)}, Naive: []results.Rate{rate(500, 12)}},
			{AddedLatencyMS: 100, Rows: 5000, NaiveRows: 40, Raw: []results.Rate{rate(5000, 17)}, Mover: []results.Rate{rate(5000, 20)}, Naive: []results.Rate{rate(40, 8)}},
		}})
	var rows []results.ConsumerRow
	for _, k := range []int{1, 2, 4} {
		rows = append(rows,
			results.ConsumerRow{Variant: results.VariantRaw, Label: "raw", Instances: k, Concurrency: 32, Rate: rate(5000, 10), Steady: 500, Requests: map[string]int64{"queue dequeue": 160}},
			results.ConsumerRow{Variant: results.VariantInProcess, Label: "queue.Consumer, concurrency 32", Instances: k, Concurrency: 32, Rate: rate(5000, 11), Steady: 400, Requests: map[string]int64{"queue dequeue": 1200}},
			results.ConsumerRow{Variant: results.VariantProcess, Label: "processes", Instances: k, Concurrency: 8, Runs: true, Rate: rate(5000, 30), Steady: 170, CPUSeconds: 6})
	}
	write(results.ConsumerFile, results.Consumer{Messages: 5000, Rows: rows, TableCosts: []results.TableCost{
		{EntitiesPerRequest: 1, Requests: 9000, AzuriteCPUSeconds: 6.3}, {EntitiesPerRequest: 3, Requests: 3000, AzuriteCPUSeconds: 4.2}}})
	lat := []float64{0.01, 0.02, 0.05, 0.2, 0.4}
	late := []float64{0.5, 2, 3, 4, 5.5}
	write(results.LatenessFile, results.Lateness{Runs: []results.LatenessRun{
		{Label: "early on", Early: "0s", Workers: 2, Leader: "w2", Tasks: 5, WindowSeconds: 30, Ran: 5, PerWorker: map[string]int{"w1": 1, "w2": 4}, Lateness: lat, Summary: results.Summarize(lat)},
		{Label: "early off", Early: "-1s", Workers: 2, Tasks: 5, WindowSeconds: 30, Ran: 5, Lateness: late, Summary: results.Summarize(late)},
	}})
	write(results.FailoverFile, results.Failover{PollEverySeconds: 15, Samples: []results.FailoverSample{
		{LeaseSeconds: 15, Signal: "SIGTERM", Rep: 1, Takeover: 17.5, Acquired: 17.4, OldGeneration: 1, NewGeneration: 2},
		{LeaseSeconds: 15, Signal: "SIGTERM", Rep: 2, Takeover: 8, Acquired: 7.9, OldGeneration: 2, NewGeneration: 3},
		{LeaseSeconds: 15, Signal: "SIGKILL", Rep: 1, Takeover: 25, Acquired: 25, OldGeneration: 3, NewGeneration: 4},
		{LeaseSeconds: 60, Signal: "SIGKILL", Rep: 1, Error: "no takeover"},
	}})
	write(results.TransactionsFile, results.Transactions{Cases: []results.TxCase{
		{Kind: "one-off", Pattern: "lone", Runs: false, Tasks: 6, SpacingSeconds: 10, Client: map[string]float64{"table batch": 1}, Worker: map[string]float64{"queue enqueue": 1, "queue dequeue": 4.5, "table batch": 1, "table get-entity": 1, "queue delete-message": 1}, ClientTotal: 1, WorkerTotal: 8.5, Total: 9.5},
		{Kind: "one-off", Pattern: "burst", Runs: false, Tasks: 500, Client: map[string]float64{"table batch": 1}, Worker: map[string]float64{"queue enqueue": 1, "queue dequeue": 0.3, "queue delete-message": 1}, ClientTotal: 1, WorkerTotal: 2.3, Total: 3.3},
		{Kind: "recurring", Pattern: "burst", Runs: true, Tasks: 300, SpacingSeconds: 10, Client: map[string]float64{"table batch": 1}, Worker: map[string]float64{"queue enqueue": 1}, ClientTotal: 1, WorkerTotal: 9, Total: 9},
	}})
	write(results.IdleFile, results.Idle{WarmupSeconds: 60, WindowSeconds: 240, Rows: []results.IdleRow{
		{Role: "leader", Label: "leading", Runs: true, Requests: map[string]int64{"table query": 64, "blob lease-renew": 12}, PerHour: 1140},
		{Role: "standby", Label: "standby", Runs: true, Requests: map[string]int64{"blob head": 16, "queue dequeue": 10, "table update": 8}, PerHour: 510},
	}})
	write(results.FootprintFile, results.Footprint{Tasks: 5000, Concurrency: 8, Runs: true, PickupSeconds: 3, Seconds: 40, TasksPerSec: 125,
		RSSIdleMiB: 18, RSSPeakMiB: 26, RSSEndMiB: 25, CPUSeconds: 9, CPUPer1000: 1.8,
		RSS: []results.Point{{X: 0, Y: 18}, {X: 20, Y: 26}, {X: 40, Y: 25}}, Done: []results.Point{{X: 0, Y: 0}, {X: 20, Y: 2500}, {X: 40, Y: 5000}}})
	write(results.HistoryFile, results.History{Runs: 100_000, SeedSeconds: 120, RetentionDays: 7, FailedRetention: 30,
		Queries: []results.HistoryQuery{
			{What: "newest 50 failed", Rows: 50, Requests: 4, Right: true},
			{What: "a series' newest 50", Rows: 50, Requests: 1, Right: true},
			{What: "newest 50 of one type (`runs --type sync`)", Rows: 50, Requests: 9, Right: true},
		},
		Expired: 12_000, CleanRequests: 264, CleanSeconds: 30, CleanByOp: map[string]int64{"table batch": 240, "table query": 24}})
	write(results.APIFile, results.API{Tasks: 10000, Chunk: 1000, Conc: 4, File: results.Rate{PerSec: 2000}, GoMany: results.Rate{PerSec: 2500},
		APIMany: results.Rate{PerSec: 1900}, Ratio: 0.95, GoPerTask: 0.02, APIPerTask: 0.021,
		Single: results.APISingle{N: 500, GoP50MS: 2, GoP99MS: 9, APIP50MS: 4, APIP99MS: 14, GoPerTask: 1, APIPerTask: 2}})
	steady := func(c results.CapacityCase, perSec float64) results.CapacityCase {
		c.SteadyPerSecond = perSec
		return c
	}
	capCase := func(n int, perSec float64) results.CapacityCase {
		c := results.CapacityCase{Instances: n, PerSecond: perSec, Limit: 18, LimitBy: "partition/Runs/p0", OfLimit: perSec / 18}
		c.PerTask.RunsEntities = 9
		return c
	}
	write(results.CapacityFile, results.Capacity{QueueRate: 40, PartitionRate: 40, AccountRate: 400, LatencyMS: 5, Concurrency: 32, Shards: 8, Queues: 4, Tasks: 1000,
		// One instance at 0.72 of the limit overall, 0.94 once started: the
		// ratio is explained by its steady pace.
		Cases: []results.CapacityCase{steady(capCase(1, 13), 17), capCase(4, 17.5)}, SharedConcurrency: 4, SharedWorkMS: 250,
		Shared: []results.CapacityCase{steady(capCase(1, 3.5), 4), steady(capCase(2, 7), 8), steady(capCase(4, 12), 15)}})
	write(results.BatchFile, results.Batch{Cases: []results.BatchCase{
		{Method: "batch", Tasks: 10000, Rate: results.NewRate(10000, 2*time.Second, nil), Requests: map[string]int64{"table batch": 200}, PerTask: 0.02},
		{Method: "single", Tasks: 1000, Rate: results.NewRate(1000, 10*time.Second, nil), Requests: map[string]int64{"table batch": 1000}, PerTask: 1},
		{Method: "single-16", Tasks: 1000, Rate: results.NewRate(1000, 2*time.Second, nil), Requests: map[string]int64{"table batch": 1000}, PerTask: 1},
		{Method: "batch", AddedLatencyMS: 10, Tasks: 10000, Rate: results.NewRate(10000, 4*time.Second, nil), Requests: map[string]int64{"table batch": 200}, PerTask: 0.02},
		{Method: "single", AddedLatencyMS: 10, Tasks: 1000, Rate: results.NewRate(1000, 20*time.Second, nil), Requests: map[string]int64{"table batch": 1000}, PerTask: 1},
		{Method: "single-16", AddedLatencyMS: 10, Tasks: 1000, Rate: results.NewRate(1000, 2*time.Second, nil), Requests: map[string]int64{"table batch": 1000}, PerTask: 1},
	}})
	return dir
}

func TestRenderAll(t *testing.T) {
	in, out := fixture(t), t.TempDir()
	path, err := Render(in, out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"## Machine", "AMD EPYC, 2 cores", "3.37.0", "go1.26.8", "failed: boom",
		"## Targets", "## 1. Mover throughput", "## 2. Consumer throughput", "## 3. On-time delivery",
		"## 4. Failover", "## 5. Storage transactions", "### Idle workers", "## 6. Footprint",
		// Mover: per-repetition ratios 0.80 and 0.85 (median 82 %) on
		// Azurite as is, 30/31 = 97 % with 10 ms added; 392/250 = 1.6× naive.
		"| Mover ≥ 80 % of the raw enqueue ceiling on Azurite as is | 82 % of the ceiling (392 vs 477 msg/s, 10000 rows) | met |",
		"| Mover ≥ 90 % of the raw enqueue ceiling with 10 ms added per request | 97 % of the ceiling (323 vs 333 msg/s, 10000 rows); the raw loop ran at 10 % of the 3200 msg/s that 32 enqueues in flight allow at 10 ms a round trip | met |",
		"| Mover ≥ 90 % of the raw enqueue ceiling with 100 ms added per request | 85 % of the ceiling (250 vs 294 msg/s, 5000 rows); the raw loop ran at 92 % of the 320 msg/s that 32 enqueues in flight allow at 100 ms a round trip | **missed** |",
		"The raw loop waited on round trips (92 % of what 32 enqueues in flight allow at 100 ms), so the shortfall is the mover's own", "1.6× on Azurite as is",
		// Table calls: 5 of 25 s and 7.8 of 26 s (median 25 %).
		"The calls add up to 25 % of its wall time", "| mover | 25.5 | 6.0 | 24.0 |",
		// Consumer at 80 % of raw in every case.
		"80 % with 1, 80 % with 2, 80 % with 4 | **missed**", "4.2 messages per dequeue",
		// Azurite's table costs: per request and per entity.
		"| single insert | 9000 | 0.70 ms | 0.700 ms |", "| transaction of 3 | 3000 | 1.40 ms | 0.467 ms |",
		"| p99 lateness ≤ 1 s | p99 0.40 s with early enqueue", "p99 5.50 s without", "| w1 1, w2 (leader) 4 |",
		// SIGTERM 17.5 s > 16 s; SIGKILL 25 s ≤ 30 s; a failed sample is listed.
		"max 17.5 s at 15 s lease (target 16 s) | **missed**", "max 25.0 s at 15 s lease (target 30 s) | met", "60 s SIGKILL run 1: no takeover",
		"| ≤ 6 transactions per one-off task without run records | 3.3 in a burst, 9.5 for a lone task | **missed**",
		"| Idle standby ≤ 120 requests/hour | 510/hour for a standby; 1140 leader | **missed**",
		"240/h lease polls", "peak 26.0 MiB at 125 tasks/s",
		// Batch: 5,000/s against 100/s and 500/s.
		"## 13. Capacity at Azure's ratio", "| Capacity at Azure's ratio: at least 3.5× the tasks/s at 4 instances as at 1 | 1.35× (17.5 against 13.0 tasks/s) | **missed** |",
		"One instance of 32 handlers that take no time already drains at 0.72 of the layout's limit (0.94 at its steady pace; the limit 18.0 tasks/s, `partition/Runs/p0`)",
		"| Capacity at Azure's ratio, instances of 4 handlers of 250 ms: at least 3.5× the tasks/s at 4 instances as at 1, and at least 0.8 of the layout's limit | 3.75× at the steady pace (15.0 against 4.0 tasks/s; overall, start-up included, 3.43×: 12.0 against 3.5); 0.83 of 18.0 tasks/s at 4 instances (bound by `partition/Runs/p0`) | met |",
		"| 2 | 7.0 | 8.0 | 2.00× | 18.0 |", "| 1 | 13.0 | 17.0 | 1.00× |",
		"## 12. The HTTP API", "| POST /api/v1/tasks:many: at least 80 % of schedule --file's throughput | 0.95× (1900 against 2000 tasks/s, 10000 tasks) | met |",
		"## 7. Batch scheduling", "| ScheduleMany: at most 0.05 requests per task | 0.020 requests per task for 10000 tasks | met |",
		"| ScheduleMany: at least 20× the throughput of one Schedule at a time | 50× with 10 ms per request (5.0× against 16 callers); 50.0× on Azurite as is | met |",
		"### Where targets are missed, by how much, and why",
		// Run history: the type filter is not held to the page bound.
		"## 9. Run history", "| A page of run history (newest 50 failed, the running ones, a series) ≤ 5 requests | at most 4 (100,000 records) | met |",
		"| Retention ≤ 1 request per 100 expired records | 2.20 per 100 (12,000 expired) | **missed** |", "**22.0 requests per 1,000 expired records**",
	} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(md, want) {
				t.Errorf("BENCHMARKS.md lacks %q", want)
			}
		})
	}
	if strings.Contains(md, "%!") || strings.Contains(md, "MISSING") {
		t.Error("BENCHMARKS.md has a formatting error")
	}
	for _, png := range []string{"mover", "consumer", "lateness", "failover", "transactions", "idle", "footprint"} {
		t.Run(png, func(t *testing.T) {
			rel := "bench/" + png + ".png"
			if !strings.Contains(md, "]("+rel+")") {
				t.Errorf("BENCHMARKS.md does not show %s", rel)
			}
			b, err := os.ReadFile(filepath.Join(out, rel))
			if err != nil {
				t.Error(err)
				return
			}
			if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 2000 {
				t.Errorf("%s is not a plausible PNG (%d bytes)", rel, len(b))
			}
		})
	}
}

func TestRenderPartial(t *testing.T) {
	in := t.TempDir()
	if err := results.Write(in, results.MachineFile, results.Machine{Cores: 2, Quick: true}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	path, err := Render(in, out)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	md := string(b)
	if strings.Count(md, "Not run.") != 13 || !strings.Contains(md, "Per-task costs not run.") {
		t.Errorf("want every scenario marked not run:\n%s", md)
	}
	if !strings.Contains(md, "quick smoke run") || !strings.Contains(md, "| Mover ≥ 80 % of the raw enqueue ceiling on Azurite as is | – | not run |") {
		t.Errorf("partial report:\n%s", md)
	}
	if _, err := Render(t.TempDir(), out); err == nil {
		t.Error("rendering without machine.json succeeded")
	}
}

// The worker-process check takes medians of the interleaved runs on Azurite
// as is, reports the latency pairs beside them without letting them decide,
// and names Azurite's CPU per task when it misses.
func TestRunsProcessCheckMedians(t *testing.T) {
	row := func(k int, runs bool, steady, azCPU float64, lat, rep int) results.ConsumerRow {
		label := "worker processes, worker.runs=false"
		if runs {
			label = "worker processes, defaults (runs on)"
		}
		if lat > 0 {
			label += fmt.Sprintf(", +%dms per request", lat)
		}
		return results.ConsumerRow{Variant: results.VariantProcess, Label: label, Instances: k, Runs: runs, Steady: steady,
			AzuriteCPUSeconds: azCPU, LatencyMs: lat, Rep: rep, Rate: results.Rate{N: 1000, Seconds: 10}}
	}
	c := &results.Consumer{Messages: 1000, Rows: []results.ConsumerRow{
		// k=1: medians 150 on (an outlier of 40 ignored) and 200 off: 75 %.
		row(1, true, 150, 10, 0, 0), row(1, false, 200, 7, 0, 0),
		row(1, true, 40, 10, 0, 1), row(1, false, 210, 7, 0, 1),
		row(1, true, 160, 10, 0, 2), row(1, false, 190, 7, 0, 2),
		// Through the proxy: 90 % and, with two processes, 50 %:
		// reported, not deciding, with Azurite's busy share.
		row(1, true, 90, 9, 10, 0), row(1, false, 100, 7, 10, 0),
		row(2, true, 50, 9.5, 10, 0), row(2, false, 100, 7, 10, 0),
	}}
	c.TableCosts = []results.TableCost{{EntitiesPerRequest: 3, Requests: 100, AzuriteCPUSeconds: 0.15}}
	ch := runsProcessCheck(c, nil)
	if ch.status != statusMissed {
		t.Fatalf("status = %s", ch.status)
	}
	for _, want := range []string{"75 % with 1 (150 vs 200 tasks/s, Azurite busy 100 % vs 70 %) (medians)", "90 % with 1 process through 10 ms per request (90 vs 100 tasks/s, Azurite busy 90 % vs 70 %)",
		"50 % with 2 processes through 10 ms per request (50 vs 100 tasks/s, Azurite busy 95 % vs 70 %)", "10.0 ms with records against 7.0 ms without. The difference, 3.0 ms",
		// The two transactions' own cost, measured alone: 2 × 1.5 ms.
		"which cost it 3.0 ms when measured alone"} {
		t.Run(want, func(t *testing.T) {
			if !strings.Contains(ch.measured+ch.why, want) {
				t.Errorf("check lacks %q:\n%s\n%s", want, ch.measured, ch.why)
			}
		})
	}
	// Medians at 80 % or more meet it.
	c.Rows[1].Steady, c.Rows[3].Steady, c.Rows[5].Steady = 180, 180, 180
	if ch := runsProcessCheck(c, nil); ch.status != statusMet {
		t.Fatalf("status = %s (%s)", ch.status, ch.measured)
	}
	// Pairs measured against a storage account decide when there are
	// any: 70 % there misses though Azurite's medians meet it, and the
	// Azurite pairs are reported beside.
	acct := &results.Consumer{Messages: 1000, Rows: []results.ConsumerRow{
		row(1, true, 70, 0, 0, 0), row(1, false, 100, 0, 0, 0),
		row(1, true, 75, 0, 0, 1), row(1, false, 100, 0, 0, 1),
	}}
	ch = runsProcessCheck(c, acct)
	if ch.status != statusMissed || !strings.Contains(ch.measured, "on the storage account: 72 % with 1 (72 vs 100 tasks/s) (medians); on Azurite as is: 83 % with 1") ||
		!strings.Contains(ch.why, "against the storage account") {
		t.Errorf("with an account: %s\n%s\n%s", ch.status, ch.measured, ch.why)
	}
	acct.Rows[0].Steady, acct.Rows[2].Steady = 90, 85
	if ch := runsProcessCheck(c, acct); ch.status != statusMet {
		t.Errorf("account at 88 %%: %s (%s)", ch.status, ch.measured)
	}
}

// A delay too short to bind the raw loop leaves the emulator as its limit;
// the check says so instead of blaming the mover's pipeline.
func TestMoverLatencyCheckSaysWhatBound(t *testing.T) {
	rate := func(n int, s float64) results.Rate {
		return results.NewRate(n, time.Duration(s*float64(time.Second)), nil)
	}
	emu := moverLatencyCheck(results.MoverSet{AddedLatencyMS: 10, Rows: 10000,
		Raw: []results.Rate{rate(10000, 25)}, Mover: []results.Rate{rate(10000, 30)}}, 32)
	if emu.status != statusMissed || !strings.Contains(emu.why, "reached only 12 % of what its 32 enqueues in flight allow") || strings.Contains(emu.why, "shortfall is the mover's own") {
		t.Fatalf("emulator-bound set: %+v", emu)
	}
	trip := moverLatencyCheck(results.MoverSet{AddedLatencyMS: 100, Rows: 5000,
		Raw: []results.Rate{rate(5000, 16)}, Mover: []results.Rate{rate(5000, 17)}}, 32)
	if trip.status == statusMissed || trip.why != "" || !strings.Contains(trip.measured, "94 % of the ceiling (294 vs 312 msg/s, 5000 rows); the raw loop ran at 98 % of the 320 msg/s") {
		t.Fatalf("round-trip-bound set: %+v", trip)
	}
}

// TestRunPartitions: section 11's partition count follows leasecron's
// sizing of a fresh sharded account (four with one queue, eight a queue
// with more, at most 64, at least the shard count).
func TestRunPartitions(t *testing.T) {
	for _, c := range []struct{ shards, queues, want int }{{8, 1, 8}, {2, 1, 4}, {8, 4, 32}, {8, 2, 16}, {16, 16, 64}, {128, 16, 128}} {
		if got := runPartitions(c.shards, c.queues); got != c.want {
			t.Errorf("%d shards, %d queues: %d partitions; want %d", c.shards, c.queues, got, c.want)
		}
	}
}
