package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// loader produces a page's view model from a request.
type loader func(ctx context.Context, r *http.Request) (any, error)

// pageDef is one page: its path, template, title and loader.
type pageDef struct {
	path, tmpl, title string
	load              loader
}

func (s *Server) pages() []pageDef {
	return []pageDef{
		{"/{$}", "overview", "Overview", s.loadOverview},
		{"/tasks", "tasks", "Pending tasks", s.loadTasks},
		{"/tasks/{id}", "task", "Task", s.loadTask},
		{"/recurring", "recurring", "Recurring series", s.loadRecurring},
		{"/runs", "runs", "Runs", s.loadRuns},
		{"/deadletters", "deadletters", "Dead letters", s.loadDeadLetters},
		{"/blackboard", "blackboard", "Blackboard", s.loadBlackboard},
		{"/fleet", "fleet", "Fleet", s.loadFleet},
		{"/audit", "audit", "Audit log", s.loadAudit},
		{"/latency", "latency", "Latency and throughput", s.loadLatency},
		{"/bulk", "bulk", "Bulk operations", s.loadBulks},
		{"/bulk/new", "bulknew", "Act on everything matching", s.loadBulkNew},
		{"/bulk/{id}", "bulkop", "Bulk operation", s.loadBulk},
		{"/search", "search", "Search", s.loadSearch},
		{"/batches/{id}", "batch", "Batch", s.loadBatch},
	}
}

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.Handle("GET /static/", s.static)
	for _, p := range s.pages() {
		h := s.servePage(p)
		switch p.tmpl {
		case "tasks":
			h = s.findTask(h)
		case "search":
			h = s.searchExact(h)
		}
		m.HandleFunc("GET "+p.path, h)
		api := "/api" + p.path
		if p.tmpl == "overview" {
			api = "/api/overview"
		}
		m.HandleFunc("GET "+api, s.serveAPI(p))
	}
	m.HandleFunc("GET /api/csrf", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"token": s.csrf.token(w, r)})
	})
	s.actionRoutes(m)
	return m
}

// findTask sends the id search of the tasks page (/tasks?id=X) to the
// task's own page.
func (s *Server) findTask(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if id := strings.TrimSpace(r.URL.Query().Get("id")); id != "" {
			s.redirect(w, r, "/tasks/"+url.PathEscape(id))
			return
		}
		next(w, r)
	}
}

// pageData is what the layout renders around a page's view model.
type pageData struct {
	Title    string
	Active   string
	Now      time.Time
	CSRF     string
	ReadOnly bool   // the viewer cannot act: no action is shown
	User     string // who signed in
	Query    string // the search box's text
	Flash    *flash
	Refresh  int
	Version  string
	Here     string
	Data     any
}

// newPageData starts what the layout renders for a request. The token
// (and its cookie) come first: headers go before the body.
func (s *Server) newPageData(w http.ResponseWriter, r *http.Request, title, active string) pageData {
	return pageData{Title: title, Active: active, Now: s.o.Clock.Now(), CSRF: s.csrf.token(w, r), ReadOnly: !s.canAct(r), User: identityOf(r).who,
		Flash: s.csrf.takeFlash(w, r), Refresh: int(s.o.Refresh / time.Second), Version: s.o.Version, Here: r.URL.RequestURI(),
		Query: r.URL.Query().Get("q")}
}

// serveError answers a page or API request with status and msg.
func (s *Server) serveError(w http.ResponseWriter, r *http.Request, pd pageData, status int, msg string) {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	pd.Title = http.StatusText(status)
	pd.Data = msg
	s.render(w, status, "error", pd)
}

// noRoute answers a path no page, API route or action has (for any
// method: a path with a route for another method gets the mux's 405).
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) bool {
	for _, m := range []string{r.Method, http.MethodGet, http.MethodPost} {
		rr := r.Clone(r.Context())
		rr.Method = m
		if _, pat := s.mux.Handler(rr); pat != "" {
			return false
		}
	}
	msg := fmt.Sprintf("no page %s: the pages are /, /tasks, /tasks/ID, /recurring, /runs, /deadletters, /blackboard, /fleet, /audit, /search and /bulk, each also as JSON under /api", trunc.Head(strconv.Quote(r.URL.Path), 200))
	var pd pageData
	if !strings.HasPrefix(r.URL.Path, "/api/") {
		pd = s.newPageData(w, r, "", "")
	}
	s.serveError(w, r, pd, http.StatusNotFound, msg)
	return true
}

