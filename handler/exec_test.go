package handler

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

func mustExec(t *testing.T, opts ExecOptions) leasecrontype.Handler {
	t.Helper()
	h, err := Exec(opts)
	if err != nil {
		t.Fatalf("Exec(%+v): %v", opts, err)
	}
	return h
}

func sampleTask(payload string) leasecrontype.Task {
	return leasecrontype.Task{
		ID:         "task-1",
		Series:     "nightly",
		Type:       "report",
		Payload:    []byte(payload),
		Due:        time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("X", 3600)),
		Attempt:    2,
		Generation: 7,
	}
}

// countingWriter keeps the last write and counts the writes.
type countingWriter struct {
	got   string
	calls int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.got = string(p) // each run writes its tail once: keep the last
	w.calls++
	return len(p), nil
}

// capture returns a context whose leasecrontype.Output is recorded and a
// func reading what it got and how many writes that took.
func capture() (context.Context, func() (string, int)) {
	w := &countingWriter{}
	ctx := leasecrontype.WithOutputWriter(context.Background(), w)
	return ctx, func() (string, int) { return w.got, w.calls }
}

// tailOf returns the output tail an *ExecError or *HTTPError carries.
func tailOf(err error) string {
	var ee *ExecError
	if errors.As(err, &ee) {
		return ee.Tail
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Tail
	}
	return ""
}

