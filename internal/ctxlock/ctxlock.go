// Package ctxlock is a mutex for critical sections that wait on storage:
// a writer of the lease's metadata, the one creation of a table, the one
// read of a state many callers share. A sync.Mutex held across a request
// makes every other caller wait for that request however long it takes,
// and none of them can give up; with this lock a waiter can stop waiting
// when its context ends (LockContext). It is also what keeps the
// whole-fleet simulator's virtual clock moving: a goroutine waiting on a
// channel is "durably blocked" to testing/synctest, one waiting on a
// sync.Mutex is not, so a process paused in the middle of a request would
// otherwise stop every process's time.
//
// The zero value is an unlocked Mutex. A Mutex must not be copied after
// first use.
package ctxlock

import (
	"context"
	"sync"
)

// Mutex is a mutual-exclusion lock whose waiters may give up.
type Mutex struct {
	once sync.Once
	ch   chan struct{}
}

func (m *Mutex) init() { m.once.Do(func() { m.ch = make(chan struct{}, 1) }) }

// Lock locks m, waiting as long as it takes.
func (m *Mutex) Lock() {
	m.init()
	m.ch <- struct{}{}
}

// LockContext locks m, or returns ctx's error if ctx ends first (m is
// then not locked).
func (m *Mutex) LockContext(ctx context.Context) error {
	m.init()
	select {
	case m.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TryLock locks m if it is free and reports whether it did.
func (m *Mutex) TryLock() bool {
	m.init()
	select {
	case m.ch <- struct{}{}:
		return true
	default:
		return false
	}
}

// Unlock unlocks m. Unlocking an unlocked Mutex panics.
func (m *Mutex) Unlock() {
	m.init()
	select {
	case <-m.ch:
	default:
		panic("ctxlock: unlock of unlocked mutex")
	}
}
