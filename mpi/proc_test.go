package mpi_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/mpi"
	"golang.org/x/sys/unix"
)

// The tests below run the same checks with ranks as real processes over the
// shared-memory adapter: the test binary re-runs itself (the os/exec
// pattern) with rankEnv naming the program, and internal/launch serves the
// ranks PMI as a launcher would.

const rankEnv = "AMIGO_MPI_TEST_RANK"

func TestMain(m *testing.M) {
	if prog := os.Getenv(rankEnv); prog != "" {
		os.Exit(rankMain(prog))
	}
	os.Exit(m.Run())
}

// program returns the rank program called name: "coll:P" runs every
// collective check with the counts for P ranks; "small:P" only the small
// counts (for runs that force other algorithms through AMIGO_MPI_*);
// the others are the semantics programs.
func program(name string) func(ctx context.Context, w *mpi.Comm) error {
	if p, ok := strings.CutPrefix(name, "coll:"); ok {
		return collProgram(p, false)
	}
	if p, ok := strings.CutPrefix(name, "small:"); ok {
		return collProgram(p, true)
	}
	if what, ok := strings.CutPrefix(name, "shm:"); ok {
		return sharedProgram(what)
	}
	if fn := ftProgram(name); fn != nil {
		return fn
	}
	if p, ok := strings.CutPrefix(name, "rma:"); ok {
		return rmaProgram(p)
	}
	switch name {
	case "nonovertaking/posted":
		return nonOvertaking("posted first")
	case "nonovertaking/unexpected":
		return nonOvertaking("unexpected first")
	case "nonovertaking/wildcards":
		return nonOvertaking("wildcards")
	case "wildcards":
		return wildcards
	case "probe":
		return probe
	case "truncation/small":
		return truncation(100, "posted")
	case "truncation/large":
		return truncation(100000, "unexpected")
	case "self":
		return self
	case "isolation":
		return commIsolation
	case "outstanding":
		return manyOutstanding
	case "nonblocking":
		return nonblockingCollectives
	case "ops":
		return ops
	}
	return nil
}

func collProgram(ps string, small bool) func(ctx context.Context, w *mpi.Comm) error {
	p, _ := strconv.Atoi(ps)
	counts := byRanks(cases(small))[p]
	return func(ctx context.Context, w *mpi.Comm) error {
		for _, c := range collChecks {
			if err := c.fn(ctx, w, counts); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
		return nil
	}
}

// rankMain runs this process as one rank of a launched job.
func rankMain(name string) int {
	fn := program(name)
	if fn == nil {
		fmt.Fprintf(os.Stderr, "no rank program %q\n", name)
		return 2
	}
	timeout := 3 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("AMIGO_MPI_TEST_TIMEOUT")); err == nil {
		timeout = d // a long run by hand: amirun -n 64 with coll:P
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := pinListed(); err != nil {
		fmt.Fprintln(os.Stderr, "pin:", err)
		return 1
	}
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 1
	}
	defer cl.Close()
	if want := os.Getenv("AMIGO_TRANSPORT"); want != "auto" && cl.Size() > 1 && !slices.Contains(cl.Adapters(), want) {
		fmt.Fprintf(os.Stderr, "rank %d: adapters %v, want %s\n", cl.Rank(), cl.Adapters(), want)
		return 1
	}
	w, err := mpi.World(ctx, cl.Context(0), nil)
	if err == nil {
		if err = fn(ctx, w); err == nil {
			err = mpi.Finalize(ctx, w)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", cl.Rank(), err)
		return 1
	}
	return 0
}

// oneCPUEnv lists the ranks (as PMI_RANK numbers them) that pin
// themselves to one processor before they open amigo, so that their host
// counts as oversubscribed whatever the machine.
const oneCPUEnv = "AMIGO_MPI_TEST_ONE_CPU"

// pinListed pins every thread of this process to the first processor it
// may use when its rank is listed in oneCPUEnv (threads made later inherit
// the mask of the thread that makes them).
func pinListed() error {
	list := os.Getenv(oneCPUEnv)
	if list == "" || !slices.Contains(strings.Split(list, ","), os.Getenv("PMI_RANK")) {
		return nil
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return err
	}
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			set.Zero()
			set.Set(cpu)
			tasks, err := os.ReadDir("/proc/self/task")
			if err != nil {
				return err
			}
			for _, task := range tasks {
				tid, err := strconv.Atoi(task.Name())
				if err != nil {
					continue
				}
				if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
					return err
				}
			}
			return nil
		}
	}
	return fmt.Errorf("no processor in the affinity mask")
}

