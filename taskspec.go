package leasecron

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// TaskSpec is a task as text: the JSON object of one line of `leasecron
// schedule --file` and the body of the HTTP API's POST /api/v1/tasks. Its
// fields are the flags of `schedule`; Item turns it into an Item.
type TaskSpec struct {
	ID   string `json:"id,omitempty"`
	Type string `json:"type,omitempty"`
	// Payload that is a JSON string is the payload text; any other JSON
	// value is taken as its compact JSON.
	Payload json.RawMessage `json:"payload,omitempty"`
	// At (RFC 3339) or In (a Go duration from now) is when it is due;
	// neither: now (a series: its first occurrence).
	At string `json:"at,omitempty"`
	In string `json:"in,omitempty"`
	// Every (a Go duration) or Cron (with TZ, an IANA zone) makes a series.
	Every       string `json:"every,omitempty"`
	Cron        string `json:"cron,omitempty"`
	TZ          string `json:"tz,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
	// Queue, Priority (a number 1–4 or a level's name) and FairKey are
	// schedule --queue, --priority and --fair-key.
	Queue    string          `json:"queue,omitempty"`
	Priority json.RawMessage `json:"priority,omitempty"`
	FairKey  string          `json:"fair_key,omitempty"`
	// UniqueKey, UniqueFor (a Go duration) and UniqueStates
	// (comma-separated) are schedule --unique-key, --unique-for and
	// --unique-states.
	UniqueKey    string `json:"unique_key,omitempty"`
	UniqueFor    string `json:"unique_for,omitempty"`
	UniqueStates string `json:"unique_states,omitempty"`
	// After (a list of ids, or one comma-separated string) and AfterAny
	// are schedule --after and --after-any.
	After    json.RawMessage `json:"after,omitempty"`
	AfterAny bool            `json:"after_any,omitempty"`
}

// SpecError is a TaskSpec field Item refused: which field, why, and what
// it accepts. It wraps schedule.ErrInvalid. Schedule and ScheduleMany
// return it too for what only they can check of a task, naming the
// TaskSpec field (its JSON name) of the Item field at fault: the parents
// of After (unknown, recurring, ended, in a cycle) and a unique window
// longer than the run records it counts on are kept. ParseBulkOp and
// BulkOp.Validate return it for a bulk operation's field (kind, type,
// reason, id_prefix, queue, since, until).
type SpecError struct {
	// Field is the JSON name of the field ("at", "priority", …; "" for
	// the object as a whole).
	Field string
	// Accepted says what the field accepts.
	Accepted string
	// Err is what was wrong.
	Err error
}

func (e *SpecError) Error() string {
	if e.Field == "" {
		return e.Err.Error()
	}
	return e.Field + ": " + e.Err.Error()
}

// Unwrap returns schedule.ErrInvalid and the cause.
func (e *SpecError) Unwrap() []error { return []error{schedule.ErrInvalid, e.Err} }

func specErr(field, accepted string, err error) error {
	return &SpecError{Field: field, Accepted: accepted, Err: err}
}

// What each field accepts, for SpecError.
const (
	acceptID       = "1 to 200 of A-Z a-z 0-9 . _ : -"
	acceptType     = "1 to 64 of a-z, 0-9, _ and -, starting with a letter or digit"
	acceptAt       = "an RFC 3339 time with a zone, e.g. 2026-01-02T15:04:05Z"
	acceptDuration = "a Go duration of 0 or more, e.g. 90s, 10m, 2h30m"
	acceptPriority = "1 (critical), 2 (high), 3 (default) or 4 (low), as a number or a name"
	acceptAfter    = "a list of at most %d task ids (A-Z a-z 0-9 . _ : -) other than the task's own, or one comma-separated string"
	acceptCron     = "a cron expression of 5 fields (or 6 with seconds), or a descriptor such as @daily"
	acceptEvery    = "a Go duration of at least %s, such as 1h or 90s"
	acceptTZ       = "an IANA time zone such as Europe/Paris, with cron only"
	acceptParents  = "ids of one-off tasks that are pending, running or have succeeded (or ended in any way, with after_any)"
	acceptAttempts = "a whole number from 1 to %d (0: the type's default)"
	acceptQueue    = "1 to %d lower-case letters and digits, starting with a letter; not p1, p2, …, k1, k2, … or poison"
	acceptFairKey  = "at most %d bytes of UTF-8 without control characters"
	acceptKey      = "1 to %d bytes, valid UTF-8 without / \\ # ? or control characters"
	acceptWindow   = "a Go duration from 0 to %s"
)

// ParseTaskSpec reads one JSON object as a TaskSpec, refusing unknown
// fields and trailing data.
func ParseTaskSpec(b []byte) (TaskSpec, error) {
	var s TaskSpec
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		const fields = "id, type, payload, at, in, every, cron, tz, max_attempts, queue, priority, fair_key, unique_key, unique_for, unique_states, after, after_any"
		return TaskSpec{}, specErr("", "a JSON object with "+fields, fmt.Errorf("not a JSON object with %s: %w", fields, err))
	}
	if dec.More() {
		return TaskSpec{}, specErr("", "one JSON object", errors.New("more than one JSON value"))
	}
	return s, nil
}

// Item returns the task s describes, due relative to now, and its unique
// options (nil without a unique key). Errors are *SpecError.
func (s TaskSpec) Item(now time.Time) (Item, *Unique, error) {
	payload := ""
	if len(s.Payload) > 0 && string(s.Payload) != "null" {
		var text string
		if err := json.Unmarshal(s.Payload, &text); err == nil {
			payload = text
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, s.Payload); err != nil {
				return Item{}, nil, specErr("payload", "any JSON value (a string is the payload text)", err)
			}
			payload = buf.String()
		}
	}
	due, rule, err := schedule.When{At: s.At, In: s.In, Every: s.Every, Cron: s.Cron, TZ: s.TZ}.Resolve(now)
	if err != nil {
		return Item{}, nil, s.whenError(now, err)
	}
	after, err := s.after()
	if err != nil {
		return Item{}, nil, err
	}
	if s.AfterAny && len(after) == 0 {
		return Item{}, nil, specErr("after_any", "true only with after", errors.New("after_any goes with after"))
	}
	prio, err := s.priority()
	if err != nil {
		return Item{}, nil, err
	}
	it := Item{ID: s.ID, Type: s.Type, Payload: payload, Due: due, Recurrence: rule, TZ: s.TZ, MaxAttempts: s.MaxAttempts, After: after, AfterAny: s.AfterAny,
		Queue: s.Queue, Priority: prio, FairKey: s.FairKey}
	u, err := s.unique()
	if err != nil {
		return Item{}, nil, err
	}
	if err := s.check(now, it, u); err != nil {
		return Item{}, nil, err
	}
	return it, u, nil
}

// unique reads UniqueKey, UniqueFor and UniqueStates: nil without a key.
func (s TaskSpec) unique() (*Unique, error) {
	if s.UniqueKey == "" {
		switch {
		case s.UniqueFor != "":
			return nil, specErr("unique_for", "a duration, with unique_key only", errors.New("unique_for and unique_states go with unique_key"))
		case s.UniqueStates != "":
			return nil, specErr("unique_states", "run states, with unique_key only", errors.New("unique_for and unique_states go with unique_key"))
		}
		return nil, nil
	}
	u := &Unique{Key: s.UniqueKey}
	if s.UniqueFor != "" {
		var err error
		if u.For, err = time.ParseDuration(s.UniqueFor); err != nil || u.For < 0 {
			return nil, specErr("unique_for", fmt.Sprintf(acceptWindow, schedule.MaxUniqueFor), fmt.Errorf("%q is not a duration of 0 or more", s.UniqueFor))
		}
	}
	var err error
	if u.States, err = schedule.ParseUniqueStates(s.UniqueStates); err != nil {
		return nil, specErr("unique_states", "a comma-separated list of run states", err)
	}
	return u, nil
}

// check checks the task s describes (it, u: what Item made of it at now)
// field by field with the validators Schedule runs, so that what Schedule
// would refuse without naming a field is refused here naming it: the CLI's
// schedule --file, the HTTP API and Go callers get the same answer. What
// only a schedule can check (a parent's state, a unique window against the run
// records' retention, a unique task's id against its key's shard) is
// Schedule's to refuse.
func (s TaskSpec) check(now time.Time, it Item, u *Unique) error {
	if it.ID != "" {
		if err := schedule.ValidateID(it.ID); err != nil {
			return specErr("id", acceptID, err)
		}
	}
	if it.Type != "" {
		if err := schedule.ValidateType(it.Type); err != nil {
			return specErr("type", acceptType, err)
		}
	}
	if it.Recurrence != "" {
		// Resolve parses the rule only when it decides the first due time
		// (neither at nor in).
		if _, err := schedule.ParseRecurrence(it.Recurrence, it.TZ); err != nil {
			return s.whenError(now, err)
		}
	}
	if it.MaxAttempts < 0 || it.MaxAttempts > schedule.MaxMaxAttempts {
		return specErr("max_attempts", fmt.Sprintf(acceptAttempts, schedule.MaxMaxAttempts), fmt.Errorf("%d is not from 0 to %d", it.MaxAttempts, schedule.MaxMaxAttempts))
	}
	if err := queue.ValidateRouteQueue(it.Queue); err != nil {
		return specErr("queue", fmt.Sprintf(acceptQueue, queue.MaxRouteQueueLen), err)
	}
	if err := queue.ValidateFairKey(it.FairKey); err != nil {
		return specErr("fair_key", fmt.Sprintf(acceptFairKey, queue.MaxFairKeyLen), err)
	}
	if err := s.checkAfter(it, u); err != nil {
		return err
	}
	if u != nil {
		badKey := func(err error) error {
			return specErr("unique_key", fmt.Sprintf(acceptKey, schedule.MaxUniqueKeyLen), err)
		}
		if len(u.Key) > schedule.MaxUniqueKeyLen {
			return badKey(fmt.Errorf("%.40q… is %d bytes; the limit is %d", u.Key, len(u.Key), schedule.MaxUniqueKeyLen))
		}
		if err := storage.ValidateKeyPart("unique key", u.Key); err != nil {
			return badKey(err)
		}
		if u.For > schedule.MaxUniqueFor {
			return specErr("unique_for", fmt.Sprintf(acceptWindow, schedule.MaxUniqueFor), fmt.Errorf("%s is longer than %s", u.For, schedule.MaxUniqueFor))
		}
	}
	return nil
}

// checkAfter checks the parents of it as Schedule will, before it reads
// their states.
func (s TaskSpec) checkAfter(it Item, u *Unique) error {
	parents := schedule.ParentIDs(it.After)
	if len(parents) == 0 {
		return nil
	}
	bad := func(err error) error { return specErr("after", fmt.Sprintf(acceptAfter, schedule.MaxAfter), err) }
	for _, p := range parents {
		if err := schedule.ValidateID(p); err != nil {
			return bad(fmt.Errorf("parent: %w", err))
		}
		if p == it.ID {
			return bad(fmt.Errorf("task %s cannot wait for itself", p))
		}
	}
	switch {
	case len(parents) > schedule.MaxAfter:
		return bad(fmt.Errorf("%d tasks; the limit is %d (use a batch with a completion callback to wait for more)", len(parents), schedule.MaxAfter))
	case it.Recurrence != "":
		return specErr("after", "no after with every or cron", errors.New("a recurring series cannot wait for other tasks; schedule a one-off task"))
	case u != nil:
		return specErr("after", "no after with unique_key", errors.New("a unique task cannot wait for other tasks"))
	}
	return nil
}

// whenError names the field of a When that Resolve refused.
func (s TaskSpec) whenError(now time.Time, err error) error {
	switch {
	case strings.TrimSpace(s.At) != "" && strings.TrimSpace(s.In) != "":
		return specErr("in", "at or in, not both", err)
	case strings.TrimSpace(s.At) != "":
		if _, e := schedule.ParseWhen(s.At, "", now); e != nil {
			return specErr("at", acceptAt, e)
		}
	case strings.TrimSpace(s.In) != "":
		if _, e := schedule.ParseWhen("", s.In, now); e != nil {
			return specErr("in", acceptDuration, e)
		}
	}
	switch {
	case strings.TrimSpace(s.Every) != "" && strings.TrimSpace(s.Cron) != "":
		return specErr("cron", "every or cron, not both", err)
	case strings.TrimSpace(s.TZ) != "" && strings.TrimSpace(s.Cron) == "":
		return specErr("tz", acceptTZ, err)
	case strings.TrimSpace(s.Every) != "":
		return specErr("every", fmt.Sprintf(acceptEvery, schedule.MinEvery), err)
	case strings.TrimSpace(s.TZ) != "":
		if _, e := time.LoadLocation(s.TZ); e != nil {
			return specErr("tz", acceptTZ, err)
		}
	}
	return specErr("cron", acceptCron, err)
}

// after reads After: a list of ids or a comma-separated string.
func (s TaskSpec) after() ([]string, error) {
	raw := s.After
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		return nil, specErr("after", fmt.Sprintf(acceptAfter, schedule.MaxAfter), fmt.Errorf("not %s", raw))
	}
	return strings.Split(text, ","), nil
}

// priority reads Priority: a number or a level's name.
func (s TaskSpec) priority() (int, error) {
	raw := s.Priority
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var text string
	if err := json.Unmarshal(raw, &text); err != nil {
		text = string(raw)
	}
	p, err := queue.ParsePriority(text)
	if err != nil {
		return 0, specErr("priority", acceptPriority, err)
	}
	return p, nil
}
