package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/bootstrap/bootstraptest"
)

// The test binary plays three parts: the test itself; amirun (when
// AMIRUN_TEST_AS=amirun); and a rank (when its first argument is
// "rank:MODE", which is how amirun starts it).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "rank:") {
		os.Exit(rankMain(strings.TrimPrefix(os.Args[1], "rank:")))
	}
	if os.Getenv("AMIRUN_TEST_AS") == "amirun" {
		os.Unsetenv("AMIRUN_TEST_AS")
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// rankMain is the rank program. Modes:
//
//	exchange            bootstraptest's address exchange
//	exit:R:C            rank R exits with status C after open; others fence
//	kill:R              rank R kills itself with SIGKILL; others fence
//	abort:R:C           rank R aborts the job with code C; others fence
//	nofinalize:R        rank R exits 0 without closing; others fence
//	lost:R              rank R kills itself with SIGKILL; the others wait
//	                    until amirun reports it lost, fence and finalize
//	hang                every rank sleeps
//	print               every rank prints two lines to stdout, one to stderr
//	cpus                every rank prints its Cpus_allowed_list (/proc/self/status)
//	env:A,B             every rank prints the values of variables A and B
//
// In every mode but exchange and print, each rank first starts two sleeping
// grandchildren, one in its process group and one in a new session, to
// check that amirun leaves nothing behind.
func rankMain(mode string) int {
	switch mode {
	case "exchange":
		return bootstraptest.Main()
	case "print":
		r := os.Getenv("PMI_RANK")
		fmt.Printf("line one of %s\nline two of %s\n", r, r)
		fmt.Fprintf(os.Stderr, "err of %s", r) // no newline: amirun adds one
		return 0
	case "cpus":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 96
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				fmt.Printf("rank %s cpus %s\n", os.Getenv("PMI_RANK"), strings.TrimSpace(v))
			}
		}
		return 0
	}
	if names, ok := strings.CutPrefix(mode, "env:"); ok {
		for _, n := range strings.Split(names, ",") {
			v, set := os.LookupEnv(n)
			fmt.Printf("rank %s env %s=%q %v\n", os.Getenv("PMI_RANK"), n, v, set)
		}
		return 0
	}
	for _, setsid := range []bool{false, true} {
		c := exec.Command("sleep", "300")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 99
		}
	}
	if mode == "hang" {
		time.Sleep(300 * time.Second)
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	j, err := bootstrap.Open(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 98
	}
	f := strings.Split(mode, ":")
	target, _ := strconv.Atoi(f[1])
	code := 0
	if len(f) > 2 {
		code, _ = strconv.Atoi(f[2])
	}
	if j.Rank() == target {
		switch f[0] {
		case "exit":
			return code
		case "kill":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		case "abort":
			j.Abort(code, "test abort")
			time.Sleep(300 * time.Second)
		case "nofinalize":
			return 0
		case "lost":
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	if f[0] == "lost" {
		// The others learn from amirun that it lost the rank, and fence
		// without it.
		for {
			lost, err := bootstrap.LostRanks(ctx, j)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 96
			}
			if slices.Contains(lost, target) {
				break
			}
			select {
			case <-ctx.Done():
				fmt.Fprintln(os.Stderr, "rank", j.Rank(), "never heard that rank", target, "was lost")
				return 95
			case <-time.After(5 * time.Millisecond):
			}
		}
		if err := j.Fence(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 97
		}
		fmt.Printf("rank %d: rank %d lost\n", j.Rank(), target)
		if err := j.Close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 94
		}
		return 0
	}
	if err := j.Fence(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 97
	}
	return 0
}

