package cli

import (
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/blackboard/calendar"
	"github.com/leasecron/leasecron/dashboard"
	"github.com/leasecron/leasecron/schedule"
)

func init() {
	extraCommands = append(extraCommands, (*app).blackboardCmd, (*app).aggregatorCmd)
}

func (a *app) blackboardCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "blackboard",
		Short: "Show every blackboard key (start, stop, running, worker, last error); add, remove or run one with its subcommands",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			es, err := cl.Blackboard(cmd.Context())
			if err != nil {
				return err
			}
			now := time.Now()
			if asJSON {
				out := []dashboard.KeyView{}
				for _, e := range es {
					out = append(out, dashboard.KeyViewOf(e, now))
				}
				return a.printJSON(out)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSTATE\tSTART\tSTOP\tRUNNING\tWORKER\tRUNS\tLAST ERROR")
			for _, e := range es {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\t%s\t%d\t%s\n", e.Key, e.State(now), clockTime(e.Start), clockTime(e.Stop), e.Running, e.Worker, e.Runs, short(e.LastError, 60))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(a.boardCommands("blackboard")...)
	return c
}

func clockTime(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Local().Format("15:04:05")
}

// aggregatorCmd is the blackboard's earlier name, kept so that scripts
// written for it keep working.
func (a *app) aggregatorCmd() *cobra.Command {
	c := &cobra.Command{
		Use:        "aggregator",
		Short:      "Add, remove or run blackboard keys (the earlier name of leasecron blackboard)",
		Hidden:     true,
		Deprecated: "use leasecron blackboard add, remove or run-now",
	}
	c.AddCommand(a.boardCommands("aggregator")...)
	return c
}

// boardCommands are the blackboard's add, remove and run-now, under the
// command named parent.
func (a *app) boardCommands(parent string) []*cobra.Command {
	var every durationFlag
	var typ string
	var replace bool
	add := &cobra.Command{
		Use:     "add KEY --every DURATION --type T [PAYLOAD | -]",
		Short:   "Add a key that a worker runs once per interval",
		Example: `  leasecron ` + parent + ` add westlafcals --every 8h --type calendar '{"feeds":["https://example.org/a.ics"]}'`,
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("every") {
				return usagef("--every is required (e.g. 1h)")
			}
			if every.d <= 0 {
				return usagef("--every %q: want a positive interval of at least 1s (e.g. 1h)", every.raw)
			}
			if err := schedule.ValidateType(typ); err != nil {
				return usageError{err}
			}
			payload, err := a.readPayload(args[1:])
			if err != nil {
				return err
			}
			if h, ok := a.cfg.Handlers[typ]; ok && h.Kind == "calendar" {
				if _, err := calendar.ParsePayload([]byte(payload)); err != nil {
					return usageError{err}
				}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			e := blackboard.Entry{Key: args[0], Interval: every.d, Type: typ, Payload: payload}
			if err := e.Validate(); err != nil {
				return usageError{err}
			}
			if err := cl.AddBlackboardKey(cmd.Context(), e, &blackboard.AddOptions{Replace: replace}); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "added %s (every %s, type %s)\n", e.Key, every.d, typ)
			return nil
		},
	}
	add.Flags().Var(&every, "every", "interval between runs (required)")
	add.Flags().StringVar(&typ, "type", "", "handler type (required)")
	add.Flags().BoolVar(&replace, "replace", false, "replace an existing key's definition")
	remove := &cobra.Command{
		Use:   "remove KEY",
		Short: "Remove a key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveBlackboardKey(cmd.Context(), args[0]); err != nil {
				if errors.Is(err, blackboard.ErrInvalid) {
					return usageError{err} // a key no entry can have
				}
				return err
			}
			fmt.Fprintf(a.out, "removed %s\n", args[0])
			return nil
		},
	}
	runNow := &cobra.Command{
		Use:   "run-now KEY",
		Short: "Make a key due at the next cycle regardless of its interval",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if err := cl.RunBlackboardKeyNow(cmd.Context(), args[0]); err != nil {
				if errors.Is(err, blackboard.ErrInvalid) {
					return usageError{err}
				}
				return err
			}
			fmt.Fprintf(a.out, "%s will run at the next cycle\n", args[0])
			return nil
		},
	}
	return []*cobra.Command{add, remove, runNow}
}
