package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/schedule"
)

func init() {
	extraCommands = append(extraCommands, (*app).pauseCmd, (*app).resumeCmd, (*app).pausedCmd)
}

func (a *app) pauseCmd() *cobra.Command {
	var until, forDur, queueName string
	c := &cobra.Command{
		Use:   "pause (TYPE | --queue NAME) [--until RFC3339 | --for DURATION]",
		Short: "Pause a task type, or a named queue, across the fleet",
		Long: `Stops every worker from running tasks of TYPE (or, with --queue, every
task of the named queue NAME, whatever its type) until it is resumed (or
until --until / for --for). Due tasks keep moving into the queue; there they
wait, without using attempts and without being dead-lettered, and run once the
pause ends. Workers honour the pause within worker.pause_check (5 s).`,
		Example: `  leasecron pause notify
  leasecron pause notify --for 30m
  leasecron pause report --until 2026-12-01T09:00:00Z
  leasecron pause --queue gpu --for 1h`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// --for "" is not a pause without end.
			if err := refuseEmpty(cmd, "until", "for", "queue"); err != nil {
				return err
			}
			if (len(args) == 1) == (queueName != "") {
				return usagef("give a TYPE or --queue NAME (one of them)")
			}
			end, err := pauseEnd(until, forDur, time.Now())
			if err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			what := "queue " + queueName
			if queueName != "" {
				err = cl.PauseQueue(cmd.Context(), queueName, end)
			} else {
				what = args[0]
				err = cl.Pause(cmd.Context(), args[0], end)
			}
			if err != nil {
				if errors.Is(err, schedule.ErrInvalid) {
					return usageError{err}
				}
				return err
			}
			if end.IsZero() {
				fmt.Fprintf(a.out, "%s paused until resumed\n", what)
			} else {
				fmt.Fprintf(a.out, "%s paused until %s\n", what, end.UTC().Format(time.RFC3339))
			}
			return nil
		},
	}
	c.Flags().StringVar(&until, "until", "", "end of the pause, RFC 3339 (2026-11-22T10:00:00Z)")
	c.Flags().StringVar(&forDur, "for", "", "length of the pause (30m, 2h)")
	c.Flags().StringVar(&queueName, "queue", "", "pause a named queue (every task in it, whatever its type) instead of a type")
	return c
}

func (a *app) resumeCmd() *cobra.Command {
	var queueName string
	c := &cobra.Command{
		Use:   "resume (TYPE | --queue NAME)",
		Short: "End the pause of a task type or a named queue",
		Long: `Ends the pause of TYPE (or of the named queue NAME): workers take its
waiting tasks up again within worker.pause_check (5 s). One that is not
paused exits with code 3.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseEmpty(cmd, "queue"); err != nil {
				return err
			}
			if (len(args) == 1) == (queueName != "") {
				return usagef("give a TYPE or --queue NAME (one of them)")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			what := "queue " + queueName
			if queueName != "" {
				err = cl.ResumeQueue(cmd.Context(), queueName)
			} else {
				what = args[0]
				err = cl.Resume(cmd.Context(), args[0])
			}
			if err != nil {
				if errors.Is(err, schedule.ErrInvalid) {
					return usageError{err}
				}
				return err
			}
			fmt.Fprintf(a.out, "%s resumed\n", what)
			return nil
		},
	}
	c.Flags().StringVar(&queueName, "queue", "", "resume a named queue instead of a type")
	return c
}

func (a *app) pausedCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "paused [--json]",
		Short: "List the paused task types",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ps, err := cl.Paused(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if ps == nil {
					ps = []leasecron.Pause{}
				}
				return a.printJSON(ps)
			}
			if len(ps) == 0 {
				fmt.Fprintln(a.out, "no task type is paused")
				return nil
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TYPE\tSINCE\tUNTIL\tBY")
			for _, p := range ps {
				end := "resumed"
				if !p.Until.IsZero() {
					end = p.Until.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Type, stamp(p.Since), end, p.By)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// pauseEnd reads pause --until and --for (neither: no end) in their own
// names: schedule.ParseWhen's messages speak of --at and --in.
func pauseEnd(until, forDur string, now time.Time) (time.Time, error) {
	until, forDur = strings.TrimSpace(until), strings.TrimSpace(forDur)
	switch {
	case until != "" && forDur != "":
		return time.Time{}, usagef("give --until (%q) or --for (%q), not both", until, forDur)
	case until != "":
		t, err := time.Parse(time.RFC3339Nano, until)
		if err != nil {
			return time.Time{}, usagef("--until %q: want an RFC 3339 time such as 2026-11-22T10:00:00Z or 2026-11-22T11:00:00+01:00", until)
		}
		return t, nil
	case forDur != "":
		d, err := time.ParseDuration(forDur)
		if err != nil || d <= 0 {
			return time.Time{}, usagef("--for %q: want a positive duration such as 30m or 2h", forDur)
		}
		return now.Add(d), nil
	}
	return time.Time{}, nil
}
