package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/tools/internal/fleet"
)

// Fleet timing the checks rely on (fleet.BaseConfig): a 15 s lease, 1 s
// polls for the lease and the mover.
const (
	leaseDuration = 15 * time.Second
	safetyMargin  = 2 * time.Second // max(2 s, lease/10)
	leasePoll     = time.Second     // ±20 % jitter
	renewEvery    = leaseDuration / 3
	callTimeout   = leaseDuration / 6 // min(5 s, lease/6)
	// unsavedWindow bounds what Azurite can lose when it is killed: it saves
	// its metadata every 5 s; the margin covers the save itself.
	unsavedWindow = 10 * time.Second
)

// collected holds the results of this test binary's scenarios; TestMain
// writes them out.
var (
	collectedMu sync.Mutex
	collected   []Result
	badInputs   []BadInput
)

func collect(r Result) {
	collectedMu.Lock()
	defer collectedMu.Unlock()
	collected = append(collected, r)
}

// fleetConfig is the chaos suite's configuration over fleet.BaseConfig.
func fleetConfig(extra map[string]any) map[string]any {
	cfg := map[string]any{
		"log":        map[string]any{"format": "json", "level": "info"},
		"blackboard": map[string]any{"enabled": false},
		"worker":     map[string]any{"visibility_timeout": "15s"},
	}
	mergeMaps(cfg, extra)
	if n := chaosShards(); n > 1 {
		mergeMaps(cfg, map[string]any{"shards": map[string]any{"count": n, "cycle": "1s"}})
	}
	// CHAOS_CONFIG (JSON) is merged last, for experiments such as
	// {"worker":{"runs":false}}.
	if js := os.Getenv("CHAOS_CONFIG"); js != "" {
		var over map[string]any
		if err := json.Unmarshal([]byte(js), &over); err != nil {
			panic(fmt.Sprintf("CHAOS_CONFIG is not a JSON object: %v", err))
		}
		mergeMaps(cfg, over)
	}
	return cfg
}

// chaosShards is CHAOS_SHARDS: run every scenario with a schedule of that
// many shards (the workers and the suite's client). Default 1: unsharded.
// Sharded, "movers at once" is the most movers of one shard at one
// instant, from the shard owners' terms in the logs.
func chaosShards() int {
	n, err := strconv.Atoi(os.Getenv("CHAOS_SHARDS"))
	if err != nil || n < 1 {
		return 1
	}
	return n
}

