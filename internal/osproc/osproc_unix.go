//go:build unix

package osproc

import (
	"io/fs"
	"os/exec"
	"syscall"
)

// Prepare makes cmd, when started, the leader of a new process group, and
// on Linux has the kernel kill it when the thread that started it dies.
// Call it before cmd.Start.
func Prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	dieWithParent(cmd.SysProcAttr)
}

// Terminate asks cmd's process group to stop: SIGTERM to every process in
// it. It does nothing if cmd has not started; a group that is already gone
// is not an error.
func Terminate(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGTERM) }

// Kill ends cmd's process group at once: SIGKILL to every process in it.
func Kill(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGKILL) }

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if !started(cmd) {
		return
	}
	// The group may already be gone (ESRCH): nothing to do then.
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}

func executableMode(m fs.FileMode) bool { return m.Perm()&0o111 != 0 }
