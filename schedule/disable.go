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
	now := c.opts.Clock.Now().UTC()
	return c.moveRow(ctx, id, "disable", "disabled", func(row table.Entity) (time.Time, table.Props, error) {
		it := readItem(row)
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
		props := table.Props(row.Props).Clone()
		props.Delete(PropSendingUntil)
		props[PropDisabled] = now.Format(time.RFC3339Nano)
		props[PropDisabledDue] = it.Due.UTC().Format(time.RFC3339Nano)
		return MaxTime, props, nil
	})
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
