package leasecron

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/leasecron/leasecron/internal/runs"
)

// LatencyRanges are the ranges Client.Latency answers, each with its
// step: a point per minute over an hour, per 5 minutes over 6 hours (both
// from the per-minute rows), per hour over a day and per 2 hours over 7
// days (from the hourly roll-ups, and the minute rows since the last).
var LatencyRanges = []struct{ Range, Step time.Duration }{
	{time.Hour, time.Minute}, {6 * time.Hour, 5 * time.Minute}, {24 * time.Hour, time.Hour}, {7 * 24 * time.Hour, 2 * time.Hour},
}

// Percentiles summarise durations, in seconds, estimated from histograms
// whose buckets are runs.LatencyBounds (10 ms to 30 min).
type Percentiles struct {
	// Count is how many durations were timed.
	Count int64   `json:"count"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
}

func percentilesOf(h runs.Histogram) Percentiles {
	return Percentiles{Count: h.Count(), P50: h.Quantile(0.5).Seconds(), P95: h.Quantile(0.95).Seconds(), P99: h.Quantile(0.99).Seconds()}
}

// LatencyPoint is one step of a latency report.
type LatencyPoint struct {
	// At is the step's start.
	At time.Time `json:"at"`
	// Outcomes in the step: runs succeeded, attempts failed, of which
	// retried, and runs gone dead.
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Retried   int64 `json:"retried"`
	Dead      int64 `json:"dead"`
	// Wait is the queue wait of first attempts (due to start); Run the
	// run time of every attempt.
	Wait Percentiles `json:"wait"`
	Run  Percentiles `json:"run"`
}

// TypeLatency is one task type's figures over a report's whole range.
type TypeLatency struct {
	Type string `json:"type"`
	LatencyPoint
}

// LatencyReport is what Client.Latency returns.
type LatencyReport struct {
	// Range and Step are the range asked for and its step; Since is the
	// range's start; Type the type asked for ("" = every type).
	Range time.Duration `json:"range"`
	Step  time.Duration `json:"step"`
	Since time.Time     `json:"since"`
	Type  string        `json:"type,omitempty"`
	// Points are the steps, oldest first (every step, zero where nothing
	// ran).
	Points []LatencyPoint `json:"points"`
	// Total sums the range (for Type, or every type).
	Total LatencyPoint `json:"total"`
	// Types are every type's figures over the range, by name.
	Types []TypeLatency `json:"types"`
}

// Latency reports, for one task type or all (typ ""), the queue wait and
// run time percentiles and the outcomes per step over rng, one of
// LatencyRanges. It reads the per-minute counters rows the workers write
// (no extra writes: the histograms ride in the rows they write anyway),
// over 6 hours the five-minute roll-ups and over a day or more the hourly
// ones that the traffic cop's cleaning pass writes, with the minute rows
// since the last one (all minute rows when nothing is rolled up yet). Run records are needed.
func (c *Client) Latency(ctx context.Context, rng time.Duration, typ string) (LatencyReport, error) {
	if c.runs == nil {
		return LatencyReport{}, ErrNoRunRecords
	}
	step := time.Duration(0)
	for _, r := range LatencyRanges {
		if r.Range == rng {
			step = r.Step
		}
	}
	if step == 0 {
		return LatencyReport{}, fmt.Errorf("%w: latency range %s: want 1h, 6h, 24h or 168h (7 days)", ErrInvalidRunQuery, rng)
	}
	now := c.o.Clock.Now().UTC()
	since := now.Add(-rng).Truncate(step)
	var rows []runs.Hour
	minutesFrom := since
	rolled := c.runs.Fives // five-minute steps (6 h)
	if step >= time.Hour {
		rolled = c.runs.Hours
	}
	if step >= 5*time.Minute {
		got, through, err := rolled(ctx, since)
		if err != nil {
			return LatencyReport{}, err
		}
		rows = append(rows, got...)
		if through.After(since) {
			minutesFrom = through
		}
	}
	mins, err := c.runs.Minutes(ctx, minutesFrom)
	if err != nil {
		return LatencyReport{}, err
	}
	rows = append(rows, mins...)
	rep := LatencyReport{Range: rng, Step: step, Since: since, Type: typ, Points: make([]LatencyPoint, int(now.Sub(since)/step)+1)}
	waits := make([]runs.Histogram, len(rep.Points))
	runsH := make([]runs.Histogram, len(rep.Points))
	var totalWait, totalRun runs.Histogram
	// per sums each type over the whole range.
	type sums struct {
		p    LatencyPoint
		w, r runs.Histogram
	}
	per := map[string]*sums{}
	for i := range rep.Points {
		rep.Points[i].At = since.Add(time.Duration(i) * step)
	}
	for _, h := range rows {
		i := int(h.At.Sub(since) / step)
		if h.At.Before(since) || i >= len(rep.Points) {
			continue
		}
		for t, n := range h.ByType {
			x := per[t]
			if x == nil {
				x = &sums{}
				per[t] = x
			}
			addOutcomes(&x.p, n)
			if typ == "" || t == typ {
				addOutcomes(&rep.Points[i], n)
				addOutcomes(&rep.Total, n)
			}
		}
		for t, l := range h.Latency {
			if x := per[t]; x != nil {
				x.w.Add(l.Wait)
				x.r.Add(l.Run)
			}
			if typ == "" || t == typ {
				waits[i].Add(l.Wait)
				runsH[i].Add(l.Run)
				totalWait.Add(l.Wait)
				totalRun.Add(l.Run)
			}
		}
	}
	for i := range rep.Points {
		rep.Points[i].Wait, rep.Points[i].Run = percentilesOf(waits[i]), percentilesOf(runsH[i])
	}
	rep.Total.At = since
	rep.Total.Wait, rep.Total.Run = percentilesOf(totalWait), percentilesOf(totalRun)
	for t, x := range per {
		x.p.At = since
		x.p.Wait, x.p.Run = percentilesOf(x.w), percentilesOf(x.r)
		rep.Types = append(rep.Types, TypeLatency{Type: t, LatencyPoint: x.p})
	}
	sort.Slice(rep.Types, func(i, j int) bool { return rep.Types[i].Type < rep.Types[j].Type })
	return rep, nil
}

func addOutcomes(p *LatencyPoint, n Counts) {
	p.Succeeded += n.Handled
	p.Failed += n.Failed
	p.Retried += n.Retried
	p.Dead += n.Dead
}
