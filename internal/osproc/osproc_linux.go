package osproc

import (
	"os/exec"
	"syscall"
)

// Prepare makes cmd, when started, the leader of a new process group, and
// has the kernel kill it when the thread that started it dies. Call it
// before cmd.Start.
func Prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