func (s *Server) servePage(p pageDef) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		pd := s.newPageData(w, r, p.title, p.tmpl)
		data, err := p.load(r.Context(), r)
		if err != nil {
			status, msg := s.errorStatus(err)
			s.serveError(w, r, pd, status, msg)
			return
		}
		if t, ok := data.(titled); ok {
			pd.Title = t.title()
		}
		pd.Data = data
		s.render(w, http.StatusOK, p.tmpl, pd)
	}
}

// titled lets a view model name its page (a task page shows the id).
type titled interface{ title() string }

func (v *TaskView) title() string { return "Task " + v.ID }

func (s *Server) serveAPI(p pageDef) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := p.load(r.Context(), r)
		if err != nil {
			status, msg := s.errorStatus(err)
			s.serveError(w, r, pageData{}, status, msg)
			return
		}
		writeJSON(w, http.StatusOK, data)
	}
}

func (s *Server) errorStatus(err error) (int, string) {
	status := statusOf(err)
	if status < 500 {
		return status, trunc.Head(err.Error(), 500)
	}
	s.log.Warn("read failed", "err", err)
	if status == http.StatusServiceUnavailable {
		return status, "storage is busy (throttling); try again shortly: " + trunc.Head(firstLine(err.Error()), 300)
	}
	return status, "reading storage failed: " + trunc.Head(firstLine(err.Error()), 300)
}

