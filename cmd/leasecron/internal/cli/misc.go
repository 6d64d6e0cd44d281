package cli

import (
	"context"
	"fmt"
	"net/http"
	neturl "net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron/azurite"
)

func (a *app) azuriteCmd() *cobra.Command {
	var dir string
	var blob, queue, table int
	c := &cobra.Command{
		Use:   "azurite",
		Short: "Run a local Azurite in the foreground and print its connection string",
		Long: `Runs the pinned Azurite (installed by ` + "`make deps`" + `) on 127.0.0.1 with the flags
leasecron needs. With no --dir the data lives in a temporary directory that
is removed on exit. Ctrl-C stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, p := range []struct {
				flag string
				port int
			}{{"blob-port", blob}, {"queue-port", queue}, {"table-port", table}} {
				if p.port < 0 || p.port > 65535 {
					return usagef("--%s %q: want a port from 1 to 65535, or 0 for a free one", p.flag, strconv.Itoa(p.port))
				}
			}
			s, err := azurite.Start(cmd.Context(), azurite.Options{Dir: dir, BlobPort: blob, QueuePort: queue, TablePort: table})
			if err != nil {
				return err
			}
			defer s.Stop()
			fmt.Fprintln(a.out, s.ConnectionString())
			fmt.Fprintln(a.errOut, "Azurite is running; export LEASECRON_STORAGE_CONNECTION_STRING with the line above. Ctrl-C stops it.")
			select {
			case <-cmd.Context().Done():
			case <-s.Done():
				return fmt.Errorf("azurite exited")
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "data directory (kept); empty means a temporary one")
	c.Flags().IntVar(&blob, "blob-port", 0, "blob port (0 picks a free one)")
	c.Flags().IntVar(&queue, "queue-port", 0, "queue port (0 picks a free one)")
	c.Flags().IntVar(&table, "table-port", 0, "table port (0 picks a free one)")
	return c
}

func (a *app) healthcheckCmd() *cobra.Command {
	var url string
	c := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 if the admin endpoint answers 200 (for container health checks)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// A URL that cannot be asked is a mistake in the check, not an
			// unhealthy instance.
			if u, err := neturl.Parse(url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usagef("--url %q: want an http(s) URL such as http://127.0.0.1:8080/healthz", url)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return usagef("--url %q: %v", url, err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s answered %s", url, resp.Status)
			}
			return nil
		},
	}
	c.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/healthz", "URL to check")
	return c
}
