package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/schedule"
)

// handlerFunc answers a request: a status and a body, or an error (a
// *Problem or an error of the Client, see problemOf).
type handlerFunc func(ctx context.Context, r *http.Request, who caller) (int, any, error)

// route is one operation: who may call it, and, for those that change
// something, the action the audit log records.
type route struct {
	pattern string
	allow   roles
	action  string // audit action; "" for reads
	do      handlerFunc
}

func (s *server) routes() *http.ServeMux {
	m := http.NewServeMux()
	for _, rt := range s.table() {
		m.Handle(rt.pattern, s.serve(rt))
	}
	return m
}

// table lists the routes.
func (s *server) table() []route {
	return []route{
		{"GET /api/v1/health", anyRole, "", s.health},
		{"POST /api/v1/tasks", scheduler | operator, "schedule", s.schedule},
		{"POST /api/v1/tasks:many", scheduler | operator, "schedule-many", s.scheduleMany},
		{"GET /api/v1/tasks", viewer | operator, "", s.listTasks},
		{"GET /api/v1/tasks/{id}", anyRole, "", s.status},
		{"PUT /api/v1/tasks/{id}", scheduler | operator, "replace", s.replace},
		{"POST /api/v1/tasks/{id}/cancel", scheduler | operator, "cancel", s.cancel},
		{"POST /api/v1/tasks/{id}/reschedule", scheduler | operator, "reschedule", s.reschedule},
		{"POST /api/v1/tasks/{id}/run-now", operator, "run-now", s.itemAction(s.c.RunNow)},
		{"POST /api/v1/tasks/{id}/disable", operator, "disable", s.itemAction(s.c.Disable)},
		{"POST /api/v1/tasks/{id}/enable", operator, "enable", s.itemAction(s.c.Enable)},
		{"GET /api/v1/runs", viewer | operator, "", s.runs},
		{"GET /api/v1/search", viewer | operator, "", s.search},
		{"GET /api/v1/batches/{id}", anyRole, "", s.batch},
		{"GET /api/v1/paused", viewer | operator, "", s.paused},
		{"POST /api/v1/types/{type}/pause", operator, "pause", s.pause},
		{"POST /api/v1/types/{type}/resume", operator, "resume", s.resume},
		{"GET /api/v1/bulk", viewer | operator, "", s.bulks},
		{"POST /api/v1/bulk", operator, "bulk", s.startBulk},
		{"GET /api/v1/bulk/{id}", viewer | operator, "", s.bulk},
		{"GET /api/v1/dead-letters", viewer | operator, "", s.deadLetters},
		{"POST /api/v1/dead-letters/{id}/requeue", operator, "deadletter requeue", s.requeue},
		{"POST /api/v1/dead-letters/requeue-all", operator, "deadletter requeue-all", s.allDeadLetters(func(ctx context.Context) (DeadLettersDone, error) {
			n, err := s.c.DeadLetters().RequeueAll(ctx)
			return DeadLettersDone{Requeued: n}, err
		})},
		{"POST /api/v1/dead-letters/purge", operator, "deadletter purge", s.allDeadLetters(func(ctx context.Context) (DeadLettersDone, error) {
			n, err := s.c.DeadLetters().Purge(ctx)
			return DeadLettersDone{Purged: n}, err
		})},
	}
}

// serve runs rt's handler for an allowed caller, audits what changes
// something and writes the answer.
func (s *server) serve(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := callerOf(r)
		if who.role&rt.allow == 0 {
			s.count(who.who, "refused", rt.pattern)
			writeProblem(w, r, problem(http.StatusForbidden, "forbidden", fmt.Sprintf("%s %s needs the role %s; %s is %s", r.Method, r.URL.Path, rolesText(rt.allow), who.who, rolesText(who.role))))
			return
		}
		status, body, err := rt.do(r.Context(), r, who)
		if rt.action != "" {
			s.audit(r, who, rt.action, body, err)
		} else {
			s.count(who.who, "read", rt.pattern)
		}
		if err != nil {
			p := problemOf(err)
			if p.Status >= 500 && !errors.Is(err, context.Canceled) {
				s.log.Error("api call failed", "method", r.Method, "path", r.URL.Path, "who", who.who, "err", err)
			}
			writeProblem(w, r, p)
			return
		}
		writeJSON(w, status, body)
	})
}

func rolesText(r roles) string {
	var out []string
	for _, x := range []struct {
		bit  roles
		name string
	}{{viewer, leasecron.RoleViewer}, {scheduler, leasecron.RoleScheduler}, {operator, leasecron.RoleOperator}} {
		if r&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " or ")
}

