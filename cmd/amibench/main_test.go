package main

import (
	"bytes"
	"encoding/json"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/amigo-hpc/amigo/internal/launch"
)

// Run bare, amibench starts copies of itself as ranks; in this test binary
// the copies come back here and run as amibench.
func TestMain(m *testing.M) {
	if launch.InRank() {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func rows(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("amibench %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
	}
	var rs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// Every registered benchmark runs, over processes and over goroutines, and
// prints one JSON object per size with the fields it declares.
func TestBenchmarks(t *testing.T) {
	var names []string
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, tr := range []string{"shm", "loop"} {
		for _, name := range names {
			if name == "idle" && tr == "loop" {
				// idle measures the processor time of rank processes:
				// it runs over shm here, and TestIdle measures it.
				continue
			}
			t.Run(tr+"/"+name, func(t *testing.T) {
				n := max(benchmarks[name].MinRanks, 2)
				if name == "mbw_mr" || name == "a2a" {
					n = 4
				}
				rs := rows(t, "--transport", tr, "-n", itoa(n), "-b", name, "--min-size", "1", "--max-size", "65536", "--iterations", "3", "--warmup", "1", "--idle", "200ms", "--json")
				if len(rs) == 0 {
					t.Fatal("no rows")
				}
				for _, r := range rs {
					if r["benchmark"] != name {
						t.Fatalf("row %v", r)
					}
					if _, ok := r["size"].(float64); !ok {
						t.Fatalf("row without a size: %v", r)
					}
				}
			})
		}
	}
}

// The columns and keys of the examples.
func TestFormat(t *testing.T) {
	rs := rows(t, "-b", "latency,bw", "--min-size", "8", "--max-size", "8", "--iterations", "10", "--json")
	if len(rs) != 2 || rs[0]["benchmark"] != "latency" || rs[0]["size"] != 8.0 || rs[0]["latency_us"] == nil ||
		rs[1]["benchmark"] != "bw" || rs[1]["mb_per_s"] == nil || rs[0]["allocs_per_msg"] == nil {
		t.Fatalf("rows %v", rs)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--transport", "loop", "-b", "latency", "--max-size", "2", "--iterations", "5"}, &out, &errb); code != 0 {
		t.Fatal(errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[1], "# Size") || !strings.Contains(lines[1], "Latency (us)") {
		t.Fatalf("output:\n%s", out.String())
	}
	if code := run([]string{"-b", "nosuch"}, &out, &errb); code != 2 {
		t.Fatalf("unknown benchmark: exit %d", code)
	}
	out.Reset()
	if code := run([]string{"-b", "list"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "put_latency") {
		t.Fatalf("list: %d\n%s", code, out.String())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// Ranks waiting on Context.Ready use next to no processor: not a
// performance figure (amibench -b idle prints it) but a guard against a
// wait that spins, which would use most of a core.
func TestIdle(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		rs := rows(t, "--transport", tr, "-b", "idle", "--idle", "2s", "--json")
		if len(rs) != 1 {
			t.Fatalf("%s: %d rows", tr, len(rs))
		}
		if pct, _ := rs[0]["cpu_percent"].(float64); pct > 5 {
			t.Fatalf("%s: idle ranks used %.1f%% of a core", tr, pct)
		}
	}
}
