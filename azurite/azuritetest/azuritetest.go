// Package azuritetest gives tests a private Azurite.
//
// When Node.js or the Azurite package is missing the test is skipped with a
// message saying how to install it, unless LEASECRON_REQUIRE_AZURITE is set
// (make test and CI set it), in which case the test fails: CI can never pass
// by skipping.
//
// With LEASECRON_TEST_STORAGE=memstore, Start, StartWith and Shared serve
// an in-memory account (azurite.StartMemstore: the repository's
// internal/memstore on loopback ports) instead of starting Azurite, so the
// same integration tests run against it; a test that needs what only a
// process of Azurite has calls SkipUnderMemstore.
package azuritetest

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasecron/leasecron/azurite"
)

// Start starts a private Azurite for t and stops it when t ends.
func Start(t testing.TB) *azurite.Server {
	t.Helper()
	return StartWith(t, azurite.Options{})
}

// StartWith is Start with options (InMemory for tests that write much).
func StartWith(t testing.TB, o azurite.Options) *azurite.Server {
	t.Helper()
	if Memstore() {
		s, err := azurite.StartMemstore()
		if err != nil {
			t.Fatalf("start memstore: %v", err)
		}
		t.Cleanup(func() { _ = s.Stop() })
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := azurite.Start(ctx, o)
	if err != nil {
		if errors.Is(err, azurite.ErrNotInstalled) && os.Getenv("LEASECRON_REQUIRE_AZURITE") == "" {
			t.Skipf("skipping Azurite integration test: %v", err)
		}
		t.Fatalf("start azurite: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

var (
	sharedMu  sync.Mutex
	sharedSrv *azurite.Server
	sharedErr error
)

// Shared returns one Azurite per test binary, started on first use. Tests
// that share it isolate themselves by resource names (see Name). Call
// StopShared from TestMain after m.Run.
func Shared(t testing.TB) *azurite.Server {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedSrv == nil && sharedErr == nil {
		if Memstore() {
			sharedSrv, sharedErr = azurite.StartMemstore()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			sharedSrv, sharedErr = azurite.Start(ctx, azurite.Options{})
		}
	}
	if sharedErr != nil {
		if errors.Is(sharedErr, azurite.ErrNotInstalled) && os.Getenv("LEASECRON_REQUIRE_AZURITE") == "" {
			t.Skipf("skipping Azurite integration test: %v", sharedErr)
		}
		t.Fatalf("start azurite: %v", sharedErr)
	}
	return sharedSrv
}

// StopShared stops the Azurite started by Shared, if any.
func StopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if sharedSrv != nil {
		_ = sharedSrv.Stop()
		sharedSrv = nil
	}
}

// Memstore reports whether the tests run against an in-memory account
// (LEASECRON_TEST_STORAGE=memstore) instead of Azurite.
func Memstore() bool { return os.Getenv("LEASECRON_TEST_STORAGE") == "memstore" }

// SkipUnderMemstore skips t when the tests run against an in-memory
// account, saying why (what of Azurite's the test needs).
func SkipUnderMemstore(t testing.TB, why string) {
	t.Helper()
	if Memstore() {
		t.Skipf("LEASECRON_TEST_STORAGE=memstore: %s", why)
	}
}

var nonAlnum = regexp.MustCompile(`[^a-z0-9]+`)

// Name derives a resource name unique to t, valid as a table name when
// prefixed with a letter and as a queue or container name: lower-case
// letters and digits, at most 40 characters plus a short suffix.
func Name(t testing.TB, prefix string) string {
	n := nonAlnum.ReplaceAllString(strings.ToLower(t.Name()), "")
	if len(n) > 30 {
		n = n[len(n)-30:]
	}
	suffix := strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000"), ".", ""))
	return prefix + n + suffix
}
