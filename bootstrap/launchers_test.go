package bootstrap_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/bootstraptest"
)

func TestMain(m *testing.M) {
	bootstraptest.RunIfRank()
	os.Exit(m.Run())
}

// onCI reports whether missing launchers are a failure (CI installs them).
func onCI() bool { return os.Getenv("CI") != "" }

// need finds a launcher binary; on CI its absence fails the test.
func need(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if onCI() {
			t.Fatalf("%s not installed; .ci/run installs it", name)
		}
		t.Skipf("%s not installed (CI installs it)", name)
	}
	return p
}

var rankLine = regexp.MustCompile(`^rank (\d+)/(\d+) node (\d+) (\w+) at (\S+): exchanged with (\d+) peers$`)

// runRanks runs argv (a launcher command line ending in this test binary),
// bounded by timeout, and checks that all n ranks exchanged with each other
// over protocol proto.
func runRanks(t *testing.T, n int, proto string, timeout time.Duration, env []string, argv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	// The race detector sleeps 1s at exit by default; not needed here.
	cmd.Env = append(append(os.Environ(), bootstraptest.RankEnv+"=exchange", "GORACE=atexit_sleep_ms=0"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s: %v in %v", strings.Join(argv[:len(argv)-1], " "), err, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if m := rankLine.FindStringSubmatch(l); m != nil {
			if m[2] != fmt.Sprint(n) || m[4] != proto || m[6] != fmt.Sprint(n-1) {
				t.Errorf("unexpected line %q (want size %d, protocol %s)", l, n, proto)
			}
			lines = append(lines, m[1])
		}
	}
	sort.Strings(lines)
	var want []string
	for r := range n {
		want = append(want, fmt.Sprint(r))
	}
	if strings.Join(lines, ",") != strings.Join(want, ",") {
		t.Fatalf("ranks that reported an exchange: %v, want %v\nstdout:\n%s\nstderr:\n%s", lines, want, stdout.String(), stderr.String())
	}
}

// TestHydra runs 4 ranks under MPICH's mpiexec.hydra, speaking PMI-1 (over
// the inherited PMI_FD and over PMI_PORT) and PMI-2.
func TestHydra(t *testing.T) {
	hydra := need(t, "mpiexec.hydra")
	self, _ := os.Executable()
	for _, tc := range []struct {
		name, pmi string
		flags     []string
	}{
		{"pmi1", "1", nil},
		{"pmi1-port", "1", []string{"-pmi-port"}},
		{"pmi2", "2", nil},
		{"pmi2-port", "2", []string{"-pmi-port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv := append([]string{hydra, "-launcher", "fork", "-n", "4"}, tc.flags...)
			argv = append(argv, "-genv", "AMIGO_PMI", tc.pmi, self)
			runRanks(t, 4, "pmi"+tc.pmi, 60*time.Second, nil, argv...)
		})
	}
}

// slurmUp makes sure the one-node Slurm of ../shared/slurm is running,
// starting it (and stopping it after the test) if needed.
func slurmUp(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		if onCI() {
			t.Fatal("the Slurm test needs root")
		}
		t.Skip("the Slurm test needs root")
	}
	if p, err := exec.LookPath("srun"); err == nil && exec.Command("timeout", "5", "scontrol", "ping").Run() == nil {
		if out, _ := exec.Command("timeout", "5", "scontrol", "ping").Output(); bytes.Contains(out, []byte("is UP")) {
			return p
		}
	}
	setup, _ := filepath.Abs("../../shared/slurm/setup.sh")
	if _, err := os.Stat(setup); err != nil {
		if onCI() {
			t.Fatalf("no running Slurm and no %s", setup)
		}
		t.Skipf("no running Slurm and no %s", setup)
	}
	out, err := exec.Command("timeout", "-k", "5", "300", "bash", setup).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", setup, err, out)
	}
	t.Cleanup(func() {
		teardown := filepath.Join(filepath.Dir(setup), "teardown.sh")
		if out, err := exec.Command("timeout", "-k", "5", "120", "bash", teardown).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", teardown, err, out)
		}
	})
	return need(t, "srun")
}

// TestSlurm runs 4 ranks under a real Slurm's srun --mpi=pmi2: the default
// protocol choice picks PMI-2 there (PMI_JOBID is set); Slurm's plugin also
// serves PMI-1, which the second run forces.
func TestSlurm(t *testing.T) {
	srun := slurmUp(t)
	self, _ := os.Executable()
	for _, tc := range []struct{ name, pmi, proto string }{
		{"auto", "", "pmi2"},
		{"pmi1", "1", "pmi1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"AMIGO_PMI=" + tc.pmi}
			runRanks(t, 4, tc.proto, 90*time.Second, env,
				"timeout", "-k", "5", "60", srun, "--mpi=pmi2", "-n", "4", "--kill-on-bad-exit=1", self)
		})
	}
}
