//go:build unix

package osproc

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startTree starts a shell that starts a background child and waits for
// it, and returns the shell's command and the child's pid.
func startTree(t *testing.T) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	Prepare(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Kill(cmd); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("child pid %q: %v", line, err)
	}
	return cmd, pid
}

// gone reports whether pid has exited (no such process, or a zombie waiting
// for a reaper that is not the test).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKillReachesTheWholeGroup(t *testing.T) {
	cmd, child := startTree(t)
	if gone(child) {
		t.Fatalf("child %d not running before Kill", child)
	}
	Kill(cmd)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("shell ended with %v, want killed by SIGKILL", err)
	}
	waitGone(t, child)
}

func TestTerminateReachesTheWholeGroup(t *testing.T) {
	cmd, child := startTree(t)
	Terminate(cmd)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("shell ended with %v, want terminated by SIGTERM", err)
	}
	waitGone(t, child)
}

func TestPrepareKeepsOtherAttributes(t *testing.T) {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Noctty: true}
	Prepare(cmd)
	if !cmd.SysProcAttr.Setpgid || !cmd.SysProcAttr.Noctty {
		t.Fatalf("SysProcAttr = %+v, want Setpgid and the caller's Noctty", cmd.SysProcAttr)
	}
}

func TestSignalsBeforeStartDoNothing(t *testing.T) {
	cmd := exec.Command("/bin/true")
	Terminate(cmd)
	Kill(cmd)
	Terminate(nil)
	Kill(nil)
}

func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		mode os.FileMode
		want bool
	}{{"script", 0o755, true}, {"owner-only", 0o700, true}, {"data", 0o644, false}} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name)
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"), c.mode); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := Executable(fi); got != c.want {
				t.Errorf("Executable(%s, %v) = %v, want %v", c.name, c.mode, got, c.want)
			}
		})
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if Executable(fi) {
		t.Errorf("Executable(directory) = true")
	}
}
