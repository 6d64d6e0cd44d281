package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/clientip"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/schedule"
)

// maxForm bounds a POSTed form (a schedule form carries a payload).
const maxForm = 2 << 20

// action does one state change and returns the message to show.
type action func(ctx context.Context, r *http.Request) (string, error)

func (s *Server) actionRoutes(m *http.ServeMux) {
	m.Handle("POST /tasks", s.action("schedule", s.doSchedule))
	m.Handle("POST /tasks/{id}/cancel", s.action("cancel", onID("id", s.src.Cancel)))
	m.Handle("POST /tasks/{id}/run-now", s.action("run-now", onID("id", saying(s.src.RunNow, func(it schedule.Item) string {
		msg := fmt.Sprintf("%s is due now (%s)", it.ID, it.Due.UTC().Format("15:04:05Z"))
		if it.Waiting {
			msg += ", and still waits for the tasks it runs after to end"
		}
		return msg
	}))))
	m.Handle("POST /tasks/{id}/disable", s.action("disable", onID("id", saying(s.src.Disable, func(it schedule.Item) string {
		return fmt.Sprintf("%s disabled: no occurrence runs until it is enabled", it.ID)
	}))))
	m.Handle("POST /tasks/{id}/enable", s.action("enable", onID("id", saying(s.src.Enable, func(it schedule.Item) string {
		return fmt.Sprintf("%s enabled: next occurrence %s", it.ID, it.Due.UTC().Format("2006-01-02 15:04:05Z"))
	}))))
	m.Handle("POST /bulk", s.action("bulk", func(ctx context.Context, r *http.Request) (string, error) {
		op, err := s.bulkOpOf(r.PostFormValue)
		if err != nil {
			return "", err
		}
		expect, err := strconv.Atoi(r.PostFormValue("expect"))
		if err != nil || expect < 0 {
			return "", badf("expect %q: want the number of matching items the page showed", r.PostFormValue("expect"))
		}
		b, err := s.src.StartBulk(ctx, op, expect, identityOf(r).who)
		if err != nil {
			return "", err
		}
		// Go on to the operation's page.
		r.PostForm.Set("back", "/bulk/"+url.PathEscape(b.ID))
		return fmt.Sprintf("started %s: %s on %d matching", b.ID, op, expect), nil
	}))
	m.Handle("POST /fleet/{id}/drain", s.action("drain", func(ctx context.Context, r *http.Request) (string, error) {
		return onID("id", func(ctx context.Context, id string) (string, error) {
			uncovered, err := s.src.Drain(ctx, id, identityOf(r).who)
			msg := fmt.Sprintf("%s asked to drain: within its worker.drain_check it stops taking work, finishes what it runs and exits", id)
			for _, u := range uncovered {
				msg += "; warning: " + u
			}
			return msg, err
		})(ctx, r)
	}))
	m.Handle("POST /tasks/{id}/reschedule", s.action("reschedule", func(ctx context.Context, r *http.Request) (string, error) {
		at, in := strings.TrimSpace(r.PostFormValue("at")), strings.TrimSpace(r.PostFormValue("in"))
		if at == "" && in == "" {
			return "", badf("reschedule: give a new due time: \"in\" as a duration (90s, 10m) or \"at\" as RFC 3339")
		}
		due, err := schedule.ParseWhen(at, in, s.o.Clock.Now())
		if err != nil {
			return "", badRequest{err}
		}
		return onID("id", saying(func(ctx context.Context, id string) (schedule.Item, error) { return s.src.Reschedule(ctx, id, due) },
			func(it schedule.Item) string {
				return fmt.Sprintf("%s now due %s", it.ID, it.Due.UTC().Format("2006-01-02 15:04:05Z"))
			}))(ctx, r)
	}))
	m.Handle("POST /deadletters/{id}/requeue", s.action("requeue", onID("id", func(ctx context.Context, id string) (string, error) {
		return "requeued " + id, s.src.Requeue(ctx, id)
	})))
	m.Handle("POST /deadletters/requeue-all", s.action("requeue-all", func(ctx context.Context, r *http.Request) (string, error) {
		n, err := s.src.RequeueAll(ctx)
		return fmt.Sprintf("requeued %d dead letter(s)", n), err
	}))
	m.Handle("POST /deadletters/purge", s.action("purge", func(ctx context.Context, r *http.Request) (string, error) {
		n, err := s.src.Purge(ctx)
		return fmt.Sprintf("purged %d dead letter(s)", n), err
	}))
	m.Handle("POST /blackboard/{key}/run-now", s.action("blackboard run-now", onID("key", func(ctx context.Context, key string) (string, error) {
		return key + " will run at the next cycle", s.src.RunKeyNow(ctx, key)
	})))
	m.Handle("POST /blackboard/{key}/remove", s.action("blackboard remove", onID("key", func(ctx context.Context, key string) (string, error) {
		return "removed " + key, s.src.RemoveKey(ctx, key)
	})))
}

// onID is an action on the task, dead letter or key the path segment seg
// names (refused, naming it, when it cannot be an id).
func onID(seg string, do func(ctx context.Context, id string) (string, error)) action {
	return func(ctx context.Context, r *http.Request) (string, error) {
		id, err := pathID(r, seg)
		if err != nil {
			return "", err
		}
		return do(ctx, id)
	}
}

// saying turns a change that returns the task into one that says what
// became of it.
func saying(call func(ctx context.Context, id string) (schedule.Item, error), say func(schedule.Item) string) func(ctx context.Context, id string) (string, error) {
	return func(ctx context.Context, id string) (string, error) {
		it, err := call(ctx, id)
		if err != nil {
			return "", err
		}
		return say(it), nil
	}
}

