// Package cli builds the leasecron command tree. Only cmd/leasecron's main
// calls os.Exit; every command here returns errors.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/cmd/leasecron/internal/config"
	"github.com/leasecron/leasecron/internal/ops"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	// exitDuplicate: schedule --unique-key found the key held; the
	// holder's id was printed.
	exitDuplicate = 4
)

// app is the state shared by the commands of one tree.
type app struct {
	version string
	v       *viper.Viper
	in      io.Reader
	out     io.Writer
	errOut  io.Writer
	cfgFile string
	bindErr error
	cfg     config.Config
	log     *slog.Logger
	// drawnID is the id schedule drew for a task given none, for its
	// audit entry.
	drawnID string
}

// Main runs the CLI with args and returns the process exit code.
func Main(ctx context.Context, version string, args []string, in io.Reader, out, errOut io.Writer) int {
	root := NewRoot(version, in, out, errOut)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(errOut, "leasecron:", storage.Redact(condense(err.Error())))
	var ue usageError
	switch {
	case errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command "):
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(errOut, "Usage: %s\nRun '%s --help' for more.\n", cmd.UseLine(), cmd.CommandPath())
		return exitUsage
	case errors.Is(err, leasecron.ErrDuplicate):
		return exitDuplicate
	case errors.Is(err, leasecrontype.ErrNotFound):
		// One sentinel for every "no such task, run, key, dead letter or
		// blob" of every package (see internal/notfound).
		return exitNotFound
	}
	return exitError
}

// logLevels are the values of --log-level (log.level).
var logLevels = []string{"debug", "info", "warn", "error"}

// usageError is a problem with the command line itself.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// NewRoot builds the command tree writing to out and errOut.
func NewRoot(version string, in io.Reader, out, errOut io.Writer) *cobra.Command {
	a := &app{version: version, v: config.NewViper(), in: in, out: out, errOut: errOut}
	root := &cobra.Command{
		Use:   "leasecron",
		Short: "Distributed task scheduler on nothing but an Azure Storage account",
		Long: `leasecron schedules tasks into an Azure Storage table; the worker that holds a
blob lease moves due tasks into a queue, and every worker drains the queue.

Configuration comes from --config FILE (YAML), LEASECRON_* environment
variables (LEASECRON_STORAGE_CONNECTION_STRING, ...), AZURE_STORAGE_CONNECTION_STRING,
and flags. ` + "`leasecron config --keys`" + ` lists every key.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.load(cmd)
		},
	}
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.cfgFile, "config", os.Getenv("LEASECRON_CONFIG"), "YAML configuration file (env LEASECRON_CONFIG)")
	pf.String("connection-string", "", "storage connection string (overrides storage.connection_string)")
	pf.String("log-level", "", "log level: debug, info, warn, error (overrides log.level)")
	a.bindErr = errors.Join(
		a.v.BindPFlag("storage.connection_string", pf.Lookup("connection-string")),
		a.v.BindPFlag("log.level", pf.Lookup("log-level")),
	)

	root.AddCommand(
		a.versionCmd(),
		a.configCmd(),
		a.azuriteCmd(),
		a.healthcheckCmd(),
	)
	for _, c := range a.moreCommands() {
		root.AddCommand(c)
	}
	argsAreUsage(root)
	a.audit(root)
	return root
}

// argsAreUsage makes the argument checks of cmd and its subcommands
// report usage errors (exit 2), like the flag checks, and gives a command
// that only groups others a check that names them.
func argsAreUsage(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		argsAreUsage(c)
	}
	check := cmd.Args
	if check == nil {
		if cmd.Runnable() {
			return
		}
		// A group shows its help when called alone, and refuses anything
		// that is not one of its commands.
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		check = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			var names []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return fmt.Errorf("unknown command %q for %q; its commands are %s", args[0], c.CommandPath(), strings.Join(names, ", "))
		}
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// extraCommands is appended to by the files that define further commands.
var extraCommands []func(a *app) *cobra.Command

func (a *app) moreCommands() []*cobra.Command {
	var out []*cobra.Command
	for _, f := range extraCommands {
		out = append(out, f(a))
	}
	return out
}

// load reads the configuration. Commands that need no storage still
// validate it so mistakes surface early.
func (a *app) load(cmd *cobra.Command) error {
	if a.bindErr != nil {
		return fmt.Errorf("binding flags: %w", a.bindErr)
	}
	// The flag named as given (else the refusal would name log.level).
	if fl := cmd.Flag("log-level"); fl != nil && fl.Changed && !slices.Contains(logLevels, strings.ToLower(strings.TrimSpace(fl.Value.String()))) {
		return usagef("--log-level %q: want one of %s", fl.Value.String(), strings.Join(logLevels, ", "))
	}
	cfg, err := config.Load(a.v, a.cfgFile)
	if err != nil {
		return err
	}
	a.cfg = cfg
	if a.log, err = ops.NewLogger(a.errOut, cfg.Log.Level, cfg.Log.Format); err != nil {
		return err
	}
	for _, d := range cfg.Deprecated {
		a.log.Warn("configuration: a key was renamed", "detail", d)
	}
	return nil
}

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintln(a.out, "leasecron", a.version)
			return nil
		},
	}
}

func (a *app) configCmd() *cobra.Command {
	var keys, asJSON, markdown bool
	c := &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration (secrets redacted), or every key with --keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case markdown && !keys:
				return usagef("--markdown goes with --keys")
			case keys && asJSON:
				return usagef("--json prints the effective configuration: give --keys or --json, not both")
			}
			if keys && markdown {
				return config.WriteMarkdown(a.out)
			}
			if keys {
				return config.WriteKeys(a.out)
			}
			m := config.Redacted(a.v)
			if asJSON {
				return a.printJSON(m)
			}
			printTree(a.out, m, "")
			return nil
		},
	}
	c.Flags().BoolVar(&keys, "keys", false, "list every configuration key with its default and meaning")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().BoolVar(&markdown, "markdown", false, "with --keys: print a Markdown table")
	return c
}

func printTree(w io.Writer, m map[string]any, indent string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			fmt.Fprintf(w, "%s%s:\n", indent, k)
			printTree(w, sub, indent+"  ")
			continue
		}
		fmt.Fprintf(w, "%s%s: %v\n", indent, k, m[k])
	}
}

// condense shortens the Azure SDK's multi-line error dumps (request,
// response headers, body) to their first line and the service's error
// code: enough to act on, without a screenful of HTTP.
func condense(msg string) string {
	first, rest, ok := strings.Cut(msg, "\n")
	if !ok || !strings.Contains(rest, "-----") {
		return msg
	}
	for _, line := range strings.Split(rest, "\n") {
		if code, ok := strings.CutPrefix(strings.TrimSpace(line), "ERROR CODE:"); ok && strings.TrimSpace(code) != "" {
			return first + " (error code " + strings.TrimSpace(code) + ")"
		}
	}
	return first
}
