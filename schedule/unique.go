package schedule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/shard"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// A unique task is guarded by one row per type and key in the schedule
// table, written in the same transaction as the task's rows:
//
//	PartitionKey  the shard of "{type}~{key}"
//	RowKey        "uq~{type}~{key}"
//	Task          the id of the task (or series) that holds the key
//	UniqueFor     the window in seconds (how long a finished task still counts)
//	UniqueStates  the run states that count, comma-separated
//	Created       when the guard was written (RFC 3339)
//	CheckAfter    when the mover's sweep next asks whether the task still
//	              holds the key (Edm.DateTime): written as Created +
//	              UniqueFor, moved on by GuardRecheck while it does
//	Under         the shard count the guard was written under (Int64;
//	              absent in guards of releases before the seal)
//	SealedFor     set on a guard left where an earlier shard count put
//	              it: the key's guard lives in its shard under this count
//	              (Int64). A seal may stand alone, with no Task.
//
// Inserting it fails when it exists, so of concurrent schedulers only one
// can win. A guard whose task no longer counts (it finished longer than
// the window ago, or ended in a state that does not count) is replaced —
// conditionally on its ETag — by the next task with the key: guards expire
// by being evaluated, not by a cleaner's scan. The mover's sweep deletes
// guards that no longer hold their key, reading only those whose
// CheckAfter has passed, so a guard outlives its window by at most
// GuardRecheck.
//
// While the shard count changes, a key may move to another shard. A take
// under the new count first seals the guard where the previous count put
// it (inserting a bare seal when there is none), then copies it over:
// a take placed by the previous count whose request lands later — a
// request slowed in flight lands seconds after the change — meets the
// seal (its insert finds the row, its conditional replace a new ETag),
// reads the map again and places itself by the new count, instead of
// taking the key beside a holder in the new shard (issue 38, the
// simulator's seed 82521). The walk of a shard under the new count
// (Point) first closes the shard to takes placed by any other count —
// a take's transaction requires its shard's open row for the count it
// was placed by (shard.OpenRowKey, when the map names that count Open),
// and the walk deletes the old count's — then seals every guard it
// copies: a take by the previous count that lands after the walk, even
// after the change has ended and the key was taken under the new count
// (which seals nothing then), fails as a whole and is placed again.

// GuardPrefix starts the RowKey of every unique guard row.
const GuardPrefix = "uq~"

// MaxUniqueKeyLen is the longest unique key accepted.
const MaxUniqueKeyLen = 200

// MaxUniqueFor is the longest window accepted.
const MaxUniqueFor = 366 * 24 * time.Hour

// Guard props.
const (
	PropGuardTask   = "Task"
	PropUniqueFor   = "UniqueFor"
	PropUniqueState = "UniqueStates"
	PropCreated     = "Created"
	PropCheckAfter  = "CheckAfter"
	PropUnder       = "Under"
	PropSealedFor   = "SealedFor"
	// PropRequeue is the token of the requeue of a dead task that took
	// the key (Retake's requeue): while the task's run record is dead and
	// names no such requeue, that requeue may be under way.
	PropRequeue = "Requeue"
)

// GuardRecheck is how long the sweep waits before it asks again whether
// the task of a guard still holds its key (and so the longest a guard
// outlives its window).
const GuardRecheck = time.Hour

// DefaultUniqueStates are the run states in which a task holds its unique
// key when Unique.States is empty: every state but cancelled. A finished
// task (succeeded, dead) holds it for the window after it finished.
var DefaultUniqueStates = []leasecrontype.RunState{
	leasecrontype.RunScheduled, leasecrontype.RunQueued, leasecrontype.RunRunning, leasecrontype.RunSnoozed,
	leasecrontype.RunFailed, leasecrontype.RunSucceeded, leasecrontype.RunDead,
}

// Unique makes Add refuse a task while another of the same type holds Key.
type Unique struct {
	// Key is the uniqueness key within the task's type: 1–200 characters,
	// none of / \ # ? or control characters.
	Key string
	// For is how long a task still holds the key after it finished (0: it
	// holds it only until it finishes). The end it counts from is the one
	// the task's run record shows, so leasecron.Client refuses a For longer
	// than the records of the ended states counted are kept (the runs
	// retentions); without run records it counts from the schedule.
	For time.Duration
	// States are the run states in which the task holds the key
	// (DefaultUniqueStates when empty). A state left out frees the key: to
	// allow a new task as soon as the last one succeeded, leave out
	// succeeded.
	States []leasecrontype.RunState
}

// Guard is a unique guard as stored.
type Guard struct {
	Type, Key string
	// Task is the id of the task or series that holds the key.
	Task    string
	For     time.Duration
	States  []leasecrontype.RunState
	Created time.Time
	// Requeue is the token of the requeue that took the key last (Retake;
	// "" when a schedule took it).
	Requeue string
}