// runProcs runs program name on n ranks as processes over shared memory,
// with env added, and fails t with the ranks' output if the job fails.
func runProcs(t *testing.T, n int, name string, env ...string) {
	t.Helper()
	runProcsOn(t, nil, n, name, env...)
}

// runProcsOn is runProcs with the launcher reporting host nodes[r] for
// rank r (nil: one host).
func runProcsOn(t *testing.T, nodes []int, n int, name string, env ...string) {
	t.Helper()
	out := launch.NewCapture(n)
	job, err := launch.Start(launch.Options{
		N:     n,
		Nodes: nodes,
		Argv:  []string{os.Args[0]},
		Env: append([]string{rankEnv + "=" + name, "AMIGO_TRANSPORT=shm", "GORACE=atexit_sleep_ms=0",
			// More ranks than cores: a rank that waits sleeps soon.
			"AMIGO_SPIN=50", "AMIGO_YIELD=50"}, env...),
		Output: out.Output,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := job.Wait(ctx); err != nil {
		t.Fatalf("%d ranks of %s: %v\n%s", n, name, err, out.All())
	}
}

// Every collective against its reference, ranks as processes over shared
// memory: every rank count from 1 to 17 with the small counts, the large
// counts on a few, with the algorithms chosen by size; then the other
// algorithms forced on a few rank counts.
func TestCollectivesShm(t *testing.T) {
	for p := range byRanks(cases(false)) {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			runProcs(t, p, fmt.Sprintf("coll:%d", p))
		})
	}
	long := []string{"AMIGO_MPI_ALLREDUCE_SHORT=-1", "AMIGO_MPI_REDUCE_SHORT=-1", "AMIGO_MPI_BCAST_SHORT=-1",
		"AMIGO_MPI_BCAST_SEGMENT=1000", "AMIGO_MPI_BCAST_MULTICAST=-1", "AMIGO_MPI_ALLGATHER_SHORT=-1", "AMIGO_MPI_GATHER_SHORT=-1", "AMIGO_MPI_ALLTOALL_SHORT=-1"}
	short := []string{"AMIGO_MPI_ALLREDUCE_SHORT=" + strconv.Itoa(mpi.Never), "AMIGO_MPI_REDUCE_SHORT=" + strconv.Itoa(mpi.Never),
		"AMIGO_MPI_BCAST_SHORT=" + strconv.Itoa(mpi.Never), "AMIGO_MPI_BCAST_MULTICAST=" + strconv.Itoa(mpi.Never),
		"AMIGO_MPI_ALLGATHER_SHORT=" + strconv.Itoa(mpi.Never),
		"AMIGO_MPI_GATHER_SHORT=" + strconv.Itoa(mpi.Never), "AMIGO_MPI_ALLTOALL_SHORT=" + strconv.Itoa(mpi.Never)}
	for _, p := range []int{3, 6, 8} {
		t.Run(fmt.Sprintf("long-algorithms/p=%d", p), func(t *testing.T) {
			runProcs(t, p, fmt.Sprintf("small:%d", p), long...)
		})
		t.Run(fmt.Sprintf("short-algorithms/p=%d", p), func(t *testing.T) {
			runProcs(t, p, fmt.Sprintf("small:%d", p), short...)
		})
	}
}

// The semantics programs, ranks as processes over shared memory.
func TestSemanticsShm(t *testing.T) {
	for _, c := range []struct {
		name string
		n    int
	}{
		{"nonovertaking/posted", 2}, {"nonovertaking/unexpected", 2}, {"nonovertaking/wildcards", 2},
		{"wildcards", 4}, {"probe", 3}, {"truncation/small", 2}, {"truncation/large", 2},
		{"self", 2}, {"isolation", 6}, {"outstanding", 3}, {"nonblocking", 5}, {"ops", 3},
	} {
		t.Run(c.name, func(t *testing.T) { runProcs(t, c.n, c.name) })
	}
}
