package handler

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
)

// reports returns a context that collects progress reports and output,
// and a func that reads both.
func reports() (context.Context, func() ([]leasecrontype.RunProgress, string)) {
	var mu sync.Mutex
	var got []leasecrontype.RunProgress
	ctx, out := capture()
	ctx = leasecrontype.WithProgressFunc(ctx, func(p leasecrontype.RunProgress) {
		mu.Lock()
		got = append(got, p)
		mu.Unlock()
	})
	return ctx, func() ([]leasecrontype.RunProgress, string) {
		mu.Lock()
		defer mu.Unlock()
		o, _ := out()
		return append([]leasecrontype.RunProgress(nil), got...), o
	}
}

func progressStrings(ps []leasecrontype.RunProgress) []string {
	var s []string
	for _, p := range ps {
		p.At = time.Now() // the consumer stamps reports; here they are only printed
		s = append(s, p.String())
	}
	return s
}

// Progress lines are taken out of the output whatever the writes' sizes
// (split anywhere, several in one write, the last without a newline);
// other lines, and a progress line that cannot be read, pass through.
func TestProgressLinesSplitAnywhere(t *testing.T) {
	out := "building\n" +
		"leasecron-progress: 10 fetching\n" +
		"leasecron-progress without the colon\n" +
		"leasecron-progress: lots\n" +
		"leasecron-progress: 55\r\n" +
		"lea\n" +
		"leasecron-progress: 100% done"
	for _, size := range []int{1, 2, 3, 7, 20, len(out)} {
		ctx, got := reports()
		var logs bytes.Buffer
		var sink bytes.Buffer
		f := newProgressLines(ctx, slog.New(slog.NewTextHandler(&logs, nil)), "t1", &sink)
		for b := []byte(out); len(b) > 0; {
			n := min(size, len(b))
			if _, err := f.Write(b[:n]); err != nil {
				t.Fatal(err)
			}
			b = b[n:]
		}
		f.flush()
		ps, _ := got()
		if g := strings.Join(progressStrings(ps), "|"); g != "10% fetching|55%|100% done" {
			t.Errorf("writes of %d bytes: reports %q", size, g)
		}
		want := "building\nleasecron-progress without the colon\nleasecron-progress: lots\nlea\n"
		if sink.String() != want {
			t.Errorf("writes of %d bytes: output %q, want %q", size, sink.String(), want)
		}
		if !strings.Contains(logs.String(), `\"lots\"`) || !strings.Contains(logs.String(), "0 to 100") {
			t.Errorf("writes of %d bytes: the unreadable line was not logged with what is accepted: %s", size, logs.String())
		}
	}
}

// A line longer than any progress line passes through untouched.
func TestProgressLinesLongLinePassesThrough(t *testing.T) {
	ctx, got := reports()
	var sink bytes.Buffer
	f := newProgressLines(ctx, slog.New(slog.DiscardHandler), "t1", &sink)
	long := "leasecron-progress: 5 " + strings.Repeat("x", 2*maxProgressLine) + "\n"
	_, _ = f.Write([]byte(long))
	f.flush()
	if ps, _ := got(); len(ps) != 0 || sink.String() != long {
		t.Errorf("reports %v, output %d bytes; want none and the line as it was (%d bytes)", ps, sink.Len(), len(long))
	}
}

// An exec program reports on stdout and stderr; the run's output keeps
// what is not progress.
func TestExecReportsProgress(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("uses /bin/sh")
	}
	t.Parallel()
	h := mustExec(t, ExecOptions{Argv: []string{"/bin/sh", "-c",
		`echo start; echo "leasecron-progress: 25 a quarter"; echo "leasecron-progress: 75 three quarters" >&2; echo end`}})
	ctx, got := reports()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatal(err)
	}
	ps, out := got()
	if g := strings.Join(progressStrings(ps), "|"); g != "25% a quarter|75% three quarters" {
		t.Errorf("reports %q", g)
	}
	if out != "start\nend\n" {
		t.Errorf("output %q, want the lines that are not progress", out)
	}
}

// An HTTP endpoint reports with 1xx informational responses carrying
// Leasecron-Progress, before its final answer.
func TestHTTPReportsProgress(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, v := range []string{"20 reading", "lots", "90 writing"} {
			w.Header().Set(leasecrontype.ProgressHeader, v)
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Del(leasecrontype.ProgressHeader)
		w.Header().Set(leasecrontype.ProgressHeader, "100 done")
		w.WriteHeader(http.StatusProcessing)
		w.Header().Del(leasecrontype.ProgressHeader)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	h := mustHTTP(t, HTTPOptions{URL: srv.URL})
	ctx, got := reports()
	if err := h(ctx, sampleTask("")); err != nil {
		t.Fatal(err)
	}
	ps, out := got()
	if g := strings.Join(progressStrings(ps), "|"); g != "20% reading|90% writing|100% done" {
		t.Errorf("reports %q", g)
	}
	if out != "ok" {
		t.Errorf("output %q", out)
	}
}