// firstLine keeps the Azure SDK's multi-line error dumps to their summary.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Server) render(w http.ResponseWriter, status int, name string, pd pageData) {
	var buf bytes.Buffer
	if err := s.tmpl[name].ExecuteTemplate(&buf, "layout", pd); err != nil {
		s.log.Error("rendering failed", "page", name, "err", err)
		http.Error(w, "rendering failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// cached runs fetch through the shared cache under key.
func cached[T any](ctx context.Context, s *Server, key string, fetch func(ctx context.Context) (T, error)) (T, error) {
	v, err := s.cache.get(ctx, key, func(ctx context.Context) (any, error) { return fetch(ctx) })
	if err != nil {
		var zero T
		return zero, err
	}
	return v.(T), nil
}

// --- loaders -------------------------------------------------------------

func (s *Server) loadOverview(ctx context.Context, r *http.Request) (any, error) {
	return cached(ctx, s, "overview", func(ctx context.Context) (*OverviewView, error) {
		ctx = leasecron.ShareCounts(ctx) // the sum and the instances: one read
		now := s.o.Clock.Now()
		var st Stats
		var mins []Minute
		var ins []Instance
		var lat leasecron.LatencyReport
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error {
			var err error
			if lat, err = s.src.Latency(gctx, time.Hour, ""); errors.Is(err, leasecron.ErrNoRunRecords) {
				return nil
			}
			return err
		})
		g.Go(func() (err error) { st, err = s.src.Stats(gctx); return err })
		g.Go(func() (err error) { mins, err = s.src.Throughput(gctx, now.Add(-time.Hour)); return err })
		g.Go(func() (err error) { ins, err = s.src.Instances(gctx); return err })
		if err := g.Wait(); err != nil {
			return nil, err
		}
		v := &OverviewView{Leader: leaderView(st.Leader), QueueDepth: st.QueueDepth, DeadLetters: st.PoisonDepth, DueBacklog: st.DueCount,
			DueBacklogCapped: st.DueCapped, OldestDueLagSeconds: st.DueLag.Seconds(), Counters: st.Counters,
			Backpressure: Backpressure{Enabled: st.Backpressure, HoldingBack: st.HoldingBack, MaxDepth: st.MaxDepth, ResumeBelow: st.ResumeBelow},
			Limits:       nonNil(st.Limits), Paused: []PauseView{}, Throughput: minuteViews(mins, now), Queues: queueViews(st.Queues)}
		for _, p := range st.Paused {
			v.Paused = append(v.Paused, PauseView(p))
		}
		for _, in := range ins {
			if in.active(now) || in.ID == st.Leader.Holder && st.Leader.Held() {
				v.FleetSize++
			}
		}
		if st.Leader.Held() && !hasInstance(ins, st.Leader.Holder) {
			v.FleetSize++ // a leader that has not flushed counters yet
		}
		v.Chart = newChart(v.Throughput)
		v.Wait, v.Run = lat.Total.Wait, lat.Total.Run
		v.WaitChart = newLineChart("wait-chart", "queue wait (due to start) over the last hour", lat.Points, func(p leasecron.LatencyPoint) leasecron.Percentiles { return p.Wait })
		v.RunChart = newLineChart("run-chart", "run time over the last hour", lat.Points, func(p leasecron.LatencyPoint) leasecron.Percentiles { return p.Run })
		return v, nil
	})
}

func hasInstance(ins []Instance, id string) bool {
	for _, in := range ins {
		if in.ID == id {
			return true
		}
	}
	return false
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// minuteViews fills the last hour minute by minute (missing minutes are
// zeros), oldest first.
func minuteViews(mins []Minute, now time.Time) []MinuteView {
	end := now.UTC().Truncate(time.Minute)
	by := map[time.Time]Minute{}
	for _, m := range mins {
		by[m.Minute.UTC().Truncate(time.Minute)] = m
	}
	out := make([]MinuteView, 0, 60)
	for t := end.Add(-59 * time.Minute); !t.After(end); t = t.Add(time.Minute) {
		m := by[t]
		out = append(out, MinuteView{Minute: t, Succeeded: m.Succeeded, Failed: m.Failed, Retried: m.Retried, Dead: m.Dead, Cancelled: m.Cancelled})
	}
	return out
}

func (s *Server) loadTasks(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	typ, cont := strings.TrimSpace(q.Get("type")), q.Get("continue")
	if err := checkTypeFilter(typ); err != nil {
		return nil, err
	}
	return cached(ctx, s, "tasks\n"+typ+"\n"+cont, func(ctx context.Context) (*TasksView, error) {
		p, err := s.src.Pending(ctx, PendingQuery{Type: typ, Limit: PageSize, Continue: cont})
		if err != nil {
			return nil, err
		}
		v := &TasksView{Type: typ, Items: []ItemView{}, Continue: p.Continue, Cursor: cont}
		for _, it := range p.Items {
			v.Items = append(v.Items, itemView(it, 120))
		}
		return v, nil
	})
}

// checkTypeFilter refuses a type filter no task can have.
func checkTypeFilter(typ string) error {
	if typ == "" {
		return nil
	}
	if err := schedule.ValidateType(typ); err != nil {
		return badRequest{fmt.Errorf("type filter: %w", err)}
	}
	return nil
}

func (s *Server) loadTask(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, err
	}
	return cached(ctx, s, "task\n"+id, func(ctx context.Context) (*TaskView, error) {
		t, err := s.src.Task(ctx, id)
		if err != nil {
			return nil, err
		}
		// The state in the CLI's words, as status says it: a disabled
		// series is disabled, a task waiting for others waiting (a review
		// found a disabled series shown scheduled).
		v := &TaskView{ID: t.ID, State: leasecron.Status{ID: t.ID, Pending: t.Pending, Run: t.Run}.State()}
		if t.Pending != nil {
			iv := itemView(*t.Pending, PayloadPreview)
			if t.Payload != "" {
				iv.Payload, iv.PayloadSize = trunc.Head(t.Payload, PayloadPreview), len(t.Payload)
			}
			v.Pending = &iv
		}
		if t.Run != nil {
			rv := RunViewOf(*t.Run)
			v.Run = &rv
		}
		for _, r := range t.Recent {
			v.Recent = append(v.Recent, RunViewOf(r))
		}
		flowView(v, t)
		return v, nil
	})
}

// RecentPerSeries is how many of a series' latest occurrences /recurring
// shows; it reads them with Source.Recent (one point read of the series'
// summary row, a range query for a series without one), SeriesReadsAtOnce
// series at a time.
const (
	RecentPerSeries   = 5
	SeriesReadsAtOnce = 8
)

func (s *Server) loadRecurring(ctx context.Context, r *http.Request) (any, error) {
	cont := r.URL.Query().Get("continue")
	return cached(ctx, s, "recurring\n"+cont, func(ctx context.Context) (*RecurringView, error) {
		p, err := s.src.Pending(ctx, PendingQuery{Recurring: true, Limit: PageSize, Continue: cont})
		if err != nil {
			return nil, err
		}
		v := &RecurringView{Series: make([]SeriesView, len(p.Items)), Continue: p.Continue, Cursor: cont}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(SeriesReadsAtOnce)
		for i, it := range p.Items {
			v.Series[i] = SeriesView{ItemView: itemView(it, 120), Recent: []RunView{}, Next: upcoming(it)}
			g.Go(func() error {
				recent, err := s.src.Recent(gctx, it.ID, RecentPerSeries)
				if err != nil {
					return err
				}
				for _, run := range recent {
					v.Series[i].Recent = append(v.Series[i].Recent, RunViewOf(run))
				}
				return nil
			})
		}
		return v, g.Wait()
	})
}

func (s *Server) loadRuns(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	var state leasecrontype.RunState
	if raw := q.Get("state"); raw != "" && raw != "any" {
		st, err := leasecrontype.ParseRunState(raw)
		if err != nil {
			return nil, badRequest{err}
		}
		state = st
	}
	typ, batch, cont := strings.TrimSpace(q.Get("type")), strings.TrimSpace(q.Get("batch")), q.Get("continue")
	if err := checkTypeFilter(typ); err != nil {
		return nil, err
	}
	if batch != "" {
		if err := schedule.ValidateID(batch); err != nil {
			return nil, badRequest{fmt.Errorf("batch filter: %w", err)}
		}
	}
	return cached(ctx, s, "runs\n"+string(state)+"\n"+typ+"\n"+batch+"\n"+cont, func(ctx context.Context) (*RunsView, error) {
		p, err := s.src.Runs(ctx, RunQuery{State: state, Type: typ, Batch: batch, Limit: PageSize, Continue: cont})
		if err != nil {
			return nil, err
		}
		v := &RunsView{State: string(state), Type: typ, Batch: batch, Runs: []RunView{}, Continue: p.Continue, Partial: p.Partial, Cursor: cont}
		for _, run := range p.Runs {
			v.Runs = append(v.Runs, RunViewOf(run))
		}
		return v, nil
	})
}

func (s *Server) loadDeadLetters(ctx context.Context, r *http.Request) (any, error) {
	return cached(ctx, s, "deadletters", func(ctx context.Context) (*DeadLettersView, error) {
		dls, total, err := s.src.DeadLetters(ctx, DeadLetterPreview)
		if err != nil {
			return nil, err
		}
		v := &DeadLettersView{Total: max(total, len(dls)), DeadLetters: []DeadLetterView{}}
		for _, d := range dls {
			v.DeadLetters = append(v.DeadLetters, deadLetterView(d))
		}
		return v, nil
	})
}

func (s *Server) loadBlackboard(ctx context.Context, r *http.Request) (any, error) {
	return cached(ctx, s, "blackboard", func(ctx context.Context) (*BlackboardView, error) {
		es, err := s.src.Blackboard(ctx)
		if err != nil {
			return nil, err
		}
		now := s.o.Clock.Now()
		v := &BlackboardView{Keys: []KeyView{}}
		for _, e := range es {
			v.Keys = append(v.Keys, KeyViewOf(e, now))
		}
		return v, nil
	})
}

// searchExact sends a search for one exact id to the task's own page.
func (s *Server) searchExact(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if q, err := leasecron.ParseSearch(r.URL.Query().Get("q"), s.o.Clock.Now()); err == nil && q.ID != "" && !q.IDPrefix {
			s.redirect(w, r, "/tasks/"+url.PathEscape(q.ID))
			return
		}
		next(w, r)
	}
}

