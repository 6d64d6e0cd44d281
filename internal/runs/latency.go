package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/leasecron/leasecron/internal/table"
)

// LatencyBounds are the upper bounds, in seconds, of the latency
// histograms' buckets; one more bucket holds everything slower.
var LatencyBounds = [...]float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800}

// Histogram counts durations per bucket of LatencyBounds (the last bucket
// is unbounded).
type Histogram [len(LatencyBounds) + 1]int64

// Observe counts d.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	for i, b := range LatencyBounds {
		if s <= b {
			h[i]++
			return
		}
	}
	h[len(LatencyBounds)]++
}

// Add adds o to h.
func (h *Histogram) Add(o Histogram) {
	for i := range h {
		h[i] += o[i]
	}
}

// Count is how many durations h holds.
func (h Histogram) Count() int64 {
	var n int64
	for _, x := range h {
		n += x
	}
	return n
}

// Quantile estimates the q-quantile (0 < q ≤ 1) by linear interpolation
// within its bucket; 0 when h is empty. The unbounded bucket answers its
// lower bound.
func (h Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := q * float64(n)
	var seen float64
	for i, x := range h {
		if x == 0 {
			continue
		}
		if seen+float64(x) >= rank {
			lo := 0.0
			if i > 0 {
				lo = LatencyBounds[i-1]
			}
			if i == len(LatencyBounds) {
				return secs(lo)
			}
			return secs(lo + (LatencyBounds[i]-lo)*math.Max(0, rank-seen)/float64(x))
		}
		seen += float64(x)
	}
	return secs(LatencyBounds[len(LatencyBounds)-1])
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// Latency is one task type's queue wait (due to start, first attempts)
// and run time (every attempt) histograms.
type Latency struct {
	Wait Histogram `json:"w"`
	Run  Histogram `json:"r"`
}

// Add adds o to l.
func (l *Latency) Add(o Latency) {
	l.Wait.Add(o.Wait)
	l.Run.Add(o.Run)
}

func (l Latency) sub(o Latency) Latency {
	for i := range l.Wait {
		l.Wait[i] -= o.Wait[i]
		l.Run[i] -= o.Run[i]
	}
	return l
}

// addLatency adds every type of o into *m.
func addLatency(m *map[string]Latency, o map[string]Latency) {
	if len(o) == 0 {
		return
	}
	if *m == nil {
		*m = map[string]Latency{}
	}
	for t, l := range o {
		x := (*m)[t]
		x.Add(l)
		(*m)[t] = x
	}
}

// Hourly roll-ups keep the fleet's counts and latency per hour beyond the
// per-minute rows' CountersKept, for the 7-day charts: partition "~h",
// RowKey "yyyymmddhh", one row per hour summing every instance. Clean
// writes the hours that have ended since the last pass (one query of the
// minute rows, one transaction) and removes those older than HoursKept.
//
// Beside them, per instance and hour, partition "~i", RowKey
// "yyyymmddhh~{instance}": the instance's counts of that hour (no
// latency), kept InstanceHoursKept, so that the last 24 hours' counts
// (`stats`, the overview, the fleet page) are read from at most a day of
// hourly rows and the minute rows since the last roll-up rather than a
// day of minute rows. Their own mark ("rolledinst") says how far they go.
//
// And fleet-wide per five minutes, partition "~f", RowKey "yyyymmddhhmm",
// kept FivesKept: the 6-hour charts' steps.
const (
	hourPK      = "~h"
	fivePK      = "~f"
	fiveRowFmt  = "200601021504"
	fiveStep    = 5 * time.Minute
	instHourPK  = "~i"
	hourRowFmt  = "2006010215"
	metaRolled  = "rolled"
	metaInst    = "rolledinst"
	metaFive    = "rolledfive"
	rollupDelay = 5 * time.Minute // late flushes of an hour's last minutes
	// HoursKept is how long the hourly roll-ups are kept.
	HoursKept = 8 * 24 * time.Hour
	// InstanceHoursKept is how long the per-instance hourly rows are kept.
	InstanceHoursKept = statsWindow + 2*time.Hour
	// FivesKept is how long the five-minute roll-ups are kept.
	FivesKept = 8 * time.Hour
)

// Hour is the fleet's counts and latency of one hour or one minute.
type Hour struct {
	At      time.Time
	ByType  map[string]Counts
	Latency map[string]Latency
}

// rollup writes the hourly rows of the hours that ended since the last
// pass (at most CountersKept back), and removes those older than
// HoursKept.
func (s *Store) rollup(ctx context.Context, now time.Time) error {
	through := now.Add(-rollupDelay).Truncate(time.Hour)
	fleetFrom, instFrom, fiveFrom := s.rolledThrough(ctx, metaRolled, now), s.rolledThrough(ctx, metaInst, now), s.rolledThrough(ctx, metaFive, now)
	if f := now.Add(-FivesKept).Truncate(time.Hour); fiveFrom.Before(f) {
		fiveFrom = f
	}
	from := fleetFrom
	for _, t := range []time.Time{instFrom, fiveFrom} {
		if t.Before(from) {
			from = t
		}
	}
	if !through.After(from) {
		return nil
	}
	hours, fives := map[time.Time]*Hour{}, map[time.Time]*Hour{}
	type instHour struct {
		at time.Time
		c  Counters
	}
	insts := map[string]*instHour{} // by "yyyymmddhh~instance"
	err := s.minuteRows(ctx, from, true, func(t time.Time, inst string, c Counters) {
		if !t.Before(through) {
			return
		}
		h := t.Truncate(time.Hour)
		if !h.Before(fleetFrom) {
			sumInto(hours, h, c)
		}
		if !h.Before(fiveFrom) {
			sumInto(fives, t.Truncate(fiveStep), c)
		}
		if !h.Before(instFrom) {
			k := h.Format(hourRowFmt) + "~" + sanitizeKey(inst)
			x := insts[k]
			if x == nil {
				x = &instHour{at: h, c: Counters{Instance: inst, Instances: 1, ByType: map[string]Counts{}}}
				insts[k] = x
			}
			c.Lat = nil
			x.c.add(c)
		}
	})
	if err != nil {
		return err
	}
	var ops []table.Op
	for pk, rows := range map[string]map[time.Time]*Hour{hourPK: hours, fivePK: fives} {
		for _, h := range rows {
			bt, _ := json.Marshal(h.ByType)
			lat, _ := json.Marshal(h.Latency)
			rk := h.At.Format(hourRowFmt)
			if pk == fivePK {
				rk = h.At.Format(fiveRowFmt)
			}
			ops = append(ops, table.Op{Kind: table.Upsert, PartitionKey: pk, RowKey: rk,
				Props: table.Props{"Hour": h.At, "ByType": string(bt), "Lat": string(lat)}})
		}
	}
	for k, x := range insts {
		bt, _ := json.Marshal(x.c.ByType)
		op := counterRow(x.at, x.c.Instance, x.c.Version, x.c.Updated, string(bt), x.c)
		op.PartitionKey, op.RowKey = instHourPK, k
		ops = append(ops, op)
	}
	if err := submitChunked(ctx, s.t, ops); err != nil {
		return fmt.Errorf("runs: write hourly counters: %w", err)
	}
	for pk, keep := range map[string]time.Duration{hourPK: HoursKept, instHourPK: InstanceHoursKept, fivePK: FivesKept} {
		old, err := table.All(ctx, s.t, table.Query{Partition: pk, To: now.Add(-keep).Format(hourRowFmt), Select: []string{"Hour"}}, 0)
		if err == nil {
			s.deleteRows(ctx, old)
		}
	}
	return submit(ctx, s.t, []table.Op{
		{Kind: table.Upsert, PartitionKey: metaPK, RowKey: metaRolled, Props: table.Props{"Through": through}},
		{Kind: table.Upsert, PartitionKey: metaPK, RowKey: metaInst, Props: table.Props{"Through": through}},
		{Kind: table.Upsert, PartitionKey: metaPK, RowKey: metaFive, Props: table.Props{"Through": through}},
	})
}

// rolledThrough is where the roll-up marked by key resumes: the end of the
// last hour it wrote, or as far back as the minute rows go.
func (s *Store) rolledThrough(ctx context.Context, key string, now time.Time) time.Time {
	from := now.Add(-CountersKept).Truncate(time.Hour)
	if rw, err := s.t.Get(ctx, metaPK, key); err == nil {
		if t := rw.Props.Time("Through"); t.After(from) {
			from = t
		}
	}
	return from
}

// Hours returns the hourly roll-ups from since on, oldest first, and the
// end of the last hour rolled up (minute rows cover what follows).
func (s *Store) Hours(ctx context.Context, since time.Time) ([]Hour, time.Time, error) {
	return s.rolled(ctx, hourPK, metaRolled, since.UTC().Truncate(time.Hour).Format(hourRowFmt))
}

// Fives returns the five-minute roll-ups from since on (at most FivesKept
// back), oldest first, and the end of the last hour rolled up.
func (s *Store) Fives(ctx context.Context, since time.Time) ([]Hour, time.Time, error) {
	return s.rolled(ctx, fivePK, metaFive, since.UTC().Truncate(fiveStep).Format(fiveRowFmt))
}

// rolled reads the roll-up rows of partition pk from the key from on, and
// the mark saying how far they go.
func (s *Store) rolled(ctx context.Context, pk, mark, from string) ([]Hour, time.Time, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, time.Time{}, err
	}
	var through time.Time
	if rw, err := s.t.Get(ctx, metaPK, mark); err == nil {
		through = rw.Props.Time("Through")
	}
	rows, err := table.All(ctx, s.t, table.Query{Partition: pk, From: from}, 0)
	if err != nil {
		return nil, through, fmt.Errorf("runs: read hourly counters: %w", err)
	}
	out := make([]Hour, 0, len(rows))
	for _, rw := range rows {
		h := Hour{At: rw.Props.Time("Hour"), ByType: map[string]Counts{}}
		_ = json.Unmarshal([]byte(rw.Props.Str("ByType")), &h.ByType)
		_ = json.Unmarshal([]byte(rw.Props.Str("Lat")), &h.Latency)
		out = append(out, h)
	}
	return out, through, nil
}

