package config

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's configuration table is exactly what `leasecron config
// --keys --markdown` prints: defaults are declared once (in the packages
// that apply them), and the documentation cannot drift from them.
func TestReadmeConfigurationTableIsTheKeyList(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "| key | default | meaning |")
	if start < 0 {
		t.Fatal("README has no configuration table (| key | default | meaning |)")
	}
	end := strings.Index(readme[start:], "\n\n")
	if end < 0 {
		end = len(readme) - start
	}
	got := readme[start:start+end] + "\n"
	var want bytes.Buffer
	if err := WriteMarkdown(&want); err != nil {
		t.Fatal(err)
	}
	if got != want.String() {
		gl, wl := strings.Split(got, "\n"), strings.Split(want.String(), "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("README configuration table line %d:\n got %s\nwant %s", i+1, g, w)
			}
		}
		t.Log("regenerate it with: make build && bin/leasecron config --keys --markdown")
	}
}

// The root package's options document the same defaults as the keys they
// are configured by: each documented "Default X" of a field below must be
// the key's default as the configuration spells it.
func TestRootOptionDocsShowTheKeysDefaults(t *testing.T) {
	fields := map[string]string{
		"LeaseOptions.Duration":             "lease.duration",
		"LeaseOptions.PollEvery":            "lease.poll_every",
		"MoverOptions.PollEvery":            "mover.poll_every",
		"MoverOptions.Concurrency":          "mover.concurrency",
		"ConsumerOptions.Concurrency":       "worker.concurrency",
		"ConsumerOptions.VisibilityTimeout": "worker.visibility_timeout",
		"ConsumerOptions.MaxRunTime":        "worker.max_run_time",
		"ConsumerOptions.ShutdownGrace":     "worker.shutdown_grace",
		"ConsumerOptions.PollMin":           "worker.poll_min",
		"ConsumerOptions.PollMax":           "worker.poll_max",
		"ConsumerOptions.MaxAttempts":       "retry.max_attempts",
		"ConsumerOptions.MaxSnoozes":        "retry.max_snoozes",
		"RunsOptions.Retention":             "runs.retention",
		"RunsOptions.RetentionFailed":       "runs.retention_failed",
		"RunsOptions.CleanEvery":            "runs.clean_every",
		"ConsumerOptions.BackoffBase":       "retry.backoff_base",
		"ConsumerOptions.BackoffMax":        "retry.backoff_max",
		"ConsumerOptions.PauseCheck":        "worker.pause_check",
		"ConsumerOptions.PauseHold":         "worker.pause_hold",
		"ConsumerOptions.CountersEvery":     "worker.counters_every",
		"BlackboardOptions.Cycle":           "blackboard.cycle",
		"ClientOptions.MaxPayload":          "payload.max_size",
		"Names.Container":                   "names.container",
		"Names.LeaseBlob":                   "names.lease_blob",
		"Names.ScheduleTable":               "names.schedule_table",
		"Names.RunsTable":                   "names.runs_table",
		"Names.BlackboardTable":             "names.blackboard_table",
		"Names.Queue":                       "names.queue",
		"Names.PoisonQueue":                 "names.poison_queue",
	}
	docs := rootFieldDocs(t)
	def := regexp.MustCompile(`Default\s+"?([^"\s]+?)"?[.;,]?(\s|$)`)
	for field, key := range fields {
		doc, ok := docs[field]
		if !ok {
			t.Errorf("root field %s not found", field)
			continue
		}
		m := def.FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("%s's doc states no default: %q", field, doc)
			continue
		}
		k := keyNamed(t, key)
		if m[1] != k.DefaultString() {
			t.Errorf("%s's doc says Default %s; %s's default is %s", field, m[1], key, k.DefaultString())
		}
	}
}

// rootFieldDocs returns the doc comment of every field of every struct type
// in the root package, by "Type.Field".
func rootFieldDocs(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "..", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return false
			}
			for _, fl := range st.Fields.List {
				for _, name := range fl.Names {
					out[ts.Name.Name+"."+name.Name] = strings.Join(strings.Fields(fl.Doc.Text()), " ")
				}
			}
			return false
		})
	}
	return out
}

func keyNamed(t *testing.T, name string) Key {
	t.Helper()
	for _, k := range Keys {
		if k.Name == name {
			return k
		}
	}
	t.Fatalf("no key %s", name)
	return Key{}
}

// Every key's default decodes: a default the decoder refused would make
// every configuration invalid.
func TestEveryDefaultIsValid(t *testing.T) {
	c, err := load(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lease.Duration.String() != "1m0s" || c.Worker.MaxRunTime.String() != "30m0s" || c.Payload.MaxSize != 1<<20 {
		t.Errorf("decoded defaults: lease %v, max run %v, payload %d", c.Lease.Duration, c.Worker.MaxRunTime, c.Payload.MaxSize)
	}
}
