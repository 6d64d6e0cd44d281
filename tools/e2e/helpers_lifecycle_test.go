package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// lcRun runs the leasecron CLI against f and returns its output and exit
// code (-1 when it could not run or was killed).
func lcRun(ctx context.Context, f *fleet.Fleet, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	stdout, stderr, err := proc.Run(ctx, f.Bin, f.Env(), stdin, args...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout, stderr, 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return stdout, stderr, ee.ExitCode()
	default:
		return stdout, stderr + err.Error(), -1
	}
}

// lcCLI runs the CLI and fails t unless it exits 0.
func lcCLI(ctx context.Context, t *testing.T, f *fleet.Fleet, args ...string) string {
	t.Helper()
	out, errOut, code := lcRun(ctx, f, nil, args...)
	if code != 0 {
		t.Fatalf("leasecron %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// lcStatus is the part of `leasecron status ID --json` the tests read.
type lcStatus struct {
	ID      string          `json:"id"`
	State   string          `json:"state"`
	Pending json.RawMessage `json:"pending"`
	Run     *struct {
		State      string `json:"state"`
		Attempts   int    `json:"attempts"`
		Worker     string `json:"worker"`
		LastError  string `json:"last_error"`
		Duplicates int    `json:"duplicates"`
		// SnoozedUntil is set while (and after) the run snoozed.
		SnoozedUntil time.Time `json:"snoozed_until"`
		// Progress is the last progress report, absent without one.
		Progress *struct {
			Percent int       `json:"percent"`
			Message string    `json:"message"`
			At      time.Time `json:"at"`
		} `json:"progress"`
		OutputTail string `json:"output_tail"`
	} `json:"run"`
}

// lcGetStatus runs `status ID --json`; code is the CLI's exit code.
func lcGetStatus(ctx context.Context, f *fleet.Fleet, id string) (st lcStatus, code int, err error) {
	out, errOut, code := lcRun(ctx, f, nil, "status", id, "--json")
	if code != 0 {
		return st, code, errors.New(strings.TrimSpace(errOut))
	}
	return st, 0, json.Unmarshal([]byte(out), &st)
}

// lcWaitStatus polls the task's status until ok accepts it; it fails t
// after limit.
func lcWaitStatus(ctx context.Context, t *testing.T, f *fleet.Fleet, id string, limit time.Duration, what string, ok func(lcStatus) bool) lcStatus {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last lcStatus
	var lastErr error
	for {
		st, _, err := lcGetStatus(ctx, f, id)
		if err == nil && ok(st) {
			return st
		}
		last, lastErr = st, err
		if time.Now().After(deadline) || ctx.Err() != nil {
			b, _ := json.Marshal(last)
			t.Fatalf("%s: status of %s never showed %s within %s (last %s, err %v)", t.Name(), id, what, limit, b, lastErr)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// lcStarts returns the start records of id.
func lcStarts(t *testing.T, f *fleet.Fleet, id string) []fleet.Record {
	t.Helper()
	rs, err := f.Records()
	if err != nil {
		t.Fatal(err)
	}
	return fleet.Starts(rs)[id]
}

// lcWaitRecords waits up to limit for a start record of every id.
func lcWaitRecords(ctx context.Context, t *testing.T, f *fleet.Fleet, limit time.Duration, ids ...string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if missing, err := f.WaitRecords(wctx, ids); err != nil {
		t.Fatalf("no start record within %s for %v (%v)", limit, missing, err)
	}
}

// lcWaitQueueEmpty polls `stats --json` until the work queue is empty; it
// fails t after limit.
func lcWaitQueueEmpty(ctx context.Context, t *testing.T, f *fleet.Fleet, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var st struct {
			QueueDepth int `json:"queue_depth"`
		}
		out, _, code := lcRun(ctx, f, nil, "stats", "--json")
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.QueueDepth == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the work queue is not empty after %s: %s", limit, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lcRecordScript is a /bin/sh line appending a start record for the task
// (the format of fleet.BaseConfig's rec handler).
const lcRecordScript = `printf '%s %s %s %s %s start\n' "$LEASECRON_TASK_ID" "$LEASECRON_DUE" "$(date +%s%N)" "$FLEET_WORKER" "$LEASECRON_GENERATION" >> "$FLEET_RECORD"`
