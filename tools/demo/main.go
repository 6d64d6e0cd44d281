// Command demo is `make demo`: it starts a private Azurite, a local HTTP
// server with four cities' calendar feeds, and three leasecron workers, then
// schedules real work and shows it flow — who leads, tasks running on
// different workers, the blackboard spreading calendar merges, and a
// handover when the leader is stopped. Ctrl-C stops everything it started.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/leasecron/leasecron/blackboard/calendar"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

var cities = []string{"westlafcals", "networksierra", "localist", "aroundfred"}

func main() {
	duration := flag.Duration("duration", 0, "stop by itself after this long (0: run until Ctrl-C)")
	handover := flag.Duration("handover", 45*time.Second, "stop the leader after this long to show a handover (0: never)")
	interval := flag.Duration("interval", 20*time.Second, "blackboard interval of each city")
	dashAddr := flag.String("dashboard", "127.0.0.1:8090", "address of the web dashboard (a free port if taken)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *handover, *interval, *dashAddr); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, handover, interval time.Duration, dashAddr string) error {
	root, err := proc.ModuleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "leasecron-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The cities' feeds, served locally.
	feeds := http.FileServer(http.Dir(filepath.Join(root, "blackboard", "calendar", "testdata")))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	// Real feeds take a while to fetch; so do these, so that while one
	// worker merges a city the others claim the rest.
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400*time.Millisecond + rand.N(800*time.Millisecond))
		feeds.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: slow, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	feedBase := "http://" + ln.Addr().String() + "/"

	// The dashboard's address first: the port is taken now and answers
	// "starting" until the fleet is up.
	dash, err := newDemoDashboard(dashAddr)
	if err != nil {
		return err
	}
	defer dash.Close()
	say("dashboard: %s  (open it in a browser; it shows this fleet live)", dash.URL)

	say("starting Azurite and three workers (logs in %s)", dir)
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Workers: 3, Config: map[string]any{
		"log": map[string]any{"level": "info"},
		"handlers": map[string]any{
			"cities": map[string]any{"kind": "calendar", "timeout": "30s"},
		},
		"blackboard": map[string]any{"cycle": "2s"},
		// Counters every 5 s, so the dashboard's figures move.
		"worker": map[string]any{"counters_every": "5s"},
	}})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping workers and Azurite")
		f.Stop()
		say("stopped; bye")
	}()
	if err := dash.Serve(f); err != nil {
		return err
	}
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	go watchWorkers(wctx, f, dir)
	leader, err := f.WaitLeader(wctx, "")
	wcancel()
	if err != nil {
		return err
	}
	say("%s took the lease (generation %d)", leader.Holder, leader.Generation)

	for i, c := range cities {
		// Each city merges its own feed and a neighbour's; they share
		// events, which the merge de-duplicates.
		payload := fmt.Sprintf(`{"feeds":[%q,%q]}`, feedBase+c+".ics", feedBase+cities[(i+1)%len(cities)]+".ics")
		if _, stderr, err := f.CLI(ctx, "blackboard", "add", c, "--every", interval.String(), "--type", "cities", payload); err != nil {
			return fmt.Errorf("blackboard add %s: %w %s", c, err, stderr)
		}
	}
	say("blackboard: added %s, each merged every %s by whichever worker claims it", strings.Join(cities, ", "), interval)

	// A spread of one-off tasks over the next minute, plus a recurring one.
	for i := 0; i < 40; i++ {
		in := fmt.Sprintf("%ds", 2+i*3/2)
		if _, stderr, err := f.CLI(ctx, "schedule", "--in", in, "--type", "rec", "--id", fmt.Sprintf("job-%02d", i), fmt.Sprintf(`{"job":%d}`, i)); err != nil {
			return fmt.Errorf("schedule: %w %s", err, stderr)
		}
	}
	if _, stderr, err := f.CLI(ctx, "schedule", "--every", "5s", "--type", "rec", "--id", "heartbeat"); err != nil {
		return fmt.Errorf("schedule: %w %s", err, stderr)
	}
	say("scheduled 40 one-off tasks over the next minute and a recurring 'heartbeat' every 5s")
	if err := scheduleOverAPI(ctx, dash); err != nil {
		return err
	}

	// One set of clients for the dashboard's reads of the merged calendars.
	sc, err := storage.New(storage.Config{ConnectionString: f.Azurite.ConnectionString()})
	if err != nil {
		return err
	}
	start := time.Now()
	handedOver := false
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if handover > 0 && !handedOver && time.Since(start) > handover {
			handedOver = true
			h, err := f.Leader(ctx)
			if err == nil && h.Held() {
				say(">>> stopping the leader %s (SIGTERM) to show a handover", h.Holder)
				f.Signal(h.Holder, syscall.SIGTERM)
				stoppedAt := time.Now()
				if nh, err := f.WaitLeader(ctx, h.Holder); err == nil {
					say(">>> %s took over after %s (generation %d); restarting a worker", nh.Holder, time.Since(stoppedAt).Round(time.Millisecond), nh.Generation)
					if name, err := f.StartWorker(); err == nil {
						say(">>> started %s", name)
					}
				}
			}
		}
		showFleet(ctx, f, sc)
	}
}

