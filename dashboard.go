package leasecron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/internal/dashboard"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// DefaultDashboardAddr is where `leasecron dashboard` listens unless told
// otherwise: loopback only.
const DefaultDashboardAddr = dashboard.DefaultAddr

// ErrDashboardExposed: ServeDashboard (or a worker's admin address) was
// asked to serve the dashboard on an address other machines can reach
// without DashboardOptions.Auth, and without ReadOnly and AllowAnonymous.
var ErrDashboardExposed = dashboard.ErrExposed

// DashboardOptions configure the web dashboard. Zero values take the
// defaults.
type DashboardOptions struct {
	// Auth is "" (none), "basic:USER:PASSWORD" or "bearer:TOKEN"; secrets
	// are compared in constant time. With a bearer token a browser signs in
	// with basic auth: any user name, the token as the password.
	Auth string
	// ReadOnly hides every action and refuses every state change.
	ReadOnly bool
	// AllowAnonymous, with ReadOnly, permits serving without Auth on an
	// address other machines can reach.
	AllowAnonymous bool
	// Refresh is how often open pages refresh their figures. Default 10 s.
	Refresh time.Duration
	// CacheTTL is how long one storage read is shared between viewers.
	// Default 5 s.
	CacheTTL time.Duration
	// Version is shown in the footer.
	Version string
	// Logger receives actions and errors. Default slog.Default().
	Logger *slog.Logger
	// OnListen, when set, is called by ServeDashboard with the address it
	// listens on (useful with port 0).
	OnListen func(addr net.Addr)
}

func (o DashboardOptions) internal(c *Client) dashboard.Options {
	return dashboard.Options{Source: dashSource{c}, Auth: o.Auth, ReadOnly: o.ReadOnly, AllowAnonymous: o.AllowAnonymous,
		Refresh: o.Refresh, CacheTTL: o.CacheTTL, Version: o.Version, Clock: c.o.Clock, Logger: o.Logger}
}

// NewDashboard returns the web dashboard over c as an http.Handler to
// mount anywhere (it serves /, /tasks, /runs, ..., /api/... and /static/).
// Every action goes through c, as the CLI's do. The handler applies Auth
// itself; exposing it safely is the caller's part: ServeDashboard refuses
// non-loopback addresses without Auth.
func NewDashboard(c *Client, o DashboardOptions) (http.Handler, error) {
	return dashboard.New(o.internal(c))
}

// ServeDashboard serves the dashboard over c on addr until ctx ends. It
// refuses (ErrDashboardExposed) an address that is not loopback unless
// o.Auth is set, or o.ReadOnly and o.AllowAnonymous both are.
func ServeDashboard(ctx context.Context, addr string, c *Client, o DashboardOptions) error {
	io := o.internal(c)
	if err := dashboard.CheckAddr(addr, io); err != nil {
		return err
	}
	h, err := dashboard.New(io)
	if err != nil {
		return err
	}
	return dashboard.Serve(ctx, addr, h, io, o.OnListen)
}

// dashSource adapts a Client to the dashboard's Source: each method is
// the Client method the CLI calls.
type dashSource struct{ c *Client }

func (s dashSource) Stats(ctx context.Context) (dashboard.Stats, error) {
	st, err := s.c.Stats(ctx)
	if err != nil {
		return dashboard.Stats{}, err
	}
	bp := s.c.Backpressure(st)
	out := dashboard.Stats{QueueDepth: st.QueueDepth, PoisonDepth: st.PoisonDepth, DueCount: st.Due.Count, DueCapped: st.Due.Capped,
		OldestDue: st.Due.Oldest, DueLag: st.Due.Lag, Leader: st.Leader, Backpressure: bp.Enabled, HoldingBack: bp.HoldingBack,
		MaxDepth: bp.MaxDepth, ResumeBelow: bp.ResumeBelow}
	if st.Counters != nil {
		n := st.Counters.Total
		out.Counters, out.Instances = &n, st.Counters.Instances
	}
	lim, err := s.c.Limits(ctx, st.Counters)
	if err != nil {
		return out, err
	}
	out.Limits = dashLimits(lim)
	ps, err := s.c.Paused(ctx)
	if err != nil {
		return out, err
	}
	for _, p := range ps {
		out.Paused = append(out.Paused, dashboard.Pause{Type: p.Type, Until: p.Until})
	}
	return out, nil
}

