package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
)

func init() {
	extraCommands = append(extraCommands, (*app).drainCmd)
}

func (a *app) drainCmd() *cobra.Command {
	var wait durationFlag
	c := &cobra.Command{
		Use:   "drain INSTANCE [--wait DURATION]",
		Short: "Drain a worker instance: it stops taking work, finishes what it runs, hands over what it holds and exits",
		Long: `Asks the running worker INSTANCE (its worker.instance_id, as leasecron stats
and the dashboard's fleet page list it) to drain. Within its worker.drain_check
(10 s) it stops taking new tasks, lets the ones it runs finish (within
worker.shutdown_grace), hands over the lease and the shards it holds, and
exits 0; its slots are released as its tasks end. Until it is gone, the fleet
page and stats show it draining. A process supervisor that restarts exited
processes (Container Apps, Kubernetes) starts a fresh instance in its place.

With --wait, the command waits up to that long for the instance to be gone,
printing its state as it changes, and exits 1 if it is still there. An
instance that is not running exits 3, naming those that are.`,
		Example: `  leasecron drain worker-7f9c-1234-0a1b2c3d
  leasecron drain worker-7f9c-1234-0a1b2c3d --wait 5m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if wait.d < 0 {
				return usagef("--wait %q: want a positive duration (how long to wait for the instance to be gone), or none", wait.raw)
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			in, err := cl.Drain(cmd.Context(), args[0], osUser()+"@"+hostName())
			if err != nil {
				if errors.Is(err, leasecron.ErrInvalidOptions) {
					return usageError{err}
				}
				return err
			}
			fmt.Fprintf(a.out, "%s asked to drain at %s by %s\n", in.ID, in.DrainRequested.UTC().Format(time.RFC3339), in.DrainBy)
			if all, err := cl.Instances(cmd.Context()); err == nil {
				for _, u := range leasecron.Uncovered(all, in.ID) {
					fmt.Fprintln(a.errOut, "leasecron: warning:", u)
				}
			}
			if wait.d == 0 {
				return nil
			}
			return a.waitGone(cmd.Context(), cl, in.ID, wait.d)
		},
	}
	c.Flags().Var(&wait, "wait", "wait up to this long (5m) for the instance to be gone")
	return c
}

// waitGone polls the fleet (one presence listing a second) until the
// instance id is gone or wait has passed, printing each change of its
// state.
func (a *app) waitGone(ctx context.Context, cl *leasecron.Client, id string, wait time.Duration) error {
	said := map[string]string{"draining": id + " is draining: it takes no new work and finishes what it runs", "gone": id + " is gone"}
	state := "requested"
	return a.follow(ctx, wait, func(ctx context.Context) (string, bool, error) {
		all, err := cl.Instances(ctx)
		if err != nil {
			return "", false, err
		}
		state = "gone"
		for _, in := range all {
			if in.ID == id && in.Present {
				state = "requested"
				if !in.DrainStarted.IsZero() {
					state = "draining"
				}
			}
		}
		return said[state], state == "gone", nil
	}, func() error { return fmt.Errorf("%s is still %s after %s", id, state, wait) })
}
