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
	extraCommands = append(extraCommands, (*app).tokensCmd)
	for _, c := range []string{"tokens create", "tokens revoke"} {
		auditedCommands[c] = true
	}
	auditedFlags = append(auditedFlags, "role", "types")
}

func (a *app) tokensCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke the API tokens of the HTTP API for programs (/api/v1)",
		Long: `API tokens let programs call the HTTP API (docs/api.md) with
Authorization: Bearer TOKEN. Each has a role — viewer (reads), scheduler
(schedule, replace, reschedule, cancel, status) or operator (everything) —
and may be limited to task types. A token is shown once, when created; only
its SHA-256 is stored (in the container, control/tokens/NAME.json). A
revoked token stops working within 10 s (the servers' token cache).`,
	}
	var role, types string
	var asJSON bool
	create := &cobra.Command{
		Use:   "create NAME --role viewer|scheduler|operator [--types T1,T2]",
		Short: "Make an API token and print it (once)",
		Example: `  leasecron tokens create billing-service --role scheduler --types invoice,receipt
  leasecron tokens create grafana --role viewer`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var list []string
			for t := range strings.SplitSeq(types, ",") {
				if t = strings.TrimSpace(t); t != "" {
					list = append(list, t)
				}
			}
			// --types "" or "," would make a token for every type.
			if cmd.Flags().Changed("types") && len(list) == 0 {
				return usagef("--types %q: no task type; want task types, comma-separated, or leave --types out for every type", types)
			}
			if err := leasecron.ValidateToken(args[0], role, list); err != nil {
				return usageError{err}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			t, secret, err := cl.CreateToken(cmd.Context(), args[0], role, list, osUser()+"@"+hostName())
			if err != nil {
				if errors.Is(err, leasecron.ErrTokenExists) || errors.Is(err, leasecron.ErrInvalidToken) {
					return usageError{err}
				}
				return err
			}
			if asJSON {
				return a.printJSON(struct {
					leasecron.APIToken
					Token string `json:"token"`
				}{t, secret})
			}
			fmt.Fprintln(a.out, secret)
			scope := "every type"
			if len(t.Types) > 0 {
				scope = "types " + strings.Join(t.Types, ", ")
			}
			fmt.Fprintf(a.errOut, "API token %q (%s, %s) created; it is shown only this once: store it as a secret\n", t.Name, t.Role, scope)
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "viewer, scheduler or operator (required)")
	create.Flags().StringVar(&types, "types", "", "comma-separated task types the token is limited to (default every type)")
	create.Flags().BoolVar(&asJSON, "json", false, "print the token and its details as JSON")
	var listJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the API tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			ts, err := cl.Tokens(cmd.Context())
			if err != nil {
				return err
			}
			if listJSON {
				if ts == nil {
					ts = []leasecron.APIToken{}
				}
				return a.printJSON(ts)
			}
			if len(ts) == 0 {
				fmt.Fprintln(a.out, "no API tokens (leasecron tokens create NAME --role ROLE)")
				return nil
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tTYPES\tCREATED\tBY")
			for _, t := range ts {
				scope := "*"
				if len(t.Types) > 0 {
					scope = strings.Join(t.Types, ",")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, scope, t.Created.UTC().Format(time.RFC3339), t.By)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&listJSON, "json", false, "print JSON")
	revoke := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke an API token (servers stop accepting it within 10 s)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if err := cl.RevokeToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "API token %q revoked\n", args[0])
			return nil
		},
	}
	c.AddCommand(create, list, revoke)
	return c
}
