package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/viper"
)

// envAllowed lists LEASECRON_* variables that are not configuration keys.
var envAllowed = map[string]bool{
	"LEASECRON_REQUIRE_AZURITE": true,
	"LEASECRON_AZURITE_BIN":     true,
	"LEASECRON_CONFIG":          true,
	"LEASECRON_BIN":             true,
	// LEASECRON_LONG turns on the long tests (make test-long), whose
	// workers inherit it.
	"LEASECRON_LONG": true,
}

// NewViper returns a viper instance with every default set and the
// environment bound: LEASECRON_ + the key in upper case with '.' as '_'
// (LEASECRON_STORAGE_CONNECTION_STRING), plus LEASECRON_HANDLERS_<TYPE>_<FIELD>
// and LEASECRON_LIMITS_<TYPE>.
func NewViper() *viper.Viper {
	v := viper.New()
	v.SetConfigType("yaml")
	for _, k := range Keys {
		v.SetDefault(k.Name, k.Default)
		_ = v.BindEnv(k.Name, k.Env())
	}
	_ = v.BindEnv("storage.connection_string", "LEASECRON_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_CONNECTION_STRING")
	for old := range Renamed {
		_ = v.BindEnv(old, envName(old))
	}
	return v
}

// applyDynamicEnv maps LEASECRON_HANDLERS_<TYPE>_<FIELD> and
// LEASECRON_LIMITS_<TYPE> into v and reports LEASECRON_* variables that name
// no key.
func applyDynamicEnv(v *viper.Viper, env []string) error {
	static := map[string]bool{}
	for _, k := range Keys {
		static[k.Env()] = true
	}
	for old := range Renamed {
		static[envName(old)] = true
	}
	// Read by the library's crash tests (internal/failpoint), not a key.
	static["LEASECRON_FAILPOINT"] = true
	var problems []string
	overlay := map[string]any{}
	handlers := map[string]any{}
	limits := map[string]any{}
	types := map[string]any{}
	for _, kv := range env {
		name, val, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "LEASECRON_") || static[name] || envAllowed[name] {
			continue
		}
		rest := strings.ToLower(strings.TrimPrefix(name, "LEASECRON_"))
		switch {
		case strings.HasPrefix(rest, "handlers_"):
			body := strings.TrimPrefix(rest, "handlers_")
			i := strings.LastIndex(body, "_")
			if i <= 0 || !handlerFields[body[i+1:]] {
				problems = append(problems, fmt.Sprintf("environment %s: want LEASECRON_HANDLERS_<TYPE>_<KIND|EXEC|HTTP|METHOD|TIMEOUT>", name))
				continue
			}
			typ, field := body[:i], body[i+1:]
			if field == "headers" {
				// A mapping of names to values has no one-string form.
				problems = append(problems, fmt.Sprintf("environment %s: handler headers are a mapping of names to values; set handlers.%s.headers in the configuration file (want LEASECRON_HANDLERS_<TYPE>_<KIND|EXEC|HTTP|METHOD|TIMEOUT>)", name, typ))
				continue
			}
			h, _ := handlers[typ].(map[string]any)
			if h == nil {
				h = map[string]any{}
				handlers[typ] = h
			}
			if field == "exec" {
				h[field] = strings.Fields(val)
			} else {
				h[field] = val
			}
		case strings.HasPrefix(rest, "types_"):
			body := strings.TrimPrefix(rest, "types_")
			// The field is the suffix (fair_key holds a '_' itself, as
			// a type may).
			typ, field := "", ""
			for _, f := range []string{"_fair_key", "_queue", "_priority"} {
				if t, ok := strings.CutSuffix(body, f); ok && t != "" {
					typ, field = t, f[1:]
					break
				}
			}
			if field == "" {
				problems = append(problems, fmt.Sprintf("environment %s: want LEASECRON_TYPES_<TYPE>_<QUEUE|PRIORITY|FAIR_KEY>", name))
				continue
			}
			m, _ := types[typ].(map[string]any)
			if m == nil {
				m = map[string]any{}
				types[typ] = m
			}
			m[field] = val
		case strings.HasPrefix(rest, "limits_"):
			body := strings.TrimPrefix(rest, "limits_")
			typ, field := body, ""
			for _, f := range []string{"_rate_key", "_rate", "_concurrency"} {
				if t, ok := strings.CutSuffix(body, f); ok && t != "" {
					typ, field = t, f[1:]
					break
				}
			}
			if field == "" {
				field = "concurrency"
			}
			m, _ := limits[typ].(map[string]any)
			if m == nil {
				m = map[string]any{}
				limits[typ] = m
			}
			m[field] = val
		default:
			problems = append(problems, fmt.Sprintf("environment %s names no configuration key (see `leasecron config --keys`)", name))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return fmt.Errorf("%w:\n  %s", ErrInvalid, strings.Join(problems, "\n  "))
	}
	if len(handlers) > 0 {
		overlay["handlers"] = handlers
	}
	if len(types) > 0 {
		overlay["types"] = types
	}
	if len(limits) > 0 {
		overlay["limits"] = limits
	}
	if len(overlay) > 0 {
		// Merged into the config layer so file and environment combine.
		return v.MergeConfigMap(overlay)
	}
	return nil
}
