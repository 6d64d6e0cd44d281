package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/schedule"
)

func init() {
	extraCommands = append(extraCommands, (*app).batchCmd)
}

// batchOut is `batch --json`.
type batchOut struct {
	leasecron.BatchStatus
	Members []memberOut `json:"members,omitempty"`
}

type memberOut struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func (a *app) batchCmd() *cobra.Command {
	var asJSON, members bool
	c := &cobra.Command{
		Use:   "batch ID [--members]",
		Short: "Show a batch's progress: its members by how they ended, and its completion callback",
		Long: `Shows a batch scheduled with ` + "`schedule --file F --batch ID`" + ` (or --on-complete):
how many members it has, how many have succeeded, ended dead or been
cancelled, how many have not ended, and its completion callback's id and
state. --members lists every member with its state ("pending" until it
ends); it reads two table pages per 1,000 members.`,
		Example: `  leasecron batch resize-7
  leasecron batch resize-7 --members --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Batch ids follow the task id rules: one outside them is a
			// mistake, not an unknown batch (exit 3).
			if err := schedule.ValidateID(args[0]); err != nil {
				return usagef("batch id: %w", err)
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			b, err := cl.Batch(ctx, args[0])
			if err != nil {
				return err
			}
			out := batchOut{BatchStatus: b}
			if members {
				ms, err := cl.BatchMembers(ctx, b.ID)
				if err != nil {
					return err
				}
				for _, m := range ms {
					st := string(m.State)
					if st == "" {
						st = "pending"
					}
					out.Members = append(out.Members, memberOut{ID: m.ID, State: st})
				}
			}
			if asJSON {
				return a.printJSON(out)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			state := "open"
			switch {
			case !b.Sealed:
				state = "not sealed: its scheduler stopped before every member was written; it never completes"
			case b.Complete:
				state = "complete"
			}
			fmt.Fprintf(tw, "batch\t%s\nstate\t%s\nmembers\t%d\nsucceeded\t%d\ndead\t%d\ncancelled\t%d\npending\t%d\n",
				b.ID, state, b.Counts.Total, b.Counts.Succeeded, b.Counts.Dead, b.Counts.Cancelled, b.Pending)
			fmt.Fprintf(tw, "created\t%s\n", b.Created.Format(time.RFC3339))
			if !b.Finished.IsZero() {
				fmt.Fprintf(tw, "finished\t%s\n", b.Finished.Format(time.RFC3339))
			}
			if b.Callback != "" {
				cb := "waiting for the members"
				if st, err := cl.Status(ctx, b.Callback); err == nil {
					cb = st.State()
				}
				fmt.Fprintf(tw, "callback\t%s (%s)\n", b.Callback, cb)
			}
			for _, m := range out.Members {
				fmt.Fprintf(tw, "  %s\t%s\n", m.ID, m.State)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&members, "members", false, "list every member with its state")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