func (s *Server) loadSearch(ctx context.Context, r *http.Request) (any, error) {
	text, cont := strings.TrimSpace(r.URL.Query().Get("q")), r.URL.Query().Get("continue")
	q, err := leasecron.ParseSearch(text, s.o.Clock.Now())
	if err != nil {
		return nil, err
	}
	q.Run.Limit, q.Run.Continue = PageSize, cont
	return cached(ctx, s, "search\n"+text+"\n"+cont, func(ctx context.Context) (*SearchView, error) {
		res, err := s.src.Search(ctx, q)
		if err != nil {
			return nil, err
		}
		v := &SearchView{Q: text, Runs: []RunView{}, Continue: res.Continue, Cursor: cont}
		if x := res.Exact; x != nil {
			// The task in the state status gives it: its run, or its
			// pending row (a pending task came back as no match).
			var rv RunView
			switch {
			case x.Run != nil:
				rv = RunViewOf(*x.Run)
			case x.Pending != nil:
				rv = RunViewOf(leasecron.Run{ID: x.ID, Type: x.Pending.Type, Due: x.Pending.Due})
			}
			rv.State = x.State()
			v.Runs = append(v.Runs, rv)
		}
		for _, r := range res.Runs {
			v.Runs = append(v.Runs, RunViewOf(r))
		}
		return v, nil
	})
}

