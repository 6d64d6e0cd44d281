package dashboard

import (
	"cmp"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/blackboard"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
	"github.com/leasecron/leasecron/trafficcop"
)

// The view models below are what each page renders and what its /api/
// twin returns as JSON: one model, two renderings. Field names are the
// JSON API's contract (documented in the README).

// LeaderView is the lease holder.
type LeaderView struct {
	Held       bool      `json:"held"`
	Holder     string    `json:"holder"`
	Generation int64     `json:"generation"`
	Acquired   time.Time `json:"acquired,omitzero"`
	Renewed    time.Time `json:"renewed,omitzero"`
	Released   bool      `json:"released"`
	State      string    `json:"state"`
}

func leaderView(h trafficcop.HolderInfo) LeaderView {
	return LeaderView{Held: h.Held(), Holder: h.Holder, Generation: h.Generation, Acquired: h.Acquired, Renewed: h.Renewed, Released: h.Released, State: string(h.State)}
}

// MinuteView is one minute of the throughput chart.
type MinuteView struct {
	Minute    time.Time `json:"minute"`
	Succeeded int64     `json:"succeeded"`
	Failed    int64     `json:"failed"`
	Retried   int64     `json:"retried"`
	Dead      int64     `json:"dead"`
	Cancelled int64     `json:"cancelled"`
}

// OverviewView is GET / and /api/overview.
type OverviewView struct {
	Leader              LeaderView   `json:"leader"`
	FleetSize           int          `json:"fleet_size"`
	QueueDepth          int          `json:"queue_depth"`
	DeadLetters         int          `json:"dead_letters"`
	DueBacklog          int          `json:"due_backlog"`
	DueBacklogCapped    bool         `json:"due_backlog_capped"`
	OldestDueLagSeconds float64      `json:"oldest_due_lag_seconds"`
	Counters            *Counts      `json:"counters"`
	Backpressure        Backpressure `json:"backpressure"`
	Limits              []Limit      `json:"limits"`
	Paused              []PauseView  `json:"paused"`
	Queues              []QueueView  `json:"queues"`
	Throughput          []MinuteView `json:"throughput"`
	Chart               *chart       `json:"-"`
	// Wait and Run are the last hour's queue wait and run time
	// percentiles, every type (the /latency page has more).
	Wait                leasecron.Percentiles `json:"wait"`
	Run                 leasecron.Percentiles `json:"run"`
	WaitChart, RunChart *lineChart            `json:"-"`
}

// Backpressure is the mover's queue-depth brake.
type Backpressure struct {
	Enabled     bool `json:"enabled"`
	HoldingBack bool `json:"holding_back"`
	MaxDepth    int  `json:"max_depth,omitempty"`
	ResumeBelow int  `json:"resume_below,omitempty"`
}

// QueueView is a named queue at one priority level on the overview.
type QueueView struct {
	Queue             string   `json:"queue"`
	Priority          int      `json:"priority"`
	PriorityName      string   `json:"priority_name"`
	Depth             int      `json:"depth"`
	OldestWaitSeconds float64  `json:"oldest_wait_seconds"`
	Lanes             int      `json:"lanes"`
	Consumers         []string `json:"consumers"`
}

func queueViews(qs []leasecron.QueueStatus) []QueueView {
	out := make([]QueueView, len(qs))
	for i, q := range qs {
		out[i] = QueueView{Queue: q.Queue, Priority: q.Priority, PriorityName: queue.PriorityName(q.Priority), Depth: q.Depth,
			OldestWaitSeconds: q.OldestWait.Seconds(), Lanes: q.Lanes, Consumers: nonNil(q.Consumers)}
	}
	return out
}

// PauseView is a paused task type.
type PauseView struct {
	Type  string    `json:"type"`
	Until time.Time `json:"until,omitzero"`
}

// ItemView is a pending task.
type ItemView struct {
	ID          string    `json:"id"`
	Type        string    `json:"type"`
	Due         time.Time `json:"due"`
	Recurrence  string    `json:"recurrence,omitempty"`
	TZ          string    `json:"tz,omitempty"`
	Payload     string    `json:"payload_preview"`
	PayloadSize int       `json:"payload_size"`
	PayloadBlob string    `json:"payload_blob,omitempty"`
	MaxAttempts int       `json:"max_attempts,omitempty"`
	Queue       string    `json:"queue"`
	Priority    int       `json:"priority"`
	FairKey     string    `json:"fair_key,omitempty"`
	Problem     string    `json:"problem,omitempty"`
	// Disabled is when a disabled series was disabled (Due is then the
	// occurrence it had next).
	Disabled time.Time `json:"disabled,omitzero"`
	// Waiting: it waits for other tasks to end (--after), so Run now
	// would not start it.
	Waiting bool `json:"waiting,omitempty"`
}

