//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/azurite"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// badInputConfig adds two handlers to the fleet: noisy prints 5 MB, hang
// never exits (its timeout is 2 s).
func badInputConfig() map[string]any {
	return map[string]any{
		"handlers": map[string]any{
			"noisy": map[string]any{"exec": []string{"/bin/sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo done >&2"}},
			"hang":  map[string]any{"exec": []string{"/bin/sh", "-c", "sleep 100000"}, "timeout": "2s"},
		},
	}
}

// badCase is one bad input: send it, then observe the outcome.
type badCase struct {
	input, expected string
	// send injects the input; it may return an observation at once (a
	// refused call) with done set.
	send func(ctx context.Context) (observed string, ok, done bool)
	// observe, for inputs whose outcome comes later, reports the
	// outcome once it is there (done) or the state so far.
	observe func(ctx context.Context) (observed string, ok, done bool)
	// after, when set, checks the outcome again on the run's evidence.
	after func(a *analysis, observed string, ok bool) (string, bool)
}

// TestBadInput is scenario 6: bad input of many kinds against a running
// fleet while good tasks run alongside. Each input must get a clear error
// or be set aside with a reason; every good task must still run; no
// worker may exit.
func TestBadInput(t *testing.T) {
	r := newRun(t, "6 bad input", false, 2, badInputConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r.waitLeader(ctx, "")
	base := time.Now().Add(3 * time.Second)
	var good []leasecron.Item
	for _, id := range ids("ok", 0, 400) {
		good = append(good, leasecron.Item{ID: id, Type: "rec", Due: base.Add(time.Duration(rand.Int64N(int64(60 * time.Second))))})
	}
	if failed := r.schedule(ctx, good, 16); len(failed) > 0 {
		t.Fatalf("%d good tasks not scheduled", len(failed))
	}

	cases := badCases(t, r)
	results := make([]BadInput, len(cases))
	pending := map[int]bool{}
	for i, c := range cases {
		results[i] = BadInput{Input: c.input, Expected: c.expected}
		obs, ok, done := c.send(ctx)
		results[i].Observed, results[i].OK = obs, ok
		if !done {
			pending[i] = true
		}
	}
	deadline := time.Now().Add(3 * time.Minute)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for i := range pending {
			obs, ok, done := cases[i].observe(ctx)
			results[i].Observed, results[i].OK = obs, ok
			if done {
				delete(pending, i)
			}
		}
		time.Sleep(time.Second)
	}
	for i := range pending {
		results[i].Observed = "no outcome within 3 minutes: " + results[i].Observed
		results[i].OK = false
	}
	for i, x := range results {
		if !x.OK && cases[i].after == nil {
			t.Errorf("bad input %q: expected %s; observed %s", x.Input, x.Expected, x.Observed)
		}
	}

	r.waitExecuted(2 * time.Minute)
	a := r.stopAndAnalyse()
	for i, c := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if c.after != nil {
				results[i].Observed, results[i].OK = c.after(a, results[i].Observed, results[i].OK)
				if !results[i].OK {
					t.Errorf("bad input %q: expected %s; observed %s", results[i].Input, results[i].Expected, results[i].Observed)
				}
			}
		})
	}
	collectedMu.Lock()
	badInputs = results
	collectedMu.Unlock()
	kept := 0
	for _, x := range results {
		if x.OK {
			kept++
		}
	}
	res := Result{RecoveryRule: "not applicable (no fault: bad input must not disturb the fleet)"}
	res.Notes = append(res.Notes, fmt.Sprintf("%d kinds of bad input, %d with the expected outcome; %d good tasks scheduled alongside", len(results), kept, len(good)))
	r.report(a, res, 1)
}

// errCase expects the call to fail with an error wrapping want and whose
// text contains every word of words.
func errCase(input, expected string, call func(ctx context.Context) error, want error, words ...string) badCase {
	return badCase{input: input, expected: expected, send: func(ctx context.Context) (string, bool, bool) {
		err := call(ctx)
		if err == nil {
			return "accepted", false, true
		}
		ok := want == nil || errors.Is(err, want)
		for _, w := range words {
			ok = ok && strings.Contains(err.Error(), w)
		}
		return "error: " + err.Error(), ok, true
	}}
}

