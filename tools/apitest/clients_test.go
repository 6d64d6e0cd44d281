package apitest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTypeScriptTypesFollowTheDocument: every interface of the TypeScript
// client's types.ts named after a schema of openapi.json has exactly the
// schema's properties, optional where the schema does not require them
// (TaskSpec's type aside, which the server requires itself). A change to
// the document that the client does not follow fails here.
func TestTypeScriptTypesFollowTheDocument(t *testing.T) {
	src, err := os.ReadFile("../../clients/typescript/src/types.ts")
	if err != nil {
		t.Fatal(err)
	}
	s := loadSpec(t)
	schemas := s.doc["components"].(map[string]any)["schemas"].(map[string]any)
	iface := regexp.MustCompile(`(?ms)^export interface (\w+) \{\n(.*?)^\}`)
	prop := regexp.MustCompile(`(?m)^  (\w+)(\??):`)
	checked := 0
	for _, m := range iface.FindAllStringSubmatch(string(src), -1) {
		name, body := m[1], m[2]
		sc, ok := schemas[name].(map[string]any)
		if !ok {
			continue // the client's own (query and option types)
		}
		checked++
		props, _ := sc["properties"].(map[string]any)
		var required []string
		for _, r := range asList(sc["required"]) {
			required = append(required, r.(string))
		}
		seen := map[string]bool{}
		for _, p := range prop.FindAllStringSubmatch(body, -1) {
			field, optional := p[1], p[2] == "?"
			seen[field] = true
			if _, ok := props[field]; !ok {
				t.Errorf("types.ts %s.%s: not a property of the schema %s", name, field, name)
				continue
			}
			if optional == slices.Contains(required, field) && !(name == "TaskSpec" && field == "type") {
				t.Errorf("types.ts %s.%s: optional is %v, but the schema's required list says %v", name, field, optional, !optional)
			}
		}
		for field := range props {
			if !seen[field] {
				t.Errorf("types.ts %s: no %s, a property of the schema", name, field)
			}
		}
	}
	if checked < 8 {
		t.Errorf("only %d interfaces of types.ts are named after schemas of openapi.json", checked)
	}
	if strings.Contains(string(src), "any;") {
		t.Error("types.ts uses any")
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }
