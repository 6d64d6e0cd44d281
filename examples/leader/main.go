// Command leader is a standalone leader-elected loop: several copies of it,
// anywhere, share one Azure blob lease and exactly one of them at a time
// does the leader's work. It uses only the trafficcop package and the
// Azure SDK: the program builds its own container client from a
// connection string (its own shared-key credential) and gives it to
// trafficcop.NewBlobLock.
//
//	export AZURE_STORAGE_CONNECTION_STRING='...'   # `leasecron azurite` prints one
//	go run ./leader -id a &
//	go run ./leader -id b &
//	kill %1    # b takes over within -poll (graceful: a releases the lease)
//
// A leader killed without warning (kill -9) is replaced once its lease
// has expired, within -lease plus a moment.
//
// Every stdout line starts with an RFC 3339 time and the instance id, then
// one of: "competing for CONTAINER/BLOB", "leading generation=N",
// "working generation=N step=K", "stopped generation=N reason=...",
// "exiting". Logs go to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/leasecron/leasecron/trafficcop"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "leader:", err)
		os.Exit(1)
	}
}

func run() error {
	id := flag.String("id", trafficcop.DefaultIdentity(), "this instance's identity (written to the lease blob)")
	containerName := flag.String("container", "leasecron-examples", "container of the lease blob (created if missing)")
	blobName := flag.String("blob", "locks/leader", "the lease blob (created if missing)")
	lease := flag.Duration("lease", 15*time.Second, "lease duration, 15s to 60s")
	poll := flag.Duration("poll", time.Second, "how often a standby tries to take the lease")
	every := flag.Duration("every", time.Second, "interval of the leader's work steps")
	flag.Parse()
	conn := os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	if conn == "" {
		return errors.New("AZURE_STORAGE_CONNECTION_STRING is empty: set it to a storage connection string (for Azurite, the one `leasecron azurite` prints)")
	}
	if *every <= 0 {
		return fmt.Errorf("-every %v: want a positive duration", *every)
	}

	// The program's own client and credential: trafficcop takes any
	// *container.Client (shared key, SAS, or an azidentity credential via
	// container.NewClient).
	cc, err := container.NewClientFromConnectionString(conn, *containerName, nil)
	if err != nil {
		return fmt.Errorf("container client: %w", err)
	}
	lock, err := trafficcop.NewBlobLock(cc, *blobName)
	if err != nil {
		return err
	}
	cop, err := trafficcop.NewCop(lock, trafficcop.Options{
		Identity: *id,
		Timing:   trafficcop.Timing{PollEvery: *poll, LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: *lease}},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}

	say := func(format string, args ...any) {
		fmt.Printf("%s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), *id, fmt.Sprintf(format, args...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	say("competing for %s", lock)
	err = cop.Run(ctx, func(ctx context.Context) error {
		// The lead function: only the holder of the lease runs it, and its
		// context ends the moment control ends (lease lost, or shutdown).
		// It reports that before returning, which is before the lease is
		// released and anyone else can lead.
		term, _ := trafficcop.TermFrom(ctx)
		say("leading generation=%d", term.Generation)
		tick := time.NewTicker(*every)
		defer tick.Stop()
		for step := 1; ; step++ {
			select {
			case <-ctx.Done():
				say("stopped generation=%d reason=%q", term.Generation, context.Cause(ctx))
				return nil
			case <-tick.C:
				// The leader's work goes here. Writes that must never come
				// from a stale leader should be conditional on
				// term.Generation (a fencing token).
				say("working generation=%d step=%d", term.Generation, step)
			}
		}
	})
	say("exiting")
	return err
}