// cliCase expects the CLI to exit with code and print every word to stderr.
func cliCase(r *run, input, expected string, env []string, code int, args []string, words ...string) badCase {
	return badCase{input: input, expected: expected, send: func(ctx context.Context) (string, bool, bool) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		start := time.Now()
		_, stderr, err := proc.Run(cctx, r.f.Bin, append(r.f.Env(), env...), nil, args...)
		got := 0
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			got = xe.ExitCode()
		} else if err != nil {
			return "did not run: " + err.Error(), false, true
		}
		msg := lastLine(stderr)
		ok := got == code
		for _, w := range words {
			ok = ok && strings.Contains(stderr, w)
		}
		return fmt.Sprintf("exit %d after %s: %s", got, round(time.Since(start)), msg), ok, true
	}}
}

// retryCase runs a worker for 8 s and expects it still running then (it
// is stopped), its log holding every one of words.
func retryCase(r *run, input, expected string, env []string, words ...string) badCase {
	return badCase{input: input, expected: expected, send: func(ctx context.Context) (string, bool, bool) {
		const runFor = 8 * time.Second
		cctx, cancel := context.WithTimeout(ctx, runFor)
		defer cancel()
		start := time.Now()
		_, stderr, err := proc.Run(cctx, r.f.Bin, append(r.f.Env(), env...), nil, "worker")
		up := time.Since(start)
		if err == nil {
			return fmt.Sprintf("exited 0 after %s", round(up)), false, true
		}
		var xe *exec.ExitError
		if errors.As(err, &xe) && up < runFor-time.Second {
			return fmt.Sprintf("exited %d after %s: %s", xe.ExitCode(), round(up), lastLine(stderr)), false, true
		}
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(stderr, w)
		}
		return fmt.Sprintf("still retrying when stopped after %s (%d retry lines): %s", round(up), strings.Count(stderr, words[0]), lastLine(stderr)), ok, true
	}}
}

// lastLine returns the error line of the CLI's stderr (not its JSON logs).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "leasecron:") {
			rest := strings.Join(lines[i:], " ")
			if len(rest) > 300 {
				rest = rest[:300] + "…"
			}
			return rest
		}
	}
	if len(lines) > 0 {
		return lines[len(lines)-1]
	}
	return ""
}

// deadCase expects a dead letter matching match, whose reason contains
// every word.
func deadCase(r *run, input, expected string, send func(ctx context.Context) error, match func(queue.DeadLetter) bool, words ...string) badCase {
	return badCase{input: input, expected: expected,
		send: func(ctx context.Context) (string, bool, bool) {
			if err := send(ctx); err != nil {
				return "could not inject: " + err.Error(), false, true
			}
			return "injected", false, false
		},
		observe: func(ctx context.Context) (string, bool, bool) {
			ds, err := r.cl.DeadLetters().List(ctx)
			if err != nil {
				return "dead letters: " + err.Error(), false, false
			}
			for _, d := range ds {
				if match(d) {
					ok := true
					for _, w := range words {
						ok = ok && strings.Contains(d.Reason, w)
					}
					return "set aside: " + d.Reason, ok, true
				}
			}
			return "not set aside yet", false, false
		}}
}

// rowCase inserts a raw row and expects the mover to set it aside.
func rowCase(r *run, input, expected, rowKey string, props map[string]any, words ...string) badCase {
	send := func(ctx context.Context) error {
		row := map[string]any{"PartitionKey": "00", "RowKey": rowKey}
		for k, v := range props {
			row[k] = v
		}
		b, _ := json.Marshal(row)
		_, err := r.sc.Table.NewClient("ScheduledItems").AddEntity(ctx, b, nil)
		return err
	}
	match := func(d queue.DeadLetter) bool { return strings.Contains(d.Reason, rowKey) }
	return deadCase(r, input, expected, send, match, words...)
}

