package schedule

import (
	"context"
	"regexp"

	"go.opentelemetry.io/otel/propagation"
)

// traceParentRE is the W3C trace-context traceparent header of version 00
// (and, read leniently, of later versions): version, trace id, parent span
// id and flags in lower-case hex.
var traceParentRE = regexp.MustCompile(`^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$`)

// ValidTraceParent reports whether s is a usable W3C traceparent: the
// version is not ff and neither the trace id nor the span id is all zeros.
func ValidTraceParent(s string) bool {
	if !traceParentRE.MatchString(s) || s[:2] == "ff" {
		return false
	}
	return s[3:35] != "00000000000000000000000000000000" && s[36:52] != "0000000000000000"
}

// TraceParentOf returns the W3C traceparent of the span in ctx, or "" when
// ctx carries no valid span context.
func TraceParentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
