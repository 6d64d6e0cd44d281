package queue

import (
	"context"
	"errors"
	"io"
	"sync"
)

// MaxOutputTail is how much of a task's output, in bytes, the consumer
// keeps for its run record (the end is kept).
const MaxOutputTail = 4 << 10

// Output returns a writer for the running task's output. Whatever a
// handler writes there is kept (its last MaxOutputTail bytes) and recorded
// in the run record when the attempt ends, whether it succeeds or fails.
// Outside a handler it returns io.Discard.
func Output(ctx context.Context) io.Writer {
	if t, ok := ctx.Value(outputKey{}).(*tailBuffer); ok {
		return t
	}
	return io.Discard
}

// WithOutput returns err carrying output: a handler that captured its
// output elsewhere (an exec handler's stderr, say) returns its failure this
// way and the consumer records tail in the run record. WithOutput(nil, …)
// is nil.
func WithOutput(err error, tail string) error {
	if err == nil {
		return nil
	}
	return &outputError{err: err, tail: tail}
}

// OutputOf returns the output carried by err (see WithOutput), or "".
func OutputOf(err error) string {
	var oe *outputError
	if errors.As(err, &oe) {
		return oe.tail
	}
	return ""
}

type outputError struct {
	err  error
	tail string
}

func (e *outputError) Error() string { return e.err.Error() }
func (e *outputError) Unwrap() error { return e.err }

type outputKey struct{}

// tailBuffer keeps the last n bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	n   int
	buf []byte
}

func newTailBuffer(n int) *tailBuffer { return &tailBuffer{n: n} }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.n {
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.n; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