// Counts reports whether a task in state st holds the key.
func (g Guard) Counts(st leasecrontype.RunState) bool {
	for _, s := range g.States {
		if s == st {
			return true
		}
	}
	return false
}

// ErrDuplicate is wrapped by Add's answer when another task holds the
// unique key; the error is a *DuplicateError naming that task.
var ErrDuplicate = errors.New("duplicate")

// DuplicateError says which task holds a unique key.
type DuplicateError struct {
	Type, Key string
	// ID is the task (or series) that holds the key.
	ID string
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("duplicate: task %s of type %s holds unique key %q", e.ID, e.Type, e.Key)
}

// Unwrap makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// Live decides whether a guard's task still holds its key.
type Live func(ctx context.Context, g Guard) (bool, error)

// validate checks u and fills in the default states.
func (u *Unique) validate() error {
	switch {
	case u.Key == "":
		return fmt.Errorf("%w: empty unique key", ErrInvalid)
	case len(u.Key) > MaxUniqueKeyLen:
		return fmt.Errorf("%w: unique key %.40q… is %d bytes; the limit is %d", ErrInvalid, u.Key, len(u.Key), MaxUniqueKeyLen)
	case u.For < 0 || u.For > MaxUniqueFor:
		return fmt.Errorf("%w: unique window %s: want 0 (until the task finishes) .. %s", ErrInvalid, u.For, MaxUniqueFor)
	}
	if err := storage.ValidateKeyPart("unique key", u.Key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(u.States) == 0 {
		u.States = DefaultUniqueStates
	}
	for _, st := range u.States {
		if _, err := leasecrontype.ParseRunState(string(st)); err != nil {
			return fmt.Errorf("%w: unique states: %w", ErrInvalid, err)
		}
	}
	return nil
}

// ParseUniqueStates reads a comma-separated list of run states.
func ParseUniqueStates(s string) ([]leasecrontype.RunState, error) {
	var out []leasecrontype.RunState
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		st, err := leasecrontype.ParseRunState(f)
		if err != nil {
			return nil, fmt.Errorf("%w: unique states %q: %w", ErrInvalid, s, err)
		}
		out = append(out, st)
	}
	if len(out) == 0 && strings.TrimSpace(s) != "" {
		_, err := leasecrontype.ParseRunState("") // its error lists the states
		return nil, fmt.Errorf("%w: unique states %q name no state (%w; comma-separated, or nothing for the default)", ErrInvalid, s, err)
	}
	return out, nil
}

func guardKey(typ, key string) string { return GuardPrefix + typ + "~" + key }

// joinStates is the stored form of run states: comma-separated.
func joinStates(sts []leasecrontype.RunState) string {
	states := make([]string, len(sts))
	for i, s := range sts {
		states[i] = string(s)
	}
	return strings.Join(states, ",")
}

// guardProps is the guard of task id taking u's key at now, under a shard
// count of count.
func guardProps(id string, u Unique, now time.Time, count int) map[string]any {
	return map[string]any{
		PropGuardTask:   id,
		PropUniqueFor:   int64(u.For / time.Second),
		PropUniqueState: joinStates(u.States),
		PropCreated:     now.UTC().Format(time.RFC3339Nano),
		PropCheckAfter:  now.Add(u.For),
		PropUnder:       int64(count),
	}
}

// requeueProps adds the requeue that takes a key to its guard's props.
func requeueProps(p map[string]any, requeue string) map[string]any {
	if requeue != "" {
		p[PropRequeue] = requeue
	}
	return p
}

func readGuard(typ, key string, e table.Entity) Guard {
	g := Guard{Type: typ, Key: key, Task: e.Props.Str(PropGuardTask), For: time.Duration(e.Props.Int(PropUniqueFor)) * time.Second,
		Created: e.Props.Time(PropCreated), Requeue: e.Props.Str(PropRequeue)}
	g.States, _ = ParseUniqueStates(e.Props.Str(PropUniqueState))
	if len(g.States) == 0 {
		g.States = DefaultUniqueStates
	}
	return g
}

// uniqueID returns id, or draws a fresh id in shard when id is empty. A
// unique task's rows share the guard's partition, so that one transaction
// writes them; with several shards a given id must fall into it.
func (c *Client) uniqueID(pl placement, id, shard string, now time.Time) (string, error) {
	if id != "" {
		if pl.of(id) != shard {
			return "", fmt.Errorf("%w: task id %q: with %d schedule shards a unique task's id must share its key's shard; leave the id empty and one is chosen", ErrInvalid, id, pl.parts.Len())
		}
		return id, nil
	}
	for range 10000 {
		if id := newID(now); pl.of(id) == shard {
			return id, nil
		}
	}
	return "", fmt.Errorf("no id found in shard %s", shard)
}

