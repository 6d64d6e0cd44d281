package cli

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/dashboard"
)

func init() {
	extraCommands = append(extraCommands, (*app).dashboardCmd)
}

// apiOptions maps the api.* keys.
func (a *app) apiOptions() api.Options {
	return api.Options{PlatformAuth: a.cfg.API.PlatformAuth, MaxBody: int64(a.cfg.API.MaxBody), MaxTasks: a.cfg.API.MaxTasks,
		TrustedProxies: a.cfg.HTTP.TrustedProxies, ProxyHops: a.cfg.HTTP.ProxyHops, Logger: a.log}
}

// dashboardOptions maps the dashboard.* keys.
func (a *app) dashboardOptions() dashboard.Options {
	d := a.cfg.Dashboard
	return dashboard.Options{Auth: d.Auth, ViewerAuth: d.ViewerAuth, PlatformAuth: d.PlatformAuth, OperatorRole: d.OperatorRole, BasePath: d.BasePath,
		ReadOnly: d.ReadOnly, AllowAnonymous: d.AllowAnonymous, TrustedProxies: a.cfg.HTTP.TrustedProxies, ProxyHops: a.cfg.HTTP.ProxyHops, Version: a.version, Logger: a.log}
}

func (a *app) dashboardCmd() *cobra.Command {
	var addr string
	c := &cobra.Command{
		Use:   "dashboard [--addr HOST:PORT]",
		Short: "Serve the web dashboard for the configured account (default http://127.0.0.1:8090)",
		Long: `Serves the web dashboard until SIGINT or SIGTERM: the overview, pending
tasks, recurring series, runs, dead letters, the blackboard and the fleet,
each page with a JSON twin under /api/, and the actions of the CLI.

It listens on loopback by default. On any other address it refuses to start
unless dashboard.auth is set (basic:USER:PASSWORD or bearer:TOKEN),
dashboard.viewer_auth or dashboard.platform_auth signs people in, or
dashboard.read_only and dashboard.allow_anonymous are both true. With
dashboard.base_path it serves, and prints its address, under that path.`,
		Example: `  leasecron dashboard
  LEASECRON_DASHBOARD_AUTH=bearer:$(openssl rand -hex 16) leasecron dashboard --addr :8090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if addr == "" {
				addr = a.cfg.Dashboard.Addr
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return usagef("--addr %q: %v: want HOST:PORT, e.g. %s", addr, err, dashboard.DefaultAddr)
			}
			o := a.dashboardOptions()
			// Refused before anything touches storage.
			if err := dashboard.ValidateAuth(o.Auth); err != nil {
				return usageError{err}
			}
			if err := dashboard.ValidateAuth(o.ViewerAuth); err != nil {
				return usageError{fmt.Errorf("dashboard.viewer_auth: %w", err)}
			}
			if err := dashboard.CheckAddr(addr, o); err != nil {
				return usageError{err}
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			o.OnListen = func(at net.Addr) {
				// Under its base path: the root answers 404 then (a
				// review found the printed address one).
				fmt.Fprintf(a.out, "dashboard: http://%s%s/\n", at, strings.TrimRight(o.BasePath, "/"))
				a.log.Info("dashboard listening", "addr", at.String(), "read_only", o.ReadOnly, "auth", o.Auth != "")
			}
			if a.cfg.API.Enabled {
				if o.API, err = api.New(cl, a.apiOptions()); err != nil {
					return usageError{err}
				}
			}
			err = dashboard.Serve(cmd.Context(), addr, cl, o)
			if errors.Is(err, dashboard.ErrExposed) {
				return usageError{err}
			}
			return err
		},
	}
	c.Flags().StringVar(&addr, "addr", "", "listen address (default dashboard.addr, 127.0.0.1:8090)")
	return c
}
