package cli

import (
	"cmp"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/instance"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/trafficcop"
)

func init() {
	extraCommands = append(extraCommands, (*app).workerCmd, (*app).leaderCmd, (*app).statsCmd, (*app).queuesCmd, (*app).deadletterCmd)
}

func (a *app) workerCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "worker",
		Short: "Run a worker: compete for the lease and move due tasks, consume the queue, walk the blackboard",
		Long: `Runs until SIGINT or SIGTERM. On a signal it stops taking new tasks, lets
running ones finish within worker.shutdown_grace, and releases the lease so
another instance takes over within one lease.poll_every.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// One instance id for the lease, run records and every log line,
			// the handlers' included.
			if err := a.cfg.CheckWorker(); err != nil {
				return err
			}
			if a.cfg.Worker.InstanceID == "" {
				a.cfg.Worker.InstanceID = instance.NewID()
			}
			hs, err := buildHandlers(a.cfg, a.log.With("instance", a.cfg.Worker.InstanceID), a.extraHandlerKinds())
			if err != nil {
				return err
			}
			stopTracing, err := a.startTracing(cmd.Context())
			if err != nil {
				return err
			}
			defer stopTracing()
			wo, err := a.workerOptions()
			if err != nil {
				return err
			}
			w, err := leasecron.NewWorker(wo)
			if err != nil {
				return err
			}
			types := make([]string, 0, len(hs))
			for typ, h := range hs {
				w.Handle(typ, h)
				types = append(types, typ)
			}
			sort.Strings(types)
			if len(types) == 0 {
				a.log.Warn("no handlers configured: every task will be retried and then set aside; configure handlers.<type>")
			}
			a.log.Info("worker starting", "version", a.version, "types", types, "lead", a.cfg.Worker.Lead, "consume", a.cfg.Worker.Consume,
				"blackboard", a.cfg.Blackboard.Enabled, "storage", storage.Redact(describeStorage(a.cfg.Storage.ConnectionString, a.cfg.Storage.Account)))
			err = w.Run(cmd.Context())
			if errors.Is(err, leasecron.ErrDrained) {
				a.log.Info("worker stopped: drained")
				return nil
			}
			a.log.Info("worker stopped")
			return err
		},
	}
}

func describeStorage(cs, account string) string {
	if cs != "" {
		if p, err := storage.ParseConnectionString(cs); err == nil {
			return p.AccountName + " " + p.BlobEndpoint
		}
		return "(connection string)"
	}
	return account
}

func (a *app) leaderCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "leader",
		Short: "Show who holds the traffic-cop lease, since when, its generation and the lease state",
		Long: `The holder of the traffic-cop lease moves every due task of an unsharded
