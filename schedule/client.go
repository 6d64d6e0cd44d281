package schedule

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/storage"
)

// Defaults of Options.
const (
	DefaultTable       = "ScheduledItems"
	DefaultShard       = "00"
	DefaultMaxPayload  = 1 << 20
	DefaultInlineLimit = 24 << 10
	// MaxInlineLimit keeps an inline payload within both a table string
	// property (64 KiB of UTF-16) and a base64-encoded 64 KiB queue message.
	MaxInlineLimit = 32 << 10
	// MaxPayloadLimit is the largest Options.MaxPayload accepted (the
	// default payload.BlobStore reads at most this much).
	MaxPayloadLimit  = payload.DefaultMaxSize
	DefaultScanLimit = 100_000
	// retries bounds the optimistic-concurrency retries of one call.
	retries = 5
)

// Options configures a Client. Zero values mean the documented defaults,
// filled in by fill.
type Options struct {
	// Table is the table name NewAzure opens. Default "ScheduledItems".
	Table string
	// Shards are the PartitionKeys items are spread over (by a hash of the
	// id). Default ["00"]. Every worker and client must agree on the list.
	Shards []string
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// PayloadStore holds payloads larger than InlineLimit (claim check).
	// Nil: such payloads are refused with ErrPayloadTooLarge.
	PayloadStore payload.Store
	// MaxPayload is the largest payload accepted, in bytes (config
	// payload.max_size). Default 1 MiB, at most 64 MiB.
	MaxPayload int
	// InlineLimit is the largest payload, measured as a JSON string, kept
	// inline in the row and the queue message; larger ones go to
	// PayloadStore. Default 24 KiB, at most 32 KiB.
	InlineLimit int
	// ScanLimit bounds how many rows a lookup by id scans when the id has
	// no index row (rows inserted directly by other clients). Default
	// 100000.
	ScanLimit int
}

