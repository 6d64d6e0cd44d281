package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// Tracing is off unless the OTEL_* variables ask for traces.
func TestEnabled(t *testing.T) {
	for i, c := range []struct {
		vars map[string]string
		want bool
		err  bool
	}{
		{vars: nil, want: false},
		{vars: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: true},
		{vars: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: true},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: false},
		{vars: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: false},
		{vars: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: true},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			got, err := Enabled(env(c.vars))
			if got != c.want || (err != nil) != c.err || (err != nil && !errors.Is(err, ErrConfig)) {
				t.Errorf("Enabled(%v) = %v, %v", c.vars, got, err)
			}
		})
	}
	if _, on, err := Setup(context.Background(), "test", env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"})); on || !errors.Is(err, ErrConfig) {
		t.Errorf("an unknown protocol: on %v, %v", on, err)
	}
}
