package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// compare is the compare subcommand:
//
//	amibench compare [-o plot.png] [--names a,b] [--title T] A.json B.json ...
//
// It reads the JSON lines of several runs (amibench --json, bench/osu's
// --json, or the results the bench/ scripts keep, whose "run" key names
// each line's run), prints for every benchmark, value and size each run's
// figure and its ratio to the first run's, and with -o draws them all in
// one plot.
func compare(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("amibench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "draw latency and bandwidth of every run in this file (.svg or .png)")
	names := fs.String("names", "", "comma-separated names of the runs of the files, in order (default: the file names)")
	title := fs.String("title", "", "title of the plot's panels")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: amibench compare [-o plot.png] [--names a,b] [--title T] A.json [B.json ...]  (\"-\": standard input)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	if *out != "" && plotFormat(*out) == "" {
		fmt.Fprintf(stderr, "amibench compare: -o %q: want a file ending in .svg or .png\n", *out)
		return 2
	}
	var nameList []string
	if *names != "" {
		nameList = strings.Split(*names, ",")
	}
	runs, err := readRuns(fs.Args(), nameList, stdin)
	if err == nil && len(runs) == 0 {
		err = errors.New("no rows with a benchmark and a size in the files")
	}
	if err != nil {
		fmt.Fprintln(stderr, "amibench compare:", err)
		return 1
	}
	ratioTable(stdout, runs)
	if *out != "" {
		if _, err := writePlot(*out, *title, runs); err != nil {
			fmt.Fprintln(stderr, "amibench compare:", err)
			return 1
		}
	}
	return 0
}

// ratioTable prints, for every benchmark and value of the first run that
// has it, one line per size: each run's figure, then each other run's
// figure divided by the first's. For latencies a ratio above 1 means the
// other run is slower; for bandwidths and rates, faster. Allocation counts
// get no ratios: a count near zero makes them noise.
func ratioTable(w io.Writer, runs []series) {
	type bk struct{ bench, key string }
	var order []bk
	seen := map[bk]bool{}
	for _, s := range runs {
		for _, r := range s.rows {
			for _, k := range r.Keys {
				if x := (bk{r.Benchmark, k}); !seen[x] {
					seen[x] = true
					order = append(order, x)
				}
			}
		}
	}
	base := runs[0].name
	col := 10
	for _, s := range runs {
		col = max(col, len(s.name)+len(base)+1)
	}
	for _, x := range order {
		// Every size any run measured, in order.
		var sizes []int
		have := map[int]bool{}
		for _, s := range runs {
			for _, r := range s.rows {
				if _, ok := r.value(x.key); ok && r.Benchmark == x.bench && !have[r.Size] {
					have[r.Size] = true
					sizes = append(sizes, r.Size)
				}
			}
		}
		slices.Sort(sizes)
		ratios := x.key != "allocs_per_msg"
		fmt.Fprintf(w, "# %s %s\n", x.bench, x.key)
		var b strings.Builder
		fmt.Fprintf(&b, "%-10s", "# size")
		for _, s := range runs {
			fmt.Fprintf(&b, " %*s", col, s.name)
		}
		for _, s := range runs[1:] {
			if ratios {
				fmt.Fprintf(&b, " %*s", col, s.name+"/"+base)
			}
		}
		fmt.Fprintln(w, b.String())
		for _, size := range sizes {
			b.Reset()
			fmt.Fprintf(&b, "%-10d", size)
			vals := make([]float64, len(runs))
			ok := make([]bool, len(runs))
			for i, s := range runs {
				vals[i], ok[i] = lookup(s.rows, x.bench, size, x.key)
				if ok[i] {
					fmt.Fprintf(&b, " %*s", col, fmtValue(vals[i]))
				} else {
					fmt.Fprintf(&b, " %*s", col, "-")
				}
			}
			for i := 1; i < len(runs) && ratios; i++ {
				if ok[0] && ok[i] && vals[0] != 0 {
					fmt.Fprintf(&b, " %*.2fx", col-1, vals[i]/vals[0])
				} else {
					fmt.Fprintf(&b, " %*s", col, "-")
				}
			}
			fmt.Fprintln(w, b.String())
		}
		fmt.Fprintln(w)
	}
}

func lookup(rows []record, bench string, size int, key string) (float64, bool) {
	for i := range rows {
		if rows[i].Benchmark == bench && rows[i].Size == size {
			return rows[i].value(key)
		}
	}
	return 0, false
}

func fmtValue(v float64) string {
	if v >= 100 || v == 0 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
