package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/ctxlock"
	"github.com/leasecron/leasecron/internal/mutate"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
)

// Errors of AddMany, beside ErrInvalid and ErrAlreadyScheduled.
var (
	// ErrNotWritten: a valid item that was not written, because another
	// item of an all-or-nothing batch was refused or a storage call
	// failed; the error says which.
	ErrNotWritten = errors.New("not written")
	// ErrMovedBeforeRollback: an all-or-nothing batch failed part-way and
	// this item, already due, had been moved to the queue before it could
	// be taken back (see AddMany).
	ErrMovedBeforeRollback = errors.New("moved to the queue before the batch could be rolled back")
)

// DefaultBatchConcurrency is how many table transactions AddMany has in
// flight at once by default.
const DefaultBatchConcurrency = 8

// indexRowsPerTxn is how many id index rows, or item rows, one transaction
// of AddMany writes (the service's limit).
const indexRowsPerTxn = table.MaxOps

// AddManyOptions modify AddMany.
type AddManyOptions struct {
	// Partial writes every item that can be written and reports the
	// others. Without it, one invalid or duplicate item means nothing is
	// written.
	Partial bool
	// Concurrency is how many table transactions are in flight at once.
	// Default DefaultBatchConcurrency.
	Concurrency int
	// Sending and SendDueBy: the items due at or before SendDueBy (a
	// series: its first occurrence)
	// are written with AddOptions.Sending set to Sending (their messages
	// are sent by the caller; see MarkSent).
	Sending, SendDueBy time.Time
	// SendLimit, when positive, bounds how many items (the first in the
	// batch's order) are written with Sending; the rest are left to the
	// mover (the caller's budget under backpressure).
	SendLimit int
	// WaitedFor, when set, is called in a roll-back before it deletes a
	// written row that a task scheduled meanwhile marked as waited for
	// (Item.Waiters; NoteWaitersFound): the caller makes sure that such
	// tasks hear of the row's end, which no message will tell them.
	// leasecron has the traffic cop watch the id, which reads a task with
	// neither a row nor a run record as cancelled (issue 38, row 197: a
	// task waiting for a line of a rolled-back file waited for good).
	// When it fails, the row is left (its message tells them of its end)
	// and its item is reported ErrNotWritten, "written and could not be
	// deleted again".
	WaitedFor func(ctx context.Context, it Item) error
	// TookBack, when set, is called in a roll-back once it has deleted a
	// row handed to WaitedFor, before it deletes the id's index row (which
	// keeps the id from being scheduled anew meanwhile): the caller tells
	// the waiting tasks the item ended (leasecron: cancelled, as a cancel
	// of the row would). Not called for a row whose message may be out:
	// that item is reported ErrMovedBeforeRollback instead.
	TookBack func(ctx context.Context, it Item)
}

// AddResult is what became of one item given to AddMany.
type AddResult struct {
	// Item is the item as stored (with its generated id, shard and row
	// key), or as given when it was refused before that was known.
	Item Item
	// Err is nil when the item was written. Otherwise it wraps ErrInvalid
	// (refused by validation, or an id that appears twice in the batch),
	// ErrAlreadyScheduled (the id is pending already), ErrNotWritten or
	// ErrMovedBeforeRollback.
	Err error
}

// AddMany schedules items with table transactions: each writes up to 100
// rows of one shard, so a batch costs about two transactions per 100
// items (one for the id index rows, one for the item rows), plus one blob
// write per payload above the inline limit. It returns one result per item,
// in order, and an error wrapping ErrNotWritten when any item was not
// written.
//
// Items are validated first, all of them: without o.Partial, one invalid
// item means nothing is written at all. Then the id index rows are written
// — they make a duplicate id fail, and no mover ever reads them, so a
// refusal here is undone without any task having been visible — and only
// then the item rows, the latest due first. Without o.Partial, a duplicate
// id or a failed write undoes everything written so far. One thing cannot
// be undone: an item row that came due and was moved to the queue between
// its write and the undo; such items are reported with
// ErrMovedBeforeRollback (the caller can cancel their runs). With o.Partial,
// the items that can be written are, and each of the others says why not.
//
// AddMany does not replace pending tasks: an id that is already scheduled
// is refused (ErrAlreadyScheduled), whatever its due time.
func (c *Client) AddMany(ctx context.Context, items []Item, o AddManyOptions) ([]AddResult, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultBatchConcurrency
	}
	pl, err := c.place(ctx)
	if err != nil {
		return nil, err
	}
	b := &batch{c: c, o: o, res: make([]AddResult, len(items)), place: pl}
	b.validate(items, TraceParentOf(ctx))
	if !o.Partial && b.refused() > 0 {
		b.notWritten(b.live(), "another item of the batch was refused")
		return b.res, b.summary()
	}
	if err := b.home(ctx); err != nil {
		b.abort(ctx, err)
		return b.res, b.summary()
	}
	if err := b.storePayloads(ctx); err != nil && !o.Partial {
		b.abort(ctx, err)
		return b.res, b.summary()
	}
	if err := b.writeRows(ctx, b.indexChunks(), b.indexOps, b.resolveIndex, b.indexed, false); err != nil && !o.Partial {
		b.abort(ctx, err)
		return b.res, b.summary()
	}
	if err := b.writeRows(ctx, b.itemChunks(), b.itemOps, b.resolveItems, b.written, true); err != nil && !o.Partial {
		b.abort(ctx, err)
		return b.res, b.summary()
	}
	if o.Partial {
		b.settleMaybe(ctx)
		b.tidy(ctx)
	}
	landed := map[string]string{}
	for _, r := range b.res {
		if r.Err == nil && r.Item.Shard != "" {
			landed[r.Item.ID] = r.Item.Shard
		}
	}
	c.pointLanded(ctx, pl, landed)
	c.wakeOwners(ctx, b.res)
	return b.res, b.summary()
}

