package main

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Three runs in two files: a file of amibench's own lines, and a file in
// the shape the bench/ scripts keep, whose "run" key names two runs (one
// measured twice, as rounds are), with lines that are no rows between
// them.
const (
	plotRunA = `{"benchmark":"latency","size":0,"latency_us":0.1}
{"benchmark":"latency","size":8,"latency_us":0.2,"allocs_per_msg":0}
{"benchmark":"latency","size":1024,"latency_us":0.5}
{"benchmark":"latency","size":65536,"latency_us":9}
{"benchmark":"bw","size":8,"mb_per_s":40}
{"benchmark":"bw","size":1024,"mb_per_s":3000}
{"benchmark":"bw","size":65536,"mb_per_s":9000}
`
	plotRunsBC = `# a note from a script
{"run":"mpich","benchmark":"latency","size":8,"latency_us":0.3}
{"run":"mpich","benchmark":"latency","size":8,"latency_us":0.5}
{"run":"mpich","benchmark":"latency","size":8,"latency_us":0.4}
{"run":"mpich","benchmark":"latency","size":1024,"latency_us":0.8}
{"run":"mpich","benchmark":"latency","size":65536,"latency_us":12}
{"run":"mpich","wall_s":1.5}
{"run":"ompi","failed":true}
{"run":"ompi","benchmark":"latency","size":8,"latency_us":0.6}
{"run":"ompi","benchmark":"latency","size":1024,"latency_us":1}
{"run":"ompi","benchmark":"bw","size":8,"mb_per_s":20}
{"run":"ompi","benchmark":"bw","size":65536,"mb_per_s":4500}
`
)

func writeRuns(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	a, bc := filepath.Join(dir, "amigo-shm.json"), filepath.Join(dir, "mpi.json")
	if err := os.WriteFile(a, []byte(plotRunA), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bc, []byte(plotRunsBC), 0o644); err != nil {
		t.Fatal(err)
	}
	return a, bc
}

// curveColorsIn counts, in each of panels side-by-side columns of img, the
// colors of curveColors drawn on at least 20 pixels: the number of lines
// (a run's line and its legend sample share a color, runs do not).
func curveColorsIn(img image.Image, panels int) []int {
	b := img.Bounds()
	out := make([]int, panels)
	for p := range panels {
		x0 := b.Min.X + p*b.Dx()/panels
		x1 := b.Min.X + (p+1)*b.Dx()/panels
		seen := make([]int, len(curveColors))
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := x0; x < x1; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				for i, c := range curveColors {
					if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
						seen[i]++
					}
				}
			}
		}
		for _, n := range seen {
			if n >= 20 {
				out[p]++
			}
		}
	}
	return out
}