// audit records a call that changes something (a failed write of the
// audit log is logged, not answered: the call itself happened). The
// result names what was done, never a payload.
func (s *server) audit(r *http.Request, who caller, action string, body any, err error) {
	e := leasecron.AuditEntry{Who: who.who, Via: "api", From: remoteHost(r), Action: action, Target: auditTarget(r), OK: err == nil}
	switch b := body.(type) {
	case nil:
	case TaskResult:
		e.Target, e.Result = b.Task.ID, fmt.Sprintf("%s task %s due %s", b.Task.Type, b.Task.ID, b.Task.Due.Format(time.RFC3339))
	case ScheduleManyResult:
		var ids []string
		for _, x := range b.Results {
			if x.Status == "scheduled" {
				ids = append(ids, x.ID)
			}
		}
		e.Target, e.Result = b.Batch, fmt.Sprintf("%d of %d scheduled: %s", b.Scheduled, len(b.Results), strings.Join(ids, ","))
	default:
		if j, jerr := json.Marshal(body); jerr == nil {
			e.Result = string(j)
		}
	}
	if err != nil {
		e.Result = err.Error()
	}
	e.Result = trunc.Head(e.Result, 1000)
	// Not the request's context: a caller that hangs up still did it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	if aerr := s.c.Audit(ctx, e); aerr != nil && !errors.Is(aerr, leasecron.ErrNoRunRecords) {
		s.log.Warn("recording an api call in the audit log failed", "action", action, "who", who.who, "err", aerr)
	}
}

func auditTarget(r *http.Request) string {
	for _, k := range []string{"id", "type"} {
		if v := r.PathValue(k); v != "" {
			return v
		}
	}
	return ""
}

// readBody decodes the JSON body of r into v, refusing unknown fields, a
// body over MaxBody (before reading it when its length says so), and a
// media type other than JSON. An empty body leaves v as it is when
// optional.
func (s *server) readBody(r *http.Request, v any, optional bool) error {
	if r.ContentLength > s.o.MaxBody {
		return problem(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("the body is %d bytes; at most %d are accepted (api.max_body)", r.ContentLength, s.o.MaxBody))
	}
	ct := r.Header.Get("Content-Type")
	if ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return problem(http.StatusUnsupportedMediaType, "unsupported-media-type", fmt.Sprintf("Content-Type %q: want application/json", ct))
		}
	}
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, s.o.MaxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return problem(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("the body is over %d bytes (api.max_body)", s.o.MaxBody))
	case err != nil:
		return problem(http.StatusBadRequest, "invalid-body", "reading the body: "+err.Error())
	case len(bytes.TrimSpace(b)) == 0:
		if optional {
			return nil
		}
		return problem(http.StatusBadRequest, "invalid-body", "the body is empty: want a JSON object")
	case ct == "":
		// A body without a type: what a browser's cross-site form or
		// no-cors fetch sends. Programs say what they send.
		return problem(http.StatusUnsupportedMediaType, "unsupported-media-type", "a body without Content-Type: want application/json")
	}
	if spec, ok := v.(*leasecron.TaskSpec); ok {
		got, err := leasecron.ParseTaskSpec(b)
		if err != nil {
			var se *leasecron.SpecError
			if errors.As(err, &se) && se.Field == "" {
				return problem(http.StatusBadRequest, "invalid-body", se.Error())
			}
			return err
		}
		*spec = got
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return problem(http.StatusBadRequest, "invalid-body", "the body is not the JSON object expected: "+err.Error())
	}
	if dec.More() {
		return problem(http.StatusBadRequest, "invalid-body", "more than one JSON value in the body")
	}
	return nil
}

// query parameters

func queryLimit(r *http.Request, def, most int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, fieldProblem("limit", fmt.Sprintf("a whole number from 1 to %d", most), fmt.Sprintf("limit %q: want a whole number from 1 to %d", v, most))
	}
	return n, nil
}

func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fieldProblem(name, "true or false", fmt.Sprintf("%s %q: want true or false", name, v))
	}
	return b, nil
}

// typeFilter checks a listing's type filter against a limited caller.
func typeFilter(who caller, typ string) error {
	if !who.limited() {
		return nil
	}
	if typ == "" {
		return problem(http.StatusForbidden, "forbidden", fmt.Sprintf("%s may see only the types %s: give type= one of them", who.who, strings.Join(who.types, ", ")))
	}
	return typeAllowed(who, typ)
}

func typeAllowed(who caller, typ string) error {
	if who.allows(typ) {
		return nil
	}
	return problem(http.StatusForbidden, "forbidden", fmt.Sprintf("%s may touch only the types %s, not %q", who.who, strings.Join(who.types, ", "), typ))
}

// taskOfType checks that a limited caller may touch the task id: one
// point read, for limited callers only.
func (s *server) taskOfType(ctx context.Context, who caller, id string) error {
	if !who.limited() {
		return nil
	}
	st, err := s.c.Status(ctx, id)
	if err != nil {
		return err
	}
	if st.Pending == nil && st.Run == nil {
		return fmt.Errorf("task %q: %w", id, leasecron.ErrNotFound)
	}
	return typeAllowed(who, statusOf(st).Type())
}

// handlers

// healthPeek is how many dead letters health peeks at for a caller
// limited to types (the most one peek returns).
const healthPeek = 32