// batch is the state of one AddMany call. res holds every item's result;
// an item is live while its Err is nil.
type batch struct {
	c     *Client
	place placement
	o     AddManyOptions
	res   []AddResult

	mu      sync.Mutex
	indexed map[int]bool // index row written
	written map[int]bool // item row written
	// gone are the written items whose row was taken away before the
	// retry of its lost-answer transaction met the others
	// (resolveItems): nothing at their keys is this call's to take back.
	gone map[int]bool
	// maybe are the items whose item row's write failed without saying
	// whether it committed (a lost answer, a timeout, or the read that
	// was to tell failing): the row may be there.
	maybe map[int]bool
	blobs map[int]bool // payload blob stored
	// indexMaybe are the items whose id index row's write failed without
	// saying whether it committed: undo takes back those that are this
	// call's (token), which would otherwise hold the id for IndexingHold.
	indexMaybe map[int]bool
	// indexETags are the ETags of the id index rows written: a roll-back
	// deletes an index row only as written, not one a cancel of its
	// landed task deleted and another scheduling of the id wrote since.
	indexETags map[int]string
	// marked are the written items whose ETag was read from a row marked
	// as waited for already (resolveItems): a roll-back reads them again.
	marked map[int]bool
	// token names this call on its id index rows (PropIndexing), so that
	// another call's row of the same id and due time is not taken for its
	// own.
	token    string
	ensured  bool
	ensureMu ctxlock.Mutex
}

// validate prepares every item; refused ones get their Err. Items without
// a trace parent get tp, the caller's.
func (b *batch) validate(items []Item, tp string) {
	now := b.c.opts.Clock.Now()
	seen := make(map[string]int, len(items))
	sending := 0
	for i, it := range items {
		if it.TraceParent == "" {
			it.TraceParent = tp
		}
		p, err := b.c.prepare(it, now)
		if err != nil {
			b.res[i] = AddResult{Item: it, Err: err}
			continue
		}
		if j, dup := seen[p.ID]; dup {
			b.res[i] = AddResult{Item: p, Err: fmt.Errorf("%w: task id %q is also item %d of the batch", ErrInvalid, p.ID, j+1)}
			continue
		}
		seen[p.ID] = i
		rk, err := RowKey(rowDue(p), p.ID)
		if err != nil {
			b.res[i] = AddResult{Item: p, Err: fmt.Errorf("%w: %w", ErrInvalid, err)}
			continue
		}
		p.Shard, p.RowKey, p.Indexed = b.place.of(p.ID), rk, true
		if !p.Waiting && !b.o.Sending.IsZero() && !p.Due.After(b.o.SendDueBy) && (b.o.SendLimit <= 0 || sending < b.o.SendLimit) {
			p.SendingUntil = b.o.Sending
			sending++
		}
		b.res[i] = AddResult{Item: p}
	}
	b.indexed, b.written, b.blobs, b.maybe, b.gone = map[int]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}
	b.indexMaybe, b.indexETags, b.token = map[int]bool{}, map[int]string{}, newToken()
	b.marked = map[int]bool{}
}

// live returns the indexes of the items not refused so far.
func (b *batch) live() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for i, r := range b.res {
		if r.Err == nil {
			out = append(out, i)
		}
	}
	return out
}

func (b *batch) refused() int { return len(b.res) - len(b.live()) }

// fail records err for item i.
func (b *batch) fail(i int, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.res[i].Err == nil {
		b.res[i].Err = err
	}
}

// notWritten marks the items idx as not written, for why.
func (b *batch) notWritten(idx []int, why string) {
	for _, i := range idx {
		b.fail(i, fmt.Errorf("%w: %s", ErrNotWritten, why))
	}
}

// summary is AddMany's error: nil when every item was written.
func (b *batch) summary() error {
	n := b.refused()
	if n == 0 {
		return nil
	}
	var first error
	for _, r := range b.res {
		if r.Err != nil && !errors.Is(r.Err, ErrNotWritten) {
			first = r.Err
			break
		}
	}
	if first == nil {
		first = b.res[slices.IndexFunc(b.res, func(r AddResult) bool { return r.Err != nil })].Err
	}
	return fmt.Errorf("%w: %d of %d items (first: %w)", ErrNotWritten, n, len(b.res), first)
}

// ensure creates the table (and payload container) once, on first use.
func (b *batch) ensure(ctx context.Context) error {
	if err := b.ensureMu.LockContext(ctx); err != nil {
		return err
	}
	defer b.ensureMu.Unlock()
	if b.ensured {
		return nil
	}
	if err := b.c.Ensure(ctx); err != nil {
		return err
	}
	b.ensured = true
	return nil
}

// storePayloads puts every payload above the inline limit in a blob.
func (b *batch) storePayloads(ctx context.Context) error {
	var big []int
	for _, i := range b.live() {
		if jsonLen(b.res[i].Item.Payload) > b.c.opts.InlineLimit {
			big = append(big, i)
		}
	}
	return b.each(ctx, len(big), func(ctx context.Context, k int) error {
		i := big[k]
		it := b.res[i].Item
		name := payload.NewName(it.ID)
		ref, err := b.c.opts.PayloadStore.Put(ctx, name, []byte(it.Payload))
		if errors.Is(err, storage.ErrNotFound) {
			if err = b.ensure(ctx); err == nil {
				ref, err = b.c.opts.PayloadStore.Put(ctx, name, []byte(it.Payload))
			}
		}
		if err != nil {
			err = fmt.Errorf("%w: store the large payload of %s: %w", ErrNotWritten, it.ID, err)
			b.fail(i, err)
			return err
		}
		b.mu.Lock()
		b.res[i].Item.PayloadBlob, b.res[i].Item.Payload = ref, ""
		b.blobs[i] = true
		b.mu.Unlock()
		return nil
	})
}

// each runs f for 0..n-1 with o.Concurrency at once. Without o.Partial the
// first error cancels the rest and is returned; with it every f runs and
// the first error is returned.
func (b *batch) each(ctx context.Context, n int, f func(ctx context.Context, k int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, b.o.Concurrency)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for k := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(ctx, k); err != nil {
				once.Do(func() {
					first = err
					if !b.o.Partial {
						cancel()
					}
				})
			}
		}()
	}
	wg.Wait()
	return first
}

// chunk is up to indexRowsPerTxn items of one shard.
type chunk struct {
	shard string
	items []int
}