// Minutes returns the fleet's counts and latency per minute from since
// on (every instance summed), oldest first, minutes with nothing left out.
func (s *Store) Minutes(ctx context.Context, since time.Time) ([]Hour, error) {
	by := map[time.Time]*Hour{}
	err := s.minuteRows(ctx, since, true, func(t time.Time, _ string, c Counters) { sumInto(by, t, c) })
	out := make([]Hour, 0, len(by))
	for _, h := range by {
		out = append(out, *h)
	}
	sortHours(out)
	return out, err
}

// sumInto adds one instance's counts and latency into the sum at at.
func sumInto(by map[time.Time]*Hour, at time.Time, c Counters) {
	x := by[at]
	if x == nil {
		x = &Hour{At: at, ByType: map[string]Counts{}}
		by[at] = x
	}
	for typ, n := range c.ByType {
		y := x.ByType[typ]
		y.Add(n)
		x.ByType[typ] = y
	}
	addLatency(&x.Latency, c.Lat)
}

func sortHours(hs []Hour) { sort.Slice(hs, func(i, j int) bool { return hs[i].At.Before(hs[j].At) }) }

// encodeLatency is a counters row's "Lat" property: per type, the two
// histograms (empty when nothing was timed).
func encodeLatency(l map[string]Latency) string {
	if len(l) == 0 {
		return ""
	}
	b, _ := json.Marshal(l)
	return string(b)
}

