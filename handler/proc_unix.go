//go:build unix

package handler

import (
	"os/exec"
	"syscall"
)

func terminateGroup(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGTERM) }

func killGroup(cmd *exec.Cmd) { signalGroup(cmd, syscall.SIGKILL) }

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd.Process == nil {
		return
	}
	// The group may already be gone (ESRCH): nothing to do then.
	_ = syscall.Kill(-cmd.Process.Pid, sig)
}
