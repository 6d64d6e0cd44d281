package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/memstore"
	"github.com/leasecron/leasecron/internal/storage"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

// account returns a fresh account on a clock of its own and the clients
// leasecron builds for it (through the in-process transport).
func account(t testing.TB, o memstore.Options) (*memstore.Server, *clock.Fake, *storage.Clients) {
	t.Helper()
	clk := clock.NewFake(t0)
	if o.Now == nil {
		o.Now = clk.Now
	}
	srv := memstore.New(o)
	sc, err := storage.New(storage.Config{ConnectionString: srv.ConnectionString(), Transport: srv.Transport()})
	if err != nil {
		t.Fatal(err)
	}
	return srv, clk, sc
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// code returns the error code and status of an SDK error ("" and 0 for
// nil or another error).
func code(err error) (string, int) {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode, re.StatusCode
	}
	return "", 0
}

// wantCode fails t unless err is the service's refusal code with status.
func wantCode(t testing.TB, what string, err error, wantCode string, wantStatus int) {
	t.Helper()
	if c, s := code(err); c != wantCode || s != wantStatus {
		t.Fatalf("%s: %v (code %q status %d); want %s %d", what, err, c, s, wantCode, wantStatus)
	}
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