// prepareUnique validates a unique task and its key, fills in the
// defaults (u's states, the id) and returns the shard of its rows.
func (c *Client) prepareUnique(pl placement, it Item, u *Unique, now time.Time) (Item, string, error) {
	if it.Type == "" {
		it.Type = DefaultType
	}
	if err := ValidateType(it.Type); err != nil {
		return Item{}, "", err
	}
	if err := u.validate(); err != nil {
		return Item{}, "", err
	}
	shard := pl.of(it.Type + "~" + u.Key)
	id, err := c.uniqueID(pl, it.ID, shard, now)
	if err != nil {
		return Item{}, "", err
	}
	it.ID = id
	it, err = c.prepare(it, now)
	return it, shard, err
}

// ownUnique is it, written by this call's transaction whose answer was
// lost: its row's ETag, and the send left to whoever holds the row's
// SendingUntil (adoptSending); a row gone already was moved by the
// traffic cop, which sent it.
func (c *Client) ownUnique(ctx context.Context, it Item, shard, rk string) Item {
	cur, err := c.t.Get(ctx, shard, rk)
	if err != nil {
		it.SendingUntil = time.Time{}
		return it
	}
	adoptSending(&it, cur.Props)
	it.ETag = cur.ETag
	c.wakeOwner(ctx, shard, it.Due)
	return it
}

// CheckUnique refuses, as AddUnique would, a unique task it cannot take,
// without writing anything.
func (c *Client) CheckUnique(it Item, u Unique) error {
	_, _, err := c.prepareUnique(c.placeKnown(), it, &u, c.opts.Clock.Now())
	return err
}

// AddUnique is Add for a task that holds a unique key: the task's row, its
// id index row and the key's guard row are written in one transaction.
// When another task holds the key — live says whether it still does — it
// returns that task's id in an error wrapping ErrDuplicate (a
// *DuplicateError) and writes nothing. AddOptions.Replace is refused.
func (c *Client) AddUnique(ctx context.Context, it Item, u Unique, live Live, ao AddOptions) (Item, error) {
	if ao.Replace {
		return Item{}, fmt.Errorf("%w: a unique task cannot replace another (leave out replace, or the unique key)", ErrInvalid)
	}
	if it.TraceParent == "" {
		it.TraceParent = TraceParentOf(ctx)
	}
	// Placed by a shard count the key's guard has left, a second call
	// places the task by the map just read (and draws its id again when
	// the caller left it empty: a unique task's id shares its key's
	// shard).
	for range 2 {
		out, err := c.addUnique(ctx, it, u, live, ao)
		if !errors.Is(err, ErrShardCountChanged) {
			return out, err
		}
	}
	return Item{}, fmt.Errorf("schedule with unique key %q: %w", u.Key, ErrShardCountChanged)
}

// ErrShardCountChanged: a unique schedule placed its key by one shard
// count and met the key's guard sealed by a take under another, twice in a
// row (the count changed again while the call placed it once more, or a
// shard it placed by was closed to its count). Nothing was written; the
// call is safe to repeat, and a repeat places the key by the count then
// in force (see the guard's SealedFor).
var ErrShardCountChanged = errors.New("the key's guard moved under a new shard count while this call placed it by the old one; try again")