func mergeMaps(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeMaps(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// run is one scenario's fleet and evidence.
type run struct {
	t        *testing.T
	scenario string
	short    bool
	f        *fleet.Fleet
	dir      string
	start    time.Time
	cl       *leasecron.Client
	sc       *storage.Clients
	poll     *LeasePoller

	mu      sync.Mutex
	deaths  map[string]time.Time
	acks    map[string]time.Time // task id → when its scheduling was acknowledged
	dues    map[string]time.Time
	order   []string // ids in acknowledgement order
	notes   []string
	kills   []outage // Azurite SIGKILLs
	stopped bool
	// expected holds workers the test ended on purpose; unexpected lists
	// workers that exited on their own.
	expected   map[string]bool
	unexpected []string
	// afterAnalysis, when set, runs the scenario's own checks on the
	// evidence before the row is reported.
	afterAnalysis func(*analysis)
}

// newRun starts Azurite and n workers for scenario.
func newRun(t *testing.T, scenario string, short bool, n int, cfg map[string]any) *run {
	t.Helper()
	if testing.Short() {
		t.Skip("reliability scenario; -short skips it")
	}
	if _, err := azurite.FindBinary(""); err != nil && os.Getenv("LEASECRON_REQUIRE_AZURITE") == "" {
		t.Skipf("skipping: %v", err)
	}
	// The scenario's directory (worker logs, records, Azurite's data) is
	// removed when it passes, unless CHAOS_KEEP asks for it, and kept
	// when it fails: a loss must leave its evidence behind.
	keep := os.Getenv("CHAOS_KEEP")
	dir, err := os.MkdirTemp(keep, "leasecron-chaos-"+strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	if keep != "" {
		t.Logf("keeping logs in %s", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Config: fleetConfig(cfg)})
	if err != nil {
		t.Fatalf("%v (logs in %s)", err, dir)
	}
	r := &run{t: t, scenario: scenario, short: short, f: f, dir: dir, deaths: map[string]time.Time{},
		acks: map[string]time.Time{}, dues: map[string]time.Time{}, expected: map[string]bool{}}
	t.Cleanup(func() {
		r.mu.Lock()
		r.stopped = true
		r.mu.Unlock()
		if r.poll != nil {
			r.poll.Stop()
		}
		f.Stop()
		switch {
		case t.Failed():
			for _, name := range f.Names() {
				b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("--- %s log (tail) ---\n%s", name, b)
			}
			t.Logf("the scenario's worker logs, records and Azurite data are kept in %s", dir)
		case keep == "":
			_ = os.RemoveAll(dir)
		}
	})
	if r.cl, err = leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.Azurite.ConnectionString()},
		Names: leasecron.Names{Shards: chaosShards()}}); err != nil {
		t.Fatal(err)
	}
	if r.sc, err = storage.New(storage.Config{ConnectionString: f.Azurite.ConnectionString()}); err != nil {
		t.Fatal(err)
	}
	r.poll = StartLeasePoller(r.cl.Leader, 100*time.Millisecond)
	for range n {
		r.startWorker()
	}
	r.start = time.Now()
	return r
}

// startWorker starts one more worker and watches for its exit.
func (r *run) startWorker(extraEnv ...string) string {
	r.t.Helper()
	return r.startWorkerWith(r.f.Bin, extraEnv...)
}

// startWorkerWith starts one more worker of the binary bin (an earlier
// release) and watches for its exit.
func (r *run) startWorkerWith(bin string, extraEnv ...string) string {
	r.t.Helper()
	name, err := r.f.StartWorkerWith(bin, extraEnv...)
	if err != nil {
		r.t.Fatal(err)
	}
	p := r.f.Worker(name)
	go func() {
		<-p.Done()
		r.mu.Lock()
		if _, ok := r.deaths[name]; !ok {
			r.deaths[name] = time.Now()
		}
		if !r.stopped && !r.expected[name] {
			r.unexpected = append(r.unexpected, fmt.Sprintf("%s (%v)", name, p.Err()))
		}
		r.mu.Unlock()
	}()
	return name
}

// expectExit marks a worker as ended on purpose.
func (r *run) expectExit(name string) {
	r.mu.Lock()
	r.expected[name] = true
	r.mu.Unlock()
}

// kill SIGKILLs a worker and returns when the signal was sent.
func (r *run) kill(name string) time.Time {
	r.expectExit(name)
	at := time.Now()
	r.f.Signal(name, syscall.SIGKILL) // waits for the exit
	r.mu.Lock()
	if _, ok := r.deaths[name]; !ok {
		r.deaths[name] = time.Now()
	}
	r.mu.Unlock()
	return at
}

func (r *run) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.t.Log(s)
	r.mu.Lock()
	r.notes = append(r.notes, s)
	r.mu.Unlock()
}

func (r *run) since(t time.Time) Duration { return Duration(t.Sub(r.start)) }

// waitLeader waits for a holder other than not.
func (r *run) waitLeader(ctx context.Context, not string) (string, int64) {
	r.t.Helper()
	h, err := r.f.WaitLeader(ctx, not)
	if err != nil {
		r.t.Fatal(err)
	}
	return h.Holder, h.Generation
}

func (r *run) ack(id string, due time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.acks[id]; !ok {
		r.order = append(r.order, id)
	}
	r.acks[id] = time.Now()
	r.dues[id] = due
}

