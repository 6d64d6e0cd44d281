package leasecrontype

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// RunProgress is how far a running task says it has come: the last report
// of its handler, kept in the run record after the run ends.
type RunProgress struct {
	// Percent is from 0 to 100.
	Percent int `json:"percent"`
	// Message says what the task is doing (at most MaxProgressMessage
	// bytes; may be empty).
	Message string `json:"message,omitempty"`
	// At is when the handler reported it; zero when the run has never
	// reported progress.
	At time.Time `json:"at"`
}

// Reported reports whether p holds a report.
func (p RunProgress) Reported() bool { return !p.At.IsZero() }

// String is "42%" or "42% copying files", or "" without a report.
func (p RunProgress) String() string {
	if !p.Reported() {
		return ""
	}
	if p.Message == "" {
		return strconv.Itoa(p.Percent) + "%"
	}
	return strconv.Itoa(p.Percent) + "% " + p.Message
}

// MaxProgressMessage is the most bytes of a progress message kept; a
// longer one is cut at a character boundary.
const MaxProgressMessage = 200

// ErrInvalidProgress is wrapped by a progress report whose percent is
// outside 0–100 or whose line cannot be read.
var ErrInvalidProgress = errors.New("invalid progress")

// ProgressLinePrefix starts the line an exec handler prints (on stdout or
// stderr) to report progress: "leasecron-progress: 42 copying files".
// ProgressHeader is the header of the 1xx informational responses (102
// Processing or 103 Early Hints) an HTTP endpoint sends to report
// progress before its final answer, with the same value: "42 copying files".
const (
	ProgressLinePrefix = "leasecron-progress:"
	ProgressHeader     = "Leasecron-Progress"
)

// NewProgress checks percent and trims message, returning the report
// (without its time: whoever records it stamps At); a percent outside
// 0–100 wraps ErrInvalidProgress, naming the value.
func NewProgress(percent int, message string) (RunProgress, error) {
	if percent < 0 || percent > 100 {
		return RunProgress{}, fmt.Errorf("%w: percent %d: want 0 to 100", ErrInvalidProgress, percent)
	}
	message = strings.TrimSpace(message)
	if len(message) > MaxProgressMessage {
		cut := MaxProgressMessage
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut]
	}
	return RunProgress{Percent: percent, Message: message}, nil
}

// ParseProgress reads the value of a progress line (after
// ProgressLinePrefix) or header: a whole percent from 0 to 100, then
// optionally a space and a message. A value that is not of that form
// wraps ErrInvalidProgress, naming it.
func ParseProgress(value string) (RunProgress, error) {
	value = strings.TrimSpace(value)
	num, msg, _ := strings.Cut(value, " ")
	pct, err := strconv.Atoi(strings.TrimSuffix(num, "%"))
	if err != nil {
		return RunProgress{}, fmt.Errorf("%w: %q: want a whole percent from 0 to 100, then optionally a space and a message", ErrInvalidProgress, value)
	}
	return NewProgress(pct, msg)
}

// ProgressFunc receives a running task's progress reports (At not yet
// set). The queue consumer gives every handler's context one
// (WithProgressFunc); it stamps the time and decides how often a report is
// written.
type ProgressFunc func(RunProgress)

type progressKey struct{}

// WithProgressFunc returns a context whose progress reports go to f. Tests
// of a handler can use it to see what the handler reported.
func WithProgressFunc(ctx context.Context, f ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// ReportProgress reports the running task's progress: percent from 0 to
// 100 and what it is doing. It returns an error wrapping
// ErrInvalidProgress for a percent out of range; outside a handler (no
// ProgressFunc in ctx) it does nothing.
//
// Reports are cheap: the consumer writes at most one per
// ConsumerOptions.ProgressEvery (the latest), and the last one when the
// attempt ends.
func ReportProgress(ctx context.Context, percent int, message string) error {
	p, err := NewProgress(percent, message)
	if err != nil {
		return err
	}
	if f, ok := ctx.Value(progressKey{}).(ProgressFunc); ok && f != nil {
		f(p)
	}
	return nil
}
