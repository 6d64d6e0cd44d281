package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/leasecron/leasecron/internal/clock"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// DefaultTable is the default name of the Runs table.
const DefaultTable = "Runs"

// Options configure a Store.
type Options struct {
	// Table is the table name. Default DefaultTable ("Runs").
	Table string
	// Clock is the time source. Default the real clock.
	Clock clock.Clock
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger
}

func (o *Options) fill() error {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if err := storage.ValidateTableName(o.Table); err != nil {
		return fmt.Errorf("runs: Options.Table: %w", err)
	}
	o.Clock = clock.OrReal(o.Clock)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// Store is the Runs table in Azure Table storage. The table is created on
// first use. A Store is safe for concurrent use.
type Store struct {
	sc    *storage.Clients
	tc    *aztables.Client
	o     Options
	mu    sync.Mutex
	ready bool
}

// New returns a Store over the table named in o. It does not contact the
// service.
func New(sc *storage.Clients, o Options) (*Store, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if sc == nil || sc.Table == nil {
		return nil, fmt.Errorf("runs: no table service client")
	}
	return &Store{sc: sc, tc: sc.Table.NewClient(o.Table), o: o}, nil
}

// Table returns the table name.
func (s *Store) Table() string { return s.o.Table }

func (s *Store) ensure(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready {
		return nil
	}
	if err := s.sc.EnsureTable(ctx, s.o.Table); err != nil {
		return fmt.Errorf("runs: %w", err)
	}
	s.ready = true
	return nil
}

// Get returns the run with this id, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	r, ok, err := s.get(ctx, id)
	if err != nil {
		return Run{}, err
	}
	if !ok {
		return Run{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return r, nil
}

// MarkScheduled starts a fresh run record in state scheduled (replacing any
// earlier record with this id: scheduling an id again starts a new run).
func (s *Store) MarkScheduled(ctx context.Context, id string, m Meta) error {
	if err := validateID(id); err != nil {
		return err
	}
	r := Run{ID: id, State: Scheduled}
	fillMeta(&r, m)
	return s.upsert(ctx, partitionFor(id), id, runProps(r), aztables.UpdateModeReplace)
}

// MarkQueued records that the run is on the queue. It never moves a run
// backwards: if a consumer has already claimed or finished it (it can be
// quicker than the mover's bookkeeping), only missing metadata is filled in.
// It costs a read and a conditional write.
func (s *Store) MarkQueued(ctx context.Context, id string, m Meta) error {
	if err := validateID(id); err != nil {
		return err
	}
	return s.modify(ctx, id, func(cur *Run) (Run, error) { return applyQueued(cur, id, m), nil })
}

// MarkRequeued puts a dead (or any) run back to queued with its attempt
// count reset, for a dead letter moved back to the work queue. It is an
// unconditional merge.
func (s *Store) MarkRequeued(ctx context.Context, id string) error {
	if err := validateID(id); err != nil {
		return err
	}
	now := s.o.Clock.Now()
	props := map[string]any{"State": string(Queued), "Attempts": int32(0)}
	putTime(props, "ClaimUntil", now)
	return s.upsert(ctx, partitionFor(id), id, props, aztables.UpdateModeMerge)
}

// Claim claims the run for worker's attempt until leaseUntil with a
// conditional write on the row's ETag, so of two workers claiming at once
// only one wins. It returns the row as written and, instead of claiming:
// ErrAlreadySucceeded (the delivery is a duplicate; it is counted in
// Duplicates), ErrCancelled, or ErrClaimedElsewhere (running on another
// worker whose claim has not lapsed; the returned row says until when). A
// missing row is created. Any other error means the claim could not be
// read or written; the caller should run the task anyway.
func (s *Store) Claim(ctx context.Context, id, worker string, attempt int, leaseUntil time.Time, m Meta) (leasecrontype.Run, error) {
	if err := validateID(id); err != nil {
		return leasecrontype.Run{}, err
	}
	for try := 0; try < maxTries; try++ {
		cur, ok, err := s.get(ctx, id)
		if err != nil {
			return leasecrontype.Run{}, err
		}
		var curp *Run
		if ok {
			curp = &cur
		}
		next, verdict := decideClaim(curp, id, worker, attempt, leaseUntil, m, s.o.Clock.Now())
		err = s.write(ctx, id, curp, next)
		switch {
		case err == nil:
			return next.Public(), verdict
		case verdict != nil:
			// A refusal stands even when recording the delivery failed or
			// lost a race (succeeded and cancelled do not change back; a
			// stale "claimed elsewhere" only delays the message): the
			// delivery counters are best effort.
			if !isConflict(err) {
				s.o.Logger.Warn("runs: recording a delivery failed", "run", id, "err", err)
			}
			return next.Public(), verdict
		case isConflict(err):
			continue // lost a race: read again and decide again
		default:
			return leasecrontype.Run{}, err
		}
	}
	return leasecrontype.Run{}, fmt.Errorf("runs: claim %s: %w", id, ErrContention)
}

// Extend moves the claim's expiry to until while the handler runs. A missing
// row is not an error.
func (s *Store) Extend(ctx context.Context, id, worker string, until time.Time) error {
	if err := validateID(id); err != nil {
		return err
	}
	if err := s.ensure(ctx); err != nil {
		return err
	}
	props := map[string]any{"PartitionKey": partitionFor(id), "RowKey": id, "Worker": worker}
	putTime(props, "ClaimUntil", until)
	b, err := json.Marshal(props)
	if err != nil {
		return err
	}
	anyTag := azcore.ETagAny
	_, err = s.tc.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: &anyTag, UpdateMode: aztables.UpdateModeMerge})
	if err = storage.Translate(err); err != nil && !errors.Is(err, storage.ErrNotFound) {
		return fmt.Errorf("runs: extend claim on %s: %w", id, err)
	}
	return nil
}

