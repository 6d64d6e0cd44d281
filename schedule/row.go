package schedule

import (
	"fmt"
	"time"

	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/queue"
)

// Property names of ScheduledItems rows: the public row schema.
const (
	PropMessage     = "Message"     // payload (string)
	PropType        = "Type"        // handler type, "default" if absent
	PropRecurrence  = "Recurrence"  // optional recurrence rule
	PropTZ          = "TZ"          // optional IANA zone for cron rules
	PropID          = "Id"          // optional; the RowKey suffix otherwise
	PropAttempts    = "Attempts"    // optional bookkeeping
	PropMaxAttempts = "MaxAttempts" // optional retry limit
	PropQueue       = "Queue"       // optional named queue (queue.ValidateRouteQueue)
	PropPriority    = "Priority"    // optional priority, 1 (critical) to 4 (low)
	PropFairKey     = "FairKey"     // optional fairness key (a tenant)
	PropPayloadBlob = "PayloadBlob" // claim-check reference of a large payload
	PropIndexed     = "Indexed"     // true when an id index row exists
	PropItem        = "Item"        // index rows: the RowKey of the item row
	// PropIndexing is on an id index row AddMany wrote before its item
	// row: until then (IndexingHold after the write) the item row may
	// still be on its way, so a missing item row does not make the index
	// row stale — a schedule of the id is refused as a duplicate, not
	// written beside the row still to come.
	PropIndexing = "Indexing"
	// PropShard is on a pointer: an id index row in the shard an id
	// belongs to under the current shard count, naming the shard where
	// the task was placed under an earlier count (and its index row is).
	PropShard       = "Shard"
	PropGeneration  = "Generation"  // fence row: the current leader generation
	PropTraceParent = "TraceParent" // optional W3C traceparent of the trace that scheduled it
	PropUniqueKey   = "UniqueKey"   // the unique key the task holds (its guard row is uq~{type}~{key})
	PropSent        = "Sent"        // written by the mover: token of the messages sent early
	PropSentUntil   = "SentUntil"   // written by the mover: a series' last occurrence sent early
	PropSeq         = "Seq"         // written by the mover: how many occurrences of a series it has sent
	// PropSendingUntil is written by a client that sends a task due now
	// itself: until then the mover leaves the row alone (the client marks
	// it Sent once the message is in the queue; if it dies first, the row
	// is moved as any other once the time has passed).
	PropSendingUntil = "SendingUntil"
	// PropConfirmed is written with PropSent by a client that sent a
	// one-off task due now and recorded its run queued with the token
	// (the run records' Confirm): equal to PropSent, the mover moves the
	// row without confirming the run again; a change of the row through
	// Client takes the confirmation back (Options.Unconfirm).
	PropConfirmed = "Confirmed"
	// PropCancelling is written by a cancel that tells others of a
	// one-off task's end (its batch, the tasks waiting for it) before it
	// removes the row: until then (CancelHold after the cancel began) the
	// mover leaves the row to the cancel, which deletes it once they have
	// heard; a cancel that stops before telling anyone takes it off again.
	PropCancelling = "Cancelling"
)

// CancelHold is how long a cancel that tells others of a task's end before
// it removes the task's row (PropCancelling) holds the row from the mover:
// the task of a cancel that died in between is moved as any other once it
// has passed.
const CancelHold = 2 * time.Minute

// Reserved row keys. Item rows start with 19 digits; the id index rows
// ("id~{id}") and the fence row ("~fence") start with letters or '~', which
// sort after every digit, so a due-time range never selects them.
const (
	// IndexPrefix starts the RowKey of an id index row.
	IndexPrefix = "id~"
	// FenceRowKey is the RowKey of a shard's fence row.
	FenceRowKey = "~fence"
	// indexEnd and guardEnd are the exclusive ends of the id index rows'
	// range and the unique guards' ("uq~…").
	indexEnd = "ie"
	guardEnd = "ur"
)

// indexKey is the RowKey of id's index row.
func indexKey(id string) string { return IndexPrefix + id }

