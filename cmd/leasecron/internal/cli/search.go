package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
)

func init() {
	extraCommands = append(extraCommands, (*app).searchCmd)
}

func (a *app) searchCmd() *cobra.Command {
	var limit int
	var cont string
	var asJSON bool
	c := &cobra.Command{
		Use:   "search TOKEN... [--limit N] [--continue TOKEN] [--json]",
		Short: "Find tasks and runs: id:ID (or id:PREFIX*), type:, state:, series:, batch:, since:",
		Long: "Tokens: id:ID — one task (an id alone means the same); id:PREFIX* — pending tasks and one-off runs\n" +
			"whose id starts so; type:TYPE, state:STATE (scheduled: pending), series:ID, batch:ID, since:DURATION or\n" +
			"since:RFC3339 — runs matching every one, newest first. Answered from the indexes: an id prefix\n" +
			"costs one query per schedule shard and per run partition.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkLimit(limit); err != nil {
				return err
			}
			q, err := leasecron.ParseSearch(strings.Join(args, " "), time.Now())
			if err != nil {
				return usageError{err}
			}
			q.Run.Limit, q.Run.Continue = limit, cont
			cl, err := a.client()
			if err != nil {
				return err
			}
			res, err := cl.Search(cmd.Context(), q)
			if errors.Is(err, leasecron.ErrInvalidRunQuery) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			runs := res.Runs
			if res.Exact != nil {
				if asJSON {
					out := map[string]any{"id": res.Exact.ID, "state": res.Exact.State()}
					if res.Exact.Run != nil {
						out["run"] = runJSON(*res.Exact.Run)
					}
					if res.Exact.Pending != nil {
						out["pending"] = itemJSON(*res.Exact.Pending)
					}
					return a.printJSON(out)
				}
				fmt.Fprintf(a.out, "%s is %s (leasecron status %s for the rest)\n", res.Exact.ID, res.Exact.State(), res.Exact.ID)
				return nil
			}
			if asJSON {
				return a.printRunsJSON(runs, res.Continue)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tTYPE\tDUE\tATTEMPTS\tWORKER")
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.State, r.Type, stamp(r.Due), r.Attempts, r.Worker)
			}
			tw.Flush()
			if res.Continue != "" {
				fmt.Fprintf(a.errOut, "more: leasecron search %s --continue %s\n", strings.Join(args, " "), res.Continue)
			}
			return nil
		},
	}
	f := c.Flags()
	f.IntVar(&limit, "limit", 50, "page size (at most 1000)")
	f.StringVar(&cont, "continue", "", "continuation token from a previous page (with the same tokens)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
