package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// record is one row of a run: one benchmark at one size, with its values by
// JSON key. amibench makes them as it measures; compare and --plot read
// them back from the JSON lines of amibench and of bench/osu.
type record struct {
	// Run names the run the row belongs to ("run" in the lines the bench/
	// scripts keep; empty in amibench's own output).
	Run       string
	Benchmark string
	Size      int
	Transport string // "shm" when the line names none
	Ranks     int    // 2 when the line names none
	Keys      []string
	Vals      []float64
}

func (r *record) add(key string, v float64) {
	r.Keys = append(r.Keys, key)
	r.Vals = append(r.Vals, v)
}

// value returns the value of key and whether the row has it.
func (r *record) value(key string) (float64, bool) {
	for i, k := range r.Keys {
		if k == key {
			return r.Vals[i], true
		}
	}
	return 0, false
}

// json returns the row as amibench's --json prints it: benchmark, size, the
// values in column order, then transport and ranks where they differ from
// shm and 2.
func (r *record) json() string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"benchmark":%q,"size":%d`, r.Benchmark, r.Size)
	for i, k := range r.Keys {
		v, _ := json.Marshal(r.Vals[i])
		fmt.Fprintf(&b, ",%q:%s", k, v)
	}
	if r.Transport != "shm" {
		fmt.Fprintf(&b, `,"transport":%q`, r.Transport)
	}
	if r.Ranks != 2 {
		fmt.Fprintf(&b, `,"ranks":%d`, r.Ranks)
	}
	b.WriteString("}")
	return b.String()
}

// csvHeader is the first line of --csv output. Every value is a line of its
// own (benchmarks differ in their columns), so that one header serves a run
// of several benchmarks and a spreadsheet or data frame pivots it at will.
const csvHeader = "benchmark,transport,ranks,size,metric,value"

// csv writes the row's values as lines under csvHeader.
func (r *record) csv(w io.Writer) {
	for i, k := range r.Keys {
		fmt.Fprintf(w, "%s,%s,%d,%d,%s,%s\n", r.Benchmark, r.Transport, r.Ranks, r.Size, k,
			strconv.FormatFloat(r.Vals[i], 'f', -1, 64))
	}
}

// parseRecord reads one JSON line of amibench or bench/osu. It reports
// false for lines that are no row: a failed run's marker, a run's wall
// time, anything without a benchmark and a size.
func parseRecord(line []byte) (record, bool, error) {
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return record{}, false, err
	}
	r := record{Transport: "shm", Ranks: 2}
	name, _ := m["benchmark"].(string)
	size, ok := m["size"].(float64)
	if name == "" || !ok || size < 0 || m["failed"] == true {
		return record{}, false, nil
	}
	r.Benchmark, r.Size = name, int(size)
	r.Run, _ = m["run"].(string)
	if t, ok := m["transport"].(string); ok {
		r.Transport = t
	}
	if n, ok := m["ranks"].(float64); ok {
		r.Ranks = int(n)
	}
	// Values in a stable order: the line's map has none.
	var keys []string
	for k, v := range m {
		if _, num := v.(float64); num && k != "size" && k != "ranks" {
			keys = append(keys, k)
		}
	}
	sortKeys(keys)
	for _, k := range keys {
		r.add(k, m[k].(float64))
	}
	return r, true, nil
}

// sortKeys orders value keys: the common figures first, then by name.
func sortKeys(keys []string) {
	order := func(k string) string {
		switch k {
		case "latency_us":
			return "0"
		case "mb_per_s":
			return "1"
		case "messages_per_s":
			return "2"
		}
		return "3" + k
	}
	sort.Slice(keys, func(i, j int) bool { return order(keys[i]) < order(keys[j]) })
}

// progress is the line rank 0 keeps on standard error during a run when
// standard error is a terminal: which benchmark ran which size last, and
// how much is left. It is overwritten in place and erased at the end.
type progress struct {
	on         bool
	w          io.Writer
	bench      string
	benchLeft  int
	sizesLeft  int
	shownSince bool
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// begin announces benchmark name, with left more to run after it.
func (p *progress) begin(name string, left int) {
	p.bench, p.benchLeft, p.sizesLeft = name, left, 0
	if p.on {
		p.show(fmt.Sprintf("%s: starting", name))
	}
}

// progressRow notes that the running benchmark measured size.
func (e *Env) progressRow(size int) {
	p := &e.progress
	if p.sizesLeft > 0 {
		p.sizesLeft--
	}
	if p.on {
		p.show(fmt.Sprintf("%s: %d B done, %d sizes left", p.bench, size, p.sizesLeft))
	}
}

func (p *progress) show(s string) {
	if p.benchLeft > 0 {
		s += fmt.Sprintf(", then %d more benchmarks", p.benchLeft)
	}
	fmt.Fprintf(p.w, "\r\033[Kamibench: %s", s)
	p.shownSince = true
}

// end erases the line.
func (p *progress) end() {
	if p.on && p.shownSince {
		fmt.Fprint(p.w, "\r\033[K")
		p.shownSince = false
	}
}
