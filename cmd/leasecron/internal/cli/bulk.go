package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
)

func init() {
	extraCommands = append(extraCommands, (*app).bulkCmd)
}

func (a *app) bulkCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "bulk",
		Short: "Act on everything matching a filter: requeue dead letters, cancel pending tasks, disable series",
		Long: `Bulk operations act on every item a filter matches, however many. Each
subcommand first counts what matches and stops there; with --yes it starts the
operation on the fleet, confirmed with that count: a worker runs it as a task,
saving its counts after every batch, and if that worker stops or crashes
another takes it over and continues, acting only on what still matches (so
nothing is done twice). Follow it with --wait, 'leasecron bulk status ID' or
the dashboard's /bulk page. Bulk operations need run records (worker.runs).`,
	}
	c.AddCommand(
		a.bulkKindCmd(leasecron.BulkRequeueDead, "requeue-dead [--type T] [--reason TEXT] [--since WHEN] [--until WHEN] [--yes [--wait DURATION]]",
			"Requeue the dead letters matching a type, a reason and a due range, attempts reset",
			"  leasecron bulk requeue-dead --type mail --reason timeout\n  leasecron bulk requeue-dead --type mail --since 24h --yes --wait 10m"),
		a.bulkKindCmd(leasecron.BulkCancelPending, "cancel [--type T] [--id-prefix P] [--queue NAME] [--yes [--wait DURATION]]",
			"Cancel every pending task of a type, whose id starts with a prefix, and/or of a named queue",
			"  leasecron bulk cancel --type report --id-prefix 2026-11-\n  leasecron bulk cancel --type report --yes\n  leasecron bulk cancel --queue gpu --yes"),
		a.bulkKindCmd(leasecron.BulkDisableSeries, "disable --type T [--queue NAME] [--yes [--wait DURATION]]",
			"Disable every recurring series of a type (enable them one by one with 'leasecron enable')",
			"  leasecron bulk disable --type nightly --yes"),
		a.bulkStatusCmd(), a.bulkListCmd(),
	)
	return c
}

func (a *app) bulkKindCmd(kind leasecron.BulkKind, use, short, example string) *cobra.Command {
	var typ, reason, idPrefix, since, until, queueName string
	var yes bool
	var wait durationFlag
	noun := map[leasecron.BulkKind]string{leasecron.BulkRequeueDead: "dead letter(s)", leasecron.BulkCancelPending: "pending task(s)", leasecron.BulkDisableSeries: "enabled series"}[kind]
	c := &cobra.Command{
		Use:     use,
		Short:   short,
		Example: example,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// An empty filter would widen the operation (--since "" is
			// every dead letter), not narrow it.
			if err := refuseEmpty(cmd, "type", "reason", "id-prefix", "since", "until", "queue"); err != nil {
				return err
			}
			if wait.d < 0 {
				return usagef("--wait %q: want a positive duration, or none", wait.raw)
			}
			if wait.d > 0 && !yes {
				return usagef("--wait follows a started operation: add --yes to start it")
			}
			op, err := leasecron.ParseBulkOpInQueue(string(kind), typ, reason, idPrefix, queueName, since, until, time.Now())
			if ferr := flagError(err); ferr != nil {
				return ferr
			}
			if err != nil {
				return usageError{err}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			n, err := cl.CountBulk(cmd.Context(), op)
			if err != nil {
				return err
			}
			if !yes {
				fmt.Fprintf(a.out, "%d %s match %s; add --yes to start the operation\n", n, noun, op)
				return nil
			}
			b, err := cl.StartBulk(cmd.Context(), op, n, osUser()+"@"+hostName())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "started %s (%s) on %d matching %s\n", b.ID, op, n, noun)
			if wait.d == 0 {
				fmt.Fprintf(a.out, "follow it with: leasecron bulk status %s\n", b.ID)
				return nil
			}
			return a.followBulk(cmd.Context(), cl, b.ID, wait.d)
		},
	}
	fl := c.Flags()
	fl.StringVar(&typ, "type", "", "only items of this task type")
	switch kind {
	case leasecron.BulkRequeueDead:
		fl.StringVar(&reason, "reason", "", "only dead letters whose reason (with the last error) contains this text")
		fl.StringVar(&since, "since", "", "only tasks due at or after this: a duration ago (24h) or RFC 3339")
		fl.StringVar(&until, "until", "", "only tasks due before this: a duration ago (1h) or RFC 3339")
	case leasecron.BulkCancelPending:
		fl.StringVar(&idPrefix, "id-prefix", "", "only tasks whose id starts with this")
		fl.StringVar(&queueName, "queue", "", "only tasks of this named queue (their own, else their type's types.<type>.queue, else default)")
	case leasecron.BulkDisableSeries:
		fl.StringVar(&queueName, "queue", "", "only series of this named queue")
	}
	fl.BoolVar(&yes, "yes", false, "start the operation on what matches (without it, only count)")
	fl.Var(&wait, "wait", "with --yes, follow the operation up to this long (10m), printing its progress")
	return c
}

