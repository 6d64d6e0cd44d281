package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// RunsOptions configure run records (ClientOptions.Runs and
// WorkerOptions.Runs). Zero values take the defaults shown.
type RunsOptions struct {
	// Retention is how long a succeeded or cancelled run's record is kept
	// after it finished (config runs.retention). Default 168h (7 days).
	Retention time.Duration
	// RetentionFailed is how long a failed or dead run's record is kept
	// after its last attempt (config runs.retention_failed). Default 720h
	// (30 days).
	RetentionFailed time.Duration
	// AuditRetention is how long audit entries (Client.Audit) are kept
	// (config runs.audit_retention). Default 2160h (90 days); at least
	// 24h.
	AuditRetention time.Duration
	// CleanEvery is how often the leader removes expired records (config
	// runs.clean_every). Default 1h; negative disables (then run
	// `leasecron runs clean` from time to time).
	CleanEvery time.Duration
}

// Defaults of RunsOptions.
const (
	DefaultRunRetention       = runs.DefaultRetention
	DefaultRunRetentionFailed = runs.DefaultRetentionFailed
	DefaultAuditRetention     = runs.DefaultAuditRetention
	DefaultRunCleanEvery      = time.Hour
)

// RunQuery selects run records for Client.Runs, newest first: by due
// time, latest first. The zero value lists every run.
type RunQuery struct {
	// State keeps runs in this state ("" = any). RunScheduled lists the
	// tasks still waiting in the schedule (they have no run record yet),
	// soonest first, as Client.List does.
	State RunState
	// Type keeps runs of this handler type ("" = any).
	Type string
	// Series keeps the occurrences of this recurring series.
	Series string
	// Batch keeps the runs of this batch's members (that have started:
	// members still in the schedule have no run record yet; Client.
	// BatchMembers lists them all).
	Batch string
	// Since keeps runs due at or after it (zero = no bound).
	Since time.Time
	// Limit is the page size: 0 means 50, at most 1000.
	Limit int
	// Continue resumes after the page that returned it.
	Continue string
}

// RunPage is one page of Client.Runs.
type RunPage struct {
	// Runs are newest first. A listing carries no output tail and at most
	// 512 bytes of the last error; Status has the whole record.
	Runs []Run
	// Continue, when not empty, fetches the next page (RunQuery.Continue).
	Continue string
}

// Runs returns a page of run records, newest first. A page costs one
// query per partition of the Runs table (four) whatever the table holds,
// or one for a series; see docs/run-history.md.
func (c *Client) Runs(ctx context.Context, q RunQuery) (RunPage, error) {
	if q.State == RunScheduled {
		return c.pendingRuns(ctx, q)
	}
	if c.runs == nil {
		return RunPage{}, ErrNoRunRecords
	}
	p, err := c.runs.Query(ctx, runs.Query{State: q.State, Type: q.Type, Series: q.Series, Batch: q.Batch, Since: q.Since, Limit: q.Limit, Continue: q.Continue})
	if err != nil {
		return RunPage{}, err
	}
	out := RunPage{Runs: make([]Run, len(p.Runs)), Continue: p.Continue}
	for i, r := range p.Runs {
		out.Runs[i] = r.Public()
	}
	return out, nil
}

// pendingRuns lists the tasks waiting in the schedule as scheduled runs.
func (c *Client) pendingRuns(ctx context.Context, q RunQuery) (RunPage, error) {
	if q.Series != "" {
		it, err := c.sched.Get(ctx, q.Series)
		if errors.Is(err, ErrNotFound) {
			return RunPage{Runs: []Run{}}, nil
		}
		if err != nil {
			return RunPage{}, err
		}
		return RunPage{Runs: []Run{pendingRun(it)}}, nil
	}
	items, next, err := c.sched.List(ctx, schedule.ListOptions{Type: q.Type, Limit: q.Limit, Continuation: q.Continue})
	if err != nil {
		return RunPage{}, err
	}
	out := RunPage{Runs: []Run{}, Continue: next}
	for _, it := range items {
		if !it.Due.Before(q.Since) && (q.Batch == "" || it.Batch == q.Batch) {
			out.Runs = append(out.Runs, pendingRun(it))
		}
	}
	return out, nil
}

