package leasecron

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/leasecron/leasecron/internal/presence"
	"github.com/leasecron/leasecron/internal/runs"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// What `leasecron stats` and the dashboard show about the fleet beyond
// Stats: its instances, the slots of limited types, backpressure, and the
// dead letters at the head of the poison queue.

// Instance is one worker instance: as its presence shows it (every
// running worker, idle or busy) and as its counters row does (every worker
// that ran something in the last 24 hours).
type Instance struct {
	// ID is the instance id.
	ID string `json:"id"`
	// Version is what the instance runs (WorkerOptions.Version), as its
	// presence or its latest counters row says.
	Version string `json:"version,omitempty"`
	// Present: the worker is running — it wrote its presence blob within
	// the last 11 minutes (it writes it at its start and every 5 minutes,
	// and deletes it when it stops; a killed worker shows until then).
	Present bool `json:"present"`
	// Started is when a present worker started; Seen when it last wrote
	// its presence (the storage service's clock).
	Started time.Time `json:"started,omitzero"`
	Seen    time.Time `json:"seen,omitzero"`
	// Draining: someone asked the instance to drain (Client.Drain,
	// `leasecron drain`, the fleet page): it stops taking work, finishes
	// what it runs and stops. DrainBy and DrainRequested say who asked and
	// when; DrainStarted is when the instance saw it (zero until then,
	// within its WorkerOptions.DrainCheck).
	Draining       bool      `json:"draining,omitempty"`
	DrainBy        string    `json:"drain_by,omitempty"`
	DrainRequested time.Time `json:"drain_requested,omitzero"`
	DrainStarted   time.Time `json:"drain_started,omitzero"`
	// Flushed is when the instance last wrote its counters (workers write
	// only when a counter changed).
	Flushed time.Time `json:"last_flush,omitzero"`
	// Queues are the named queues a present worker consumes (empty: it
	// does not consume; nil for one of a release before named queues,
	// which consumes the default queue). In JSON both are left out.
	Queues []string `json:"queues,omitempty"`
	// Roles are what a present worker does: RoleLead, RoleConsume,
	// RoleBlackboard (empty: none; nil, null in JSON, for one of a
	// release before roles were shown, or an instance not running).
	Roles []string `json:"roles"`
	// Total sums its counts over every task type.
	Total Counts `json:"counters"`
	// ByType holds its counts per task type.
	ByType map[string]Counts `json:"by_type"`
}