// TestComparePlot renders the three runs as PNG and as SVG through the
// compare subcommand and checks that each file is a valid image of two
// panels holding the expected lines: latency of all three runs, bandwidth
// of the two that measured it.
func TestComparePlot(t *testing.T) {
	a, bc := writeRuns(t)
	dir := t.TempDir()
	pngFile, svgFile := filepath.Join(dir, "cmp.png"), filepath.Join(dir, "cmp.svg")
	for _, f := range []string{pngFile, svgFile} {
		var out, errb bytes.Buffer
		if code := compare([]string{"-o", f, "--title", "test", a, bc}, nil, &out, &errb); code != 0 {
			t.Fatalf("compare -o %s: exit %d: %s", f, code, errb.String())
		}
	}
	fp, err := os.Open(pngFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	img, err := png.Decode(fp)
	if err != nil {
		t.Fatalf("%s is no PNG: %v", pngFile, err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 400 || b.Dx() < 2*b.Dy() {
		t.Fatalf("PNG of two panels is %v", b)
	}
	if got := curveColorsIn(img, 2); got[0] != 3 || got[1] != 2 {
		t.Fatalf("PNG: %v lines in the latency and bandwidth panels, want [3 2]", got)
	}

	svg, err := os.ReadFile(svgFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s is no XML: %v", svgFile, err)
		}
		if s, ok := tok.(xml.StartElement); ok && root == "" {
			root = s.Name.Local
		}
	}
	if root != "svg" {
		t.Fatalf("SVG's root element is %q", root)
	}
	// A line's color is its run's: three runs, three colors.
	colors := 0
	for _, c := range curveColors {
		hex := strings.ToUpper(string([]byte{
			"0123456789abcdef"[c.R>>4], "0123456789abcdef"[c.R&15],
			"0123456789abcdef"[c.G>>4], "0123456789abcdef"[c.G&15],
			"0123456789abcdef"[c.B>>4], "0123456789abcdef"[c.B&15]}))
		if bytes.Contains(svg, []byte("stroke:#"+hex)) {
			colors++
		}
	}
	if colors != 3 {
		t.Fatalf("SVG: %d line colors, want 3", colors)
	}
	for _, label := range []string{"amigo-shm", "mpich", "ompi", "Latency", "Bandwidth"} {
		if !bytes.Contains(svg, []byte(label)) {
			t.Errorf("SVG lacks %q", label)
		}
	}
}

// TestCompareTable checks the ratio table: the median of mpich's three
// 8-byte rounds, each run's figure and the ratios to the first run.
func TestCompareTable(t *testing.T) {
	a, bc := writeRuns(t)
	var out, errb bytes.Buffer
	if code := compare([]string{a, bc}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(out.String(), "\n")
	find := func(head, prefix string) []string {
		for i, l := range lines {
			if l != head {
				continue
			}
			for _, m := range lines[i+1:] {
				if m == "" {
					break
				}
				if strings.HasPrefix(m, prefix) {
					return strings.Fields(m)
				}
			}
		}
		t.Fatalf("no line %q under %q:\n%s", prefix, head, out.String())
		return nil
	}
	if got := strings.Join(find("# latency latency_us", "8 "), " "); got != "8 0.200 0.400 0.600 2.00x 3.00x" {
		t.Errorf("8 B latency line: %q", got)
	}
	if got := strings.Join(find("# latency latency_us", "65536 "), " "); got != "65536 9.000 12.000 - 1.33x -" {
		t.Errorf("64 KiB latency line: %q", got)
	}
	if got := strings.Join(find("# bw mb_per_s", "65536 "), " "); got != "65536 9000 - 4500 - 0.50x" {
		t.Errorf("64 KiB bandwidth line: %q", got)
	}
	// Bad input: a clear error and a non-zero exit, no plot.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\"benchmark\":\"latency\",\"size\":8\n"), 0o644)
	for _, args := range [][]string{
		{bad},
		{filepath.Join(dir, "missing.json")},
		{"-o", filepath.Join(dir, "x.gif"), a},
		{},
	} {
		errb.Reset()
		if code := compare(args, nil, &out, &errb); code == 0 || errb.Len() == 0 {
			t.Errorf("compare %q: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

// TestPlotAndCSV runs two ranks with --plot and --csv: the CSV has one
// header and a line per value, and the plot holds one line per panel.
func TestPlotAndCSV(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "run.png")
	var out, errb bytes.Buffer
	args := []string{"--transport", "loop", "-b", "latency,bw", "--min-size", "1", "--max-size", "4096", "--iterations", "5", "--warmup", "1", "--csv", "--plot", file}
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if lines[0] != csvHeader {
		t.Fatalf("first line %q", lines[0])
	}
	n := map[string]int{}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if len(f) != 6 || f[1] != "loop" || f[2] != "2" {
			t.Fatalf("line %q", l)
		}
		n[f[0]+" "+f[4]]++
	}
	// 13 sizes, 1 B to 4 KiB.
	if n["latency latency_us"] != 13 || n["bw mb_per_s"] != 13 {
		t.Fatalf("values per benchmark and metric: %v", n)
	}
	fp, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	img, err := png.Decode(fp)
	if err != nil {
		t.Fatal(err)
	}
	if got := curveColorsIn(img, 2); got[0] != 1 || got[1] != 1 {
		t.Fatalf("%v lines in the panels, want [1 1]", got)
	}
	if code := run([]string{"--json", "--csv"}, &out, &errb); code != 2 {
		t.Errorf("--json --csv: exit %d", code)
	}
	if code := run([]string{"--plot", "x.jpg"}, &out, &errb); code != 2 {
		t.Errorf("--plot x.jpg: exit %d", code)
	}
}

// The progress line: written over itself, naming the benchmark, the size
// and what is left, erased at the end; nothing when off.
func TestProgress(t *testing.T) {
	var b bytes.Buffer
	e := &Env{progress: progress{on: true, w: &b}}
	e.progress.begin("latency", 1)
	e.progress.sizesLeft = 3
	e.progressRow(1024)
	e.progress.end()
	want := "\r\033[Kamibench: latency: starting, then 1 more benchmarks" +
		"\r\033[Kamibench: latency: 1024 B done, 2 sizes left, then 1 more benchmarks\r\033[K"
	if b.String() != want {
		t.Fatalf("progress wrote %q, want %q", b.String(), want)
	}
	b.Reset()
	e.progress.on = false
	e.progress.begin("bw", 0)
	e.progressRow(8)
	e.progress.end()
	if b.Len() != 0 {
		t.Fatalf("progress off wrote %q", b.String())
	}
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("a regular file is a terminal")
	}
	pt, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal to test with: %v", err)
	}
	defer pt.Close()
	if !isTerminal(pt) {
		t.Fatal("a pseudo-terminal is not a terminal")
	}
}
