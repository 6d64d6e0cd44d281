package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/leasecron/leasecron/tools/bench/results"
)

// Plot sizes.
const (
	plotW = 7 * vg.Inch
	plotH = 3.6 * vg.Inch
)

// series is one named set of bars or points.
type series struct {
	name   string
	values []float64
}

// save writes p as PNG into dir/bench/name and returns the path relative
// to dir.
func save(p *plot.Plot, dir, name string) (string, error) {
	rel := filepath.Join("bench", name)
	if err := p.Save(plotW, plotH, filepath.Join(dir, rel)); err != nil {
		return "", fmt.Errorf("plot %s: %w", name, err)
	}
	return rel, nil
}

func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}

// groupedBars draws one group per category with one bar per series, and
// an optional horizontal target line.
func groupedBars(title, ylabel string, categories []string, ss []series, target float64, targetLabel string) (*plot.Plot, error) {
	p := newPlot(title, "", ylabel)
	w := vg.Points(min(40, float64(120/max(1, len(ss)))))
	for i, s := range ss {
		b, err := plotter.NewBarChart(plotter.Values(s.values), w)
		if err != nil {
			return nil, err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = vg.Length(0)
		b.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.NominalX(categories...)
	p.X.Min, p.X.Max = -0.7, float64(len(categories))-0.3
	if target > 0 {
		addHLine(p, target, targetLabel, len(categories))
	}
	p.Y.Min = 0
	headroom(p)
	return p, nil
}

// headroom makes room above the data for a legend at the top.
func headroom(p *plot.Plot) { p.Y.Max *= 1.45 }

// addHLine draws a dashed horizontal line at y across n categories.
func addHLine(p *plot.Plot, y float64, label string, n int) {
	l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: y}, {X: float64(n) - 0.5, Y: y}})
	if err != nil {
		return
	}
	l.LineStyle.Color = color.RGBA{R: 200, A: 255}
	l.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(l)
	p.Legend.Add(label, l)
}

// plotMover draws the mover rates (median of repetitions) per set.
func plotMover(dir string, m results.Mover) (string, error) {
	var cats []string
	ss := []series{{name: "raw enqueue ceiling"}, {name: "mover"}, {name: "naive (enqueue+delete per row)"}}
	for _, s := range m.Sets {
		cats = append(cats, setName(s))
		ss[0].values = append(ss[0].values, results.MedianRate(s.Raw))
		ss[1].values = append(ss[1].values, results.MedianRate(s.Mover))
		ss[2].values = append(ss[2].values, results.MedianRate(s.Naive))
	}
	p, err := groupedBars("Moving due rows to the queue (median of repetitions)", "rows/s", cats, ss, 0, "")
	if err != nil {
		return "", err
	}
	return save(p, dir, "mover.png")
}

// plotConsumer draws steady tasks/s by instance count per variant label.
func plotConsumer(dir string, c results.Consumer) (string, error) {
	p := newPlot(fmt.Sprintf("Draining %d no-op messages", c.Messages), "consumers (loops or processes)", "tasks/s (10–90 % steady rate)")
	byLabel := map[string]plotter.XYs{}
	var labels []string
	for _, r := range c.Rows {
		if _, ok := byLabel[r.Label]; !ok {
			labels = append(labels, r.Label)
		}
		byLabel[r.Label] = append(byLabel[r.Label], plotter.XY{X: float64(r.Instances), Y: r.Steady})
	}
	for i, l := range labels {
		xy := byLabel[l]
		sort.Slice(xy, func(a, b int) bool { return xy[a].X < xy[b].X })
		line, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return "", err
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(line, pts)
		p.Legend.Add(l, line, pts)
	}
	p.Y.Min = 0
	p.Y.Max *= 1.9 // six legend lines
	p.X.Min, p.X.Max = 0.5, 4.5
	p.X.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "1"}, {Value: 2, Label: "2"}, {Value: 4, Label: "4"}})
	p.Legend.Left = true
	return save(p, dir, "consumer.png")
}