// chunks groups the live items by shard, in the order given, into chunks
// of at most indexRowsPerTxn.
func chunks(b *batch, order []int) []chunk {
	byShard := map[string][]int{}
	var shards []string
	for _, i := range order {
		s := b.res[i].Item.Shard
		if _, ok := byShard[s]; !ok {
			shards = append(shards, s)
		}
		byShard[s] = append(byShard[s], i)
	}
	var out []chunk
	for _, s := range shards {
		for part := range slices.Chunk(byShard[s], indexRowsPerTxn) {
			out = append(out, chunk{shard: s, items: part})
		}
	}
	return out
}

// indexChunks are the id index rows to write, in item order.
func (b *batch) indexChunks() []chunk { return chunks(b, b.live()) }

// itemChunks are the item rows to write, the latest due first: if the
// batch fails part-way, what was written is what comes due last, and has
// the least chance of being moved before it is taken back.
func (b *batch) itemChunks() []chunk {
	order := b.live()
	slices.SortStableFunc(order, func(x, y int) int { return b.res[y].Item.Due.Compare(b.res[x].Item.Due) })
	return chunks(b, order)
}

// IndexingHold is how long after AddMany writes an id index row its item
// row is taken to be possibly on its way (PropIndexing): a task scheduled
// under the id meanwhile — one call's `schedule --replace` beside
// another's `schedule --file` — is refused as a duplicate instead of
// taking the index row over and leaving AddMany's row, written after it,
// unindexed beside its own (issue 38, sim seed 50668: the orphan row was
// cancelled by a bulk cancel of its type, and the record of the task,
// which had succeeded, said cancelled). A call that crashed between the
// two leaves its ids refused until then.
const IndexingHold = 10 * time.Minute

// indexOps inserts the id index rows of ch.
func (b *batch) indexOps(ch chunk) []table.Op {
	ops := make([]table.Op, len(ch.items))
	until := b.c.opts.Clock.Now().Add(IndexingHold).UTC().Format(time.RFC3339Nano) + " " + b.token
	for k, i := range ch.items {
		it := b.res[i].Item
		ops[k] = table.Op{Kind: table.Insert, PartitionKey: ch.shard, RowKey: indexKey(it.ID), Props: map[string]any{PropItem: it.RowKey, PropID: it.ID, PropIndexing: until}}
	}
	return ops
}

// indexMark reads the mark AddMany leaves on an id index row
// (PropIndexing: "{until} {token}"): until when its item row may still
// be on its way, and the token of the call (zero and "" for a row
// written another way).
func indexMark(idx table.Entity) (until time.Time, token string) {
	v, _, _ := idx.Props.StrictString(PropIndexing)
	at, token, _ := strings.Cut(v, " ")
	until, _ = time.Parse(time.RFC3339Nano, at)
	return until, token
}

// indexing reports whether idx is an id index row whose item row AddMany
// may still be writing.
func indexing(idx table.Entity, now time.Time) bool {
	until, _ := indexMark(idx)
	return now.Before(until)
}

// othersYoung reports whether idx is another AddMany call's id index row
// whose item row may still be on its way.
func (b *batch) othersYoung(idx table.Entity) bool {
	until, tok := indexMark(idx)
	return tok != b.token && b.c.opts.Clock.Now().Before(until)
}

// itemOps inserts the item rows of ch.
func (b *batch) itemOps(ch chunk) []table.Op {
	ops := make([]table.Op, len(ch.items))
	for k, i := range ch.items {
		it := b.res[i].Item
		ops[k] = table.Op{Kind: table.Insert, PartitionKey: ch.shard, RowKey: it.RowKey, Props: itemProps(it, true)}
	}
	return ops
}

// writeRows writes the chunks, o.Concurrency transactions at once, and
// records each written item in done. A transaction refused because a row
// is in the way is resolved: resolve marks the items that are really
// duplicates and returns the chunk without them, to be tried again —
// without o.Partial a duplicate ends the batch instead. Other failures mark
// the chunk's items not written and, without o.Partial, end the batch.
// With isItems the chunks are the item rows, whose new ETags go into the
// results.
func (b *batch) writeRows(ctx context.Context, cs []chunk, ops func(chunk) []table.Op, resolve func(context.Context, chunk) (chunk, error), done map[int]bool, isItems bool) error {
	return b.each(ctx, len(cs), func(ctx context.Context, k int) error {
		ch := cs[k]
		for range retries {
			if len(ch.items) == 0 {
				return nil
			}
			etags, err := b.c.t.Submit(ctx, ops(ch))
			if errors.Is(err, storage.ErrTableNotFound) {
				if err = b.ensure(ctx); err == nil {
					etags, err = b.c.t.Submit(ctx, ops(ch))
				}
			}
			if err == nil {
				b.mu.Lock()
				for k, i := range ch.items {
					done[i] = true
					if isItems {
						b.res[i].Item.ETag = etagAt(etags, k)
					} else {
						b.indexETags[i] = etagAt(etags, k)
					}
				}
				b.mu.Unlock()
				return nil
			}
			if !errors.Is(err, storage.ErrAlreadyExists) {
				b.notWritten(ch.items, err.Error())
				b.mayBeWritten(ch.items, isItems, done)
				return err
			}
			rest, rerr := resolve(ctx, ch)
			if rerr != nil {
				b.notWritten(ch.items, rerr.Error())
				b.mayBeWritten(ch.items, isItems, done)
				return rerr
			}
			// A resolve may find rows that are the chunk's own and record
			// them written (resolveItems).
			owned := 0
			b.mu.Lock()
			for _, i := range ch.items {
				if done[i] {
					owned++
				}
			}
			b.mu.Unlock()
			if len(rest.items)+owned < len(ch.items) && !b.o.Partial {
				return fmt.Errorf("%w: the batch holds an id that is already scheduled", ErrAlreadyScheduled)
			}
			ch = rest
		}
		err := fmt.Errorf("rows kept changing under %d attempts", retries)
		b.notWritten(ch.items, err.Error())
		return err
	})
}

