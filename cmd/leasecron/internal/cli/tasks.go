package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/internal/tracing"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

func init() {
	extraCommands = append(extraCommands, (*app).scheduleCmd, (*app).cancelCmd, (*app).rescheduleCmd, (*app).disableCmd, (*app).enableCmd, (*app).listCmd, (*app).statusCmd)
}

// stdinLimit bounds a payload read from stdin to one byte more than the
// configured maximum, so an oversize payload is reported, not buffered.
func (a *app) readPayload(args []string) (string, error) {
	if len(args) == 0 {
		return "", nil
	}
	if args[0] != "-" {
		return args[0], nil
	}
	b, err := io.ReadAll(io.LimitReader(a.in, int64(a.cfg.Payload.MaxSize)+1))
	if err != nil {
		return "", fmt.Errorf("reading payload from stdin: %w", err)
	}
	if len(b) > a.cfg.Payload.MaxSize {
		return "", usagef("payload from stdin is larger than payload.max_size (%d bytes)", a.cfg.Payload.MaxSize)
	}
	return string(b), nil
}

func (a *app) scheduleCmd() *cobra.Command {
	var at, in, typ, id, every, cron, tz, file, uniqueKey, uniqueStates string
	var after []string
	var batch fileBatch
	var replace, asJSON, partial, afterAny bool
	var maxAttempts int
	var queueName, priority, fairKey string
	var uniqueFor durationFlag
	c := &cobra.Command{
		Use:   "schedule [--at RFC3339 | --in DURATION] [--type T] [--id ID] [--every D | --cron EXPR [--tz ZONE]] [--after ID,... [--after-any]] [PAYLOAD | -]\n  leasecron schedule --file tasks.jsonl [--partial] [--batch ID] [--on-complete TYPE [--on-complete-payload P]]",
		Short: "Schedule a task and print its id",
		Long: `Schedules a task. The payload is the argument, or stdin when it is "-".
Without --at or --in the task is due now (a recurring one at its first
occurrence from now). --every takes a Go duration ("10m"); --cron a 5-field
expression or a descriptor such as @hourly, evaluated in --tz (default UTC).
An id that is already pending is refused unless --replace is given.

--unique-key KEY creates the task only if no other task of its type holds
KEY: one pending, queued, running, snoozed or between attempts, or one that
finished (succeeded or dead) less than --unique-for ago (at most
runs.retention, or runs.retention_failed for dead runs). --unique-states
picks the states that count instead (comma-separated run states). A task
refused as a duplicate prints the id of the task that holds the key and
exits with code 4.

--after ID,... makes the task wait until every one of those tasks has
succeeded; --at or --in is then a lower bound. It starts within about a
second of the last one's success. If one of them ends dead or cancelled the
task is cancelled, naming it, and so is what waits for the task; with
--after-any it runs once they have all ended, however. An unknown id, a
recurring series, a parent that has already ended dead or cancelled (without
--after-any) and a cycle are refused.

--queue NAME sends the task to a named queue: only workers that consume it
(worker.queues) take it. --priority 1..4 (or critical, high, default, low)
sets its priority: a worker never starts a task of a lower level while one
of a higher level that it can run is waiting (worker.priority_weights makes
it weighted instead). Without them the task takes its type's
types.<type>.queue and .priority, else the default queue at priority 3.
--fair-key KEY (a tenant, a customer) makes the task count towards KEY's
share: while several keys have tasks waiting, workers take from each in
turn (fairness.lanes, fairness.weights), so one key's flood does not hold
the others back.

--file schedules one task per line of a JSON Lines file ("-" for stdin),
each an object with id, type, payload (a string, or any JSON value taken as
its JSON text), at or in, every or cron, tz, max_attempts, queue,
priority and fair_key, in table
transactions of up to 100. Every line is checked first: a malformed line is
reported with its number and nothing is scheduled, and an id already pending
undoes the whole file, unless --partial schedules what it can. A line's
"after" (ids, as a list or comma-separated) and "after_any" are --after and
--after-any; they may name tasks of the same file.

--batch ID makes the file's tasks one batch (default id: generated, with
--on-complete) and --on-complete TYPE adds its completion callback: a task
of that type (payload --on-complete-payload, id "{batch}-done") that runs
once, after every task of the file has ended, its handler told the batch
and how many succeeded, died and were cancelled. ` + "`leasecron batch ID`" + ` shows
its progress.`,
		Example: `  leasecron schedule --in 10m --type report '{"day":"2026-11-22"}'
  leasecron schedule --at 2026-12-01T09:00:00Z --id invoice-42 --type mail - < body.json
  leasecron schedule --id nightly --cron "0 3 * * *" --tz Europe/Amsterdam --type backup
  leasecron schedule --type invoice --unique-key customer-7 --unique-for 1h '{"customer":7}'
  leasecron schedule --id report --after extract-1,extract-2 --type report
  leasecron schedule --type reset-password --priority critical '{"user":7}'
  leasecron schedule --type render --queue gpu '{"scene":3}'
  leasecron schedule --file tasks.jsonl
  leasecron schedule --file images.jsonl --batch resize-7 --on-complete notify`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseEmpty(cmd, "at", "in", "type", "id", "every", "cron", "tz", "queue", "priority", "fair-key",
				"unique-key", "unique-states", "after", "file", "batch", "on-complete"); err != nil {
				return err
			}
			if cmd.Flags().Changed("file") {
				if other := changed(cmd, "at", "in", "type", "id", "every", "cron", "tz", "replace", "max-attempts", "unique-key", "unique-for",
					"unique-states", "queue", "priority", "fair-key", "after", "after-any"); other != "" || len(args) > 0 {
					return usagef("--file takes every task from the file: give only --partial, --batch, --on-complete and --json with it")
				}
				return a.scheduleFile(tracing.FromEnv(cmd.Context(), os.Getenv), file, partial, asJSON, batch)
			}
			switch {
			case partial:
				return usagef("--partial goes with --file")
			case changed(cmd, "batch", "on-complete", "on-complete-payload") != "":
				return usagef("--batch, --on-complete and --on-complete-payload go with --file")
			case afterAny && len(after) == 0:
				return usagef("--after-any goes with --after")
			case replace && id == "":
				return usagef("--replace goes with --id: it replaces the pending task of that id")
			case maxAttempts < 0 || maxAttempts > schedule.MaxMaxAttempts:
				return usagef("--max-attempts %q: want 0 (retry.max_attempts) to %d", strconv.Itoa(maxAttempts), schedule.MaxMaxAttempts)
			}
			due, rule, err := schedule.When{At: at, In: in, Every: every, Cron: cron, TZ: tz}.Resolve(time.Now())
			if err != nil {
				return usageError{err}
			}
			if uniqueKey == "" && changed(cmd, "unique-for", "unique-states") != "" {
				return usagef("--unique-for and --unique-states go with --unique-key")
			}
			if uniqueFor.d < 0 {
				return usagef("--unique-for %q: want a duration of 0 or more (e.g. 10m, 24h)", uniqueFor.raw)
			}
			states, err := schedule.ParseUniqueStates(uniqueStates)
			if err != nil {
				return usagef("--unique-states %q: %w", uniqueStates, err)
			}
			prio, err := queue.ParsePriority(priority)
			if err != nil {
				return usagef("--priority %s", strings.TrimPrefix(err.Error(), "priority "))
			}
			if err := queue.ValidateRouteQueue(queueName); err != nil {
				return usagef("--queue: %v", err)
			}
			payload, err := a.readPayload(args)
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			so := &leasecron.ScheduleOptions{Replace: replace}
			if uniqueKey != "" {
				so.Unique = &leasecron.Unique{Key: uniqueKey, For: uniqueFor.d, States: states}
			}
			it, err := cl.Schedule(tracing.FromEnv(cmd.Context(), os.Getenv), leasecron.Item{ID: id, Type: typ, Payload: payload, Due: due, Recurrence: rule, TZ: tz, MaxAttempts: maxAttempts,
				After: after, AfterAny: afterAny, Queue: queueName, Priority: prio, FairKey: fairKey}, so)
			var dup *leasecron.DuplicateError
			if errors.As(err, &dup) {
				if asJSON {
					if err := a.printJSON(map[string]any{"id": dup.ID, "duplicate": true, "type": dup.Type, "unique_key": dup.Key}); err != nil {
						return err
					}
				} else {
					fmt.Fprintln(a.out, dup.ID)
				}
				return err
			}
			if err != nil {
				if ferr := flagError(err); ferr != nil {
					return ferr
				}
				if errors.Is(err, schedule.ErrInvalid) || errors.Is(err, schedule.ErrBadRecurrence) || errors.Is(err, schedule.ErrPayloadTooLarge) {
					return usageError{err}
				}
				return err
			}
			if id == "" {
				a.drawnID = it.ID
			}
			if asJSON {
				return a.printJSON(itemJSON(it))
			}
			fmt.Fprintln(a.out, it.ID)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&at, "at", "", "due time, RFC 3339 (2026-11-22T10:00:00Z)")
	f.StringVar(&in, "in", "", "due after this duration from now (90s, 10m, 2h)")
	f.StringVar(&typ, "type", "", "handler type (default \"default\")")
	f.StringVar(&id, "id", "", "task id (default: generated)")
	f.StringVar(&every, "every", "", "repeat at this interval (e.g. 10m)")
	f.StringVar(&cron, "cron", "", "repeat on this cron expression or descriptor (@hourly)")
	f.StringVar(&tz, "tz", "", "IANA time zone for --cron (default UTC)")
	f.BoolVar(&replace, "replace", false, "replace a pending task with the same id")
	f.IntVar(&maxAttempts, "max-attempts", 0, "attempts before the task is dead (default retry.max_attempts)")
	f.StringVar(&queueName, "queue", "", "the named queue (worker pool) to send it to (default types.<type>.queue, else the default queue)")
	f.StringVar(&fairKey, "fair-key", "", "the key (a tenant) whose fair share the task counts towards")
	f.StringVar(&priority, "priority", "", "1 (critical), 2 (high), 3 (default) or 4 (low) (default types.<type>.priority, else 3)")
	f.BoolVar(&asJSON, "json", false, "print the scheduled task as JSON (with --file: one result per line)")
	f.StringVar(&file, "file", "", "schedule one task per line of this JSON Lines file (- for stdin)")
	f.StringVar(&uniqueKey, "unique-key", "", "create the task only if no other task of its type holds this key")
	f.Var(&uniqueFor, "unique-for", "with --unique-key: how long a finished task still holds the key (e.g. 1h)")
	f.StringVar(&uniqueStates, "unique-states", "", "with --unique-key: the run states that hold the key, comma-separated (default all but cancelled)")
	f.BoolVar(&partial, "partial", false, "with --file: schedule the lines that can be, report the others")
	f.StringSliceVar(&after, "after", nil, "wait until these tasks have succeeded (ids, comma-separated)")
	f.BoolVar(&afterAny, "after-any", false, "with --after: wait until they have ended, however they end")
	f.StringVar(&batch.ID, "batch", "", "with --file: make the tasks one batch with this id")
	f.StringVar(&batch.OnComplete, "on-complete", "", "with --file: the type of a task to run once every task of the file has ended")
	f.StringVar(&batch.Payload, "on-complete-payload", "", "with --on-complete: its payload")
	return c
}

