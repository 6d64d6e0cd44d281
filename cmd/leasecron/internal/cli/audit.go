package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
)

func init() {
	extraCommands = append(extraCommands, (*app).auditCmd)
}

// auditedCommands are the commands that change something: each run is
// recorded in the audit log (Client.Audit) with its outcome.
var auditedCommands = map[string]bool{
	"schedule": true, "cancel": true, "reschedule": true, "disable": true, "enable": true,
	"pause": true, "resume": true, "deadletter requeue": true, "deadletter purge": true,
	"blackboard add": true, "blackboard remove": true, "blackboard run-now": true,
	"shards set": true, "runs clean": true, "migrate": true, "drain": true,
	"bulk requeue-dead": true, "bulk cancel": true, "bulk disable": true,
}

// auditedFlags are the flags an audit entry names with their values (the
// rest, such as payloads, files and connection strings, are left out).
var auditedFlags = []string{"id", "type", "at", "in", "every", "cron", "tz", "for", "until", "unique-key", "replace", "all", "reason", "id-prefix", "since", "yes"}

// audit makes every command of auditedCommands under root record its runs.
func (a *app) audit(root *cobra.Command) {
	for _, c := range root.Commands() {
		a.audit(c)
	}
	name := strings.TrimPrefix(root.CommandPath(), "leasecron ")
	if !auditedCommands[name] || root.RunE == nil {
		return
	}
	run := root.RunE
	root.RunE = func(c *cobra.Command, args []string) error {
		err := run(c, args)
		var ue usageError
		if !errors.As(err, &ue) && !countOnly(c) {
			a.recordAudit(c.Context(), name, a.auditTarget(name, c, args), err)
		}
		return err
	}
}

// countOnly tells a run that changed nothing by design: a bulk command
// without --yes only counts what matches.
func countOnly(c *cobra.Command) bool {
	yes := c.Flags().Lookup("yes")
	return yes != nil && yes.Value.String() != "true"
}

// payloadArgs are, for the audited commands that take a payload as an
// argument, how many arguments come before it: the payload and what
// follows are never recorded (README, "Audit log").
var payloadArgs = map[string]int{"schedule": 0, "blackboard add": 1}

// auditTarget is what a command was run on: its arguments but a payload,
// the values of the flags that say what it did, and the id a schedule
// drew for a task given none.
func (a *app) auditTarget(name string, c *cobra.Command, args []string) string {
	if n, ok := payloadArgs[name]; ok && len(args) > n {
		args = args[:n]
	}
	parts := append([]string(nil), args...)
	for _, f := range auditedFlags {
		if fl := c.Flags().Lookup(f); fl != nil && fl.Changed {
			parts = append(parts, "--"+f+" "+fl.Value.String())
		}
	}
	if a.drawnID != "" {
		parts = append(parts, "(id "+a.drawnID+")")
	}
	return strings.Join(parts, " ")
}

// recordAudit writes the audit entry of a command run. A failure is a
// warning: the command's own outcome stands.
func (a *app) recordAudit(ctx context.Context, action, target string, runErr error) {
	if !a.cfg.Worker.Runs {
		return // no run records, no audit log
	}
	cl, err := a.client()
	if err != nil {
		return
	}
	e := leasecron.AuditEntry{Who: osUser(), Via: "cli", From: hostName(), Action: action, Target: target, OK: runErr == nil, Result: "done"}
	if runErr != nil {
		e.Result = storage.Redact(runErr.Error())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := cl.Audit(ctx, e); err != nil {
		fmt.Fprintln(a.errOut, "leasecron: warning: recording this command in the audit log failed:", storage.Redact(err.Error()))
	}
}

func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

func hostName() string {
	h, _ := os.Hostname()
	return h
}

func (a *app) auditCmd() *cobra.Command {
	var since durationFlag
	var limit int
	var cont string
	var asJSON bool
	c := &cobra.Command{
		Use:   "audit [--since DURATION] [--limit N] [--continue TOKEN] [--json]",
		Short: "Show the audit log: who did what from the dashboard and the command line, newest first",
		Long: "Every action taken from the dashboard and every command that changes something (schedule, cancel,\n" +
			"disable, requeue, pause, shards set, ...) is recorded with who, from where, on what, when, and its\n" +
			"result, kept for runs.audit_retention (90 days). A page costs one table query.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := since.since(time.Now(), "entries")
			if err != nil {
				return err
			}
			if err := checkLimit(limit); err != nil {
				return err
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			q := leasecron.AuditQuery{Since: from, Limit: limit, Continue: cont}
			p, err := cl.AuditLog(cmd.Context(), q)
			if errors.Is(err, leasecron.ErrInvalidRunQuery) {
				return usagef("--continue: %w", err)
			}
			if err != nil {
				return err
			}
			if asJSON {
				if p.Entries == nil {
					p.Entries = []leasecron.AuditEntry{}
				}
				return a.printJSON(p)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WHEN\tWHO\tVIA\tFROM\tACTION\tTARGET\tRESULT")
			for _, e := range p.Entries {
				result := "ok"
				if !e.OK {
					result = "failed: " + e.Result
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(e.At), e.Who, e.Via, e.From, e.Action, short(e.Target, 40), short(result, 60))
			}
			tw.Flush()
			if p.Continue != "" {
				fmt.Fprintf(a.errOut, "more: leasecron audit %s--continue %s\n", a.repeatFlags(cmd), p.Continue)
			}
			return nil
		},
	}
	f := c.Flags()
	f.Var(&since, "since", "only entries within this long before now (e.g. 24h)")
	f.IntVar(&limit, "limit", 50, "page size (at most 1000)")
	f.StringVar(&cont, "continue", "", "continuation token from a previous page")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
