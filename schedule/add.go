package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// AddOptions modify Add.
type AddOptions struct {
	// Replace lets Add overwrite a pending task with the same id (its due
	// time, payload and recurrence are replaced atomically).
	Replace bool
	// Sending, when set, says that the caller sends the task's message
	// itself (a one-off task due now) and marks the row sent (MarkSent)
	// before this time: the mover leaves the row alone until then, and
	// moves it as any other row after, if the caller never marked it (it
	// died, or the queue refused the message).
	Sending time.Time
}

func (c *Client) prepare(it Item, now time.Time) (Item, error) {
	out := Item{ID: it.ID, Type: it.Type, Payload: it.Payload, Recurrence: strings.TrimSpace(it.Recurrence), TZ: strings.TrimSpace(it.TZ), MaxAttempts: it.MaxAttempts,
		TraceParent: strings.TrimSpace(it.TraceParent), Queue: it.Queue, Priority: it.Priority, FairKey: it.FairKey}
	if out.ID != "" {
		if err := ValidateID(out.ID); err != nil {
			return Item{}, err
		}
	}
	if out.Type == "" {
		out.Type = DefaultType
	}
	if err := ValidateType(out.Type); err != nil {
		return Item{}, err
	}
	if it.Due.IsZero() {
		return Item{}, fmt.Errorf("%w: %s has no due time (set Due; the CLI takes --at or --in)", ErrInvalid, out.label())
	}
	if err := checkDue(it.Due); err != nil {
		return Item{}, fmt.Errorf("%w: %s: %w", ErrInvalid, out.label(), err)
	}
	out.Due = FromTicks(Ticks(it.Due))
	if _, err := ParseRecurrence(out.Recurrence, out.TZ); err != nil {
		return Item{}, fmt.Errorf("%w: %s: %w", ErrInvalid, out.label(), err)
	}
	if out.MaxAttempts < 0 || out.MaxAttempts > MaxMaxAttempts {
		return Item{}, fmt.Errorf("%w: %s: max attempts %d: want 0 (worker default) .. %d", ErrInvalid, out.label(), out.MaxAttempts, MaxMaxAttempts)
	}
	if err := (queue.Route{Queue: out.Queue, Priority: out.Priority}).Validate(); err != nil {
		return Item{}, fmt.Errorf("%w: %s: %w", ErrInvalid, out.label(), err)
	}
	if err := queue.ValidateFairKey(out.FairKey); err != nil {
		return Item{}, fmt.Errorf("%w: %s: %w", ErrInvalid, out.label(), err)
	}
	if out.TraceParent != "" && !ValidTraceParent(out.TraceParent) {
		return Item{}, fmt.Errorf("%w: %s: trace parent %q is not a W3C traceparent (00-{32 hex}-{16 hex}-{2 hex})", ErrInvalid, out.label(), out.TraceParent)
	}
	if !utf8.ValidString(out.Payload) {
		return Item{}, fmt.Errorf("%w: %s: payload is not valid UTF-8; encode binary data as base64", ErrInvalid, out.label())
	}
	if err := prepareFlow(it, &out); err != nil {
		return Item{}, err
	}
	if len(out.Payload) > c.opts.MaxPayload {
		return Item{}, fmt.Errorf("%w: %w: %s: payload is %d bytes, the limit (payload.max_size) is %d", ErrInvalid, ErrPayloadTooLarge, out.label(), len(out.Payload), c.opts.MaxPayload)
	}
	if jsonLen(out.Payload) > c.opts.InlineLimit && c.opts.PayloadStore == nil {
		return Item{}, fmt.Errorf("%w: %w: %s: payload is %d bytes as JSON, more than the inline limit %d, and no payload store is configured", ErrInvalid, ErrPayloadTooLarge, out.label(), jsonLen(out.Payload), c.opts.InlineLimit)
	}
	if out.ID == "" {
		out.ID = newID(now)
	}
	return out, nil
}

// label names it in an error: by its id, or as new when it has none yet
// (an id generated for the message alone would name a task the caller
// never saw).
func (it Item) label() string {
	if it.ID == "" {
		return "the new task"
	}
	return "task " + it.ID
}

// Check validates it as Add would, writing nothing, and returns it as
// Add would store it.
func (c *Client) Check(it Item) (Item, error) { return c.prepare(it, c.opts.Clock.Now()) }