func itemView(it schedule.Item, preview int) ItemView {
	return ItemView{ID: it.ID, Type: it.Type, Due: it.Due, Recurrence: it.Recurrence, TZ: it.TZ, Payload: trunc.Head(it.Payload, preview),
		PayloadSize: len(it.Payload), PayloadBlob: it.PayloadBlob, MaxAttempts: it.MaxAttempts, Problem: it.Problem, Disabled: it.Disabled, Waiting: it.Waiting,
		Queue: cmp.Or(it.Queue, queue.DefaultRouteQueue), Priority: cmp.Or(it.Priority, queue.PriorityDefault), FairKey: it.FairKey}
}

// TasksView is GET /tasks and /api/tasks.
type TasksView struct {
	Type     string     `json:"type,omitempty"`
	Items    []ItemView `json:"items"`
	Continue string     `json:"continue,omitempty"`
	Cursor   string     `json:"-"` // the token of this page ("" = first)
}

// RunView is a run record: the JSON shape of a run wherever leasecron
// prints one (the dashboard's API and `leasecron status --json`).
type RunView struct {
	ID         string    `json:"id"`
	State      string    `json:"state"`
	Type       string    `json:"type,omitempty"`
	Attempts   int       `json:"attempts"`
	Worker     string    `json:"worker,omitempty"`
	Generation int64     `json:"generation,omitempty"`
	Due        time.Time `json:"due,omitzero"`
	Started    time.Time `json:"started,omitzero"`
	Finished   time.Time `json:"finished,omitzero"`
	Duplicates int       `json:"duplicates"`
	LastError  string    `json:"last_error,omitempty"`
	OutputTail string    `json:"output_tail,omitempty"`
	Series     string    `json:"series,omitempty"`
	Snoozed    time.Time `json:"snoozed_until,omitzero"`
	// Progress is the handler's last progress report (absent when it
	// never reported).
	Progress *leasecrontype.RunProgress `json:"progress,omitempty"`
	// Batch is the member's batch; After the tasks the run waited for.
	Batch   string    `json:"batch,omitempty"`
	After   []string  `json:"after,omitempty"`
	Updated time.Time `json:"updated,omitzero"`
}

// RunViewOf is r as shown and printed (error and output at most
// PayloadPreview bytes, as stored).
func RunViewOf(r leasecrontype.Run) RunView {
	return RunView{ID: r.ID, State: string(r.State), Type: r.Type, Attempts: r.Attempts, Worker: r.Worker, Generation: r.Generation,
		Due: r.Due, Started: r.Started, Finished: r.Finished, Duplicates: r.Duplicates,
		LastError: trunc.Head(r.LastError, PayloadPreview), OutputTail: trunc.Tail(r.OutputTail, PayloadPreview),
		Series: r.Series, Snoozed: r.SnoozedUntil, Progress: progressOf(r.Progress), Batch: r.Batch, After: r.After, Updated: r.Updated}
}

// progressOf is p when it holds a report, nil otherwise.
func progressOf(p leasecrontype.RunProgress) *leasecrontype.RunProgress {
	if !p.Reported() {
		return nil
	}
	return &p
}

// Duration is how long the latest attempt ran (0 when unknown).
func (r RunView) Duration() time.Duration {
	if r.Started.IsZero() || r.Finished.Before(r.Started) {
		return 0
	}
	return r.Finished.Sub(r.Started)
}

// TaskView is GET /tasks/{id} and /api/tasks/{id}.
type TaskView struct {
	ID      string    `json:"id"`
	State   string    `json:"state"`
	Pending *ItemView `json:"pending,omitempty"`
	Run     *RunView  `json:"run,omitempty"`
	Recent  []RunView `json:"recent_occurrences,omitempty"`
	// After are the tasks this one waits (or waited) for, each with
	// whether it has released it; Waiting that it still waits.
	After    []ParentView `json:"after,omitempty"`
	AfterAny bool         `json:"after_any,omitempty"`
	Waiting  bool         `json:"waiting,omitempty"`
	// Children are the tasks still waiting for this one.
	Children []string `json:"children,omitempty"`
	// Batch is its batch; Callback that it is the batch's completion
	// callback.
	Batch    string `json:"batch,omitempty"`
	Callback bool   `json:"callback,omitempty"`
}

// ParentView is a task another waits for.
type ParentView struct {
	ID   string `json:"id"`
	Done bool   `json:"done"`
}

// BatchView is the batch page.
type BatchView struct {
	leasecron.BatchStatus
	// Members are the first BatchMembersShown members, with how each
	// ended ("pending" while it has not).
	Members []BatchMemberView `json:"members"`
	// More is how many members are not listed.
	More int `json:"more,omitempty"`
	// CallbackState is the completion callback's state.
	CallbackState string `json:"callback_state,omitempty"`
}