// mayBeWritten notes the item rows of idx not known written as maybe
// written (isItems: idx are item rows): a transaction that failed may
// have committed, its answer lost, and a read after an "already exists"
// may have failed (issue 38, seed 5527: a batch answered "not written"
// for 14 items whose rows were there, and two of them ran).
func (b *batch) mayBeWritten(idx []int, isItems bool, done map[int]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, i := range idx {
		switch {
		case done[i]:
		case isItems:
			b.maybe[i] = true
		default:
			// An index row alone makes no task, but holds the id
			// (PropIndexing): undo takes it back if it is this call's.
			b.indexMaybe[i] = true
		}
	}
}

// readRow reads item it's row, and reports whether it is its own: it
// holds exactly what the item writes (sameContent, as Add decides).
func (b *batch) readRow(ctx context.Context, it Item) (row table.Entity, own bool, err error) {
	row, err = b.c.t.Get(ctx, it.Shard, it.RowKey)
	return row, err == nil && sameContent(itemProps(it, true), row.Props), err
}

// undoMaybe deletes, in a roll-back, item i's row if it was written after
// all (its transaction's answer was lost): a row holding exactly what the
// item writes, deleted on its ETag. One that holds something else is
// another writer's and stays. What cannot be read or deleted, or is gone
// (never written, or moved to the queue already), is said in the item's
// error; it reports whether the row may stand (it could not be read or
// deleted), when the item's id index row stays with it.
func (b *batch) undoMaybe(ctx context.Context, i int) (stands bool) {
	b.mu.Lock()
	it, rerr := b.res[i].Item, b.res[i].Err
	b.mu.Unlock()
	if rerr != nil && !errors.Is(rerr, ErrNotWritten) {
		return false // refused for a reason of its own: the row in the way is not its
	}
	got, own, err := b.readRow(ctx, it)
	if err == nil && !own {
		// Another writer's row stands at its key; this item's, written
		// after all, may have been sent before it was replaced.
		b.keepBlob(i)
		return false
	}
	if err == nil {
		err = b.deleteRead(ctx, i, got) // (a lost answer is read back)
	}
	if errors.Is(err, storage.ErrNotFound) {
		// Written, and moved within the schedule since (as settleUndone
		// finds): taken back where it is now.
		if own, idx := b.ownDelete(ctx, it); !own && idx.RowKey != "" {
			err = b.takeBackMoved(ctx, i, idx)
		}
	}
	switch {
	case errors.Is(err, errMovedOut):
		b.mu.Lock()
		b.res[i].Err = fmt.Errorf("%w: task %s", ErrMovedBeforeRollback, it.ID)
		b.mu.Unlock()
		return false
	case errors.Is(err, errNotOwn):
		b.keepBlob(i)
		return false
	}
	var why string
	if err != nil {
		b.keepBlob(i) // not known gone: it may stand, or have been moved
	}
	switch {
	case err == nil:
		return false // written after all, and taken back
	case errors.Is(err, storage.ErrNotFound):
		why = "its row is not there: it was not written, or was moved to the queue already"
		if it.Recurrence != "" {
			// Moved, a series goes on under a new row its index row
			// points to: stopped, as a written one is.
			_, _ = b.c.Cancel(ctx, it.ID)
		}
	default:
		b.c.opts.Logger.Warn("a row of a rolled-back batch that may have been written could not be taken back", "task_id", it.ID, "err", err)
		why = "it may have been written, and its row could not be taken back: " + err.Error()
		stands = true
	}
	b.mu.Lock()
	b.res[i].Err = fmt.Errorf("%w: task %s: the answer to its write was lost and %s", ErrNotWritten, it.ID, why)
	b.mu.Unlock()
	return stands
}

// errNotOwn is deleteRead's answer for a row that, read again, holds
// what another writer wrote: it stays.
var errNotOwn = errors.New("the row holds another writer's task")

// deleteRead deletes, in a roll-back, the row got of item i, read as the
// item's own, on its ETag. A row marked as waited for is handed to
// o.WaitedFor first, and to o.TookBack once gone (tookBack); a row changed
// in between (marked, or sent early) is read again and deleted as it is
// then, while it stays the item's own: one that holds what another writer
// wrote answers errNotOwn. A row whose message may be out answers
// errMovedOut once deleted (tookBack).
func (b *batch) deleteRead(ctx context.Context, i int, got table.Entity) error {
	b.mu.Lock()
	it := b.res[i].Item
	b.mu.Unlock()
	for range retries {
		waited, err := b.waitedFor(ctx, it, got)
		if err != nil {
			return err
		}
		err = b.deleteRow(ctx, it, it.RowKey, got.ETag)
		if err == nil && b.tookBack(ctx, i, readItem(got), waited) {
			return errMovedOut
		}
		if !errors.Is(err, storage.ErrPreconditionFailed) {
			return err
		}
		var own bool
		if got, own, err = b.readRow(ctx, it); err != nil {
			return err
		}
		if !own {
			return errNotOwn
		}
	}
	return fmt.Errorf("its row kept changing under %d attempts", retries)
}

// waitedFor hands it to o.WaitedFor when row, about to be deleted by a
// roll-back, is marked as waited for, and reports whether it did.
func (b *batch) waitedFor(ctx context.Context, it Item, row table.Entity) (bool, error) {
	if !row.Props.Bool(PropWaiters) || b.o.WaitedFor == nil {
		return false, nil
	}
	if err := b.o.WaitedFor(ctx, it); err != nil {
		return false, fmt.Errorf("others wait for it, and making sure they hear of its end failed: %w", err)
	}
	return true, nil
}

// tookBack follows a roll-back's delete of item i's row, gone as row: its
// payload blob is kept when the row's message may be out (sent early, or
// being sent by the mover as it comes due: the task may run once, README
// "Nothing half-applied"), which it reports; otherwise the tasks waiting
// for a row handed to WaitedFor (waited) are told through o.TookBack.
func (b *batch) tookBack(ctx context.Context, i int, row Item, waited bool) (out bool) {
	now := b.c.opts.Clock.Now()
	if blobMayBeNamed(row, now) {
		b.keepBlob(i) // (a series' occurrence too: row 199's review)
	}
	if messageMayBeOut(row) || MayHaveRun(row, now) {
		return true
	}
	if waited && b.o.TookBack != nil {
		b.mu.Lock()
		it := b.res[i].Item
		b.mu.Unlock()
		b.o.TookBack(ctx, it)
	}
	return false
}

