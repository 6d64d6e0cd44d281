package trafficcop

import "sync"

// hookQueue runs callbacks in order on one goroutine of its own, so that a
// slow callback delays later callbacks but never the caller (river's elector
// publishes leadership changes the same way: subscribers cannot block it).
type hookQueue struct {
	mu      sync.Mutex
	pending []func()
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

func newHookQueue() *hookQueue {
	q := &hookQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.loop()
	return q
}

// push queues f; it never blocks.
func (q *hookQueue) push(f func()) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.pending = append(q.pending, f)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// close runs what is queued and waits for it.
func (q *hookQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.done
}

func (q *hookQueue) loop() {
	defer close(q.done)
	for range q.wake {
		for {
			q.mu.Lock()
			if len(q.pending) == 0 {
				closed := q.closed
				q.mu.Unlock()
				if closed {
					return
				}
				break
			}
			f := q.pending[0]
			q.pending = q.pending[1:]
			q.mu.Unlock()
			f()
		}
	}
}
