// Package osproc runs child processes the same way wherever leasecron
// builds: each in a group of its own, so that stopping a program also stops
// whatever it started. It is the one place that knows how each platform
// does that.
//
// What each platform offers:
//
//   - Linux: a new process group (Setpgid), and SIGKILL for the child when
//     the thread that started it dies (Pdeathsig), so a crashed worker
//     leaves no program running unsupervised. Terminate sends SIGTERM to
//     the group, Kill sends SIGKILL.
//   - Other Unix systems (macOS, the BSDs): the same without Pdeathsig — a
//     worker killed with SIGKILL leaves its children running.
//   - Windows: a new process group (CREATE_NEW_PROCESS_GROUP). Terminate
//     sends CTRL_BREAK_EVENT to the group (what console programs, Go's
//     os.Interrupt and Node's SIGBREAK handle); Kill ends the process tree
//     with taskkill /T /F, falling back to the child alone. A child whose
//     parent has already exited is outside the tree taskkill walks, and
//     nothing stops the children of a crashed worker.
package osproc

import (
	"os"
	"os/exec"
)

// Executable reports whether fi describes a file the platform can run. On
// Unix that is a regular file with an execute bit; Windows has no execute
// bit, so there it is any regular file.
func Executable(fi os.FileInfo) bool {
	return fi.Mode().IsRegular() && executableMode(fi.Mode())
}

func started(cmd *exec.Cmd) bool { return cmd != nil && cmd.Process != nil }
