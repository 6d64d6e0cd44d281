// Package trunc shortens text for storage and display without ever cutting
// a UTF-8 character in half: Head keeps the start of a string, Tail its
// end, and Writer keeps the end of a stream in bounded memory. Every
// truncation in leasecron (error texts, output tails, previews) goes
// through here.
package trunc

import (
	"strings"
	"sync"
	"unicode/utf8"
)

// Ellipsis marks where text was cut.
const Ellipsis = "…"

// Head returns at most n bytes of the start of s, cut on a rune boundary,
// with "…" appended when something was cut (the ellipsis counts towards n).
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len(Ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + Ellipsis
}

// Tail returns at most n bytes of the end of s, cut on a rune boundary,
// with "…" prepended when something was cut (the ellipsis counts towards
// n).
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	start := min(len(s)-max(n-len(Ellipsis), 0), len(s))
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return Ellipsis + s[start:]
}

// Writer is an io.Writer that keeps only the last n bytes written; memory
// use is n bytes whatever the volume written. It is safe for concurrent
// use.
type Writer struct {
	mu    sync.Mutex
	buf   []byte // len(buf) == n once full; ring with next write at pos
	n     int
	pos   int
	total int64
}

// NewWriter returns a Writer that keeps the last n bytes.
func NewWriter(n int) *Writer { return &Writer{n: n, buf: make([]byte, 0, n)} }

// Write implements io.Writer; it never fails.
func (t *Writer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += int64(len(p))
	if t.n == 0 {
		return len(p), nil
	}
	written := len(p)
	if len(p) >= t.n {
		// Only the last n bytes of p can survive.
		t.buf = append(t.buf[:0], p[len(p)-t.n:]...)
		t.pos = 0
		return written, nil
	}
	if room := t.n - len(t.buf); room > 0 {
		// Not yet full: append.
		k := min(room, len(p))
		t.buf = append(t.buf, p[:k]...)
		p = p[k:]
		if len(p) == 0 {
			return written, nil
		}
	}
	// Full: overwrite in a ring starting at pos.
	for len(p) > 0 {
		k := copy(t.buf[t.pos:], p)
		p = p[k:]
		t.pos = (t.pos + k) % t.n
	}
	return written, nil
}

// Total returns the number of bytes ever written.
func (t *Writer) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// String returns the kept bytes in order, as valid UTF-8: when the start
// was cut inside a multi-byte character the partial character is dropped,
// and other invalid bytes are replaced.
func (t *Writer) String() string {
	t.mu.Lock()
	b := make([]byte, 0, len(t.buf))
	b = append(b, t.buf[t.pos:]...)
	b = append(b, t.buf[:t.pos]...)
	truncated := t.total > int64(len(t.buf))
	t.mu.Unlock()
	if truncated {
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
			b = b[1:]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