// messageCase puts a raw message on the work queue and expects it set aside.
func messageCase(r *run, input, expected, text string, words ...string) badCase {
	send := func(ctx context.Context) error {
		_, err := r.sc.Queue.NewQueueClient(queue.DefaultQueue).EnqueueMessage(ctx, text, nil)
		return err
	}
	match := func(d queue.DeadLetter) bool { return d.Body == text }
	return deadCase(r, input, expected, send, match, words...)
}

// workerConfigCase runs a worker with a configuration file and expects it
// to refuse to start (exit 1) naming the problem.
func workerConfigCase(r *run, input, yaml string, words ...string) badCase {
	file := filepath.Join(r.dir, fmt.Sprintf("bad-%d.yaml", rand.Int()))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return cliCase(r, input, "the worker refuses to start: exit 1 naming "+strings.Join(words, ", "),
		[]string{"LEASECRON_CONFIG=" + file}, 1, []string{"worker"}, words...)
}

// scheduleSend is a case's send that schedules it through the API.
func scheduleSend(r *run, it leasecron.Item) func(ctx context.Context) (string, bool, bool) {
	return func(ctx context.Context) (string, bool, bool) {
		if _, err := r.cl.Schedule(ctx, it, nil); err != nil {
			return "could not schedule: " + err.Error(), false, true
		}
		return "scheduled", false, false
	}
}

// misroutedCase schedules a task of a type no worker has a handler for: it
// goes back to the queue without using an attempt, again and again, for
// a worker that has the handler (README, worker pools), and the workers
// count it misrouted. It never runs and never dies.
func misroutedCase(r *run, it leasecron.Item) badCase {
	return badCase{input: "task of a type no worker handles",
		expected: "put back without using an attempt, counted misrouted; never run, never set aside",
		send:     scheduleSend(r, it),
		observe: func(ctx context.Context) (string, bool, bool) {
			st, err := r.cl.Status(ctx, it.ID)
			if err != nil {
				return "status: " + err.Error(), false, false
			}
			if st.Run != nil && (st.Run.Attempts > 0 || st.Run.State.Finished()) {
				return fmt.Sprintf("%s after %d attempts: %s", st.Run.State, st.Run.Attempts, st.Run.LastError), false, true
			}
			s, err := r.cl.Stats(ctx)
			if err != nil || s.Counters == nil {
				return fmt.Sprintf("state %s; counters: %v", st.State(), err), false, false
			}
			n := s.Counters.ByType[it.Type].Misrouted
			obs := fmt.Sprintf("state %s, no attempt; misrouted %d times (counters flushed so far)", st.State(), n)
			return obs, n > 0, n > 0
		}}
}

// runCase schedules a task through the API and waits for its run to reach
// a final state, then checks it.
func runCase(r *run, input, expected string, it leasecron.Item, check func(leasecron.Status) (string, bool)) badCase {
	return badCase{input: input, expected: expected,
		// Scheduled apart from the good tasks: these handlers record no
		// executions; their outcome is read from the run record.
		send: scheduleSend(r, it),
		observe: func(ctx context.Context) (string, bool, bool) {
			st, err := r.cl.Status(ctx, it.ID)
			if err != nil {
				return "status: " + err.Error(), false, false
			}
			if st.Run == nil || (st.Run.State != "succeeded" && st.Run.State != "dead") {
				return "state " + st.State(), false, false
			}
			obs, ok := check(st)
			return obs, ok, true
		}}
}