// Finish records the end of an attempt: state (usually succeeded, failed or
// dead; queued for a delivery released at shutdown), the error (kept in
// LastError when not nil) and the output tail (kept when not empty). The
// claim is released. A cancelled run stays cancelled.
func (s *Store) Finish(ctx context.Context, id string, state State, err error, outputTail string) error {
	if verr := validateID(id); verr != nil {
		return verr
	}
	if !state.Valid() {
		return fmt.Errorf("%w: state %q", ErrInvalid, state)
	}
	return s.modify(ctx, id, func(cur *Run) (Run, error) {
		return applyFinish(cur, id, state, err, outputTail, s.o.Clock.Now()), nil
	})
}

// Cancel marks the run cancelled unless it has already finished, returning
// the row. Unknown ids fail with ErrNotFound, finished runs with
// ErrAlreadyFinished (and the row).
func (s *Store) Cancel(ctx context.Context, id string) (Run, error) {
	if err := validateID(id); err != nil {
		return Run{}, err
	}
	var out Run
	err := s.modify(ctx, id, func(cur *Run) (Run, error) {
		if cur == nil {
			return Run{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		next, err := applyCancel(*cur, s.o.Clock.Now())
		out = next
		return next, err
	})
	return out, err
}

// List returns the runs passing f, most recently updated first. It scans
// the run partitions (the table is bookkeeping, not an index).
func (s *Store) List(ctx context.Context, f Filter) ([]Run, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	conds := []string{fmt.Sprintf("PartitionKey ge '%s0' and PartitionKey le '%sf'", bucketPrefix, bucketPrefix)}
	if f.Type != "" {
		conds = append(conds, fmt.Sprintf("Type eq '%s'", quote(f.Type)))
	}
	if len(f.States) > 0 {
		var ss []string
		for _, st := range f.States {
			ss = append(ss, fmt.Sprintf("State eq '%s'", quote(string(st))))
		}
		conds = append(conds, "("+strings.Join(ss, " or ")+")")
	}
	filter := strings.Join(conds, " and ")
	var out []Run
	pager := s.tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("runs: list: %w", storage.Translate(err))
		}
		for _, b := range page.Entities {
			r, err := decodeRun(b, "")
			if err != nil {
				s.o.Logger.Warn("runs: skipping unreadable row", "err", err)
				continue
			}
			if f.matches(r) {
				out = append(out, r)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Updated.After(out[j].Updated) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// FlushCounters writes one instance's cumulative counters, replacing its
// previous row.
func (s *Store) FlushCounters(ctx context.Context, c Counters) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	inst := sanitizeKey(c.Instance)
	byType, err := json.Marshal(c.ByType)
	if err != nil {
		return err
	}
	props := counterProps(c.Total)
	props["ByType"] = string(byType)
	putTime(props, "Flushed", s.o.Clock.Now())
	return s.upsert(ctx, statsPK, inst, props, aztables.UpdateModeReplace)
}

// ListCounters returns every instance's counters row.
func (s *Store) ListCounters(ctx context.Context) ([]Counters, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	filter := fmt.Sprintf("PartitionKey eq '%s'", statsPK)
	var out []Counters
	pager := s.tc.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("runs: list counters: %w", storage.Translate(err))
		}
		for _, b := range page.Entities {
			c, err := decodeCounters(b)
			if err != nil {
				s.o.Logger.Warn("runs: skipping unreadable counters row", "err", err)
				continue
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// SumCounters adds up every instance's counters (for the stats command).
func (s *Store) SumCounters(ctx context.Context) (Counters, error) {
	rows, err := s.ListCounters(ctx)
	if err != nil {
		return Counters{}, err
	}
	return sumCounters(rows), nil
}

// --- row access --------------------------------------------------------

func (s *Store) get(ctx context.Context, id string) (Run, bool, error) {
	if err := s.ensure(ctx); err != nil {
		return Run{}, false, err
	}
	resp, err := s.tc.GetEntity(ctx, partitionFor(id), id, nil)
	if err = storage.Translate(err); err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return Run{}, false, nil
		}
		return Run{}, false, fmt.Errorf("runs: get %s: %w", id, err)
	}
	r, err := decodeRun(resp.Value, string(resp.ETag))
	if err != nil {
		return Run{}, false, fmt.Errorf("runs: get %s: %w", id, err)
	}
	return r, true, nil
}

// modify runs a read-modify-write loop on one row: read (nil when
// missing), compute with f, then insert or merge conditionally on the ETag
// read, retrying on a lost race. When f returns an error nothing is written
// and the error is returned as is.
func (s *Store) modify(ctx context.Context, id string, f func(cur *Run) (Run, error)) error {
	for try := 0; try < maxTries; try++ {
		cur, ok, err := s.get(ctx, id)
		if err != nil {
			return err
		}
		var curp *Run
		if ok {
			curp = &cur
		}
		next, err := f(curp)
		if err != nil {
			return err
		}
		err = s.write(ctx, id, curp, next)
		if err == nil || !isConflict(err) {
			return err
		}
	}
	return fmt.Errorf("runs: %s: %w", id, ErrContention)
}

// write inserts next when cur is nil, or merges it into the row
// conditionally on cur's ETag.
func (s *Store) write(ctx context.Context, id string, cur *Run, next Run) error {
	props := runProps(next)
	props["PartitionKey"], props["RowKey"] = partitionFor(id), id
	b, err := json.Marshal(props)
	if err != nil {
		return err
	}
	if cur != nil {
		etag := azcore.ETag(cur.etag)
		_, err = s.tc.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: &etag, UpdateMode: aztables.UpdateModeMerge})
	} else {
		_, err = s.tc.AddEntity(ctx, b, nil)
	}
	if err = storage.Translate(err); err != nil {
		return fmt.Errorf("runs: write %s: %w", id, err)
	}
	return nil
}

// isConflict reports whether a conditional write lost a race (the row
// changed, appeared or vanished since it was read).
func isConflict(err error) bool {
	return errors.Is(err, storage.ErrPreconditionFailed) || errors.Is(err, storage.ErrAlreadyExists) ||
		errors.Is(err, storage.ErrNotFound)
}

func (s *Store) upsert(ctx context.Context, pk, rk string, props map[string]any, mode aztables.UpdateMode) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	props["PartitionKey"], props["RowKey"] = pk, rk
	b, err := json.Marshal(props)
	if err != nil {
		return err
	}
	_, err = s.tc.UpsertEntity(ctx, b, &aztables.UpsertEntityOptions{UpdateMode: mode})
	if err = storage.Translate(err); err != nil {
		return fmt.Errorf("runs: upsert %s/%s: %w", pk, rk, err)
	}
	return nil
}

