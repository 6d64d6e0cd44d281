package handler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/osproc"
	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Defaults for ExecOptions and HTTPOptions.
const (
	// DefaultExecTimeout bounds one run of an Exec handler.
	DefaultExecTimeout = 5 * time.Minute
	// DefaultKillGrace is the time between SIGTERM and SIGKILL at a timeout.
	DefaultKillGrace = 5 * time.Second
	// DefaultOutputTail is how many bytes of output are kept.
	DefaultOutputTail = 4 << 10
	// errorTailMax bounds the part of the tail repeated in Error().
	errorTailMax = 1 << 10
)

// ExitSnooze is the exit status with which an Exec handler's program
// snoozes its task (EX_TEMPFAIL of sysexits.h, "try again later"): the last
// line of its output says for how long — a Go duration ("10m", "90s") or a
// number of seconds ("600") — and the task runs again after that without
// using an attempt (leasecrontype.Snooze). With a last line that is not a
// duration the exit is a failed attempt like any other.
const ExitSnooze = 75

// Environment variables an Exec handler's program receives, in addition to
// the worker's own environment and ExecOptions.Env. A traced task's
// program also gets TRACEPARENT (and TRACESTATE), the W3C trace context of
// the worker's span for the run, so that its own spans join the trace.
const (
	EnvTaskID     = "LEASECRON_TASK_ID"    // the run id (same on every attempt)
	EnvTaskType   = "LEASECRON_TASK_TYPE"  // the handler type
	EnvSeries     = "LEASECRON_SERIES"     // the recurring series id, only when set
	EnvAttempt    = "LEASECRON_ATTEMPT"    // this attempt's number, from 1
	EnvDue        = "LEASECRON_DUE"        // the due time, RFC 3339 in UTC
	EnvGeneration = "LEASECRON_GENERATION" // the fencing generation of the mover
	EnvKey        = "LEASECRON_KEY"        // the blackboard key, only when set
	// EnvBatch is the batch the task is a member of, or whose completion
	// callback it is; only when set.
	EnvBatch = "LEASECRON_BATCH"
	// EnvBatchCounts is set for a batch's completion callback: how its
	// members ended, as JSON: {"total":N,"succeeded":N,"dead":N,"cancelled":N}.
	EnvBatchCounts = "LEASECRON_BATCH_COUNTS"
)

// batchVars returns the batch id and, for a completion callback, the JSON
// of its counts (EnvBatch, EnvBatchCounts; HeaderBatch, HeaderBatchCounts).
func batchVars(t leasecrontype.Task) (batch, counts string) {
	if t.Completed != nil {
		b, _ := json.Marshal(t.Completed)
		counts = string(b)
	}
	return t.Batch, counts
}

// ExecOptions configure Exec. Argv is required; every other field has a
// default.
type ExecOptions struct {
	// Argv is the program and its arguments, from configuration. Argv[0]
	// is an absolute path, or a bare name looked up on PATH once, when the
	// handler is built. A relative path ("./job", "bin/job") is refused: it
	// would depend on the worker's working directory.
	Argv []string
	// Timeout bounds one run. At the timeout the program's whole process
	// group gets SIGTERM, and SIGKILL KillGrace later if the program is
	// still running. Default DefaultExecTimeout (5 min). (The leasecron
	// binary gives an exec handler without handlers.<type>.timeout the
	// worker's worker.max_run_time instead.)
	//
	// The program runs in a process group of its own. When it exits,
	// successfully or not, whatever it left running in that group
	// (background children) is killed: a run ends when its program does.
	Timeout time.Duration
	// KillGrace is the wait between SIGTERM and SIGKILL, and also the
	// longest wait for the output to close after the program exits (a
	// process that left the group may hold it). Default DefaultKillGrace
	// (5 s).
	KillGrace time.Duration
	// Env holds extra KEY=value entries added to the worker's environment.
	// The LEASECRON_* task variables are added last and cannot be
	// overridden.
	Env []string
	// Dir is the working directory. Default: the worker's.
	Dir string
	// OutputTail is how many bytes of combined stdout and stderr are kept.
	// Default DefaultOutputTail (4 KiB).
	OutputTail int
	// Logger receives one debug line per run. Default slog.Default().
	Logger *slog.Logger
}