func badCases(t *testing.T, r *run) []badCase {
	ticks := func(d time.Duration) string { return fmt.Sprintf("%019d", netTicks(time.Now().Add(d))) }
	var dupOnce sync.Once
	envelope, _ := json.Marshal(queue.Envelope{V: queue.EnvelopeVersion, ID: "trunc-1", Type: "rec", Payload: `{"a":1}`, Due: time.Now()})
	noID, _ := json.Marshal(map[string]any{"v": queue.EnvelopeVersion, "type": "rec"})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	b, q, tb := r.f.Azurite.Ports()
	wrongKey := strings.Replace(azurite.ConnectionString("127.0.0.1", b, q, tb), "AccountKey=Eby8", "AccountKey=AAAA", 1)
	return []badCase{
		cliCase(r, "schedule --at \"next tuesday\" (unparsable time)", "usage error (exit 2) asking for RFC 3339; nothing written",
			nil, 2, []string{"schedule", "--at", "next tuesday", "--id", "bad-at", "x"}, "RFC 3339"),
		cliCase(r, "schedule --in forever (unparsable delay)", "usage error (exit 2) asking for a duration",
			nil, 2, []string{"schedule", "--in", "forever", "x"}, "not a duration"),
		cliCase(r, "schedule --cron \"61 * * * *\" (invalid cron)", "usage error (exit 2) listing the accepted forms",
			nil, 2, []string{"schedule", "--cron", "61 * * * *", "--id", "bad-cron"}, "invalid cron expression"),
		cliCase(r, "schedule --every 0s (interval below the minimum)", "usage error (exit 2) naming the 1 s minimum",
			nil, 2, []string{"schedule", "--every", "0s", "--id", "bad-every"}, "minimum"),
		errCase("Go API: a 2 MiB payload (limit 1 MiB)", "ErrPayloadTooLarge before anything is written",
			func(ctx context.Context) error {
				_, err := r.cl.Schedule(ctx, leasecron.Item{ID: "big-1", Type: "rec", Payload: strings.Repeat("x", 2<<20), Due: time.Now()}, nil)
				return err
			}, schedule.ErrPayloadTooLarge),
		errCase("Go API: task id \"bad/id#1\" (forbidden characters)", "ErrInvalid naming the allowed characters",
			func(ctx context.Context) error {
				_, err := r.cl.Schedule(ctx, leasecron.Item{ID: "bad/id#1", Type: "rec", Due: time.Now()}, nil)
				return err
			}, schedule.ErrInvalid, "task id"),
		cliCase(r, "schedule --type \"bad type\" (invalid type name)", "usage error (exit 2) describing valid type names",
			nil, 2, []string{"schedule", "--type", "bad type", "x"}, "task type"),
		withAfter(errCase("Go API: the same id scheduled twice", "ErrAlreadyScheduled for the second; the task runs once",
			func(ctx context.Context) error {
				var first error
				dupOnce.Do(func() {
					_, first = r.cl.Schedule(ctx, leasecron.Item{ID: "dup-1", Type: "rec", Due: time.Now().Add(5 * time.Second)}, nil)
					if first == nil {
						r.ack("dup-1", time.Now().Add(5*time.Second))
					}
				})
				if first != nil {
					return fmt.Errorf("first schedule failed: %w", first)
				}
				_, err := r.cl.Schedule(ctx, leasecron.Item{ID: "dup-1", Type: "rec", Due: time.Now()}, nil)
				return err
			}, leasecron.ErrAlreadyScheduled), func(a *analysis, obs string, ok bool) (string, bool) {
			n := 0
			for _, x := range a.records {
				if x.ID == "dup-1" && x.Phase == "start" {
					n++
				}
			}
			return fmt.Sprintf("%s; ran %d time(s)", obs, n), ok && n == 1
		}),
		misroutedCase(r, leasecron.Item{ID: "unknown-type-1", Type: "nosuchtype", MaxAttempts: 2, Due: time.Now()}),
		rowCase(r, "row inserted directly with Message as a number", "set aside to the poison queue with the reason; row removed",
			ticks(0)+"_rownum", map[string]any{"Message": 42, "Type": "rec"}, "malformed row", "Message"),
		rowCase(r, "row inserted directly without a Message property", "set aside with the reason",
			ticks(0)+"_rownomsg", map[string]any{"Type": "rec"}, "malformed row", "no Message"),
		rowCase(r, "row inserted directly with Recurrence \"every blue moon\"", "set aside with the reason",
			ticks(0)+"_rowrec", map[string]any{"Message": "", "Type": "rec", "Recurrence": "every blue moon"}, "malformed row", "recurrence"),
		rowCase(r, "row inserted directly with Type \"bad type!\"", "set aside with the reason",
			ticks(0)+"_rowtype", map[string]any{"Message": "", "Type": "bad type!"}, "malformed row", "task type"),
		rowCase(r, "row inserted directly with RowKey \"zzz-not-a-time\" (never due)", "found by the sweep (≤ 1 min) and set aside",
			"zzz-not-a-time", map[string]any{"Message": "", "Type": "rec"}, "malformed row"),
		messageCase(r, "queue message that is not JSON", "set aside to the poison queue with the reason; message removed",
			"this is not json {", "envelope"),
		messageCase(r, "queue message: a valid envelope truncated in half", "set aside with the reason",
			string(envelope[:len(envelope)/2]), "envelope"),
		messageCase(r, "queue message: JSON envelope without an id", "set aside with the reason",
			string(noID), "id"),
		workerConfigCase(r, "config with an unknown key (lease.duraton)", "lease:\n  duraton: 20s\n", "unknown key \"lease.duraton\""),
		workerConfigCase(r, "config with a bad value (lease.duration: 5s)", "lease:\n  duration: 5s\n", "lease.duration", "15s"),
		workerConfigCase(r, "config with an invalid resource name (names.queue: Bad_Queue)", "names:\n  queue: Bad_Queue\n", "names.queue", "lower-case"),
		cliCase(r, "environment variable LEASECRON_LEASE_DURATON (unknown)", "the worker refuses to start: exit 1 naming the variable",
			[]string{"LEASECRON_LEASE_DURATON=20s"}, 1, []string{"worker"}, "LEASECRON_LEASE_DURATON"),
		cliCase(r, "wrong account key in the connection string", "the worker refuses to start: exit 1, authentication failed",
			[]string{"LEASECRON_STORAGE_CONNECTION_STRING=" + wrongKey}, 1, []string{"worker"}, "authentication failed"),
		cliCase(r, "malformed connection string", "exit 1 explaining the expected form, without echoing secrets",
			[]string{"LEASECRON_STORAGE_CONNECTION_STRING=garbage"}, 1, []string{"worker"}, "connection string"),
		cliCase(r, "no connection string or account", "exit 1 naming the settings to use",
			[]string{"LEASECRON_STORAGE_CONNECTION_STRING=", "AZURE_STORAGE_CONNECTION_STRING=", "LEASECRON_CONFIG=" + emptyConfig(t, r)}, 1, []string{"worker"}, "storage.connection_string"),
		retryCase(r, "storage unreachable at start-up (nothing listens on the port)", "the worker stays up and retries with backoff (an account that is down or busy must not crash a fleet), each step logged with the endpoint and the connection error",
			[]string{"LEASECRON_STORAGE_CONNECTION_STRING=" + azurite.ConnectionString("127.0.0.1", deadPort, deadPort, deadPort)},
			"storage not ready at start-up; retrying", fmt.Sprintf("127.0.0.1:%d", deadPort), "connection refused"),
		runCase(r, "handler that prints 5 MB", "the run succeeds; its recorded output tail is bounded (4 KiB)",
			leasecron.Item{ID: "noisy-1", Type: "noisy", Due: time.Now()},
			func(st leasecron.Status) (string, bool) {
				n := len(st.Run.OutputTail)
				return fmt.Sprintf("%s; output tail %d bytes", st.Run.State, n), st.Run.State == "succeeded" && n > 0 && n <= 4<<10
			}),
		runCase(r, "handler that never exits (timeout 2 s)", "each attempt is cut at the timeout; dead after its 2 attempts",
			leasecron.Item{ID: "hang-1", Type: "hang", MaxAttempts: 2, Due: time.Now()},
			func(st leasecron.Status) (string, bool) {
				return fmt.Sprintf("%s after %d attempts: %s", st.Run.State, st.Run.Attempts, st.Run.LastError),
					st.Run.State == "dead" && st.Run.Attempts == 2 && strings.Contains(st.Run.LastError, "timed out")
			}),
	}
}

func withAfter(c badCase, after func(a *analysis, observed string, ok bool) (string, bool)) badCase {
	c.after = after
	return c
}

// emptyConfig writes a configuration with no storage settings.
func emptyConfig(t *testing.T, r *run) string {
	file := filepath.Join(r.dir, "empty.yaml")
	if err := os.WriteFile(file, []byte("log:\n  level: info\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}