func (s *server) health(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	st, err := s.c.Stats(ctx)
	if err != nil {
		return 0, nil, err
	}
	h := Health{Status: "ok", QueueDepth: st.QueueDepth, DeadLetters: st.PoisonDepth,
		DueCount: st.Due.Count, DueLagSeconds: st.Due.Lag.Seconds(), PausedTypes: []string{}}
	if ins, err := s.c.Instances(ctx); err == nil {
		h.Instances = len(ins)
	} else {
		return 0, nil, err
	}
	ps, err := s.c.Paused(ctx)
	if err != nil {
		return 0, nil, err
	}
	for _, p := range ps {
		if who.allows(p.Type) {
			h.PausedTypes = append(h.PausedTypes, p.Type)
		}
	}
	if who.limited() {
		// The other types' dead letters and pauses are not theirs to see
		// (docs/api.md; a review found the fleet's total and every pause
		// shown to them): their own among those a peek reaches, as the
		// dead-letter listing counts them.
		p, err := s.c.PeekDeadLetters(ctx, healthPeek)
		if err != nil {
			return 0, nil, err
		}
		h.DeadLetters = 0
		for _, d := range p.DeadLetters {
			if who.allows(d.Type) {
				h.DeadLetters++
			}
		}
	}
	if st.Leader.Held() {
		h.Leader = st.Leader.Holder
	}
	if h.Leader == "" || st.Due.Lag > time.Minute {
		h.Status = "degraded"
	}
	return http.StatusOK, h, nil
}

func (s *server) schedule(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	var spec leasecron.TaskSpec
	if err := s.readBody(r, &spec, false); err != nil {
		return 0, nil, err
	}
	it, u, err := s.itemOf(who, spec)
	if err != nil {
		return 0, nil, err
	}
	if it.ID == "" && u == nil {
		// Named here, so that a write whose answer is lost can say which
		// task it may have scheduled. Not a unique task's: its id must
		// fall in its key's shard, which the client draws it for (a
		// review's find: with shards, every unique POST without an id was
		// refused); a unique write sent again meets its own guard.
		it.ID = schedule.NewID(s.clk.Now())
	}
	got, err := s.c.Schedule(withTrace(r), it, &leasecron.ScheduleOptions{Unique: u})
	if err != nil {
		// A retried POST: the same id and body answer as the first did.
		if again, ok := s.sameAsScheduled(ctx, err, spec, it, u, ""); ok {
			return http.StatusOK, TaskResult{Task: again}, nil
		}
		if p := problemOf(err); spec.ID == "" && it.ID != "" && p.Status >= http.StatusInternalServerError && p.Type != ProblemPrefix+"incomplete" {
			// Storage did not answer, or not as expected: the write may
			// have been made (a try of it may have committed before a
			// later one was refused). A 503 would be sent again, and
			// without an id the second POST is a second task. Found, it
			// was; not found, it was not (the write's tries are over).
			have, gerr := s.c.Get(ctx, it.ID)
			switch {
			case gerr == nil:
				return http.StatusCreated, TaskResult{Task: taskOf(have)}, nil
			case errors.Is(gerr, leasecron.ErrNotFound), storage.Unprocessed(err) && storage.Unprocessed(gerr):
				// Not written; or storage refusing every request, the
				// write's and the look's, as busy: most likely nothing
				// was done, and the caller is told to come back.
				return 0, nil, err
			}
			p := problem(http.StatusInternalServerError, "outcome-unknown", fmt.Sprintf(
				"storage did not answer whether task %s was written (%v): GET /api/v1/tasks/%s tells; sent again without an id, the request would schedule a second task", it.ID, err, it.ID))
			p.ID = it.ID
			return 0, nil, p
		}
		return 0, nil, err
	}
	return http.StatusCreated, TaskResult{Task: taskOf(got)}, nil
}

// itemOf checks spec as the caller's: its id, type and every field.
func (s *server) itemOf(who caller, spec leasecron.TaskSpec) (leasecron.Item, *leasecron.Unique, error) {
	if spec.ID != "" {
		if err := schedule.ValidateID(spec.ID); err != nil {
			return leasecron.Item{}, nil, fieldProblem("id", "1 to 200 of A-Z a-z 0-9 . _ : -", err.Error())
		}
	}
	if spec.Type != "" {
		if err := schedule.ValidateType(spec.Type); err != nil {
			return leasecron.Item{}, nil, fieldProblem("type", "1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit", err.Error())
		}
		if strings.HasPrefix(spec.Type, reservedPrefix) {
			return leasecron.Item{}, nil, fieldProblem("type", "a type not starting with "+reservedPrefix, fmt.Sprintf("type %q is leasecron's own (its bulk operations run as tasks of it)", spec.Type))
		}
	}
	it, u, err := spec.Item(s.clk.Now())
	if err != nil {
		return it, u, err
	}
	if who.limited() {
		if it.Type == "" {
			return it, u, fieldProblem("type", "one of "+strings.Join(who.types, ", "), "type is required of a token limited to types")
		}
		if err := typeAllowed(who, it.Type); err != nil {
			return it, u, err
		}
	}
	return it, u, nil
}

