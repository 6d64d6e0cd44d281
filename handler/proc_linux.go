//go:build linux

package handler

import (
	"os/exec"
	"syscall"
)

// setProcessGroup makes the child the leader of a new process group, so a
// timeout can signal it together with everything it started, and has the
// kernel kill it if the worker dies: a SIGKILLed worker's task runs again
// elsewhere, and must not also run on here unsupervised.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