func (s *Server) loadAudit(ctx context.Context, r *http.Request) (any, error) {
	cont := r.URL.Query().Get("continue")
	return cached(ctx, s, "audit\n"+cont, func(ctx context.Context) (*AuditView, error) {
		p, err := s.src.AuditLog(ctx, leasecron.AuditQuery{Limit: PageSize, Continue: cont})
		switch {
		case errors.Is(err, leasecron.ErrNoRunRecords):
			return &AuditView{Entries: []leasecron.AuditEntry{}, Off: true}, nil
		case err != nil:
			return nil, err
		}
		v := &AuditView{Entries: p.Entries, Continue: p.Continue, Cursor: cont}
		if v.Entries == nil {
			v.Entries = []leasecron.AuditEntry{}
		}
		return v, nil
	})
}

func (s *Server) loadFleet(ctx context.Context, r *http.Request) (any, error) {
	return cached(ctx, s, "fleet", func(ctx context.Context) (*FleetView, error) {
		fl, err := s.src.Fleet(ctx)
		if err != nil {
			return nil, err
		}
		now := s.o.Clock.Now()
		v := &FleetView{Leader: leaderView(fl.Leader), Instances: []InstanceView{}, Limits: nonNil(fl.Limits)}
		owned := map[string]int{}
		if r := fl.Shards; r != nil {
			for _, x := range r.Shards {
				owned[x.Owner]++
			}
		}
		for _, in := range fl.Instances {
			v.Instances = append(v.Instances, InstanceView{ID: in.ID, Version: in.Version, Present: in.Present, Started: in.Started, Seen: in.Seen,
				Flushed: in.Flushed, Counts: in.Counts, Active: in.active(now), Leader: fl.Leader.Held() && in.ID == fl.Leader.Holder,
				Shards: owned[shard.MemberName(in.ID)], Draining: in.Draining, DrainBy: in.DrainBy, DrainStarted: in.DrainStarted, Roles: in.Roles, RolesSaid: in.Roles != nil})
		}
		sort.SliceStable(v.Instances, func(i, j int) bool { return v.Instances[i].ID < v.Instances[j].ID })
		if r := fl.Shards; r != nil {
			v.Shards = NewShardsView(*r)
		}
		return v, nil
	})
}

// --- template helpers ----------------------------------------------------

func templateFuncs() template.FuncMap {
	return template.FuncMap{
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return "never"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"iso": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format(time.RFC3339)
		},
		"rel":   relative,
		"zoned": zoned,
		"dur":   func(d time.Duration) string { return roundDur(d).String() },
		"secs":  func(f float64) string { return roundDur(time.Duration(f * float64(time.Second))).String() },
		"prio":  queue.PriorityName,
		"path":  url.PathEscape,
		"query": url.QueryEscape,
		"add":   func(a, b int) int { return a + b },
		"step":  shortDur,
		"half":  func(a int) int { return a / 2 },
		"short": func(s string, n int) string { return trunc.Head(strings.Join(strings.Fields(s), " "), n) },
		"state": stateClass,
		"join":  strings.Join,
		"bytes": func(n int) string {
			if n < 1024 {
				return strconv.Itoa(n) + " B"
			}
			return fmt.Sprintf("%.1f KiB", float64(n)/1024)
		},
		"states": func() []string {
			out := []string{}
			for _, st := range leasecrontype.RunStates() {
				out = append(out, string(st))
			}
			return out
		},
	}
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	case d >= time.Second:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// relative says how far t is from now: "3m ago", "in 20s", "now".
// zoned shows an RFC 3339 time in zone tz (UTC when empty):
// "Sun 2026-03-08 03:00 EDT (-04:00)".
func zoned(tz, s string) string {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return s
	}
	if loc, err := time.LoadLocation(cmp.Or(tz, "UTC")); err == nil {
		t = t.In(loc)
	}
	return t.Format("Mon 2006-01-02 15:04 MST (-07:00)")
}

