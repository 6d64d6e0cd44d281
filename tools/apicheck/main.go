// Command apicheck fails when an exported identifier of one of leasecron's
// public packages exposes a type that a caller outside the module cannot
// name: a type from one of the module's internal packages, reached through
// a signature, a struct field, an interface method, a method of an exported
// type or an alias.
//
//	go run ./apicheck ..     (from tools/; the argument is the library's directory)
//
// It prints one line per exposure and exits 1 when there is any.
package main

import (
	"fmt"
	"go/types"
	"os"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

const module = "github.com/leasecron/leasecron"

// internal reports whether path is an internal package of the library
// (any path with an "internal" element below the module: internal/…, and
// a public package's own internal/ folder).
func internal(path string) bool {
	rest, ok := strings.CutPrefix(path, module+"/")
	if !ok {
		return false
	}
	for _, el := range strings.Split(rest, "/") {
		if el == "internal" {
			return true
		}
	}
	return false
}

type checker struct {
	seen  map[types.Type]bool
	leaks map[string]bool
}

func (c *checker) walk(where string, t types.Type) {
	if t == nil || c.seen[t] {
		return
	}
	c.seen[t] = true
	defer delete(c.seen, t)
	switch t := t.(type) {
	case *types.Alias:
		c.walk(where, types.Unalias(t))
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && internal(obj.Pkg().Path()) {
			c.leaks[fmt.Sprintf("%s: %s.%s", where, obj.Pkg().Path(), obj.Name())] = true
		}
		if ta := t.TypeArgs(); ta != nil {
			for i := 0; i < ta.Len(); i++ {
				c.walk(where, ta.At(i))
			}
		}
	case *types.Pointer:
		c.walk(where, t.Elem())
	case *types.Slice:
		c.walk(where, t.Elem())
	case *types.Array:
		c.walk(where, t.Elem())
	case *types.Map:
		c.walk(where, t.Key())
		c.walk(where, t.Elem())
	case *types.Chan:
		c.walk(where, t.Elem())
	case *types.Signature:
		for i := 0; i < t.Params().Len(); i++ {
			c.walk(where, t.Params().At(i).Type())
		}
		for i := 0; i < t.Results().Len(); i++ {
			c.walk(where, t.Results().At(i).Type())
		}
	case *types.Struct:
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() {
				c.walk(where+"."+f.Name(), f.Type())
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumMethods(); i++ {
			if m := t.Method(i); m.Exported() {
				c.walk(where+"."+m.Name(), m.Type())
			}
		}
		for i := 0; i < t.NumEmbeddeds(); i++ {
			c.walk(where, t.EmbeddedType(i))
		}
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: apicheck LIBRARY_DIR")
		os.Exit(2)
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedImports, Dir: os.Args[1]}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c := &checker{seen: map[types.Type]bool{}, leaks: map[string]bool{}}
	for _, p := range pkgs {
		if internal(p.PkgPath) || p.Name == "main" || p.Types == nil {
			continue
		}
		sc := p.Types.Scope()
		for _, name := range sc.Names() {
			obj := sc.Lookup(name)
			if !obj.Exported() {
				continue
			}
			where := p.PkgPath + "." + name
			if tn, ok := obj.(*types.TypeName); ok {
				if tn.IsAlias() {
					c.walk(where, obj.Type())
				} else {
					c.walk(where, obj.Type().Underlying())
				}
				if n, ok := types.Unalias(obj.Type()).(*types.Named); ok && !tn.IsAlias() {
					for i := 0; i < n.NumMethods(); i++ {
						if m := n.Method(i); m.Exported() {
							c.walk(where+"."+m.Name(), m.Type())
						}
					}
				}
				continue
			}
			c.walk(where, obj.Type())
		}
	}
	keys := make([]string, 0, len(c.leaks))
	for k := range c.leaks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Println(k)
	}
	fmt.Fprintf(os.Stderr, "apicheck: %d exported identifiers expose internal types\n", len(keys))
	if len(keys) > 0 {
		os.Exit(1)
	}
}
