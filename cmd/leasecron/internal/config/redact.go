package config

import (
	"strings"
	"time"

	"github.com/spf13/viper"

	"github.com/leasecron/leasecron/internal/storage"
)

// Redacted returns the effective configuration as a nested map for
// display: secrets (secret keys, account keys and SAS signatures in any
// value, handler headers) redacted, durations spelled as in a
// configuration file.
func Redacted(v *viper.Viper) map[string]any {
	out := map[string]any{}
	for _, k := range v.AllKeys() {
		m := out
		parts := strings.Split(k, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = display(k, v.Get(k))
	}
	return out
}

// display is how the value of key is shown.
func display(key string, val any) any {
	if d, ok := val.(time.Duration); ok {
		return formatValue(d)
	}
	s, ok := val.(string)
	if !ok || s == "" {
		return val
	}
	r := storage.Redact(s)
	if r == s && secret(key) {
		return "REDACTED"
	}
	return r
}

// secret reports whether key holds a secret: a key marked Secret, or a
// handler's header (Authorization, API keys).
func secret(key string) bool {
	for _, k := range Keys {
		if k.Name == key {
			return k.Secret
		}
	}
	parts := strings.Split(key, ".")
	return len(parts) == 4 && parts[0] == "handlers" && parts[2] == "headers"
}
