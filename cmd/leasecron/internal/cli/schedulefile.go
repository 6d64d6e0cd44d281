package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
	"github.com/leasecron/leasecron/queue"
	"github.com/leasecron/leasecron/schedule"
)

// fileLine is one line of `schedule --file`: a JSON object with these
// fields (unknown ones are refused).
type fileLine struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Payload     json.RawMessage `json:"payload"`
	At          string          `json:"at"`
	In          string          `json:"in"`
	Every       string          `json:"every"`
	Cron        string          `json:"cron"`
	TZ          string          `json:"tz"`
	MaxAttempts int             `json:"max_attempts"`
	// Queue, Priority (a number 1–4 or a level's name) and FairKey are
	// schedule --queue, --priority and --fair-key.
	Queue    string          `json:"queue"`
	Priority json.RawMessage `json:"priority"`
	FairKey  string          `json:"fair_key"`
	// UniqueKey, UniqueFor (a Go duration) and UniqueStates (comma-separated)
	// are schedule --unique-key, --unique-for and --unique-states.
	UniqueKey    string `json:"unique_key"`
	UniqueFor    string `json:"unique_for"`
	UniqueStates string `json:"unique_states"`
	// After (a list of ids or one comma-separated string) and AfterAny are
	// schedule --after and --after-any.
	After    json.RawMessage `json:"after"`
	AfterAny bool            `json:"after_any"`
}

// fileBatch is schedule --batch, --on-complete and --on-complete-payload.
type fileBatch struct {
	ID, OnComplete, Payload string
}

// options returns the ScheduleMany options of b.
func (b fileBatch) options(o *leasecron.ScheduleManyOptions) error {
	if b.Payload != "" && b.OnComplete == "" {
		return usagef("--on-complete-payload goes with --on-complete")
	}
	o.Batch = b.ID
	if b.OnComplete != "" {
		o.OnComplete = &leasecron.Item{Type: b.OnComplete, Payload: b.Payload, Due: time.Now()}
	}
	return nil
}

// parseAfter reads a line's "after": a list of ids or a comma-separated
// string.
func parseAfter(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("after: want a list of task ids or a comma-separated string, not %s", raw)
	}
	return strings.Split(s, ","), nil
}

// lineResult is what `schedule --file --json` prints per line.
type lineResult struct {
	Line   int       `json:"line"`
	ID     string    `json:"id,omitempty"`
	Status string    `json:"status"` // scheduled, invalid, duplicate, held, not_written, moved
	Due    time.Time `json:"due,omitzero"`
	Error  string    `json:"error,omitempty"`
}

// parseLine turns one line into an item. A payload that is a JSON string is
// taken as its text; any other JSON value as its compact JSON.
func parseLine(b []byte, now time.Time) (leasecron.Item, *leasecron.Unique, error) {
	var l fileLine
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return leasecron.Item{}, nil, fmt.Errorf("not a JSON object with id, type, payload, at, in, every, cron, tz, max_attempts, unique_key, unique_for, unique_states, after, after_any: %w", err)
	}
	if dec.More() {
		return leasecron.Item{}, nil, errors.New("more than one JSON value on the line")
	}
	payload := ""
	if len(l.Payload) > 0 && string(l.Payload) != "null" {
		var s string
		if err := json.Unmarshal(l.Payload, &s); err == nil {
			payload = s
		} else {
			var buf bytes.Buffer
			if err := json.Compact(&buf, l.Payload); err != nil {
				return leasecron.Item{}, nil, fmt.Errorf("payload: %w", err)
			}
			payload = buf.String()
		}
	}
	due, rule, err := schedule.When{At: l.At, In: l.In, Every: l.Every, Cron: l.Cron, TZ: l.TZ}.Resolve(now)
	if err != nil {
		return leasecron.Item{}, nil, err
	}
	after, err := parseAfter(l.After)
	if err != nil {
		return leasecron.Item{}, nil, err
	}
	if l.AfterAny && len(after) == 0 {
		return leasecron.Item{}, nil, errors.New("after_any goes with after")
	}
	prio, err := linePriority(l.Priority)
	if err != nil {
		return leasecron.Item{}, nil, err
	}
	it := leasecron.Item{ID: l.ID, Type: l.Type, Payload: payload, Due: due, Recurrence: rule, TZ: l.TZ, MaxAttempts: l.MaxAttempts, After: after, AfterAny: l.AfterAny,
		Queue: l.Queue, Priority: prio, FairKey: l.FairKey}
	if l.UniqueKey == "" {
		if l.UniqueFor != "" || l.UniqueStates != "" {
			return leasecron.Item{}, nil, errors.New("unique_for and unique_states go with unique_key")
		}
		return it, nil, nil
	}
	u := &leasecron.Unique{Key: l.UniqueKey}
	if l.UniqueFor != "" {
		if u.For, err = time.ParseDuration(l.UniqueFor); err != nil || u.For < 0 {
			return leasecron.Item{}, nil, fmt.Errorf("unique_for %q: want a duration of 0 or more (e.g. 10m, 24h)", l.UniqueFor)
		}
	}
	if u.States, err = schedule.ParseUniqueStates(l.UniqueStates); err != nil {
		return leasecron.Item{}, nil, err
	}
	return it, u, nil
}

