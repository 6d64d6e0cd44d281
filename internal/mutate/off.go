//go:build !leasecron_mutate

package mutate

// On reports whether defect name is switched on: never, in a build
// without the leasecron_mutate tag.
func On(string) bool { return false }