func relative(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := t.Sub(now)
	ago := d < 0
	if ago {
		d = -d
	}
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	if ago {
		return s + " ago"
	}
	return "in " + s
}

// stateClass maps a state word (run, lease or blackboard) to its CSS class;
// unknown words get the neutral one, so nothing stored reaches the class
// attribute.
func stateClass(s string) string {
	switch s {
	case "scheduled", "queued", "running", "succeeded", "failed", "dead", "cancelled",
		"waiting", "snoozed", "disabled", "due", "abandoned", "leased", "available", "expired", "breaking", "broken":
		return "st st-" + s
	}
	return "st"
}

// BulkListView is GET /bulk and /api/bulk: the bulk operations, newest
// first.
type BulkListView struct {
	Ops []leasecron.Bulk `json:"operations"`
	// Off: run records are off, and bulk operations need them.
	Off bool `json:"off,omitempty"`
}

func (s *Server) loadBulks(ctx context.Context, r *http.Request) (any, error) {
	return cached(ctx, s, "bulks", func(ctx context.Context) (*BulkListView, error) {
		ops, err := s.src.Bulks(ctx)
		switch {
		case errors.Is(err, leasecron.ErrNoRunRecords):
			return &BulkListView{Ops: []leasecron.Bulk{}, Off: true}, nil
		case err != nil:
			return nil, err
		}
		return &BulkListView{Ops: nonNil(ops)}, nil
	})
}

// BulkNewView is GET /bulk/new and /api/bulk/new: an operation described
// by the query (kind, type, reason, id_prefix, since, until) and how many
// items it matches now, which the confirmation names.
type BulkNewView struct {
	Kind     string `json:"kind"`
	Type     string `json:"type,omitempty"`
	Reason   string `json:"reason,omitempty"`
	IDPrefix string `json:"id_prefix,omitempty"`
	Since    string `json:"since,omitempty"`
	Until    string `json:"until,omitempty"`
	// Op describes the operation; Matches is how many items it matches.
	Op      string `json:"op"`
	Matches int    `json:"matches"`
	// Verb and Noun name what it does to what ("Requeue", "dead letters").
	Verb string `json:"-"`
	Noun string `json:"-"`
	// SinceAt and UntilAt are since and until as the times counted: the
	// confirmation sends them, not "24h", which read at the click would
	// be another window than the one counted (a review's find).
	SinceAt string `json:"-"`
	UntilAt string `json:"-"`
}

// bulkWords are the verb and noun of each kind, for the page's button.
var bulkWords = map[leasecron.BulkKind][2]string{
	leasecron.BulkRequeueDead:   {"Requeue", "dead letters"},
	leasecron.BulkCancelPending: {"Cancel", "pending tasks"},
	leasecron.BulkDisableSeries: {"Disable", "series"},
}

// bulkOpOf reads an operation from a request's query or form.
func (s *Server) bulkOpOf(get func(string) string) (leasecron.BulkOp, error) {
	op, err := leasecron.ParseBulkOp(get("kind"), get("type"), get("reason"), get("id_prefix"), get("since"), get("until"), s.o.Clock.Now())
	if err != nil {
		return op, badRequest{err}
	}
	return op, nil
}

func (s *Server) loadBulkNew(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	op, err := s.bulkOpOf(q.Get)
	if err != nil {
		return nil, err
	}
	// Not cached: the number confirmed must be the number now.
	n, err := s.src.CountBulk(ctx, op)
	if err != nil {
		return nil, err
	}
	w := bulkWords[op.Kind]
	at := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return &BulkNewView{Kind: string(op.Kind), Type: q.Get("type"), Reason: q.Get("reason"), IDPrefix: q.Get("id_prefix"), Since: q.Get("since"),
		Until: q.Get("until"), Op: op.String(), Matches: n, Verb: w[0], Noun: w[1], SinceAt: at(op.Filter.Since), UntilAt: at(op.Filter.Until)}, nil
}

// BulkView is GET /bulk/{id} and /api/bulk/{id}: one operation.
type BulkView struct {
	leasecron.Bulk
	Percent int    `json:"percent"`
	Summary string `json:"summary"`
}

func (s *Server) loadBulk(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, err
	}
	return cached(ctx, s, "bulk\n"+id, func(ctx context.Context) (*BulkView, error) {
		b, err := s.src.Bulk(ctx, id)
		if err != nil {
			return nil, err
		}
		return &BulkView{Bulk: b, Percent: b.Percent(), Summary: b.Summary()}, nil
	})
}

