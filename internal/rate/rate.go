// Package rate limits how many tasks of a type (or of one key within a
// type) start per time window, across the fleet: a sliding window of the
// last starts, kept in one table row per type and key and changed with
// conditional writes.
//
// A start is allowed when fewer than Count starts were recorded in the
// last Per (plus Margin, for the moment between taking the budget and the
// run's start being recorded); it costs one read and one conditional
// write. A task over its budget learns when the oldest start in the
// window leaves it, and waits for that (the caller adds jitter), at the
// cost of one read. A start taken long before its work could begin is
// moved to when it begins (Move), in the same read and write.
//
// Each start has a millisecond of its own in the row (never one a start
// taken out of the window had while that one could still be in it), and
// each write a token, so that a release or a move takes out only its own
// start, and a write the SDK retried after its answer was lost is
// recognised as made when the row still shows it; when another write
// came between, a take or a move made again only counts a start more.
package rate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/retry"
	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/timelist"
)

// Rate is a number of starts per window.
type Rate struct {
	Count int
	Per   time.Duration
}

// Bounds of a rate.
const (
	MaxCount = 3000
	MinPer   = time.Second
	MaxPer   = 7 * 24 * time.Hour
)

// ErrInvalid is wrapped by Parse's refusals.
var ErrInvalid = errors.New("invalid rate")

// Parse reads "COUNT/WINDOW": "10/1m", "100/1h", "5/30s".
func Parse(s string) (Rate, error) {
	c, w, ok := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.Atoi(strings.TrimSpace(c))
	if !ok || err != nil {
		return Rate{}, fmt.Errorf("%w %q: want COUNT/WINDOW, e.g. 10/1m or 100/1h", ErrInvalid, s)
	}
	per, err := time.ParseDuration(strings.TrimSpace(w))
	if err != nil {
		return Rate{}, fmt.Errorf("%w %q: window %q is not a duration (e.g. 30s, 1m, 1h)", ErrInvalid, s, w)
	}
	r := Rate{Count: n, Per: per}
	return r, r.Validate()
}

// Validate refuses a rate outside the bounds.
func (r Rate) Validate() error {
	switch {
	case r.Count < 1 || r.Count > MaxCount:
		return fmt.Errorf("%w %s: count %d: want 1 to %d starts per window", ErrInvalid, r, r.Count, MaxCount)
	case r.Per < MinPer || r.Per > MaxPer:
		return fmt.Errorf("%w %s: window %s: want %s to %s", ErrInvalid, r, r.Per, MinPer, MaxPer)
	}
	return nil
}

func (r Rate) String() string { return fmt.Sprintf("%d/%s", r.Count, r.Per) }

// Partition holds the limiter rows; it is no schedule shard, so the mover
// never reads it.
const Partition = "~rate"

// PropStarts holds a row's recorded starts (see encode).
const PropStarts = "Starts"

// PropWrite holds a token of the write that last changed the row, so that
// a limiter told the row changed under its write (the SDK retried the
// write after its first answer was lost) can tell its own write from
// another worker's. A row written by a release without it is read as
// written by someone else.
const PropWrite = "Write"

// PropFreed holds the milliseconds of starts taken out of the window
// (moved or released) that have not left it yet: a new start is not
// recorded in one of them, so that a take-back or move made again after
// its answer was lost, finding its start gone, cannot take out a start
// recorded since in the same millisecond.
const PropFreed = "Freed"

// DefaultMargin is Options.Margin's default.
const DefaultMargin = time.Second

// Limiter keeps the starts of each type and key in a table.
type Limiter struct {
	t      table.Table
	now    func() time.Time
	margin time.Duration
}

// New returns a limiter over t. now is the clock; margin widens every
// window (DefaultMargin when 0), so that a start taken just before the
// window's end and recorded just after it still counts.
func New(t table.Table, now func() time.Time, margin time.Duration) *Limiter {
	if margin == 0 {
		margin = DefaultMargin
	}
	return &Limiter{t: t, now: now, margin: margin}
}

// RowKey is the row of a type's (and key's) starts.
func RowKey(typ, key string) string {
	if key == "" {
		return "rl~" + typ
	}
	return "rl~" + typ + "~" + key
}

// tries bounds the conditional writes one Take makes when other workers
// write the same row meanwhile; between them it waits a little (jittered,
// from 10 ms doubling to 200 ms) so that they do not collide again.
const tries = 16

// Take records a start of typ (and key) under r, and returns when it was
// recorded (read after the row, so that a slow read does not age it), or
// returns how long until one of the recorded starts leaves the window
// (0, the start and nil: started).
func (l *Limiter) Take(ctx context.Context, typ, key string, r Rate) (time.Duration, time.Time, error) {
	return l.take(ctx, typ, key, r, time.Time{}, false)
}

// Move is Take for a caller that already recorded a start at from (as Take
// returned it) and has not begun the work it stands for: from is taken out
// of the window and a start is recorded now instead, in one conditional
// write, so that a start recorded long before its work began (the claim
// between them slowed by failing storage) counts from when it begins.
// Refused — the window holds Count starts without from — from is taken
// out all the same (the work does not begin now) and the wait is
// returned. A from already gone from the window (it left it) takes
// nothing out.
func (l *Limiter) Move(ctx context.Context, typ, key string, r Rate, from time.Time) (time.Duration, time.Time, error) {
	if from.IsZero() {
		return 0, time.Time{}, fmt.Errorf("rate of %s: no start to move", RowKey(typ, key))
	}
	return l.take(ctx, typ, key, r, from, false)
}

