package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/leasecron/leasecron/internal/table"
	"github.com/leasecron/leasecron/leasecrontype"
)

// Counts are outcome counts of one worker instance or of the fleet
// (leasecrontype.Counts).
type Counts = leasecrontype.Counts

// counterNames name the fields of Counts in counterFields' order: the
// properties of a counters row.
var counterNames = []string{"Handled", "Failed", "Retried", "Dead", "Duplicates", "Cancelled", "SetAside", "Deferred", "Abandoned", "Misrouted"}

func counterFields(c *Counts) []*int64 {
	return []*int64{&c.Handled, &c.Failed, &c.Retried, &c.Dead, &c.Duplicates, &c.Cancelled, &c.SetAside, &c.Deferred, &c.Abandoned, &c.Misrouted}
}

// subCounts returns c − o.
func subCounts(c, o Counts) Counts {
	of := counterFields(&o)
	for i, f := range counterFields(&c) {
		*f -= *of[i]
	}
	return c
}

// Counters are one instance's counts, or the sum of several.
type Counters struct {
	// Instance is the worker instance id; empty for a sum.
	Instance string
	// Version is the instance's version as its latest row gives it (the
	// writer's Options.Version); empty for a sum.
	Version string
	// Updated is when the counts were last written (the latest of all for
	// a sum).
	Updated time.Time
	// Instances is the number of instances summed (1 for a single one).
	Instances int
	// Total sums every type.
	Total Counts
	// ByType holds the counts per task type.
	ByType map[string]Counts
	// Lat holds the queue wait and run time histograms per task type.
	Lat map[string]Latency
}

// Types returns the type names of ByType, sorted.
func (c Counters) Types() []string {
	out := make([]string, 0, len(c.ByType))
	for k := range c.ByType {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (c *Counters) add(o Counters) {
	c.Total.Add(o.Total)
	if c.ByType == nil {
		c.ByType = map[string]Counts{}
	}
	for t, n := range o.ByType {
		x := c.ByType[t]
		x.Add(n)
		c.ByType[t] = x
	}
	addLatency(&c.Lat, o.Lat)
	if o.Updated.After(c.Updated) {
		c.Updated = o.Updated
		if o.Version != "" && o.Instance == c.Instance {
			c.Version = o.Version
		}
	}
}

// sub returns c − o, type by type.
func (c Counters) sub(o Counters) Counters {
	out := Counters{Instance: c.Instance, Total: subCounts(c.Total, o.Total), ByType: map[string]Counts{}}
	for t, n := range c.ByType {
		if d := subCounts(n, o.ByType[t]); d != (Counts{}) {
			out.ByType[t] = d
		}
	}
	for t, l := range c.Lat {
		if d := l.sub(o.Lat[t]); d != (Latency{}) {
			if out.Lat == nil {
				out.Lat = map[string]Latency{}
			}
			out.Lat[t] = d
		}
	}
	return out
}

// Minute is the fleet's counts of one minute.
type Minute struct {
	// Minute is the minute's start (UTC).
	Minute time.Time
	// Counts are what every worker counted in that minute.
	Counts
}

// Counters are kept per minute: each worker writes, for every minute in
// which its counts changed, one row holding that minute's increments, in
// partition "~m{yyyymmdd}" with RowKey "{hhmm}~{instance}". Rows are kept
// for CountersKept and then removed by Clean, so the counters stay bounded
// however long a fleet runs and however many instances come and go.
const (
	// CountersKept is how long per-minute counters are kept.
	CountersKept = 48 * time.Hour
	// statsWindow is what SumCounters adds up.
	statsWindow  = 24 * time.Hour
	minutePrefix = "~m"
	minuteDayFmt = "20060102"
	minuteRowFmt = "1504"
)

// minuteCounters is a Store's memory of what it has written: per instance,
// the cumulative counts last written and the increments of the minutes
// not yet final.
type minuteCounters struct {
	mu      sync.Mutex
	last    map[string]Counters
	pending map[string]map[time.Time]Counters
}

func minutePartition(t time.Time) string { return minutePrefix + t.UTC().Format(minuteDayFmt) }

// FlushCounters records one instance's cumulative counts c: the increase
// since its previous flush counts towards the current minute, whose row
// (holding that minute's increments so far) is written again. A flush that
// fails is retried with the next one; an instance's counts start from zero
// when its process starts.
func (s *Store) FlushCounters(ctx context.Context, c Counters) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	now := s.now()
	minute := now.Truncate(time.Minute)
	inst := sanitizeKey(c.Instance)
	m := &s.minute
	m.mu.Lock()
	if m.last == nil {
		m.last, m.pending = map[string]Counters{}, map[string]map[time.Time]Counters{}
	}
	delta := c.sub(m.last[inst])
	mins := m.pending[inst]
	if mins == nil {
		mins = map[time.Time]Counters{}
		m.pending[inst] = mins
	}
	if delta.Total != (Counts{}) || len(delta.ByType) > 0 || len(delta.Lat) > 0 {
		x := mins[minute]
		x.add(delta)
		mins[minute] = x
	}
	m.last[inst] = c
	write := maps.Clone(mins)
	m.mu.Unlock()

	var firstErr error
	for t, x := range write {
		byType, err := json.Marshal(x.ByType)
		if err != nil {
			return err
		}
		err = submit(ctx, s.t, []table.Op{counterRow(t, c.Instance, s.o.Version, now, string(byType), x)})
		m.mu.Lock()
		if err == nil && t.Before(minute) {
			delete(mins, t) // written, and no longer changing
		}
		m.mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("runs: write counters of %s: %w", t.Format(time.RFC3339), err)
		}
	}
	return firstErr
}