func (r *run) scheduled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.order...)
}

// schedule schedules items through the Go API with par goroutines. A call
// that fails for a transient reason is retried until ctx ends; a retry that
// finds the id already scheduled counts as acknowledged (the first attempt
// was written although its answer was lost). It returns the ids never
// acknowledged.
func (r *run) schedule(ctx context.Context, items []leasecron.Item, par int) []string {
	return r.scheduleWith(ctx, r.cl, items, par)
}

// scheduleWith is schedule through the client cl.
func (r *run) scheduleWith(ctx context.Context, cl *leasecron.Client, items []leasecron.Item, par int) []string {
	work := make(chan leasecron.Item)
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				tried := false
				giveUp := time.Now().Add(2 * time.Minute)
				for {
					out, err := cl.Schedule(ctx, it, nil)
					if err == nil {
						r.ack(out.ID, out.Due)
						break
					}
					if tried && errors.Is(err, leasecron.ErrAlreadyScheduled) {
						r.ack(it.ID, it.Due)
						break
					}
					invalid := errors.Is(err, schedule.ErrInvalid) || errors.Is(err, schedule.ErrBadRecurrence) || errors.Is(err, leasecron.ErrAlreadyScheduled)
					if ctx.Err() != nil || time.Now().After(giveUp) || invalid || (!storage.IsTransient(err) && !errors.Is(err, context.DeadlineExceeded)) {
						mu.Lock()
						failed = append(failed, it.ID)
						mu.Unlock()
						if ctx.Err() == nil {
							r.t.Errorf("schedule %s: %v", it.ID, err)
						}
						break
					}
					if !tried {
						r.t.Logf("schedule %s: %v (retrying)", it.ID, err)
					}
					tried = true
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
	return failed
}

// netTicks is the .NET ticks of the public row contract, written out here
// independently of the schedule package on purpose.
func netTicks(t time.Time) int64 { return t.UTC().UnixNano()/100 + 621355968000000000 }

// insertRaw writes rows the way another language's app would (the public
// row contract: PartitionKey "00", RowKey ticks_id, Message, Type), 100 per
// table transaction.
func (r *run) insertRaw(ctx context.Context, typ string, ids []string, due func(i int) time.Time) {
	r.t.Helper()
	tc := r.sc.Table.NewClient("ScheduledItems")
	for lo := 0; lo < len(ids); lo += 100 {
		hi := min(lo+100, len(ids))
		var acts []aztables.TransactionAction
		dues := map[string]time.Time{}
		for i := lo; i < hi; i++ {
			d := due(i).UTC().Truncate(100 * time.Nanosecond)
			b, _ := json.Marshal(map[string]any{
				"PartitionKey": "00",
				"RowKey":       fmt.Sprintf("%019d_%s", netTicks(d), ids[i]),
				"Message":      fmt.Sprintf(`{"n":%d}`, i),
				"Type":         typ,
			})
			acts = append(acts, aztables.TransactionAction{ActionType: aztables.TransactionTypeAdd, Entity: b})
			dues[ids[i]] = d
		}
		if _, err := tc.SubmitTransaction(ctx, acts, nil); err != nil {
			r.t.Fatalf("raw insert: %v", err)
		}
		for id, d := range dues {
			r.ack(id, d)
		}
	}
}

// dueBacklog counts the schedule's rows due now, in every shard: task
// rows' keys start with their due ticks; index, guard and map rows sort
// after digits, the map's partition after every shard's.
func (r *run) dueBacklog(ctx context.Context) (int, error) {
	tc := r.sc.Table.NewClient("ScheduledItems")
	filter := fmt.Sprintf("PartitionKey lt '~' and RowKey le '%019d'", netTicks(time.Now()))
	sel := "RowKey"
	pager := tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter, Select: &sel})
	n := 0
	for pager.More() {
		p, err := pager.NextPage(ctx)
		if err != nil {
			return n, err
		}
		n += len(p.Entities)
	}
	return n, nil
}