// ExecError is the error of a failed Exec run: a non-zero exit, a signal,
// a timeout, a cancellation or a failure to start.
type ExecError struct {
	// Command is the program that ran (Argv[0] as resolved).
	Command string
	// ExitCode is the program's exit status, or -1 when it did not exit
	// normally (killed by a signal, timed out, never started).
	ExitCode int
	// Tail is the end of the program's combined stdout and stderr.
	Tail string
	// OutputBytes is how many bytes the program wrote in all.
	OutputBytes int64
	// Err is the cause: *exec.ExitError, ErrTimeout, a context error or a
	// start error.
	Err error
}

// Error reports the command, the cause and the last part of the output
// (at most 1 KiB of it; the full tail is in Tail).
func (e *ExecError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "exec %s: ", e.Command)
	var xe *exec.ExitError
	switch {
	case errors.As(e.Err, &xe) && e.ExitCode >= 0:
		fmt.Fprintf(&b, "exit code %d", e.ExitCode)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		fmt.Fprintf(&b, "exit code %d", e.ExitCode)
	}
	if e.Tail != "" {
		t := e.Tail
		if len(t) > errorTailMax {
			t = "…" + t[len(t)-errorTailMax:]
			t = strings.ToValidUTF8(t, "")
		}
		fmt.Fprintf(&b, "; output: %s", strings.TrimRight(t, "\n"))
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *ExecError) Unwrap() error { return e.Err }

type execHandler struct {
	ExecOptions
	path string // resolved Argv[0]
}

// Exec returns a handler that runs opts.Argv with the task's payload on
// standard input. Exit status 0 is success; anything else returns an
// *ExecError carrying the exit code and the output tail. The program gets
// the worker's environment plus opts.Env plus the LEASECRON_* variables
// (EnvTaskID and the others). A run that exceeds opts.Timeout, or whose
// context is cancelled, has its process group terminated and returns an
// *ExecError wrapping ErrTimeout or the context's error.
//
// Exec validates opts and returns an error wrapping ErrInvalidOptions that
// names the bad field when they are unusable (empty Argv, relative or
// missing or non-executable program, negative durations, malformed Env).
func Exec(opts ExecOptions) (leasecrontype.Handler, error) {
	h := &execHandler{ExecOptions: opts.WithDefaults()}
	if err := h.validate(); err != nil {
		return nil, err
	}
	return h.run, nil
}

// WithDefaults returns o with every zero field set to its default.
func (o ExecOptions) WithDefaults() ExecOptions {
	o.Timeout = cmp.Or(o.Timeout, DefaultExecTimeout)
	o.KillGrace = cmp.Or(o.KillGrace, DefaultKillGrace)
	o.OutputTail = cmp.Or(o.OutputTail, DefaultOutputTail)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

// validate refuses unusable options and settles what they imply (the
// program's path, private copies of slices and maps).
func (h *execHandler) validate() error {
	if len(h.Argv) == 0 || h.Argv[0] == "" {
		return fmt.Errorf("%w: ExecOptions.Argv is empty: name the program to run and its arguments, e.g. [\"/usr/local/bin/report\", \"--daily\"]", ErrInvalidOptions)
	}
	h.Argv = append([]string(nil), h.Argv...)
	name := h.Argv[0]
	switch {
	case filepath.IsAbs(name):
		h.path = name
	case strings.ContainsRune(name, filepath.Separator) || strings.ContainsRune(name, '/'):
		return fmt.Errorf("%w: ExecOptions.Argv[0] %q is a relative path: use an absolute path, or a bare program name found on PATH", ErrInvalidOptions, name)
	default:
		p, err := exec.LookPath(name)
		if err != nil {
			return fmt.Errorf("%w: ExecOptions.Argv[0] %q: not found on PATH (%w): use an absolute path or install it", ErrInvalidOptions, name, err)
		}
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: ExecOptions.Argv[0] %q resolves to relative path %q through PATH: use an absolute path", ErrInvalidOptions, name, p)
		}
		h.path = p
	}
	fi, err := os.Stat(h.path)
	switch {
	case err != nil:
		return fmt.Errorf("%w: ExecOptions.Argv[0] %q: %w", ErrInvalidOptions, name, err)
	case fi.IsDir():
		return fmt.Errorf("%w: ExecOptions.Argv[0] %q is a directory, not a program", ErrInvalidOptions, name)
	case !osproc.Executable(fi):
		return fmt.Errorf("%w: ExecOptions.Argv[0] %q is not executable (mode %v)", ErrInvalidOptions, name, fi.Mode().Perm())
	}
	if err := opt.First(
		opt.Positive(ErrInvalidOptions, "ExecOptions.Timeout", h.Timeout, DefaultExecTimeout),
		opt.Positive(ErrInvalidOptions, "ExecOptions.KillGrace", h.KillGrace, DefaultKillGrace),
		opt.Positive(ErrInvalidOptions, "ExecOptions.OutputTail", h.OutputTail, DefaultOutputTail),
	); err != nil {
		return err
	}
	for i, kv := range h.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("%w: ExecOptions.Env[%d] %q is not KEY=value", ErrInvalidOptions, i, kv)
		}
	}
	h.Env = append([]string(nil), h.Env...)
	if h.Dir != "" {
		fi, err := os.Stat(h.Dir)
		if err != nil {
			return fmt.Errorf("%w: ExecOptions.Dir %q: %w", ErrInvalidOptions, h.Dir, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: ExecOptions.Dir %q is not a directory", ErrInvalidOptions, h.Dir)
		}
	}
	h.Logger = h.Logger.With("component", "handler", "kind", "exec")
	return nil
}