type itemOut struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	Due         time.Time `json:"due"`
	Recurrence  string    `json:"recurrence,omitempty"`
	TZ          string    `json:"tz,omitempty"`
	Payload     string    `json:"payload,omitempty"`
	PayloadBlob string    `json:"payload_blob,omitempty"`
	MaxAttempts int       `json:"max_attempts,omitempty"`
	Queue       string    `json:"queue,omitempty"`
	Priority    int       `json:"priority,omitempty"`
	FairKey     string    `json:"fair_key,omitempty"`
	Shard       string    `json:"shard,omitempty"`
	RowKey      string    `json:"row_key,omitempty"`
	Problem     string    `json:"problem,omitempty"`
	// Disabled is when a disabled series was disabled.
	Disabled time.Time `json:"disabled,omitzero"`
	// After, Met, AfterAny and Waiting: the tasks it waits for, those
	// that have released it, and whether it still waits.
	After    []string `json:"after,omitempty"`
	Met      []string `json:"met,omitempty"`
	AfterAny bool     `json:"after_any,omitempty"`
	Waiting  bool     `json:"waiting,omitempty"`
	// Batch is its batch; Callback marks the batch's completion callback.
	Batch    string `json:"batch,omitempty"`
	Callback bool   `json:"callback,omitempty"`
}

