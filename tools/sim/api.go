package sim

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/api"
	"github.com/leasecron/leasecron/schedule"
)

// viaAPI reports whether client c schedules through the HTTP API
// (Config.API: client c1 does, c0 keeps the Go client, so both paths
// meet in one fleet). The API is served by the client's own
// leasecron.Client, so its storage requests meet the client's faults.
func viaAPI(c *proc) bool { return c.w.plan.API && c.name == "c1" }

// apiTries is how many times a program sends a request the API answered
// 503 or 429, waiting Retry-After between (as the Python and TypeScript
// clients do).
const apiTries = 6

// apiPrincipal signs a request in as an operator through the platform's
// headers (api.Options.PlatformAuth): no token to keep in storage. Not a
// scheduler: the workload replaces series that were disabled, which
// enables them, and the API lets only an operator enable a series.
var apiPrincipal = base64.StdEncoding.EncodeToString([]byte(`{"claims":[{"typ":"roles","val":"` + api.PlatformOperatorRole + `"}]}`))

// newAPI serves the HTTP API over p's client.
func (w *World) newAPI(p *proc) http.Handler {
	h, err := api.New(p.client, api.Options{PlatformAuth: true, Clock: p.clock, Logger: p.log})
	if err != nil {
		w.t.Fatalf("api: %v", err)
	}
	return h
}

// apiSpec is the request body of it, scheduled with o.
func apiSpec(it leasecron.Item, o *leasecron.ScheduleOptions) (leasecron.TaskSpec, error) {
	payload, err := json.Marshal(it.Payload)
	if err != nil {
		return leasecron.TaskSpec{}, err
	}
	s := leasecron.TaskSpec{ID: it.ID, Type: it.Type, Payload: payload, At: it.Due.UTC().Format(time.RFC3339Nano), MaxAttempts: it.MaxAttempts,
		Queue: it.Queue, FairKey: it.FairKey, AfterAny: it.AfterAny}
	if it.Priority != 0 {
		s.Priority = json.RawMessage(strconv.Itoa(it.Priority))
	}
	if every, ok := strings.CutPrefix(it.Recurrence, "@every "); ok {
		s.Every = every
	} else if it.Recurrence != "" {
		s.Cron, s.TZ = it.Recurrence, it.TZ
	}
	if len(it.After) > 0 {
		if s.After, err = json.Marshal(it.After); err != nil {
			return leasecron.TaskSpec{}, err
		}
	}
	if u := o.Unique; u != nil {
		s.UniqueKey = u.Key
		if u.For > 0 {
			s.UniqueFor = u.For.String()
		}
		states := make([]string, len(u.States))
		for i, st := range u.States {
			states[i] = string(st)
		}
		s.UniqueStates = strings.Join(states, ",")
	}
	return s, nil
}

// scheduleAPI schedules it as a program would through the HTTP API: POST
// /tasks, or PUT /tasks/{id} for a replace, sent again while it answers
// 503 (after Retry-After), never after a 500. The answer is returned as
// the Go client's would be, for the checker: the task, or an error
// wrapping what the Go client's refusal would (already scheduled, a
// unique key held, invalid), or an error of unknown outcome.
func (w *World) scheduleAPI(ctx context.Context, c *proc, it leasecron.Item, o *leasecron.ScheduleOptions) (leasecron.Item, error) {
	spec, err := apiSpec(it, o)
	if err != nil {
		return leasecron.Item{}, err
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return leasecron.Item{}, err
	}
	method, path := http.MethodPost, api.Prefix+"tasks"
	if o.Replace {
		method, path = http.MethodPut, api.Prefix+"tasks/"+url.PathEscape(it.ID)
	}
	for try := 1; ; try++ {
		req := httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-MS-CLIENT-PRINCIPAL-NAME", "sim")
		req.Header.Set("X-MS-CLIENT-PRINCIPAL", apiPrincipal)
		rec := httptest.NewRecorder()
		c.api.ServeHTTP(rec, req)
		w.logs.add(fmt.Sprintf("%s  api %s %s try %d: %d %s", w.elapsed().Truncate(time.Millisecond), method, path, try,
			rec.Code, strings.TrimSpace(rec.Body.String())))
		switch rec.Code {
		case http.StatusOK, http.StatusCreated:
			var res api.TaskResult
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				return leasecron.Item{}, fmt.Errorf("api: %d answer %q: %w", rec.Code, rec.Body.String(), err)
			}
			t := res.Task
			return leasecron.Item{ID: t.ID, Type: t.Type, Due: t.Due, Recurrence: t.Recurrence, TZ: t.TZ, Payload: t.Payload, MaxAttempts: t.MaxAttempts,
				Queue: t.Queue, Priority: t.Priority, FairKey: t.FairKey, UniqueKey: t.UniqueKey, After: t.After, AfterAny: t.AfterAny}, nil
		case http.StatusServiceUnavailable, http.StatusTooManyRequests:
			wait, _ := strconv.Atoi(rec.Header().Get("Retry-After"))
			if try == apiTries || ctx.Err() != nil {
				return leasecron.Item{}, fmt.Errorf("api: %d after %d tries: %s", rec.Code, try, rec.Body.String())
			}
			w.stats.fault("an API request answered 503 and sent again")
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(max(wait, 1)) * time.Second):
			}
			continue
		}
		var p api.Problem
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		slug := strings.TrimPrefix(p.Type, api.ProblemPrefix)
		switch {
		case rec.Code == http.StatusConflict && slug == "unique-key-held":
			return leasecron.Item{}, fmt.Errorf("%w: api: %s", leasecron.ErrDuplicate, p.Detail)
		case rec.Code == http.StatusConflict:
			return leasecron.Item{}, fmt.Errorf("%w: api: %s", schedule.ErrAlreadyScheduled, p.Detail)
		case rec.Code == http.StatusBadRequest || rec.Code == http.StatusUnprocessableEntity:
			return leasecron.Item{}, fmt.Errorf("%w: api: %s", leasecron.ErrInvalidTask, p.Detail)
		case rec.Code < 500:
			// Any other refusal (signed in, allowed, routed, a body the
			// API takes: 401, 403, 404, 405, 413, 415) is the API's
			// defect, not an outcome the checker may take either way.
			w.chk.mu.Lock()
			w.chk.violate(InvAccepted, "the HTTP API refused %s %s (%s): %d %s", method, path, it.ID, rec.Code, rec.Body.String())
			w.chk.mu.Unlock()
			return leasecron.Item{}, fmt.Errorf("%w: api: %d %s", leasecron.ErrInvalidTask, rec.Code, p.Detail)
		}
		if slug == "outcome-unknown" {
			w.stats.fault("an API request answered outcome-unknown")
		}
		// Whatever else: the outcome is not known (the id, when the
		// answer names it, is the task's).
		return leasecron.Item{ID: p.ID}, errors.New("api: " + strconv.Itoa(rec.Code) + " " + slug + ": " + p.Detail)
	}
}
