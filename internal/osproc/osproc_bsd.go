//go:build unix && !linux

package osproc

import (
	"os/exec"
	"syscall"
)

// Prepare makes cmd, when started, the leader of a new process group. Call
// it before cmd.Start.
func Prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}
