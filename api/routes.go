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
	"github.com/leasecron/leasecron/internal/clientip"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
)

// handlerFunc answers a request: a status and a body, or an error (a
// *Problem or an error of the Client, see problemOf).
type handlerFunc func(ctx context.Context, r *http.Request, who caller) (int, any, error)

// route is one operation: who may call it, for those that change
// something the action the audit log records, and what it can answer.
type route struct {
	pattern string
	allow   roles
	action  string // audit action; "" for reads
	do      handlerFunc
	answers answers
}

// answers are what a route can answer: each status, with the problem
// types (the slugs after ProblemPrefix) of an error status. openapi.json
// lists exactly these for the route's operation (its responses, and each
// error response's x-problem-types), and the package's tests check every
// answer they get against them.
type answers map[int][]string

// answering merges parts: every status of each, with the problem types of
// all.
func answering(parts ...answers) answers {
	out := answers{}
	for _, p := range parts {
		for status, slugs := range p {
			have, ok := out[status]
			if !ok {
				have = []string{}
			}
			for _, slug := range slugs {
				if !slices.Contains(have, slug) {
					have = append(have, slug)
				}
			}
			if status < 400 {
				have = nil
			}
			out[status] = have
		}
	}
	return out
}

// The answers routes share.
var (
	// everyRoute: no token, or an unknown or revoked one (401); a role or
	// types that do not allow the call, a browser's cross-origin write, a
	// platform principal without a role (403); a token storage could not
	// check, or storage busy or unreachable (503); an error no problem maps
	// (500 internal).
	everyRoute = answers{401: {"unauthorized"}, 403: {"forbidden"}, 500: {"internal"}, 503: {"unavailable"}}
	// withBody: what reading a body refuses (readBody).
	withBody = answers{400: {"invalid-body"}, 413: {"too-large"}, 415: {"unsupported-media-type"}}
	// badField: a field, parameter or path value refused.
	badField   = answers{400: {"invalid-field"}}
	notFound   = answers{404: {"not-found"}}
	conflict   = answers{409: {"conflict"}}
	incomplete = answers{500: {"incomplete"}}
	ok200      = answers{200: nil}
)

func (s *server) routes() *http.ServeMux {
	m := http.NewServeMux()
	for _, rt := range s.table() {
		m.Handle(rt.pattern, s.serve(rt))
	}
	return m
}