// takeBackChanged deletes, in a roll-back, item i's row whose delete on
// the ETag it was written with failed: it changed since (a task scheduled
// --after it marked it, or its message was sent early), or its ETag is
// not known or was read from a row marked already. It is read and
// deleted as it is now (deleteRead).
func (b *batch) takeBackChanged(ctx context.Context, i int) error {
	b.mu.Lock()
	it := b.res[i].Item
	b.mu.Unlock()
	got, own, err := b.readRow(ctx, it)
	switch {
	case err != nil:
		return err
	case !own:
		return errNotOwn
	}
	return b.deleteRead(ctx, i, got)
}

// settleMaybe reads, after a partial batch, the item rows that may have
// been written: a row holding what the item writes is its own (the item
// is written after all); a row that cannot be read leaves the item
// reported as maybe scheduled, its index row and payload kept.
func (b *batch) settleMaybe(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	b.mu.Lock()
	var idx []int
	for i := range b.maybe {
		if !b.written[i] && errors.Is(b.res[i].Err, ErrNotWritten) {
			idx = append(idx, i)
		}
	}
	b.mu.Unlock()
	for _, i := range idx {
		it := b.res[i].Item
		got, own, err := b.readRow(ctx, it)
		b.mu.Lock()
		switch {
		case own:
			b.written[i] = true
			b.res[i].Item.ETag, b.res[i].Err = got.ETag, nil
		case err != nil && !errors.Is(err, storage.ErrNotFound):
			b.written[i] = true // kept: tidy leaves its index row and payload
			b.res[i].Err = fmt.Errorf("%w: task %s may be scheduled: its write's answer was lost and its row could not be read: %w", ErrNotWritten, it.ID, err)
		}
		b.mu.Unlock()
	}
}

// resolveIndex finds out which index rows of ch are in the way: an id whose
// task is pending is a duplicate; an index row whose item row is gone is
// stale and is deleted (as Add takes such a row over).
func (b *batch) resolveIndex(ctx context.Context, ch chunk) (chunk, error) {
	rest := chunk{shard: ch.shard}
	for _, i := range ch.items {
		it := b.res[i].Item
		idx, err := b.c.t.Get(ctx, ch.shard, indexKey(it.ID))
		switch {
		case errors.Is(err, storage.ErrNotFound):
			rest.items = append(rest.items, i)
			continue
		case err != nil:
			return ch, fmt.Errorf("read the id index of %s: %w", it.ID, err)
		}
		// A pointer: the id's task was placed in another shard under an
		// earlier shard count.
		stale := idx
		home, hidx, gone, err := b.c.follow(ctx, ch.shard, idx)
		switch {
		case err != nil:
			return ch, err
		case gone:
			home = ch.shard // the pointer itself is stale
		default:
			idx = hidx
		}
		oldRK, _, _ := idx.Props.StrictString(PropItem)
		if oldRK != "" {
			_, err = b.c.t.Get(ctx, home, oldRK)
		} else {
			err = storage.ErrNotFound
		}
		switch {
		case err == nil:
			due, _, _ := ParseRowKey(oldRK)
			b.fail(i, fmt.Errorf("%w: task %s (due %s)", ErrAlreadyScheduled, it.ID, due.Format(time.RFC3339Nano)))
		case errors.Is(err, storage.ErrNotFound) && b.othersYoung(idx):
			// Another AddMany under way is still to write its row, of
			// whatever due time (this call's own index row, committed
			// although its answer was lost, carries its token and is
			// taken back below).
			b.fail(i, fmt.Errorf("%w: task %s is being scheduled by another call (a ScheduleMany or schedule --file under way)", ErrAlreadyScheduled, it.ID))
		case errors.Is(err, storage.ErrNotFound):
			_, derr := b.c.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: ch.shard, RowKey: stale.RowKey, IfMatch: stale.ETag}})
			if derr != nil && !conflict(derr) {
				return ch, fmt.Errorf("remove the stale id index of %s: %w", it.ID, derr)
			}
			rest.items = append(rest.items, i)
		default:
			return ch, fmt.Errorf("read %s: %w", it.ID, err)
		}
	}
	return rest, nil
}

// resolveItems finds the item rows of ch that are in the way: a row with
// the same id and due time written without an index (by another program)
// makes its item a duplicate. A row holding exactly what the item writes
// is its own (sameContent, as Add decides): a transaction that committed
// although its answer was lost, met again by the SDK's retry (issue 38,
// seed 1059: a 904-line batch answered "already scheduled" for its own
// rows and was refused whole).
func (b *batch) resolveItems(ctx context.Context, ch chunk) (chunk, error) {
	rest := chunk{shard: ch.shard}
	type read struct {
		got      table.Entity
		own      bool
		notFound bool
	}
	reads := make([]read, len(ch.items))
	committed := false // a row of the chunk is its own: the transaction committed
	for k, i := range ch.items {
		got, own, err := b.readRow(ctx, b.res[i].Item)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			reads[k].notFound = true
		case err != nil:
			return ch, fmt.Errorf("read %s: %w", b.res[i].Item.ID, err)
		}
		reads[k].got, reads[k].own = got, own
		committed = committed || own
	}
	for k, i := range ch.items {
		it, got := b.res[i].Item, reads[k].got
		switch {
		case reads[k].notFound && committed:
			gone, err := b.landedAndGone(ctx, ch.shard, it)
			if err != nil {
				return ch, err
			}
			if !gone {
				rest.items = append(rest.items, i)
				continue
			}
			// The transaction committed (its answer lost; a transaction
			// is all or nothing, and another row of it is here), and this
			// row was taken away since: cancelled, told of a parent's
			// end, moved. Writing it again would bring back a task a
			// cancel has answered for, with nothing left to tell it its
			// parents' ends (issue 38, sim seed 161494: a child
			// cancelled with its parent came back and waited for good).
			b.mu.Lock()
			b.written[i], b.gone[i] = true, true
			b.res[i].Item.ETag = ""
			b.res[i].Item.SendingUntil = time.Time{} // nothing to send
			b.mu.Unlock()
		case reads[k].notFound:
			rest.items = append(rest.items, i)
		case reads[k].own:
			b.mu.Lock()
			b.written[i] = true
			b.res[i].Item.ETag = got.ETag
			// Marked as waited for since its write (sameContent allows
			// it): a roll-back deleting on this ETag would not see it.
			b.marked[i] = got.Props.Bool(PropWaiters)
			adoptSending(&b.res[i].Item, got.Props)
			b.mu.Unlock()
		default:
			b.fail(i, fmt.Errorf("%w: task %s (due %s)", ErrAlreadyScheduled, it.ID, it.Due.Format(time.RFC3339Nano)))
		}
	}
	return rest, nil
}