// Instances returns every running worker (its presence blob: one list
// request) and every instance that has flushed counters in the last 24
// hours (when run records are on), by id.
func (c *Client) Instances(ctx context.Context) ([]Instance, error) {
	byID := map[string]*Instance{}
	get := func(id string) *Instance {
		if in, ok := byID[id]; ok {
			return in
		}
		in := &Instance{ID: id, ByType: map[string]Counts{}}
		byID[id] = in
		return in
	}
	present, err := presence.List(ctx, c.sc.Blob.NewContainerClient(c.o.Names.Container))
	if err != nil {
		return nil, fmt.Errorf("presence: %w", err)
	}
	now := c.o.Clock.Now()
	for _, p := range present {
		in := get(p.ID)
		in.Version, in.Started, in.Seen, in.Present = p.Version, p.Started, p.Seen, p.Present(now)
		in.Draining, in.DrainBy, in.DrainRequested, in.DrainStarted = !p.DrainAt.IsZero(), p.DrainBy, p.DrainAt, p.Draining
		in.Queues, in.Roles = p.Queues, p.Roles
	}
	if c.runs != nil {
		rows, err := c.runs.ListCounters(ctx)
		if err != nil {
			return nil, fmt.Errorf("counters: %w", err)
		}
		for _, r := range rows {
			in := get(r.Instance)
			in.Version = cmp.Or(in.Version, r.Version)
			in.Flushed, in.Total = r.Updated, Counts(r.Total)
			for typ, n := range r.ByType {
				in.ByType[typ] = Counts(n)
			}
		}
	}
	out := make([]Instance, 0, len(byID))
	for _, in := range byID {
		out = append(out, *in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// The roles of Instance.Roles: what a worker does (WorkerOptions.NoLead,
// NoConsume and NoBlackboard turn them off).
const (
	RoleLead       = "lead"
	RoleConsume    = "consume"
	RoleBlackboard = "blackboard"
)

// Uncovered says what no other running instance does once id stops (a
// drain's warning): leading (due tasks stop moving), consuming one of
// the queues id consumes (its tasks wait), walking the blackboard. An
// instance whose presence does not say its roles or queues (an earlier
// release) is taken to do everything and consume the default queue.
func Uncovered(instances []Instance, id string) []string {
	var me *Instance
	var others []Instance
	for i, in := range instances {
		switch {
		case in.ID == id:
			me = &instances[i]
		case in.Present && !in.Draining:
			others = append(others, in)
		}
	}
	if me == nil {
		return nil
	}
	does := func(in Instance, role string) bool { return in.Roles == nil || slices.Contains(in.Roles, role) }
	consumes := func(in Instance, q string) bool {
		if in.Queues == nil {
			return q == queue.DefaultRouteQueue && does(in, RoleConsume)
		}
		return slices.Contains(in.Queues, q)
	}
	var out []string
	for _, r := range []struct{ role, what string }{
		{RoleLead, "no other running instance can lead: due tasks stop moving to the queue until one starts"},
		{RoleBlackboard, "no other running instance walks the blackboard"},
	} {
		if does(*me, r.role) && !slices.ContainsFunc(others, func(in Instance) bool { return does(in, r.role) }) {
			out = append(out, r.what)
		}
	}
	mine := me.Queues
	if mine == nil && does(*me, RoleConsume) {
		mine = []string{queue.DefaultRouteQueue}
	}
	for _, q := range mine {
		if !slices.ContainsFunc(others, func(in Instance) bool { return consumes(in, q) }) {
			out = append(out, fmt.Sprintf("no other running instance consumes the queue %s: its tasks wait there until one starts", q))
		}
	}
	return out
}

// LimitUsage is one limited task type's slots.
type LimitUsage struct {
	// Type is the task type.
	Type string `json:"type"`
	// Limit is its configured number of slots (ClientOptions.Limits).
	Limit int `json:"limit"`
	// Held is how many slots are leased now.
	Held int `json:"held"`
	// Deferred counts the times a task of the type was put back for want
	// of a slot, since the fleet counters began (a running total, not a
	// queue length).
	Deferred int64 `json:"deferred"`
}

// Limits reads the slots of every type in ClientOptions.Limits (one blob
// read per slot); counters, when not nil, supply the deferred totals.
func (c *Client) Limits(ctx context.Context, counters *Counters) ([]LimitUsage, error) {
	out := make([]LimitUsage, 0, len(c.o.Limits))
	for typ, n := range c.o.Limits {
		sem, err := trafficcop.NewSemaphore(c.sc.Blob.NewContainerClient(c.o.Names.Container), typ, n, trafficcop.SemaphoreOptions{})
		if err != nil {
			return nil, fmt.Errorf("limits.%s: %w", typ, err)
		}
		held, err := sem.Held(ctx)
		if err != nil {
			return nil, fmt.Errorf("limits.%s: %w", typ, err)
		}
		u := LimitUsage{Type: typ, Limit: n, Held: held}
		if counters != nil {
			u.Deferred = counters.ByType[typ].Deferred
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, nil
}

// Backpressure is the mover's queue-depth brake as the fleet is configured
// (ClientOptions.MaxDepth and ResumeBelow).
type Backpressure struct {
	// Enabled: MaxDepth > 0.
	Enabled bool `json:"enabled"`
	// HoldingBack: the mover is (still) holding back: the queue is at
	// MaxDepth, or above ResumeBelow with due rows waiting. Inferred from
	// the queue's depth alone: a mover that finds few messages visible
	// leaves up to MaxDepth invisible ones out (README "How depth is
	// measured"), so this may say it holds back while it moves.
	HoldingBack bool `json:"holding_back"`
	// MaxDepth and ResumeBelow as configured.
	MaxDepth    int `json:"max_depth"`
	ResumeBelow int `json:"resume_below"`
}

// Backpressure infers from s whether the mover is holding back.
func (c *Client) Backpressure(s Stats) Backpressure {
	b := Backpressure{Enabled: c.o.MaxDepth > 0, MaxDepth: c.o.MaxDepth, ResumeBelow: c.o.ResumeBelow}
	if b.Enabled && b.ResumeBelow == 0 {
		b.ResumeBelow = b.MaxDepth / 2
	}
	b.HoldingBack = b.Enabled && (s.QueueDepth >= b.MaxDepth || (s.QueueDepth >= b.ResumeBelow && s.Due.Count > 0))
	return b
}

// Stats is a fleet-wide snapshot for operators.
type Stats struct {
	// QueueDepth is the work queue's approximate message count.
	QueueDepth int `json:"queue_depth"`
	// PoisonDepth is the poison queue's approximate message count.
	PoisonDepth int `json:"poison_depth"`
	// Due is the due backlog still in the schedule table.
	Due schedule.DueStats `json:"due"`
	// Counters sums every worker's flushed counters (handled, failed,
	// retried, dead, duplicates, ...).
	Counters *Counters `json:"counters,omitempty"`
	// Leader is who holds the traffic-cop lease.
	Leader trafficcop.HolderInfo `json:"leader"`
}

// Stats gathers queue depths, the due backlog, the leader and the workers'
// counters.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	var err error
	if s.QueueDepth, err = c.queue.Depth(ctx); err != nil {
		return s, fmt.Errorf("queue depth: %w", err)
	}
	if s.PoisonDepth, err = c.queue.Poison().Count(ctx); err != nil {
		return s, fmt.Errorf("poison queue depth: %w", err)
	}
	if s.Due, err = c.sched.Due(ctx, c.o.Clock.Now()); err != nil {
		return s, fmt.Errorf("due backlog: %w", err)
	}
	if c.runs != nil {
		sum, err := c.runs.SumCounters(ctx)
		if err != nil {
			return s, fmt.Errorf("counters: %w", err)
		}
		cs := countersOf(sum)
		s.Counters = &cs
	}
	if s.Leader, err = c.Leader(ctx); err != nil {
		return s, err
	}
	return s, nil
}

// Leader reads who holds the traffic-cop lease, without competing for it.
func (c *Client) Leader(ctx context.Context) (trafficcop.HolderInfo, error) {
	h, err := trafficcop.ReadHolder(ctx, c.lease)
	if errors.Is(err, storage.ErrNotFound) {
		return trafficcop.HolderInfo{State: trafficcop.LeaseAvailable}, nil
	}
	return h, err
}

// ShareCounts returns a context under which Stats and Instances (and every
// other call made with it) read the fleet's counts of the last 24 hours
// once between them: a page that shows both asks with one.
func ShareCounts(ctx context.Context) context.Context { return runs.WithDayShare(ctx) }