// --- encoding ----------------------------------------------------------

const edmTime = "2006-01-02T15:04:05.0000000Z"

func putTime(p map[string]any, name string, t time.Time) {
	if t.IsZero() {
		return
	}
	p[name] = t.UTC().Truncate(100 * time.Nanosecond).Format(edmTime)
	p[name+"@odata.type"] = "Edm.DateTime"
}

func putInt64(p map[string]any, name string, v int64) {
	p[name] = strconv.FormatInt(v, 10)
	p[name+"@odata.type"] = "Edm.Int64"
}

// runProps encodes every field of r (zero times are left out, so a merge
// keeps what the row had).
func runProps(r Run) map[string]any {
	p := map[string]any{
		"State":      string(r.State),
		"Type":       r.Type,
		"Attempts":   int32(r.Attempts),
		"Worker":     r.Worker,
		"LastError":  trunc.Head(r.LastError, MaxLastError),
		"OutputTail": trunc.Tail(r.OutputTail, MaxOutputTail),
		"Deliveries": int32(r.Deliveries),
		"Duplicates": int32(r.Duplicates),
	}
	putInt64(p, "Generation", r.Generation)
	putTime(p, "Started", r.Started)
	putTime(p, "Finished", r.Finished)
	putTime(p, "Due", r.Due)
	putTime(p, "ClaimUntil", r.ClaimUntil)
	putTime(p, propSnoozedUntil, r.SnoozedUntil)
	return p
}

