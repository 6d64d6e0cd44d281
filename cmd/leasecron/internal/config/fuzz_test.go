package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad: a configuration file of any text — YAML or not, known keys
// with bad values, durations, rates, limits, handler tables — loads or is
// refused with ErrInvalid, never a panic.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		"storage:\n  connection_string: UseDevelopmentStorage=true\nworker:\n  concurrency: 8\n  poll_min: 100ms\n",
		"mover:\n  poll_every: 5s\n  max_depth: 100\nqueue:\n  max_depth: 10\n  resume_below: 5\n",
		"limits:\n  mail: 2\n  report: 0\n",
		"handlers:\n  mail:\n    exec: [\"/bin/echo\", \"hi\"]\n    timeout: 1m\n  web:\n    url: http://127.0.0.1:9/x\n",
		"worker:\n  poll_min: soon\n", "worker:\n  concurrency: -1\n", "lease:\n  duration: 5s\n", "nonsense: 1\n",
		"log:\n  level: loud\n", "admin:\n  addr: 0.0.0.0:8080\n", "{", "- a\n- b\n", "", "\t", "a: &x [*x]\n",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text string) {
		file := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(NewViper(), file)
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Load(%q) = %v: not ErrInvalid", text, err)
		}
	})
}