type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// amirun runs the test binary as amirun with args, then the test binary as
// the ranks in the given mode, and checks that no process carrying this
// run's marker remains.
func amirun(t *testing.T, wrap []string, args []string, mode string, signal syscall.Signal) result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mk [8]byte
	rand.Read(mk[:])
	marker := "AMIRUN_TEST_MARKER=" + hex.EncodeToString(mk[:])
	argv := append(append(append([]string{}, wrap...), self), args...)
	argv = append(argv, self, "rank:"+mode)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// The race detector sleeps 1s at exit by default; not needed here.
	cmd.Env = append(os.Environ(), "AMIRUN_TEST_AS=amirun", marker, "GORACE=atexit_sleep_ms=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if signal != 0 {
		// Signal once amirun and all ranks and their children are up
		// (4 ranks of "hang" start 2 sleepers each), so the signal
		// reaches amirun's handler, not its default action.
		for deadline := time.Now().Add(30 * time.Second); len(withMarker(marker)) < 1+4*3 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		cmd.Process.Signal(signal)
	}
	err = cmd.Wait()
	res := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("amirun did not finish in time: %v\nstderr:\n%s", err, res.stderr)
	}
	if left := withMarker(marker); len(left) > 0 {
		for _, p := range left {
			syscall.Kill(p, syscall.SIGKILL)
		}
		t.Errorf("processes left behind by amirun: %v\nstderr:\n%s", left, res.stderr)
	}
	t.Logf("amirun %s ... rank:%s: exit %d after %v", strings.Join(args, " "), mode, res.code, res.elapsed.Round(time.Millisecond))
	return res
}

// withMarker lists the processes whose environment holds marker.
func withMarker(marker string) []int {
	d, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range d {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if string(kv) == marker {
				out = append(out, pid)
			}
		}
	}
	return out
}

var rankLine = regexp.MustCompile(`(?m)^rank (\d+)/(\d+) node (\d+) (\w+) at (\S+): exchanged with (\d+) peers$`)

func checkExchanged(t *testing.T, res result, n int, wantNodes []int, wantIPs []string) {
	t.Helper()
	if res.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	var got []string
	for _, m := range rankLine.FindAllStringSubmatch(res.stdout, -1) {
		r, _ := strconv.Atoi(m[1])
		node, _ := strconv.Atoi(m[3])
		if m[2] != strconv.Itoa(n) || m[6] != strconv.Itoa(n-1) || m[4] != "pmi1" {
			t.Errorf("line %q", m[0])
		}
		if wantNodes != nil && node != wantNodes[r] {
			t.Errorf("rank %d reports node %d, want %d", r, node, wantNodes[r])
		}
		if wantIPs != nil && !strings.HasPrefix(m[5], wantIPs[r]+":") {
			t.Errorf("rank %d published %s, want an address on %s", r, m[5], wantIPs[r])
		}
		got = append(got, m[1])
	}
	sort.Strings(got)
	if len(got) != n {
		t.Fatalf("%d ranks reported an exchange (%v), want %d\nstdout:\n%s\nstderr:\n%s", len(got), got, n, res.stdout, res.stderr)
	}
}

func TestExchange(t *testing.T) {
	res := amirun(t, nil, []string{"-n", "4"}, "exchange", 0)
	checkExchanged(t, res, 4, nil, nil)
}

func TestTagOutput(t *testing.T) {
	res := amirun(t, nil, []string{"-n", "3", "--tag-output"}, "print", 0)
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	for r := range 3 {
		for _, l := range []string{"line one of %d", "line two of %d"} {
			want := fmt.Sprintf("[%d] "+l+"\n", r, r)
			if !strings.Contains(res.stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
			}
		}
		if want := fmt.Sprintf("[%d] err of %d\n", r, r); !strings.Contains(res.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, res.stderr)
		}
	}
}

