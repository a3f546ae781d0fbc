package main

import (
	"bufio"
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// series is one run: a name and its rows.
type series struct {
	name string
	rows []record
}

// panel is one plot of an image: a value against message size.
type panel struct {
	key, title, ylabel string
}

// panels are what --plot and compare draw, side by side, each where some
// run has its key.
var panels = []panel{
	{"latency_us", "Latency", "latency (us)"},
	{"mb_per_s", "Bandwidth", "bandwidth (MB/s)"},
}

// curveColors are the colors of the runs, in order: saturated, far apart,
// and none of them the grey of the axes and the grid.
var curveColors = []color.RGBA{
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
}

// plotFormat returns "svg" or "png" by file's extension, or "".
func plotFormat(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".svg":
		return "svg"
	case ".png":
		return "png"
	}
	return ""
}

// drawPlot draws the rows rank 0 kept into Options.Plot (rank 0, --plot).
func (e *Env) drawPlot() error {
	if e.out == nil || e.Opts.Plot == "" {
		return nil
	}
	name := "amigo " + e.Opts.Transport
	if e.Opts.Buffers != "heap" {
		name += " " + e.Opts.Buffers
	}
	_, err := writePlot(e.Opts.Plot, "", []series{{name: name, rows: e.records}})
	return err
}

// curve is one line of a panel: a run's benchmark.
type curve struct {
	label string
	run   int
	pts   plotter.XYs
}

// curves returns the lines of panel p: for every run and benchmark that
// has p's key, its values at sizes above 0 (log axes), in size order. A
// line is labelled by its run, and by its benchmark too where the panel
// holds more than one benchmark.
func curves(runs []series, p panel) []curve {
	var out []curve
	benches := map[string]bool{}
	var names []string
	for i, s := range runs {
		byBench := map[string]plotter.XYs{}
		var order []string
		for _, r := range s.rows {
			v, ok := r.value(p.key)
			if !ok || r.Size <= 0 || v <= 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				continue
			}
			if _, seen := byBench[r.Benchmark]; !seen {
				order = append(order, r.Benchmark)
			}
			byBench[r.Benchmark] = append(byBench[r.Benchmark], plotter.XY{X: float64(r.Size), Y: v})
		}
		for _, b := range order {
			pts := byBench[b]
			sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
			benches[b] = true
			names = append(names, b)
			out = append(out, curve{label: s.name, run: i, pts: pts})
		}
	}
	if len(benches) > 1 {
		for i := range out {
			out[i].label += " " + names[i]
		}
	}
	return out
}

// writePlot draws runs into file (SVG or PNG by its extension): one panel
// per entry of panels that some run has values for, side by side, latency
// and bandwidth against message size on log axes, one line per run and
// benchmark, the same color for a run in every panel. It returns the
// number of lines of each panel drawn.
func writePlot(file, title string, runs []series) ([]int, error) {
	format := plotFormat(file)
	if format == "" {
		return nil, fmt.Errorf("plot %q: want a file ending in .svg or .png", file)
	}
	var plots []*plot.Plot
	var counts []int
	for _, p := range panels {
		cs := curves(runs, p)
		if len(cs) == 0 {
			continue
		}
		pl, err := newPanel(title, p, cs)
		if err != nil {
			return nil, err
		}
		plots = append(plots, pl)
		counts = append(counts, len(cs))
	}
	if len(plots) == 0 {
		return nil, fmt.Errorf("plot %q: no latency or bandwidth values at sizes above 0 to draw", file)
	}
	w, h := vg.Length(len(plots))*6*vg.Inch, 4.5*vg.Inch
	var canvas interface {
		vg.CanvasSizer
		io.WriterTo
	}
	if format == "svg" {
		canvas = vgsvg.New(w, h)
	} else {
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110), vgimg.UseBackgroundColor(color.White))}
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Inch / 4, PadY: vg.Inch / 8, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	cs := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, pl := range plots {
		pl.Draw(cs[0][i])
	}
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("plot %q: %w", file, err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return counts, nil
}

