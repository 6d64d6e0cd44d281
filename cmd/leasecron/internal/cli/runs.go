package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
)

func init() {
	extraCommands = append(extraCommands, (*app).runsCmd, (*app).migrateCmd)
}

// runsCmd is `leasecron runs`: the run history, newest first, paged; with
// the subcommands `clean` and `check`.
func (a *app) runsCmd() *cobra.Command {
	var state, typ, series, batch, cont string
	var since durationFlag
	var limit int
	var asJSON, all bool
	c := &cobra.Command{
		Use:   "runs [--state S] [--type T] [--series ID] [--batch ID] [--since DURATION] [--limit N] [--continue TOKEN] [--all] [--json]",
		Short: "List run records, newest first (paged)",
		Long: "List run records newest first (by due time). A page of --limit runs (default 50, at most 1000) costs\n" +
			"four table queries whatever the table holds, one with --series. --state scheduled lists the tasks\n" +
			"still waiting in the schedule, soonest first. Expired records (runs.retention, runs.retention_failed)\n" +
			"are not listed.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := leasecron.RunQuery{Type: typ, Series: series, Batch: batch, Limit: limit, Continue: cont}
			if state != "" {
				st, err := leasecrontype.ParseRunState(state)
				if err != nil {
					return usagef("--state: %w", err)
				}
				q.State = st
			}
			// A filter that no run can match is a typo, not an empty
			// answer (search refuses the same as type: and batch:).
			if typ != "" {
				if err := schedule.ValidateType(typ); err != nil {
					return usagef("--type: %w", err)
				}
			}
			if batch != "" {
				if err := schedule.ValidateID(batch); err != nil {
					return usagef("--batch: %w", err)
				}
			}
			from, err := since.since(time.Now(), "runs due")
			if err != nil {
				return err
			}
			q.Since = from
			if err := checkLimit(limit); err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			var rs []leasecron.Run
			for {
				p, err := cl.Runs(cmd.Context(), q)
				if errors.Is(err, leasecron.ErrInvalidRunQuery) {
					return usageError{err}
				}
				if err != nil {
					return err
				}
				rs = append(rs, p.Runs...)
				q.Continue = p.Continue
				if !all || p.Continue == "" {
					break
				}
			}
			if asJSON {
				return a.printRunsJSON(rs, q.Continue)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTYPE\tDUE\tATTEMPTS\tWORKER\tFINISHED\tPROGRESS\tLAST ERROR")
			for _, r := range rs {
				progress := "-"
				if r.Progress.Reported() {
					progress = short(r.Progress.String(), 30)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.Type, stamp(r.Due), r.Attempts, r.Worker,
					stamp(r.Finished), progress, short(strings.ReplaceAll(r.LastError, "\n", " "), 50))
			}
			tw.Flush()
			if q.Continue != "" {
				fmt.Fprintf(a.errOut, "more: leasecron runs %s--continue %s\n", a.repeatFlags(cmd), q.Continue)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&state, "state", "", "only runs in this state: queued, running, succeeded, failed, dead, cancelled (or scheduled: pending tasks)")
	f.StringVar(&typ, "type", "", "only runs of this task type")
	f.StringVar(&series, "series", "", "only the occurrences of this recurring series")
	f.StringVar(&batch, "batch", "", "only the runs of this batch's members")
	f.Var(&since, "since", "only runs due within this long before now (e.g. 1h)")
	f.IntVar(&limit, "limit", 50, "page size (at most 1000)")
	f.StringVar(&cont, "continue", "", "continuation token from a previous page (with the same filters)")
	f.BoolVar(&all, "all", false, "fetch every page")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(a.runsCleanCmd(), a.runsCheckCmd())
	return c
}

// checkLimit refuses a --limit outside the page sizes the paged listings
// (runs, search, audit) accept.
func checkLimit(limit int) error {
	if limit < 1 || limit > 1000 {
		return usagef("--limit %d: want 1..1000", limit)
	}
	return nil
}

// printRunsJSON prints a page of runs as `runs --json` does, with the
// token of the next page.
func (a *app) printRunsJSON(rs []leasecron.Run, next string) error {
	out := struct {
		Runs []dashboard.RunView `json:"runs"`
		Next string              `json:"next,omitempty"`
	}{Runs: []dashboard.RunView{}, Next: next}
	for _, r := range rs {
		out.Runs = append(out.Runs, runJSON(r))
	}
	return a.printJSON(out)
}

// repeatFlags renders the filters of cmd for the "more:" hint, so the
// next page is asked with the same query.
func (a *app) repeatFlags(cmd *cobra.Command) string {
	var b strings.Builder
	for _, name := range []string{"state", "type", "series", "batch", "since", "limit"} {
		if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed {
			fmt.Fprintf(&b, "--%s %s ", name, fl.Value.String())
		}
	}
	return b.String()
}

// stamp prints a time that may be absent: RFC 3339 in UTC, or "never".
func stamp(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339)
}

func (a *app) runsCleanCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "clean",
		Short: "Remove expired run records and old per-minute counters now (the leader does it every runs.clean_every)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			res, err := cl.CleanRuns(cmd.Context())
			if errors.Is(err, leasecron.ErrNoRunRecords) {
				return err // nothing to clean, rather than "stopped after removing 0"
			}
			if err != nil {
				return fmt.Errorf("cleaning stopped after removing %d run records: %w", res.Expired, err)
			}
			if asJSON {
				return a.printJSON(res)
			}
			fmt.Fprintf(a.out, "removed %d expired run records, %d per-minute counter rows and %d series summaries\n", res.Expired, res.Counters, res.Summaries)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) runsCheckCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "check",
		Short: "Read the whole Runs table and report runs whose rows disagree (exit 1 if any)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			res, err := cl.CheckRuns(cmd.Context())
			problems, n := res.Problems, res.Runs
			if err != nil {
				return err
			}
			if asJSON {
				if err := a.printJSON(map[string]any{"runs": n, "problems": append([]string{}, problems...)}); err != nil {
					return err
				}
			} else {
				for _, p := range problems {
					fmt.Fprintln(a.out, p)
				}
				fmt.Fprintf(a.out, "%d runs read, %d problems\n", n, len(problems))
			}
			if len(problems) > 0 {
				return fmt.Errorf("%d run records are inconsistent", len(problems))
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// migrateCmd is `leasecron migrate`: convert run records of the layout
// before run history.
func (a *app) migrateCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "migrate",
		Short: "Convert run records written by leasecron before run history into the current layout (safe to repeat)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			res, err := cl.MigrateRuns(cmd.Context())
			if errors.Is(err, leasecron.ErrNoRunRecords) {
				return err // nothing to convert: running it again would not help
			}
			if err != nil {
				return fmt.Errorf("migration stopped (run it again to continue): %w", err)
			}
			if asJSON {
				return a.printJSON(res)
			}
			fmt.Fprintf(a.out, "converted %d run records, skipped %d, removed %d old rows\n", res.Converted, res.Skipped, res.Removed)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
