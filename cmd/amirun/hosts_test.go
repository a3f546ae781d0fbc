package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/amigo-hpc/amigo/internal/launch"
)

func TestHostfileForms(t *testing.T) {
	in := `# MPICH's form, Open MPI's, a bare host
a:2
b slots=3 max_slots=8   # comment
c
a:1
`
	hs, err := parseHostfile(strings.NewReader(in), "hf")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(hs); got != "[{a 3} {b 3} {c 1}]" {
		t.Fatalf("hosts %s", got)
	}
	for _, bad := range []string{"", "# only a comment\n", "a:x\n", "a:0\n", "b slots=0\n", "b slot=2\n", ":3\n"} {
		if _, err := parseHostfile(strings.NewReader(bad), "hf"); err == nil {
			t.Errorf("hostfile %q: no error", bad)
		}
	}
	hs, err = parseHostList("x:2, y")
	if err != nil || fmt.Sprint(hs) != "[{x 2} {y 0}]" {
		t.Fatalf("--hosts x:2,y: %v %v", hs, err)
	}
}

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		n     int
		hosts []host
		ppn   int
		want  string
	}{
		{5, []host{{"a", 0}, {"b", 0}}, 0, "[0 0 1 1 1]"},
		{4, []host{{"a", 1}, {"b", 3}}, 0, "[0 1 1 1]"},
		{6, []host{{"a", 1}, {"b", 2}}, 0, "[0 1 1 0 1 1]"},
		{5, []host{{"a", 1}, {"b", 3}}, 2, "[0 0 1 1 0]"},
		{4, []host{{"a", 0}, {"b", 0}}, 1, "[0 1 0 1]"},
		{3, []host{{"a", 0}}, 2, "[0 0 0]"},
	} {
		if got := fmt.Sprint(place(tc.n, tc.hosts, tc.ppn)); got != tc.want {
			t.Errorf("place(%d, %v, ppn %d) = %s, want %s", tc.n, tc.hosts, tc.ppn, got, tc.want)
		}
	}
}

