// Package notfound makes the "no such thing" sentinels of leasecron's
// packages: each keeps its own message ("not scheduled", "blackboard key not
// found", ...) and matches leasecrontype.ErrNotFound with errors.Is, so one
// test covers them all.
package notfound

import "github.com/leasecron/leasecron/leasecrontype"

// New returns a sentinel error with message msg that errors.Is reports as
// leasecrontype.ErrNotFound.
func New(msg string) error { return &sentinel{msg} }

type sentinel struct{ msg string }

func (e *sentinel) Error() string { return e.msg }

// Is makes errors.Is(e, leasecrontype.ErrNotFound) true.
func (e *sentinel) Is(target error) bool { return target == leasecrontype.ErrNotFound }