// Add schedules it. Invalid items are refused with an error wrapping
// ErrInvalid before anything is written. An id that is already scheduled
// (through leasecron) is refused with ErrAlreadyScheduled unless
// ao.Replace. The row and its id index row are written in one transaction;
// a payload above the inline limit is stored in a blob first, and deleted
// again if the table write fails. It returns the item as stored.
func (c *Client) Add(ctx context.Context, it Item, ao AddOptions) (Item, error) {
	if it.TraceParent == "" {
		it.TraceParent = TraceParentOf(ctx)
	}
	it, err := c.prepare(it, c.opts.Clock.Now())
	if err != nil {
		return Item{}, err
	}
	pl, err := c.place(ctx)
	if err != nil {
		return Item{}, err
	}
	shard := pl.of(it.ID)
	if prev, ok := pl.prevOf(it.ID); ok {
		// The shard count is changing: a task with this id may still sit
		// where the previous count put it, without a pointer here yet.
		if home, err := c.homeOf(ctx, prev, it.ID); err != nil {
			return Item{}, err
		} else if home != "" {
			shard = home
		}
	}
	rk, err := RowKey(rowDue(it), it.ID)
	if err != nil {
		return Item{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	it.Shard, it.RowKey, it.Indexed = shard, rk, true
	it.SendingUntil = ao.Sending
	if err := c.storePayload(ctx, &it); err != nil {
		return Item{}, err
	}
	shard, oldBlob, etag, err := c.add(ctx, shard, rk, &it, ao)
	it.Shard, it.ETag = shard, etag
	if err != nil {
		c.dropPayload(ctx, it, err)
		return Item{}, err
	}
	if oldBlob != "" && oldBlob != it.PayloadBlob {
		c.deleteBlob(ctx, oldBlob)
	}
	c.pointLanded(ctx, pl, map[string]string{it.ID: shard})
	if !it.Waiting {
		c.wakeOwner(ctx, shard, it.Due)
	}
	return it, nil
}

// storePayload moves a payload above the inline limit into a blob (the
// claim check) and leaves its reference on it.
func (c *Client) storePayload(ctx context.Context, it *Item) error {
	if jsonLen(it.Payload) <= c.opts.InlineLimit {
		return nil
	}
	name := payload.NewName(it.ID)
	ref, err := c.opts.PayloadStore.Put(ctx, name, []byte(it.Payload))
	if errors.Is(err, storage.ErrNotFound) {
		// First use: the payload container does not exist yet.
		if eerr := c.Ensure(ctx); eerr != nil {
			return fmt.Errorf("add %s: create the payload container: %w", it.ID, eerr)
		}
		ref, err = c.opts.PayloadStore.Put(ctx, name, []byte(it.Payload))
	}
	if err != nil {
		return fmt.Errorf("add %s: store large payload: %w", it.ID, err)
	}
	it.PayloadBlob, it.Payload = ref, ""
	return nil
}

// dropPayload deletes the blob of an item that was not written: why
// says why. A write whose outcome is unknown (a fault that passes, a
// timeout, the caller gone: it may have committed, its answer lost)
// keeps the blob, as the task it names may be scheduled and would run
// without its payload; a blob nobody names costs storage only.
func (c *Client) dropPayload(ctx context.Context, it Item, why error) {
	if it.PayloadBlob == "" {
		return
	}
	if storage.IsTransient(why) && !refused(why) && !errors.As(why, new(nothingWritten)) {
		c.opts.Logger.Warn("keeping the payload blob of a task whose write may have committed unanswered", "task_id", it.ID, "blob", it.PayloadBlob, "err", why)
		return
	}
	c.deleteBlob(ctx, it.PayloadBlob)
}

// nothingWritten is an error after which surely nothing of the call was
// written (there was no table to write to), whatever its cause.
type nothingWritten struct{ error }

func (e nothingWritten) Unwrap() error { return e.error }

// refused reports whether err is one of this package's refusals: the
// call decided against the write, and nothing of it was written.
func refused(err error) bool {
	for _, r := range []error{ErrInvalid, ErrPayloadTooLarge, ErrAlreadyScheduled, ErrAlreadySent, ErrBeingCancelled, ErrDuplicate, ErrBadRecurrence, ErrNotFound} {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// add writes the rows; it returns the payload blob of a replaced item and
// the item row's new ETag ("" when the table cannot tell).
//
// A pointer in the way (the id's task was placed in another shard under an
// earlier shard count) sends the write to that shard, unless its task is
// gone; the shard written is returned.
func (c *Client) add(ctx context.Context, shard, rk string, it *Item, ao AddOptions) (written, oldBlob, etag string, err error) {
	var wd withdrawals
	defer c.undoIfFailed(ctx, it.ID, &wd, &err)
	ixProps := map[string]any{PropItem: rk, PropID: it.ID}
	ik := indexKey(it.ID)
	fresh := []table.Op{
		{Kind: table.Insert, PartitionKey: shard, RowKey: rk},
		{Kind: table.Insert, PartitionKey: shard, RowKey: ik, Props: ixProps},
	}
	var lastErr error
	created := false
	given := *it
	// tried is a row marked sent that a write of this call replaced, when
	// that write failed as a conflict: its answer may have been lost after
	// it committed, and a later try that finds this call's own row takes
	// back tried's confirmation then (unconfirm).
	var tried *table.Entity
	for range retries {
		// Each attempt starts from the task as given: what a replace
		// carried over from the row it meant to replace (keepFlow, into it
		// and props) was that row's.
		*it = given
		props := itemProps(given, true)
		fresh[0].Props = props
		etags, err := c.t.Submit(ctx, fresh)
		if err == nil {
			return shard, "", etagAt(etags, 0), nil
		}
		if errors.Is(err, storage.ErrTableNotFound) && !created {
			// First use on this account: create the table, then write.
			if err := c.Ensure(ctx); err != nil {
				return shard, "", "", nothingWritten{fmt.Errorf("add %s: create the schedule table: %w", it.ID, err)}
			}
			created = true
			etags, err = c.t.Submit(ctx, fresh)
			if err == nil {
				return shard, "", etagAt(etags, 0), nil
			}
		}
		if !errors.Is(err, storage.ErrAlreadyExists) {
			return shard, "", "", fmt.Errorf("add %s: %w", it.ID, err)
		}
		lastErr = err
		// Something is in the way: the index row, or an unindexed row with
		// the same id and due time.
		var ops []table.Op
		itemOp := 0
		oldBlob = ""
		var replaced table.Entity // the row a Replace rewrites
		idx, err := c.t.Get(ctx, shard, ik)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			cur, err := c.t.Get(ctx, shard, rk)
			if errors.Is(err, storage.ErrNotFound) {
				continue // gone meanwhile; try again
			} else if err != nil {
				return shard, "", "", fmt.Errorf("add %s: %w", it.ID, err)
			}
			if !ao.Replace && sameContent(props, cur.Props) {
				adoptSending(it, cur.Props)
				return shard, "", cur.ETag, nil // ours: see sameContent
			}
			if !ao.Replace {
				return shard, "", "", fmt.Errorf("%w: task %s (due %s)", ErrAlreadyScheduled, it.ID, it.Due.Format(time.RFC3339Nano))
			}
			if err := c.refuseSent(cur, "replaced"); err != nil {
				return shard, "", "", err
			}
			oldBlob = replacedBlob(cur, c.opts.Clock.Now())
			replaced = cur
			ops = []table.Op{
				{Kind: table.Replace, PartitionKey: shard, RowKey: rk, Props: props, IfMatch: cur.ETag},
				{Kind: table.Insert, PartitionKey: shard, RowKey: ik, Props: ixProps},
			}
		case err != nil:
			return shard, "", "", fmt.Errorf("add %s: read id index: %w", it.ID, err)
		default:
			home, _, gone, err := c.follow(ctx, shard, idx)
			switch {
			case err != nil:
				return shard, "", "", fmt.Errorf("add %s: %w", it.ID, err)
			case home != shard && !gone: // the task lives there: write there
				return c.add(ctx, home, rk, it, ao)
			}
			// A pointer whose task is gone is taken over below.
			oldRK, _, _ := idx.Props.StrictString(PropItem)
			var cur table.Entity
			if oldRK != "" {
				cur, err = c.t.Get(ctx, shard, oldRK)
			} else {
				err = storage.ErrNotFound
			}
			switch {
			case errors.Is(err, storage.ErrNotFound) && (indexing(idx, c.opts.Clock.Now()) || mutate.On(mutate.RefuseStale)):
				// Not stale: an AddMany under way is still to write its row.
				return shard, "", "", fmt.Errorf("%w: task %s is being scheduled by another call (a ScheduleMany or schedule --file under way has written its id and not yet its row); try again once it has returned", ErrAlreadyScheduled, it.ID)
			case errors.Is(err, storage.ErrNotFound): // a stale index row: take it over
				ops = []table.Op{
					{Kind: table.Insert, PartitionKey: shard, RowKey: rk, Props: props},
					{Kind: table.Replace, PartitionKey: shard, RowKey: ik, Props: ixProps, IfMatch: idx.ETag},
				}
			case err != nil:
				return shard, "", "", fmt.Errorf("add %s: %w", it.ID, err)
			case !ao.Replace && oldRK == rk && sameContent(props, cur.Props):
				adoptSending(it, cur.Props)
				return shard, "", cur.ETag, nil // ours: see sameContent
			case !ao.Replace:
				due, _, _ := ParseRowKey(oldRK)
				return shard, "", "", fmt.Errorf("%w: task %s (due %s)", ErrAlreadyScheduled, it.ID, due.Format(time.RFC3339Nano))
			case c.refuseSent(cur, "replaced") != nil:
				return shard, "", "", c.refuseSent(cur, "replaced")
			case oldRK == rk:
				oldBlob = replacedBlob(cur, c.opts.Clock.Now())
				replaced = cur
				ops = []table.Op{
					{Kind: table.Replace, PartitionKey: shard, RowKey: rk, Props: props, IfMatch: cur.ETag},
					{Kind: table.Replace, PartitionKey: shard, RowKey: ik, Props: ixProps, IfMatch: idx.ETag},
				}
			default:
				oldBlob = replacedBlob(cur, c.opts.Clock.Now())
				replaced = cur
				itemOp = 1
				ops = []table.Op{
					{Kind: table.Delete, PartitionKey: shard, RowKey: oldRK, IfMatch: cur.ETag},
					{Kind: table.Insert, PartitionKey: shard, RowKey: rk, Props: props},
					{Kind: table.Replace, PartitionKey: shard, RowKey: ik, Props: ixProps, IfMatch: idx.ETag},
				}
			}
		}
		keepFlow(props, replaced, it)
		if c.opts.Clock.Now().Before(it.CancellingUntil) && !it.SendingUntil.IsZero() {
			// Held by a cancel (keepFlow): the mover's, not sent now.
			delete(props, PropSendingUntil)
			it.SendingUntil = time.Time{}
		}
		if tried != nil && replaced.RowKey != "" && sameContent(props, replaced.Props) {
			c.unconfirm(ctx, it.ID, *tried, tried.RowKey == rk) // this call's write, its answer lost
			tried = nil
		}
		wd = wd.add(c.withdraw(ctx, it.ID, replaced))
		etags, err = c.t.Submit(ctx, ops)
		if err == nil {
			c.unconfirm(ctx, it.ID, replaced, replaced.RowKey == rk)
			return shard, oldBlob, etagAt(etags, itemOp), nil
		}
		if !conflict(err) {
			return shard, "", "", fmt.Errorf("add %s: %w", it.ID, err)
		}
		if oneOffSent(replaced) != "" {
			tried = &replaced
		}
		lastErr = err
	}
	return shard, "", "", fmt.Errorf("add %s: still conflicting after %d attempts: %w", it.ID, retries, lastErr)
}

// replacedBlob returns the payload blob of cur, a row being replaced, to
// delete once the replace committed: none when a message or a run may
// still name it (blobNamedOut).
func replacedBlob(cur table.Entity, now time.Time) string {
	if blobNamedOut(cur, now) {
		return ""
	}
	blob, _, _ := cur.Props.StrictString(PropPayloadBlob)
	return blob
}

// sameContent reports whether a row found in the way of an insert holds
// exactly what the insert writes (want: every property of it, with the
// same value; the mover may have added its own since). Such a row is the
// insert's own, committed although its answer was lost — the SDK's retry
// then found it — or an identical schedule of the same id by another
// caller: either way the task asked for is scheduled, and Add answers as
// it would have the first time, instead of refusing the id as taken
// (found by the simulator: a schedule whose answer was lost reported
// "already scheduled" for the task it had just written).
//
// A workflow's marks are the task's progress, not what it is, and others
// add them (issue 38, seed 12185: a child began waiting for a task whose
// insert had lost its answer, and the retry refused the task it had
// written): Waiters (a task waits for this one) may be on the row without
// the insert's writing it, and Met (parents that ended) may hold more
// parents than the insert wrote.
func sameContent(want map[string]any, got table.Props) bool {
	for _, k := range contentProps {
		if _, ok := want[k]; !ok && got[k] != nil && k != PropWaiters && k != PropMet {
			return false // the row has what the insert does not write
		}
	}
	for k, v := range want {
		if strings.HasSuffix(k, table.TypeSuffix) || k == PropSendingUntil {
			continue
		}
		if k == PropMet {
			if met, _ := v.(string); !isSubset(splitIDs(met), splitIDs(got.Str(k))) {
				return false
			}
			continue
		}
		var same bool
		switch x := v.(type) {
		case string:
			same = got.Str(k) == x
		case bool:
			same = got.Bool(k) == x
		case int:
			same = got.Int(k) == int64(x)
		case int32:
			same = got.Int(k) == int64(x)
		case int64:
			same = got.Int(k) == x
		case time.Time:
			same = got.Time(k).Equal(x.UTC().Truncate(100 * time.Nanosecond))
		default:
			same = fmt.Sprint(got[k]) == fmt.Sprint(v)
		}
		if !same {
			return false
		}
	}
	return true
}

// isSubset reports whether every id of sub is in of.
func isSubset(sub, of []string) bool {
	for _, id := range sub {
		if !slices.Contains(of, id) {
			return false
		}
	}
	return true
}

// adoptSending keeps it.SendingUntil, on a row taken for its own after a
// lost answer (sameContent), only while the row still holds the
// SendingUntil it wrote. Another writer since (a RunNow, which rewrites
// the row to send it itself) sends it: a send of ours would carry the
// version that writer made, and the two senders' confirmations of one
// run would race, the loser taking back the winner's (issue 38, seed
// 6183: a ScheduleMany slowed for 25 s adopted the row a RunNow had
// rewritten meanwhile; its mark won the row, the RunNow's confirmation
// replaced its own on the run and was then taken back, and the mover
// retired the row marked sent: both messages were acknowledged as stale
// and the task never ran). Without a send of its own the caller leaves
// the row to that writer, or to the mover once the grace has passed.
func adoptSending(it *Item, row table.Props) {
	if !it.SendingUntil.IsZero() && !row.Time(PropSendingUntil).Equal(it.SendingUntil.UTC()) {
		it.SendingUntil = time.Time{}
	}
}

// contentProps are the properties that say what a task is (what
// itemProps writes, but the sender's SendingUntil and the mover's own).
var contentProps = []string{PropMessage, PropType, PropID, PropRecurrence, PropTZ, PropMaxAttempts, PropQueue, PropPriority, PropFairKey, PropPayloadBlob, PropTraceParent,
	PropUniqueKey, PropUniqueFor, PropUniqueState, PropAfter, PropAfterAny, PropMet, PropWaiting, PropWaiters, PropBatch, PropCallback}

// etagAt returns etags[i], or "" when the table did not tell.
func etagAt(etags []string, i int) string {
	if i < len(etags) {
		return etags[i]
	}
	return ""
}

// conflict reports errors that mean "changed meanwhile; read again".
func conflict(err error) bool {
	return errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrAlreadyExists)
}

func (c *Client) deleteBlob(ctx context.Context, ref string) {
	if c.opts.PayloadStore == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := c.opts.PayloadStore.Delete(dctx, ref); err != nil {
		c.opts.Logger.Warn("payload blob left behind", "ref", ref, "err", err)
	}
}

// homeOf returns the shard where id's task was placed under the previous
// shard count (prev), following a pointer there, or "" when it has none.
func (c *Client) homeOf(ctx context.Context, prev, id string) (string, error) {
	idx, err := c.t.Get(ctx, prev, indexKey(id))
	switch {
	case errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrTableNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("add %s: read id index in shard %s: %w", id, prev, err)
	}
	if home, _, _ := idx.Props.StrictString(PropShard); home != "" {
		return home, nil
	}
	return prev, nil
}