// watchWorkers reports a worker that exits during start-up, with the end
// of its log, so a broken configuration does not look like a hang.
func watchWorkers(ctx context.Context, f *fleet.Fleet, dir string) {
	for _, name := range f.Names() {
		go func() {
			select {
			case <-ctx.Done():
			case <-f.Worker(name).Done():
				b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
				if len(b) > 2000 {
					b = b[len(b)-2000:]
				}
				say("worker %s exited: %v\n%s", name, f.Worker(name).Err(), b)
			}
		}()
	}
}

func say(format string, a ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// showFleet prints the leader, recent task executions and the blackboard.
func showFleet(ctx context.Context, f *fleet.Fleet, sc *storage.Clients) {
	var b strings.Builder
	fmt.Fprintf(&b, "\n==== %s ", time.Now().Format("15:04:05"))
	if h, err := f.Leader(ctx); err == nil && h.Held() {
		fmt.Fprintf(&b, "leader %s (generation %d)", h.Holder, h.Generation)
	} else {
		fmt.Fprintf(&b, "no leader right now")
	}
	b.WriteString(" ====\n")
	rs, _ := f.Records()
	perWorker := map[string]int{}
	var recent []fleet.Record
	for _, r := range rs {
		perWorker[r.Worker]++
		if time.Since(r.At) < 3*time.Second {
			recent = append(recent, r)
		}
	}
	var ws []string
	for w, n := range perWorker {
		ws = append(ws, fmt.Sprintf("%s:%d", w, n))
	}
	sort.Strings(ws)
	fmt.Fprintf(&b, "tasks run so far: %d  (by worker %s)\n", len(rs), strings.Join(ws, " "))
	for _, r := range recent {
		fmt.Fprintf(&b, "  ran %-32s on %s, %4dms after due (moved by generation %d)\n", r.ID, r.Worker, r.At.Sub(r.Due).Milliseconds(), r.Generation)
	}
	if out, _, err := f.CLI(ctx, "blackboard", "--json"); err == nil {
		var rows []struct {
			Key       string    `json:"key"`
			State     string    `json:"state"`
			Start     time.Time `json:"start"`
			Stop      time.Time `json:"stop"`
			Running   bool      `json:"running"`
			Worker    string    `json:"worker"`
			Runs      int64     `json:"runs"`
			LastError string    `json:"last_error"`
		}
		if json.Unmarshal([]byte(out), &rows) == nil {
			b.WriteString("blackboard (calendar merges):\n")
			for _, r := range rows {
				fmt.Fprintf(&b, "  %-14s %-8s start %s  stop %s  running %-5v worker %-3s runs %d  %s %s\n", r.Key, r.State,
					hhmmss(r.Start), hhmmss(r.Stop), r.Running, r.Worker, r.Runs, summary(ctx, sc, r.Key), r.LastError)
			}
		}
	}
	if out, _, err := f.CLI(ctx, "stats", "--json"); err == nil {
		var st struct {
			Depth int `json:"queue_depth"`
			Due   int `json:"due_backlog"`
		}
		if json.Unmarshal([]byte(out), &st) == nil {
			fmt.Fprintf(&b, "queue depth %d, due backlog %d\n", st.Depth, st.Due)
		}
	}
	fmt.Print(b.String())
}

// summary reads the JSON summary the calendar handler wrote beside a
// city's merged calendar.
func summary(ctx context.Context, sc *storage.Clients, key string) string {
	_, name := calendar.BlobNames(key)
	resp, err := sc.Blob.NewContainerClient("leasecron").NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var sum calendar.Summary
	if json.NewDecoder(resp.Body).Decode(&sum) != nil {
		return ""
	}
	return fmt.Sprintf("-> %d events (%d duplicates merged)", sum.Events, sum.Duplicates)
}

func hhmmss(t time.Time) string {
	if t.IsZero() {
		return "--:--:--"
	}
	return t.Local().Format("15:04:05")
}

// scheduleOverAPI schedules a few tasks through the HTTP API the demo
// serves beside the dashboard, as another service would, and prints the
// curl command that does the same.
func scheduleOverAPI(ctx context.Context, dash *demoDashboard) error {
	base := strings.TrimSuffix(dash.URL, "/")
	var tasks []map[string]any
	for i := range 5 {
		tasks = append(tasks, map[string]any{"id": fmt.Sprintf("api-%d", i), "type": "rec", "in": fmt.Sprintf("%ds", 5+i*4), "payload": map[string]any{"via": "api", "n": i}})
	}
	body, err := json.Marshal(map[string]any{"tasks": tasks})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/tasks:many", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+dash.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the HTTP API: %w", err)
	}
	defer resp.Body.Close()
	var out struct {
		Scheduled int `json:"scheduled"`
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the HTTP API answered %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("the HTTP API's answer: %w", err)
	}
	say("scheduled %d more (api-0..api-4) through the HTTP API; try it yourself:", out.Scheduled)
	say("  curl -s -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"type\":\"rec\",\"in\":\"5s\"}' %s/api/v1/tasks", dash.Token, base)
	return nil
}
