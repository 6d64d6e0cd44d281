package config

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

// The deployment files ship configuration: the compose stack's YAML and
// the LEASECRON_* variables of docker-compose.yml and the Azure template.
// They must load through the real loader, or a stack would start with an
// "unknown key" error nobody saw here.
func TestDeploymentFilesLoad(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..")
	if _, err := Load(NewViper(), filepath.Join(root, "deploy", "compose", "leasecron.yaml")); err != nil {
		t.Fatalf("deploy/compose/leasecron.yaml: %v", err)
	}
	envRE := regexp.MustCompile(`\b(LEASECRON_[A-Z0-9_]+)\b`)
	seen := map[string]bool{}
	for _, f := range []string{"docker-compose.yml", filepath.Join("deploy", "azure", "azuredeploy.json")} {
		t.Run(f, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(root, f))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range envRE.FindAllStringSubmatch(string(b), -1) {
				if m[1][len(m[1])-1] != '_' { // prose such as LEASECRON_HANDLERS_<TYPE>_EXEC
					seen[m[1]] = true
				}
			}
		})
	}
	delete(seen, "LEASECRON_VERSION") // compose build argument, not read by leasecron
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 4 {
		t.Fatalf("found only %v: did the files move?", names)
	}
	for _, n := range names {
		t.Run(n, func(t *testing.T) {
			env := []string{n + "=" + sample(n)}
			v := NewViper()
			if err := applyDynamicEnv(v, env); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
		})
	}
}

func sample(name string) string {
	switch {
	case regexp.MustCompile(`_KIND$`).MatchString(name):
		return "log"
	}
	return "x"
}
