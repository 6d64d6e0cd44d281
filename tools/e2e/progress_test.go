package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
)

// TestProgressExecAndHTTP: an exec program reports progress with lines on
// stdout and stderr, an HTTP endpoint with 103 Early Hints responses;
// `status --json` shows a report while each runs and the last one after,
// `status` and `runs` print it, and the exec program's output keeps only
// its other lines.
func TestProgressExecAndHTTP(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Leasecron-Progress", "40 fetched the page")
		w.WriteHeader(http.StatusEarlyHints)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Leasecron-Progress", "100 stored")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Leasecron-Progress")
		io.WriteString(w, "stored")
	}))
	defer srv.Close()
	gate := t.TempDir() + "/go"
	f := startFleet(t, 1, map[string]any{
		"worker": map[string]any{"progress_every": "500ms"},
		"handlers": map[string]any{
			"prog": map[string]any{"exec": []string{"/bin/sh", "-c",
				`echo begin; echo "leasecron-progress: 30 a third" >&2; while [ ! -e "` + gate + `" ]; do sleep 0.1; done; echo "leasecron-progress: 100% all done"; echo end`}},
			"hook": map[string]any{"kind": "http", "http": srv.URL},
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := leaderClient(ctx, t, f)
	for _, it := range []leasecron.Item{{ID: "px", Type: "prog", Due: time.Now()}, {ID: "ph", Type: "hook", Due: time.Now()}} {
		if _, err := cl.Schedule(ctx, it, nil); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{"px": "30 a third", "ph": "40 fetched the page"} {
		lcWaitStatus(ctx, t, f, id, 30*time.Second, "running with progress "+want, func(s lcStatus) bool {
			return s.Run != nil && s.Run.State == "running" && s.Run.Progress != nil &&
				fmt.Sprintf("%d %s", s.Run.Progress.Percent, s.Run.Progress.Message) == want
		})
	}
	if text := lcCLI(ctx, t, f, "status", "px"); !strings.Contains(text, "progress") || !strings.Contains(text, "30% a third") {
		t.Errorf("status does not print the progress:\n%s", text)
	}
	if text := lcCLI(ctx, t, f, "runs", "--state", "running"); !strings.Contains(text, "PROGRESS") || !strings.Contains(text, "30% a third") {
		t.Errorf("runs does not print the progress:\n%s", text)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	close(release)
	for id, want := range map[string]string{"px": "100 all done", "ph": "100 stored"} {
		st := lcWaitStatus(ctx, t, f, id, 30*time.Second, "succeeded with progress "+want, func(s lcStatus) bool {
			return s.Run != nil && s.Run.State == "succeeded" && s.Run.Progress != nil &&
				fmt.Sprintf("%d %s", s.Run.Progress.Percent, s.Run.Progress.Message) == want
		})
		if id == "px" && st.Run.OutputTail != "begin\nend\n" {
			t.Errorf("the exec program's output %q, want its lines that are not progress", st.Run.OutputTail)
		}
	}
}