// addUnique is AddUnique under one placement.
func (c *Client) addUnique(ctx context.Context, it Item, u Unique, live Live, ao AddOptions) (Item, error) {
	now := c.opts.Clock.Now()
	pl, err := c.placeFresh(ctx)
	if err != nil {
		return Item{}, err
	}
	it, shard, err := c.prepareUnique(pl, it, &u, now)
	if err != nil {
		return Item{}, err
	}
	gk := guardKey(it.Type, u.Key)
	if prev, ok := pl.prevOf(it.Type + "~" + u.Key); ok {
		// The shard count is changing: seal the key's guard where the
		// previous count put it and bring it over, so the transaction
		// below sees it and no take by the previous count lands after.
		if err := c.sealGuard(ctx, prev, shard, gk, pl.parts.Len()); err != nil {
			return Item{}, err
		}
	}
	rk, err := RowKey(rowDue(it), it.ID)
	if err != nil {
		return Item{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	it.Shard, it.RowKey, it.Indexed, it.SendingUntil, it.UniqueKey = shard, rk, true, ao.Sending, u.Key
	it.UniqueFor, it.UniqueStates = u.For, u.States
	if err := c.storePayload(ctx, &it); err != nil {
		return Item{}, err
	}
	guardOp := table.Op{Kind: table.Insert, PartitionKey: shard, RowKey: gk, Props: guardProps(it.ID, u, now, pl.parts.Len())}
	created := false
	var stale *table.Entity // a guard under another count, to go once the take lands (heldAhead)
	for range retries {
		ops := append([]table.Op{
			{Kind: table.Insert, PartitionKey: shard, RowKey: rk, Props: itemProps(it, true)},
			{Kind: table.Insert, PartitionKey: shard, RowKey: indexKey(it.ID), Props: map[string]any{PropItem: rk, PropID: it.ID}},
			guardOp,
		}, pl.openOp(shard)...)
		etags, err := c.t.Submit(ctx, ops)
		if err == nil {
			it.ETag = etagAt(etags, 0)
			c.dropStale(ctx, stale)
			c.landedUnique(ctx, pl, it, shard)
			c.wakeOwner(ctx, shard, it.Due)
			return it, nil
		}
		if errors.Is(err, storage.ErrTableNotFound) && !created {
			if err := c.Ensure(ctx); err != nil {
				err = nothingWritten{fmt.Errorf("add %s: create the schedule table: %w", it.ID, err)}
				c.dropPayload(ctx, it, err)
				return Item{}, err
			}
			created = true
			continue
		}
		if !conflict(err) {
			c.dropPayload(ctx, it, err)
			return Item{}, fmt.Errorf("add %s: %w", it.ID, err)
		}
		if closed, rerr := c.closed(ctx, pl, shard, err); closed {
			c.dropPayload(ctx, it, storage.ErrPreconditionFailed) // nothing written
			if rerr != nil {
				return Item{}, fmt.Errorf("add %s: %w", it.ID, rerr)
			}
			return Item{}, fmt.Errorf("add %s: shard %s is closed to takes placed by %d shards: %w", it.ID, shard, pl.parts.Len(), ErrShardCountChanged)
		}
		// The guard exists (or changed since it was read), or the id is
		// taken: see which.
		ge, gerr := c.t.Get(ctx, shard, gk)
		switch {
		case errors.Is(gerr, storage.ErrNotFound):
			if _, ierr := c.t.Get(ctx, shard, indexKey(it.ID)); ierr == nil {
				c.dropPayload(ctx, it, ErrAlreadyScheduled)
				return Item{}, fmt.Errorf("%w: task %s", ErrAlreadyScheduled, it.ID)
			}
			guardOp = table.Op{Kind: table.Insert, PartitionKey: shard, RowKey: gk, Props: guardOp.Props}
			continue
		case gerr != nil:
			// (The conflict may be this call's own write, met by the
			// SDK's retry: kept when the read's failure may pass.)
			c.dropPayload(ctx, it, gerr)
			return Item{}, fmt.Errorf("add %s: read unique guard: %w", it.ID, gerr)
		}
		g := readGuard(it.Type, u.Key, ge)
		if g.Task == it.ID && ge.Props.Str(PropCreated) == guardOp.Props[PropCreated] {
			// This call's own guard: a transaction that committed though
			// its answer was lost wrote the task, its index and the guard
			// together (issue 38, the simulator's seed 73349: told
			// "already scheduled", the caller did not know of the task it
			// had scheduled).
			c.landedUnique(ctx, pl, it, shard)
			return c.ownUnique(ctx, it, shard, rk), nil
		}
		if err := c.checkSeal(ctx, pl, ge); err != nil {
			c.dropPayload(ctx, it, storage.ErrPreconditionFailed) // nothing written
			return Item{}, err
		}
		ahead, st, err := c.heldAhead(ctx, pl, ge, it.ID, live)
		switch {
		case err != nil:
			c.dropPayload(ctx, it, storage.ErrPreconditionFailed) // nothing written
			return Item{}, fmt.Errorf("add %s: %w", it.ID, err)
		case ahead != nil:
			c.dropPayload(ctx, it, ErrDuplicate)
			return Item{ID: ahead.ID, Type: it.Type}, ahead
		}
		stale = st
		if g.Task == it.ID {
			c.dropPayload(ctx, it, ErrAlreadyScheduled)
			return Item{}, fmt.Errorf("%w: task %s", ErrAlreadyScheduled, it.ID)
		}
		holds, lerr := holding(ctx, live, g)
		if lerr != nil {
			c.dropPayload(ctx, it, storage.ErrPreconditionFailed) // lost to another writer
			return Item{}, fmt.Errorf("add %s: check the task holding unique key %q: %w", it.ID, u.Key, lerr)
		}
		if holds {
			c.dropPayload(ctx, it, ErrDuplicate)
			return Item{ID: g.Task, Type: it.Type}, &DuplicateError{Type: it.Type, Key: u.Key, ID: g.Task}
		}
		guardOp = table.Op{Kind: table.Replace, PartitionKey: shard, RowKey: gk, Props: guardOp.Props, IfMatch: ge.ETag}
	}
	c.dropPayload(ctx, it, storage.ErrPreconditionFailed) // lost to another writer
	return Item{}, fmt.Errorf("add %s: unique key %q still contended after %d attempts", it.ID, u.Key, retries)
}

// landedUnique makes unique task it, written in shard by pl, findable
// by id and its key held under the shard count the map gives now, when
// it changed since pl was read (pointLanded, sealLanded).
func (c *Client) landedUnique(ctx context.Context, pl placement, it Item, shard string) {
	c.sealLanded(ctx, pl, it.Type, it.UniqueKey, shard)
	c.pointLanded(ctx, pl, map[string]string{it.ID: shard})
}

// holding is live for a guard that names a task; a bare seal (no task)
// holds nothing.
func holding(ctx context.Context, live Live, g Guard) (bool, error) {
	if g.Task == "" {
		return false, nil
	}
	return live(ctx, g)
}

// heldAhead returns a *DuplicateError when e, read where pl placed its
// key, is a bare seal for another count than pl's, no shard map exists
// yet, and the guard the seal points to (where that count puts the key)
// names a task other than id that holds the key: a process already on
// that count — the rolling switch to sharding restarts the workers
// first — took the key there ahead of the map, and sealed where one
// shard puts it; the seal alone holds nothing, and taken for one left
// from an earlier spell it let a second task take the key (issue 38, sim
// seed 143196: a bulk requeue on a sharded worker retook a dead task's
// key, and an unsharded client's schedule took it while the requeued
// task held it). nil when the key is not held there; stale, the guard
// there when it holds nothing, for dropStale once this call's take lands.
func (c *Client) heldAhead(ctx context.Context, pl placement, e table.Entity, id string, live Live) (*DuplicateError, *table.Entity, error) {
	n := int(e.Props.Int(PropSealedFor))
	if n <= 1 || n == pl.parts.Len() || pl.prev != nil || e.Props.Str(PropGuardTask) != "" {
		return nil, nil, nil
	}
	m, err := shard.Read(ctx, c.t)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("unique guard %s is sealed for %d shards; read the shard map: %w", e.RowKey, n, err)
	case m.Count != 0:
		return nil, nil, nil // a map: checkSeal's read decided
	}
	typKey := strings.TrimPrefix(e.RowKey, GuardPrefix)
	ge, err := c.t.Get(ctx, table.Numbered("", n, 2).Of(typKey), e.RowKey)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("read unique guard %s under %d shards: %w", e.RowKey, n, err)
	}
	typ, key, _ := strings.Cut(typKey, "~")
	g := readGuard(typ, key, ge)
	if g.Task == id {
		return nil, nil, nil
	}
	if holds, err := holding(ctx, live, g); err != nil || holds {
		if err != nil {
			return nil, nil, err
		}
		return &DuplicateError{Type: typ, Key: key, ID: g.Task}, nil, nil
	}
	return nil, &ge, nil
}