// records reads the record file.
func (r *run) records() []fleet.Record {
	r.t.Helper()
	rs, err := r.f.Records()
	if err != nil {
		r.t.Fatal(err)
	}
	return rs
}

// slowPrefix starts the ids of recslow tasks, the only handler that
// records its end.
const slowPrefix = "s"

// inFlight returns the recslow tasks worker w had started but not ended at t.
func inFlight(rs []fleet.Record, w string, t time.Time) []string {
	started := map[string]bool{}
	for _, x := range rs {
		if x.Worker != w || x.At.After(t) || !strings.HasPrefix(x.ID, slowPrefix) {
			continue
		}
		switch x.Phase {
		case "start":
			started[x.ID] = true
		case "end":
			delete(started, x.ID)
		}
	}
	var out []string
	for id := range started {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// idleWait ends waitExecuted early when no new execution has started for
// this long: longer than a takeover after a SIGKILL (≤ 17 s) or a message
// coming back after its visibility timeout and run claim (≤ 30 s).
const idleWait = 45 * time.Second

// waitExecuted waits until every scheduled task has run, up to d, or until
// nothing new has started for idleWait, and logs how many have not run
// (the analysis then tells lost from emulator-dropped).
func (r *run) waitExecuted(d time.Duration) {
	deadline := time.Now().Add(d)
	lastCount, lastChange := -1, time.Now()
	for {
		rs := r.records()
		starts := fleet.Starts(rs)
		var missing []string
		for _, id := range r.scheduled() {
			if len(starts[id]) == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return
		}
		if len(rs) != lastCount {
			lastCount, lastChange = len(rs), time.Now()
		}
		if time.Now().After(deadline) || time.Since(lastChange) > idleWait {
			// The analysis says which are lost and which the emulator dropped.
			r.t.Logf("%d tasks had not run after the wait", len(missing))
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// analysis is the evidence of a finished run.
type analysis struct {
	terms    []Term
	maxMov   int
	overlaps []Overlap
	// shardTerms are the shard owners' terms (sharded runs).
	shardTerms []Term
	records    []fleet.Record
	x          Executions
	lease      []LeaseSample
	lost       []string
	dropped    []string
	events     []LogEvent
}

// stopAndAnalyse stops the workers (SIGTERM: in-flight tasks finish), then
// reads the logs, the records and the lease history, and classifies the
// tasks that never ran while Azurite is still up.
func (r *run) stopAndAnalyse() *analysis {
	r.t.Helper()
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, name := range r.f.Names() {
		p := r.f.Worker(name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Stop(20 * time.Second); err != nil {
				select {
				case <-p.Done():
				default:
					r.t.Errorf("worker %s: %v", name, err)
				}
			}
		}()
	}
	wg.Wait()
	r.poll.Stop()
	end := time.Now()
	r.mu.Lock()
	deaths := map[string]time.Time{}
	for k, v := range r.deaths {
		deaths[k] = v
	}
	r.mu.Unlock()
	a := &analysis{}
	for _, name := range r.f.Names() {
		es, err := ParseWorkerLog(filepath.Join(r.dir, name+".log"), name)
		if err != nil {
			r.t.Fatal(err)
		}
		a.events = append(a.events, es...)
	}
	a.terms = Terms(a.events, deaths, end)
	a.maxMov, a.overlaps = MaxOverlap(a.terms)
	a.records = r.records()
	movers := a.terms
	if chaosShards() > 1 {
		// Sharded, the shard owners move (under their shards' epochs);
		// the traffic cop's terms still time the takeovers.
		a.shardTerms = ShardTerms(a.events, deaths, end)
		a.maxMov, a.overlaps = MaxShardOverlap(a.shardTerms)
		movers = append(append([]Term(nil), a.terms...), a.shardTerms...)
	}
	a.x = Summarise(r.scheduled(), a.records, movers)
	a.lease = r.poll.History()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	depth := -1
	if len(a.x.Missing) > 0 {
		if p, err := r.sc.Queue.NewQueueClient(queue.DefaultQueue).GetProperties(ctx, nil); err == nil && p.ApproximateMessagesCount != nil {
			depth = int(*p.ApproximateMessagesCount)
		}
	}
	// Dead letters by run id, to tell a task set aside from one lost.
	dead := map[string]string{}
	if len(a.x.Missing) > 0 {
		if ds, err := r.cl.DeadLetters().List(ctx); err == nil {
			for _, d := range ds {
				dead[d.RunID] = d.Reason
			}
		}
	}
	var logs [][]byte
	if len(a.x.Missing) > 0 {
		for _, name := range r.f.Names() {
			if b, err := os.ReadFile(filepath.Join(r.dir, name+".log")); err == nil {
				logs = append(logs, b)
			}
		}
	}
	var noTrace []string
	defer func() {
		if len(noTrace) > 0 {
			r.note("dropped by the emulator: %d tasks acknowledged (or due) within the unsaved window before an Azurite SIGKILL of which no trace is left: %s", len(noTrace), strings.Join(head(noTrace, 40), " "))
		}
	}()
	for _, id := range a.x.Missing {
		st, err := r.cl.Status(ctx, id)
		trace := err == nil
		if !trace && r.inUnsavedWindow(id) {
			a.dropped = append(a.dropped, id)
			noTrace = append(noTrace, id)
			continue
		}
		// Moved (the queue acknowledged its message, the row was deleted and
		// the run marked queued), never set aside, and no consumer ever
		// logged acknowledging it: the message vanished inside Azurite. A
		// consumer deletes a message only after running it (an execution
		// record), or after logging why (duplicate, cancelled, set aside).
		if trace && st.Pending == nil && st.Run != nil && st.Run.State == runs.Queued && r.azuriteKilled() {
			_, setAside := dead[id]
			if !setAside && !logsMention(logs, id) {
				a.dropped = append(a.dropped, id)
				r.note("dropped by the emulator: %s, marked queued at %s; no consumer ever received its message and the work queue holds %d messages", id, st.Run.Updated.Format("15:04:05.000"), depth)
				continue
			}
		}
		a.lost = append(a.lost, id)
		if err == nil {
			detail := ""
			if st.Run != nil {
				detail = fmt.Sprintf(", run record updated %s, generation %d, attempts %d", st.Run.Updated.Format("15:04:05.000"), st.Run.Generation, st.Run.Attempts)
			}
			if reason, ok := dead[id]; ok {
				detail += "; set aside to the poison queue: " + reason
			}
			r.note("never ran: %s, state %s%s; work queue depth at the end %d", id, st.State(), detail, depth)
		} else if len(a.lost) <= 20 {
			r.note("never ran: %s, no trace in storage (%v)", id, err)
		}
	}
	return a
}

// outage is a time storage was down: from the fault to the moment it
// answered again.
type outage struct {
	at, back time.Time
}

// azuriteKilled reports whether the scenario SIGKILLed Azurite.
func (r *run) azuriteKilled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.kills) > 0
}

// logsMention reports whether a worker log names run id.
func logsMention(logs [][]byte, id string) bool {
	needle := []byte(`"run":"` + id + `"`)
	for _, b := range logs {
		if bytes.Contains(b, needle) {
			return true
		}
	}
	return false
}

// inUnsavedWindow reports whether task id was acknowledged, or came due
// (and so was moved), within the unsaved window before a SIGKILL of
// Azurite. An acknowledgement that arrived during the outage was for a
// write made before the kill (the call's retries outlived it).
func (r *run) inUnsavedWindow(id string) bool {
	r.mu.Lock()
	ack, due := r.acks[id], r.dues[id]
	r.mu.Unlock()
	return r.inKillWindow(ack) || r.inKillWindow(due)
}

// inKillWindow reports whether t lies within the unsaved window before a
// SIGKILL of Azurite, or during the outage that followed.
func (r *run) inKillWindow(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range r.kills {
		if !t.IsZero() && !t.Before(k.at.Add(-unsavedWindow)) && !t.After(k.back.Add(leasePoll)) {
			return true
		}
	}
	return false
}

// report fills the common fields of res from a, applies the checks every
// scenario shares (nothing lost, at most maxMovers movers at once, sound
// evidence), and records the row.
func (r *run) report(a *analysis, res Result, maxMovers int) Result {
	r.t.Helper()
	if r.afterAnalysis != nil {
		r.afterAnalysis(a)
	}
	res.Test = r.t.Name()
	res.Scenario = r.scenario
	res.Short = r.short
	res.When = time.Now().UTC().Round(time.Second)
	res.Workers = len(r.f.Names())
	res.Tasks = a.x.Tasks
	res.Executed = a.x.Executed
	res.Lost = len(a.lost)
	res.EmulatorDropped = len(a.dropped)
	res.Duplicates = a.x.Duplicates
	res.DuplicatedTasks = a.x.DuplicatedTasks
	res.MaxMovers = a.maxMov
	res.Terms = len(a.terms)
	var ov time.Duration
	for _, o := range a.overlaps {
		ov += o.Duration
		r.note("terms overlapped by %s: %s and %s", round(o.Duration), o.A, o.B)
	}
	res.Overlap = Duration(ov)
	r.mu.Lock()
	res.Notes = append(res.Notes, r.notes...)
	r.mu.Unlock()
	res.Elapsed = Duration(time.Since(r.start))

	ok := true
	fail := func(format string, args ...any) {
		ok = false
		r.t.Errorf(format, args...)
	}
	if res.Lost > 0 {
		fail("%d of %d tasks lost: %v", res.Lost, res.Tasks, head(a.lost, 20))
	}
	if a.maxMov > maxMovers {
		fail("%d instances held control at once (allowed %d)", a.maxMov, maxMovers)
	}
	if a.x.BeforeTerm > 0 {
		fail("%d executions started before their generation's term began", a.x.BeforeTerm)
	}
	if len(a.x.UnknownGeneration) > 0 {
		fail("executions carry generations no logged term has: %v", a.x.UnknownGeneration)
	}
	r.mu.Lock()
	unexpected := r.unexpected
	r.mu.Unlock()
	if len(unexpected) > 0 {
		fail("workers exited on their own: %v", unexpected)
	}
	if a.x.Unexpected > 0 {
		fail("%d executions of ids never scheduled", a.x.Unexpected)
	}
	if r.t.Failed() {
		ok = false
	}
	res.Passed = ok
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := WriteTable(ctx, r.sc, res); err != nil {
		r.t.Errorf("results table: %v", err)
	}
	collect(res)
	b, _ := json.MarshalIndent(res, "", "  ")
	r.t.Logf("result:\n%s", b)
	for _, term := range a.terms {
		r.t.Logf("term %s", term)
	}
	return res
}

// takeoverAfter returns the first term begun after at by a worker other
// than not, and how long after at it began.
func takeoverAfter(a *analysis, at time.Time, not string) (Term, time.Duration, bool) {
	t, ok := FirstTermAfter(a.terms, at, not)
	if !ok {
		return t, 0, false
	}
	return t, t.Start.Sub(at), true
}

// firstRunOfGeneration returns the first execution moved under generation
// gen or later that started after at.
func firstRunOfGeneration(a *analysis, at time.Time, gen int64) (fleet.Record, bool) {
	return FirstStartAfter(a.records, at, func(x fleet.Record) bool { return x.Generation >= gen })
}

func head(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ids returns n ids prefix0000...
func ids(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, from+i)
	}
	return out
}