// table lists the routes, with what each can answer (everyRoute's too).
func (s *server) table() []route {
	rts := []route{
		{"GET /api/v1/health", anyRole, "", s.health, answering(ok200)},
		{"POST /api/v1/tasks", scheduler | operator, "schedule", s.schedule,
			answering(answers{200: nil, 201: nil}, withBody, badField, conflict, answers{409: {"unique-key-held"}, 500: {"outcome-unknown"}})},
		{"POST /api/v1/tasks:many", scheduler | operator, "schedule-many", s.scheduleMany,
			answering(ok200, withBody, badField, conflict, incomplete, answers{422: {"invalid-tasks"}})},
		{"GET /api/v1/tasks", viewer | operator, "", s.listTasks, answering(ok200, badField)},
		{"GET /api/v1/tasks/{id}", anyRole, "", s.status, answering(ok200, badField, notFound)},
		{"PUT /api/v1/tasks/{id}", scheduler | operator, "replace", s.replace, answering(ok200, withBody, badField, conflict, answers{500: {"outcome-unknown"}})},
		{"POST /api/v1/tasks/{id}/cancel", scheduler | operator, "cancel", s.cancel, answering(ok200, withBody, badField, notFound, conflict, incomplete)},
		{"POST /api/v1/tasks/{id}/reschedule", scheduler | operator, "reschedule", s.reschedule, answering(ok200, withBody, badField, notFound, conflict)},
		{"POST /api/v1/tasks/{id}/run-now", operator, "run-now", s.itemAction(s.c.RunNow, "the id of a pending task"), answering(ok200, withBody, badField, notFound, conflict)},
		{"POST /api/v1/tasks/{id}/disable", operator, "disable", s.itemAction(s.c.Disable, "the id of a recurring series"), answering(ok200, withBody, badField, notFound, conflict, incomplete)},
		{"POST /api/v1/tasks/{id}/enable", operator, "enable", s.itemAction(s.c.Enable, "the id of a pending task"), answering(ok200, withBody, badField, notFound)},
		{"GET /api/v1/runs", viewer | operator, "", s.runs, answering(ok200, badField, conflict)},
		{"GET /api/v1/search", viewer | operator, "", s.search, answering(ok200, badField, notFound, conflict)},
		{"GET /api/v1/batches/{id}", anyRole, "", s.batch, answering(ok200, notFound, conflict)},
		{"GET /api/v1/paused", viewer | operator, "", s.paused, answering(ok200)},
		{"POST /api/v1/types/{type}/pause", operator, "pause", s.pause, answering(ok200, withBody, badField)},
		{"POST /api/v1/types/{type}/resume", operator, "resume", s.resume, answering(ok200, withBody, badField, notFound)},
		{"GET /api/v1/bulk", viewer | operator, "", s.bulks, answering(ok200, conflict)},
		{"POST /api/v1/bulk", operator, "bulk", s.startBulk, answering(answers{202: nil}, withBody, badField, conflict)},
		{"GET /api/v1/bulk/{id}", viewer | operator, "", s.bulk, answering(ok200, notFound, conflict)},
		{"GET /api/v1/dead-letters", viewer | operator, "", s.deadLetters, answering(ok200, badField)},
		{"POST /api/v1/dead-letters/{id}/requeue", operator, "deadletter requeue", s.requeue, answering(ok200, withBody, notFound, conflict, answers{409: {"unique-key-held"}})},
		{"POST /api/v1/dead-letters/requeue-all", operator, "deadletter requeue-all", s.allDeadLetters(func(ctx context.Context) (DeadLettersDone, error) {
			n, err := s.c.DeadLetters().RequeueAll(ctx)
			return DeadLettersDone{Requeued: n}, err
		}), answering(ok200, withBody)},
		{"POST /api/v1/dead-letters/purge", operator, "deadletter purge", s.allDeadLetters(func(ctx context.Context) (DeadLettersDone, error) {
			n, err := s.c.DeadLetters().Purge(ctx)
			return DeadLettersDone{Purged: n}, err
		}), answering(ok200, withBody)},
	}
	for i := range rts {
		rts[i].answers = answering(everyRoute, rts[i].answers)
		if strings.Contains(rts[i].pattern, "{") {
			rts[i].answers = answering(rts[i].answers, badField) // pathValues
		}
	}
	return rts
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
		if err := pathValues(r); err != nil {
			s.count(who.who, "refused", rt.pattern)
			writeProblem(w, r, err)
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

// pathValues refuses a path's {id} that no task, run, batch, bulk
// operation or dead letter can have (not a table key, of at most
// storage.MaxKeyLen bytes) and a {type} that is not a task type, naming
// it: before, storage's refusal came back as a 400 naming no field.
func pathValues(r *http.Request) *Problem {
	if strings.Contains(r.Pattern, "{id}") {
		if err := storage.ValidateKeyPart("id", r.PathValue("id")); err != nil {
			return fieldProblem("id", fmt.Sprintf("a task, run, batch or operation id: at most %d bytes of UTF-8 without / \\ # ? or control characters", storage.MaxKeyLen), err.Error())
		}
	}
	if strings.Contains(r.Pattern, "{type}") {
		if err := schedule.ValidateType(r.PathValue("type")); err != nil {
			return fieldProblem("type", "a task type", err.Error())
		}
	}
	return nil
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
	e := leasecron.AuditEntry{Who: who.who, Via: "api", From: clientip.Of(r, s.o.TrustedProxies, s.o.ProxyHops), Action: action, Target: auditTarget(r), OK: err == nil}
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

// queryFilters checks a listing's filters that r gives, each named as
// the parameter at fault (a type or batch storage would refuse, such as
// one of 20,000 characters, was answered 500).
func queryFilters(r *http.Request, names ...string) error {
	q := r.URL.Query()
	for _, name := range names {
		v := q.Get(name)
		if v == "" {
			continue
		}
		var err error
		accepted := "a task id" // the error says the rule
		switch name {
		case "type":
			err, accepted = schedule.ValidateType(v), "a task type"
		case "state":
			_, err = leasecrontype.ParseRunState(v)
			accepted = "a run state"
		default: // series, batch
			err = schedule.ValidateID(v)
		}
		if err != nil {
			return fieldProblem(name, accepted, fmt.Sprintf("%s: %v", name, err))
		}
	}
	return nil
}

// badContinue names the continue parameter in err when it is a refusal
// of the listing's input: queryFilters has checked the rest.
func badContinue(r *http.Request, err error) error {
	if r.URL.Query().Get("continue") != "" && (errors.Is(err, leasecron.ErrInvalidRunQuery) || errors.Is(err, schedule.ErrInvalid)) {
		return fieldProblem("continue", "the continue of the page before, with the same parameters", err.Error())
	}
	return err
}

// typeFilter checks a listing's type filter against a limited caller;
// how says how the listing takes one ("type=", "type:" in q).
func typeFilter(who caller, typ, how string) error {
	if !who.limited() {
		return nil
	}
	if typ == "" {
		return problem(http.StatusForbidden, "forbidden", fmt.Sprintf("%s may see only the types %s: give %s one of them", who.who, strings.Join(who.types, ", "), how))
	}
	return typeAllowed(who, typ)
}

func typeAllowed(who caller, typ string) error {
	if who.allows(typ) {
		return nil
	}
	return problem(http.StatusForbidden, "forbidden", fmt.Sprintf("%s may touch only the types %s, not %q", who.who, strings.Join(who.types, ", "), typ))
}

// mayEnable refuses a caller without the role operator a change that
// would enable the disabled series st (a reschedule or a replace writes
// the series afresh): enabling is an operator's (POST .../enable), and a
// scheduler re-enabled an operator's disable that way (a review's find).
func mayEnable(who caller, st leasecron.Status) error {
	if st.Pending == nil || st.Pending.Disabled.IsZero() || who.role&operator != 0 {
		return nil
	}
	return problem(http.StatusForbidden, "forbidden", fmt.Sprintf("task %s is a disabled series: a reschedule or replace would enable it, which needs the role operator", st.ID))
}

// mayTouch checks that who may act on the existing task id, and returns
// its status: nobody touches a task of leasecron's own types through the
// API (a bulk operation runs as one, and cancelled it would stay running
// with nothing to run it), and a limited caller only its types' tasks.
// Another caller's read goes by the id index alone (StatusIndexed: a few
// point reads; leasecron's own tasks are always indexed), so an id it
// does not find is left to the action, which scans for a row another
// program wrote without an index; a limited caller's read scans too
// (Status), as the type must be known.
func (s *server) mayTouch(ctx context.Context, who caller, id string) (leasecron.Status, error) {
	read := s.c.StatusIndexed
	if who.limited() {
		read = s.c.Status
	}
	st, err := read(ctx, id)
	if errors.Is(err, leasecron.ErrNotFound) && !who.limited() {
		return st, nil // the action looks further, or says not found
	}
	if err != nil {
		return st, err
	}
	typ := statusOf(st).Type()
	if strings.HasPrefix(typ, reservedPrefix) {
		return st, problem(http.StatusForbidden, "forbidden", fmt.Sprintf("task %s is of leasecron's own type %q (a bulk operation runs as it, and ends with it): it is not touched through the API", id, typ))
	}
	return st, typeAllowed(who, typ)
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
	start := s.clk.Now()
	var spec leasecron.TaskSpec
	if err := s.readBody(r, &spec, false); err != nil {
		return 0, nil, err
	}
	it, u, err := s.itemOf(who, spec)
	if err != nil {
		return 0, nil, err
	}
	if spec.ID != "" {
		// A retried POST: the same id and body answer as the first did,
		// 200 with the task stored. Looked up before writing: Schedule
		// takes a row identical to the one it writes for its own (its
		// write's answer lost), and answers it as written, so that a
		// retry of a task whose due time the request fixes (at; a
		// series' first occurrence, on a whole second) answered 201 as
		// a first write (a review's find). The look-up goes by the id
		// index alone (Client.GetIndexed), which every task the API
		// writes has: one point read for a new id, two or three for a
		// pending one, however many tasks are pending — Client.Get's
		// miss would scan the schedule for a row written without an
		// index, a query per 1,000 pending tasks (docs/api.md).
		switch have, err := s.c.GetIndexed(ctx, spec.ID); {
		case err == nil:
			switch same, err := s.sameTaskRead(ctx, have, spec, it, u, ""); {
			case err != nil && !errors.Is(err, leasecron.ErrNotFound):
				return 0, nil, err // its payload unread; nothing written
			case same:
				return http.StatusOK, TaskResult{Task: taskOf(have)}, nil
			}
			// (A payload gone: the task has moved on since; written
			// again below, as any task no longer pending.)
		case !errors.Is(err, leasecron.ErrNotFound):
			return 0, nil, err // nothing written
		}
	}
	if it.ID == "" && u == nil {
		// Named here, so that a write whose answer is lost can say which
		// task it may have scheduled. Not a unique task's: its id must
		// fall in its key's shard, which the client draws it for (a
		// review's find: with shards, every unique POST without an id was
		// refused).
		it.ID = schedule.NewID(s.clk.Now())
	}
	got, err := s.c.Schedule(withTrace(r), it, &leasecron.ScheduleOptions{Unique: u})
	if err == nil {
		return http.StatusCreated, TaskResult{Task: taskOf(got)}, nil
	}
	// Written meanwhile by another call with the same id and body (a
	// retry racing the first): answered as the first.
	if again, ok := s.sameAsScheduled(ctx, err, spec, it, u, ""); ok {
		return http.StatusOK, TaskResult{Task: again}, nil
	}
	if mayHaveWritten(err) {
		return s.settle(ctx, unanswered{fault: err, spec: spec, it: it, u: u, start: start})
	}
	return 0, nil, err
}

// mayHaveWritten reports whether err, a failed Schedule, leaves open
// whether the task was written: storage did not answer, or not as
// expected (a timeout, a lost connection, a refusal after a try that may
// have committed). Its answer would be a 5xx: 503, which clients send
// again, or 500 internal, which leaves the caller guessing. Not a refusal (4xx), a change made in part (incomplete: its own
// answer), a shard-count change (nothing was written) or a request the
// caller cancelled.
func mayHaveWritten(err error) bool {
	p := problemOf(err)
	return p.Status >= http.StatusInternalServerError && p.Type != ProblemPrefix+"incomplete" &&
		!errors.Is(err, leasecron.ErrShardCountChanged) && !errors.Is(err, context.Canceled)
}

// unanswered is a write of one task — a POST /tasks, or with replace a PUT
// /tasks/{id} — that met fault, after which the task may or may not have
// been written (mayHaveWritten).
type unanswered struct {
	fault error
	spec  leasecron.TaskSpec
	// it is the task as the request made it, with the id the server drew
	// for a POST without one (none for a unique task's: its schedule draws
	// it); u its unique key.
	it leasecron.Item
	u  *leasecron.Unique
	// start is when the request began, before its due time was taken
	// from the clock.
	start time.Time
	// replace: a PUT, whose id may hold the task it replaces.
	replace bool
}

// settle answers a write whose outcome a fault left open (unanswered): a
// 503 would be sent again by the clients, and a task due now that was
// written may have run by then — sent again, it would be scheduled a
// second time (a review's find, for a POST with an id, then for a PUT;
// without an id, the second POST is a second task). A look-up of its id
// (Client.Status: the schedule, then the run records) decides:
//
//   - pending, the task the request describes: written. 201 when the
//     server drew the id (no other request knows it), else 200 as for a
//     retried POST. A PUT's must have the request's due time too and not
//     be disabled: the task it replaces may still be there, and is taken
//     for the replacement only when it is the very task asked for (in
//     place either way). A POST's task moved on to a later due time
//     since (a series' next occurrence, a task released by its parents)
//     is found too: the look-up before writing found no task under the
//     id, so nothing else wrote it.
//   - pending, another task: a POST's is 409 (the id holds a different
//     task); a PUT's is the task it replaces, still in place — not
//     written, and the fault's own answer (503) replaces it when sent
//     again — unless the PUT's is a series that may have moved on to
//     a later occurrence (unsettled).
//   - gone, with a run record of its very due time: written, and moved on
//     (sent, run) already: answered as found, with the task as the request
//     described it, when the record can only be this request's (a drawn
//     id, or a due time the request took from the server's clock).
//   - gone, with a record of another due time only: the id's earlier
//     scheduling, so this one was not written (the mover records a run
//     before it retires the row) — when that run had ended before the
//     request began. A record written since may be this task's, moved
//     at another due time (released by its parents, rescheduled), and a
//     record of a run still under way keeps the new task's from being
//     written (it is moved unrecorded): unsettled.
//   - neither, where a task that was written would have left one of them
//     (run records on; without them, a one-off task due more than a
//     minute later, or a series: the mover leaves its row): surely not
//     written, and the fault's own answer (503) is safe to send again.
//   - storage refusing the look-up as busy, as it refused the write: a
//     throttled account, most likely nothing done, and the fault's own
//     503, which clients retry after its Retry-After. (A gap: a try
//     before the refusals may have committed, its answer lost; the
//     error does not tell. Answering outcome-unknown instead turned
//     every request to a throttled account into a 500 that is not
//     retried: TestThrottledStorageAnswers503.)
//   - otherwise unsettled: 500 outcome-unknown naming the id, which
//     clients do not send again (GET /api/v1/tasks/{id} tells).
//
// A unique task without an id has none to look up: the schedule draws it
// in its key's shard, and the Client reads no task by its key. That is
// 500 outcome-unknown without an id, naming the key.
func (s *server) settle(ctx context.Context, w unanswered) (int, any, error) {
	typ := cmp.Or(w.it.Type, schedule.DefaultType)
	if w.it.ID == "" {
		p := problem(http.StatusInternalServerError, "outcome-unknown", fmt.Sprintf(
			"storage did not answer whether the %s task holding unique key %q was written (%v), and the server cannot look it up: the schedule draws its id in its key's shard. "+
				"Sent again, the request is refused 409 unique-key-held naming the task (holder) while a task holds the key, and schedules one when none does (the first may have run and let the key go); "+
				"give an id to have the server settle such a fault", typ, w.u.Key, w.fault))
		return 0, nil, p
	}
	drawn := w.spec.ID == ""
	// The task as the request described it, as the schedule stores it.
	asked := w.it
	asked.Type, asked.Due, asked.After = typ, w.it.Due.UTC().Truncate(100*time.Nanosecond), schedule.ParentIDs(w.it.After)
	if w.u != nil {
		asked.UniqueKey = w.u.Key
	}
	st, gerr := s.c.Status(ctx, w.it.ID) // (the pending row even when its run record could not be read)
	if st.Pending != nil {
		return s.settlePending(ctx, w, *st.Pending, asked)
	}
	now := s.clk.Now()
	recorded := gerr == nil && st.Run != nil && !st.Run.Due.IsZero()
	switch {
	case recorded && !st.Run.OfDue(asked.Due):
		if st.Run.State.Finished() && st.Run.Updated.Before(w.start.Add(-schedule.ClockSlack)) {
			return 0, nil, w.fault // the id's earlier scheduling, ended before: this one not written
		}
	case recorded && st.Run.Type == typ && (drawn || w.spec.At == "" && w.it.Recurrence == ""):
		status := http.StatusOK
		if drawn {
			status = http.StatusCreated
		}
		return status, TaskResult{Task: taskOf(asked)}, nil
	case errors.Is(gerr, leasecron.ErrNotFound) && (s.c.RunRecords() || !schedule.MayHaveRun(asked, now)):
		return 0, nil, w.fault // surely not written
	case gerr != nil && storage.Unprocessed(w.fault) && storage.Unprocessed(gerr):
		return 0, nil, w.fault // throttled: retried after Retry-After
	}
	return 0, nil, outcomeUnknown(w)
}

// settlePending is settle's answer when the look-up found pending, a task
// under the id of w.
func (s *server) settlePending(ctx context.Context, w unanswered, pending leasecron.Item, asked leasecron.Item) (int, any, error) {
	if w.spec.ID == "" {
		return http.StatusCreated, TaskResult{Task: taskOf(pending)}, nil
	}
	batch := ""
	if w.replace {
		// A replacement takes the batch of the member it replaces
		// (Client.Schedule with Replace).
		batch = pending.Batch
	}
	// Compared but for its due time (one read of a payload kept in a
	// blob), then by it: the same but for a later due time is the task
	// moved on since (a series' next occurrence, a release by its
	// parents, a reschedule).
	anyDue := w.spec
	anyDue.At = ""
	alike, err := s.sameTaskRead(ctx, pending, anyDue, w.it, w.u, batch)
	if err != nil {
		return 0, nil, outcomeUnknown(w) // its payload unread
	}
	same := alike && (w.spec.At == "" || pending.Due.Equal(w.it.Due))
	later := alike && !same && pending.Due.After(asked.Due)
	switch {
	case !w.replace && (same || later):
		return http.StatusOK, TaskResult{Task: taskOf(pending)}, nil
	case !w.replace:
		return 0, nil, problem(http.StatusConflict, "conflict", fmt.Sprintf(
			"task %s: storage did not answer the write (%v), and the id holds a different task now: GET /api/v1/tasks/%s shows it", w.it.ID, w.fault, w.it.ID))
	case same && pending.Due.Equal(asked.Due) && pending.Disabled.IsZero():
		return http.StatusOK, TaskResult{Task: taskOf(pending)}, nil
	case later && w.it.Recurrence != "":
		// This PUT's series, whose occurrence ran, or the series it
		// replaces: a resend would run that occurrence again.
		return 0, nil, outcomeUnknown(w)
	}
	return 0, nil, w.fault // the task it replaces, still in place: not written
}

// outcomeUnknown is the answer of a write settle could not settle.
func outcomeUnknown(w unanswered) *Problem {
	again := "it would schedule a second task, or this one again if it ran meanwhile"
	switch {
	case w.replace:
		again = "it would replace the task again, and run it again if it ran meanwhile"
	case w.spec.ID != "":
		again = "it would schedule the task again if it ran meanwhile"
	}
	p := problem(http.StatusInternalServerError, "outcome-unknown", fmt.Sprintf(
		"storage did not answer whether task %s was written (%v), and a look-up could not tell: GET /api/v1/tasks/%s tells; do not send the request again before it does (sent again, %s)", w.it.ID, w.fault, w.it.ID, again))
	p.ID = w.it.ID
	return p
}

// itemOf checks spec as the caller's: its id, type and every field
// (TaskSpec.Item names the field at fault), what only this server knows
// (leasecron's own types, run records off) and the caller's types.
func (s *server) itemOf(who caller, spec leasecron.TaskSpec) (leasecron.Item, *leasecron.Unique, error) {
	it, u, err := spec.Item(s.clk.Now())
	if err != nil {
		return it, u, err
	}
	if strings.HasPrefix(it.Type, reservedPrefix) {
		return it, u, fieldProblem("type", "a type not starting with "+reservedPrefix, fmt.Sprintf("type %q is leasecron's own (its bulk operations run as tasks of it)", it.Type))
	}
	if len(schedule.ParentIDs(it.After)) > 0 && !s.c.RunRecords() {
		return it, u, fieldProblem("after", "no after: run records are off (worker.runs: false)", "a task that waits for others needs run records, and they are off")
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
// describes in a request of batch; not when its payload could not be read
// (sameTaskRead tells that apart).
func (s *server) sameTask(ctx context.Context, have leasecron.Item, spec leasecron.TaskSpec, it leasecron.Item, u *leasecron.Unique, batch string) bool {
	same, err := s.sameTaskRead(ctx, have, spec, it, u, batch)
	return err == nil && same
}

// sameTaskRead is sameTask, with the error of a payload kept in a blob
// that could not be read: a task that may be the one described, which a
// caller that would answer "another task" on a mismatch must not take for
// one (a review's find: a written task whose payload storage did not
// serve was answered 409 conflict).
func (s *server) sameTaskRead(ctx context.Context, have leasecron.Item, spec leasecron.TaskSpec, it leasecron.Item, u *leasecron.Unique, batch string) (bool, error) {
	key := ""
	if u != nil {
		key = u.Key
	}
	payload := have.Payload
	if have.PayloadBlob != "" {
		b, err := s.c.Payload(ctx, have.PayloadBlob)
		if err != nil {
			return false, fmt.Errorf("read the payload of task %s: %w", have.ID, err)
		}
		payload = string(b)
	}
	// Compared as the schedule stores them: a missing type is "default",
	// and After is trimmed and without repeats (a review's find: an
	// identical retry of such a request answered 409).
	return have.Type == cmp.Or(it.Type, schedule.DefaultType) && payload == it.Payload && have.Recurrence == it.Recurrence &&
		have.TZ == it.TZ && have.MaxAttempts == it.MaxAttempts && have.Queue == it.Queue && have.Priority == it.Priority &&
		have.FairKey == it.FairKey && slices.Equal(have.After, schedule.ParentIDs(it.After)) && have.AfterAny == it.AfterAny && have.UniqueKey == key &&
		have.Batch == batch && (spec.At == "" || have.Due.Equal(it.Due)), nil
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
	if req.Batch != "" {
		if err := schedule.ValidateID(req.Batch); err != nil {
			return 0, nil, fieldProblem("batch", "a batch id, as a task id: 1 to 200 of A-Z a-z 0-9 . _ : -", "batch: "+err.Error())
		}
	}
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
	if err := queryFilters(r, "type"); err != nil {
		return 0, nil, err
	}
	if err := typeFilter(who, q.Get("type"), "type="); err != nil {
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
		return 0, nil, badContinue(r, err)
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
	start := s.clk.Now()
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
	if u != nil {
		return 0, nil, fieldProblem("unique_key", "no unique_key: a unique task cannot replace another", fmt.Sprintf("unique_key %q: a unique task cannot replace another (POST it, or leave out unique_key)", u.Key))
	}
	st, err := s.mayTouch(ctx, who, id)
	if err != nil && !errors.Is(err, leasecron.ErrNotFound) {
		return 0, nil, err
	}
	if err := mayEnable(who, st); err != nil {
		return 0, nil, err
	}
	got, err := s.c.Schedule(withTrace(r), it, &leasecron.ScheduleOptions{Replace: true, Unique: u})
	if err != nil && mayHaveWritten(err) {
		// Not the fault's 503: sent again by the clients, a replacement
		// due now that was written and has run meanwhile would be
		// scheduled, and run, again (a known gap, now settled as a POST
		// is).
		return s.settle(ctx, unanswered{fault: err, spec: spec, it: it, u: u, start: start, replace: true})
	}
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
	if _, err := s.mayTouch(ctx, who, id); err != nil {
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
	st, err := s.mayTouch(ctx, who, id)
	if err != nil {
		return 0, nil, err
	}
	if err := mayEnable(who, st); err != nil {
		return 0, nil, err
	}
	got, err := s.c.Reschedule(ctx, id, due.Due)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, TaskResult{Task: taskOf(got)}, nil
}

// itemAction is an operator's action on one task that answers the task;
// accepted says which ids it takes, for the 400 of a task it does not
// apply to (a disable of a one-off task named no field).
func (s *server) itemAction(call func(context.Context, string) (leasecron.Item, error), accepted string) handlerFunc {
	return func(ctx context.Context, r *http.Request, who caller) (int, any, error) {
		id := r.PathValue("id")
		if err := s.readBody(r, &struct{}{}, true); err != nil {
			return 0, nil, err
		}
		if _, err := s.mayTouch(ctx, who, id); err != nil {
			return 0, nil, err
		}
		got, err := call(ctx, id)
		if errors.Is(err, leasecron.ErrInvalidTask) {
			return 0, nil, fieldProblem("id", accepted, err.Error())
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, TaskResult{Task: taskOf(got)}, nil
	}
}

func (s *server) runs(ctx context.Context, r *http.Request, who caller) (int, any, error) {
	q := r.URL.Query()
	if err := queryFilters(r, "state", "type", "series", "batch"); err != nil {
		return 0, nil, err
	}
	if err := typeFilter(who, q.Get("type"), "type="); err != nil {
		return 0, nil, err
	}
	limit, err := queryLimit(r, 50, 1000)
	if err != nil {
		return 0, nil, err
	}
	var state leasecron.RunState
	if v := q.Get("state"); v != "" {
		state, _ = leasecrontype.ParseRunState(v) // checked by queryFilters
	}
	p, err := s.c.Runs(ctx, leasecron.RunQuery{State: state, Type: q.Get("type"), Series: q.Get("series"), Batch: q.Get("batch"), Limit: limit, Continue: q.Get("continue")})
	if err != nil {
		return 0, nil, badContinue(r, err)
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
	if !exactID && !sq.IDPrefix {
		// (An id or id prefix names no type: its answers are filtered.)
		if err := typeFilter(who, sq.Run.Type, "a type:TYPE token in q"); err != nil {
			return 0, nil, err
		}
	}
	res, err := s.c.Search(ctx, sq)
	if err != nil {
		return 0, nil, badContinue(r, err)
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
		if _, err := s.mayTouch(ctx, who, ms[0].ID); err != nil {
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
		if !t.After(s.clk.Now()) {
			return 0, nil, fieldProblem("until", "a time after now (or no until: paused until resumed)", fmt.Sprintf("until %s has passed", req.Until))
		}
		until = t
	case req.For != "":
		d, err := time.ParseDuration(req.For)
		if err != nil || d <= 0 {
			return 0, nil, fieldProblem("for", "a positive Go duration such as 30m", fmt.Sprintf("for %q: want a positive Go duration such as 30m", req.For))
		}
		until = s.clk.Now().Add(d)
	}
	if err := s.c.PauseBy(ctx, typ, until, who.who); err != nil {
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
// and the count of matching items the caller confirmed (Expect). ID, when
// given, is the operation's id ("bulk-…", leasecron.ValidateBulkID), which
// makes the request safe to send again: a resend finds the operation and
// answers as the first did.
type BulkRequest struct {
	ID       string `json:"id,omitempty"`
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
	if err := typeFilter(who, req.Type, "a type field"); err != nil {
		return 0, nil, err
	}
	op, err := leasecron.ParseBulkOpInQueue(req.Kind, req.Type, req.Reason, req.IDPrefix, req.Queue, req.Since, req.Until, s.clk.Now())
	if err != nil {
		return 0, nil, err // a SpecError: 400 naming the field
	}
	if req.ID != "" {
		if err := leasecron.ValidateBulkID(req.ID); err != nil {
			return 0, nil, err
		}
		// A resend finds its operation before counting: the operation
		// may have acted on what it counted.
		b, err := s.c.Bulk(ctx, req.ID)
		if err == nil {
			return sameBulk(b, op, req, who)
		}
		if !errors.Is(err, leasecron.ErrNotFound) {
			return 0, nil, err
		}
	}
	n, err := s.c.CountBulk(ctx, op)
	if err != nil {
		return 0, nil, err
	}
	if n != req.Expect {
		return 0, nil, problem(http.StatusConflict, "conflict", fmt.Sprintf("%d items match %s now, not the %d of expect: confirm the count and send it as expect", n, op, req.Expect))
	}
	var b leasecron.Bulk
	if req.ID == "" {
		b, err = s.c.StartBulk(ctx, op, n, who.who)
	} else {
		b, err = s.c.StartBulkAs(ctx, req.ID, op, n, who.who)
		if errors.Is(err, leasecron.ErrBulkExists) {
			// Another send of the same request started it meanwhile.
			if b, err = s.c.Bulk(ctx, req.ID); err == nil {
				return sameBulk(b, op, req, who)
			}
		}
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, b, nil
}

// sameBulk answers a start whose id names an operation that exists: as
// the first start did (202 and the operation) when it is the same
// operation from the same caller — its kind and filter, where a relative
// since or until (a duration before now) is compared only for being
// given, as its time moves between sends — and 409 otherwise, or when
// that operation's own start failed before it ran (a review's find: a
// 202 with state failed read as started).
func sameBulk(b leasecron.Bulk, op leasecron.BulkOp, req BulkRequest, who caller) (int, any, error) {
	f, g := b.Op.Filter, op.Filter
	sameTime := func(text string, a, b time.Time) bool {
		if _, err := time.ParseDuration(strings.TrimSpace(text)); err == nil {
			return !a.IsZero() && !b.IsZero()
		}
		return a.Equal(b)
	}
	if b.Op.Kind != op.Kind || f.Type != g.Type || f.Reason != g.Reason || f.IDPrefix != g.IDPrefix || f.Queue != g.Queue ||
		!sameTime(req.Since, f.Since, g.Since) || !sameTime(req.Until, f.Until, g.Until) || b.By != who.who {
		if !who.allows(f.Type) {
			// (What it is, only to whom GET /bulk/{id} would show it.)
			return 0, nil, problem(http.StatusConflict, "conflict", fmt.Sprintf("bulk operation %s exists and is another", b.ID))
		}
		return 0, nil, problem(http.StatusConflict, "conflict", fmt.Sprintf("bulk operation %s exists and is another: %s, started by %s", b.ID, b.Op, b.By))
	}
	if b.State == leasecron.BulkFailed && b.Attempts == 0 {
		return 0, nil, problem(http.StatusConflict, "conflict", fmt.Sprintf("bulk operation %s did not start (%s): start it again with another id", b.ID, b.LastError))
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
	peek := limit
	if who.limited() {
		peek = healthPeek // its total is counted among the oldest, whatever the limit
	}
	p, err := s.c.PeekDeadLetters(ctx, peek)
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
		// The others' count is not theirs to see: theirs among the
		// healthPeek oldest, as health counts them.
		out.Total = len(out.DeadLetters)
		out.DeadLetters = out.DeadLetters[:min(limit, len(out.DeadLetters))]
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