func itemJSON(it leasecron.Item) itemOut {
	return itemOut{ID: it.ID, Type: it.Type, Due: it.Due, Recurrence: it.Recurrence, TZ: it.TZ, Payload: it.Payload,
		PayloadBlob: it.PayloadBlob, MaxAttempts: it.MaxAttempts, Queue: it.Queue, Priority: it.Priority, FairKey: it.FairKey, Shard: it.Shard, RowKey: it.RowKey, Problem: it.Problem, Disabled: it.Disabled,
		After: it.After, Met: it.Met, AfterAny: it.AfterAny, Waiting: it.Waiting, Batch: it.Batch, Callback: it.Callback}
}

func (a *app) cancelCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a task: delete it if still pending, or mark its run cancelled if already queued",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needID(args[0]); err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			res, err := cl.Cancel(cmd.Context(), args[0])
			if errors.Is(err, leasecron.ErrInvalidTask) {
				return usageError{err} // an id no task can have; nothing was written
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(res)
			}
			fmt.Fprintln(a.out, res)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) rescheduleCmd() *cobra.Command {
	var at, in string
	var asJSON bool
	c := &cobra.Command{
		Use:   "reschedule ID (--at RFC3339 | --in DURATION)",
		Short: "Move a pending task to a new due time (atomically)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseEmpty(cmd, "at", "in"); err != nil {
				return err
			}
			if err := needID(args[0]); err != nil {
				return err
			}
			if at == "" && in == "" {
				return usagef("give --at or --in")
			}
			due, err := schedule.ParseWhen(at, in, time.Now())
			if err != nil {
				return usageError{err}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			it, err := cl.Reschedule(cmd.Context(), args[0], due)
			if errors.Is(err, leasecron.ErrInvalidTask) {
				return usageError{err} // refused before anything was written
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(itemJSON(it))
			}
			fmt.Fprintf(a.out, "%s now due %s\n", it.ID, it.Due.Format(time.RFC3339))
			return nil
		},
	}
	c.Flags().StringVar(&at, "at", "", "new due time, RFC 3339")
	c.Flags().StringVar(&in, "in", "", "new due time as a duration from now")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) disableCmd() *cobra.Command {
	return a.seriesSwitchCmd("disable", "Stop a recurring series without deleting it (enable runs it again)",
		"Move the series' row out of the mover's reach: it keeps its rule, zone and payload, status shows it\n"+
			"disabled, and no occurrence runs until `leasecron enable ID`. Occurrences already sent early are skipped.",
		(*leasecron.Client).Disable, func(it leasecron.Item) string {
			return fmt.Sprintf("%s disabled since %s (its next occurrence was %s)", it.ID, it.Disabled.Format(time.RFC3339), it.Due.Format(time.RFC3339))
		})
}

