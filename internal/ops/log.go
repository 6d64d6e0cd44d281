package ops

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/leasecron/leasecron/internal/storage"
)

// NewLogger returns the process logger writing to w.
//
// level is debug, info (the default for ""), warn or error, optionally
// with an offset ("info+2"). format is "json", "text", or "" / "auto":
// text when w is a terminal, JSON otherwise (containers, files, pipes).
//
// Every record passes through a redacting handler (see RedactingHandler):
// account keys and SAS signatures never reach the output, whatever is
// logged.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if level != "" {
		if err := lvl.UnmarshalText([]byte(strings.TrimSpace(level))); err != nil {
			return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
		}
	}
	opts := &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationsAsText}
	var h slog.Handler
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "text":
		h = slog.NewTextHandler(w, opts)
	case "", "auto":
		if isTerminal(w) {
			h = slog.NewTextHandler(w, opts)
		} else {
			h = slog.NewJSONHandler(w, opts)
		}
	default:
		return nil, fmt.Errorf("log format %q: want json, text or auto", format)
	}
	return slog.New(RedactingHandler(h)), nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// RedactingHandler wraps h so that storage.Redact is applied to every
// record's message and to every string-valued attribute, including error
// and Stringer values, values in groups and attributes added with With. A
// value of any other type (a struct, a map) whose printed form contains a
// secret is replaced by its redacted printed form.
func RedactingHandler(h slog.Handler) slog.Handler { return redactHandler{h} }

type redactHandler struct{ next slog.Handler }

func (r redactHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return r.next.Enabled(ctx, l)
}

func (r redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, storage.Redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return r.next.Handle(ctx, out)
}

func (r redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = redactAttr(a)
	}
	return redactHandler{r.next.WithAttrs(red)}
}

func (r redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{r.next.WithGroup(name)}
}

func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(storage.Redact(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]slog.Attr, len(g))
		for i, ga := range g {
			red[i] = redactAttr(ga)
		}
		a.Value = slog.GroupValue(red...)
	case slog.KindAny:
		var s string
		switch x := v.Any().(type) {
		case error:
			s = x.Error()
		case fmt.Stringer:
			s = x.String()
		case []byte:
			s = string(x)
		default:
			// Structs, maps and the like: if their printed form holds a
			// secret, log the redacted printed form instead.
			s = fmt.Sprintf("%+v", x)
		}
		if r := storage.Redact(s); r != s {
			a.Value = slog.StringValue(r)
		} else {
			a.Value = v
		}
	default:
		a.Value = v
	}
	return a
}

// durationsAsText writes durations as "1.5s" rather than nanoseconds, so a
// JSON log line reads the same as a text one.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