// landedAndGone reports whether the item row of it, missing although its
// transaction committed, was taken away since: its id index row, which
// this call wrote before the item rows, is gone, names another row (moved
// within the schedule) or carries another call's token (an item row is
// removed with its index row).
func (b *batch) landedAndGone(ctx context.Context, shard string, it Item) (bool, error) {
	idx, err := b.c.t.Get(ctx, shard, indexKey(it.ID))
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("read the id index of %s: %w", it.ID, err)
	}
	rk, _, _ := idx.Props.StrictString(PropItem)
	_, token := indexMark(idx)
	return rk != it.RowKey || token != b.token, nil
}

// undoTimeout bounds the clean-up after a failed batch or change
// (undoWithdrawals), which runs even when the caller's context has ended.
const undoTimeout = 2 * time.Minute

// abort ends an all-or-nothing batch that failed with cause: everything
// written is taken back, and every item not refused for a reason of its
// own is reported not written.
func (b *batch) abort(ctx context.Context, cause error) {
	keep := func(int) bool { return false }
	if mutate.On(mutate.KeepRolledBack) {
		keep = func(i int) bool { return b.written[i] || b.maybe[i] }
	}
	b.undo(ctx, true, keep)
	b.notWritten(b.live(), "the batch was rolled back: "+cause.Error())
}

// tidy removes, after a partial batch, the index rows and blobs of the
// items whose item row was not written.
func (b *batch) tidy(ctx context.Context) {
	b.undo(ctx, false, func(i int) bool { return b.written[i] })
}

// undo deletes what the batch wrote for every item that keep (called with
// b.mu held) does not keep: its item row (when rows), its id index row and
// its payload blob. It runs even when ctx has ended.
func (b *batch) undo(ctx context.Context, rows bool, keep func(i int) bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	now := b.c.opts.Clock.Now()
	b.mu.Lock()
	var written, unknown, maybe, index, indexMaybe, blobs []int
	for i := range b.res {
		if keep(i) {
			continue
		}
		switch {
		case rows && b.gone[i] && b.o.WaitedFor == nil:
			// Taken away before the batch met it again, and without run
			// records nothing says what it became: whatever stands at its
			// key now is not this call's, and stays.
		case rows && b.written[i] && (b.res[i].Item.ETag == "" || b.marked[i]) && b.o.WaitedFor != nil:
			unknown = append(unknown, i) // whether it is marked is read
		case rows && b.written[i]:
			written = append(written, i)
		case rows && b.maybe[i]:
			maybe = append(maybe, i)
		}
		if b.indexed[i] {
			index = append(index, i)
		} else if b.indexMaybe[i] {
			indexMaybe = append(indexMaybe, i)
		}
		if rows && b.written[i] && blobMayBeNamed(b.res[i].Item, now.Add(undoTimeout)) {
			// A row due by now may be in the queue though its delete
			// goes through: a traffic-cop pass sends a row before it
			// retires it (README: reported not written, the task may
			// run once), and it would run without its payload (issue
			// 38, row 193's remainder). (Due by the undo's end: its
			// deletes take up to undoTimeout.) A series line's blob is
			// always kept: a pass sends its occurrences unmarked as far
			// ahead as the series window (blobMayBeNamed).
			delete(b.blobs, i)
		}
		if b.blobs[i] && (rows || !b.maybe[i]) {
			// (After a partial batch, an item whose write's answer was
			// lost and whose row was not found may have been moved to
			// the queue already: its blob is kept.)
			blobs = append(blobs, i)
		}
	}
	b.mu.Unlock()
	// A task row that is gone was moved to the queue: its item is
	// reported with ErrMovedBeforeRollback, and a recurring series is
	// cancelled so that the occurrence the mover inserted does not go on.
	//
	// A row is deleted on the ETag it was written with: one changed since
	// may have been marked as waited for, and is read and taken back as
	// it is now (takeBackChanged), its waiting tasks told first — and so
	// is one whose ETag the transaction's answer did not give.
	//
	// A line waiting for another line of the batch is taken back before
	// that parent, deepest first: a parent marked as waited for is
	// handed to WaitedFor as it is taken back, and the watch that finds
	// it gone takes it for ended, which releases a child waiting
	// --after-any, to run before its own row was reached (issue 38, sim
	// seed 142826, row 234).
	stands := map[int]bool{} // rows left standing, whose id index rows stay
	failed := func(i int, err error) {
		if b.settleUndone(ctx, i, err) {
			stands[i] = true
		}
	}
	depth := b.parentsWithin()
	deepest := 0
	for _, d := range depth {
		deepest = max(deepest, d)
	}
	for d := deepest; d >= 0; d-- {
		at := func(i int) bool { return depth[i] == d }
		b.deleteEach(ctx, itemsWhere(written, at), func(i int) (string, string) {
			b.mu.Lock()
			defer b.mu.Unlock()
			return b.res[i].Item.RowKey, b.res[i].Item.ETag
		}, failed)
		for _, i := range itemsWhere(unknown, at) {
			failed(i, storage.ErrPreconditionFailed)
		}
		for _, i := range itemsWhere(maybe, at) {
			if b.undoMaybe(ctx, i) {
				stands[i] = true
			}
		}
	}
	// An index row is deleted as written: one changed since is a cancel's
	// or reschedule's of the task once it landed, or another scheduling's
	// of the id since, and stays. So does one whose row stands: the id's
	// lookups and its refusal as a duplicate go through it.
	index = slices.DeleteFunc(index, func(i int) bool { return stands[i] })
	indexMaybe = slices.DeleteFunc(indexMaybe, func(i int) bool { return stands[i] })
	b.deleteEach(ctx, index, func(i int) (string, string) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return indexKey(b.res[i].Item.ID), b.indexETags[i]
	}, func(i int, err error) {
		if !errors.Is(err, storage.ErrNotFound) && !conflict(err) {
			b.c.opts.Logger.Warn("an id index row of a rolled-back batch is left behind", "task_id", b.res[i].Item.ID, "err", err)
		}
	})
	for _, i := range indexMaybe {
		b.undoIndexMaybe(ctx, i)
	}
	for _, i := range blobs {
		b.mu.Lock()
		drop := b.blobs[i]
		b.mu.Unlock()
		if drop {
			b.c.deleteBlob(ctx, b.res[i].Item.PayloadBlob)
		}
	}
}