// followBulk prints the operation's progress every second until it
// finishes or wait passes; a failed operation exits 1.
func (a *app) followBulk(ctx context.Context, cl *leasecron.Client, id string, wait time.Duration) error {
	summary := ""
	return a.follow(ctx, wait, func(ctx context.Context) (string, bool, error) {
		b, err := cl.Bulk(ctx, id)
		if err != nil {
			return "", false, err
		}
		summary = b.Summary()
		if b.State == "failed" {
			return "", false, fmt.Errorf("bulk %s failed: %s", id, b.LastError)
		}
		return fmt.Sprintf("%s %3d%% %s", id, b.Percent(), summary), b.State != "running", nil
	}, func() error {
		return fmt.Errorf("bulk %s is still running after %s (it goes on): %s", id, wait, summary)
	})
}

// follow calls look every second until it reports done or wait passes,
// printing each line it returns that differs from the last one printed
// (an empty line prints nothing). An error of look ends it, unless wait
// has passed: then, as when wait passes between looks, stuck says what
// is still so.
func (a *app) follow(ctx context.Context, wait time.Duration, look func(ctx context.Context) (line string, done bool, err error), stuck func() error) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	last := ""
	for {
		line, done, err := look(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return stuck()
			}
			return err
		}
		if line != "" && line != last {
			fmt.Fprintln(a.out, line)
			last = line
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return stuck()
		case <-time.After(time.Second):
		}
	}
}

func (a *app) bulkStatusCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status ID [--json]",
		Short: "Show a bulk operation: what it does, who started it, how far it has got",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// An id no operation can have: refused here, not sent (a '/'
			// made a storage error of it).
			if err := storage.ValidateKeyPart("bulk operation id", args[0]); err != nil {
				return usageError{err}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			b, err := cl.Bulk(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(a.out).Encode(b)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "id\t%s\nop\t%s\nby\t%s\nstate\t%s\nprogress\t%d%% %s\nstarted\t%s\nupdated\t%s\nattempts\t%d\n",
				b.ID, b.Op, b.By, b.State, b.Percent(), b.Summary(), b.Created.UTC().Format(time.RFC3339), b.Updated.UTC().Format(time.RFC3339), b.Attempts)
			if !b.Finished.IsZero() {
				fmt.Fprintf(tw, "finished\t%s\n", b.Finished.UTC().Format(time.RFC3339))
			}
			if b.LastError != "" {
				fmt.Fprintf(tw, "last error\t%s\n", b.LastError)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) bulkListCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the bulk operations, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			list, err := cl.Bulks(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []leasecron.Bulk{}
				}
				return json.NewEncoder(a.out).Encode(list)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tOP\tBY\tSTARTED\tPROGRESS")
			for _, b := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, b.State, b.Op, b.By, b.Created.UTC().Format(time.RFC3339), b.Summary())
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
