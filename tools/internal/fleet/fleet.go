// Package fleet runs leasecron the way users do — several worker
// processes of the built binary against one Azurite — for the end-to-end
// tests, the reliability suite, the benchmarks and the demo. Handlers of the
// "rec" family append one line per execution to a shared record file, so
// tests check invariants from recorded evidence.
package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/tools/internal/proc"
	"github.com/leasecron/leasecron/trafficcop"
)

// Options configure Start.
type Options struct {
	// Dir holds the config, logs and record file. Required.
	Dir string
	// Workers is how many worker processes to start (named w1, w2, ...).
	Workers int
	// Config is merged over the fleet's base configuration (short lease,
	// fast polling, the rec handlers) and written as YAML.
	Config map[string]any
	// Env is added to every worker's environment.
	Env []string
	// Azurite, when set, is used instead of starting a fresh one.
	Azurite *azurite.Server
	// ConnectionString, when set, is the account the workers use instead
	// of an Azurite (none is started; Fleet.Azurite stays nil). It is
	// passed in the workers' environment, never written to a file.
	ConnectionString string
}

// Fleet is a running set of workers.
type Fleet struct {
	Dir        string
	Bin        string
	ConfigFile string
	RecordFile string
	Azurite    *azurite.Server
	ownAzurite bool
	opts       Options

	mu      sync.Mutex
	workers map[string]*proc.Process
	next    int
}

// BaseConfig is the fleet's configuration before Options.Config: a 15 s
// lease with 1 s polls and record handlers.
func BaseConfig(recordFile string) map[string]any {
	rec := func(extra string) []string {
		return []string{"/bin/sh", "-c", `printf '%s %s %s %s %s start\n' "$LEASECRON_TASK_ID" "$LEASECRON_DUE" "$(date +%s%N)" "$FLEET_WORKER" "$LEASECRON_GENERATION" >> "$FLEET_RECORD"` + extra}
	}
	return map[string]any{
		"lease":  map[string]any{"duration": "15s", "poll_every": "1s"},
		"mover":  map[string]any{"poll_every": "1s"},
		"worker": map[string]any{"poll_max": "500ms", "shutdown_grace": "10s", "visibility_timeout": "30s"},
		"retry":  map[string]any{"backoff_base": "1s", "backoff_max": "5s"},
		"blackboard": map[string]any{
			"cycle": "1s",
		},
		"handlers": map[string]any{
			// rec records one line per execution.
			"rec": map[string]any{"exec": rec("")},
			// recslow records start and end around a sleep of $payload seconds
			// (default 1).
			"recslow": map[string]any{"exec": rec(`; s=$(cat); sleep "${s:-1}"; printf '%s %s %s %s %s end\n' "$LEASECRON_TASK_ID" "$LEASECRON_DUE" "$(date +%s%N)" "$FLEET_WORKER" "$LEASECRON_GENERATION" >> "$FLEET_RECORD"`)},
			// fail always fails.
			"fail": map[string]any{"exec": []string{"/bin/sh", "-c", "echo failing on purpose >&2; exit 7"}},
		},
	}
}

