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

// The options a worker is configured with document the same defaults as
// the keys they are configured by: each documented "Default X" of a field
// below (in the root package or the sub-package whose settings the root
// takes) must be the key's default as the configuration spells it.
func TestOptionDocsShowTheKeysDefaults(t *testing.T) {
	fields := map[string]string{
		"trafficcop.LeaseTiming.LeaseDuration":     "lease.duration",
		"trafficcop.Timing.PollEvery":              "lease.poll_every",
		"schedule.MoverSettings.PollEvery":         "mover.poll_every",
		"schedule.MoverSettings.Concurrency":       "mover.concurrency",
		"queue.ConsumerSettings.Concurrency":       "worker.concurrency",
		"queue.ConsumerSettings.VisibilityTimeout": "worker.visibility_timeout",
		"queue.ConsumerSettings.MaxRunTime":        "worker.max_run_time",
		"queue.ConsumerSettings.ShutdownGrace":     "worker.shutdown_grace",
		"queue.ConsumerSettings.PollMin":           "worker.poll_min",
		"queue.ConsumerSettings.PollMax":           "worker.poll_max",
		"queue.ConsumerSettings.MaxAttempts":       "retry.max_attempts",
		"queue.ConsumerSettings.MaxSnoozes":        "retry.max_snoozes",
		"queue.ConsumerSettings.BackoffBase":       "retry.backoff_base",
		"queue.ConsumerSettings.BackoffMax":        "retry.backoff_max",
		"queue.ConsumerSettings.PauseCheck":        "worker.pause_check",
		"queue.ConsumerSettings.PauseHold":         "worker.pause_hold",
		"queue.ConsumerSettings.CountersEvery":     "worker.counters_every",
		"blackboard.Settings.Cycle":                "blackboard.cycle",
		"RunsOptions.Retention":                    "runs.retention",
		"RunsOptions.RetentionFailed":              "runs.retention_failed",
		"RunsOptions.CleanEvery":                   "runs.clean_every",
		"ClientOptions.MaxPayload":                 "payload.max_size",
		"Names.Container":                          "names.container",
		"Names.LeaseBlob":                          "names.lease_blob",
		"Names.ScheduleTable":                      "names.schedule_table",
		"Names.RunsTable":                          "names.runs_table",
		"Names.BlackboardTable":                    "names.blackboard_table",
		"Names.Queue":                              "names.queue",
		"Names.PoisonQueue":                        "names.poison_queue",
	}
	docs := fieldDocs(t, "")
	for _, pkg := range []string{"trafficcop", "schedule", "queue", "blackboard"} {
		for k, v := range fieldDocs(t, pkg) {
			docs[pkg+"."+k] = v
		}
	}
	def := regexp.MustCompile(`Default\s+"?([^"\s]+?)"?[.;,]?(\s|$)`)
	for field, key := range fields {
		doc, ok := docs[field]
		if !ok {
			t.Errorf("field %s not found", field)
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

// fieldDocs returns the doc comment of every field of every struct type
// of the library's package in dir ("" for the root), by "Type.Field".
func fieldDocs(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "..", dir, "*.go"))
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