// withoutTrace drops TRACEPARENT and TRACESTATE from env.
func withoutTrace(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TRACEPARENT=") && !strings.HasPrefix(kv, "TRACESTATE=") {
			out = append(out, kv)
		}
	}
	return out
}

// taskEnv returns the LEASECRON_* variables for t.
func taskEnv(t leasecrontype.Task) []string {
	env := []string{
		EnvTaskID + "=" + t.ID,
		EnvTaskType + "=" + t.Type,
		EnvAttempt + "=" + strconv.Itoa(t.Attempt),
		EnvGeneration + "=" + strconv.FormatInt(t.Generation, 10),
	}
	if !t.Due.IsZero() {
		env = append(env, EnvDue+"="+t.Due.UTC().Format(time.RFC3339Nano))
	}
	if t.Series != "" {
		env = append(env, EnvSeries+"="+t.Series)
	}
	if t.Key != "" {
		env = append(env, EnvKey+"="+t.Key)
	}
	if batch, counts := batchVars(t); batch != "" {
		env = append(env, EnvBatch+"="+batch)
		if counts != "" {
			env = append(env, EnvBatchCounts+"="+counts)
		}
	}
	return env
}

func (h *execHandler) run(ctx context.Context, t leasecrontype.Task) error {
	start := time.Now()
	ctx, cancel := context.WithTimeoutCause(ctx, h.Timeout, ErrTimeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, h.path, h.Argv[1:]...)
	cmd.Args[0] = h.Argv[0]
	cmd.Dir = h.Dir
	// os/exec keeps the last value of a duplicated key, so the task
	// variables win over the worker's environment and opts.Env. The
	// worker's own TRACEPARENT/TRACESTATE, if it was started with them,
	// are not the task's: the task's span (when there is one) replaces them.
	cmd.Env = append(append(append(withoutTrace(os.Environ()), h.Env...), taskEnv(t)...), tracing.Env(ctx)...)
	osproc.Prepare(cmd)

	var (
		mu        sync.Mutex
		killTimer *time.Timer
		cancelled bool
	)
	cmd.Cancel = func() error {
		mu.Lock()
		defer mu.Unlock()
		cancelled = true
		osproc.Terminate(cmd)
		killTimer = time.AfterFunc(h.KillGrace, func() { osproc.Kill(cmd) })
		return nil
	}

	out := trunc.NewWriter(h.OutputTail)
	lines := newProgressLines(ctx, h.Logger, t.ID, out)
	p, err := startPiped(cmd, t.Payload, lines)
	if err != nil {
		ee := &ExecError{Command: h.Argv[0], ExitCode: -1, Err: fmt.Errorf("start: %w", err)}
		if ctx.Err() != nil {
			ee.Err = h.contextError(ctx)
		}
		recordOutput(ctx, "")
		return ee
	}
	err = cmd.Wait()

	mu.Lock()
	if killTimer != nil {
		killTimer.Stop()
	}
	wasCancelled := cancelled
	mu.Unlock()
	// The run is over when the program exits: whatever it left running in
	// its process group (background children, or survivors of SIGTERM at
	// a timeout) is killed now.
	osproc.Kill(cmd)
	p.finish(h.KillGrace)
	lines.flush()

	tail := out.String()
	recordOutput(ctx, tail)
	elapsed := time.Since(start)
	if err == nil {
		h.Logger.Debug("done", "command", h.Argv[0], "task_id", t.ID, "type", t.Type, "elapsed", elapsed, "output_bytes", out.Total())
		return nil
	}
	ee := &ExecError{Command: h.Argv[0], ExitCode: -1, Tail: tail, OutputBytes: out.Total(), Err: err}
	if cmd.ProcessState != nil {
		ee.ExitCode = cmd.ProcessState.ExitCode()
	}
	if wasCancelled {
		ee.Err = h.contextError(ctx)
		ee.ExitCode = -1
	}
	if ee.ExitCode == ExitSnooze {
		d, perr := parseSnooze(tail)
		if perr == nil {
			h.Logger.Debug("snoozed", "command", h.Argv[0], "task_id", t.ID, "for", d)
			return leasecrontype.Snooze(d)
		}
		ee.Err = fmt.Errorf("exit code %d asks for a snooze, but %w", ExitSnooze, perr)
	}
	h.Logger.Debug("failed", "command", h.Argv[0], "task_id", t.ID, "type", t.Type, "elapsed", elapsed, "err", ee.Err)
	return ee
}

