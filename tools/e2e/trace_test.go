package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/leasecron/leasecron/schedule"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, err := io.ReadAll(req.Body)
	var in collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &in)
	}
	if err != nil || req.URL.Path != "/v1/traces" {
		http.Error(w, fmt.Sprintf("bad export to %s: %v", req.URL.Path, err), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, rs := range in.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// find returns the spans named name in trace tid.
func (r *otlpReceiver) find(name, tid string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name == name && hex.EncodeToString(s.TraceId) == tid {
			out = append(out, s)
		}
	}
	return out
}

// TestTraceFromNodeRow: a Node.js program (the @azure/data-tables SDK)
// inserts a schedule row with a TraceParent. A worker process with tracing
// turned on by the standard OTEL_* variables exports, to an in-process OTLP
// receiver, a leasecron.move and a leasecron.run span whose parent is that
// traceparent, and the exec handler's program sees TRACEPARENT naming the
// run span.
func TestTraceFromNodeRow(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	script, _ := filepath.Abs(filepath.Join("testdata", "insert-traced-row.mjs"))
	sdk := filepath.Join(filepath.Dir(script), "..", "..", "..", "node_modules", "@azure", "data-tables", "package.json")
	if _, serr := os.Stat(sdk); err != nil || serr != nil {
		if os.Getenv("LEASECRON_REQUIRE_AZURITE") != "" {
			t.Fatalf("node and the pinned @azure/data-tables are needed (run npm ci): node %v, SDK %v", err, serr)
		}
		t.Skipf("skipping: node or @azure/data-tables missing (run npm ci): %v %v", err, serr)
	}
	recv := &otlpReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	record := `printf '%s %s %s %s %s start\n' "$LEASECRON_TASK_ID" "$LEASECRON_DUE" "$(date +%s%N)" "$FLEET_WORKER" "$LEASECRON_GENERATION" >> "$FLEET_RECORD"`
	f := startFleet(t, 1, map[string]any{"handlers": map[string]any{
		"traced": map[string]any{"exec": []string{"/bin/sh", "-c", `printf '%s' "$TRACEPARENT" > "$FLEET_RECORD.tp.$LEASECRON_TASK_ID"; ` + record}},
	}}, "OTEL_EXPORTER_OTLP_ENDPOINT="+srv.URL, "OTEL_BSP_SCHEDULE_DELAY=200", "OTEL_SERVICE_NAME=leasecron-e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := f.WaitLeader(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// The table exists once a worker has started: insert the row as Node.
	const tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	rowKey := fmt.Sprintf("%019d_from-node", netTicks(time.Now()))
	cmd := exec.CommandContext(ctx, node, script, f.Azurite.ConnectionString(), schedule.DefaultTable, rowKey, "traced", "00-"+tid+"-"+sid+"-01")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node insert: %v\n%s", err, out)
	}
	lcWaitRecords(ctx, t, f, 30*time.Second, "from-node")
	seen, err := os.ReadFile(f.RecordFile + ".tp.from-node")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var runs, moves []*tracepb.Span
	for time.Now().Before(deadline) {
		if runs, moves = recv.find("leasecron.run", tid), recv.find("leasecron.move", tid); len(runs) > 0 && len(moves) > 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(runs) != 1 || len(moves) != 1 {
		t.Fatalf("spans in trace %s: %d run, %d move; want one each", tid, len(runs), len(moves))
	}
	run, move := runs[0], moves[0]
	if hex.EncodeToString(run.ParentSpanId) != sid || hex.EncodeToString(move.ParentSpanId) != sid {
		t.Fatalf("run span parent %x, move span parent %x; want the row's span %s", run.ParentSpanId, move.ParentSpanId, sid)
	}
	attrs := map[string]string{}
	for _, kv := range run.Attributes {
		attrs[kv.Key] = strings.Trim(kv.Value.String(), `"`)
	}
	if !strings.Contains(attrs["leasecron.task.id"], "from-node") || !strings.Contains(attrs["leasecron.task.type"], "traced") {
		t.Fatalf("run span attributes %v", attrs)
	}
	want := "00-" + tid + "-" + hex.EncodeToString(run.SpanId) + "-01"
	if string(seen) != want {
		t.Fatalf("the exec handler saw TRACEPARENT %q, want the run span %q", seen, want)
	}
	t.Logf("Node row %s → move span %x and run span %x in trace %s; the program saw %s", rowKey, move.SpanId, run.SpanId, tid, seen)
}