// parentsWithin returns, for each item that waits for other items of the
// batch, how many items of the batch it waits for, directly or through
// them (a child has more than each of its parents); items that wait for
// none are left out (0).
func (b *batch) parentsWithin() map[int]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	byID := make(map[string]int, len(b.res))
	for i, r := range b.res {
		byID[r.Item.ID] = i
	}
	depth := map[int]int{}
	for i, r := range b.res {
		if len(r.Item.After) == 0 {
			continue
		}
		seen := map[int]bool{}
		next := []int{i}
		for len(next) > 0 {
			j := next[len(next)-1]
			next = next[:len(next)-1]
			for _, p := range b.res[j].Item.After {
				if k, ok := byID[p]; ok && k != i && !seen[k] {
					seen[k] = true
					next = append(next, k)
				}
			}
		}
		if len(seen) > 0 {
			depth[i] = len(seen)
		}
	}
	return depth
}

// itemsWhere returns the items of l that keep keeps, in l's order.
func itemsWhere(l []int, keep func(i int) bool) []int {
	var out []int
	for _, i := range l {
		if keep(i) {
			out = append(out, i)
		}
	}
	return out
}

// settleUndone settles item i, whose row's delete in a roll-back failed
// with err, and reports whether its row stands (its id index row then
// stays with it):
//   - refused as changed (its ETag), it is read and taken back as it is
//     now (takeBackChanged), or left as another writer's;
//   - an error that says nothing (a lost answer) is read back: a row gone
//     counts as not found;
//   - not found, it was taken back by this roll-back's own delete whose
//     answer was lost (ownDelete), moved within the schedule and is taken
//     back there (takeBackMoved), or moved to the queue: its item is
//     reported ErrMovedBeforeRollback, its blob kept, and a series
//     cancelled so that the occurrence the mover inserted does not go on.
func (b *batch) settleUndone(ctx context.Context, i int, err error) (stands bool) {
	b.mu.Lock()
	it := b.res[i].Item
	b.mu.Unlock()
	if errors.Is(err, storage.ErrPreconditionFailed) {
		err = b.takeBackChanged(ctx, i)
	}
	if err != nil && !errors.Is(err, storage.ErrNotFound) && !errors.Is(err, errNotOwn) && !errors.Is(err, errMovedOut) {
		if _, gerr := b.c.t.Get(ctx, it.Shard, it.RowKey); errors.Is(gerr, storage.ErrNotFound) {
			err = gerr
		}
	}
	if errors.Is(err, storage.ErrNotFound) {
		own, idx := b.ownDelete(ctx, it)
		switch {
		case own:
			return false // taken back by the chunk's delete, whose answer was lost
		case idx.RowKey != "":
			err = b.takeBackMoved(ctx, i, idx)
		}
	}
	switch {
	case err == nil:
		return false
	case errors.Is(err, errNotOwn):
		b.keepBlob(i) // another writer's row stands
		return false
	}
	b.keepBlob(i) // its row stands, or was moved to the queue
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, errMovedOut) {
		if it.Recurrence != "" {
			_, _ = b.c.Cancel(ctx, it.ID)
		}
		b.fail(i, fmt.Errorf("%w: task %s", ErrMovedBeforeRollback, it.ID))
		return false
	}
	b.c.opts.Logger.Warn("a row of a rolled-back batch could not be deleted", "task_id", it.ID, "err", err)
	b.fail(i, fmt.Errorf("%w: task %s was written and could not be deleted again: %w", ErrNotWritten, it.ID, err))
	return true
}

// ownDelete reports whether the row of it, which a roll-back's delete
// found gone, was taken by the roll-back itself: a delete of its chunk
// that committed with its answer lost (the SDK's retry, and the delete of
// each row after it, then find nothing). The mover removes a row together
// with its id index row, which the roll-back deletes only afterwards: the
// index row still there says the mover did not. A read that fails says
// nothing, and the row counts as moved.
//
// An index row that points to another row of the id and still carries
// this call's token says the row was moved within the schedule since its
// write — released once its parents ended, rescheduled, run now — and it
// is returned, for takeBackMoved (a review of row 197's fix: such a line
// was taken for taken back, and ran with its payload blob deleted).
func (b *batch) ownDelete(ctx context.Context, it Item) (own bool, moved table.Entity) {
	idx, err := b.c.t.Get(ctx, it.Shard, indexKey(it.ID))
	if err != nil {
		return false, table.Entity{}
	}
	if rk, _, _ := idx.Props.StrictString(PropItem); rk != it.RowKey {
		// (A series' row moved is the mover's next occurrence, inserted
		// once it sent this one: moved to the queue.)
		if _, tok := indexMark(idx); tok == b.token && rk != "" && it.Recurrence == "" {
			return false, idx
		}
		return false, table.Entity{}
	}
	return true, table.Entity{}
}

