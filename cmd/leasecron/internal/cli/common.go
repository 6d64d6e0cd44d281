package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/cmd/leasecron/internal/config"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/handler"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// client returns a leasecron.Client for the configuration.
func (a *app) client() (*leasecron.Client, error) {
	return leasecron.NewClient(leasecron.ClientOptions{
		Storage:    a.cfg.Storage,
		Names:      a.cfg.Names,
		NoRuns:     !a.cfg.Worker.Runs,
		Runs:       a.runsOptions(),
		MaxPayload: a.cfg.Payload.MaxSize,
		SendWithin: a.cfg.Mover.PollEvery,
		Logger:     a.log,
		Limits:     a.cfg.Limits,
		Routing:    a.cfg.Routing,
		MaxDepth:   a.cfg.Queue.MaxDepth, ResumeBelow: a.cfg.Queue.ResumeBelow,
	})
}

// workerOptions maps the configuration onto leasecron.WorkerOptions.
func (a *app) workerOptions() (leasecron.WorkerOptions, error) {
	c := a.cfg
	timeouts := map[string]time.Duration{}
	for typ, h := range c.Handlers {
		if h.Timeout > 0 {
			timeouts[typ] = h.Timeout
		}
	}
	var dash func(*leasecron.Client) (http.Handler, error)
	if c.Admin.Dashboard {
		var err error
		if dash, err = dashboard.ForWorker(c.Admin.Addr, a.dashboardOptions()); err != nil {
			return leasecron.WorkerOptions{}, usageError{fmt.Errorf("admin.dashboard: %w", err)}
		}
	}
	if c.Admin.API {
		// The API alone, or mounted in the dashboard (Options.API: under
		// its base path, ahead of its sign-in).
		ao, do, withDash := a.apiOptions(), a.dashboardOptions(), dash != nil
		dash = func(cl *leasecron.Client) (http.Handler, error) {
			h, err := api.New(cl, ao)
			if err != nil || !withDash {
				return h, err
			}
			do.API = h
			return dashboard.New(cl, do)
		}
	}
	return leasecron.WorkerOptions{
		AdminHandler: dash,
		Storage:      a.cfg.Storage,
		Names:        a.cfg.Names,
		InstanceID:   c.Worker.InstanceID,
		Lease: trafficcop.Timing{
			LeaseTiming: trafficcop.LeaseTiming{LeaseDuration: c.Lease.Duration, RenewEvery: c.Lease.RenewEvery, SafetyMargin: c.Lease.SafetyMargin}, PollEvery: c.Lease.PollEvery,
		},
		ShardCycle: c.Shards.Cycle,
		DrainCheck: c.Worker.DrainCheck,
		Mover: schedule.MoverSettings{
			PollEvery: c.Mover.PollEvery, Early: c.Mover.Early, Concurrency: c.Mover.Concurrency,
			MaxDepth: c.Queue.MaxDepth, ResumeBelow: c.Queue.ResumeBelow,
		},
		Consumer: queue.ConsumerSettings{
			Concurrency: c.Worker.Concurrency, VisibilityTimeout: c.Worker.VisibilityTimeout, MaxRunTime: c.Worker.MaxRunTime,
			ShutdownGrace: c.Worker.ShutdownGrace, PollMin: c.Worker.PollMin, PollMax: c.Worker.PollMax, ListenEvery: c.Worker.ListenEvery,
			MaxAttempts: c.Retry.MaxAttempts, MaxSnoozes: c.Retry.MaxSnoozes, BackoffBase: c.Retry.BackoffBase, BackoffMax: c.Retry.BackoffMax,
			HandlerTimeouts: timeouts, CountersEvery: c.Worker.CountersEvery,
			PauseCheck: c.Worker.PauseCheck, PauseHold: c.Worker.PauseHold, ProgressEvery: c.Worker.ProgressEvery,
		},
		Blackboard:      blackboard.Settings{Cycle: c.Blackboard.Cycle, LockTTL: c.Blackboard.LockTTL},
		NoLead:          !c.Worker.Lead,
		NoConsume:       !c.Worker.Consume,
		NoBlackboard:    !c.Blackboard.Enabled,
		NoRuns:          !c.Worker.Runs,
		Runs:            a.runsOptions(),
		Limits:          c.Limits,
		Rates:           c.Rates,
		Routing:         c.Routing,
		Queues:          c.Worker.Queues,
		PriorityWeights: c.Worker.PriorityWeights,
		AdminAddr:       c.Admin.Addr,
		Pprof:           c.Admin.Pprof,
		Version:         a.version,
		Logger:          a.log,
	}, nil
}

// buildHandlers turns handlers.<type> configuration into handlers.
func buildHandlers(cfg config.Config, log *slog.Logger, extra map[string]func(config.Handler) (leasecrontype.Handler, error)) (map[string]leasecrontype.Handler, error) {
	out := map[string]leasecrontype.Handler{}
	for typ, h := range cfg.Handlers {
		var (
			fn  leasecrontype.Handler
			err error
		)
		switch h.Kind {
		case "exec":
			fn, err = handler.Exec(handler.ExecOptions{Argv: h.Exec, Timeout: h.Timeout, Logger: log})
		case "http":
			fn, err = handler.HTTP(handler.HTTPOptions{URL: h.HTTP, Method: h.Method, Headers: h.Headers, Timeout: h.Timeout, Logger: log})
		case "log":
			fn = logHandler(log)
		default:
			make, ok := extra[h.Kind]
			if !ok {
				return nil, fmt.Errorf("handlers.%s.kind %q: not available in this binary", typ, h.Kind)
			}
			fn, err = make(h)
		}
		if err != nil {
			return nil, fmt.Errorf("handlers.%s: %w", typ, err)
		}
		out[typ] = fn
	}
	return out, nil
}

// logHandler logs each task's payload: the built-in "log" kind, handy for
// trying leasecron out and for images without a shell.
func logHandler(log *slog.Logger) leasecrontype.Handler {
	return func(ctx context.Context, t leasecrontype.Task) error {
		p := trunc.Head(string(t.Payload), 200) // never half a character
		log.Info("task", "task_id", t.ID, "type", t.Type, "attempt", t.Attempt, "due", t.Due.Format(time.RFC3339), "payload", strings.TrimSpace(p))
		fmt.Fprintf(leasecrontype.Output(ctx), "%s\n", p)
		return nil
	}
}

// runsOptions maps runs.* onto leasecron.RunsOptions (runs.clean_every 0
// turns the leader's cleaning off).
func (a *app) runsOptions() leasecron.RunsOptions {
	r := a.cfg.Runs
	o := leasecron.RunsOptions{Retention: r.Retention, RetentionFailed: r.RetentionFailed, AuditRetention: r.AuditRetention, CleanEvery: r.CleanEvery}
	if o.CleanEvery == 0 {
		o.CleanEvery = -1
	}
	return o
}