// LatencyView is GET /latency?range=1h&type=T and /api/latency: per step,
// queue wait and run time percentiles and outcomes, for one type or all.
type LatencyView struct {
	leasecron.LatencyReport
	// RangeName is the range as asked ("1h", "6h", "24h", "7d").
	RangeName string `json:"range_name"`
	// Off: run records are off, and the counters live beside them.
	Off                   bool       `json:"off,omitempty"`
	Ranges                []string   `json:"-"`
	Outcomes              *chart     `json:"-"`
	WaitChart, RunChart   *lineChart `json:"-"`
	FirstLabel, LastLabel string     `json:"-"`
}

// latencyRangeNames are the ranges offered, by name.
var latencyRangeNames = []struct {
	name string
	d    time.Duration
}{{"1h", time.Hour}, {"6h", 6 * time.Hour}, {"24h", 24 * time.Hour}, {"7d", 7 * 24 * time.Hour}}

func (s *Server) loadLatency(ctx context.Context, r *http.Request) (any, error) {
	q := r.URL.Query()
	name, typ := cmp.Or(q.Get("range"), "1h"), strings.TrimSpace(q.Get("type"))
	var rng time.Duration
	for _, x := range latencyRangeNames {
		if x.name == name {
			rng = x.d
		}
	}
	if rng == 0 {
		return nil, badf("range %q: want 1h, 6h, 24h or 7d", name)
	}
	if typ != "" {
		if err := schedule.ValidateType(typ); err != nil {
			return nil, badRequest{err}
		}
	}
	return cached(ctx, s, "latency\n"+name+"\n"+typ, func(ctx context.Context) (*LatencyView, error) {
		rep, err := s.src.Latency(ctx, rng, typ)
		v := &LatencyView{LatencyReport: rep, RangeName: name}
		for _, x := range latencyRangeNames {
			v.Ranges = append(v.Ranges, x.name)
		}
		switch {
		case errors.Is(err, leasecron.ErrNoRunRecords):
			v.Off = true
			return v, nil
		case err != nil:
			return nil, err
		}
		v.Outcomes = outcomeChart(rep.Points, rep.Step)
		v.WaitChart = newLineChart("wait-chart", "queue wait (due to start) of first attempts", rep.Points, func(p leasecron.LatencyPoint) leasecron.Percentiles { return p.Wait })
		v.RunChart = newLineChart("run-chart", "run time of every attempt", rep.Points, func(p leasecron.LatencyPoint) leasecron.Percentiles { return p.Run })
		if len(rep.Points) > 0 {
			v.FirstLabel, v.LastLabel = rep.Points[0].At.UTC().Format("Jan 2 15:04"), "now"
		}
		return v, nil
	})
}

// flowView fills what a task waits for, what waits for it and its batch,
// from its pending row or else its run record.
func flowView(v *TaskView, t Task) {
	v.Children = t.Children
	var after, met []string
	switch {
	case t.Pending != nil:
		after, met = t.Pending.After, t.Pending.Met
		v.AfterAny, v.Waiting, v.Batch, v.Callback = t.Pending.AfterAny, t.Pending.Waiting, t.Pending.Batch, t.Pending.Callback
		if v.Waiting {
			v.State = "waiting"
		}
	case t.Run != nil:
		after, met, v.Batch = t.Run.After, t.Run.After, t.Run.Batch
	}
	for _, p := range after {
		v.After = append(v.After, ParentView{ID: p, Done: slices.Contains(met, p)})
	}
}

func (s *Server) loadBatch(ctx context.Context, r *http.Request) (any, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, err
	}
	return cached(ctx, s, "batch\n"+id, func(ctx context.Context) (*BatchView, error) {
		b, err := s.src.Batch(ctx, id)
		if err != nil {
			return nil, err
		}
		v := &BatchView{BatchStatus: b.Status, Members: []BatchMemberView{}, More: max(0, b.Status.Counts.Total-len(b.Members)), CallbackState: b.Callback}
		for _, m := range b.Members {
			st := string(m.State)
			if st == "" {
				st = "pending"
			}
			v.Members = append(v.Members, BatchMemberView{ID: m.ID, State: st})
		}
		return v, nil
	})
}