// contextError describes why ctx ended: our timeout or the caller's
// cancellation.
func (h *execHandler) contextError(ctx context.Context) error {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrTimeout) {
		return fmt.Errorf("%w after %v", ErrTimeout, h.Timeout)
	}
	return fmt.Errorf("cancelled: %w", cause)
}

// pipes feeds a started command's stdin and drains its output. The pipes
// are our own *os.File pairs rather than os/exec's, so that Wait returns
// as soon as the program exits even when a child it left behind still
// holds them; finish then bounds the wait for the rest.
type pipes struct {
	stdinW  *os.File
	outR    *os.File
	closeIn sync.Once
	inDone  chan struct{}
	outDone chan struct{}
}

func startPiped(cmd *exec.Cmd, payload []byte, out io.Writer) (*pipes, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin = inR
	// One pipe for both streams: the tail interleaves them as written.
	cmd.Stdout, cmd.Stderr = outW, outW
	if err := cmd.Start(); err != nil {
		for _, f := range []*os.File{inR, inW, outR, outW} {
			f.Close()
		}
		return nil, err
	}
	// The child has its copies; ours would keep the pipes open.
	inR.Close()
	outW.Close()
	p := &pipes{stdinW: inW, outR: outR, inDone: make(chan struct{}), outDone: make(chan struct{})}
	go func() {
		defer close(p.inDone)
		// A program that does not read its input makes this fail with
		// EPIPE when it exits: not an error of the run.
		_, _ = inW.Write(payload)
		p.closeIn.Do(func() { inW.Close() })
	}()
	go func() {
		defer close(p.outDone)
		_, _ = io.Copy(out, outR)
	}()
	return p, nil
}

// finish ends the stdin feed and waits up to grace for the output to reach
// end of file (it does at once unless a process outside the program's
// group still holds it), then closes it.
func (p *pipes) finish(grace time.Duration) {
	p.closeIn.Do(func() { p.stdinW.Close() })
	<-p.inDone
	select {
	case <-p.outDone:
	case <-time.After(grace):
		p.outR.Close()
		<-p.outDone
	}
	p.outR.Close()
}

// parseSnooze reads the snooze length from the last non-empty line of an
// Exec program's output: a Go duration or a whole number of seconds.
func parseSnooze(output string) (time.Duration, error) {
	lines := strings.Split(strings.TrimRight(output, " \t\r\n"), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if n, err := strconv.ParseInt(last, 10, 64); err == nil && n >= 0 {
		if n > int64(math.MaxInt64/time.Second) {
			return 0, fmt.Errorf("its last output line %q asks for %d seconds, more than a snooze can be (at most %d)", trunc.Head(last, 80), n, int64(math.MaxInt64/time.Second))
		}
		return time.Duration(n) * time.Second, nil
	}
	if d, err := time.ParseDuration(last); err == nil && d >= 0 {
		return d, nil
	}
	return 0, fmt.Errorf("its last output line %q is not a duration: want e.g. 10m, 90s or 600 (seconds)", trunc.Head(last, 80))
}
