package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// readmeBlock returns the fenced code block of lang that follows the
// README line starting with after.
func readmeBlock(t *testing.T, after, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+after)
	if i < 0 {
		t.Fatalf("README: no line %q", after)
	}
	s = s[i:]
	j := strings.Index(s, "```"+lang+"\n")
	if j < 0 {
		t.Fatalf("README: no %s block after %q", lang, after)
	}
	s = s[j+len("```"+lang+"\n"):]
	return s[:strings.Index(s, "```")]
}

// TestTableContractSnippets runs the README's Python and Node table
// contract snippets as they are printed (the Python one with
// azure-data-tables, Debian's python3-azure, and a stand-in for
// opentelemetry's inject; the Node one with @azure/data-tables and
// @opentelemetry/api from package.json) against Azurite, and checks that
// leasecron reads the row each wrote as the task they describe.
func TestTableContractSnippets(t *testing.T) {
	t.Parallel()
	f := startFleet(t, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := f.Client()
	if err != nil {
		t.Fatal(err)
	}
	// The table exists once a client has scheduled.
	if _, err := c.Schedule(ctx, leasecron.Item{ID: "first", Type: "mail", Due: time.Now().Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	root, err := proc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "opentelemetry"), 0o755); err != nil {
		t.Fatal(err)
	}
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for name, src := range map[string]string{
		"opentelemetry/__init__.py":  "",
		"opentelemetry/propagate.py": "def inject(carrier):\n    carrier['traceparent'] = '" + traceparent + "'\n",
		"snippet.py":                 "import sys\nconn = sys.argv[1]\n" + readmeBlock(t, "Python (`azure-data-tables`):", "python"),
		"snippet.mjs": `import { TableClient } from "@azure/data-tables";
const client = TableClient.fromConnectionString(process.argv[2], "ScheduledItems", { allowInsecureConnection: true });
` + readmeBlock(t, "Node (`@azure/data-tables`):", "js"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Node resolves packages from the script's folder up: the
	// repository's node_modules, linked.
	if err := os.Symlink(filepath.Join(root, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct {
		name  string
		cmd   *exec.Cmd
		trace string
	}{
		{"python", exec.CommandContext(ctx, "/usr/bin/python3", filepath.Join(dir, "snippet.py"), f.ConnectionString()), traceparent},
		{"node", exec.CommandContext(ctx, "node", filepath.Join(dir, "snippet.mjs"), f.ConnectionString()), ""},
	} {
		run.cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		run.cmd.Dir = root
		before := time.Now()
		if out, err := run.cmd.CombinedOutput(); err != nil {
			t.Fatalf("the README's %s snippet: %v\n%s", run.name, err, out)
		}
		it, err := c.Get(ctx, "invoice-42")
		if err != nil {
			t.Fatalf("%s: the row is not a task leasecron finds: %v", run.name, err)
		}
		if it.Type != "mail" || it.Payload != `{"invoice": 42}` || it.TraceParent != run.trace ||
			it.Due.Before(before.Add(5*time.Minute-time.Second)) || it.Due.After(time.Now().Add(5*time.Minute+time.Second)) {
			t.Errorf("%s: leasecron reads %+v", run.name, it)
		}
		if _, err := c.Cancel(ctx, "invoice-42"); err != nil {
			t.Fatal(err)
		}
	}
}
