//go:build unix && !linux

package osproc

import "syscall"

// dieWithParent does nothing: only Linux can tie a child's life to its
// parent's.
func dieWithParent(*syscall.SysProcAttr) {}