// BatchMemberView is one member of a batch.
type BatchMemberView struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// SeriesView is one recurring series.
type SeriesView struct {
	ItemView
	Recent []RunView `json:"recent_occurrences"`
	// Next are the next UpcomingPerSeries occurrences (the first is Due),
	// in the series' own zone with its UTC offset (RFC 3339).
	Next []string `json:"next_occurrences"`
}

// UpcomingPerSeries is how many next occurrences /recurring shows.
const UpcomingPerSeries = 5

// upcoming formats a series' next occurrences in its zone (none while
// it is disabled).
func upcoming(it schedule.Item) []string {
	if !it.Disabled.IsZero() {
		return []string{} // nothing runs until it is enabled
	}
	ts, _ := schedule.Upcoming(it.Recurrence, it.TZ, it.Due, UpcomingPerSeries)
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Format(time.RFC3339)
	}
	return out
}

// RecurringView is GET /recurring and /api/recurring.
type RecurringView struct {
	Series   []SeriesView `json:"series"`
	Continue string       `json:"continue,omitempty"`
	Cursor   string       `json:"-"`
}

// RunsView is GET /runs and /api/runs.
type RunsView struct {
	State    string    `json:"state,omitempty"`
	Type     string    `json:"type,omitempty"`
	Batch    string    `json:"batch,omitempty"`
	Runs     []RunView `json:"runs"`
	Continue string    `json:"continue,omitempty"`
	Partial  string    `json:"partial,omitempty"`
	Cursor   string    `json:"-"`
}

// DeadLetterView is one dead letter.
type DeadLetterView struct {
	ID        string    `json:"id"`
	Type      string    `json:"type,omitempty"`
	Attempts  int       `json:"attempts,omitempty"`
	At        time.Time `json:"at"`
	Reason    string    `json:"reason"`
	Body      string    `json:"body_preview"`
	BodySize  int       `json:"body_size"`
	Worker    string    `json:"worker,omitempty"`
	Truncated bool      `json:"truncated,omitempty"`
}

// DeadLettersView is GET /deadletters and /api/deadletters.
type DeadLettersView struct {
	Total       int              `json:"total"`
	DeadLetters []DeadLetterView `json:"dead_letters"`
}

func deadLetterView(d queue.DeadLetter) DeadLetterView {
	return DeadLetterView{ID: d.ID(), Type: d.Type, Attempts: d.Attempts, At: d.At, Reason: trunc.Head(d.Reason, PayloadPreview),
		Body: trunc.Head(d.Body, PayloadPreview), BodySize: len(d.Body), Worker: d.Worker, Truncated: d.Truncated}
}

// KeyView is one blackboard key: its JSON shape in the dashboard's API
// and in `leasecron blackboard --json`.
type KeyView struct {
	Key                 string    `json:"key"`
	State               string    `json:"state"`
	Type                string    `json:"type"`
	Interval            string    `json:"interval"`
	IntervalSeconds     float64   `json:"interval_seconds"`
	Start               time.Time `json:"start,omitzero"`
	Stop                time.Time `json:"stop,omitzero"`
	Running             bool      `json:"running"`
	Worker              string    `json:"worker,omitempty"`
	Runs                int64     `json:"runs"`
	Failures            int64     `json:"failures"`
	LastError           string    `json:"last_error,omitempty"`
	LastDurationSeconds float64   `json:"last_duration_seconds"`
	NextDue             time.Time `json:"next_due,omitzero"`
}

// BlackboardView is GET /blackboard and /api/blackboard.
type BlackboardView struct {
	Keys []KeyView `json:"keys"`
}

// KeyViewOf is e as shown and printed at now.
func KeyViewOf(e blackboard.Entry, now time.Time) KeyView {
	return KeyView{Key: e.Key, State: string(e.State(now)), Type: e.Type, IntervalSeconds: e.Interval.Seconds(), Interval: e.Interval.String(),
		Start: e.Start, Stop: e.Stop, Running: e.Running, Worker: e.Worker, Runs: e.Runs, Failures: e.Failures,
		LastError: trunc.Head(e.LastError, PayloadPreview), LastDurationSeconds: e.LastDuration.Seconds(), NextDue: e.NextDue()}
}

