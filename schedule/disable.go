package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/table"
)

// Properties of a disabled series' row. Its row waits at MaxTime, where no
// mover reaches it; PropDisabled says since when (RFC 3339) and
// PropDisabledDue holds the due time of the occurrence it had next.
const (
	PropDisabled    = "Disabled"
	PropDisabledDue = "DisabledDue"
)

// Disable stops a recurring series without deleting it: its row stays,
// with its rule, zone and payload, but no occurrence runs until Enable.
// The row moves to MaxTime in one transaction with its index row, so no
// mover ever finds it due; occurrences already sent early become no-ops
// for workers that check them (Options.ChangesAfterSend; without them
// Disable refuses with ErrAlreadySent). A one-off task is refused (cancel
// or reschedule it); disabling a disabled series changes nothing.
func (c *Client) Disable(ctx context.Context, id string) (Item, error) {
	it, _, err := c.DisableMoving(ctx, id, 0)
	return it, err
}

// maxStopped bounds the occurrences DisableMoving stops.
const maxStopped = 100

// DisableMoving is Disable for a fleet whose mover may be moving, as the
// series is disabled, the occurrences due within moving of now: a pass
// that read the row before the disable sends them without a token and
// whatever the row then says (issue 38, the simulator's seed 21: an
// occurrence started five seconds after disable returned). Those
// occurrences (at most 100) are returned as stopped — the caller records
// their runs cancelled, which a late send cannot undo — and the series
// keeps as the occurrence it had next the first one after them, so Enable
// does not bring a stopped one back. moving 0 stops none.
func (c *Client) DisableMoving(ctx context.Context, id string, moving time.Duration) (Item, []time.Time, error) {
	return c.DisableMovingIf(ctx, id, moving, nil)
}

// DisableMovingIf is DisableMoving that first asks check about the row it
// is about to disable, as read for the conditional write that disables
// it: an error from check is returned, and this call disables nothing. A
// caller that chose the series from an earlier read (a bulk disable's
// walk) thus acts only on what it chose, even when the id holds another
// series by the time of the write. check is called again on every row
// read after a conflict, so it must not change anything itself; it is
// not asked about a row this call has itself disabled (a write whose
// answer was lost, met again). nil checks nothing.
func (c *Client) DisableMovingIf(ctx context.Context, id string, moving time.Duration, check func(Item) error) (Item, []time.Time, error) {
	now := c.opts.Clock.Now().UTC()
	var stopped []time.Time
	it, err := c.moveRow(ctx, id, "disable", "disabled", func(row table.Entity) (time.Time, table.Props, error) {
		r, err := parseRow(row)
		if err != nil && r.item.Recurrence != "" {
			return time.Time{}, nil, fmt.Errorf("%w: disable %s: the row is malformed: %w", ErrInvalid, id, err)
		}
		it := r.item
		if !it.Disabled.IsZero() && it.Disabled.Equal(now) && it.Recurrence != "" {
			// This call's own write, committed with its answer lost: done,
			// with the occurrences that write stopped (review of issue 38's
			// row 94: a bulk disable's check refused the series it had
			// just disabled, and the occurrences already moved ran).
			return MaxTime, row.Props, nil
		}
		stopped = nil
		if check != nil {
			if err := check(it); err != nil {
				return time.Time{}, nil, err
			}
		}
		if it.Recurrence == "" {
			return time.Time{}, nil, fmt.Errorf("%w: disable %s: a one-off task, not a recurring series (cancel or reschedule it instead)", ErrInvalid, id)
		}
		if !it.Disabled.IsZero() {
			return MaxTime, row.Props, nil // already disabled: the row stays
		}
		if mutate.On(mutate.IgnoreDisable) {
			due, _, _ := ParseRowKey(row.RowKey)
			return due, row.Props, nil
		}
		var next time.Time
		if stopped, next, err = movingFrom(r.rec, it.Due, it.SentUntil, now, moving); err != nil {
			return time.Time{}, nil, fmt.Errorf("%w: disable %s: %w", ErrInvalid, id, err)
		}
		props := table.Props(row.Props).Clone()
		props.Delete(PropSendingUntil)
		props[PropDisabled] = now.Format(time.RFC3339Nano)
		props[PropDisabledDue] = next.UTC().Format(time.RFC3339Nano)
		return MaxTime, props, nil
	})
	if err != nil {
		stopped = nil
	}
	return it, stopped, err
}

