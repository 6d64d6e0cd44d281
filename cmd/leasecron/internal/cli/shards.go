package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/dashboard"
)

func init() {
	extraCommands = append(extraCommands, (*app).shardsCmd)
}

func (a *app) shardsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "shards",
		Short: "Show who moves each schedule shard, its epoch, since when, its due backlog and lag, and the instances",
		Long: `With shards.count above 1, every live worker moves a share of the schedule's
shards; the traffic cop (see leader) shares them out and moves them when a
worker joins, stops or dies. This shows the shard map as the cop last wrote
it, each shard's due backlog, and the instances that have joined.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			r, err := cl.Shards(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(shardsJSON(r))
			}
			a.printShards(r)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.AddCommand(a.shardsSetCmd())
	return c
}

func (a *app) shardsSetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "set N",
		Short: "Change the shard count of a sharded schedule online (2 to 256)",
		Long: `New tasks are placed by the new count within a second; each shard's owner
then writes pointers so that tasks placed under the old count are found by id
under the new one (leasecron shards shows the progress). Tasks do not move:
a shard keeps being moved while it holds tasks. A change while the last one
is still being applied is refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[0])
			if err != nil || n < 2 || n > leasecron.MaxShards {
				return usageError{fmt.Errorf("shard count %q: want a whole number from 2 to %d", args[0], leasecron.MaxShards)}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			if err := cl.SetShards(cmd.Context(), n); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "new tasks are placed by %d shards; see leasecron shards for the owners' progress\n", n)
			return nil
		},
	}
}

func (a *app) printShards(r leasecron.ShardReport) {
	switch {
	case r.Count == 1 && r.MapCount == 0:
		fmt.Fprintln(a.out, "1 shard, moved by the leader (shards.count 1: see `leasecron leader`)")
	case r.MapCount == 0:
		fmt.Fprintf(a.out, "%d shards; no traffic cop has shared them out yet (is a worker with shards.count %d running?)\n", r.Count, r.Count)
	default:
		fmt.Fprintf(a.out, "%d shards, shared out by the traffic cop of generation %d\n", r.MapCount, r.Generation)
	}
	if r.PrevCount != 0 {
		done := 0
		for _, s := range r.Shards {
			if s.Pointed {
				done++
			}
		}
		fmt.Fprintf(a.out, "changing from %d to %d shards: %d of %d shards' tasks findable under the new count\n", r.PrevCount, r.MapCount, done, len(r.Shards))
	}
	if r.Span > r.MapCount && r.MapCount != 0 {
		fmt.Fprintf(a.out, "%d shards hold tasks placed under a larger count: they are moved until empty\n", r.Span-r.MapCount)
	}
	if r.Count == 1 && r.MapCount == 0 {
		return
	}
	if len(r.RunPartitionsRead) > 1 {
		fmt.Fprintf(a.out, "run records: new ones spread over %d partitions; lookups also try those of %s\n", r.RunPartitions, countsOtherThan(r.RunPartitionsRead, r.RunPartitions))
	} else {
		fmt.Fprintf(a.out, "run records: spread over %d partitions\n", r.RunPartitions)
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHARD\tOWNER\tEPOCH\tSINCE\tSTATE\tDUE\tLAG")
	for _, s := range r.Shards {
		owner, since := s.Owner, "never"
		if owner == "" {
			owner = "(none)"
		}
		if s.HandingOverFrom != "" {
			owner += " (from " + s.HandingOverFrom + ")"
		}
		if !s.Since.IsZero() {
			since = stamp(s.Since)
		}
		due := fmt.Sprint(s.Due)
		if s.DueCapped {
			due += "+"
		}
		state := "polled"
		if s.Quiet {
			state = "quiet"
		}
		if !s.Pointed {
			state += ", pointing"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", s.Shard, owner, s.Epoch, since, state, due, s.Lag.Round(time.Millisecond))
	}
	tw.Flush()
	fmt.Fprintln(a.out)
	tw = tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tLIVE\tSHARDS")
	for _, m := range r.Members {
		fmt.Fprintf(tw, "%s\t%t\t%d\n", m.Name, m.Live, m.Shards)
	}
	tw.Flush()
}

// countsOtherThan lists the counts of cs but n, as "4 and 8".
func countsOtherThan(cs []int, n int) string {
	var out []string
	for _, c := range cs {
		if c != n {
			out = append(out, strconv.Itoa(c))
		}
	}
	return strings.Join(out, " and ")
}

// shardsJSON is the shard map as the dashboard's /fleet JSON shows it.
func shardsJSON(r leasecron.ShardReport) any { return dashboard.NewShardsView(r) }