func TestExecValidation(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "notexec")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opts ExecOptions
		want string
	}{
		{"empty argv", ExecOptions{}, "Argv is empty"},
		{"empty program", ExecOptions{Argv: []string{""}}, "Argv is empty"},
		{"relative dot", ExecOptions{Argv: []string{"./job.sh"}}, `"./job.sh" is a relative path`},
		{"relative dir", ExecOptions{Argv: []string{"bin/job"}}, `"bin/job" is a relative path`},
		{"missing absolute", ExecOptions{Argv: []string{"/nonexistent/leasecron-job"}}, `"/nonexistent/leasecron-job"`},
		{"missing on PATH", ExecOptions{Argv: []string{"leasecron-no-such-program"}}, `"leasecron-no-such-program": not found on PATH`},
		{"directory", ExecOptions{Argv: []string{dir}}, "is a directory"},
		{"not executable", ExecOptions{Argv: []string{plain}}, "is not executable"},
		{"negative timeout", ExecOptions{Argv: []string{"/bin/sh"}, Timeout: -time.Second}, "ExecOptions.Timeout = -1s: want a positive value"},
		{"negative grace", ExecOptions{Argv: []string{"/bin/sh"}, KillGrace: -time.Second}, "ExecOptions.KillGrace = -1s"},
		{"negative tail", ExecOptions{Argv: []string{"/bin/sh"}, OutputTail: -1}, "ExecOptions.OutputTail = -1"},
		{"bad env", ExecOptions{Argv: []string{"/bin/sh"}, Env: []string{"A=1", "NOEQUALS"}}, `ExecOptions.Env[1] "NOEQUALS" is not KEY=value`},
		{"missing dir", ExecOptions{Argv: []string{"/bin/sh"}, Dir: "/nonexistent/dir"}, `ExecOptions.Dir "/nonexistent/dir"`},
		{"dir is file", ExecOptions{Argv: []string{"/bin/sh"}, Dir: plain}, "is not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := Exec(c.opts)
			if err == nil || h != nil {
				t.Fatalf("Exec accepted %+v", c.opts)
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("error %v does not wrap ErrInvalidOptions", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestExecBareNameResolvedOnPATH(t *testing.T) {
	h := mustExec(t, ExecOptions{Argv: []string{"sh", "-c", "echo via-path"}})
	ctx, got := capture()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatal(err)
	}
	if out, _ := got(); out != "via-path\n" {
		t.Fatalf("output %q", out)
	}
}

func TestExecSuccessStdinEnvAndDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := mustExec(t, ExecOptions{
		Argv: []string{"/bin/sh", "-c", `cat; echo; env | grep -E '^LEASECRON_(TASK_ID|TASK_TYPE|ATTEMPT|DUE|GENERATION|SERIES|KEY)=' | sort; echo "EXTRA=$EXTRA"; pwd`},
		Env:  []string{"EXTRA=configured", "LEASECRON_TASK_ID=overridden-by-config"},
		Dir:  dir,
	})
	ctx, got := capture()
	if err := h(ctx, sampleTask("hello payload")); err != nil {
		t.Fatalf("run: %v", err)
	}
	out, calls := got()
	if calls != 1 {
		t.Fatalf("sink called %d times, want 1", calls)
	}
	want := strings.Join([]string{
		"hello payload",
		"LEASECRON_ATTEMPT=2",
		"LEASECRON_DUE=2030-01-02T02:04:05Z",
		"LEASECRON_GENERATION=7",
		"LEASECRON_SERIES=nightly",
		"LEASECRON_TASK_ID=task-1",
		"LEASECRON_TASK_TYPE=report",
		"EXTRA=configured",
		dir,
		"",
	}, "\n")
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestExecInheritsWorkerEnvironment(t *testing.T) {
	t.Setenv("LEASECRON_TEST_INHERITED", "from-worker")
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", `echo "$LEASECRON_TEST_INHERITED"`}})
	ctx, got := capture()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatal(err)
	}
	if out, _ := got(); out != "from-worker\n" {
		t.Fatalf("program saw %q, want the worker's variable", out)
	}
}

func TestExecKeyVariableOnlyWhenSet(t *testing.T) {
	t.Parallel()
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", `echo "key=${LEASECRON_KEY-unset}"`}})
	ctx, got := capture()
	task := sampleTask("")
	if err := h(ctx, task); err != nil {
		t.Fatal(err)
	}
	if out, _ := got(); out != "key=unset\n" {
		t.Fatalf("without key: %q", out)
	}
	task.Key = "calendar/ann-arbor"
	if err := h(ctx, task); err != nil {
		t.Fatal(err)
	}
	if out, _ := got(); out != "key=calendar/ann-arbor\n" {
		t.Fatalf("with key: %q", out)
	}
}

// A payload is data on stdin, never a command line, whatever it contains.
func TestExecPayloadIsNeverACommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	payloads := []string{
		"; touch " + marker,
		"$(touch " + marker + ")",
		"`touch " + marker + "`",
		"| touch " + marker,
		"&& touch " + marker,
		"; rm -rf /",
	}
	for _, argv := range [][]string{
		{"/bin/cat"},
		{"/bin/sh", "-c", `read -r line; printf '%s\n' "$line"`},
	} {
		h := mustExec(t, ExecOptions{Argv: argv})
		for _, p := range payloads {
			ctx, got := capture()
			if err := h(ctx, sampleTask(p+"\n")); err != nil {
				t.Fatalf("%v with payload %q: %v", argv, p, err)
			}
			if out, _ := got(); out != p+"\n" {
				t.Fatalf("%v echoed %q, want the payload %q verbatim", argv, out, p)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("payload %q was executed: %s exists", p, marker)
			}
		}
	}
}

func TestExecFailureCarriesExitCodeAndTail(t *testing.T) {
	t.Parallel()
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", "echo to-stdout; echo boom >&2; exit 3"}})
	ctx, got := capture()
	err := h(ctx, sampleTask(""))
	var ee *ExecError
	if !errors.As(err, &ee) {
		t.Fatalf("error %v (%T), want *ExecError", err, err)
	}
	if ee.ExitCode != 3 {
		t.Errorf("ExitCode %d, want 3", ee.ExitCode)
	}
	if ee.Tail != "to-stdout\nboom\n" {
		t.Errorf("Tail %q", ee.Tail)
	}
	if tailOf(err) != ee.Tail {
		t.Errorf("tailOf(err) = %q, want the tail", tailOf(err))
	}
	if s := err.Error(); !strings.Contains(s, "exit code 3") || !strings.Contains(s, "boom") || !strings.Contains(s, "/bin/sh") {
		t.Errorf("Error() %q lacks command, exit code or output", s)
	}
	if errors.Is(err, ErrTimeout) {
		t.Error("a plain failure reports ErrTimeout")
	}
	if out, calls := got(); calls != 1 || out != ee.Tail {
		t.Errorf("sink got %q (%d calls), want the tail once", out, calls)
	}
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Format: pid (comm) state ...
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after the handler returned", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process-group check reads /proc")
	}
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	h := mustExec(t, ExecOptions{
		// The grandchild sleeps with stdout redirected, so only the group
		// signal can reach it.
		Argv:      []string{"/bin/sh", "-c", `sleep 60 >/dev/null 2>&1 & echo $! > "$1"; echo started; wait`, "sh", pidFile},
		Timeout:   300 * time.Millisecond,
		KillGrace: 300 * time.Millisecond,
	})
	start := time.Now()
	err := h(context.Background(), sampleTask(""))
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
	var ee *ExecError
	if !errors.As(err, &ee) || ee.ExitCode != -1 || !strings.Contains(ee.Tail, "started") {
		t.Fatalf("error %#v: want *ExecError with exit code -1 and the output", err)
	}
	if elapsed > 3*time.Second {
		t.Errorf("timeout of 300ms took %v", elapsed)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid)
}

