package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

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

// Under a launcher that is not amibench's own (amirun, mpiexec: the ranks
// get no AMIGO_TRANSPORT from it), --transport picks the adapter and the
// rows name it; a flag that AMIGO_TRANSPORT contradicts is an error, not
// a run over the other adapter.
func TestTransportUnderLauncher(t *testing.T) {
	t.Setenv("AMIGO_TRANSPORT", "")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	start := func(env []string, flags ...string) (string, string, error) {
		// Every rank's standard error: the first to fail may stop the
		// others before they print. Read once the job has ended.
		var out, errBuf bytes.Buffer
		errb := &lockedWriter{w: &errBuf}
		argv := append([]string{self, "-b", "latency", "--min-size", "8", "--max-size", "8", "--iterations", "3", "--warmup", "1", "--json"}, flags...)
		j, err := launch.Start(launch.Options{
			N:    2,
			Argv: argv,
			Env:  env,
			Output: func(r int) (io.Writer, io.Writer) {
				if r == 0 {
					return &out, errb
				}
				return nil, errb
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = j.Wait(ctx)
		return out.String(), errBuf.String(), err
	}
	transport := func(env []string, flags ...string) string {
		t.Helper()
		out, errs, err := start(env, flags...)
		if err != nil {
			t.Fatalf("%v %v: %v\n%s", env, flags, err, errs)
		}
		var row map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &row); err != nil {
			t.Fatalf("row %q: %v", out, err)
		}
		s, _ := row["transport"].(string)
		return s
	}
	if got := transport(nil, "--transport", "tcp"); got != "tcp" {
		t.Errorf("--transport tcp: rows say %q", got)
	}
	if got := transport([]string{"AMIGO_TRANSPORT=tcp"}); got != "tcp" {
		t.Errorf("AMIGO_TRANSPORT=tcp: rows say %q", got)
	}
	// Neither: the automatic choice, not the flag's default.
	if got := transport(nil); !strings.HasPrefix(got, "auto:") || !strings.Contains(got, "shm") {
		t.Errorf("no transport given: rows say %q, want auto: and the adapters", got)
	}
	if _, errs, err := start([]string{"AMIGO_TRANSPORT=shm"}, "--transport", "tcp"); err == nil || !strings.Contains(errs, "AMIGO_TRANSPORT=shm") {
		t.Fatalf("--transport tcp with AMIGO_TRANSPORT=shm: %v\n%s", err, errs)
	}
}