// dropStale deletes the guard stale (as read, on its ETag), which holds
// nothing, once this call's take of its key has landed where the call's
// own count puts it: the copy a later take under stale's count makes of
// the new guard then lands there, rather than being kept out by a guard
// written under that count (a review's find: the later take read the
// stale guard and took the key while the new holder held it). Deleted
// before the take landed, a take that then failed would have left the
// key unguarded under that count. Best effort: a guard changed since is
// another take's.
func (c *Client) dropStale(ctx context.Context, stale *table.Entity) {
	if stale == nil {
		return
	}
	_, err := c.t.Submit(ctx, []table.Op{{Kind: table.Delete, PartitionKey: stale.PartitionKey, RowKey: stale.RowKey, IfMatch: stale.ETag}})
	if err != nil && !conflict(err) {
		c.opts.Logger.Warn("cannot remove a stale unique guard under another shard count", "guard", stale.RowKey, "shard", stale.PartitionKey, "err", err)
	}
}

// checkSeal returns ErrShardCountChanged when guard e, read where pl placed its key,
// is sealed and the shard map, read again now, places the key by another
// count than pl: this call placed it by a count the fleet has left (its
// map read was older than the change, or its request landed late). A
// seal left from an earlier spell of pl's count is not in the way.
func (c *Client) checkSeal(ctx context.Context, pl placement, e table.Entity) error {
	if e.Props.Int(PropSealedFor) == 0 {
		return nil
	}
	c.forget()
	at := c.opts.Clock.Now()
	m, err := shard.Read(ctx, c.t)
	if err != nil {
		return fmt.Errorf("unique guard %s is sealed under another shard count; read the shard map again: %w", e.RowKey, err)
	}
	if c.opts.ShardMap {
		c.maps.mu.Lock()
		c.maps.m, c.maps.at = m, at
		c.maps.mu.Unlock()
	}
	if now := placementOf(m.Layout(len(c.opts.Shards))); now.parts.Len() != pl.parts.Len() {
		return fmt.Errorf("unique guard %s sealed for %d shards, placed by %d: %w", e.RowKey, e.Props.Int(PropSealedFor), pl.parts.Len(), ErrShardCountChanged)
	}
	return nil
}