// plotLateness draws the empirical CDF of lateness per run.
func plotLateness(dir string, l results.Lateness) (string, error) {
	p := newPlot("On-time delivery: handler start − due", "lateness (s)", "fraction of tasks")
	for i, r := range l.Runs {
		xs := append([]float64(nil), r.Lateness...)
		sort.Float64s(xs)
		xy := make(plotter.XYs, len(xs))
		for j, x := range xs {
			xy[j] = plotter.XY{X: x, Y: float64(j+1) / float64(len(xs))}
		}
		if len(xy) == 0 {
			continue
		}
		line, err := plotter.NewLine(xy)
		if err != nil {
			return "", err
		}
		line.Color = plotutil.Color(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(r.Label, line)
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Left = false
	p.Legend.Top = false
	p.Legend.XOffs = -vg.Points(10)
	p.Legend.YOffs = vg.Points(10)
	return save(p, dir, "lateness.png")
}

// plotFailover draws every takeover sample by configuration, with the
// target of each.
func plotFailover(dir string, f results.Failover, groups []foGroup) (string, error) {
	p := newPlot("Leader loss → first move by the new leader", "", "seconds")
	var cats []string
	var pts, targets plotter.XYs
	for i, g := range groups {
		cats = append(cats, g.name())
		for _, s := range g.samples {
			pts = append(pts, plotter.XY{X: float64(i), Y: s.Takeover})
		}
		targets = append(targets, plotter.XY{X: float64(i), Y: g.target(f.PollEverySeconds)})
	}
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return "", err
	}
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Radius = vg.Points(3.5)
	sc.GlyphStyle.Color = plotutil.Color(0)
	tg, err := plotter.NewScatter(targets)
	if err != nil {
		return "", err
	}
	tg.GlyphStyle.Shape = draw.BoxGlyph{}
	tg.GlyphStyle.Radius = vg.Points(3)
	tg.GlyphStyle.Color = color.RGBA{R: 200, A: 255}
	p.Add(sc, tg)
	p.Legend.Add("takeover (each run)", sc)
	p.Legend.Add("target", tg)
	p.NominalX(cats...)
	p.Y.Min = 0
	headroom(p)
	p.Legend.Left = true
	return save(p, dir, "failover.png")
}

// plotIdle draws requests per hour per idle role with the target.
func plotIdle(dir string, id results.Idle) (string, error) {
	var cats []string
	var vals []float64
	for _, r := range id.Rows {
		cats = append(cats, r.Role)
		vals = append(vals, r.PerHour)
	}
	p, err := groupedBars("Idle workers: storage requests per hour", "requests/hour", cats, []series{{name: "measured", values: vals}}, targetIdlePerHour, "target (standby)")
	if err != nil {
		return "", err
	}
	return save(p, dir, "idle.png")
}

// plotTransactions draws requests per task per case, split into client
// and worker.
func plotTransactions(dir string, t results.Transactions) (string, error) {
	var cats []string
	cl, wk := series{name: "client (Schedule)"}, series{name: "worker (move, run, delete)"}
	for _, c := range sortedCases(t.Cases) {
		cats = append(cats, caseShort(c))
		if c.Kind == "one-off" {
			cl.values = append(cl.values, c.ClientTotal)
		} else {
			cl.values = append(cl.values, 0)
		}
		wk.values = append(wk.values, c.WorkerTotal)
	}
	p := newPlot("Storage requests per task (marginal over an idle leader)", "", "requests per task")
	w := vg.Points(22)
	bc, err := plotter.NewBarChart(plotter.Values(cl.values), w)
	if err != nil {
		return "", err
	}
	bc.Color = plotutil.Color(0)
	bw, err := plotter.NewBarChart(plotter.Values(wk.values), w)
	if err != nil {
		return "", err
	}
	bw.Color = plotutil.Color(1)
	bw.StackOn(bc)
	p.Add(bc, bw)
	p.Legend.Add(cl.name, bc)
	p.Legend.Add(wk.name, bw)
	addHLine(p, targetTxPerTask, "target (one-off, runs off)", len(cats))
	p.NominalX(cats...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign = draw.XRight
	p.Y.Min = 0
	headroom(p)
	p.Legend.Left = true
	return save(p, dir, "transactions.png")
}

// plotFootprint draws RSS and the fraction of tasks done over time.
func plotFootprint(dir string, f results.Footprint) (string, error) {
	p := newPlot(fmt.Sprintf("Worker process draining %d no-op tasks", f.Tasks), "seconds since the messages became visible", "MiB / % done")
	rss := make(plotter.XYs, len(f.RSS))
	for i, pt := range f.RSS {
		rss[i] = plotter.XY{X: pt.X, Y: pt.Y}
	}
	done := make(plotter.XYs, len(f.Done))
	for i, pt := range f.Done {
		done[i] = plotter.XY{X: pt.X, Y: 100 * pt.Y / float64(max(1, f.Tasks))}
	}
	if len(rss) > 0 {
		l, err := plotter.NewLine(rss)
		if err != nil {
			return "", err
		}
		l.Color = plotutil.Color(0)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add("RSS (MiB)", l)
	}
	if len(done) > 0 {
		l, err := plotter.NewLine(done)
		if err != nil {
			return "", err
		}
		l.Color = plotutil.Color(1)
		l.Dashes = plotutil.Dashes(1)
		p.Add(l)
		p.Legend.Add("tasks done (%)", l)
	}
	p.Y.Min = 0
	headroom(p)
	p.Legend.Left = true
	return save(p, dir, "footprint.png")
}
