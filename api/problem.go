package api

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"net/http"
	"strconv"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/schedule"
)

// ProblemPrefix starts the type of every problem the API answers: the
// type is ProblemPrefix + a slug such as "invalid-field".
const ProblemPrefix = "urn:leasecron:problem:"

// Problem is an RFC 9457 problem details object, the body of every error
// answer (Content-Type application/problem+json).
type Problem struct {
	// Type is ProblemPrefix + a slug that callers branch on.
	Type string `json:"type"`
	// Title is the slug's short summary, the same for every occurrence.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// Field names the body field or query parameter at fault, and
	// Accepted what it accepts.
	Field    string `json:"field,omitempty"`
	Accepted string `json:"accepted,omitempty"`
	// Holder is the task holding the unique key (unique-key-held).
	Holder string `json:"holder,omitempty"`
	// ID is the task a write whose outcome is unknown may have scheduled
	// (outcome-unknown): GET /api/v1/tasks/{id} tells.
	ID string `json:"id,omitempty"`
	// Errors are the invalid tasks of a schedule-many request
	// (invalid-tasks).
	Errors []TaskError `json:"errors,omitempty"`
	// retryAfter, when set, is sent as Retry-After (seconds).
	retryAfter int
}

// TaskError is one refused task of a schedule-many request.
type TaskError struct {
	Index  int    `json:"index"`
	Field  string `json:"field,omitempty"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string { return p.Detail }

var titles = map[string]string{
	"invalid-field":          "Invalid field",
	"invalid-body":           "Invalid body",
	"unauthorized":           "Unauthorized",
	"forbidden":              "Forbidden",
	"not-found":              "Not found",
	"method-not-allowed":     "Method not allowed",
	"conflict":               "Conflict",
	"unique-key-held":        "Unique key held",
	"too-large":              "Too large",
	"unsupported-media-type": "Unsupported media type",
	"invalid-tasks":          "Invalid tasks",
	"unavailable":            "Service unavailable",
	"internal":               "Internal error",
	"incomplete":             "Done in part",
	"outcome-unknown":        "Outcome unknown",
}

// problem makes a problem of slug with status and detail.
func problem(status int, slug, detail string) *Problem {
	return &Problem{Type: ProblemPrefix + slug, Title: titles[slug], Status: status, Detail: detail}
}

// fieldProblem is a 400 invalid-field naming field and what it accepts.
func fieldProblem(field, accepted, detail string) *Problem {
	p := problem(http.StatusBadRequest, "invalid-field", detail)
	p.Field, p.Accepted = field, accepted
	return p
}

// problemOf maps an error of the Client to the problem the caller gets.
func problemOf(err error) *Problem {
	var p *Problem
	var spec *leasecron.SpecError
	var dup *leasecron.DuplicateError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &spec):
		return fieldProblem(spec.Field, spec.Accepted, spec.Error())
	case errors.As(err, &dup):
		p := problem(http.StatusConflict, "unique-key-held", err.Error())
		p.Holder = dup.ID
		return p
	case errors.Is(err, leasecron.ErrIncomplete):
		// Done in part (a series disabled or cancelled, an occurrence in
		// the queue not reached): not a 503, whose retry would find the
		// change made and answer otherwise; the message says what to do.
		return problem(http.StatusInternalServerError, "incomplete", err.Error())
	case errors.Is(err, leasecron.ErrServerBusy), errors.Is(err, context.DeadlineExceeded), errors.As(err, new(net.Error)):
		p := problem(http.StatusServiceUnavailable, "unavailable", "storage is busy, slow or unreachable: retry after the time in Retry-After ("+err.Error()+")")
		p.retryAfter = max(1, int(math.Ceil(storage.RetryAfter(err).Seconds())))
		return p
	case errors.Is(err, leasecron.ErrShardCountChanged):
		// Nothing was written, and a retry places the key by the count in
		// force: as busy storage, a retry after a moment succeeds.
		p := problem(http.StatusServiceUnavailable, "unavailable", err.Error()+": retry after the time in Retry-After")
		p.retryAfter = 1
		return p
	case errors.Is(err, context.Canceled):
		return problem(http.StatusServiceUnavailable, "unavailable", "the request was cancelled")
	case leasecron.IsConflict(err):
		return problem(http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, leasecron.ErrNotFound):
		return problem(http.StatusNotFound, "not-found", err.Error())
	case errors.Is(err, schedule.ErrPayloadTooLarge):
		return fieldProblem("payload", "a payload within payload.max_size", err.Error())
	case errors.Is(err, leasecron.ErrInvalidTask), errors.Is(err, leasecron.ErrInvalidRunQuery), errors.Is(err, schedule.ErrBadRecurrence), errors.Is(err, leasecron.ErrInvalidOptions):
		return problem(http.StatusBadRequest, "invalid-field", err.Error())
	}
	return problem(http.StatusInternalServerError, "internal", "the server could not answer: "+err.Error())
}

// writeProblem sends p.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if p.retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// writeJSON sends v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