// Start starts Azurite (unless given) and the workers.
func Start(ctx context.Context, o Options) (*Fleet, error) {
	if o.Dir == "" {
		return nil, errors.New("fleet: Options.Dir is required")
	}
	bin, err := proc.Binary()
	if err != nil {
		return nil, err
	}
	f := &Fleet{Dir: o.Dir, Bin: bin, opts: o, workers: map[string]*proc.Process{}, Azurite: o.Azurite,
		RecordFile: filepath.Join(o.Dir, "records.txt"), ConfigFile: filepath.Join(o.Dir, "leasecron.yaml")}
	if f.Azurite == nil && o.ConnectionString == "" {
		if f.Azurite, err = azurite.Start(ctx, azurite.Options{Dir: filepath.Join(o.Dir, "azurite")}); err != nil {
			return nil, err
		}
		f.ownAzurite = true
	}
	cfg := BaseConfig(f.RecordFile)
	merge(cfg, o.Config)
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.ConfigFile, b, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(f.RecordFile, nil, 0o600); err != nil {
		return nil, err
	}
	for i := 0; i < o.Workers; i++ {
		if _, err := f.StartWorker(); err != nil {
			f.Stop()
			return nil, err
		}
	}
	return f, nil
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// Env is the environment of leasecron processes of this fleet.
func (f *Fleet) Env() []string {
	env := []string{
		"LEASECRON_STORAGE_CONNECTION_STRING=" + f.ConnectionString(),
		"LEASECRON_CONFIG=" + f.ConfigFile,
		"FLEET_RECORD=" + f.RecordFile,
	}
	return append(env, f.opts.Env...)
}

// StartWorker starts one more worker process, named w{n}.
func (f *Fleet) StartWorker(extraEnv ...string) (string, error) {
	return f.StartWorkerWith(f.Bin, extraEnv...)
}

// StartWorkerWith starts one more worker process of the binary bin (an
// earlier release, for upgrade tests), named w{n}.
func (f *Fleet) StartWorkerWith(bin string, extraEnv ...string) (string, error) {
	f.mu.Lock()
	f.next++
	name := fmt.Sprintf("w%d", f.next)
	f.mu.Unlock()
	env := append(f.Env(), "FLEET_WORKER="+name, "LEASECRON_WORKER_INSTANCE_ID="+name)
	env = append(env, extraEnv...)
	p, err := proc.Start(name, bin, []string{"worker"}, env, filepath.Join(f.Dir, name+".log"))
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.workers[name] = p
	f.mu.Unlock()
	return name, nil
}

// Worker returns a worker process by name.
func (f *Fleet) Worker(name string) *proc.Process {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.workers[name]
}

// Names returns the names of the workers started, sorted.
func (f *Fleet) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.workers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Signal sends sig to a worker (SIGKILL waits for the exit).
func (f *Fleet) Signal(name string, sig syscall.Signal) {
	p := f.Worker(name)
	if p == nil {
		return
	}
	if sig == syscall.SIGKILL {
		p.Kill()
		return
	}
	p.Signal(sig)
}

// Client returns a Go client for the fleet's account.
func (f *Fleet) Client() (*leasecron.Client, error) {
	return leasecron.NewClient(leasecron.ClientOptions{Storage: leasecron.Storage{ConnectionString: f.ConnectionString()}})
}

// ConnectionString is the account of the fleet's workers.
func (f *Fleet) ConnectionString() string {
	if f.opts.ConnectionString != "" {
		return f.opts.ConnectionString
	}
	return f.Azurite.ConnectionString()
}

// CLI runs the leasecron binary with args against the fleet.
func (f *Fleet) CLI(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return proc.Run(ctx, f.Bin, f.Env(), nil, args...)
}

// Leader returns the lease holder as the lease blob reports it ("" when
// nobody holds it).
func (f *Fleet) Leader(ctx context.Context) (trafficcop.HolderInfo, error) {
	c, err := f.Client()
	if err != nil {
		return trafficcop.HolderInfo{}, err
	}
	h, err := c.Leader(ctx)
	if err != nil {
		return h, err
	}
	return h, nil
}

// WaitLeader waits until some worker other than not holds the lease.
func (f *Fleet) WaitLeader(ctx context.Context, not string) (trafficcop.HolderInfo, error) {
	for {
		h, err := f.Leader(ctx)
		if err == nil && h.Held() && h.Holder != not {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return h, fmt.Errorf("no new leader: %w (last %+v, err %w)", ctx.Err(), h, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops every worker (SIGTERM, then SIGKILL after 20 s) and the
// Azurite the fleet started.
func (f *Fleet) Stop() {
	f.mu.Lock()
	ws := make([]*proc.Process, 0, len(f.workers))
	for _, p := range f.workers {
		ws = append(ws, p)
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Stop(20 * time.Second) }()
	}
	wg.Wait()
	if f.ownAzurite {
		_ = f.Azurite.Stop()
	}
}

// Record is one line of the record file.
type Record struct {
	ID         string
	Due        time.Time
	At         time.Time
	Worker     string
	Generation int64
	Phase      string // start or end
}

// Records reads the record file.
func (f *Fleet) Records() ([]Record, error) {
	return ReadRecords(f.RecordFile)
}

// ReadRecords parses a record file.
func ReadRecords(path string) ([]Record, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []Record
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 6 {
			continue // a line torn by a kill mid-write
		}
		due, _ := time.Parse(time.RFC3339Nano, fs[1])
		ns, _ := strconv.ParseInt(fs[2], 10, 64)
		gen, _ := strconv.ParseInt(fs[4], 10, 64)
		out = append(out, Record{ID: fs[0], Due: due, At: time.Unix(0, ns), Worker: fs[3], Generation: gen, Phase: fs[5]})
	}
	return out, sc.Err()
}

// Starts returns the start records grouped by task id.
func Starts(rs []Record) map[string][]Record { return byPhase(rs, "start") }

// Ends returns the end records (handlers that record one) by task id.
func Ends(rs []Record) map[string][]Record { return byPhase(rs, "end") }

// byPhase returns the records of one phase ("start" or "end") by task id.
func byPhase(rs []Record, phase string) map[string][]Record {
	m := map[string][]Record{}
	for _, r := range rs {
		if r.Phase == phase {
			m[r.ID] = append(m[r.ID], r)
		}
	}
	return m
}

// WaitRecords waits until every id in want has a start record, or ctx ends.
// It returns the ids still missing.
func (f *Fleet) WaitRecords(ctx context.Context, want []string) ([]string, error) {
	return f.waitPhase(ctx, want, "start")
}

// WaitEnds waits until every id in want has an end record (its handler
// finished), or ctx ends. It returns the ids still missing.
func (f *Fleet) WaitEnds(ctx context.Context, want []string) ([]string, error) {
	return f.waitPhase(ctx, want, "end")
}

func (f *Fleet) waitPhase(ctx context.Context, want []string, phase string) ([]string, error) {
	for {
		rs, err := f.Records()
		if err != nil {
			return nil, err
		}
		got := byPhase(rs, phase)
		var missing []string
		for _, id := range want {
			if len(got[id]) == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return missing, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Percentile returns the p-th percentile (0–100) of ds (nearest rank).
func Percentile(ds []time.Duration, p float64) time.Duration {
	if p > 0 && p < 1 {
		panic(fmt.Sprintf("fleet.Percentile(%v): p is a percentage from 0 to 100, not a fraction", p))
	}
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(float64(len(s))*p/100+0.999999) - 1
	if k < 0 {
		k = 0
	}
	if k >= len(s) {
		k = len(s) - 1
	}
	return s[k]
}