// newPanel makes the plot of one panel.
func newPanel(title string, p panel, cs []curve) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.title
	if title != "" {
		pl.Title.Text = title + ": " + p.title
	}
	pl.X.Label.Text = "message size (bytes)"
	pl.Y.Label.Text = p.ylabel
	pl.X.Scale, pl.Y.Scale = plot.LogScale{}, plot.LogScale{}
	pl.X.Tick.Marker = sizeTicks{}
	pl.Y.Tick.Marker = valueTicks{}
	pl.Add(plotter.NewGrid())
	// Latency and bandwidth both rise with size: the bottom right corner
	// is where the lines are not.
	pl.Legend.Top, pl.Legend.Left = false, false
	pl.Legend.XOffs, pl.Legend.YOffs = -vg.Points(4), vg.Points(4)
	for _, c := range cs {
		l, pts, err := plotter.NewLinePoints(c.pts)
		if err != nil {
			return nil, fmt.Errorf("%s, %s: %w", p.title, c.label, err)
		}
		col := curveColors[c.run%len(curveColors)]
		l.Color, l.Width = col, vg.Points(2)
		pts.Color, pts.Shape, pts.Radius = col, draw.CircleGlyph{}, vg.Points(2.5)
		pl.Add(l, pts)
		pl.Legend.Add(c.label, l, pts)
	}
	return pl, nil
}

// sizeTicks marks message sizes at powers of 4 (1, 4, 16, ... 1K, 4K, ...),
// labelling every other one.
type sizeTicks struct{}

// Ticks implements plot.Ticker.
func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for k := 0; k <= 40; k += 2 {
		v := math.Ldexp(1, k)
		if v < lo/1.01 || v > hi*1.01 {
			continue
		}
		t := plot.Tick{Value: v}
		if k%4 == 0 || hi/lo < 1<<12 {
			t.Label = sizeLabel(int64(v))
		}
		out = append(out, t)
	}
	return out
}

func sizeLabel(v int64) string {
	switch {
	case v >= 1<<30 && v%(1<<30) == 0:
		return fmt.Sprintf("%dG", v>>30)
	case v >= 1<<20 && v%(1<<20) == 0:
		return fmt.Sprintf("%dM", v>>20)
	case v >= 1<<10 && v%(1<<10) == 0:
		return fmt.Sprintf("%dK", v>>10)
	}
	return fmt.Sprint(v)
}

// valueTicks marks powers of ten and, where the range is narrow, 2 and 5
// times them.
type valueTicks struct{}

// Ticks implements plot.Ticker.
func (valueTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	narrow := hi/lo < 1000
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		base := math.Pow(10, e)
		for _, m := range []float64{1, 2, 5} {
			v := base * m
			if v < lo/1.01 || v > hi*1.01 {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || narrow {
				t.Label = trimFloat(v)
			}
			out = append(out, t)
		}
	}
	return out
}

func trimFloat(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// readRuns reads JSON lines of amibench and bench/osu from each file (or
// standard input for "-"). Rows that name their run (the "run" key the
// bench/ scripts add) go to that run; the others to a run named after the
// file (names[i] when given). Rows of the same run, benchmark and size,
// such as the rounds of a comparison, become one row of their medians.
func readRuns(paths, names []string, stdin io.Reader) ([]series, error) {
	var runs []series
	index := map[string]int{}
	for i, path := range paths {
		var rd io.Reader = stdin
		if path != "-" {
			f, err := os.Open(path)
			if err != nil {
				return nil, err
			}
			defer f.Close()
			rd = f
		}
		fileRun := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
		if i < len(names) {
			fileRun = names[i]
		}
		sc := bufio.NewScanner(rd)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for ln := 1; sc.Scan(); ln++ {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 || line[0] != '{' {
				continue // OSU's text, a script's notes
			}
			r, ok, err := parseRecord(line)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", path, ln, err)
			}
			if !ok {
				continue
			}
			name := r.Run
			if name == "" {
				name = fileRun
			}
			k, seen := index[name]
			if !seen {
				k = len(runs)
				index[name] = k
				runs = append(runs, series{name: name})
			}
			runs[k].rows = append(runs[k].rows, r)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	for i := range runs {
		runs[i].rows = medians(runs[i].rows)
	}
	return runs, nil
}

// medians merges the rows of one benchmark and size into one, each value
// the median of the rows that have it, keeping the order rows first
// appeared in.
func medians(rows []record) []record {
	type key struct {
		b string
		s int
	}
	var order []key
	groups := map[key][]record{}
	for _, r := range rows {
		k := key{r.Benchmark, r.Size}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := make([]record, 0, len(order))
	for _, k := range order {
		g := groups[k]
		m := record{Run: g[0].Run, Benchmark: k.b, Size: k.s, Transport: g[0].Transport, Ranks: g[0].Ranks}
		for _, key := range g[0].Keys {
			var vs []float64
			for _, r := range g {
				if v, ok := r.value(key); ok {
					vs = append(vs, v)
				}
			}
			sort.Float64s(vs)
			med := vs[len(vs)/2]
			if len(vs)%2 == 0 {
				med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
			}
			m.add(key, med)
		}
		out = append(out, m)
	}
	return out
}