// sameAsScheduled reports, when err says the id (or unique key) is taken
// by the task spec describes, that task as stored: a retry of a request
// that succeeded. A due time is compared only when spec gave at (in and
// now are relative to the request); batch is the request's.
func (s *server) sameAsScheduled(ctx context.Context, err error, spec leasecron.TaskSpec, it leasecron.Item, u *leasecron.Unique, batch string) (Task, bool) {
	var dup *leasecron.DuplicateError
	if spec.ID == "" || !(errors.Is(err, leasecron.ErrAlreadyScheduled) || errors.As(err, &dup) && dup.ID == spec.ID) {
		return Task{}, false
	}
	have, gerr := s.c.Get(ctx, spec.ID)
	if gerr != nil {
		return Task{}, false
	}
	return taskOf(have), s.sameTask(ctx, have, spec, it, u, batch)
}

// sameTask reports whether have, a pending task, is the one spec (it, u)
// describes in a request of batch.
func (s *server) sameTask(ctx context.Context, have leasecron.Item, spec leasecron.TaskSpec, it leasecron.Item, u *leasecron.Unique, batch string) bool {
	key := ""
	if u != nil {
		key = u.Key
	}
	payload := have.Payload
	if have.PayloadBlob != "" {
		b, err := s.c.Payload(ctx, have.PayloadBlob)
		if err != nil {
			return false
		}
		payload = string(b)
	}
	// Compared as the schedule stores them: a missing type is "default",
	// and After is trimmed and without repeats (a review's find: an
	// identical retry of such a request answered 409).
	return have.Type == cmp.Or(it.Type, schedule.DefaultType) && payload == it.Payload && have.Recurrence == it.Recurrence &&
		have.TZ == it.TZ && have.MaxAttempts == it.MaxAttempts && have.Queue == it.Queue && have.Priority == it.Priority &&
		have.FairKey == it.FairKey && slices.Equal(have.After, schedule.ParentIDs(it.After)) && have.AfterAny == it.AfterAny && have.UniqueKey == key &&
		have.Batch == batch && (spec.At == "" || have.Due.Equal(it.Due))
}

// withBatch is it as ScheduleMany writes the callback of batch.
func withBatch(it leasecron.Item, batch string) leasecron.Item {
	it.Batch = batch
	return it
}

// batchSettling is how long after its batch was written a request that
// finds it unsealed may be one whose call is still writing it
// (leasecron's settleTimeout, and some): a retry of it is then asked to
// come back rather than refused.
const batchSettling = 3 * time.Minute

// sameBatch answers a request refused because its batch exists
// (refusal) when it is a retry of the request that wrote the batch, whose
// client got no answer (a timeout, a connection lost): every task names
// its id, and the batch holds exactly those ids as its members, with the
// callback the request asks for. Sealed, the answer is the first call's:
// every task scheduled (a member still waiting in the schedule must be the
// task the request describes; one moved or ended already is taken for it
// by its id). Unsealed and young, the first call may still be writing
// it: 503, to come back in a few seconds. Anything else is the refusal.
func (s *server) sameBatch(ctx context.Context, req ScheduleManyRequest, o leasecron.ScheduleManyOptions, items []leasecron.Item, specs []leasecron.TaskSpec, uniques []*leasecron.Unique, index []int, out ScheduleManyResult, refusal error) (int, any, error) {
	b, err := s.c.Batch(ctx, req.Batch)
	if err != nil {
		return 0, nil, refusal
	}
	cb := ""
	if o.OnComplete != nil {
		cb = req.Batch + "-done"
	}
	if b.Callback != cb || slices.ContainsFunc(specs, func(sp leasecron.TaskSpec) bool { return sp.ID == "" }) {
		return 0, nil, refusal
	}
	if cb != "" {
		// The callback, still waiting, must be the one asked for (one
		// released already is taken for it by its id).
		switch have, err := s.c.Get(ctx, cb); {
		case errors.Is(err, leasecron.ErrNotFound):
		case err != nil:
			return 0, nil, err
		case !s.sameTask(ctx, have, leasecron.TaskSpec{}, withBatch(*o.OnComplete, req.Batch), nil, req.Batch):
			return 0, nil, refusal
		}
	}
	if !b.Sealed {
		if s.clk.Now().Sub(b.Created) < batchSettling {
			p := problem(http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("batch %s is being written by a request still under way (this one's first try?): retry after the time in Retry-After", req.Batch))
			p.retryAfter = 5
			return 0, nil, p
		}
		return 0, nil, refusal
	}
	members, err := s.c.BatchMembers(ctx, req.Batch)
	if err != nil || len(members) != len(items) {
		return 0, nil, refusal
	}
	in := make(map[string]bool, len(members))
	for _, m := range members {
		in[m.ID] = true
	}
	for k, it := range items {
		if !in[it.ID] {
			return 0, nil, refusal
		}
		due := it.Due
		switch have, err := s.c.Get(ctx, it.ID); {
		case errors.Is(err, leasecron.ErrNotFound):
		case err != nil:
			return 0, nil, err
		case !s.sameTask(ctx, have, specs[k], it, uniques[k], req.Batch):
			return 0, nil, refusal
		default:
			due = have.Due
		}
		x := &out.Results[index[k]]
		x.ID, x.Due, x.Status = it.ID, due, "scheduled"
		out.Scheduled++
	}
	return http.StatusOK, out, nil
}