// counterRow is the upsert of instance inst's counters row of minute t:
// x's counts, its counts per type (byType, as JSON) and its latency.
func counterRow(t time.Time, inst, version string, flushed time.Time, byType string, x Counters) table.Op {
	p := table.Props{"Minute": t, "Instance": inst, "ByType": byType, "Flushed": flushed}
	if lat := encodeLatency(x.Lat); lat != "" {
		p["Lat"] = lat
	}
	if version != "" {
		p["Version"] = version
	}
	f := counterFields(&x.Total)
	for i, name := range counterNames {
		p[name] = *f[i]
	}
	return table.Op{Kind: table.Upsert, PartitionKey: minutePartition(t), RowKey: t.Format(minuteRowFmt) + "~" + sanitizeKey(inst), Props: p}
}

// counterSelect are the properties of a counters row (lat: with the
// latency histograms).
func counterSelect(lat bool) []string {
	sel := append([]string{"Minute", "Instance", "Version", "Flushed", "ByType"}, counterNames...)
	if lat {
		sel = append(sel, "Lat")
	}
	return sel
}

// readCounters calls f with the minute (or hour) and counts of every row
// of q, page by page, from since on; a row that cannot be read is skipped
// with a warning.
func (s *Store) readCounters(ctx context.Context, q table.Query, since time.Time, f func(t time.Time, inst string, c Counters)) error {
	for {
		p, err := s.t.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("runs: read counters: %w", err)
		}
		for _, rw := range p.Entities {
			t := rw.Props.Time("Minute")
			if t.Before(since) {
				continue
			}
			c := Counters{Instance: rw.Props.Str("Instance"), Version: rw.Props.Str("Version"), Updated: rw.Props.Time("Flushed"), Instances: 1, ByType: map[string]Counts{}}
			f0 := counterFields(&c.Total)
			for i, name := range counterNames {
				*f0[i] = rw.Props.Int(name)
			}
			if bt := rw.Props.Str("ByType"); bt != "" && bt != "null" {
				if err := json.Unmarshal([]byte(bt), &c.ByType); err != nil {
					s.o.Logger.Warn("skipping an unreadable counters row", "row", rw.PartitionKey+"/"+rw.RowKey, "err", err)
					continue
				}
			}
			c.Lat = decodeLatency(rw.Props.Str("Lat"))
			f(t, c.Instance, c)
		}
		if p.Continuation == "" {
			return nil
		}
		q.Continuation = p.Continuation
	}
}

// minuteRows reads the per-minute rows from since (truncated to the
// minute) on, calling f with each row's minute and counts: one query per
// day partition (one or two for a day's span, three at most), from
// since's minute in the first. lat also reads the latency histograms;
// without it they are left out of the replies.
func (s *Store) minuteRows(ctx context.Context, since time.Time, lat bool, f func(t time.Time, inst string, c Counters)) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	since = since.UTC().Truncate(time.Minute)
	first := since.Truncate(24 * time.Hour)
	for i := range DayPartitions(since, s.now()) {
		day := first.Add(time.Duration(i) * 24 * time.Hour)
		q := table.Query{Partition: minutePartition(day), Top: 1000, Select: counterSelect(lat)}
		if day.Before(since) {
			q.From = since.Format(minuteRowFmt)
		}
		if err := s.readCounters(ctx, q, since, f); err != nil {
			return err
		}
	}
	return nil
}

// DayPartitions is how many day partitions, a query each, minuteRows
// reads for the minute rows from since to now (read to a minute past now,
// so that the current minute is in): 1 for the last hour, 2 in the first
// hour of a UTC day; 2 for the last 24 hours, 3 in a day's last minute.
// Request counts of the pages that read them depend on it.
func DayPartitions(since, now time.Time) int {
	const day = 24 * time.Hour
	span := now.UTC().Add(time.Minute).Sub(since.UTC().Truncate(day)) // from the first day's start
	return int((span + day - 1) / day)
}

// ExtraDayPartitions is how many more day partitions than usual (a query
// each) minuteRows reads for windows of minute rows ending at now: the
// usual is one more than a window's whole days, and the last hour spans
// two in the first hour of a UTC day, the last 24 hours three in its
// last minute. Tests that bound a page's requests add it.
func ExtraDayPartitions(now time.Time, windows ...time.Duration) int {
	n := 0
	for _, w := range windows {
		n += DayPartitions(now.Add(-w), now) - (int(w/(24*time.Hour)) + 1)
	}
	return n
}