func dashLimits(ls []LimitUsage) []dashboard.Limit {
	out := make([]dashboard.Limit, len(ls))
	for i, l := range ls {
		out[i] = dashboard.Limit(l)
	}
	return out
}

func (s dashSource) Throughput(ctx context.Context, since time.Time) ([]dashboard.Minute, error) {
	if s.c.runs == nil {
		return nil, nil
	}
	mins, err := s.c.Throughput(ctx, since)
	out := make([]dashboard.Minute, len(mins))
	for i, m := range mins {
		out[i] = dashboard.Minute{Minute: m.Minute, Succeeded: m.Succeeded, Failed: m.Failed, Retried: m.Retried, Dead: m.Dead, Cancelled: m.Cancelled}
	}
	return out, err
}

func (s dashSource) Pending(ctx context.Context, q dashboard.PendingQuery) (dashboard.PendingPage, error) {
	items, next, err := s.c.List(ctx, schedule.ListOptions{Type: q.Type, Recurring: q.Recurring, Limit: q.Limit, Continuation: q.Continue})
	return dashboard.PendingPage{Items: items, Continue: next}, err
}

func (s dashSource) Task(ctx context.Context, id string) (dashboard.Task, error) {
	st, err := s.c.Status(ctx, id)
	if err != nil {
		return dashboard.Task{}, err
	}
	t := dashboard.Task{ID: st.ID, Pending: st.Pending, Run: st.Run}
	if p := st.Pending; p != nil {
		t.Payload = p.Payload
		if p.PayloadBlob != "" {
			b, err := s.c.payloads.Get(ctx, p.PayloadBlob)
			if err != nil {
				b = []byte("(payload blob unreadable: " + err.Error() + ")")
			}
			t.Payload = string(b)
		}
		if p.Recurrence != "" {
			rp, err := s.Runs(ctx, dashboard.RunQuery{Series: p.ID, Limit: 10})
			if err != nil {
				return t, err
			}
			t.Recent = rp.Runs
		}
	}
	return t, nil
}

func (s dashSource) Runs(ctx context.Context, q dashboard.RunQuery) (dashboard.RunPage, error) {
	if s.c.runs == nil && q.State != RunScheduled {
		return dashboard.RunPage{Partial: "Run records are off (worker.runs: false): there is no run history."}, nil
	}
	p, err := s.c.Runs(ctx, RunQuery{State: q.State, Type: q.Type, Series: q.Series, Limit: q.Limit, Continue: q.Continue})
	return dashboard.RunPage{Runs: p.Runs, Continue: p.Continue}, err
}

func (s dashSource) Recent(ctx context.Context, series string, n int) ([]Run, error) {
	if s.c.runs != nil {
		rs, ok, err := s.c.runs.Recent(ctx, series)
		if err != nil || ok {
			return rs[:min(n, len(rs))], err
		}
	}
	p, err := s.Runs(ctx, dashboard.RunQuery{Series: series, Limit: n})
	return p.Runs, err
}

func (s dashSource) DeadLetters(ctx context.Context, n int) ([]queue.DeadLetter, int, error) {
	return s.c.PeekDeadLetters(ctx, n)
}

func (s dashSource) Blackboard(ctx context.Context) ([]blackboard.Entry, error) {
	return s.c.Blackboard(ctx)
}

func (s dashSource) Instances(ctx context.Context) ([]dashboard.Instance, error) {
	ins, err := s.c.Instances(ctx)
	return dashInstances(ins), err
}

func dashInstances(ins []Instance) []dashboard.Instance {
	out := make([]dashboard.Instance, 0, len(ins))
	for _, in := range ins {
		out = append(out, dashboard.Instance{ID: in.ID, Version: in.Version, Flushed: in.Flushed, Counts: in.Total})
	}
	return out
}

