package dashboard

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/leasecron/leasecron"
)

// lineChart draws percentiles over time as SVG polylines on a log scale
// (10 ms to the slowest value), server-side like the throughput chart.
type lineChart struct {
	ID, Label     string
	Width, Height int
	Lines         []line
	// Grid are the scale's horizontal lines with their labels.
	Grid  []gridLine
	Ticks []string
	// Empty: nothing was timed in the range.
	Empty bool
}

type line struct {
	Class, Name string
	Points      string
	Dots        []dot
}

// dot marks one point of a line (a step with a single point draws no
// line), with its value as a tooltip.
type dot struct {
	X, Y  int
	Title string
}

type gridLine struct {
	Y     int
	Label string
}

// latencyScale bounds the log scale: 10 ms at the bottom.
const latencyFloor = 0.01

func newLineChart(id, label string, pts []leasecron.LatencyPoint, pick func(leasecron.LatencyPoint) leasecron.Percentiles) *lineChart {
	c := &lineChart{ID: id, Label: label, Width: chartW, Height: chartH, Empty: true}
	top := 1.0
	for _, p := range pts {
		pc := pick(p)
		if pc.Count > 0 {
			c.Empty = false
			top = math.Max(top, pc.P99)
		}
	}
	// Decades from 10 ms up to the first power of ten at or above top.
	decades := math.Ceil(math.Log10(top / latencyFloor))
	y := func(v float64) int {
		v = math.Max(v, latencyFloor)
		return chartH - int(math.Round(math.Log10(v/latencyFloor)/decades*chartH))
	}
	for d := 0.0; d <= decades; d++ {
		v := latencyFloor * math.Pow(10, d)
		c.Grid = append(c.Grid, gridLine{Y: y(v), Label: fmtSecs(v)})
	}
	// A point sits at the middle of its step's bar in the outcome chart.
	step := float64(chartW) / float64(max(1, len(pts)))
	for _, q := range []struct {
		class, name string
		get         func(leasecron.Percentiles) float64
	}{{"p50", "p50", func(p leasecron.Percentiles) float64 { return p.P50 }}, {"p95", "p95", func(p leasecron.Percentiles) float64 { return p.P95 }}, {"p99", "p99", func(p leasecron.Percentiles) float64 { return p.P99 }}} {
		var b strings.Builder
		var dots []dot
		for i, p := range pts {
			pc := pick(p)
			if pc.Count == 0 {
				continue
			}
			x, yy := int(math.Round((float64(i)+0.5)*step)), y(q.get(pc))
			fmt.Fprintf(&b, "%d,%d ", x, yy)
			dots = append(dots, dot{X: x, Y: yy, Title: fmt.Sprintf("%s %s at %s UTC (%d timed)", q.name, fmtSecs(q.get(pc)), p.At.UTC().Format("Jan 2 15:04"), pc.Count)})
		}
		c.Lines = append(c.Lines, line{Class: q.class, Name: q.name, Points: strings.TrimSpace(b.String()), Dots: dots})
	}
	return c
}

// fmtSecs writes a duration in seconds briefly: 10ms, 1.5s, 2m, 1h.
func fmtSecs(s float64) string {
	switch {
	case s <= 0:
		return "0"
	case s < 1:
		return strconv.FormatFloat(s*1000, 'f', -1, 64) + "ms"
	case s < 60:
		return strconv.FormatFloat(math.Round(s*10)/10, 'f', -1, 64) + "s"
	case s < 3600:
		return strconv.FormatFloat(math.Round(s/6)/10, 'f', -1, 64) + "m"
	}
	return strconv.FormatFloat(math.Round(s/360)/10, 'f', -1, 64) + "h"
}

// outcomeChart is the stacked bars of succeeded, failed and dead per step.
func outcomeChart(pts []leasecron.LatencyPoint, step time.Duration) *chart {
	ms := make([]MinuteView, len(pts))
	for i, p := range pts {
		ms[i] = MinuteView{Minute: p.At, Succeeded: p.Succeeded, Failed: p.Failed + p.Dead}
	}
	c := newChart(ms)
	// newChart's bars are a minute wide; fit them to the number of steps.
	n := max(1, len(pts))
	for i := range c.Bars {
		c.Bars[i].X, c.Bars[i].W = i*chartW/n, max(1, chartW/n-1)
		c.Bars[i].Title = fmt.Sprintf("%s UTC, %s: %d succeeded, %d failed or dead", pts[i].At.UTC().Format("Jan 2 15:04"), step, pts[i].Succeeded, pts[i].Failed+pts[i].Dead)
	}
	c.Ticks = nil
	return c
}

// shortDur writes a step briefly: 1m, 20m, 2h.
func shortDur(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
