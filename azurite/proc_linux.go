package azurite

import "syscall"

// sysProcAttr puts Azurite in its own process group (so a stop reaches node
// and anything it spawned) and kills it if the process that started it dies,
// so an interrupted test never leaves one running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func killGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}
