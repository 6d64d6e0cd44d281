package osproc

import "syscall"

// dieWithParent has the kernel kill the child when the thread that started
// it dies.
func dieWithParent(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
