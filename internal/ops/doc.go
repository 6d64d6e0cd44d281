// Package ops is the operations side of a leasecron worker: Prometheus
// metrics (Metrics), the admin HTTP server with /healthz, /readyz, /metrics
// and optionally /debug/pprof (Server), a readiness check against storage
// (ReadyCheck), and the process logger with secrets redacted (NewLogger).
//
// Metrics live in a registry of their own, never the global one, so tests
// and embedding programs can create as many as they like. Every Metrics
// method is safe on a nil *Metrics (it does nothing), so packages can take
// an optional *Metrics and call it without checks.
package ops