// movingFrom returns the occurrences of rec a mover pass may be moving
// around now, for a series whose row is due at due: the row's own due
// time, and after it those a pass may reach within moving of now (at most
// maxStopped). An overdue series skips the occurrences before the pass's
// previous one (at most moving ago), so those are not listed one by one;
// next is the first occurrence after them. moving 0 lists none.
//
// Then, with what the bound leaves, newest first: the occurrences between
// them that a pass sent early already (up to sentUntil, the row's
// SentUntil) and the one after those, which the pass that confirms them
// sends without a token however late it is. Their messages are out, and a
// worker that found one current before the row changed may claim it
// after (issue 38, sim seed 142823, row 235: a worker frozen between that
// check and its claim ran an occurrence of a series disabled meanwhile;
// it had no run record to cancel).
func movingFrom(rec Recurrence, due, sentUntil, now time.Time, moving time.Duration) (list []time.Time, next time.Time, err error) {
	next = due
	for moving > 0 && !next.After(now.Add(moving)) && len(list) < maxStopped {
		list = append(list, next)
		if next, err = rec.Next(next, now.Add(-moving)); err != nil {
			return nil, time.Time{}, err
		}
	}
	if moving == 0 || sentUntil.IsZero() || sentUntil.Before(due) || len(list) >= maxStopped {
		return list, next, nil
	}
	// Between the row's due time and the first occurrence near now.
	limit := next
	if len(list) > 1 {
		limit = list[1]
	}
	var sent []time.Time
	for at := due; ; {
		if at, err = rec.Next(at, at); err != nil {
			return nil, time.Time{}, err
		}
		if !at.Before(limit) {
			break
		}
		sent = append(sent, at)
		if at.After(sentUntil) {
			break // the one a pass sends after those it confirms
		}
		if len(sent) > maxStopped {
			sent = sent[1:] // the newest count
		}
	}
	for k := len(sent) - 1; k >= 0 && len(list) < maxStopped; k-- {
		list = append(list, sent[k])
	}
	return list, next, nil
}

// MovingOccurrences returns the occurrences of the series it (as its row
// was read) that a mover pass may be moving at now, when a pass sends
// what is due within moving: its row's due time and those after it up
// to moving from now (at most 100). A caller that removes the series
// (a cancel) records their runs cancelled, as DisableMoving's caller
// does, so that a pass which read the row before the removal and sends
// one after it sends a run that does not start. A one-off task has
// none.
func MovingOccurrences(it Item, now time.Time, moving time.Duration) ([]time.Time, error) {
	if it.Recurrence == "" {
		return nil, nil
	}
	rec, err := ParseRecurrence(it.Recurrence, it.TZ)
	if err != nil {
		return nil, fmt.Errorf("%w: series %s: %w", ErrInvalid, it.ID, err)
	}
	list, _, err := movingFrom(rec, it.Due, it.SentUntil, now.UTC(), moving)
	if err != nil {
		return nil, fmt.Errorf("%w: series %s: %w", ErrInvalid, it.ID, err)
	}
	return list, nil
}

// Enable runs a disabled series again from its next occurrence after now:
// the one it had when disabled if that is still ahead, else the first of
// its rule after now (occurrences that fell due while it was disabled do
// not run). Enabling a series that is not disabled changes nothing.
func (c *Client) Enable(ctx context.Context, id string) (Item, error) {
	now := c.opts.Clock.Now().UTC()
	return c.moveRow(ctx, id, "enable", "enabled", func(row table.Entity) (time.Time, table.Props, error) {
		r, err := parseRow(row)
		if err != nil {
			return time.Time{}, nil, fmt.Errorf("%w: enable %s: the row is malformed: %w", ErrInvalid, id, err)
		}
		if r.item.Disabled.IsZero() {
			due, _, _ := ParseRowKey(row.RowKey)
			return due, row.Props, nil // not disabled: the row stays
		}
		next := r.item.Due
		if !next.After(now) {
			if next, err = r.rec.Next(r.item.Due, now); err != nil {
				return time.Time{}, nil, fmt.Errorf("%w: enable %s: %w", ErrInvalid, id, err)
			}
		}
		props := table.Props(row.Props).Clone()
		props.Delete(PropDisabled)
		props.Delete(PropDisabledDue)
		return next, props, nil
	})
}