func (a *app) enableCmd() *cobra.Command {
	return a.seriesSwitchCmd("enable", "Run a disabled recurring series again from its next occurrence",
		"The next occurrence is the one the series had when disabled if it is still ahead, else the first of\n"+
			"its rule after now: occurrences that fell due while it was disabled do not run.",
		(*leasecron.Client).Enable, func(it leasecron.Item) string {
			return fmt.Sprintf("%s enabled; next occurrence %s", it.ID, it.Due.Format(time.RFC3339))
		})
}

// seriesSwitchCmd is `leasecron disable` or `enable`: call with the id,
// print the item (or its JSON).
func (a *app) seriesSwitchCmd(verb, short, long string, call func(*leasecron.Client, context.Context, string) (leasecron.Item, error), say func(leasecron.Item) string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Long:  short + ".\n\n" + long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needID(args[0]); err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			it, err := call(cl, cmd.Context(), args[0])
			if errors.Is(err, leasecron.ErrInvalidTask) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(itemJSON(it))
			}
			fmt.Fprintln(a.out, say(it))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) listCmd() *cobra.Command {
	var due, asJSON, all bool
	var limit int
	var cont string
	c := &cobra.Command{
		Use:   "list",
		Short: "List pending tasks in due order (paged)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimit(limit); err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			var items []leasecron.Item
			for {
				p, err := cl.List(cmd.Context(), &leasecron.ListOptions{Due: due, Limit: limit, Continuation: cont})
				page, next := p.Items, p.Continue
				if errors.Is(err, leasecron.ErrInvalidTask) {
					return usagef("--continue: %w", err) // a token no page printed
				}
				if err != nil {
					return err
				}
				items = append(items, page...)
				cont = next
				if !all || next == "" {
					break
				}
			}
			if asJSON {
				out := struct {
					Items []itemOut `json:"items"`
					Next  string    `json:"next,omitempty"`
				}{Items: []itemOut{}, Next: cont}
				for _, it := range items {
					out.Items = append(out.Items, itemJSON(it))
				}
				return a.printJSON(out)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTYPE\tDUE\tRECURRENCE\tPAYLOAD")
			for _, it := range items {
				p := it.Payload
				if it.PayloadBlob != "" {
					p = "(blob " + it.PayloadBlob + ")"
				}
				if it.Problem != "" {
					p = "MALFORMED: " + it.Problem
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", it.ID, it.Type, it.Due.Format(time.RFC3339), it.Recurrence, short(p, 40))
			}
			tw.Flush()
			if cont != "" {
				fmt.Fprintf(a.errOut, "more: leasecron list --continue %s\n", cont)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&due, "due", false, "only tasks due now")
	c.Flags().IntVar(&limit, "limit", 100, "page size (at most 1000)")
	c.Flags().StringVar(&cont, "continue", "", "continuation token from a previous page")
	c.Flags().BoolVar(&all, "all", false, "fetch every page")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// printFlow prints what a pending task waits for and its batch.
func printFlow(w io.Writer, p leasecron.Item) {
	if len(p.After) > 0 {
		label := "after"
		if p.AfterAny {
			label = "after (any end)"
		}
		var parts []string
		for _, id := range p.After {
			if slices.Contains(p.Met, id) {
				id += " (done)"
			}
			parts = append(parts, id)
		}
		fmt.Fprintf(w, "%s\t%s\n", label, strings.Join(parts, ", "))
	}
	switch {
	case p.Callback && p.Waiting:
		fmt.Fprintf(w, "batch\t%s: this is its completion callback, waiting for every member to end\n", p.Batch)
	case p.Callback:
		fmt.Fprintf(w, "batch\t%s: this is its completion callback\n", p.Batch)
	case p.Batch != "":
		fmt.Fprintf(w, "batch\t%s\n", p.Batch)
	}
}

func short(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func (a *app) statusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status ID",
		Short: "Show a task's state, attempts, worker, times, last error and output tail",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needID(args[0]); err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			st, err := cl.Status(cmd.Context(), args[0])
			if errors.Is(err, leasecron.ErrInvalidTask) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				out := map[string]any{"id": st.ID, "state": st.State()}
				if st.Pending != nil {
					out["pending"] = itemJSON(*st.Pending)
					if next := upcoming(*st.Pending); len(next) > 0 {
						var ts []string
						for _, t := range next {
							ts = append(ts, t.Format(time.RFC3339))
						}
						out["next_occurrences"] = ts
					}
				}
				if st.Run != nil {
					out["run"] = runJSON(*st.Run)
				}
				return a.printJSON(out)
			}
			printStatus(a.out, st)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// printStatus writes a task's status as `status` prints it: the pending
// row, then the run record, each field once.
func printStatus(w io.Writer, st leasecron.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nstate\t%s\n", st.ID, st.State())
	if p := st.Pending; p != nil {
		fmt.Fprintf(tw, "due\t%s\ntype\t%s\n", p.Due.Format(time.RFC3339Nano), p.Type)
		if !p.Disabled.IsZero() {
			fmt.Fprintf(tw, "disabled\tsince %s: no occurrence runs until `leasecron enable %s`\n", p.Disabled.Format(time.RFC3339), p.ID)
		}
		printFlow(tw, *p)
		if p.Recurrence != "" {
			fmt.Fprintf(tw, "recurrence\t%s %s\n", p.Recurrence, p.TZ)
			for i, t := range upcoming(*p) {
				label := ""
				if i == 0 {
					label = "next"
				}
				fmt.Fprintf(tw, "%s\t%s\n", label, t.Format("Mon 2006-01-02 15:04 MST (-07:00)"))
			}
		}
	}
	if r := st.Run; r != nil {
		// The type once: a pending row of another type (a replace) makes
		// the run's its own line.
		switch {
		case st.Pending == nil:
			fmt.Fprintf(tw, "type\t%s\n", r.Type)
		case st.Pending.Type != r.Type:
			fmt.Fprintf(tw, "run type\t%s\n", r.Type)
		}
		fmt.Fprintf(tw, "attempts\t%d\nworker\t%s\n", r.Attempts, r.Worker)
		if !r.Started.IsZero() {
			fmt.Fprintf(tw, "started\t%s\n", r.Started.Format(time.RFC3339Nano))
		}
		if !r.Finished.IsZero() {
			fmt.Fprintf(tw, "finished\t%s\n", r.Finished.Format(time.RFC3339Nano))
		}
		if r.State == leasecron.RunSnoozed {
			fmt.Fprintf(tw, "snoozed until\t%s\n", r.SnoozedUntil.Format(time.RFC3339Nano))
		}
		if r.Progress.Reported() {
			fmt.Fprintf(tw, "progress\t%s (at %s)\n", r.Progress, r.Progress.At.Format(time.RFC3339Nano))
		}
		if r.Duplicates > 0 {
			fmt.Fprintf(tw, "duplicates\t%d\n", r.Duplicates)
		}
		if r.LastError != "" {
			fmt.Fprintf(tw, "last error\t%s\n", r.LastError)
		}
	}
	tw.Flush()
	if r := st.Run; r != nil && r.OutputTail != "" {
		fmt.Fprintf(w, "output (tail):\n%s\n", r.OutputTail)
	}
}

// runJSON is a run as `status --json` prints it: the dashboard's JSON
// shape of a run.
func runJSON(r leasecron.Run) dashboard.RunView { return dashboard.RunViewOf(r) }

// upcomingShown is how many next occurrences status shows for a series.
const upcomingShown = dashboard.UpcomingPerSeries

// upcoming returns a series' next occurrences in its own zone (none
// while it is disabled).
func upcoming(it leasecron.Item) []time.Time {
	if !it.Disabled.IsZero() {
		return nil // nothing runs until it is enabled
	}
	ts, _ := schedule.Upcoming(it.Recurrence, it.TZ, it.Due, upcomingShown)
	return ts
}