// ScheduleManyRequest is the body of POST /api/v1/tasks:many.
type ScheduleManyRequest struct {
	Tasks      []json.RawMessage `json:"tasks"`
	Partial    bool              `json:"partial,omitempty"`
	Batch      string            `json:"batch,omitempty"`
	OnComplete *OnComplete       `json:"on_complete,omitempty"`
}

// OnComplete is a batch's completion callback.
type OnComplete struct {
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

func (s *server) scheduleMany(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	var req ScheduleManyRequest
	if err := s.readBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	if len(req.Tasks) == 0 {
		return 0, nil, fieldProblem("tasks", fmt.Sprintf("1 to %d task specs", s.o.MaxTasks), "tasks is empty")
	}
	if len(req.Tasks) > s.o.MaxTasks {
		return 0, nil, problem(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("%d tasks in one request; at most %d are accepted (api.max_tasks): split them", len(req.Tasks), s.o.MaxTasks))
	}
	var o leasecron.ScheduleManyOptions
	o.Partial, o.Batch = req.Partial, req.Batch
	if req.OnComplete != nil {
		if req.Batch == "" {
			return 0, nil, fieldProblem("on_complete", "a callback with batch", "on_complete goes with batch")
		}
		cb, _, err := s.itemOf(who, leasecron.TaskSpec{Type: req.OnComplete.Type, Payload: req.OnComplete.Payload})
		var p *Problem
		if errors.As(err, &p) && p.Status == http.StatusForbidden {
			return 0, nil, err // a type the token may not touch: 403, as anywhere else
		}
		if err != nil {
			return 0, nil, fieldProblem("on_complete", "{type, payload} of a type the token may touch", "on_complete: "+err.Error())
		}
		o.OnComplete = &cb
	}
	res := make([]ScheduleResult, len(req.Tasks))
	var (
		items   []leasecron.Item
		uniques []*leasecron.Unique
		specs   []leasecron.TaskSpec
		index   []int
		bad     []TaskError
		anyUniq bool
	)
	seen := map[string]int{}
	for i, raw := range req.Tasks {
		res[i].Index = i
		spec, err := leasecron.ParseTaskSpec(raw)
		var it leasecron.Item
		var u *leasecron.Unique
		if err == nil {
			it, u, err = s.itemOf(who, spec)
		}
		if err == nil && spec.ID != "" {
			if first, twice := seen[spec.ID]; twice {
				err = fieldProblem("id", "an id once per request", fmt.Sprintf("id %q is also task %d of this request", spec.ID, first))
			} else {
				seen[spec.ID] = i
			}
		}
		if err != nil {
			p := problemOf(err)
			if p.Status == http.StatusForbidden {
				return 0, nil, p
			}
			bad = append(bad, TaskError{Index: i, Field: p.Field, Detail: p.Detail})
			res[i].ID, res[i].Status, res[i].Error = spec.ID, "invalid", p.Detail
			continue
		}
		items, uniques, specs, index = append(items, it), append(uniques, u), append(specs, spec), append(index, i)
		anyUniq = anyUniq || u != nil
	}
	if len(bad) > 0 && !req.Partial {
		p := problem(http.StatusUnprocessableEntity, "invalid-tasks", fmt.Sprintf("%d of %d tasks are invalid; nothing was scheduled (partial: true schedules the others)", len(bad), len(req.Tasks)))
		p.Errors = bad
		return 0, nil, p
	}
	out := ScheduleManyResult{Results: res, Batch: req.Batch}
	if len(items) == 0 {
		return http.StatusOK, out, nil
	}
	if anyUniq {
		o.Unique = uniques
	}
	got, err := s.c.ScheduleMany(withTrace(r), items, o)
	if got == nil && errors.Is(err, leasecron.ErrBatchExists) {
		return s.sameBatch(ctx, req, o, items, specs, uniques, index, out, err)
	}
	if got == nil && err != nil {
		return 0, nil, err // refused as a whole: nothing was written
	}
	if errors.Is(err, leasecron.ErrIncomplete) {
		// The tasks were written but their batch was not sealed: 500
		// "incomplete", which says so, rather than a 200 that hides a
		// callback that may never run, or a 503 whose retry the batch's
		// id would refuse.
		return 0, nil, err
	}
	for k, g := range got {
		x := &res[index[k]]
		x.ID, x.Due = g.Item.ID, g.Item.Due
		if g.Err == nil {
			x.Status = "scheduled"
			out.Scheduled++
			continue
		}
		if again, ok := s.sameAsScheduled(ctx, g.Err, specs[k], items[k], uniques[k], req.Batch); ok {
			// A retried request: this task is the one it scheduled.
			x.Status, x.Due = "scheduled", again.Due
			out.Scheduled++
			continue
		}
		x.Error = g.Err.Error()
		var dup *leasecron.DuplicateError
		switch e := g.Err; {
		case errors.As(e, &dup):
			x.Status, x.Holder = "held", dup.ID
		case errors.Is(e, schedule.ErrInvalid) || errors.Is(e, schedule.ErrBadRecurrence) || errors.Is(e, schedule.ErrPayloadTooLarge):
			x.Status = "invalid"
		case errors.Is(e, leasecron.ErrAlreadyScheduled):
			x.Status = "duplicate"
		case errors.Is(e, schedule.ErrMovedBeforeRollback):
			x.Status = "moved"
		default:
			x.Status = "not_written"
		}
	}
	return http.StatusOK, out, nil
}

func (s *server) listTasks(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	q := r.URL.Query()
	if err := typeFilter(who, q.Get("type")); err != nil {
		return 0, nil, err
	}
	limit, err := queryLimit(r, 50, 1000)
	if err != nil {
		return 0, nil, err
	}
	rec, err := queryBool(r, "recurring")
	if err != nil {
		return 0, nil, err
	}
	p, err := s.c.List(ctx, &leasecron.ListOptions{Type: q.Get("type"), Recurring: rec, Limit: limit, Continuation: q.Get("continue")})
	if err != nil {
		return 0, nil, err
	}
	out := TaskList{Tasks: make([]Task, len(p.Items)), Continue: p.Continue}
	for i, it := range p.Items {
		out.Tasks[i] = taskOf(it)
	}
	return http.StatusOK, out, nil
}

func (s *server) status(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	id := r.PathValue("id")
	st, err := s.c.Status(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	if st.Pending == nil && st.Run == nil {
		return 0, nil, problem(http.StatusNotFound, "not-found", fmt.Sprintf("no task %q: neither pending nor in the run records", id))
	}
	out := statusOf(st)
	if err := typeAllowed(who, out.Type()); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}

func (s *server) replace(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	id := r.PathValue("id")
	var spec leasecron.TaskSpec
	if err := s.readBody(r, &spec, false); err != nil {
		return 0, nil, err
	}
	if spec.ID != "" && spec.ID != id {
		return 0, nil, fieldProblem("id", "empty or the path's id "+strconv.Quote(id), fmt.Sprintf("id %q differs from the path's %q", spec.ID, id))
	}
	spec.ID = id
	it, u, err := s.itemOf(who, spec)
	if err != nil {
		return 0, nil, err
	}
	if err := s.taskOfType(ctx, who, id); err != nil && !errors.Is(err, leasecron.ErrNotFound) {
		return 0, nil, err
	}
	got, err := s.c.Schedule(withTrace(r), it, &leasecron.ScheduleOptions{Replace: true, Unique: u})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, TaskResult{Task: taskOf(got)}, nil
}

func (s *server) cancel(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	id := r.PathValue("id")
	if err := s.readBody(r, &struct{}{}, true); err != nil {
		return 0, nil, err
	}
	if err := s.taskOfType(ctx, who, id); err != nil {
		return 0, nil, err
	}
	res, err := s.c.Cancel(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, CancelResult{ID: res.ID, Removed: res.Removed, Marked: res.Marked}, nil
}

// RescheduleRequest is the body of POST /api/v1/tasks/{id}/reschedule.
type RescheduleRequest struct {
	At string `json:"at,omitempty"`
	In string `json:"in,omitempty"`
}

func (s *server) reschedule(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	id := r.PathValue("id")
	var req RescheduleRequest
	if err := s.readBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	if (req.At == "") == (req.In == "") {
		return 0, nil, fieldProblem("at", "at (RFC 3339) or in (a Go duration), exactly one", "give at or in, exactly one")
	}
	due, _, err := (leasecron.TaskSpec{At: req.At, In: req.In}).Item(s.clk.Now())
	if err != nil {
		return 0, nil, err
	}
	if err := s.taskOfType(ctx, who, id); err != nil {
		return 0, nil, err
	}
	got, err := s.c.Reschedule(ctx, id, due.Due)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, TaskResult{Task: taskOf(got)}, nil
}

// itemAction is an operator's action on one task that answers the task.
func (s *server) itemAction(call func(context.Context, string) (leasecron.Item, error)) handlerFunc {
	return func(ctx context.Context, r *http.Request, who caller) (int, any, error) {
		id := r.PathValue("id")
		if err := s.readBody(r, &struct{}{}, true); err != nil {
			return 0, nil, err
		}
		if err := s.taskOfType(ctx, who, id); err != nil {
			return 0, nil, err
		}
		got, err := call(ctx, id)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, TaskResult{Task: taskOf(got)}, nil
	}
}

func (s *server) runs(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	q := r.URL.Query()
	if err := typeFilter(who, q.Get("type")); err != nil {
		return 0, nil, err
	}
	limit, err := queryLimit(r, 50, 1000)
	if err != nil {
		return 0, nil, err
	}
	p, err := s.c.Runs(ctx, leasecron.RunQuery{State: leasecron.RunState(q.Get("state")), Type: q.Get("type"), Series: q.Get("series"), Batch: q.Get("batch"), Limit: limit, Continue: q.Get("continue")})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, RunList{Runs: runsOf(ofTypes(who, p.Runs)), Continue: p.Continue}, nil
}

// ofTypes keeps the runs a limited caller may see (a series filter
// answers by series, whatever the type filter says).
func ofTypes(who caller, rs []leasecron.Run) []leasecron.Run {
	if !who.limited() {
		return rs
	}
	out := rs[:0:0]
	for _, r := range rs {
		if who.allows(r.Type) {
			out = append(out, r)
		}
	}
	return out
}

func (s *server) search(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	q := r.URL.Query()
	if strings.TrimSpace(q.Get("q")) == "" {
		return 0, nil, fieldProblem("q", "the tokens of leasecron search (an id, id*, type:T, state:S, since:WHEN, …)", "q is empty")
	}
	sq, err := leasecron.ParseSearch(q.Get("q"), s.clk.Now())
	if err != nil {
		return 0, nil, fieldProblem("q", "the tokens of leasecron search (an id, id*, type:T, state:S, since:WHEN, …)", err.Error())
	}
	limit, err := queryLimit(r, 50, 1000)
	if err != nil {
		return 0, nil, err
	}
	sq.Run.Limit, sq.Run.Continue = limit, q.Get("continue")
	exactID := sq.ID != "" && !sq.IDPrefix
	if !exactID {
		if err := typeFilter(who, sq.Run.Type); err != nil {
			return 0, nil, err
		}
	}
	res, err := s.c.Search(ctx, sq)
	if err != nil {
		return 0, nil, err
	}
	out := SearchResult{Runs: runsOf(ofTypes(who, res.Runs)), Continue: res.Continue}
	if res.Exact != nil {
		st := statusOf(*res.Exact)
		if err := typeAllowed(who, st.Type()); err != nil {
			return 0, nil, err
		}
		out.Exact = &st
	}
	return http.StatusOK, out, nil
}

func (s *server) batch(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	id := r.PathValue("id")
	b, err := s.c.Batch(ctx, id)
	if err != nil {
		return 0, nil, err
	}
	if who.limited() {
		// A batch is its members': a limited caller sees one whose first
		// member is of its types (two reads).
		ms, err := s.c.BatchMembers(ctx, id)
		if err != nil {
			return 0, nil, err
		}
		if len(ms) == 0 {
			return 0, nil, problem(http.StatusForbidden, "forbidden", fmt.Sprintf("%s may see only batches of the types %s", who.who, strings.Join(who.types, ", ")))
		}
		if err := s.taskOfType(ctx, who, ms[0].ID); err != nil {
			return 0, nil, err
		}
	}
	return http.StatusOK, b, nil
}

func (s *server) paused(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	ps, err := s.c.Paused(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := PausedList{Paused: []leasecron.Pause{}}
	for _, p := range ps {
		if who.allows(p.Type) {
			out.Paused = append(out.Paused, p)
		}
	}
	return http.StatusOK, out, nil
}

// PauseRequest is the body of POST /api/v1/types/{type}/pause: until a
// time, for a duration, or (neither) until resumed.
type PauseRequest struct {
	Until string `json:"until,omitempty"`
	For   string `json:"for,omitempty"`
}

func (s *server) pause(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	typ := r.PathValue("type")
	var req PauseRequest
	if err := s.readBody(r, &req, true); err != nil {
		return 0, nil, err
	}
	if err := schedule.ValidateType(typ); err != nil {
		return 0, nil, fieldProblem("type", "a task type", err.Error())
	}
	if err := typeAllowed(who, typ); err != nil {
		return 0, nil, err
	}
	var until time.Time
	switch {
	case req.Until != "" && req.For != "":
		return 0, nil, fieldProblem("for", "until or for, not both", "give until or for, not both")
	case req.Until != "":
		t, err := time.Parse(time.RFC3339, req.Until)
		if err != nil {
			return 0, nil, fieldProblem("until", acceptTime, fmt.Sprintf("until %q: want %s", req.Until, acceptTime))
		}
		until = t
	case req.For != "":
		d, err := time.ParseDuration(req.For)
		if err != nil || d <= 0 {
			return 0, nil, fieldProblem("for", "a positive Go duration such as 30m", fmt.Sprintf("for %q: want a positive Go duration such as 30m", req.For))
		}
		until = s.clk.Now().Add(d)
	}
	if err := s.c.Pause(ctx, typ, until); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, PauseResult{Type: typ, Until: until.UTC()}, nil
}

const acceptTime = "an RFC 3339 time with a zone, e.g. 2026-01-02T15:04:05Z"

func (s *server) resume(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	typ := r.PathValue("type")
	if err := s.readBody(r, &struct{}{}, true); err != nil {
		return 0, nil, err
	}
	if err := typeAllowed(who, typ); err != nil {
		return 0, nil, err
	}
	if err := s.c.Resume(ctx, typ); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, PauseResult{Type: typ}, nil
}

func (s *server) bulks(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	bs, err := s.c.Bulks(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := BulkList{Operations: []leasecron.Bulk{}}
	for _, b := range bs {
		if who.allows(b.Op.Filter.Type) {
			out.Operations = append(out.Operations, b)
		}
	}
	return http.StatusOK, out, nil
}

// BulkRequest is the body of POST /api/v1/bulk: the operation, its filter,
// and the count of matching items the caller confirmed (Expect).
type BulkRequest struct {
	Kind     string `json:"kind"`
	Type     string `json:"type,omitempty"`
	Reason   string `json:"reason,omitempty"`
	IDPrefix string `json:"id_prefix,omitempty"`
	Queue    string `json:"queue,omitempty"`
	Since    string `json:"since,omitempty"`
	Until    string `json:"until,omitempty"`
	Expect   int    `json:"expect"`
}

func (s *server) startBulk(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	var req BulkRequest
	if err := s.readBody(r, &req, false); err != nil {
		return 0, nil, err
	}
	if err := typeFilter(who, req.Type); err != nil {
		return 0, nil, err
	}
	op, err := leasecron.ParseBulkOpInQueue(req.Kind, req.Type, req.Reason, req.IDPrefix, req.Queue, req.Since, req.Until, s.clk.Now())
	if err != nil {
		return 0, nil, problem(http.StatusBadRequest, "invalid-field", err.Error())
	}
	n, err := s.c.CountBulk(ctx, op)
	if err != nil {
		return 0, nil, err
	}
	if n != req.Expect {
		return 0, nil, problem(http.StatusConflict, "conflict", fmt.Sprintf("%d items match %s now, not the %d of expect: confirm the count and send it as expect", n, op, req.Expect))
	}
	b, err := s.c.StartBulk(ctx, op, n, who.who)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, b, nil
}

func (s *server) bulk(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	b, err := s.c.Bulk(ctx, r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	if err := typeAllowed(who, b.Op.Filter.Type); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, b, nil
}

func (s *server) deadLetters(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	limit, err := queryLimit(r, 32, 32)
	if err != nil {
		return 0, nil, err
	}
	p, err := s.c.PeekDeadLetters(ctx, limit)
	if err != nil {
		return 0, nil, err
	}
	out := DeadLetterList{DeadLetters: []DeadLetter{}, Total: p.Total}
	for _, d := range p.DeadLetters {
		if who.allows(d.Type) {
			out.DeadLetters = append(out.DeadLetters, d)
		}
	}
	if who.limited() {
		out.Total = len(out.DeadLetters) // the others' count is not theirs to see
	}
	return http.StatusOK, out, nil
}

func (s *server) requeue(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	id := r.PathValue("id")
	if err := s.readBody(r, &struct{}{}, true); err != nil {
		return 0, nil, err
	}
	if who.limited() {
		ds, err := s.c.DeadLetters().List(ctx)
		if err != nil {
			return 0, nil, err
		}
		i := slices.IndexFunc(ds, func(d DeadLetter) bool { return d.RunID == id })
		if i < 0 {
			return 0, nil, problem(http.StatusNotFound, "not-found", fmt.Sprintf("no dead letter of task run %q", id))
		}
		if err := typeAllowed(who, ds[i].Type); err != nil {
			return 0, nil, err
		}
	}
	if err := s.c.DeadLetters().Requeue(ctx, id); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, RequeueResult{ID: id}, nil
}

// allDeadLetters is an action on every dead letter: refused to a token
// limited to types (it would touch others'; bulk requeue-dead takes a
// type).
func (s *server) allDeadLetters(do func(context.Context) (DeadLettersDone, error)) handlerFunc {
	return func(ctx context.Context, r *http.Request, who caller) (int, any, error) {
		if err := s.readBody(r, &struct{}{}, true); err != nil {
			return 0, nil, err
		}
		if who.limited() {
			return 0, nil, problem(http.StatusForbidden, "forbidden", fmt.Sprintf("%s is limited to the types %s: it cannot act on every dead letter (POST /api/v1/bulk with kind requeue-dead and a type can)", who.who, strings.Join(who.types, ", ")))
		}
		res, err := do(ctx)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, res, nil
	}
}