func TestExecNeverExitsIgnoringSIGTERMIsKilled(t *testing.T) {
	t.Parallel()
	h := mustExec(t, ExecOptions{
		// SIGTERM is ignored (and the ignore is inherited by the sleeps):
		// only SIGKILL after the grace period ends it.
		Argv:      []string{"/bin/sh", "-c", `trap '' TERM; echo looping; while :; do sleep 0.05; done`},
		Timeout:   200 * time.Millisecond,
		KillGrace: 300 * time.Millisecond,
	})
	start := time.Now()
	err := h(context.Background(), sampleTask(""))
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want ErrTimeout", err)
	}
	if elapsed < 500*time.Millisecond-50*time.Millisecond || elapsed > 4*time.Second {
		t.Errorf("returned after %v, want about timeout+grace = 500ms", elapsed)
	}
	if !strings.Contains(tailOf(err), "looping") {
		t.Errorf("tail %q lacks the program's output", tailOf(err))
	}
}

func TestExecCancelledContext(t *testing.T) {
	t.Parallel()
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", "sleep 30"}, KillGrace: 200 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := h(ctx, sampleTask(""))
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("error %v, want context.Canceled and not ErrTimeout", err)
	}
}

func TestExecMegabytesOfOutputKeepsOnlyTail(t *testing.T) {
	// Not parallel: it measures this process's allocations.
	const n = 50 << 20
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", "head -c " + strconv.Itoa(n) + " /dev/zero | tr '\\0' x; echo END"}})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ctx, got := capture()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	out, _ := got()
	if len(out) != DefaultOutputTail || !strings.HasSuffix(out, "xxxxEND\n") {
		t.Fatalf("tail is %d bytes ending %q, want %d bytes ending in END", len(out), out[max(0, len(out)-10):], DefaultOutputTail)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("50 MiB of output: %d KiB allocated", alloc>>10)
	if alloc > 8<<20 {
		t.Fatalf("allocated %d bytes for %d bytes of output: the output is being buffered", alloc, n)
	}
}

func TestExecFailureOutputBytesCounted(t *testing.T) {
	t.Parallel()
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' y; echo; echo last; exit 1"}, OutputTail: 16})
	err := h(context.Background(), sampleTask(""))
	var ee *ExecError
	if !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if ee.OutputBytes != 100006 || ee.Tail != "yyyyyyyyyy\nlast\n" {
		t.Fatalf("OutputBytes %d tail %q", ee.OutputBytes, ee.Tail)
	}
}

func TestExecLargePayloadIgnoredByProgram(t *testing.T) {
	t.Parallel()
	// The program never reads stdin: the broken pipe is not a failure.
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", "exit 0"}})
	if err := h(context.Background(), sampleTask(strings.Repeat("z", 8<<20))); err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestExecOptionsNotAliased(t *testing.T) {
	argv := []string{"/bin/sh", "-c", "echo one"}
	h := mustExec(t, ExecOptions{Argv: argv})
	argv[2] = "echo two"
	ctx, got := capture()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatal(err)
	}
	if out, _ := got(); out != "one\n" {
		t.Fatalf("handler saw a later change to the caller's Argv: %q", out)
	}
}

// A program that exits 0 but leaves a background child holding its output
// succeeds at once, and the child is killed with the rest of the group.
func TestExecBackgroundChildDoesNotHoldTheRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process check reads /proc")
	}
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	h := mustExec(t, ExecOptions{
		Argv:      []string{"/bin/sh", "-c", `sleep 60 & echo $! > "$1"; echo parent-done`, "sh", pidFile},
		KillGrace: 2 * time.Second,
	})
	ctx, got := capture()
	start := time.Now()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatalf("run: %v", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("run took %v: it waited for the background child", elapsed)
	}
	if out, _ := got(); out != "parent-done\n" {
		t.Errorf("output %q", out)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	waitGone(t, pid)
}