// orDefaults is u with DefaultUniqueStates when it names no states.
func (u Unique) orDefaults() Unique {
	if len(u.States) == 0 {
		u.States = DefaultUniqueStates
	}
	return u
}

// Retake makes task id hold its unique key of type typ again: a dead task
// moved back from the dead letters, which may have lost the key while it
// was dead (a finished task holds it only for its window, and a new task
// may have taken it). The guard is made to name id — inserted when the
// sweep removed it, replaced when it names a task that no longer holds
// the key — with the window and states the task was scheduled with (own:
// Unique.For and States; its Key is not used), or, when those are not
// known (zero: a message of an earlier release, or the defaults), the
// guard's it replaces (the defaults when there is none); a task that
// holds the key refuses it with a *DuplicateError naming that task. A
// guard that still names id keeps its window and states. The guard is
// written as of now, naming requeue (the requeue's token, the one its run
// record lists once the requeue has marked the run queued again): until
// then, a take of the key reads the dead task as holding it (a requeue
// under way), for up to IndexingHold.
func (c *Client) Retake(ctx context.Context, typ, key, id, requeue string, own Unique, live Live) error {
	for range 2 {
		if err := c.retake(ctx, typ, key, id, requeue, own, live); !errors.Is(err, ErrShardCountChanged) {
			return err
		}
	}
	return fmt.Errorf("retake unique key %q of %s: %w", key, id, ErrShardCountChanged)
}

// retake is Retake under one placement.
func (c *Client) retake(ctx context.Context, typ, key, id, requeue string, own Unique, live Live) error {
	pl, err := c.placeFresh(ctx)
	if err != nil {
		return err
	}
	shard := pl.of(typ + "~" + key)
	gk := guardKey(typ, key)
	if prev, ok := pl.prevOf(typ + "~" + key); ok {
		if err := c.sealGuard(ctx, prev, shard, gk, pl.parts.Len()); err != nil {
			return err
		}
	}
	var stale *table.Entity // a guard under another count, to go once the take lands (heldAhead)
	for range retries {
		now := c.opts.Clock.Now()
		var op table.Op
		ge, err := c.t.Get(ctx, shard, gk)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			// (issue 38, seed 4772: inserted with the defaults, a task
			// requeued after its guard was swept held its key for no
			// window once it died again, and a new task took it at once.)
			op = table.Op{Kind: table.Insert, PartitionKey: shard, RowKey: gk, Props: requeueProps(guardProps(id, own.orDefaults(), now, pl.parts.Len()), requeue)}
		case err != nil:
			return fmt.Errorf("retake unique key %q of %s: %w", key, id, err)
		default:
			if err := c.checkSeal(ctx, pl, ge); err != nil {
				return err
			}
			ahead, st, err := c.heldAhead(ctx, pl, ge, id, live)
			switch {
			case err != nil:
				return fmt.Errorf("retake unique key %q of %s: %w", key, id, err)
			case ahead != nil:
				return ahead
			}
			stale = st
			g := readGuard(typ, key, ge)
			if g.Task != id {
				holds, err := holding(ctx, live, g)
				if err != nil {
					return fmt.Errorf("retake unique key %q of %s: check the task holding it: %w", key, id, err)
				}
				if holds {
					return &DuplicateError{Type: typ, Key: key, ID: g.Task}
				}
			}
			// Taken (again, when it still names the task, with its own
			// window and states) from now, naming the requeue: a take
			// between this write and the requeue's mark of the run finds a
			// requeue of the dead task under way, which holds the key
			// (heldBy, leasecron's unique.go; issue 38, sweep seed 136364:
			// a schedule in that gap found the task dead, took the key
			// over, and both ran). A guard sealed in an earlier spell of
			// another count and left here is unsealed by the rewrite: the
			// walk of the next change copies it (a sealed one it leaves).
			spec := Unique{For: g.For, States: g.States}
			if g.Task != id && (own.For > 0 || len(own.States) > 0 || g.Task == "") {
				spec = own.orDefaults()
			}
			op = table.Op{Kind: table.Replace, PartitionKey: shard, RowKey: gk, IfMatch: ge.ETag, Props: requeueProps(guardProps(id, spec, now, pl.parts.Len()), requeue)}
		}
		_, err = c.t.Submit(ctx, append([]table.Op{op}, pl.openOp(shard)...))
		if err == nil || !conflict(err) {
			if err != nil {
				return fmt.Errorf("retake unique key %q of %s: %w", key, id, err)
			}
			c.dropStale(ctx, stale)
			c.sealLanded(ctx, pl, typ, key, shard)
			return nil
		}
		if closed, rerr := c.closed(ctx, pl, shard, err); closed {
			if rerr != nil {
				return fmt.Errorf("retake unique key %q of %s: %w", key, id, rerr)
			}
			return fmt.Errorf("retake unique key %q of %s: shard %s is closed to takes placed by %d shards: %w", key, id, shard, pl.parts.Len(), ErrShardCountChanged)
		}
	}
	return fmt.Errorf("retake unique key %q of %s: still contended after %d attempts", key, id, retries)
}