// InstanceView is one worker instance.
type InstanceView struct {
	ID      string `json:"id"`
	Version string `json:"version,omitempty"`
	// Present: running now (its presence is current); Started and Seen
	// come from its presence.
	Present bool      `json:"present"`
	Started time.Time `json:"started,omitzero"`
	Seen    time.Time `json:"seen,omitzero"`
	Flushed time.Time `json:"last_flush,omitzero"`
	// Active: present, or it flushed counters in the last 15 minutes.
	Active bool `json:"active"`
	// Leader: it holds the lease (the traffic cop).
	Leader bool `json:"leader"`
	// Shards is how many shards it owns (a sharded schedule).
	Shards int    `json:"shards,omitempty"`
	Counts Counts `json:"counters"`
	// Draining: someone asked it to drain (DrainBy); DrainStarted is when
	// it saw the request and stopped taking work.
	Draining     bool      `json:"draining,omitempty"`
	DrainBy      string    `json:"drain_by,omitempty"`
	DrainStarted time.Time `json:"drain_started,omitzero"`
	// Roles are what it does: lead, consume, blackboard (empty: none;
	// null for a release that does not say).
	Roles []string `json:"roles"`
	// RolesSaid tells none (an instance with every role off) from not
	// said.
	RolesSaid bool `json:"-"`
}

// SearchView is GET /search?q=… and /api/search: the runs (pending tasks
// as scheduled) that match the search, newest first.
type SearchView struct {
	Q        string    `json:"q"`
	Runs     []RunView `json:"runs"`
	Continue string    `json:"continue,omitempty"`
	Cursor   string    `json:"-"`
}

// AuditView is GET /audit and /api/audit: the audit log, newest first.
type AuditView struct {
	Entries  []leasecron.AuditEntry `json:"entries"`
	Continue string                 `json:"continue,omitempty"`
	Cursor   string                 `json:"-"`
	// Off: run records are off, so nothing is recorded.
	Off bool `json:"off,omitempty"`
}

// FleetView is GET /fleet and /api/fleet.
type FleetView struct {
	Leader    LeaderView     `json:"leader"`
	Instances []InstanceView `json:"instances"`
	Limits    []Limit        `json:"limits"`
	// Shards is the shard map of a sharded schedule (absent when
	// unsharded).
	Shards *ShardsView `json:"shards,omitempty"`
}

// ShardsView is the fleet page's shard map.
type ShardsView struct {
	Count      int   `json:"count"`
	PrevCount  int   `json:"prev_count,omitempty"`
	Span       int   `json:"span"`
	Generation int64 `json:"generation"`
	// RunPartitions is how many partitions new run records go to;
	// RunPartitionsRead every count lookups try.
	RunPartitions     int          `json:"run_partitions"`
	RunPartitionsRead []int        `json:"run_partitions_read"`
	Shards            []ShardView  `json:"shards"`
	Members           []MemberView `json:"members"`
}

// NewShardsView is the shard map of r as the fleet page's JSON (and
// `leasecron shards --json`) shows it.
func NewShardsView(r leasecron.ShardReport) *ShardsView {
	sv := &ShardsView{Count: max(r.MapCount, r.Count), PrevCount: r.PrevCount, Span: r.Span, Generation: r.Generation,
		RunPartitions: r.RunPartitions, RunPartitionsRead: r.RunPartitionsRead, Shards: []ShardView{}, Members: []MemberView{}}
	for _, x := range r.Shards {
		sv.Shards = append(sv.Shards, ShardView{Shard: x.Shard, Owner: x.Owner, Epoch: x.Epoch, Since: x.Since, HandingOverFrom: x.HandingOverFrom,
			Quiet: x.Quiet, Pointed: x.Pointed, Due: x.Due, DueCapped: x.DueCapped, LagSeconds: x.Lag.Seconds()})
	}
	for _, m := range r.Members {
		sv.Members = append(sv.Members, MemberView{Name: m.Name, Live: m.Live, Shards: m.Shards})
	}
	return sv
}

// ShardView is one shard's row.
type ShardView struct {
	Shard           string    `json:"shard"`
	Owner           string    `json:"owner"`
	Epoch           int64     `json:"epoch"`
	Since           time.Time `json:"since,omitzero"`
	HandingOverFrom string    `json:"handing_over_from,omitempty"`
	Quiet           bool      `json:"quiet"`
	Pointed         bool      `json:"pointed"`
	Due             int       `json:"due"`
	DueCapped       bool      `json:"due_capped"`
	LagSeconds      float64   `json:"lag_seconds"`
}

// MemberView is one instance of the shard map.
type MemberView struct {
	Name   string `json:"name"`
	Live   bool   `json:"live"`
	Shards int    `json:"shards"`
}

// activeWindow is how recently an instance without a presence (a worker
// of an earlier release) must have flushed its counters to count as part
// of the fleet. Workers flush only when a counter changed (every
// worker.counters_every at most).
const activeWindow = 15 * time.Minute

// active reports whether in counts as part of the fleet: it is present
// (running, idle or busy), or it flushed counters recently.
func (in Instance) active(now time.Time) bool {
	return in.Present || now.Sub(in.Flushed) < activeWindow
}