// flexInt decodes a JSON number or a string holding one (Edm.Int64).
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*f = 0
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		fv, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return err
		}
		v = int64(fv)
	}
	*f = flexInt(v)
	return nil
}

type rowJSON struct {
	PartitionKey string    `json:"PartitionKey"`
	RowKey       string    `json:"RowKey"`
	Timestamp    time.Time `json:"Timestamp"`
	ETag         string    `json:"odata.etag"`
	State        string    `json:"State"`
	Type         string    `json:"Type"`
	Attempts     flexInt   `json:"Attempts"`
	Worker       string    `json:"Worker"`
	LastError    string    `json:"LastError"`
	OutputTail   string    `json:"OutputTail"`
	Deliveries   flexInt   `json:"Deliveries"`
	Duplicates   flexInt   `json:"Duplicates"`
	Generation   flexInt   `json:"Generation"`
	Started      time.Time `json:"Started"`
	Finished     time.Time `json:"Finished"`
	Due          time.Time `json:"Due"`
	ClaimUntil   time.Time `json:"ClaimUntil"`
	SnoozedUntil time.Time `json:"SnoozedUntil"`
}

func decodeRun(b []byte, etag string) (Run, error) {
	var j rowJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Run{}, fmt.Errorf("decode run row: %w", err)
	}
	if etag == "" {
		etag = j.ETag
	}
	return Run{
		ID:           j.RowKey,
		State:        State(j.State),
		Type:         j.Type,
		Attempts:     int(j.Attempts),
		Worker:       j.Worker,
		Started:      j.Started,
		Finished:     j.Finished,
		LastError:    j.LastError,
		OutputTail:   j.OutputTail,
		Deliveries:   int(j.Deliveries),
		Duplicates:   int(j.Duplicates),
		Generation:   int64(j.Generation),
		Due:          j.Due,
		ClaimUntil:   j.ClaimUntil,
		SnoozedUntil: j.SnoozedUntil,
		Updated:      j.Timestamp,
		etag:         etag,
	}, nil
}

var counterNames = []string{"Handled", "Failed", "Retried", "Dead", "Duplicates", "Cancelled", "SetAside", "Deferred", "Abandoned"}

func counterFields(c *Counts) []*int64 {
	return []*int64{&c.Handled, &c.Failed, &c.Retried, &c.Dead, &c.Duplicates, &c.Cancelled, &c.SetAside, &c.Deferred, &c.Abandoned}
}

func counterProps(c Counts) map[string]any {
	p := map[string]any{}
	for i, f := range counterFields(&c) {
		putInt64(p, counterNames[i], *f)
	}
	return p
}

func decodeCounters(b []byte) (Counters, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return Counters{}, fmt.Errorf("decode counters row: %w", err)
	}
	var c Counters
	c.Instances = 1
	if v, ok := raw["RowKey"]; ok {
		_ = json.Unmarshal(v, &c.Instance)
	}
	if v, ok := raw["Flushed"]; ok {
		_ = json.Unmarshal(v, &c.Updated)
	}
	for i, f := range counterFields(&c.Total) {
		if v, ok := raw[counterNames[i]]; ok {
			var n flexInt
			if err := json.Unmarshal(v, &n); err != nil {
				return Counters{}, fmt.Errorf("decode counters row %s.%s: %w", c.Instance, counterNames[i], err)
			}
			*f = int64(n)
		}
	}
	c.ByType = map[string]Counts{}
	if v, ok := raw["ByType"]; ok {
		var s string
		if err := json.Unmarshal(v, &s); err == nil && s != "" && s != "null" {
			if err := json.Unmarshal([]byte(s), &c.ByType); err != nil {
				return Counters{}, fmt.Errorf("decode counters row %s.ByType: %w", c.Instance, err)
			}
		}
	}
	return c, nil
}

// quote escapes a value for an OData string literal.
func quote(s string) string { return strings.ReplaceAll(s, "'", "''") }

// sanitizeKey makes s usable as a RowKey: forbidden characters become '_'.
func sanitizeKey(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for _, r := range s {
		if r == '/' || r == '\\' || r == '#' || r == '?' || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			r = '_'
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) > 512 {
		out = out[:512]
	}
	return out
}
