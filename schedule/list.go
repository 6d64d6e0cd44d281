package schedule

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// ListOptions select what List returns.
type ListOptions struct {
	// Due lists only rows due now (by the client's clock).
	Due bool
	// Limit is the page size. Default 100, at most 1000.
	Limit int
	// Continuation resumes after the page that returned it.
	Continuation string
	// Type, when set, lists only tasks of this type.
	Type string
	// Recurring lists only recurring series.
	Recurring bool
}

// List returns one page of pending items in due order, merged across the
// shards (one query per shard per page, more where a filter leaves a
// shard's page short), and a continuation token ("" when there are no
// more). Malformed rows are included with Item.Problem set.
func (c *Client) List(ctx context.Context, lo ListOptions) ([]Item, string, error) {
	if lo.Limit == 0 {
		lo.Limit = 100
	}
	if lo.Limit < 0 || lo.Limit > 1000 {
		return nil, "", fmt.Errorf("%w: list limit %d: want 1..1000", ErrInvalid, lo.Limit)
	}
	after, err := decodeListToken(lo.Continuation)
	if err != nil {
		return nil, "", err
	}
	to := IndexPrefix
	if lo.Due {
		to = dueBound(c.opts.Clock.Now())
	}
	var rows []table.Entity
	more := false // some shard has rows beyond what was read
	pl, err := c.place(ctx)
	if err != nil {
		return nil, "", err
	}
	for _, shard := range pl.span {
		got, rest, err := c.listShard(ctx, shard, after, to, lo)
		if errors.Is(err, storage.ErrTableNotFound) {
			return nil, "", nil // a fresh account: nothing scheduled yet
		}
		if err != nil {
			return nil, "", fmt.Errorf("list: %w", err)
		}
		rows = append(rows, got...)
		more = more || rest
	}
	// Every RowKey is unique across the shards (it ends with the id), so
	// RowKey order is one order over the whole schedule.
	slices.SortFunc(rows, func(a, b table.Entity) int { return strings.Compare(a.RowKey, b.RowKey) })
	if len(rows) > lo.Limit {
		rows, more = rows[:lo.Limit], true
	}
	items := make([]Item, len(rows))
	for i, e := range rows {
		items[i] = readItem(e)
	}
	if !more || len(rows) == 0 {
		return items, "", nil
	}
	return items, encodeListToken(rows[len(rows)-1].RowKey), nil
}

// listShard reads up to lo.Limit rows of shard after the RowKey after (and
// before to) that meet lo's filters, and reports whether it stopped short
// of the shard's end.
func (c *Client) listShard(ctx context.Context, shard, after, to string, lo ListOptions) ([]table.Entity, bool, error) {
	// From is inclusive: the row after names is skipped if it is still
	// there (one more is asked for).
	q := table.Query{Partition: shard, To: to, From: after}
	skip := 0
	if after != "" {
		skip = 1
	}
	if lo.Type != "" {
		q.Where = append(q.Where, table.Cond{Prop: PropType, Op: table.Eq, Value: lo.Type})
	}
	if lo.Recurring {
		q.Where = append(q.Where, table.Cond{Prop: PropRecurrence, Op: table.Gt, Value: ""})
	}
	var out []table.Entity
	for {
		q.Top = min(table.MaxPage, lo.Limit-len(out)+skip)
		p, err := c.t.Query(ctx, q)
		if err != nil {
			return nil, false, err
		}
		for _, e := range p.Entities {
			if skip > 0 && e.RowKey == after {
				skip = 0
				continue
			}
			skip = 0
			out = append(out, e)
		}
		if p.Continuation == "" {
			return out, false, nil
		}
		if len(out) >= lo.Limit {
			return out, true, nil
		}
		q.Continuation = p.Continuation
	}
}

// encodeListToken is the continuation of a page whose last row was key.
func encodeListToken(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("k" + key))
}

func decodeListToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		if key, ok := strings.CutPrefix(string(b), "k"); ok && key != "" && storage.ValidateKeyPart("continuation", key) == nil {
			return key, nil
		}
	}
	return "", fmt.Errorf("%w: list continuation %q is not a token List returned", ErrInvalid, tok)
}

// dueBound is the exclusive RowKey bound that selects rows due at or before t.
func dueBound(t time.Time) string {
	if t.After(MaxTime) {
		t = MaxTime
	}
	if t.Before(MinTime) {
		return "0"
	}
	return fmt.Sprintf("%0*d", TickDigits, Ticks(t)+1)
}

// DueStats describes the due backlog.
type DueStats struct {
	// Count is the number of rows due (capped; see Capped).
	Count int
	// Capped reports that more rows are due than were counted.
	Capped bool
	// Oldest is the due time of the oldest due row (zero when none).
	Oldest time.Time
	// Lag is now − Oldest (0 when nothing is due).
	Lag time.Duration
}

// DueCountCap is how many due rows Due counts per shard (one query page).
const DueCountCap = 1000

// Due counts rows due at now (at most DueCountCap per shard, one query per
// shard reading only keys) and reports the oldest, for `stats`.
func (c *Client) Due(ctx context.Context, now time.Time) (DueStats, error) {
	var st DueStats
	pl, err := c.place(ctx)
	if err != nil {
		return DueStats{}, err
	}
	for _, shard := range pl.span {
		s, err := c.DueIn(ctx, shard, now)
		if err != nil {
			return DueStats{}, err
		}
		st.Count += s.Count
		st.Capped = st.Capped || s.Capped
		if !s.Oldest.IsZero() && (st.Oldest.IsZero() || s.Oldest.Before(st.Oldest)) {
			st.Oldest = s.Oldest
		}
	}
	if !st.Oldest.IsZero() {
		st.Lag = max(0, now.Sub(st.Oldest))
	}
	return st, nil
}

// DueIn counts the rows of one shard due at now (at most DueCountCap; one
// query reading only keys) and reports the oldest.
func (c *Client) DueIn(ctx context.Context, shard string, now time.Time) (DueStats, error) {
	var st DueStats
	p, err := c.t.Query(ctx, table.Query{Partition: shard, To: dueBound(now), Select: []string{"RowKey"}, Top: DueCountCap})
	if errors.Is(err, storage.ErrTableNotFound) {
		return DueStats{}, nil // a fresh account: nothing is due
	}
	if err != nil {
		return DueStats{}, fmt.Errorf("due in shard %s: %w", shard, err)
	}
	st.Count = len(p.Entities)
	st.Capped = p.Continuation != ""
	for _, e := range p.Entities {
		if due, _, err := ParseRowKey(e.RowKey); err == nil {
			st.Oldest = due
			break
		}
	}
	if !st.Oldest.IsZero() {
		st.Lag = max(0, now.Sub(st.Oldest))
	}
	return st, nil
}

// NextDue returns the due time of the earliest row of shard (one query
// reading one key), and false when the shard has none.
func (c *Client) NextDue(ctx context.Context, shard string) (time.Time, bool, error) {
	p, err := c.t.Query(ctx, table.Query{Partition: shard, To: dueBound(MaxTime), Select: []string{"RowKey"}, Top: 1})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("next due in shard %s: %w", shard, err)
	}
	for _, e := range p.Entities {
		if due, _, err := ParseRowKey(e.RowKey); err == nil {
			return due, true, nil
		}
	}
	return time.Time{}, false, nil
}
