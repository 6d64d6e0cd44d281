// Package queuesrvtest holds the conformance tests of internal/queuesrv:
// they drive the in-memory Queue service with leasecron's own queue client,
// a layer above internal/, so they live with the tools.
package queuesrvtest