// parsedRow is an item row read from the table.
type parsedRow struct {
	e       table.Entity
	item    Item
	rec     Recurrence
	indexed bool
	// sent is the token of messages the mover sent early for this row
	// (PropSent); sentUntil the last occurrence they cover (a series).
	sent      string
	sentUntil time.Time
	// confirmed is PropConfirmed: the token the sender confirmed on the
	// run record (a one-off task sent by its client).
	confirmed string
	// seq is how many occurrences of a series the mover has sent
	// (PropSeq): the next one sent is seq+1.
	seq int64
}

// parseRow interprets an item row. A non-nil error is the reason the row is
// malformed; the returned row then still carries what could be read.
func parseRow(e table.Entity) (parsedRow, error) {
	r := parsedRow{e: e, indexed: e.Props.Bool(PropIndexed)}
	it := &r.item
	it.Shard, it.RowKey, it.Indexed = e.PartitionKey, e.RowKey, r.indexed
	it.Type = DefaultType
	due, suffix, err := ParseRowKey(e.RowKey)
	if err != nil {
		it.ID = e.RowKey
		return r, err
	}
	it.Due, it.ID = due, suffix
	if id, ok, err := e.Props.StrictString(PropID); err != nil {
		return r, err
	} else if ok && id != "" {
		it.ID = id
	}
	msg, hasMsg, err := e.Props.StrictString(PropMessage)
	if err != nil {
		return r, err
	}
	it.Payload = msg
	blob, hasBlob, err := e.Props.StrictString(PropPayloadBlob)
	if err != nil {
		return r, err
	}
	it.PayloadBlob = blob
	if !hasMsg && (!hasBlob || blob == "") {
		return r, fmt.Errorf("row has no %s property (the payload; use \"\" for none)", PropMessage)
	}
	if typ, ok, err := e.Props.StrictString(PropType); err != nil {
		return r, err
	} else if ok && typ != "" {
		it.Type = typ
		if err := ValidateType(typ); err != nil {
			return r, err
		}
	}
	if it.Recurrence, _, err = e.Props.StrictString(PropRecurrence); err != nil {
		return r, err
	}
	if it.TZ, _, err = e.Props.StrictString(PropTZ); err != nil {
		return r, err
	}
	if r.rec, err = ParseRecurrence(it.Recurrence, it.TZ); err != nil {
		return r, err
	}
	if uk, _, err := e.Props.StrictString(PropUniqueKey); err == nil {
		it.UniqueKey = uk
		it.UniqueFor = time.Duration(e.Props.Int(PropUniqueFor)) * time.Second
		it.UniqueStates, _ = ParseUniqueStates(e.Props.Str(PropUniqueState))
	}
	// A trace context that cannot be read is dropped, not a reason to set
	// the task aside: tracing is never worth a lost task.
	if tp, _, err := e.Props.StrictString(PropTraceParent); err == nil && ValidTraceParent(tp) {
		it.TraceParent = tp
	}
	if r.sent, _, err = e.Props.StrictString(PropSent); err != nil {
		return r, err
	}
	r.confirmed = e.Props.Str(PropConfirmed)
	// A sending mark that cannot be read is ignored: the row is then moved
	// as any other (at worst a duplicate, which the run claim suppresses).
	if s, _, err := e.Props.StrictString(PropSendingUntil); err == nil && s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			it.SendingUntil = t.UTC()
		}
	}
	if s, _, err := e.Props.StrictString(PropCancelling); err == nil && s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			it.CancellingUntil = t.UTC()
		}
	}
	it.ETag = e.ETag
	// A disabled series waits at MaxTime; it shows the due time it had.
	if s, _, err := e.Props.StrictString(PropDisabled); err == nil && s != "" {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			it.Disabled = t.UTC()
		}
		if s, _, err := e.Props.StrictString(PropDisabledDue); err == nil {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				it.Due = t.UTC()
			}
		}
	}
	it.Sent = r.sent != ""
	readFlow(e, it)
	if s, ok, err := e.Props.StrictString(PropSentUntil); err != nil {
		return r, err
	} else if ok && s != "" {
		if r.sentUntil, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return r, fmt.Errorf("property %s is %q, want an RFC 3339 time", PropSentUntil, s)
		}
		it.SentUntil = r.sentUntil
	}
	// A sequence number that cannot be read restarts at 0: it only spreads
	// a series' latest occurrences over the summary slots of its run
	// records, never worth setting a series aside.
	if n, _, err := e.Props.StrictInt(PropSeq); err == nil && n > 0 {
		r.seq = n
	}
	if n, _, err := e.Props.StrictInt(PropAttempts); err != nil {
		return r, err
	} else if n < 0 || n > 1<<31-1 {
		return r, fmt.Errorf("property %s is %d, want 0 or more", PropAttempts, n)
	} else {
		it.Attempts = int(n)
	}
	if n, _, err := e.Props.StrictInt(PropMaxAttempts); err != nil {
		return r, err
	} else if n < 0 || n > MaxMaxAttempts {
		return r, fmt.Errorf("property %s is %d, want 0..%d", PropMaxAttempts, n, MaxMaxAttempts)
	} else {
		it.MaxAttempts = int(n)
	}
	if it.Queue, _, err = e.Props.StrictString(PropQueue); err != nil {
		return r, err
	} else if err := queue.ValidateRouteQueue(it.Queue); err != nil {
		return r, fmt.Errorf("property %s: %w", PropQueue, err)
	}
	if it.FairKey, _, err = e.Props.StrictString(PropFairKey); err != nil {
		return r, err
	} else if err := queue.ValidateFairKey(it.FairKey); err != nil {
		return r, fmt.Errorf("property %s: %w", PropFairKey, err)
	}
	if n, _, err := e.Props.StrictInt(PropPriority); err != nil {
		return r, err
	} else if n < 0 || n > queue.Levels {
		return r, fmt.Errorf("property %s is %d: want 1 (critical), 2 (high), 3 (default) or 4 (low)", PropPriority, n)
	} else {
		it.Priority = int(n)
	}
	// Ids travel in run ids, blob names and messages: a row inserted
	// directly with one outside Add's set (a space, a quote, an '@' that
	// would pass for a series occurrence's run id) is malformed.
	if err := ValidateID(it.ID); err != nil {
		return r, err
	}
	return r, nil
}

