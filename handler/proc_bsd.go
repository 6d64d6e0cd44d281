//go:build unix && !linux

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