// GuardOf reads the guard of a type and key (ErrNotFound when none).
func (c *Client) GuardOf(ctx context.Context, typ, key string) (Guard, error) {
	pl, err := c.placeFresh(ctx)
	if err != nil {
		return Guard{}, err
	}
	gk := guardKey(typ, key)
	e, err := c.t.Get(ctx, pl.of(typ+"~"+key), gk)
	if prev, ok := pl.prevOf(typ + "~" + key); ok && errors.Is(err, storage.ErrNotFound) {
		e, err = c.t.Get(ctx, prev, gk)
	}
	if err == nil && e.Props.Str(PropGuardTask) == "" {
		err = storage.ErrNotFound // a bare seal
	}
	if err != nil {
		if errors.Is(err, storage.ErrNotFound) {
			return Guard{}, fmt.Errorf("%w: no unique guard for type %s key %q", ErrNotFound, typ, key)
		}
		return Guard{}, err
	}
	return readGuard(typ, key, e), nil
}

// sweepGuards deletes the guards of shard whose task no longer holds the
// key, among those due for a check, and moves the others' next check on.
// It returns how many it deleted. A guard whose holder cannot be checked
// is left as it is and the others are still swept; the first such error
// is returned at the end.
func sweepGuards(ctx context.Context, t table.Table, shard string, now time.Time, live Live) (int, error) {
	q := table.Query{Partition: shard, From: GuardPrefix, To: guardEnd, Where: []table.Cond{{Prop: PropCheckAfter, Op: table.Le, Value: now}}}
	due, err := table.All(ctx, t, q, 0)
	if err != nil {
		return 0, fmt.Errorf("sweep unique guards of shard %s: %w", shard, err)
	}
	deleted := 0
	var first error
	for _, e := range due {
		typ, key, ok := strings.Cut(strings.TrimPrefix(e.RowKey, GuardPrefix), "~")
		if !ok || isOpenRow(e.RowKey) {
			continue
		}
		holds, err := holding(ctx, live, readGuard(typ, key, e))
		if err != nil {
			if first == nil {
				first = fmt.Errorf("sweep unique guard %s: %w", e.RowKey, err)
			}
			continue
		}
		op := table.Op{Kind: table.Delete, PartitionKey: shard, RowKey: e.RowKey, IfMatch: e.ETag}
		if holds {
			op = table.Op{Kind: table.Merge, PartitionKey: shard, RowKey: e.RowKey, IfMatch: e.ETag, Props: map[string]any{PropCheckAfter: now.Add(GuardRecheck)}}
		}
		// A guard taken over or rechecked meanwhile is left to its new
		// holder: the condition fails.
		if _, err := t.Submit(ctx, []table.Op{op}); err == nil && !holds {
			deleted++
		} else if err != nil && !conflict(err) {
			return deleted, fmt.Errorf("sweep unique guard %s: %w", e.RowKey, err)
		}
	}
	return deleted, first
}