schedule. With shards.count above 1 it moves none itself: it shares the shards
out among the live workers (see leasecron shards) and keeps the fleet-wide
duties (removing expired run records and counters).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			h, err := cl.Leader(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(holderJSON(h))
			}
			if !h.Held() {
				fmt.Fprintf(a.out, "no leader (lease %s)", h.State)
				if h.Holder != "" {
					fmt.Fprintf(a.out, "; last holder %s, generation %d, acquired %s", h.Holder, h.Generation, stamp(h.Acquired))
					if h.Released {
						fmt.Fprint(a.out, ", released")
					}
				}
				fmt.Fprintln(a.out)
				return nil
			}
			fmt.Fprintf(a.out, "leader %s since %s (%s ago), generation %d, lease %s", h.Holder, stamp(h.Acquired),
				time.Since(h.Acquired).Round(time.Second), h.Generation, h.State)
			if !h.Renewed.IsZero() {
				fmt.Fprintf(a.out, ", renewed %s ago", time.Since(h.Renewed).Round(time.Second))
			}
			fmt.Fprintln(a.out)
			if cl.Sharded() {
				fmt.Fprintln(a.out, "the schedule is sharded: the leader shares the shards out and each owner moves its own (leasecron shards)")
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

type holderOut struct {
	Held       bool       `json:"held"`
	Holder     string     `json:"holder"`
	Acquired   time.Time  `json:"acquired,omitzero"`
	Renewed    *time.Time `json:"renewed,omitempty"`
	Released   bool       `json:"released"`
	Generation int64      `json:"generation"`
	State      string     `json:"state"`
}

func holderJSON(h trafficcop.HolderInfo) holderOut {
	out := holderOut{Held: h.Held(), Holder: h.Holder, Acquired: h.Acquired, Released: h.Released, Generation: h.Generation, State: string(h.State)}
	if !h.Renewed.IsZero() {
		out.Renewed = &h.Renewed
	}
	return out
}

func (a *app) statsCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "stats",
		Short: "Show queue depth, due backlog, oldest due lag, leader, counters, limits and the instances running (draining or not)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			s, err := cl.Stats(cmd.Context())
			if err != nil {
				return err
			}
			bp := cl.Backpressure(s)
			limits, err := cl.Limits(cmd.Context(), s.Counters)
			if err != nil {
				return err
			}
			all, err := cl.Instances(cmd.Context())
			if err != nil {
				return err
			}
			running := []leasecron.Instance{} // the workers running now (present), draining or not
			for _, in := range all {
				if in.Present {
					running = append(running, in)
				}
			}
			if asJSON {
				return a.printJSON(map[string]any{
					"queue_depth": s.QueueDepth, "poison_depth": s.PoisonDepth,
					"due_backlog": s.Due.Count, "due_backlog_capped": s.Due.Capped, "oldest_due_lag_seconds": s.Due.Lag.Seconds(),
					"leader": holderJSON(s.Leader), "counters": s.Counters, "mover_holding_back": bp.HoldingBack, "limits": limits,
					"instances": running,
				})
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "queue depth\t%d\n", s.QueueDepth)
			fmt.Fprintf(tw, "poison (dead letters)\t%d\n", s.PoisonDepth)
			capped := ""
			if s.Due.Capped {
				capped = "+"
			}
			fmt.Fprintf(tw, "due backlog\t%d%s\n", s.Due.Count, capped)
			fmt.Fprintf(tw, "oldest due lag\t%s\n", s.Due.Lag.Round(time.Millisecond))
			if s.Leader.Held() {
				fmt.Fprintf(tw, "leader\t%s (generation %d)\n", s.Leader.Holder, s.Leader.Generation)
			} else {
				fmt.Fprintf(tw, "leader\tnone\n")
			}
			if bp.Enabled {
				state := "moving"
				if bp.HoldingBack {
					state = fmt.Sprintf("HOLDING BACK (depth %d; moves again below queue.resume_below %d; queue.max_depth %d)", s.QueueDepth, bp.ResumeBelow, bp.MaxDepth)
				}
				fmt.Fprintf(tw, "mover\t%s\n", state)
			}
			if c := s.Counters; c != nil {
				t := c.Total
				fmt.Fprintf(tw, "handled\t%d\nfailed attempts\t%d\nretried\t%d\ndead\t%d\nduplicates suppressed\t%d\ncancelled\t%d\nset aside\t%d\ndeferred (no slot)\t%d\n",
					t.Handled, t.Failed, t.Retried, t.Dead, t.Duplicates, t.Cancelled, t.SetAside, t.Deferred)
				fmt.Fprintf(tw, "counter rows\t%d instance(s), last flush %s\n", c.Instances, stamp(c.Updated))
			}
			for _, l := range limits {
				fmt.Fprintf(tw, "limit %s\t%d/%d slots held; %d tasks put back for want of a slot so far\n", l.Type, l.Held, l.Limit, l.Deferred)
			}
			fmt.Fprintf(tw, "instances running\t%d\n", len(running))
			for _, in := range running {
				line := fmt.Sprintf("instance %s\tstarted %s, seen %s", in.ID, stamp(in.Started), stamp(in.Seen))
				if in.Version != "" {
					line += ", " + in.Version
				}
				if in.Roles != nil {
					line += ", roles " + cmp.Or(strings.Join(in.Roles, ","), "none")
				}
				switch {
				case in.Draining && in.DrainStarted.IsZero():
					line += fmt.Sprintf(", DRAINING: asked by %s at %s, not seen yet", in.DrainBy, stamp(in.DrainRequested))
				case in.Draining:
					line += fmt.Sprintf(", DRAINING since %s (asked by %s)", stamp(in.DrainStarted), in.DrainBy)
				}
				fmt.Fprintln(tw, line)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func (a *app) deadletterCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "deadletter",
		Short: "List, requeue or purge messages set aside in the poison queue",
	}
	var asJSON, all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead letters with their reasons",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			dls, err := cl.DeadLetters().List(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if dls == nil {
					dls = []queue.DeadLetter{}
				}
				return a.printJSON(dls)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTYPE\tATTEMPTS\tAT\tREASON")
			for _, d := range dls {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.ID(), d.Type, d.Attempts, stamp(d.At), short(d.Reason, 80))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	requeue := &cobra.Command{
		Use:   "requeue (ID | --all)",
		Short: "Put a dead letter back on the work queue with its attempts reset",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) {
				return usagef("give a dead-letter ID or --all")
			}
			cl, err := a.client()
			if err != nil {
				return err
			}
			if all {
				n, err := cl.DeadLetters().RequeueAll(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(a.out, "requeued %d\n", n)
				return nil
			}
			if err := cl.DeadLetters().Requeue(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "requeued %s\n", args[0])
			return nil
		},
	}
	requeue.Flags().BoolVar(&all, "all", false, "requeue every dead letter")
	purge := &cobra.Command{
		Use:   "purge",
		Short: "Delete every dead letter",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			n, err := cl.DeadLetters().Purge(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.out, "purged %d\n", n)
			return nil
		},
	}
	c.AddCommand(list, requeue, purge)
	return c
}

func (a *app) queuesCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "queues",
		Short: "Show each named queue and priority: depth, oldest wait, work queues and the workers that consume it",
		Long: `queues lists every named queue and priority level that has work queues in
the account (types.<type>.queue and .priority, schedule --queue and
--priority, fairness lanes of --fair-key): its approximate depth, how long
the oldest message at the head of its work queues has waited, the work
queues that carry it, and the running workers that consume it
(worker.queues). A named queue with messages and no consumer is stranded:
start a worker with worker.queues naming it.`,
		Example: `  leasecron queues
  leasecron queues --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			qs, err := cl.Queues(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(qs)
			}
			tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tPRIORITY\tDEPTH\tOLDEST WAIT\tWORK QUEUES\tLANES\tCONSUMERS")
			for _, q := range qs {
				wait, consumers := "-", strings.Join(q.Consumers, ",")
				if !q.Oldest.IsZero() {
					wait = q.OldestWait.Round(time.Second).String()
				}
				if consumers == "" {
					consumers = "none"
					if q.Depth > 0 {
						consumers = "NONE (stranded: no running worker consumes " + q.Queue + ")"
					}
				}
				fmt.Fprintf(tw, "%s\t%d (%s)\t%d\t%s\t%d\t%d\t%s\n", q.Queue, q.Priority, queue.PriorityName(q.Priority), q.Depth, wait, len(q.WorkQueues), q.Lanes, consumers)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
