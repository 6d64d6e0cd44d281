package runs

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/storage"
	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/internal/trunc"
	"github.com/leasecron/leasecron/leasecrontype"
)

// A series' summary row, "s~{series}" in the series' partition, keeps the
// latest outcome of its last SummarySlots occurrences: occurrence number
// Seq (queue.Envelope.Seq, counted by the mover) writes slot Seq mod
// SummarySlots. The claim, the finish and every other change of an
// occurrence merge their slot into the row inside the transaction that
// changes the run, so it costs no request of its own, and a series'
// latest outcomes are one point read (Recent) instead of a range query.
//
// The row is a summary, not a record: a slot holds whichever occurrence
// of its residue was written last, so an occurrence that ends after the
// SummarySlots-th one after it began overwrites the newer one's slot until
// that one's next change, and a run queued but not yet claimed still shows
// the occurrence before it in its slot. Occurrences sent by a mover that
// did not number them (Seq 0) have no slot.
const (
	// SummarySlots is how many of a series' latest occurrences its
	// summary row keeps.
	SummarySlots = 5
	// MaxSummaryError is the most error text a summary slot keeps.
	MaxSummaryError = 200

	prefixSummary = "s~" // series summary row: s~{series}
	slotProp      = "Slot"
)

// slot is what a summary slot holds about one occurrence.
type slot struct {
	Seq      int64     `json:"seq"`
	Due      time.Time `json:"due"`
	State    State     `json:"state"`
	Attempts int       `json:"attempts,omitempty"`
	Finished time.Time `json:"finished,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// summaryKey returns the RowKey of series' summary row.
func summaryKey(series string) string { return prefixSummary + series }

// withSummary returns ops with the merge of next's slot into its series'
// summary row appended, when next is a numbered occurrence.
func withSummary(ops []table.Op, next Run) []table.Op {
	if next.Series == "" || next.Seq <= 0 {
		return ops
	}
	b, err := json.Marshal(slot{Seq: next.Seq, Due: next.Due, State: next.State, Attempts: next.Attempts,
		Finished: next.Finished, Error: trunc.Head(next.LastError, MaxSummaryError)})
	if err != nil {
		return ops
	}
	name := slotProp + strconv.FormatInt(next.Seq%SummarySlots, 10)
	return append(ops, table.Op{Kind: table.UpsertMerge, PartitionKey: next.pk, RowKey: summaryKey(next.Series), Props: table.Props{name: string(b)}})
}

// Recent returns the latest outcomes of series' occurrences from its
// summary row, newest due first, without those past their retention: one
// point read. ok is false when the series has no summary row (none of its
// occurrences was numbered, or the row was cleaned): Query with Series
// then reads the records themselves.
func (s *Store) Recent(ctx context.Context, series string) (rs []leasecrontype.Run, ok bool, err error) {
	if series == "" {
		return nil, false, fmt.Errorf("%w: no series id", ErrInvalid)
	}
	if err := checkSeries(series); err != nil {
		return nil, false, err
	}
	if err := s.ensure(ctx); err != nil {
		return nil, false, err
	}
	var rw table.Entity
	l, err := s.fullLayout(ctx)
	if err != nil {
		return nil, false, err
	}
	for _, pk := range l.homes(series) {
		var err error
		rw, err = s.t.Get(ctx, pk, summaryKey(series))
		if err == nil {
			break
		}
		if !errors.Is(err, storage.ErrNotFound) {
			return nil, false, fmt.Errorf("runs: read the summary of series %s: %w", series, err)
		}
	}
	if rw.RowKey == "" {
		return nil, false, nil
	}
	for _, r := range s.liveSlots(rw, s.now()) {
		rs = append(rs, r.Public())
	}
	return rs, true, nil
}

// liveSlots returns the occurrences a summary row shows, newest due
// first, without those past their retention at now: what Recent returns,
// and what keeps the row from the cleaner.
func (s *Store) liveSlots(rw table.Entity, now time.Time) []Run {
	series := strings.TrimPrefix(rw.RowKey, prefixSummary)
	var out []Run
	for _, sl := range decodeSlots(rw.Props) {
		r := Run{Run: leasecrontype.Run{ID: OccurrenceID(series, sl.Due), Series: series, State: sl.State, Attempts: sl.Attempts,
			Due: sl.Due, Finished: sl.Finished, LastError: sl.Error, Updated: rw.Timestamp}}
		if !s.expired(r, now) {
			out = append(out, r)
		}
	}
	return out
}

// decodeSlots reads a summary row's slots, newest due first; a slot that
// cannot be read is left out.
func decodeSlots(p table.Props) []slot {
	var out []slot
	for i := range SummarySlots {
		raw := p.Str(slotProp + strconv.Itoa(i))
		var sl slot
		if raw == "" || json.Unmarshal([]byte(raw), &sl) != nil || sl.Due.IsZero() || !sl.State.Valid() {
			continue
		}
		sl.Due, sl.Finished = sl.Due.UTC(), sl.Finished.UTC()
		out = append(out, sl)
	}
	slices.SortFunc(out, func(a, b slot) int { return cmp.Or(b.Due.Compare(a.Due), cmp.Compare(b.Seq, a.Seq)) })
	return out
}

// checkSeries refuses a series id that cannot key a run record.
func checkSeries(series string) error {
	if strings.ContainsAny(series, "~'/\\#?") {
		return fmt.Errorf("%w: series %q: a series id has no ~ ' / \\ # ?", ErrInvalid, series)
	}
	return nil
}
