//go:build unix

package handler

import (
	"os/exec"
	"syscall"
)

// setProcessGroup makes the child the leader of a new process group, so a
// timeout can signal it together with everything it started.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func terminateGroup(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGTERM) }

func killGroup(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGKILL) }

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process == nil {
		return
	}
	// The group may already be gone (ESRCH): nothing to do then.
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
