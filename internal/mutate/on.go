//go:build leasecron_mutate

package mutate

import "sync/atomic"

var active atomic.Pointer[string]

// On reports whether defect name is switched on.
func On(name string) bool {
	p := active.Load()
	return p != nil && *p == name
}

// Set switches defect name on ("" switches every defect off).
func Set(name string) { active.Store(&name) }