func TestNodelist(t *testing.T) {
	for in, want := range map[string]string{
		"node1":                "[node1]",
		"node[01-03,07],login": "[node01 node02 node03 node07 login]",
		"r[1-2]n[8-9]":         "[r1n8 r1n9 r2n8 r2n9]",
		"a,b[10-11]":           "[a b10 b11]",
		"gpu[098-101]":         "[gpu098 gpu099 gpu100 gpu101]",
	} {
		got, err := expandNodelist(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("expandNodelist(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "n[1-", "n[3-1]", "n]", "n[a-b]", "n[-2]"} {
		if got, err := expandNodelist(bad); err == nil {
			t.Errorf("expandNodelist(%q) = %v, no error", bad, got)
		}
	}
}

func TestJoinGenv(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Int("n", 1, "")
	fs.Bool("tag-output", false, "")
	var l listFlag
	fs.Var(&l, "genv", "")
	in := []string{"-n", "2", "-genv", "A", "1 2", "--tag-output", "-genv", "B=3", "prog", "-genv", "C", "4"}
	got := joinGenv(fs, in)
	want := []string{"-n", "2", "-genv=A=1 2", "--tag-output", "-genv", "B=3", "prog", "-genv", "C", "4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("joinGenv = %q, want %q", got, want)
	}
}

// TestEnv: -x passes amirun's value of a variable, or the value given;
// -genv sets one in both of MPICH's spellings; every rank sees them.
func TestEnv(t *testing.T) {
	t.Setenv("AMIRUN_TEST_X", "from amirun")
	res := amirun(t, nil, []string{"-n", "3", "-x", "AMIRUN_TEST_X", "-x", "AMIRUN_TEST_Y=given",
		"-genv", "AMIRUN_TEST_G", "two words", "-genv", "AMIRUN_TEST_H=x=y"},
		"env:AMIRUN_TEST_X,AMIRUN_TEST_Y,AMIRUN_TEST_G,AMIRUN_TEST_H", 0)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	for r := range 3 {
		for _, kv := range []string{`AMIRUN_TEST_X="from amirun"`, `AMIRUN_TEST_Y="given"`, `AMIRUN_TEST_G="two words"`, `AMIRUN_TEST_H="x=y"`} {
			if want := fmt.Sprintf("rank %d env %s true\n", r, kv); !strings.Contains(res.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
			}
		}
	}
}

var (
	cpusLine   = regexp.MustCompile(`(?m)^rank (\d+) cpus (\S+)$`)
	reportLine = regexp.MustCompile(`(?m)^amirun: rank (\d+) on \S+ bound to core \d+: processors (\S+)$`)
)

// parseCPUList reads a /proc list ("0-2,5").
func parseCPUList(t *testing.T, s string) []int {
	t.Helper()
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil {
			t.Fatalf("cpu list %q", s)
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}

// TestBindCore: with --bind-to core each rank's Cpus_allowed_list, read by
// the rank itself from /proc/self/status, is the processors of one core,
// as --report-bindings says, no two ranks sharing one; without it, a rank
// may run anywhere amirun may.
func TestBindCore(t *testing.T) {
	cs, err := launch.Cores()
	if err != nil {
		t.Fatal(err)
	}
	n := min(len(cs), 4)
	res := amirun(t, nil, []string{"-n", strconv.Itoa(n), "--bind-to", "core", "--report-bindings"}, "cpus", 0)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	reported := map[string]string{}
	for _, m := range reportLine.FindAllStringSubmatch(res.stderr, -1) {
		reported[m[1]] = m[2]
	}
	used := map[int]string{}
	got := cpusLine.FindAllStringSubmatch(res.stdout, -1)
	if len(got) != n || len(reported) != n {
		t.Fatalf("%d ranks printed their processors, %d bindings reported, want %d\nstdout:\n%s\nstderr:\n%s", len(got), len(reported), n, res.stdout, res.stderr)
	}
	for _, m := range got {
		cpus := parseCPUList(t, m[2])
		if m[2] != reported[m[1]] {
			t.Errorf("rank %s runs on %s, amirun reported %s", m[1], m[2], reported[m[1]])
		}
		if len(cpus) != len(cs[0]) {
			t.Errorf("rank %s runs on %d processors (%s), a core has %d", m[1], len(cpus), m[2], len(cs[0]))
		}
		for _, c := range cpus {
			if other, dup := used[c]; dup {
				t.Errorf("ranks %s and %s share processor %d", other, m[1], c)
			}
			used[c] = m[1]
		}
	}
	// Unbound, a rank has amirun's whole affinity.
	var all []int
	for _, c := range cs {
		all = append(all, c...)
	}
	sort.Ints(all)
	res = amirun(t, nil, []string{"-n", "1", "--report-bindings"}, "cpus", 0)
	m := cpusLine.FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil || fmt.Sprint(parseCPUList(t, m[2])) != fmt.Sprint(all) || !strings.Contains(res.stderr, "rank 0 on ") {
		t.Fatalf("unbound rank: exit %d, %q, want processors %v\n%s", res.code, res.stdout, all, res.stderr)
	}
}

// TestSlurmNodes: inside a Slurm allocation amirun spreads the ranks over
// the nodes of SLURM_JOB_NODELIST, SLURM_NTASKS of them. The launch
// command here starts them in place, telling each which node it stands
// for.
func TestSlurmNodes(t *testing.T) {
	t.Setenv("SLURM_JOB_NODELIST", "tn[1-2]")
	t.Setenv("SLURM_NTASKS", "4")
	res := amirun(t, nil, []string{"--launch", "env AMIRUN_TEST_NODE={host} {cmd}", "--bind", "127.0.0.1"}, "env:AMIRUN_TEST_NODE", 0)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	for r, node := range []string{"tn1", "tn1", "tn2", "tn2"} {
		if want := fmt.Sprintf("rank %d env AMIRUN_TEST_NODE=%q true\n", r, node); !strings.Contains(res.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
		}
	}
}

// TestHostfileLocal: a hostfile naming only this machine runs the ranks
// here, as many as its slots when -n is not given.
func TestHostfileLocal(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hf, []byte("localhost slots=3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := amirun(t, nil, []string{"-f", hf}, "exchange", 0)
	checkExchanged(t, res, 3, []int{0, 0, 0}, nil)
	var b bytes.Buffer
	if code := run([]string{"--hostfile", hf, "-n", "0", "true"}, &b, &b); code != 2 {
		t.Errorf("-n 0 with a hostfile: exit %d", code)
	}
}
