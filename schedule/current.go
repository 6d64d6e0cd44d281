package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// Current reports whether a message the mover sent early (env.Token set)
// still stands for its task: its row is still in the table carrying the
// token (for an occurrence of a series: the series' row carries it, and its
// SentUntil reaches the occurrence), or still exactly as the mover read it
// before sending (env.RowETag: the mark that follows the send has not
// landed yet). It is false when the task was
// cancelled, rescheduled, replaced or deleted since the message was sent —
// or when the row has been moved out of the table meanwhile, which is why a
// worker asks only when the run record does not already confirm the token
// (the mover confirms it there before it moves the row), and asks the run
// record again after a false answer. Messages without a token are always
// current.
func (c *Client) Current(ctx context.Context, env queue.Envelope) (bool, error) {
	current, _, err := c.CurrentOrGone(ctx, env)
	return current, err
}

// CurrentOrGone is Current that also reports whether the message is not
// current because its row is gone (moved, cancelled, or rescheduled to
// another row) rather than changed.
func (c *Client) CurrentOrGone(ctx context.Context, env queue.Envelope) (current, gone bool, err error) {
	if env.Token == "" {
		return true, false, nil
	}
	if env.Row == "" && env.Series == "" {
		// A token without a row (a requeue's, of a task never sent early):
		// the run record alone vouches for it, and it does not.
		return false, true, nil
	}
	var row table.Entity
	if env.Series == "" {
		shard, rk, ok := strings.Cut(env.Row, "/")
		if !ok || shard == "" || rk == "" {
			return false, false, fmt.Errorf("%w: envelope %s: row %q: want {shard}/{RowKey}", ErrInvalid, env.ID, env.Row)
		}
		row, err = c.t.Get(ctx, shard, rk)
	} else {
		// A series' row moves as its occurrences are moved: find it by id.
		var f found
		f, _, err = c.locate(ctx, env.Series)
		row = f.row
	}
	switch {
	case errors.Is(err, storage.ErrNotFound), errors.Is(err, ErrNotFound), errors.Is(err, storage.ErrTableNotFound):
		c.opts.Logger.Debug("the row of an early-sent message is gone", "task_id", env.ID, "row", env.Row)
		return false, true, nil
	case err != nil:
		return false, false, fmt.Errorf("check run %s against its row: %w", env.ID, err)
	}
	r, _ := parseRow(row)
	if env.RowETag != "" && row.ETag == env.RowETag && row.PartitionKey+"/"+row.RowKey == env.Row {
		// The row is as the mover read it: the message was sent and the
		// pass's mark has not landed yet (the mark follows the send). A
		// series' row may carry the token already, from an earlier pass,
		// with a SentUntil short of this occurrence (simulator seed 87044).
		return true, false, nil
	}
	if r.sent != env.Token {
		c.opts.Logger.Debug("the row of an early-sent message carries another token", "task_id", env.ID, "row", env.Row,
			"token", env.Token, "row_token", r.sent, "etag", row.ETag, "message_etag", env.RowETag)
		return false, false, nil
	}
	if env.Series != "" && env.Due.After(r.sentUntil) {
		return false, false, nil
	}
	return true, false, nil
}