// takeBackMoved deletes, in a roll-back, item i's row moved within the
// schedule since its write (idx, its id index row, points to it), then
// its index row, each on the ETag read: a row marked as waited for is
// handed to o.WaitedFor first and to o.TookBack in between. A row whose
// message may be out (run now, released and sent, or due and being sent
// by the mover) answers errMovedOut, its blob kept and its item's Due and
// RowKey now the moved row's, for the caller to record its run cancelled.
// A row gone from there too (moved to the queue) answers ErrNotFound; an
// index row that no longer carries this call's token, errNotOwn.
func (b *batch) takeBackMoved(ctx context.Context, i int, idx table.Entity) error {
	b.mu.Lock()
	it := b.res[i].Item
	b.mu.Unlock()
	for range retries {
		rk, _, _ := idx.Props.StrictString(PropItem)
		if _, tok := indexMark(idx); tok != b.token || rk == "" {
			return errNotOwn // the id's index row is another scheduling's now
		}
		row, err := b.c.t.Get(ctx, it.Shard, rk)
		if err == nil {
			var waited bool
			if waited, err = b.waitedFor(ctx, it, row); err != nil {
				return err
			}
			if err = b.deleteRow(ctx, it, rk, row.ETag); err == nil {
				moved := readItem(row)
				out := b.tookBack(ctx, i, moved, waited)
				b.dropIndex(ctx, it, rk)
				if out {
					b.mu.Lock()
					b.res[i].Item.Due, b.res[i].Item.RowKey = moved.Due, moved.RowKey
					b.mu.Unlock()
					return errMovedOut
				}
				return nil
			}
		}
		if !conflict(err) {
			return err
		}
		// Moved again, or changed: the index row tells where it is now.
		if idx, err = b.c.t.Get(ctx, it.Shard, idx.RowKey); err != nil {
			return err
		}
	}
	return fmt.Errorf("its row kept changing under %d attempts", retries)
}

// deleteRow deletes it's row rk on etag. A delete that answers an error
// saying nothing of its outcome (a lost answer), or that its retry found
// the row gone, committed when the row is gone and the id's index row
// still names it: the mover removes the two together.
func (b *batch) deleteRow(ctx context.Context, it Item, rk, etag string) error {
	_, err := b.c.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: it.Shard, RowKey: rk, IfMatch: etag}})
	if err == nil || errors.Is(err, storage.ErrPreconditionFailed) {
		return err
	}
	if _, gerr := b.c.t.Get(ctx, it.Shard, rk); !errors.Is(gerr, storage.ErrNotFound) {
		return err
	}
	idx, ierr := b.c.t.Get(ctx, it.Shard, indexKey(it.ID))
	if named, _, _ := idx.Props.StrictString(PropItem); ierr == nil && named == rk {
		return nil
	}
	return err
}

// dropIndex deletes it's id index row after takeBackMoved deleted the row
// rk it names, while it still carries this call's token and names rk: the
// roll-back's own delete of index rows holds the ETag from before the
// move, and would leave it to hold the id for IndexingHold.
func (b *batch) dropIndex(ctx context.Context, it Item, rk string) {
	for range retries {
		idx, err := b.c.t.Get(ctx, it.Shard, indexKey(it.ID))
		if err != nil {
			return // gone, or left to the roll-back's own delete
		}
		named, _, _ := idx.Props.StrictString(PropItem)
		if _, tok := indexMark(idx); tok != b.token || named != rk {
			return
		}
		_, err = b.c.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: it.Shard, RowKey: idx.RowKey, IfMatch: idx.ETag}})
		if err == nil || errors.Is(err, storage.ErrNotFound) {
			return
		}
	}
	b.c.opts.Logger.Warn("the id index row of a rolled-back task is left behind; the id is refused as being scheduled until it lapses", "task_id", it.ID)
}

// errMovedOut is takeBackMoved's answer for a row it deleted whose
// message may be out: its item is reported ErrMovedBeforeRollback.
var errMovedOut = errors.New("moved, and its message may be out")

// keepBlob keeps item i's payload blob through a roll-back: its row may
// stand, or have been moved to the queue, and its task would run without
// it. A blob nobody names costs storage only.
func (b *batch) keepBlob(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.blobs, i)
}

// undoIndexMaybe deletes item i's id index row if this call wrote it (its
// token) after all: its write's answer was lost.
func (b *batch) undoIndexMaybe(ctx context.Context, i int) {
	it := b.res[i].Item
	idx, err := b.c.t.Get(ctx, it.Shard, indexKey(it.ID))
	if _, tok := indexMark(idx); err != nil || tok != b.token {
		return
	}
	if _, err := b.c.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: it.Shard, RowKey: idx.RowKey, IfMatch: idx.ETag}}); err != nil && !errors.Is(err, storage.ErrNotFound) {
		b.c.opts.Logger.Warn("an id index row of a rolled-back batch is left behind; the id is refused as being scheduled until it lapses", "task_id", it.ID, "err", err)
	}
}

// deleteEach deletes the row key(i) of every item of idx if its ETag is
// still the one key gives ("" for any), a transaction per chunk; a
// transaction that fails is redone a row at a time, and failed hears of
// each row that could not be deleted.
func (b *batch) deleteEach(ctx context.Context, idx []int, key func(i int) (rk, etag string), failed func(i int, err error)) {
	for _, ch := range chunks(b, idx) {
		ops := make([]table.Op, len(ch.items))
		for k, i := range ch.items {
			rk, etag := key(i)
			ops[k] = table.Op{Kind: table.Delete, PartitionKey: ch.shard, RowKey: rk, IfMatch: etag}
		}
		if _, err := b.c.t.Submit(ctx, ops); err == nil {
			continue
		}
		for k, i := range ch.items {
			if _, err := b.c.t.Submit(ctx, ops[k:k+1]); err != nil {
				failed(i, err)
			}
		}
	}
}

// home sends each item whose id a task already holds in the shard the
// previous shard count placed it in (while the count changes, maybe
// without a pointer yet) to that shard, where its index row refuses it
// as for any pending id. One read per such item, only while the count
// changes.
func (b *batch) home(ctx context.Context) error {
	if b.place.prev == nil {
		return nil
	}
	for _, i := range b.live() {
		it := b.res[i].Item
		prev, ok := b.place.prevOf(it.ID)
		if !ok {
			continue
		}
		h, err := b.c.homeOf(ctx, prev, it.ID)
		if err != nil {
			return err
		}
		if h != "" {
			b.mu.Lock()
			b.res[i].Item.Shard = h
			b.mu.Unlock()
		}
	}
	return nil
}
