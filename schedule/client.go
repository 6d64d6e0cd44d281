package schedule

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/opt"
	"github.com/leasecron/leasecron/internal/payload"
	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
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
	// ShardMap: the schedule's shard count is the shard map's
	// (internal/shard: the count can change online) once a sharded worker
	// has written it; Shards must then be "00", "01", … and only give the
	// count used before that. The client reads the map at most once per
	// shard.ClientMapTTL. leasecron's clients and workers set it whatever
	// their count, so that all of them place and find tasks alike.
	ShardMap bool
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
	// PayloadStore holds payloads larger than InlineLimit (claim check).
	// Nil: such payloads are refused with ErrPayloadTooLarge.
	PayloadStore PayloadStore
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
	// ChangesAfterSend says that the workers check every message the mover
	// sent early against its run record or row (they keep run records,
	// and the root wires Client.Current into the consumer), so Cancel,
	// Reschedule and Add with Replace may change a task whose message is
	// already in the queue: the old message becomes a no-op. When false
	// such changes fail with ErrAlreadySent instead of pretending.
	ChangesAfterSend bool
	// Unconfirm takes back the confirmation of a run whose message was
	// sent, and the run recorded queued with token (by the client that
	// scheduled it for now, or the mover that sent it early): Reschedule
	// and Add with Replace call it after rewriting such a row, so that the
	// old message is checked against the row and found stale, when
	// UnconfirmDue is nil. Nil: nothing to take back (no client confirms
	// runs without run records).
	Unconfirm func(ctx context.Context, id, token string) error
	// UnconfirmDue withdraws the run of old, a one-off task's row that
	// Reschedule or Add with Replace rewrites: one written while its
	// client was sending the message (PropSendingUntil) and not yet marked
	// sent, whose sender may confirm the run before the change or after it
	// under a token the row does not name yet (before the write); or one
	// marked sent (after the write, instead of Unconfirm), whose
	// confirmation, the mover's, may also come after the change. Neither
	// may let the old message run, nor take over the record of the run
	// that replaced it. It returns the token of a confirmation it took
	// back ("" when there was none), for ConfirmAgain should the change
	// fail. Nil: nothing to withdraw.
	UnconfirmDue func(ctx context.Context, old Item) (token string, err error)
	// ConfirmAgain puts back the confirmation under token that
	// UnconfirmDue took from the run of old, when the change it was taken
	// for did not happen (the change failed: its row was marked and moved
	// meanwhile, or is gone). Nil: nothing is put back.
	ConfirmAgain func(ctx context.Context, old Item, token string) error
	// SentStarted reports, for a one-off task due at due whose row says
	// its message was sent (PropSent, with token), whether that message has
	// already started a run (the run is past queued, with token or, claimed
	// before its confirmation, with none and that due time, or a requeue
	// brought the run of that due time back); for a row
	// still being sent (PropSendingUntil, token ""), or not marked at all
	// (a traffic-cop pass sends before it marks or retires the row; asked
	// by Reschedule, not Cancel), whether a run of its due time has
	// started: the task
	// is no longer pending, only its row waits for the mover's next pass:
	// Reschedule (RunNow) refuses it with ErrNotFound instead of running
	// it again (issue 38, seed 1001), and so does Cancel, whose caller
	// then cancels the run as one already moved. Nil: not checked.
	SentStarted func(ctx context.Context, id, token string, due time.Time) (bool, error)
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	o.Table = cmp.Or(o.Table, DefaultTable)
	if len(o.Shards) == 0 {
		o.Shards = []string{DefaultShard}
	}
	o.Clock = clock.OrReal(o.Clock)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	o.MaxPayload = cmp.Or(o.MaxPayload, DefaultMaxPayload)
	o.InlineLimit = cmp.Or(o.InlineLimit, DefaultInlineLimit)
	o.ScanLimit = cmp.Or(o.ScanLimit, DefaultScanLimit)
	return o
}

func (o Options) validate() error {
	if err := storage.ValidateTableName(o.Table); err != nil {
		return fmt.Errorf("%w: schedule.Options.Table: %w", ErrInvalidOptions, err)
	}
	seen := map[string]bool{}
	for _, s := range o.Shards {
		if err := validateShard(s); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
		if seen[s] {
			return fmt.Errorf("%w: schedule.Options.Shards: %q appears twice", ErrInvalidOptions, s)
		}
		seen[s] = true
	}
	return opt.First(
		opt.In(ErrInvalidOptions, "schedule.Options.MaxPayload", o.MaxPayload, DefaultMaxPayload, 1, MaxPayloadLimit),
		opt.In(ErrInvalidOptions, "schedule.Options.InlineLimit", o.InlineLimit, DefaultInlineLimit, 1, MaxInlineLimit),
		opt.Positive(ErrInvalidOptions, "schedule.Options.ScanLimit", o.ScanLimit, DefaultScanLimit),
	)
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
	t     table.Table
	maps  mapCache
	opts  Options
	parts table.Partitions
}

// newClient returns a Client over t.
func newClient(t table.Table, o Options) (*Client, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil table", ErrInvalidOptions)
	}
	o = o.WithDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	o.Logger = o.Logger.With("component", "schedule")
	parts, err := table.NewPartitions(o.Shards...)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule.Options.Shards: %w", ErrInvalid, err)
	}
	return &Client{t: t, opts: o, parts: parts}, nil
}

// NewMemory returns a Client over a table kept in memory, with the
// service's semantics, for tests and examples that run without storage.
func NewMemory(o Options) (*Client, error) {
	return newClient(table.NewMemory(o.Table, o.Clock), o)
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
	t, err := table.NewAzure(svc, o.Table)
	if err != nil {
		return nil, err
	}
	return newClient(t, o)
}

// Ensure creates the table (and the payload container) when the
// implementations support it.
func (c *Client) Ensure(ctx context.Context) error {
	if err := c.t.Create(ctx); err != nil {
		return err
	}
	if c.opts.ShardMap && len(c.opts.Shards) == 1 {
		// An unsharded schedule's "00" stands open to unique takes placed
		// by one shard until the walk under the first map closes it
		// (placementOf); written here, a first take need not write it.
		m, err := c.shardMap(ctx)
		if err != nil {
			return err
		}
		if m.Count == 0 {
			if err := shard.Reopen(ctx, c.t, "00", 1); err != nil {
				return err
			}
		}
	}
	if en, ok := c.opts.PayloadStore.(interface{ Ensure(context.Context) error }); ok {
		if err := en.Ensure(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Shards returns the PartitionKeys in use.
func (c *Client) Shards() []string { return append([]string(nil), c.opts.Shards...) }

// ShardOf returns the shard (partition) a task with this id is written
// to: table.Hash(id) modulo the shard count (with Options.ShardMap, the
// count of the map as last read).
func (c *Client) ShardOf(id string) string { return c.placeKnown().of(id) }
