// Command layercheck counts the import arrows between leasecron's folders
// and fails when one runs against the layering (docs/design.md):
//
//	0 leasecrontype       the shared vocabulary
//	1 internal/, azurite  building blocks (azurite starts the emulator)
//	2 trafficcop, schedule, queue, blackboard, handler   services
//	3 the root package    the embedding API
//	4 dashboard, api      the web UI and the HTTP API over the root's Client
//	5 cmd/leasecron       the command (a module of its own)
//	6 tools, examples     tests, benchmarks, the reliability suite, demos
//
// A package may import its own layer and those below it, never one above.
// Test files count too.
//
//	go run ./layercheck ..     (from tools/; the argument is the repository)
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/leasecron/leasecron"

// layer returns the layer of a package of the repository, or -1.
func layer(path string) int {
	rest, ok := strings.CutPrefix(path, module)
	if !ok {
		return -1
	}
	rest = strings.TrimPrefix(rest, "/")
	top, _, _ := strings.Cut(rest, "/")
	switch top {
	case "":
		return 3
	case "leasecrontype":
		return 0
	case "internal", "azurite":
		return 1
	case "trafficcop", "schedule", "queue", "blackboard", "handler":
		return 2
	case "dashboard", "api":
		return 4
	case "cmd":
		return 5
	case "tools", "examples":
		return 6
	}
	return -1
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: layercheck REPOSITORY_DIR")
		os.Exit(2)
	}
	arrows := map[[2]string]bool{}
	var bad []string
	for _, mod := range []string{".", "cmd/leasecron", "tools", "examples"} {
		cfg := &packages.Config{Mode: packages.NeedName | packages.NeedImports, Dir: filepath.Join(os.Args[1], mod), Tests: true}
		pkgs, err := packages.Load(cfg, "./...")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, p := range pkgs {
			from := strings.TrimSuffix(p.PkgPath, "_test")
			if strings.HasSuffix(p.ID, ".test") || layer(from) < 0 {
				continue
			}
			for imp := range p.Imports {
				if imp == from || layer(imp) < 0 || arrows[[2]string{from, imp}] {
					continue
				}
				arrows[[2]string{from, imp}] = true
				if layer(from) < layer(imp) {
					bad = append(bad, fmt.Sprintf("%s (layer %d) imports %s (layer %d)", from, layer(from), imp, layer(imp)))
				}
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		fmt.Println(b)
	}
	fmt.Fprintf(os.Stderr, "layercheck: %d import arrows between folders, %d against the layering\n", len(arrows), len(bad))
	if len(bad) > 0 {
		os.Exit(1)
	}
}