// TestFailures: a failing rank makes amirun exit with its status within a
// bounded time, stopping the other ranks (blocked in a fence) and every
// process they started.
func TestFailures(t *testing.T) {
	t.Setenv("SLURM_NO_KILL", "") // fail-fast, whatever job runs the test
	me, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode   string
		args   []string
		signal syscall.Signal
		code   int
		says   string
	}{
		{"exit:1:3", nil, 0, 3, "rank 1 on " + me + " exited with status 3"},
		{"kill:2", nil, 0, 128 + 9, "rank 2 on " + me + " was killed by killed"},
		{"abort:0:5", nil, 0, 5, "rank 0 on " + me + " aborted the job (code 5)"},
		{"nofinalize:3", nil, 0, 1, "rank 3 on " + me + " exited without PMI finalize"},
		{"hang", []string{"--timeout", "1s"}, 0, 124, "timeout after 1s"},
		{"hang", nil, syscall.SIGTERM, 128 + 15, "received terminated"},
		{"hang", nil, syscall.SIGINT, 128 + 2, "received interrupt"},
	} {
		t.Run(tc.mode+fmt.Sprint(tc.signal), func(t *testing.T) {
			args := append([]string{"-n", "4", "--grace", "1s"}, tc.args...)
			res := amirun(t, nil, args, tc.mode, tc.signal)
			if res.code != tc.code {
				t.Errorf("exit %d, want %d\nstderr:\n%s", res.code, tc.code, res.stderr)
			}
			if !strings.Contains(res.stderr, tc.says) {
				t.Errorf("stderr does not say %q:\n%s", tc.says, res.stderr)
			}
			if res.elapsed > 10*time.Second {
				t.Errorf("took %v", res.elapsed)
			}
		})
	}
}

// With --keep-going, or in a Slurm job run with --no-kill, a rank that dies
// does not stop the others: they learn from amirun that it was lost,
// fence without it and finish; amirun exits with the dead rank's status.
func TestKeepGoing(t *testing.T) {
	me, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  string
	}{
		{"flag", []string{"--keep-going"}, ""},
		{"slurm", nil, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SLURM_NO_KILL", tc.env)
			res := amirun(t, nil, append([]string{"-n", "4", "--grace", "1s"}, tc.args...), "lost:2", 0)
			if res.code != 128+9 {
				t.Errorf("exit %d, want %d\nstderr:\n%s", res.code, 128+9, res.stderr)
			}
			if says := "rank 2 on " + me + " was killed by killed; the job goes on (--keep-going)"; !strings.Contains(res.stderr, says) {
				t.Errorf("stderr does not say %q:\n%s", says, res.stderr)
			}
			for _, r := range []int{0, 1, 3} {
				if line := fmt.Sprintf("rank %d: rank 2 lost\n", r); !strings.Contains(res.stdout, line) {
					t.Errorf("stdout lacks %q:\n%s\nstderr:\n%s", line, res.stdout, res.stderr)
				}
			}
		})
	}
	// SLURM_NO_KILL=0 leaves the default: the job stops.
	t.Setenv("SLURM_NO_KILL", "0")
	res := amirun(t, nil, []string{"-n", "4", "--grace", "1s"}, "kill:2", 0)
	if res.code != 128+9 || !strings.Contains(res.stderr, "stopping the job") {
		t.Errorf("SLURM_NO_KILL=0: exit %d\nstderr:\n%s", res.code, res.stderr)
	}
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-n", "0", "true"}, &out, &errb); code != 2 {
		t.Errorf("-n 0: exit %d", code)
	}
	if code := run([]string{"-n", "2"}, &out, &errb); code != 2 {
		t.Errorf("no program: exit %d", code)
	}
	if got := nodes(5, 2); fmt.Sprint(got) != "[0 0 1 1 1]" {
		t.Errorf("nodes(5,2) = %v", got)
	}
	for _, args := range [][]string{
		{"--bind-to", "socket", "true"},
		{"-ppn", "-1", "true"},
		{"-x", "AMIRUN_TEST_SURELY_UNSET", "true"},
		{"-genv", "=x", "true"},
		{"-f", "/nonexistent/hostfile", "true"},
		{"-f", "x", "--hosts", "a", "true"},
		{"--hosts", "a:0", "true"},
	} {
		errb.Reset()
		if code := run(args, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("amirun %q: exit %d, stderr %q", args, code, errb.String())
		}
	}
	got := launchArgv("ssh -T {host} {shcmd}", "h1", []string{"A=1"}, []string{"prog", "it's"})
	if want := []string{"ssh", "-T", "h1", `env A=1 prog 'it'\''s'`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("launchArgv = %q, want %q", got, want)
	}
	got = launchArgv("ip netns exec {host}", "h1", []string{"A=1"}, []string{"prog", "x"})
	if want := []string{"ip", "netns", "exec", "h1", "prog", "x"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("launchArgv = %q, want %q", got, want)
	}
}
