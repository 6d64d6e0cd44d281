package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/tools/bench/results"
	"github.com/leasecron/leasecron/tools/internal/fleet"
	"github.com/leasecron/leasecron/tools/internal/proc"
)

// AccountEnv names the environment variable that holds the connection
// string of the storage account the account scenario runs against. It is
// read from the environment only (never a flag, so it stays out of shell
// histories and process lists) and never logged.
const AccountEnv = "LEASECRON_BENCH_ACCOUNT"

// errNoAccount is returned when the account scenario is asked for without
// an account.
var errNoAccount = fmt.Errorf("the account scenario needs %s set to a storage connection string (AccountName/AccountKey or explicit endpoints)", AccountEnv)

// runAccount is the account scenario: the worker-process pairs of the
// consumer scenario (run records on and off, interleaved, each count of
// processes) against a real storage account, where requests cost round
// trips rather than an emulator's single thread. Every measurement uses
// its own queues, tables and container, named lcb{random}, and deletes
// them afterwards.
func runAccount(ctx context.Context, b *bench) error {
	const name = "account"
	cs := b.account
	if cs == "" {
		return errNoAccount
	}
	sc, err := storage.New(storage.Config{ConnectionString: cs})
	if err != nil {
		return fmt.Errorf("%s: %w", AccountEnv, err)
	}
	// Built before any clock starts: the first fleet would otherwise time
	// the build.
	if _, err := proc.Binary(); err != nil {
		return err
	}
	m := b.s.accountMsgs
	res := results.Consumer{Messages: m}
	for rep := 0; rep < b.s.processReps; rep++ {
		for _, k := range b.s.instances {
			for _, runs := range []bool{true, false} {
				r, cpu, err := b.consumeOnAccount(ctx, sc, cs, m, k, runs)
				if err != nil {
					return fmt.Errorf("account, %d processes, runs %v: %w", k, runs, err)
				}
				label := "worker processes on the account, defaults (runs on)"
				if !runs {
					label = "worker processes on the account, worker.runs=false"
				}
				row := results.ConsumerRow{Variant: results.VariantProcess, Label: label, Instances: k, Concurrency: defaultWorkerConcurrency,
					Runs: runs, Rate: r, CPUSeconds: cpu, Rep: rep}
				row.Steady = results.SteadyRate(r.Progress, r.N)
				res.Rows = append(res.Rows, row)
				b.logf(name, "%-52s x%d: %d in %.2fs = %.0f/s (steady %.0f/s)", label, k, r.N, r.Seconds, r.PerSec, row.Steady)
			}
		}
	}
	return results.Write(b.out, results.AccountFile, res)
}

// accountNames are the resources of one measurement on a shared account.
type accountNames struct{ queue, poison, schedule, runs, blackboard, container string }

func newAccountNames() (accountNames, error) {
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return accountNames{}, err
	}
	p := "lcb" + hex.EncodeToString(r[:])
	return accountNames{queue: p, poison: p + "-poison", schedule: p + "sched", runs: p + "runs", blackboard: p + "bb", container: p}, nil
}

// config is the names.* section that points workers at them.
func (n accountNames) config() map[string]any {
	return map[string]any{"queue": n.queue, "poison_queue": n.poison, "schedule_table": n.schedule,
		"runs_table": n.runs, "blackboard_table": n.blackboard, "container": n.container}
}

// remove deletes every resource of n that exists; it returns the first
// failure other than "not found".
func (n accountNames) remove(ctx context.Context, sc *storage.Clients) error {
	var errs []error
	for _, q := range []string{n.queue, n.poison} {
		if _, err := sc.Queue.NewQueueClient(q).Delete(ctx, nil); err != nil && !errors.Is(storage.Translate(err), storage.ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete queue %s: %w", q, storage.Translate(err)))
		}
	}
	for _, t := range []string{n.schedule, n.runs, n.blackboard} {
		if _, err := sc.Table.NewClient(t).Delete(ctx, nil); err != nil && !errors.Is(storage.Translate(err), storage.ErrNotFound) {
			errs = append(errs, fmt.Errorf("delete table %s: %w", t, storage.Translate(err)))
		}
	}
	if _, err := sc.Blob.NewContainerClient(n.container).Delete(ctx, nil); err != nil && !errors.Is(storage.Translate(err), storage.ErrNotFound) {
		errs = append(errs, fmt.Errorf("delete container %s: %w", n.container, storage.Translate(err)))
	}
	return errors.Join(errs...)
}

// consumeOnAccount fills a queue of its own on the account with m no-op
// messages, drains it with k worker processes and returns the rate and
// the CPU seconds the processes used. Its queues, tables and container
// are deleted afterwards, whatever happened.
func (b *bench) consumeOnAccount(ctx context.Context, sc *storage.Clients, cs string, m, k int, runs bool) (rate results.Rate, cpu float64, err error) {
	n, err := newAccountNames()
	if err != nil {
		return rate, 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if rerr := n.remove(cctx, sc); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for _, q := range []string{n.queue, n.poison} {
		if err := sc.EnsureQueue(ctx, q); err != nil {
			return rate, 0, err
		}
	}
	qc := sc.Queue.NewQueueClient(n.queue)
	if _, err := rawEnqueue(ctx, qc, m, rawConcurrency, nil); err != nil {
		return rate, 0, err
	}
	dir, err := b.scratch(fmt.Sprintf("account-x%d-runs-%v", k, runs))
	if err != nil {
		return rate, 0, err
	}
	p := newProgress(100 * time.Millisecond)
	f, err := fleet.Start(ctx, fleet.Options{Dir: dir, Workers: k, ConnectionString: cs, Config: workerConfig(map[string]any{
		"worker": map[string]any{"lead": false, "runs": runs},
		"names":  n.config(),
	})})
	if err != nil {
		return rate, 0, err
	}
	derr := waitDrained(ctx, qc, m, p, 10*time.Minute)
	pts, d := p.finish()
	cpu = fleetCPU(f)
	f.Stop()
	if derr != nil {
		return rate, 0, fmt.Errorf("%w (logs in %s)", derr, dir)
	}
	return results.NewRate(m, d, pts), cpu, nil
}

// accountFromEnv returns the account connection string of the
// environment ("" when unset).
func accountFromEnv() string { return os.Getenv(AccountEnv) }
