//go:build !unix && !windows

package osproc

import (
	"io/fs"
	"os/exec"
)

// Prepare does nothing: this platform has no process groups.
func Prepare(*exec.Cmd) {}

// Terminate ends cmd's process; this platform has no gentler way.
func Terminate(cmd *exec.Cmd) { Kill(cmd) }

// Kill ends cmd's process (its children are not reached).
func Kill(cmd *exec.Cmd) {
	if started(cmd) {
		_ = cmd.Process.Kill()
	}
}

func executableMode(m fs.FileMode) bool { return m.Perm()&0o111 != 0 }
