package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// netTicks is the .NET ticks encoding of the public row contract, written
// out here independently of the schedule package on purpose.
func netTicks(t time.Time) int64 { return t.UTC().UnixNano()/100 + 621355968000000000 }

// TestPipelineThreeProcesses is the pipeline's acceptance test: three worker
// processes, 500 tasks scheduled out of order over 30 s plus 50 rows
// inserted with the raw table client, the leader stopped halfway; every task
// must run.
func TestPipelineThreeProcesses(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	first, err := f.WaitLeader(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first leader %s generation %d", first.Holder, first.Generation)
	out, stderr, err := f.CLI(ctx, "leader", "--json")
	var shown struct {
		Held       bool   `json:"held"`
		Holder     string `json:"holder"`
		Generation int64  `json:"generation"`
		State      string `json:"state"`
	}
	if err != nil || json.Unmarshal([]byte(out), &shown) != nil || !shown.Held || shown.Holder != first.Holder || shown.Generation != first.Generation || shown.State != "leased" {
		t.Fatalf("leader --json = %s (%v %s), want holder %s generation %d", out, err, stderr, first.Holder, first.Generation)
	}

	cl, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(3 * time.Second)
	const n, raw = 500, 50
	var want []string
	items := make([]leasecron.Item, n)
	for i := range items {
		items[i] = leasecron.Item{ID: fmt.Sprintf("t%03d", i), Type: "rec", Payload: `{"n":1}`,
			Due: start.Add(time.Duration(rand.Int64N(int64(30 * time.Second))))}
		want = append(want, items[i].ID)
	}
	rand.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	dues := scheduleAll(ctx, t, cl, items)
	t.Logf("scheduled %d tasks in %s", n, time.Since(start.Add(-3*time.Second)).Round(time.Millisecond))

	// Rows written directly, as a .NET/Python/Node app would: only the
	// documented properties.
	sc, err := storage.New(storage.Config{ConnectionString: f.Azurite.ConnectionString()})
	if err != nil {
		t.Fatal(err)
	}
	tc := sc.Table.NewClient("ScheduledItems")
	for i := range raw {
		id := fmt.Sprintf("raw%02d", i)
		due := start.Add(time.Duration(rand.Int64N(int64(30 * time.Second))))
		row := map[string]any{
			"PartitionKey": "00",
			"RowKey":       fmt.Sprintf("%019d_%s", netTicks(due), id),
			"Message":      fmt.Sprintf(`{"raw":%d}`, i),
			"Type":         "rec",
		}
		b, _ := json.Marshal(row)
		if _, err := tc.AddEntity(ctx, b, (*aztables.AddEntityOptions)(nil)); err != nil {
			t.Fatalf("raw insert: %v", err)
		}
		dues[id] = due.UTC().Truncate(100 * time.Nanosecond)
		want = append(want, id)
	}

	// Stop the leader halfway through the due window.
	time.Sleep(time.Until(start.Add(15 * time.Second)))
	f.Signal(first.Holder, syscall.SIGTERM)
	stopped := time.Now()
	next, err := f.WaitLeader(ctx, first.Holder)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s stopped (SIGTERM); %s took over after %s with generation %d", first.Holder, next.Holder, time.Since(stopped).Round(time.Millisecond), next.Generation)
	if next.Generation <= first.Generation {
		t.Errorf("generation did not increase: %d then %d", first.Generation, next.Generation)
	}

	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	defer wcancel()
	if missing, err := f.WaitRecords(wctx, want); err != nil {
		t.Fatalf("%d of %d tasks never ran (%v): %v", len(missing), len(want), err, head(missing, 20))
	}
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	starts := fleet.Starts(rs)
	var lateness []time.Duration
	dups := 0
	perWorker := map[string]int{}
	for _, id := range want {
		r := starts[id]
		dups += len(r) - 1
		lateness = append(lateness, r[0].At.Sub(dues[id]))
		perWorker[r[0].Worker]++
	}
	t.Logf("all %d tasks ran; executions beyond the first: %d; per worker: %v", len(want), dups, perWorker)
	t.Logf("lateness (handler start - due): p50 %s, p99 %s, max %s", fleet.Percentile(lateness, 50).Round(time.Millisecond),
		fleet.Percentile(lateness, 99).Round(time.Millisecond), fleet.Percentile(lateness, 100).Round(time.Millisecond))
	if len(perWorker) < 2 {
		t.Errorf("all tasks ran on one worker: %v", perWorker)
	}
}

func head(s []string, n int) []string {
	sort.Strings(s)
	if len(s) > n {
		return s[:n]
	}
	return s
}