// action wraps a state change: read-only mode, cross-origin protection
// and the CSRF token are checked first; then the cache is cleared, and the
// result goes back as JSON or as a flash message on the page the form was
// on.
func (s *Server) action(name string, do action) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if s.o.ReadOnly {
			s.refuse(w, r, http.StatusForbidden, "the dashboard is read-only (dashboard.read_only): actions are disabled")
			return
		}
		if err := cop.Check(r); err != nil {
			// Before the viewer's refusal, which is audited: another site
			// must not write entries in a viewer's name (a review's find).
			s.refuse(w, r, http.StatusForbidden, "cross-origin request refused")
			return
		}
		if !s.canAct(r) {
			s.audit(r, name, "", errViewer)
			s.refuse(w, r, http.StatusForbidden, errViewer.Error())
			return
		}
		if err := r.ParseForm(); err != nil {
			s.refuse(w, r, http.StatusBadRequest, "unreadable form: "+err.Error())
			return
		}
		if !s.csrf.check(r) {
			s.refuse(w, r, http.StatusForbidden, "missing or invalid CSRF token: reload the page and try again")
			return
		}
		msg, err := do(r.Context(), r)
		s.cache.clear()
		s.audit(r, name, msg, err)
		if err != nil {
			status, text := actionStatus(err)
			s.log.Info("dashboard action failed", "action", name, "err", err)
			s.finish(w, r, status, flash{Text: text})
			return
		}
		s.log.Info("dashboard action", "action", name, "result", msg)
		s.finish(w, r, http.StatusOK, flash{OK: true, Text: msg})
	})
}

// audit records an action taken (or refused by storage) in the audit log:
// who signed in, from which address, on what, and how it went. A failure
// to record is logged: the action's outcome stands.
func (s *Server) audit(r *http.Request, name, msg string, err error) {
	e := leasecron.AuditEntry{Who: identityOf(r).who, Via: "dashboard", From: clientip.Of(r, s.o.TrustedProxies, s.o.ProxyHops), Action: name, OK: err == nil, Result: msg}
	for _, p := range []string{"id", "key"} {
		if v := r.PathValue(p); v != "" {
			e.Target = v
		}
	}
	if e.Target == "" && name == "bulk" {
		// The operation as it reads (since, until and queue too), or the
		// fields as given when they do not make one.
		if op, err := s.bulkOpOf(r.PostFormValue); err == nil {
			e.Target = op.String()
		} else {
			e.Target = strings.TrimSpace(strings.Join([]string{r.PostFormValue("kind"), r.PostFormValue("type"), r.PostFormValue("reason"), r.PostFormValue("id_prefix"), r.PostFormValue("since"), r.PostFormValue("until")}, " "))
		}
	}
	if e.Target == "" && name == "schedule" {
		e.Target = strings.TrimSpace(r.PostFormValue("id") + " " + r.PostFormValue("type"))
	}
	if err != nil {
		_, e.Result = actionStatus(err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
	defer cancel()
	if aerr := s.src.Audit(ctx, e); aerr != nil && !errors.Is(aerr, leasecron.ErrNoRunRecords) {
		s.log.Warn("recording a dashboard action in the audit log failed", "action", name, "err", aerr)
	}
}

// errViewer refuses an action of a viewer.
var errViewer = errors.New("viewers cannot act: sign in as an operator (dashboard.auth, or the operator role)")

func actionStatus(err error) (int, string) {
	return statusOf(err), trunc.Head(firstLine(err.Error()), 500)
}

func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// refuse answers a request that was not carried out.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if wantsJSON(r) {
		writeJSON(w, status, map[string]any{"ok": false, "error": msg})
		return
	}
	http.Error(w, msg, status)
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, status int, f flash) {
	if wantsJSON(r) {
		if f.OK {
			writeJSON(w, status, map[string]any{"ok": true, "message": f.Text})
		} else {
			writeJSON(w, status, map[string]any{"ok": false, "error": f.Text})
		}
		return
	}
	s.csrf.setFlash(w, f)
	s.redirect(w, r, backTo(r))
}

// backTo is the local page a form names in its "back" field ("/" when it
// names none or anything that is not a path on this site).
func backTo(r *http.Request) string {
	b := r.PostFormValue("back")
	u, err := url.Parse(b)
	if err != nil || b == "" || !strings.HasPrefix(b, "/") || strings.HasPrefix(b, "//") || strings.Contains(b, "\\") || u.Host != "" || u.Scheme != "" {
		return "/"
	}
	return b
}

func (s *Server) doSchedule(ctx context.Context, r *http.Request) (string, error) {
	f := func(k string) string { return strings.TrimSpace(r.PostFormValue(k)) }
	spec := schedule.When{At: f("at"), In: f("in"), Every: f("every"), Cron: f("cron"), TZ: f("tz")}
	due, rule, err := spec.Resolve(s.o.Clock.Now())
	if err != nil {
		return "", badRequest{err}
	}
	it := schedule.Item{ID: f("id"), Type: f("type"), Payload: r.PostFormValue("payload"), Due: due, Recurrence: rule, TZ: spec.TZ}
	if ma := f("max_attempts"); ma != "" {
		n, err := strconv.Atoi(ma)
		if err != nil || n < 0 {
			return "", badf("max attempts %q: want a whole number (empty for the default)", ma)
		}
		it.MaxAttempts = n
	}
	out, err := s.src.Schedule(ctx, it, r.PostFormValue("replace") != "")
	if err != nil {
		return "", err
	}
	if out.Recurrence != "" {
		return fmt.Sprintf("scheduled series %s (%s), first due %s", out.ID, out.Recurrence, out.Due.UTC().Format("2006-01-02 15:04:05Z")), nil
	}
	return fmt.Sprintf("scheduled %s, due %s", out.ID, out.Due.UTC().Format("2006-01-02 15:04:05Z")), nil
}