// scheduleFile is `schedule --file PATH`: one task per line, scheduled with
// Client.ScheduleMany. Every line is read and checked first; a malformed
// line is reported with its number and, without partial, nothing is
// scheduled.
func (a *app) scheduleFile(ctx context.Context, path string, partial, asJSON bool, batch fileBatch) error {
	var o leasecron.ScheduleManyOptions
	if err := batch.options(&o); err != nil {
		return err
	}
	var r io.Reader = a.in //nolint:staticcheck // r becomes a file below
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return usageError{err}
		}
		defer f.Close()
		r = f
	}
	now := time.Now()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 2*a.cfg.Payload.MaxSize+64<<10)
	var (
		items   []leasecron.Item
		uniques []*leasecron.Unique
		anyUniq bool
		lineOf  []int
		results []lineResult
		bad     int
	)
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		it, u, err := parseLine(b, now)
		if err != nil {
			bad++
			results = append(results, lineResult{Line: n, ID: idOf(b), Status: "invalid", Error: err.Error()})
			continue
		}
		items, uniques = append(items, it), append(uniques, u)
		anyUniq = anyUniq || u != nil
		lineOf = append(lineOf, n)
	}
	if err := sc.Err(); err != nil {
		return usagef("reading %s: %v (a line may hold at most twice payload.max_size)", path, err)
	}
	if len(items) == 0 && bad == 0 {
		return usagef("%s holds no tasks", path)
	}
	var res []leasecron.ScheduleResult
	if bad == 0 || partial {
		cl, err := a.client()
		if err != nil {
			return err
		}
		o.Partial = partial
		if anyUniq {
			o.Unique = uniques
		}
		res, err = cl.ScheduleMany(ctx, items, o)
		if res == nil && err != nil {
			// Refused as a whole (a cycle, an unknown parent, a batch id
			// taken): nothing was written.
			if errors.Is(err, schedule.ErrInvalid) || errors.Is(err, leasecron.ErrAlreadyScheduled) {
				return usageError{err}
			}
			return err
		}
	}
	invalid := bad
	scheduled, held := 0, 0
	for k, it := range items {
		lr := lineResult{Line: lineOf[k], ID: it.ID, Due: it.Due}
		switch {
		case res == nil:
			lr.Status, lr.Error = "not_written", "not written: another line of the file was refused"
		case res[k].Err == nil:
			lr.Status, lr.ID, lr.Due = "scheduled", res[k].Item.ID, res[k].Item.Due
			scheduled++
		default:
			lr.Error = res[k].Err.Error()
			var dup *leasecron.DuplicateError
			switch err := res[k].Err; {
			case errors.As(err, &dup):
				lr.Status, lr.ID = "held", dup.ID
				held++
			case errors.Is(err, schedule.ErrInvalid) || errors.Is(err, schedule.ErrBadRecurrence) || errors.Is(err, schedule.ErrPayloadTooLarge):
				lr.Status = "invalid"
				invalid++
			case errors.Is(err, leasecron.ErrAlreadyScheduled):
				lr.Status = "duplicate"
			case errors.Is(err, schedule.ErrMovedBeforeRollback):
				lr.Status = "moved"
			default:
				lr.Status = "not_written"
			}
		}
		results = append(results, lr)
	}
	slices.SortFunc(results, func(x, y lineResult) int { return x.Line - y.Line })
	if asJSON {
		if err := a.printJSON(results); err != nil {
			return err
		}
	} else {
		for _, lr := range results {
			if lr.Status != "scheduled" {
				fmt.Fprintf(a.out, "line %d: %s %s: %s\n", lr.Line, lr.ID, strings.ReplaceAll(lr.Status, "_", " "), lr.Error)
			}
		}
		fmt.Fprintf(a.out, "%d of %d tasks scheduled\n", scheduled, len(results))
		if scheduled > 0 && len(res) > 0 && res[0].Item.Batch != "" {
			fmt.Fprintf(a.out, "batch %s (leasecron batch %s)\n", res[0].Item.Batch, res[0].Item.Batch)
		}
	}
	switch {
	case scheduled == len(results):
		return nil
	case scheduled+held == len(results):
		return fmt.Errorf("%w: %d of %d tasks not created: their unique keys are held (the lines name the holders)", leasecron.ErrDuplicate, held, len(results))
	case invalid > 0 && scheduled == 0:
		return usagef("%d of %d lines refused as invalid; nothing was scheduled", invalid, len(results))
	default:
		return fmt.Errorf("%d of %d tasks not scheduled", len(results)-scheduled, len(results))
	}
}

// idOf returns the "id" of a line that could not be read, when it has one.
func idOf(b []byte) string {
	var l struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(b, &l)
	return l.ID
}

// linePriority reads a line's priority: a number or a level's name.
func linePriority(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		s = string(raw)
	}
	return queue.ParsePriority(s)
}
