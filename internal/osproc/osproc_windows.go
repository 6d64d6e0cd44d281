package osproc

import (
	"io/fs"
	"os/exec"
	"strconv"
	"syscall"
)

// Prepare makes cmd, when started, the root of a new process group, so
// Terminate can send it CTRL_BREAK_EVENT. Call it before cmd.Start.
func Prepare(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.CreationFlags |= syscall.CREATE_NEW_PROCESS_GROUP
}

var generateConsoleCtrlEvent = syscall.NewLazyDLL("kernel32.dll").NewProc("GenerateConsoleCtrlEvent")

// Terminate asks cmd's process group to stop with CTRL_BREAK_EVENT. A
// process without a console (a service) cannot receive it: then the tree
// is killed at once.
func Terminate(cmd *exec.Cmd) {
	if !started(cmd) {
		return
	}
	const ctrlBreakEvent = 1
	if r, _, _ := generateConsoleCtrlEvent.Call(ctrlBreakEvent, uintptr(cmd.Process.Pid)); r == 0 {
		Kill(cmd)
	}
}

// Kill ends cmd's process tree at once (taskkill /T /F), or cmd's process
// alone when taskkill fails.
func Kill(cmd *exec.Cmd) {
	if !started(cmd) {
		return
	}
	tk := exec.Command("taskkill", "/T", "/F", "/PID", strconv.Itoa(cmd.Process.Pid))
	tk.SysProcAttr = &syscall.SysProcAttr{HideWindow: true}
	if tk.Run() != nil {
		_ = cmd.Process.Kill()
	}
}

func executableMode(fs.FileMode) bool { return true }