// sealGuard seals the guard gk in shard from, where the previous shard
// count put it, for a count of count (inserting a bare seal when there is
// none), and copies what it sealed to shard to: from then on no take
// placed by the previous count can change it (see SealedFor). A seal for
// another count is one left from an earlier spell: sealed again, what it
// names is not copied (the key's guard was taken or copied since, in the
// shard of that spell's count).
func (c *Client) sealGuard(ctx context.Context, from, to, gk string, count int) error {
	for range retries {
		now := c.opts.Clock.Now()
		e, err := c.t.Get(ctx, from, gk)
		var op table.Op
		switch {
		case errors.Is(err, storage.ErrTableNotFound):
			return nil // nothing was ever written
		case errors.Is(err, storage.ErrNotFound):
			op = table.Op{Kind: table.Insert, PartitionKey: from, RowKey: gk, Props: table.Props{
				PropSealedFor: int64(count), PropCheckAfter: now.Add(GuardRecheck)}}
		case err != nil:
			return fmt.Errorf("read unique guard %s in shard %s: %w", gk, from, err)
		case e.Props.Int(PropSealedFor) == int64(count):
			return c.copySealed(ctx, to, e, count)
		default:
			op = sealOp(e, count, now)
		}
		_, err = c.t.Submit(ctx, []table.Op{op})
		switch {
		case err == nil && op.Kind == table.Merge && e.Props.Int(PropSealedFor) == 0:
			return c.copySealed(ctx, to, e, count)
		case err == nil:
			return nil
		case !conflict(err):
			return fmt.Errorf("seal unique guard %s in shard %s: %w", gk, from, err)
		}
		// Taken, swept or sealed meanwhile: read it again.
	}
	return fmt.Errorf("seal unique guard %s in shard %s: still contended after %d attempts", gk, from, retries)
}

// sealOp seals guard e for count, conditionally on its ETag, keeping it
// from the sweep for GuardRecheck at least (a late take must still find
// it).
func sealOp(e table.Entity, count int, now time.Time) table.Op {
	after := now.Add(GuardRecheck)
	if t := e.Props.Time(PropCheckAfter); t.After(after) {
		after = t
	}
	return table.Op{Kind: table.Merge, PartitionKey: e.PartitionKey, RowKey: e.RowKey, IfMatch: e.ETag,
		Props: table.Props{PropSealedFor: int64(count), PropCheckAfter: after}}
}

// copySealed copies the sealed guard e into shard to, where its key
// belongs under count; a bare seal names no task and is not copied.
func (c *Client) copySealed(ctx context.Context, to string, e table.Entity, count int) error {
	if e.Props.Str(PropGuardTask) == "" {
		return nil
	}
	return c.putGuard(ctx, to, e.RowKey, movedProps(e.Props, count), count)
}

// movedProps are the props of a guard sealed where an earlier shard count
// put it, as written in its shard under count.
func movedProps(p table.Props, count int) table.Props {
	out := table.Props{}
	for k, v := range p {
		if k != PropSealedFor {
			out[k] = v
		}
	}
	out[PropUnder] = int64(count)
	return out
}

// putGuard writes a guard sealed where an earlier shard count put it
// into shard to, its key's shard under count, unless to has a guard of
// its own. A guard there written under count is newer (it was taken, or
// copied, after the seal: every take under count seals first). A sealed
// one is left from an earlier spell of another count and is replaced
// (issue 38, seed 11800: the count went from 2 to 8 and back to 2; the
// key's guard under 2 still named a task from before, and a requeue,
// finding its own task named there, took the key that a task scheduled
// under 8 held). A guard of a release before the seal (no Under) is
// replaced when older (PropCreated). A change of to's guard meanwhile (a
// take, the sweep) is read again.
func (c *Client) putGuard(ctx context.Context, to, gk string, props table.Props, count int) error {
	created := props.Time(PropCreated)
	for range retries {
		_, err := c.t.Submit(ctx, []table.Op{{Kind: table.Insert, PartitionKey: to, RowKey: gk, Props: props}})
		if !errors.Is(err, storage.ErrAlreadyExists) {
			if err != nil {
				return fmt.Errorf("copy unique guard %s to shard %s: %w", gk, to, err)
			}
			return nil
		}
		cur, err := c.t.Get(ctx, to, gk)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			continue // swept meanwhile: insert the copy after all
		case err != nil:
			return fmt.Errorf("read unique guard %s in shard %s: %w", gk, to, err)
		case cur.Props.Int(PropSealedFor) != 0:
			// Left from an earlier spell: replace it.
		case cur.Props.Int(PropUnder) == int64(count):
			return nil // a take under this count, or this very copy
		case cur.Props.Int(PropUnder) == 0 && !cur.Props.Time(PropCreated).Before(created):
			return nil // an earlier release's guard, as new or newer
		}
		// Older: replace it unless it changed meanwhile (a take, or the
		// sweep's new check time), then look again.
		_, err = c.t.Submit(ctx, []table.Op{{Kind: table.Replace, PartitionKey: to, RowKey: gk, IfMatch: cur.ETag, Props: props}})
		switch {
		case err == nil:
			return nil
		case !conflict(err) && !errors.Is(err, storage.ErrNotFound):
			return fmt.Errorf("copy unique guard %s to shard %s: %w", gk, to, err)
		}
	}
	return fmt.Errorf("copy unique guard %s to shard %s: still contended after %d attempts", gk, to, retries)
}