// Release takes the start recorded at from out of the window, for a
// caller whose work will not begin after all (put back before it could),
// so that the start is not spent; a from gone from the window writes
// nothing.
func (l *Limiter) Release(ctx context.Context, typ, key string, r Rate, from time.Time) error {
	if from.IsZero() {
		return nil
	}
	_, _, err := l.take(ctx, typ, key, r, from, true)
	return err
}

// take is Take, or Move when from is set, or Release when out is set too.
func (l *Limiter) take(ctx context.Context, typ, key string, r Rate, from time.Time, out bool) (time.Duration, time.Time, error) {
	rk := RowKey(typ, key)
	// The last write refused as a conflict, and what it would have
	// answered: found on the row at the next read, it was this limiter's
	// own, carried out though its answer was lost, and is not made again
	// (issue 38, sweep seed 142483: a release made again took another
	// start of the same millisecond out of the window).
	var sent struct {
		token string
		wait  time.Duration
		at    time.Time
	}
	for try := range tries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return 0, time.Time{}, ctx.Err()
			case <-time.After(retry.Jitter(retry.Exp(10*time.Millisecond, 200*time.Millisecond, try), rand.Float64())):
			}
		}
		e, err := l.t.Get(ctx, Partition, rk)
		exists := err == nil
		switch {
		case errors.Is(err, storage.ErrNotFound):
		case err != nil:
			return 0, time.Time{}, fmt.Errorf("rate of %s: %w", rk, err)
		}
		if exists && sent.token != "" && e.Props.Str(PropWrite) == sent.token {
			return sent.wait, sent.at, nil
		}
		now := l.now()
		var starts, freed []time.Time
		if exists {
			starts, freed = decode(e.Props.Str(PropStarts)), decode(e.Props.Str(PropFreed))
		}
		window := r.Per + l.margin
		old := func(s time.Time) bool { return !s.After(now.Add(-window)) }
		starts, freed = slices.DeleteFunc(starts, old), slices.DeleteFunc(freed, old)
		moved := false // from was in the window, and is taken out
		if !from.IsZero() {
			// Stored to the millisecond, each start in one of its own
			// (below; a row an earlier release wrote may hold two of one
			// millisecond, the same entry to the window).
			if i := slices.IndexFunc(starts, func(s time.Time) bool { return s.UnixMilli() == from.UnixMilli() }); i >= 0 {
				freed = append(freed, starts[i])
				starts, moved = slices.Delete(starts, i, i+1), true
			}
		}
		var wait time.Duration
		switch {
		case out && !moved:
			return 0, time.Time{}, nil
		case out:
		case len(starts) >= r.Count:
			// The start that frees a place is the Count-th newest.
			wait = starts[len(starts)-r.Count].Add(window).Sub(now)
			if !moved {
				return wait, time.Time{}, nil
			}
		default:
			// Each start in a millisecond of its own, and not one a start
			// taken out of the window had (the row keeps them to the
			// millisecond), so that a release or a move takes out its own
			// start and never another's: two deliveries of one worker can
			// take theirs at one instant. A start recorded a few
			// milliseconds late only counts that much longer.
			used := func(s time.Time) bool { return s.UnixMilli() == now.UnixMilli() }
			for slices.ContainsFunc(starts, used) || slices.ContainsFunc(freed, used) {
				now = now.Add(time.Millisecond)
			}
			starts = append(starts, now)
		}
		if len(freed) > MaxCount {
			slices.SortFunc(freed, time.Time.Compare)
			freed = freed[len(freed)-MaxCount:] // the newest
		}
		token := strconv.FormatUint(rand.Uint64(), 36)
		op := table.Op{Kind: table.Insert, PartitionKey: Partition, RowKey: rk, Props: map[string]any{PropStarts: encode(starts), PropWrite: token}}
		if len(freed) > 0 {
			op.Props[PropFreed] = encode(freed)
		}
		if exists {
			op.Kind, op.IfMatch = table.Replace, e.ETag
		}
		at := now // what the write answers: a start recorded now, or none
		if wait > 0 || out {
			at = time.Time{}
		}
		_, err = l.t.Submit(ctx, []table.Op{op})
		switch {
		case err == nil:
			return wait, at, nil
		case errors.Is(err, storage.ErrTableNotFound):
			return 0, time.Time{}, fmt.Errorf("rate of %s: %w", rk, err)
		case errors.Is(err, storage.ErrPreconditionFailed), errors.Is(err, storage.ErrAlreadyExists):
			// Another worker took a start meanwhile, or this write landed
			// and its answer was lost: read again.
			sent.token, sent.wait, sent.at = token, wait, at
			continue
		default:
			return 0, time.Time{}, fmt.Errorf("rate of %s: %w", rk, err)
		}
	}
	return 0, time.Time{}, fmt.Errorf("rate of %s: still contended after %d tries", rk, tries)
}

// encode and decode are the row's form of the starts (see timelist).
func encode(ts []time.Time) string { return timelist.Encode(ts) }

func decode(s string) []time.Time { return timelist.Decode(s, MaxCount+1) }