// readItem converts a row for Get and List: malformed rows come back with
// Problem set instead of an error.
func readItem(e table.Entity) Item {
	r, err := parseRow(e)
	if err != nil {
		r.item.Problem = err.Error()
	}
	return r.item
}

// itemProps builds the properties of an item row written by leasecron.
func itemProps(it Item, indexed bool) map[string]any {
	p := map[string]any{
		PropMessage: it.Payload,
		PropType:    it.Type,
		PropID:      it.ID,
	}
	if it.Recurrence != "" {
		p[PropRecurrence] = it.Recurrence
	}
	if it.TZ != "" {
		p[PropTZ] = it.TZ
	}
	if it.MaxAttempts > 0 {
		p[PropMaxAttempts] = it.MaxAttempts
	}
	if it.Queue != "" {
		p[PropQueue] = it.Queue
	}
	if it.Priority != 0 {
		p[PropPriority] = it.Priority
	}
	if it.FairKey != "" {
		p[PropFairKey] = it.FairKey
	}
	if it.PayloadBlob != "" {
		p[PropPayloadBlob] = it.PayloadBlob
	}
	if it.TraceParent != "" {
		p[PropTraceParent] = it.TraceParent
	}
	if it.UniqueKey != "" {
		p[PropUniqueKey] = it.UniqueKey
		if it.UniqueFor > 0 {
			p[PropUniqueFor] = int64(it.UniqueFor / time.Second)
		}
		if len(it.UniqueStates) > 0 {
			p[PropUniqueState] = joinStates(it.UniqueStates)
		}
	}
	if !it.SendingUntil.IsZero() {
		p[PropSendingUntil] = it.SendingUntil.UTC().Format(time.RFC3339Nano)
	}
	if indexed {
		p[PropIndexed] = true
	}
	flowProps(it, p)
	return p
}

// runID is the queue envelope id of one run: the task id for a one-off task,
// "{series}@{due RFC 3339 UTC}" for an occurrence of a recurring series.
func runID(id string, due time.Time, recurring bool) string {
	if !recurring {
		return id
	}
	return id + "@" + due.UTC().Format(time.RFC3339Nano)
}
