package dashboard

import (
	"fmt"
	"strconv"
)

// chart is the overview's throughput chart, drawn server-side as SVG: one
// stacked bar per minute, succeeded below failed. It needs no script, so it
// refreshes with the rest of the page.
type chart struct {
	Width, Height int
	Bars          []bar
	// Max is the value of the top of the scale.
	Max int64
	// Ticks are the x-axis labels.
	Ticks []tick
	// Total sums the hour.
	Succeeded, Failed int64
}

type bar struct {
	X, W           int
	OkY, OkH       int
	FailY, FailH   int
	Title          string
	Succeeded, Err int64
}

type tick struct {
	X     int
	Label string
}

const (
	chartW, chartH = 600, 140
	barW           = chartW / 60
)

func newChart(ms []MinuteView) *chart {
	c := &chart{Width: chartW, Height: chartH}
	for _, m := range ms {
		c.Max = max(c.Max, m.Succeeded+m.Failed)
		c.Succeeded += m.Succeeded
		c.Failed += m.Failed
	}
	scale := niceMax(c.Max)
	c.Max = scale
	for i, m := range ms {
		okH := int(m.Succeeded * chartH / scale)
		failH := int(m.Failed * chartH / scale)
		if m.Succeeded > 0 && okH == 0 {
			okH = 1
		}
		if m.Failed > 0 && failH == 0 {
			failH = 1
		}
		b := bar{X: i * barW, W: barW - 1, OkY: chartH - okH, OkH: okH, FailY: chartH - okH - failH, FailH: failH, Succeeded: m.Succeeded, Err: m.Failed,
			Title: fmt.Sprintf("%s UTC: %d succeeded, %d failed", m.Minute.UTC().Format("15:04"), m.Succeeded, m.Failed)}
		c.Bars = append(c.Bars, b)
	}
	n := len(ms)
	for _, back := range []int{60, 45, 30, 15, 0} {
		i := n - back
		if back == 60 {
			i = 0
		}
		if i < 0 || i > n {
			continue
		}
		label := "now"
		if back > 0 {
			label = "−" + strconv.Itoa(back) + " min"
		}
		c.Ticks = append(c.Ticks, tick{X: min(i*barW, chartW), Label: label})
	}
	return c
}

// niceMax rounds a chart's top up to 1, 2 or 5 × a power of ten (at least
// 5), so the scale reads easily.
func niceMax(v int64) int64 {
	if v <= 5 {
		return 5
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}