func decodeLatency(s string) map[string]Latency {
	if s == "" || !strings.HasPrefix(s, "{") {
		return nil
	}
	var out map[string]Latency
	if json.Unmarshal([]byte(s), &out) != nil {
		return nil
	}
	return out
}

// SeedCounters writes per-minute counters rows as workers would have
// (one per instance and minute of ms, each with counts and latency c), in
// transactions of 100 per day: for benchmarks that need a fleet's history.
func (s *Store) SeedCounters(ctx context.Context, instances []string, ms []time.Time, c Counters) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	byType, _ := json.Marshal(c.ByType)
	var ops []table.Op
	for _, t := range ms {
		t = t.UTC().Truncate(time.Minute)
		for _, inst := range instances {
			ops = append(ops, counterRow(t, inst, "", t, string(byType), c))
		}
	}
	if err := submitChunked(ctx, s.t, ops); err != nil {
		return fmt.Errorf("runs: seed counters: %w", err)
	}
	return nil
}

// submitChunked applies ops, which may span partitions, in transactions of
// up to table.MaxOps per partition; the first error stops it.
func submitChunked(ctx context.Context, t table.Table, ops []table.Op) error {
	for _, chunk := range chunks(ops) {
		if err := submit(ctx, t, chunk); err != nil {
			return err
		}
	}
	return nil
}

// chunks splits ops into transactions: by partition, in the order the
// partitions first appear, at most table.MaxOps each.
func chunks(ops []table.Op) [][]table.Op {
	byPK := map[string][]table.Op{}
	var order []string
	for _, op := range ops {
		if byPK[op.PartitionKey] == nil {
			order = append(order, op.PartitionKey)
		}
		byPK[op.PartitionKey] = append(byPK[op.PartitionKey], op)
	}
	var out [][]table.Op
	for _, pk := range order {
		for rest := byPK[pk]; len(rest) > 0; {
			n := min(len(rest), table.MaxOps)
			out = append(out, rest[:n])
			rest = rest[n:]
		}
	}
	return out
}

// RollUp writes the hourly roll-ups of the hours ended since the last
// pass, as Clean does.
func (s *Store) RollUp(ctx context.Context) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	return s.rollup(ctx, s.now())
}