func pendingRun(it Item) Run {
	r := Run{ID: it.ID, State: RunScheduled, Type: it.Type, Due: it.Due, Batch: it.Batch, After: it.After}
	if it.Recurrence != "" {
		r.Series = it.ID
	}
	return r
}

// MinuteCounts are the fleet's outcome counts of one minute.
type MinuteCounts struct {
	// Minute is the minute's start (UTC).
	Minute time.Time `json:"minute"`
	// Succeeded counts runs whose handler succeeded.
	Succeeded int64 `json:"succeeded"`
	// Failed counts failed attempts (including a dead run's last).
	Failed int64 `json:"failed"`
	// Retried counts failed attempts scheduled for another try.
	Retried int64 `json:"retried"`
	// Dead counts runs given up after their last attempt.
	Dead int64 `json:"dead"`
	// Cancelled counts deliveries of cancelled runs, acknowledged without
	// running.
	Cancelled int64 `json:"cancelled"`
	// Duplicates counts deliveries of runs that had already succeeded.
	Duplicates int64 `json:"duplicates"`
	// SetAside counts messages moved to the poison queue.
	SetAside int64 `json:"set_aside"`
	// Deferred counts deliveries put back without an attempt.
	Deferred int64 `json:"deferred"`
}

// Throughput returns the fleet's outcome counts per minute from since to
// now, oldest first, one entry per minute (zeros where nothing happened).
// Workers write their counts every WorkerOptions.Consumer.CountersEvery (30 s),
// so the last minute fills in late. Counts are kept for 48 hours; an
// earlier since starts at the oldest minute kept.
func (c *Client) Throughput(ctx context.Context, since time.Time) ([]MinuteCounts, error) {
	if c.runs == nil {
		return nil, ErrNoRunRecords
	}
	mins, err := c.runs.Throughput(ctx, since)
	if err != nil {
		return nil, err
	}
	out := make([]MinuteCounts, len(mins))
	for i, m := range mins {
		out[i] = MinuteCounts{Minute: m.Minute, Succeeded: m.Handled, Failed: m.Failed, Retried: m.Retried, Dead: m.Dead,
			Cancelled: m.Cancelled, Duplicates: m.Duplicates, SetAside: m.SetAside, Deferred: m.Deferred}
	}
	return out, nil
}

// CleanResult says what CleanRuns removed.
type CleanResult struct {
	// Expired counts run records removed.
	Expired int `json:"expired"`
	// Counters counts per-minute counter rows removed.
	Counters int `json:"counters"`
	// Summaries counts series summary rows removed: those whose every
	// recent occurrence has passed its retention.
	Summaries int `json:"summaries,omitempty"`
	// Audit counts audit entries removed (older than
	// RunsOptions.AuditRetention).
	Audit int `json:"audit,omitempty"`
}

// CleanRuns removes the run records past their retention and the
// per-minute counters older than 48 hours: what the leader does every
// RunsOptions.CleanEvery. Interrupted, it leaves whole records; run it
// again to finish.
func (c *Client) CleanRuns(ctx context.Context) (CleanResult, error) {
	if c.runs == nil {
		return CleanResult{}, ErrNoRunRecords
	}
	st, err := c.runs.Clean(ctx)
	return CleanResult(st), err
}

// MigrateResult says what MigrateRuns did.
type MigrateResult struct {
	// Converted counts records rewritten in the current layout.
	Converted int `json:"converted"`
	// Skipped counts old records not rewritten (a newer record existed, or
	// the task is still pending and its pending row is its record).
	Skipped int `json:"skipped"`
	// Removed counts old rows deleted (records and counters rows).
	Removed int `json:"removed"`
}

// MigrateRuns converts run records kept in the layout of leasecron before
// run history (one row per id in partitions r0..rf, counters in ~stats)
// into the current one. Until it has run, status and claims fall back to
// the old rows, but listings and retention do not see them. It may be
// interrupted and run again.
func (c *Client) MigrateRuns(ctx context.Context) (MigrateResult, error) {
	if c.runs == nil {
		return MigrateResult{}, ErrNoRunRecords
	}
	st, err := c.runs.Migrate(ctx)
	return MigrateResult(st), err
}

// CheckResult is what CheckRuns found.
type CheckResult struct {
	// Problems describe each run whose rows disagree, one line each.
	Problems []string
	// Runs is how many runs were read.
	Runs int
}

