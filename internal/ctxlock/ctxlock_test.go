package ctxlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestMutex(t *testing.T) {
	var m Mutex
	m.Lock()
	if m.TryLock() {
		t.Fatal("TryLock of a locked mutex succeeded")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := m.LockContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockContext of a locked mutex whose context ends: %v", err)
	}
	m.Unlock()
	if err := m.LockContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.Unlock()
	defer func() {
		if recover() == nil {
			t.Fatal("unlock of an unlocked mutex did not panic")
		}
	}()
	m.Unlock()
}

// A waiter is durably blocked: virtual time moves while the holder sleeps.
func TestWaiterLetsVirtualTimeMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m Mutex
		m.Lock()
		go func() {
			time.Sleep(time.Hour)
			m.Unlock()
		}()
		start := time.Now()
		m.Lock()
		if waited := time.Since(start); waited != time.Hour {
			t.Fatalf("waited %v, want the holder's hour", waited)
		}
		m.Unlock()
	})
}