func (s dashSource) Fleet(ctx context.Context) (dashboard.Fleet, error) {
	var f dashboard.Fleet
	var err error
	if f.Leader, err = s.c.Leader(ctx); err != nil {
		return f, err
	}
	ins, err := s.c.Instances(ctx)
	if err != nil {
		return f, err
	}
	f.Instances = dashInstances(ins)
	sum := &Counters{ByType: map[string]Counts{}}
	for _, in := range ins {
		for typ, n := range in.ByType {
			x := sum.ByType[typ]
			x.Deferred += n.Deferred
			sum.ByType[typ] = x
		}
	}
	lim, err := s.c.Limits(ctx, sum)
	f.Limits = dashLimits(lim)
	return f, err
}

func (s dashSource) Schedule(ctx context.Context, it schedule.Item, replace bool) (schedule.Item, error) {
	return s.c.Schedule(ctx, it, replace)
}

func (s dashSource) Cancel(ctx context.Context, id string) (string, error) {
	res, err := s.c.Cancel(ctx, id)
	if errors.Is(err, ErrAlreadyFinished) {
		return "", fmt.Errorf("%w: %w", dashboard.ErrConflict, err)
	}
	if err != nil {
		return "", err
	}
	if res.Removed {
		return "cancelled " + res.ID + " (removed from the schedule)", nil
	}
	return "cancelled " + res.ID + " (already queued: the worker that receives it acknowledges it without running)", nil
}

func (s dashSource) Reschedule(ctx context.Context, id string, due time.Time) (schedule.Item, error) {
	return s.c.Reschedule(ctx, id, due)
}

func (s dashSource) RunNow(ctx context.Context, id string) (schedule.Item, error) {
	return s.c.RunNow(ctx, id)
}

func (s dashSource) Requeue(ctx context.Context, id string) error {
	return s.c.DeadLetters().Requeue(ctx, id)
}

func (s dashSource) RequeueAll(ctx context.Context) (int, error) {
	return s.c.DeadLetters().RequeueAll(ctx)
}

func (s dashSource) Purge(ctx context.Context) (int, error) { return s.c.DeadLetters().Purge(ctx) }

func (s dashSource) RunKeyNow(ctx context.Context, key string) error {
	return s.c.RunBlackboardKeyNow(ctx, key)
}

func (s dashSource) RemoveKey(ctx context.Context, key string) error {
	return s.c.RemoveBlackboardKey(ctx, key)
}

// dashboard returns the handler a worker serves on its admin address (nil
// without WorkerOptions.Dashboard).
func (w *Worker) dashboard() (http.Handler, error) {
	o := w.o.Dashboard
	if o == nil {
		return nil, nil
	}
	c := clientOf(w.parts, ClientOptions{Names: w.o.Names, NoRuns: w.o.NoRuns, Logger: w.log, Clock: w.o.Clock,
		Limits: w.o.Limits, MaxDepth: w.o.Mover.MaxDepth, ResumeBelow: w.o.Mover.ResumeBelow})
	do := *o
	if do.Logger == nil {
		do.Logger = w.log
	}
	if do.Version == "" {
		do.Version = w.o.Version
	}
	return dashboard.New(do.internal(c))
}

// checkDashboard refuses a dashboard without an admin address, or on one
// that would expose it (see ServeDashboard).
func (o WorkerOptions) checkDashboard() error {
	d := o.Dashboard
	if d == nil {
		return nil
	}
	if o.AdminAddr == "" {
		return errors.New("leasecron: WorkerOptions.Dashboard needs AdminAddr (the dashboard is served there)")
	}
	if err := dashboard.ValidateAuth(d.Auth); err != nil {
		return err
	}
	if err := dashboard.CheckAddr(o.AdminAddr, dashboard.Options{Auth: d.Auth, ReadOnly: d.ReadOnly, AllowAnonymous: d.AllowAnonymous}); err != nil {
		return fmt.Errorf("WorkerOptions.AdminAddr: %w", err)
	}
	return nil
}
