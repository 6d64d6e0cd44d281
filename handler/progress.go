package handler

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptrace"
	"net/textproto"
	"sync"

	"github.com/leasecron/leasecron/leasecrontype"
)

// report passes a progress value (a progress line's or header's) to the
// running task's progress (leasecrontype.ReportProgress); a value that
// cannot be read is logged with what is accepted, and reported false.
func report(ctx context.Context, log *slog.Logger, taskID, value string) bool {
	p, err := leasecrontype.ParseProgress(value)
	if err != nil {
		log.Warn("progress report ignored", "task_id", taskID, "err", err)
		return false
	}
	_ = leasecrontype.ReportProgress(ctx, p.Percent, p.Message)
	return true
}

// maxProgressLine is the longest line looked at as a progress line: a
// longer one passes into the output as it is.
const maxProgressLine = 64 + leasecrontype.MaxProgressMessage

// progressLines passes an exec handler's output to next, except lines
// starting with leasecrontype.ProgressLinePrefix, which report progress
// instead (a line that cannot be read as progress stays in the output, so
// the run record shows it). Other output streams through as written: only
// the start of a line that may be a progress line is held.
type progressLines struct {
	ctx    context.Context
	log    *slog.Logger
	taskID string
	next   io.Writer

	mu      sync.Mutex
	buf     []byte // the start of a line that may be a progress line
	passing bool   // inside a line that is not one
}

var progressPrefix = []byte(leasecrontype.ProgressLinePrefix)

func newProgressLines(ctx context.Context, log *slog.Logger, taskID string, next io.Writer) *progressLines {
	return &progressLines{ctx: ctx, log: log, taskID: taskID, next: next}
}

// Write implements io.Writer; it never fails (next is a trunc.Writer).
func (f *progressLines) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		nl := bytes.IndexByte(p, '\n')
		chunk := p
		if nl >= 0 {
			chunk = p[:nl+1]
		}
		p = p[len(chunk):]
		if f.passing {
			_, _ = f.next.Write(chunk)
			f.passing = nl < 0
			continue
		}
		f.buf = append(f.buf, chunk...)
		switch {
		case !mayBeProgress(f.buf) || len(f.buf) > maxProgressLine:
			_, _ = f.next.Write(f.buf)
			f.buf = f.buf[:0]
			f.passing = nl < 0
		case nl >= 0:
			f.line()
		}
	}
	return n, nil
}

// mayBeProgress reports whether b (the start of a line) is or may become
// a progress line.
func mayBeProgress(b []byte) bool {
	if len(b) >= len(progressPrefix) {
		return bytes.HasPrefix(b, progressPrefix)
	}
	return bytes.HasPrefix(progressPrefix, b)
}

// line handles the held line (a whole one, or the rest at the end).
func (f *progressLines) line() {
	b := f.buf
	f.buf = f.buf[:0]
	if !bytes.HasPrefix(b, progressPrefix) {
		_, _ = f.next.Write(b)
		return
	}
	value := string(bytes.TrimRight(b[len(progressPrefix):], "\r\n"))
	if !report(f.ctx, f.log, f.taskID, value) {
		_, _ = f.next.Write(b)
	}
}

// flush handles a last line without a newline once the output has ended.
func (f *progressLines) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.buf) > 0 {
		f.line()
	}
}

// withProgressHeaders returns ctx with a client trace that reports the
// progress carried by 1xx informational responses (102 Processing, 103
// Early Hints) in their leasecrontype.ProgressHeader.
func withProgressHeaders(ctx context.Context, log *slog.Logger, taskID string) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			for _, v := range h.Values(leasecrontype.ProgressHeader) {
				report(ctx, log, taskID, v)
			}
			return nil
		},
	})
}
