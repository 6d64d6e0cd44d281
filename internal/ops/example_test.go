package ops_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/ops"
	"github.com/leasecron/leasecron/internal/storage"
)

// The admin server with metrics and a readiness check.
func ExampleNewServer() {
	m := ops.NewMetrics()
	storageUp := false
	srv, err := ops.NewServer(ops.Options{
		Addr:    "127.0.0.1:0", // production: ":8080"; "" turns the server off
		Metrics: m,
		Ready: func(ctx context.Context) error {
			if !storageUp {
				return errors.New("storage unreachable")
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown(context.Background())

	show := func(path string) {
		resp, err := http.Get("http://" + srv.Addr() + path)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%s %d %s", path, resp.StatusCode, b)
	}
	show("/healthz")
	show("/readyz")
	storageUp = true
	show("/readyz")
	// Output:
	// /healthz 200 ok
	// /readyz 503 not ready: storage unreachable
	// /readyz 200 ok
}

// Feeding metrics from other packages' hooks.
func ExampleMetrics() {
	m := ops.NewMetrics()
	counter := storage.NewCounter()
	counter.OnRequest = m.StorageRequest // every storage request is counted

	m.SetLeaseHeld(true)
	m.LeaseAcquired()
	m.MoverBatch(37)
	m.TaskDone("report", ops.OutcomeSucceeded, 1200*time.Millisecond)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "leasecron_tasks_total") || strings.HasPrefix(line, "leasecron_mover_rows") || strings.HasPrefix(line, "leasecron_lease_held") {
			fmt.Println(line)
		}
	}
	// Output:
	// leasecron_lease_held 1
	// leasecron_mover_rows_moved_total 37
	// leasecron_tasks_total{outcome="succeeded",type="report"} 1
}

// Secrets never reach the log.
func ExampleRedactingHandler() {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	log := slog.New(ops.RedactingHandler(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: noTime})))
	log.Info("using storage", "conn", "AccountName=acct;AccountKey=c2VjcmV0;EndpointSuffix=core.windows.net")
	// Output:
	// level=INFO msg="using storage" conn="AccountName=acct;AccountKey=REDACTED;EndpointSuffix=core.windows.net"
}

// The process logger: JSON in containers, text on a terminal.
func ExampleNewLogger() {
	log, err := ops.NewLogger(os.Stderr, "info", "auto")
	if err != nil {
		fmt.Println(err)
		return
	}
	log.Info("worker starting", "instance", "w1")
	_, err = ops.NewLogger(os.Stderr, "verbose", "")
	fmt.Println(err)
	// Output:
	// log level "verbose": want debug, info, warn or error
}
