package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := writeResults(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: results:", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// writeResults merges this run's results into the results file and, for
// the full suite, regenerates the reliability document. CHAOS_RESULTS and
// CHAOS_DOC override where they go.
func writeResults() error {
	collectedMu.Lock()
	rs, bad := collected, badInputs
	collectedMu.Unlock()
	// CHAOS_RENDER=1 regenerates the document from the results file alone
	// (e.g. go test -tags chaos -run NONE ./chaos/ (in tools/) after editing
	// the report's text).
	if len(rs) == 0 && len(bad) == 0 && os.Getenv("CHAOS_RENDER") == "" {
		return nil
	}
	path := filepath.Join(os.TempDir(), "leasecron-chaos-short.json")
	doc := ""
	if fullSuite {
		path, doc = filepath.Join("results", "chaos.json"), filepath.Join("..", "..", "docs", "RELIABILITY.md")
		if chaosShards() > 1 {
			// A sharded run never overwrites the unsharded record.
			path, doc = filepath.Join("results", "chaos-shards.json"), filepath.Join("..", "..", "docs", "RELIABILITY-shards.md")
		}
	}
	if p := os.Getenv("CHAOS_RESULTS"); p != "" {
		path = p
	}
	if p := os.Getenv("CHAOS_DOC"); p != "" {
		doc = p
	}
	rep, err := LoadReport(path)
	if err != nil {
		return err
	}
	rep.Merge(rs, bad)
	rep.Machine = fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	if err := rep.Save(path); err != nil {
		return err
	}
	fmt.Printf("chaos: results in %s\n", path)
	if doc == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(doc, []byte(RenderMarkdown(rep)), 0o644); err != nil {
		return err
	}
	fmt.Printf("chaos: wrote %s\n", doc)
	return nil
}