// CheckRuns reads the whole Runs table and reports every run whose rows
// disagree (see docs/run-history.md): none, unless something other than
// leasecron wrote the table.
func (c *Client) CheckRuns(ctx context.Context) (CheckResult, error) {
	if c.runs == nil {
		return CheckResult{}, ErrNoRunRecords
	}
	problems, n, err := c.runs.Verify(ctx)
	return CheckResult{Problems: problems, Runs: n}, err
}

// markQueued records the runs of a page of due tasks as queued before the
// mover sends them, and holds back those whose record could not be
// written (schedule.MoverOptions.BeforeSendHold).
func (w *Worker) markQueued(ctx context.Context, envs []queue.Envelope) (marked, hold []bool) {
	marks := make([]runs.Mark, len(envs))
	for i, e := range envs {
		marks[i] = runs.Mark{ID: e.ID, Meta: runs.Meta{Type: e.Type, Due: e.Due, Generation: e.Generation, Batch: e.Batch, Read: e.Enqueued}}
	}
	return w.runs.MarkQueuedReport(ctx, marks)
}

// cleanRuns removes expired run records while this instance leads, every
// RunsOptions.CleanEvery since the last pass of any leader (so a change of
// leader does not clean twice, and a fresh table is first cleaned after one
// interval), but not before it has led for a minute.
func (w *Worker) cleanRuns(ctx context.Context) {
	every := w.o.Runs.CleanEvery
	wait := every
	if last, err := w.runs.LastClean(ctx); err != nil {
		w.log.Debug("reading the last cleaning pass failed", "err", err)
	} else if !last.IsZero() {
		wait = last.Add(every).Sub(w.o.Clock.Now())
	}
	for {
		t := w.o.Clock.NewTimer(max(wait, time.Minute))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		wait = every
		st, err := w.runs.Clean(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			w.log.Warn("removing expired run records failed; trying again next time", "err", err, "removed", st.Expired)
		case st.Expired > 0 || st.Counters > 0 || st.Summaries > 0:
			w.log.Info("removed expired run records", "runs", st.Expired, "counter_rows", st.Counters, "series_summaries", st.Summaries)
		}
	}
}

// WithDefaults returns o with every zero field set to its default; a
// negative CleanEvery stays (off).
func (o RunsOptions) WithDefaults() RunsOptions {
	o.Retention = cmp.Or(o.Retention, DefaultRunRetention)
	o.RetentionFailed = cmp.Or(o.RetentionFailed, DefaultRunRetentionFailed)
	o.AuditRetention = cmp.Or(o.AuditRetention, DefaultAuditRetention)
	o.CleanEvery = cmp.Or(o.CleanEvery, DefaultRunCleanEvery)
	return o
}

func (o RunsOptions) validate() error {
	if o.CleanEvery > 0 && o.CleanEvery < time.Minute {
		return opt.Invalid(ErrInvalidOptions, "RunsOptions.CleanEvery", o.CleanEvery, fmt.Sprintf("at least 1m, 0 for the default %v, or negative to disable", DefaultRunCleanEvery))
	}
	return opt.First(
		opt.AtLeast(ErrInvalidOptions, "RunsOptions.Retention", o.Retention, DefaultRunRetention, time.Minute),
		opt.AtLeast(ErrInvalidOptions, "RunsOptions.RetentionFailed", o.RetentionFailed, DefaultRunRetentionFailed, time.Minute),
		opt.AtLeast(ErrInvalidOptions, "RunsOptions.AuditRetention", o.AuditRetention, DefaultAuditRetention, 24*time.Hour),
	)
}

// Recent returns the newest n runs of a recurring series, newest first:
// one read of the series' summary, or a query of its history when the
// summary does not say (written by an earlier release).
func (c *Client) Recent(ctx context.Context, series string, n int) ([]Run, error) {
	if c.runs != nil {
		rs, ok, err := c.runs.Recent(ctx, series)
		if err != nil || ok {
			return rs[:min(n, len(rs))], err
		}
	}
	p, err := c.Runs(ctx, RunQuery{Series: series, Limit: n})
	return p.Runs, err
}

// OccurrenceID is the run id of the occurrence of a recurring series due
// at due ("{series}@{due in RFC 3339, UTC}"): what Status, Cancel and the
// run history call it.
func OccurrenceID(series string, due time.Time) string { return runs.OccurrenceID(series, due) }
