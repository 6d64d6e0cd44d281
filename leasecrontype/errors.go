package leasecrontype

import "errors"

// ErrNotFound is wrapped by every "no such thing" error of leasecron: a task
// that is not scheduled, a run without a record, a blackboard key, a dead
// letter, a payload blob, a missing table or queue. Test for it with
// errors.Is; the message around it says which thing was missing.
var ErrNotFound = errors.New("not found")