// windowRows calls f with every instance's counts from since on: the
// per-instance hourly rows of the whole hours from since (rounded up to
// the hour) on, then the minute rows after the last of them — one query
// and one or two, instead of a query per 1,000 minute rows of the whole
// window. The hourly rows stop where the last roll-up did, so the minute
// rows after them count nothing twice.
func (s *Store) windowRows(ctx context.Context, since time.Time, f func(t time.Time, inst string, c Counters)) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	first := since.UTC().Truncate(time.Hour)
	if first.Before(since) {
		first = first.Add(time.Hour)
	}
	var last time.Time
	q := table.Query{Partition: instHourPK, From: first.Format(hourRowFmt), Select: counterSelect(false)}
	err := s.readCounters(ctx, q, first, func(t time.Time, inst string, c Counters) {
		if t.After(last) {
			last = t
		}
		f(t, inst, c)
	})
	if err != nil {
		return err
	}
	if last.IsZero() {
		return s.minuteRows(ctx, since, false, f)
	}
	return s.minuteRows(ctx, last.Add(time.Hour), false, f)
}

// Throughput returns the fleet's counts per minute from since to now,
// oldest first, one entry per minute (zero where nothing was counted).
// Minutes older than CountersKept are gone; since is moved up to the
// oldest kept minute.
func (s *Store) Throughput(ctx context.Context, since time.Time) ([]Minute, error) {
	now := s.now().Truncate(time.Minute)
	since = since.UTC().Truncate(time.Minute)
	if oldest := now.Add(-CountersKept); since.Before(oldest) {
		since = oldest
	}
	if since.After(now) {
		return nil, nil
	}
	out := make([]Minute, int(now.Sub(since)/time.Minute)+1)
	for i := range out {
		out[i].Minute = since.Add(time.Duration(i) * time.Minute)
	}
	err := s.minuteRows(ctx, since, false, func(t time.Time, _ string, c Counters) {
		if i := int(t.Sub(since) / time.Minute); i >= 0 && i < len(out) {
			out[i].Counts.Add(c.Total)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// dayRow is one row of the last 24 hours' counts.
type dayRow struct {
	inst string
	c    Counters
}

// dayShare lets the calls made with one context read the last 24 hours'
// counts once (WithDayShare).
type dayShare struct {
	once sync.Once
	rows []dayRow
	err  error
}

type dayShareKey struct{}

// WithDayShare returns a context under which SumCounters and ListCounters
// read the last 24 hours' counts once between them (and every other call
// made with it): a dashboard page that shows both asks with one.
func WithDayShare(ctx context.Context) context.Context {
	return context.WithValue(ctx, dayShareKey{}, &dayShare{})
}

// dayRows returns every instance's counts of the last 24 hours (from the
// first whole hour, once rolled up), read once per WithDayShare context.
func (s *Store) dayRows(ctx context.Context) ([]dayRow, error) {
	read := func() ([]dayRow, error) {
		var rows []dayRow
		err := s.windowRows(ctx, s.now().Add(-statsWindow), func(_ time.Time, inst string, c Counters) {
			rows = append(rows, dayRow{inst, c})
		})
		return rows, err
	}
	sh, ok := ctx.Value(dayShareKey{}).(*dayShare)
	if !ok {
		return read()
	}
	sh.once.Do(func() { sh.rows, sh.err = read() })
	return sh.rows, sh.err
}

// SumCounters adds up every instance's counts of the last 24 hours, from
// the first whole hour on once the cleaning pass rolls hours up (what
// `leasecron stats` shows).
func (s *Store) SumCounters(ctx context.Context) (Counters, error) {
	sum := Counters{ByType: map[string]Counts{}}
	rows, err := s.dayRows(ctx)
	seen := map[string]bool{}
	for _, r := range rows {
		sum.add(r.c)
		seen[r.inst] = true
	}
	sum.Instances = len(seen)
	return sum, err
}

// ListCounters returns each instance's counts of the last 24 hours (the
// instances that counted anything in that time), by instance id.
func (s *Store) ListCounters(ctx context.Context) ([]Counters, error) {
	by := map[string]*Counters{}
	rows, err := s.dayRows(ctx)
	for _, r := range rows {
		x := by[r.inst]
		if x == nil {
			x = &Counters{Instance: r.inst, Instances: 1, ByType: map[string]Counts{}}
			by[r.inst] = x
		}
		x.add(r.c)
	}
	out := make([]Counters, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out, err
}

// sanitizeKey makes s usable in a RowKey: forbidden characters become '_'.
func sanitizeKey(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	for _, r := range s {
		if r == '/' || r == '\\' || r == '#' || r == '?' || r == '\'' || r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			r = '_'
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) > 256 {
		out = out[:256]
	}
	return out
}
