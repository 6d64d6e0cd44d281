package leasecron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron/leasecrontype"
	"github.com/leasecron/leasecron/schedule"
)

// SearchQuery is what Search looks for: ParseSearch reads it from the
// tokens of one search box.
type SearchQuery struct {
	// ID is an id to find; with IDPrefix, the start of ids.
	ID       string
	IDPrefix bool
	// Run holds the other filters: Type, State (RunScheduled for pending
	// tasks), Series, Batch and Since; Limit and Continue page the answer.
	Run RunQuery
}

// ParseSearch reads a search: space-separated tokens
//
//	id:ID          the task or run with this id (id:ABC* — ids starting ABC)
//	type:TYPE      of this handler type
//	state:STATE    in this state (scheduled: still pending)
//	series:ID      occurrences of this recurring series
//	batch:ID       the members of this batch (their runs; with
//	               state:scheduled, those still pending)
//	since:DURATION due within this long before now (e.g. since:2h)
//	since:TIME     due at or after this RFC 3339 time
//
// An id typed alone (a token without a colon) is id:ID. A token it does not
// know, a bad value, or an id with other filters is refused naming the
// token and what is accepted.
func ParseSearch(q string, now time.Time) (SearchQuery, error) {
	var s SearchQuery
	fields := strings.Fields(q)
	if len(fields) == 0 {
		return s, fmt.Errorf("%w: empty search: want id:ID, type:TYPE, state:STATE, series:ID, batch:ID or since:DURATION", ErrInvalidRunQuery)
	}
	for _, f := range fields {
		key, val, ok := strings.Cut(f, ":")
		if !ok {
			key, val = "id", f
		}
		if val == "" {
			return s, fmt.Errorf("%w: search token %q has no value", ErrInvalidRunQuery, f)
		}
		switch strings.ToLower(key) {
		case "id":
			s.ID, s.IDPrefix = strings.TrimSuffix(val, "*"), strings.HasSuffix(val, "*")
			if s.ID == "" {
				return s, fmt.Errorf("%w: search token %q: want id:ID or id:PREFIX*", ErrInvalidRunQuery, f)
			}
			if err := validateSearchID(s.ID); err != nil {
				return s, fmt.Errorf("%w: search token %q: %w", ErrInvalidRunQuery, f, err)
			}
		case "type":
			if err := schedule.ValidateType(val); err != nil {
				return s, fmt.Errorf("%w: search token %q: %w", ErrInvalidRunQuery, f, err)
			}
			s.Run.Type = val
		case "state":
			st, err := leasecrontype.ParseRunState(val)
			if err != nil {
				return s, fmt.Errorf("%w: search token %q: %w", ErrInvalidRunQuery, f, err)
			}
			s.Run.State = st
		case "series":
			s.Run.Series = val
		case "batch":
			if err := schedule.ValidateID(val); err != nil {
				return s, fmt.Errorf("%w: search token %q: batch %w", ErrInvalidRunQuery, f, err)
			}
			s.Run.Batch = val
		case "since":
			if d, err := time.ParseDuration(val); err == nil && d > 0 {
				s.Run.Since = now.Add(-d)
			} else if t, err := time.Parse(time.RFC3339, val); err == nil {
				s.Run.Since = t
			} else {
				return s, fmt.Errorf("%w: search token %q: want a positive duration (since:2h) or an RFC 3339 time", ErrInvalidRunQuery, f)
			}
		default:
			return s, fmt.Errorf("%w: search token %q: unknown key %q: want one of id, type, state, series, batch, since", ErrInvalidRunQuery, f, key)
		}
	}
	if s.ID != "" && (s.Run.Type != "" || s.Run.State != "" || s.Run.Series != "" || s.Run.Batch != "" || !s.Run.Since.IsZero()) {
		return s, fmt.Errorf("%w: search %q: id: goes alone (it finds one task, or the ids starting with it)", ErrInvalidRunQuery, q)
	}
	return s, nil
}

// SearchResult is Search's answer: the one task an exact id names, or a
// page of runs (pending tasks as RunScheduled), newest first.
type SearchResult struct {
	// Exact is the status of the task an exact id names (nil otherwise).
	Exact *Status
	// Runs are the matches of any other search.
	Runs []Run
	// Continue, when not empty, fetches the next page (filters only).
	Continue string
}

// Search answers q from the existing indexes: an exact id with Status (a
// point read or three); an id prefix with one range query per schedule
// shard and per run partition (5 requests unsharded) and a point read of
// each pending task it shows; filters with Runs
// (one query per run partition, or per shard for state:scheduled).
func (c *Client) Search(ctx context.Context, q SearchQuery) (SearchResult, error) {
	limit := q.Run.Limit
	if limit == 0 {
		limit = 50
	}
	switch {
	case q.ID != "" && !q.IDPrefix:
		st, err := c.Status(ctx, q.ID)
		if err != nil {
			return SearchResult{}, err
		}
		if st.Pending == nil && st.Run == nil {
			return SearchResult{}, fmt.Errorf("%w: no task or run %q", ErrNotFound, q.ID)
		}
		return SearchResult{Exact: &st}, nil
	case q.IDPrefix:
		items, err := c.sched.ByIDPrefix(ctx, q.ID, limit)
		if err != nil {
			return SearchResult{}, err
		}
		var res SearchResult
		var recorded []Run
		if c.runs != nil {
			rs, err := c.runs.ByIDPrefix(ctx, q.ID, limit)
			if err != nil {
				return SearchResult{}, err
			}
			for _, r := range rs {
				recorded = append(recorded, r.Public())
			}
		}
		// A task with a run record shows as the record says (its row may
		// still wait to be retired after a client sent it for now), as
		// Status does.
		has := map[string]bool{}
		for _, r := range recorded {
			has[r.ID] = r.State != RunQueued
		}
		var pending []Item // the ones shown: those the limit leaves
		for _, it := range items {
			if !has[it.ID] && len(pending) < limit {
				pending = append(pending, it)
			}
		}
		pending = c.sched.Rows(ctx, pending) // their types
		for _, it := range pending {
			res.Runs = append(res.Runs, pendingRun(it))
		}
		for _, r := range recorded {
			if !(r.State == RunQueued && slices.ContainsFunc(items, func(it Item) bool { return it.ID == r.ID })) {
				res.Runs = append(res.Runs, r)
			}
		}
		if len(res.Runs) > limit {
			res.Runs = res.Runs[:limit]
		}
		return res, nil
	}
	p, err := c.Runs(ctx, q.Run)
	if errors.Is(err, ErrNoRunRecords) && q.Run.State == "" {
		q.Run.State = RunScheduled
		p, err = c.Runs(ctx, q.Run)
	}
	if err != nil {
		return SearchResult{}, err
	}
	return SearchResult{Runs: p.Runs, Continue: p.Continue}, nil
}

// validateSearchID checks an id or id prefix: a task id, or an
// occurrence's run id ({series}@{due}).
func validateSearchID(id string) error {
	series, due, ok := strings.Cut(id, "@")
	if err := schedule.ValidateID(series); err != nil {
		return err
	}
	if ok && strings.ContainsAny(due, " /\\#?") {
		return fmt.Errorf("occurrence id %q: want {series}@{RFC 3339 due time}", id)
	}
	return nil
}