// A child that left the process group (setsid) and keeps the output open
// delays the run by at most KillGrace.
func TestExecEscapedChildHoldingOutputIsBounded(t *testing.T) {
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Skip("setsid not installed")
	}
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "escaped.pid")
	h := mustExec(t, ExecOptions{
		Argv:      []string{"/bin/sh", "-c", `"$2" /bin/sh -c 'echo $$ > "$1"; exec sleep 60' sh "$1" & sleep 0.2; echo parent-done`, "sh", pidFile, setsid},
		KillGrace: 300 * time.Millisecond,
	})
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
		}
	})
	ctx, got := capture()
	start := time.Now()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatalf("run: %v", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("run took %v, want about 0.2s + KillGrace", elapsed)
	}
	if out, _ := got(); out != "parent-done\n" {
		t.Errorf("output %q", out)
	}
}

// Exit code 75 with a delay on the last output line snoozes the task; a
// last line that is not a delay makes exit 75 a plain failure.
func TestExecSnooze(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		script string
		want   time.Duration
	}{
		{`echo "input not there yet"; echo 10m; exit 75`, 10 * time.Minute},
		{`echo 600; exit 75`, 10 * time.Minute},
		{`printf '90s\n\n'; exit 75`, 90 * time.Second},
	} {
		t.Run(c.script, func(t *testing.T) {
			h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", c.script}})
			ctx, got := capture()
			err := h(ctx, sampleTask(""))
			if d, ok := leasecrontype.SnoozeOf(err); !ok || d != c.want {
				t.Errorf("%s: err %v, want a snooze of %v", c.script, err, c.want)
			}
			if out, _ := got(); out == "" {
				t.Errorf("%s: output not recorded", c.script)
			}
		})
	}
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", `echo "later, maybe"; exit 75`}})
	err := h(context.Background(), sampleTask(""))
	var ee *ExecError
	if _, ok := leasecrontype.SnoozeOf(err); ok || !errors.As(err, &ee) || ee.ExitCode != ExitSnooze ||
		!strings.Contains(err.Error(), `"later, maybe" is not a duration`) {
		t.Fatalf("exit 75 without a delay = %v, want an ExecError naming the bad line", err)
	}
}

// A batch's completion callback gets the batch and its counts, as
// variables of an exec handler and headers of an http one.
func TestBatchCountsReachHandlers(t *testing.T) {
	t.Parallel()
	task := sampleTask("")
	task.Batch, task.Completed = "b7", &leasecrontype.BatchCounts{Total: 3, Succeeded: 2, Dead: 1}
	const counts = `{"total":3,"succeeded":2,"dead":1,"cancelled":0}`
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c", `echo "$LEASECRON_BATCH $LEASECRON_BATCH_COUNTS"`}})
	ctx, got := capture()
	if err := h(ctx, task); err != nil {
		t.Fatal(err)
	}
	if out, _ := got(); out != "b7 "+counts+"\n" {
		t.Errorf("exec saw %q", out)
	}
	seen := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Header.Clone() }))
	defer srv.Close()
	member := sampleTask("")
	member.Batch = "b7"
	for _, tc := range []struct {
		task   leasecrontype.Task
		counts string
	}{{task, counts}, {member, ""}} {
		if err := mustHTTP(t, HTTPOptions{URL: srv.URL})(context.Background(), tc.task); err != nil {
			t.Fatal(err)
		}
		hd := <-seen
		if hd.Get(HeaderBatch) != "b7" || hd.Get(HeaderBatchCounts) != tc.counts {
			t.Errorf("http saw batch %q counts %q, want b7 %q", hd.Get(HeaderBatch), hd.Get(HeaderBatchCounts), tc.counts)
		}
	}
}