func (o *Options) fill() error {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := storage.ValidateTableName(o.Table); err != nil {
		return fmt.Errorf("schedule.Options.Table: %w", err)
	}
	if len(o.Shards) == 0 {
		o.Shards = []string{DefaultShard}
	}
	seen := map[string]bool{}
	for _, s := range o.Shards {
		if err := validateShard(s); err != nil {
			return err
		}
		if seen[s] {
			return fmt.Errorf("schedule.Options.Shards: %q appears twice", s)
		}
		seen[s] = true
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxPayload == 0 {
		o.MaxPayload = DefaultMaxPayload
	}
	if o.MaxPayload < 0 || o.MaxPayload > MaxPayloadLimit {
		return fmt.Errorf("schedule.Options.MaxPayload %d: want 1..%d bytes (0 means %d)", o.MaxPayload, MaxPayloadLimit, DefaultMaxPayload)
	}
	if o.InlineLimit == 0 {
		o.InlineLimit = DefaultInlineLimit
	}
	if o.InlineLimit < 0 || o.InlineLimit > MaxInlineLimit {
		return fmt.Errorf("schedule.Options.InlineLimit %d: want 1..%d bytes (0 means %d)", o.InlineLimit, MaxInlineLimit, DefaultInlineLimit)
	}
	if o.ScanLimit == 0 {
		o.ScanLimit = DefaultScanLimit
	}
	if o.ScanLimit < 0 {
		return fmt.Errorf("schedule.Options.ScanLimit %d: want a positive row count (0 means %d)", o.ScanLimit, DefaultScanLimit)
	}
	return nil
}

func validateShard(s string) error {
	if err := storage.ValidateKeyPart("shard", s); err != nil {
		return fmt.Errorf("schedule.Options.Shards: %w", err)
	}
	if strings.ContainsAny(s, "'") || len(s) > 64 {
		return fmt.Errorf("schedule.Options.Shards: shard %q: want at most 64 characters and no quote", s)
	}
	return nil
}

// Client reads and writes the ScheduledItems table: add, get, cancel,
// reschedule, list. It is safe for concurrent use.
type Client struct {
	t    Table
	opts Options
}

// New returns a Client over t.
func New(t Table, o Options) (*Client, error) {
	if t == nil {
		return nil, errors.New("schedule.New: nil Table")
	}
	if err := o.fill(); err != nil {
		return nil, err
	}
	return &Client{t: t, opts: o}, nil
}

// NewAzure returns a Client over the table Options.Table of the account svc
// points at. The table (and the payload container) are created on first
// use: Add creates them when they are missing, and List, Due and the
// lookups treat a missing table as an empty schedule. Ensure creates them
// up front.
func NewAzure(svc *aztables.ServiceClient, o Options) (*Client, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	t, err := NewAzureTable(svc, o.Table)
	if err != nil {
		return nil, err
	}
	return New(t, o)
}

// Ensure creates the table (and the payload container) when the
// implementations support it.
func (c *Client) Ensure(ctx context.Context) error {
	if cr, ok := c.t.(interface{ Create(context.Context) error }); ok {
		if err := cr.Create(ctx); err != nil {
			return err
		}
	}
	if en, ok := c.opts.PayloadStore.(interface{ Ensure(context.Context) error }); ok {
		if err := en.Ensure(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Table returns the storage seam the client uses (to share it with a Mover).
func (c *Client) Table() Table { return c.t }

// Shards returns the PartitionKeys in use.
func (c *Client) Shards() []string { return append([]string(nil), c.opts.Shards...) }

// shardFor picks the partition an id lives in.
func (c *Client) shardFor(id string) string {
	if len(c.opts.Shards) == 1 {
		return c.opts.Shards[0]
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return c.opts.Shards[h.Sum32()%uint32(len(c.opts.Shards))]
}

// AddOptions modify Add.
type AddOptions struct {
	// Replace lets Add overwrite a pending task with the same id (its due
	// time, payload and recurrence are replaced atomically).
	Replace bool
}

// Prepare validates it as Add would and returns it with defaults filled
// (generated id, "default" type, due in UTC truncated to 100 ns). Nothing
// is written.
func (c *Client) Prepare(it Item) (Item, error) {
	return c.prepare(it, c.opts.Clock.Now())
}

func (c *Client) prepare(it Item, now time.Time) (Item, error) {
	out := Item{ID: it.ID, Type: it.Type, Payload: it.Payload, Recurrence: strings.TrimSpace(it.Recurrence), TZ: strings.TrimSpace(it.TZ), MaxAttempts: it.MaxAttempts}
	if out.ID == "" {
		out.ID = NewID(now)
	}
	if err := ValidateID(out.ID); err != nil {
		return Item{}, err
	}
	if out.Type == "" {
		out.Type = DefaultType
	}
	if err := ValidateType(out.Type); err != nil {
		return Item{}, err
	}
	if it.Due.IsZero() {
		return Item{}, fmt.Errorf("%w: task %s has no due time (set Due; the CLI takes --at or --in)", ErrInvalid, out.ID)
	}
	if err := checkDue(it.Due); err != nil {
		return Item{}, fmt.Errorf("%w: task %s: %v", ErrInvalid, out.ID, err)
	}
	out.Due = FromTicks(Ticks(it.Due))
	if _, err := ParseRecurrence(out.Recurrence, out.TZ); err != nil {
		return Item{}, fmt.Errorf("%w: task %s: %w", ErrInvalid, out.ID, err)
	}
	if out.MaxAttempts < 0 || out.MaxAttempts > MaxMaxAttempts {
		return Item{}, fmt.Errorf("%w: task %s: max attempts %d: want 0 (worker default) .. %d", ErrInvalid, out.ID, out.MaxAttempts, MaxMaxAttempts)
	}
	if !utf8.ValidString(out.Payload) {
		return Item{}, fmt.Errorf("%w: task %s: payload is not valid UTF-8; encode binary data as base64", ErrInvalid, out.ID)
	}
	if len(out.Payload) > c.opts.MaxPayload {
		return Item{}, fmt.Errorf("%w: %w: task %s: payload is %d bytes, the limit (payload.max_size) is %d", ErrInvalid, ErrPayloadTooLarge, out.ID, len(out.Payload), c.opts.MaxPayload)
	}
	if jsonLen(out.Payload) > c.opts.InlineLimit && c.opts.PayloadStore == nil {
		return Item{}, fmt.Errorf("%w: %w: task %s: payload is %d bytes as JSON, more than the inline limit %d, and no payload store is configured", ErrInvalid, ErrPayloadTooLarge, out.ID, jsonLen(out.Payload), c.opts.InlineLimit)
	}
	return out, nil
}

// Add schedules it. Invalid items are refused with an error wrapping
// ErrInvalid before anything is written. An id that is already scheduled
// (through leasecron) is refused with ErrAlreadyScheduled unless
// ao.Replace. The row and its id index row are written in one transaction;
// a payload above the inline limit is stored in a blob first, and deleted
// again if the table write fails. It returns the item as stored.
func (c *Client) Add(ctx context.Context, it Item, ao AddOptions) (Item, error) {
	it, err := c.prepare(it, c.opts.Clock.Now())
	if err != nil {
		return Item{}, err
	}
	shard := c.shardFor(it.ID)
	rk, err := RowKey(it.Due, it.ID)
	if err != nil {
		return Item{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	it.Shard, it.RowKey, it.Indexed = shard, rk, true
	if jsonLen(it.Payload) > c.opts.InlineLimit {
		name := payload.NewName(it.ID)
		ref, err := c.opts.PayloadStore.Put(ctx, name, []byte(it.Payload))
		if errors.Is(err, storage.ErrNotFound) {
			// First use: the payload container does not exist yet.
			if eerr := c.Ensure(ctx); eerr != nil {
				return Item{}, fmt.Errorf("add %s: create the payload container: %w", it.ID, eerr)
			}
			ref, err = c.opts.PayloadStore.Put(ctx, name, []byte(it.Payload))
		}
		if err != nil {
			return Item{}, fmt.Errorf("add %s: store large payload: %w", it.ID, err)
		}
		it.PayloadBlob, it.Payload = ref, ""
	}
	oldBlob, err := c.add(ctx, shard, rk, it, ao)
	if err != nil {
		if it.PayloadBlob != "" {
			c.deleteBlob(ctx, it.PayloadBlob)
		}
		return Item{}, err
	}
	if oldBlob != "" && oldBlob != it.PayloadBlob {
		c.deleteBlob(ctx, oldBlob)
	}
	return it, nil
}

// add writes the rows; it returns the payload blob of a replaced item.
func (c *Client) add(ctx context.Context, shard, rk string, it Item, ao AddOptions) (string, error) {
	props := itemProps(it, true)
	ixProps := map[string]any{PropItem: rk, PropID: it.ID}
	ik := indexKey(it.ID)
	fresh := []Op{
		{Kind: OpInsert, PartitionKey: shard, RowKey: rk, Props: props},
		{Kind: OpInsert, PartitionKey: shard, RowKey: ik, Props: ixProps},
	}
	var lastErr error
	created := false
	for range retries {
		err := c.t.Submit(ctx, fresh)
		if err == nil {
			return "", nil
		}
		if errors.Is(err, storage.ErrTableNotFound) && !created {
			// First use on this account: create the table, then write.
			if err := c.Ensure(ctx); err != nil {
				return "", fmt.Errorf("add %s: create the schedule table: %w", it.ID, err)
			}
			created = true
			err = c.t.Submit(ctx, fresh)
			if err == nil {
				return "", nil
			}
		}
		if !errors.Is(err, storage.ErrAlreadyExists) {
			return "", fmt.Errorf("add %s: %w", it.ID, err)
		}
		lastErr = err
		// Something is in the way: the index row, or an unindexed row with
		// the same id and due time.
		var ops []Op
		var oldBlob string
		idx, err := c.t.Get(ctx, shard, ik)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			cur, err := c.t.Get(ctx, shard, rk)
			if errors.Is(err, storage.ErrNotFound) {
				continue // gone meanwhile; try again
			} else if err != nil {
				return "", fmt.Errorf("add %s: %w", it.ID, err)
			}
			if !ao.Replace {
				return "", fmt.Errorf("%w: task %s (due %s)", ErrAlreadyScheduled, it.ID, it.Due.Format(time.RFC3339Nano))
			}
			oldBlob, _, _ = propString(cur.Props, PropPayloadBlob)
			ops = []Op{
				{Kind: OpReplace, PartitionKey: shard, RowKey: rk, Props: props, IfMatch: cur.ETag},
				{Kind: OpInsert, PartitionKey: shard, RowKey: ik, Props: ixProps},
			}
		case err != nil:
			return "", fmt.Errorf("add %s: read id index: %w", it.ID, err)
		default:
			oldRK, _, _ := propString(idx.Props, PropItem)
			var cur Entity
			if oldRK != "" {
				cur, err = c.t.Get(ctx, shard, oldRK)
			} else {
				err = storage.ErrNotFound
			}
			switch {
			case errors.Is(err, storage.ErrNotFound): // a stale index row: take it over
				ops = []Op{
					{Kind: OpInsert, PartitionKey: shard, RowKey: rk, Props: props},
					{Kind: OpReplace, PartitionKey: shard, RowKey: ik, Props: ixProps, IfMatch: idx.ETag},
				}
			case err != nil:
				return "", fmt.Errorf("add %s: %w", it.ID, err)
			case !ao.Replace:
				due, _, _ := ParseRowKey(oldRK)
				return "", fmt.Errorf("%w: task %s (due %s)", ErrAlreadyScheduled, it.ID, due.Format(time.RFC3339Nano))
			case oldRK == rk:
				oldBlob, _, _ = propString(cur.Props, PropPayloadBlob)
				ops = []Op{
					{Kind: OpReplace, PartitionKey: shard, RowKey: rk, Props: props, IfMatch: cur.ETag},
					{Kind: OpReplace, PartitionKey: shard, RowKey: ik, Props: ixProps, IfMatch: idx.ETag},
				}
			default:
				oldBlob, _, _ = propString(cur.Props, PropPayloadBlob)
				ops = []Op{
					{Kind: OpDelete, PartitionKey: shard, RowKey: oldRK, IfMatch: cur.ETag},
					{Kind: OpInsert, PartitionKey: shard, RowKey: rk, Props: props},
					{Kind: OpReplace, PartitionKey: shard, RowKey: ik, Props: ixProps, IfMatch: idx.ETag},
				}
			}
		}
		err = c.t.Submit(ctx, ops)
		if err == nil {
			return oldBlob, nil
		}
		if !conflict(err) {
			return "", fmt.Errorf("add %s: %w", it.ID, err)
		}
		lastErr = err
	}
	return "", fmt.Errorf("add %s: still conflicting after %d attempts: %w", it.ID, retries, lastErr)
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
		c.opts.Logger.Warn("leasecron: payload blob left behind", "ref", ref, "err", err)
	}
}

// found is an item row located by id, with its index row when it has one.
type found struct {
	row   Entity
	index *Entity
}

// locate finds the pending row of id: through the id index when there is
// one, else by scanning the item rows (directly inserted rows have no
// index). orphan is an index row whose item is gone.
func (c *Client) locate(ctx context.Context, id string) (f found, orphan *Entity, err error) {
	if err := validateLookupID(id); err != nil {
		return found{}, nil, err
	}
	shard := c.shardFor(id)
	if ValidateID(id) == nil {
		idx, err := c.t.Get(ctx, shard, indexKey(id))
		switch {
		case errors.Is(err, storage.ErrTableNotFound):
			return found{}, nil, noTable(id)
		case err == nil:
			rk, _, _ := propString(idx.Props, PropItem)
			if rk != "" {
				row, err := c.t.Get(ctx, shard, rk)
				if err == nil {
					return found{row: row, index: &idx}, nil, nil
				}
				if !errors.Is(err, storage.ErrNotFound) {
					return found{}, nil, fmt.Errorf("read task %s: %w", id, err)
				}
			}
			orphan = &idx
		case !errors.Is(err, storage.ErrNotFound):
			return found{}, nil, fmt.Errorf("read id index of %s: %w", id, err)
		}
	}
	row, err := c.scan(ctx, id)
	if err != nil {
		return found{}, orphan, err
	}
	return found{row: row}, orphan, nil
}

// scan looks for an unindexed row of id: RowKey suffix or Id property equal
// to id. It reads at most ScanLimit rows.
func (c *Client) scan(ctx context.Context, id string) (Entity, error) {
	scanned := 0
	for _, shard := range c.opts.Shards {
		q := Query{Partition: shard, To: IndexPrefix, Select: []string{PropID}}
		for {
			p, err := c.t.Query(ctx, q)
			if errors.Is(err, storage.ErrTableNotFound) {
				return Entity{}, noTable(id)
			}
			if err != nil {
				return Entity{}, fmt.Errorf("look up task %s: %w", id, err)
			}
			for _, e := range p.Entities {
				_, suffix, perr := ParseRowKey(e.RowKey)
				pid, _, _ := propString(e.Props, PropID)
				if (perr == nil && suffix == id && pid == "") || pid == id {
					full, err := c.t.Get(ctx, shard, e.RowKey)
					if errors.Is(err, storage.ErrNotFound) {
						continue
					}
					if err != nil {
						return Entity{}, fmt.Errorf("read task %s: %w", id, err)
					}
					return full, nil
				}
			}
			scanned += len(p.Entities)
			if p.Continuation == "" {
				break
			}
			if scanned >= c.opts.ScanLimit {
				return Entity{}, fmt.Errorf("%w: task %s (no id index; gave up after scanning %d rows, Options.ScanLimit)", ErrNotFound, id, scanned)
			}
			q.Continuation = p.Continuation
		}
	}
	return Entity{}, fmt.Errorf("%w: task %s", ErrNotFound, id)
}

// noTable is the lookup error when the table does not exist yet (a fresh
// account): nothing is scheduled.
func noTable(id string) error {
	return fmt.Errorf("%w: task %s (nothing has been scheduled yet: the table does not exist)", ErrNotFound, id)
}

// Get returns the pending task with this id (for a recurring series, its
// next occurrence). Unknown ids fail with ErrNotFound.
func (c *Client) Get(ctx context.Context, id string) (Item, error) {
	f, _, err := c.locate(ctx, id)
	if err != nil {
		return Item{}, err
	}
	return readItem(f.row), nil
}

// Cancel deletes the pending task with this id (a recurring series stops)
// together with its index row, atomically, and then its payload blob. It
// returns the item as it was. Unknown ids fail with ErrNotFound. A run
// already moved to the queue is not recalled.
func (c *Client) Cancel(ctx context.Context, id string) (Item, error) {
	var lastErr error
	for range retries {
		f, orphan, err := c.locate(ctx, id)
		if err != nil {
			if orphan != nil && errors.Is(err, ErrNotFound) {
				// Tidy a stale index row; a failure here changes nothing.
				_ = c.t.Submit(ctx, []Op{{Kind: OpDelete, PartitionKey: orphan.PartitionKey, RowKey: orphan.RowKey, IfMatch: orphan.ETag}})
			}
			return Item{}, err
		}
		ops := []Op{{Kind: OpDelete, PartitionKey: f.row.PartitionKey, RowKey: f.row.RowKey, IfMatch: f.row.ETag}}
		if f.index != nil {
			ops = append(ops, Op{Kind: OpDelete, PartitionKey: f.index.PartitionKey, RowKey: f.index.RowKey, IfMatch: f.index.ETag})
		}
		err = c.t.Submit(ctx, ops)
		if err == nil {
			it := readItem(f.row)
			if it.PayloadBlob != "" {
				c.deleteBlob(ctx, it.PayloadBlob)
			}
			return it, nil
		}
		if !conflict(err) {
			return Item{}, fmt.Errorf("cancel %s: %w", id, err)
		}
		lastErr = err
	}
	return Item{}, fmt.Errorf("cancel %s: still conflicting after %d attempts: %w", id, retries, lastErr)
}

// Reschedule moves the pending task with this id to a new due time: the new
// row is inserted, the old one deleted and the index updated in one
// transaction. For a recurring series this moves its next occurrence.
func (c *Client) Reschedule(ctx context.Context, id string, due time.Time) (Item, error) {
	if due.IsZero() {
		return Item{}, fmt.Errorf("%w: reschedule %s: no due time given", ErrInvalid, id)
	}
	if err := checkDue(due); err != nil {
		return Item{}, fmt.Errorf("%w: reschedule %s: %v", ErrInvalid, id, err)
	}
	var lastErr error
	for range retries {
		f, _, err := c.locate(ctx, id)
		if err != nil {
			return Item{}, err
		}
		_, suffix, err := ParseRowKey(f.row.RowKey)
		if err != nil {
			return Item{}, fmt.Errorf("%w: reschedule %s: the row is malformed: %v", ErrInvalid, id, err)
		}
		newRK, err := RowKey(due, suffix)
		if err != nil {
			return Item{}, fmt.Errorf("%w: reschedule %s: %v", ErrInvalid, id, err)
		}
		if newRK == f.row.RowKey {
			return readItem(f.row), nil
		}
		moved := Entity{PartitionKey: f.row.PartitionKey, RowKey: newRK, Props: f.row.Props}
		ops := []Op{
			{Kind: OpInsert, PartitionKey: moved.PartitionKey, RowKey: newRK, Props: copyProps(f.row.Props)},
			{Kind: OpDelete, PartitionKey: f.row.PartitionKey, RowKey: f.row.RowKey, IfMatch: f.row.ETag},
		}
		if f.index != nil {
			ops = append(ops, Op{Kind: OpMerge, PartitionKey: f.index.PartitionKey, RowKey: f.index.RowKey, Props: map[string]any{PropItem: newRK}, IfMatch: f.index.ETag})
		}
		err = c.t.Submit(ctx, ops)
		if err == nil {
			return readItem(moved), nil
		}
		if !conflict(err) {
			return Item{}, fmt.Errorf("reschedule %s: %w", id, err)
		}
		lastErr = err
	}
	return Item{}, fmt.Errorf("reschedule %s: still conflicting after %d attempts: %w", id, retries, lastErr)
}

// LoadPayload returns an item's payload, fetching it from the payload store
// when it was stored as a blob.
func (c *Client) LoadPayload(ctx context.Context, it Item) (string, error) {
	if it.PayloadBlob == "" {
		return it.Payload, nil
	}
	if c.opts.PayloadStore == nil {
		return "", fmt.Errorf("task %s: payload is in blob %s and no payload store is configured", it.ID, it.PayloadBlob)
	}
	b, err := c.opts.PayloadStore.Get(ctx, it.PayloadBlob)
	if err != nil {
		return "", fmt.Errorf("task %s: %w", it.ID, err)
	}
	return string(b), nil
}

// ListOptions select what List returns.
type ListOptions struct {
	// Due lists only rows due now (by the client's clock).
	Due bool
	// Limit is the page size. Default 100, at most 1000.
	Limit int
	// Continuation resumes after the page that returned it.
	Continuation string
}

// List returns one page of pending items in due order (shard by shard),
// and a continuation token ("" when there are no more). Malformed rows are
// included with Item.Problem set.
func (c *Client) List(ctx context.Context, lo ListOptions) ([]Item, string, error) {
	if lo.Limit == 0 {
		lo.Limit = 100
	}
	if lo.Limit < 0 || lo.Limit > 1000 {
		return nil, "", fmt.Errorf("%w: list limit %d: want 1..1000", ErrInvalid, lo.Limit)
	}
	shardIdx, cont, err := decodeListToken(lo.Continuation, len(c.opts.Shards))
	if err != nil {
		return nil, "", err
	}
	to := IndexPrefix
	if lo.Due {
		to = dueBound(c.opts.Clock.Now())
	}
	var items []Item
	for shardIdx < len(c.opts.Shards) {
		q := Query{Partition: c.opts.Shards[shardIdx], To: to, Top: int32(lo.Limit - len(items)), Continuation: cont}
		p, err := c.t.Query(ctx, q)
		if errors.Is(err, storage.ErrTableNotFound) {
			return nil, "", nil // a fresh account: nothing scheduled yet
		}
		if err != nil {
			return nil, "", fmt.Errorf("list: %w", err)
		}
		for _, e := range p.Entities {
			items = append(items, readItem(e))
		}
		cont = p.Continuation
		if cont == "" {
			shardIdx++
		}
		if len(items) >= lo.Limit {
			break
		}
	}
	if shardIdx >= len(c.opts.Shards) {
		return items, "", nil
	}
	return items, encodeListToken(shardIdx, cont), nil
}

func encodeListToken(shard int, cont string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.Itoa(shard) + "\n" + cont))
}

func decodeListToken(tok string, shards int) (int, string, error) {
	if tok == "" {
		return 0, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil {
		s, cont, ok := strings.Cut(string(b), "\n")
		n, aerr := strconv.Atoi(s)
		if ok && aerr == nil && n >= 0 && n < shards {
			return n, cont, nil
		}
	}
	return 0, "", fmt.Errorf("%w: list continuation %q is not a token List returned", ErrInvalid, tok)
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
	for _, shard := range c.opts.Shards {
		p, err := c.t.Query(ctx, Query{Partition: shard, To: dueBound(now), Select: []string{"RowKey"}, Top: DueCountCap})
		if errors.Is(err, storage.ErrTableNotFound) {
			return DueStats{}, nil // a fresh account: nothing is due
		}
		if err != nil {
			return DueStats{}, fmt.Errorf("due: %w", err)
		}
		st.Count += len(p.Entities)
		if p.Continuation != "" {
			st.Capped = true
		}
		for _, e := range p.Entities {
			if due, _, err := ParseRowKey(e.RowKey); err == nil {
				if st.Oldest.IsZero() || due.Before(st.Oldest) {
					st.Oldest = due
				}
				break
			}
		}
	}
	if !st.Oldest.IsZero() {
		st.Lag = max(0, now.Sub(st.Oldest))
	}
	return st, nil
}
