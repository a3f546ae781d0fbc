package tcp_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/mpi"
	"github.com/amigo-hpc/amigo/transport/tcp"
)

// runOn runs n ranks of mode over TCP, all of them allowed onto the
// processors cpus only (nil: bound one to a core each, as amirun
// --bind-to core binds them), with env added, and returns their combined
// output.
func runOn(t *testing.T, n int, cpus []int, mode string, env ...string) (string, error) {
	t.Helper()
	out := launch.NewCapture(n)
	opts := launch.Options{
		N:         n,
		Argv:      []string{os.Args[0]},
		Env:       append([]string{rankEnv + "=" + mode, "AMIGO_TRANSPORT=tcp", "GORACE=atexit_sleep_ms=0"}, env...),
		Output:    out.Output,
		BindCores: cpus == nil,
	}
	// A child inherits the affinity of the thread that starts it.
	runtime.LockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	if cpus != nil {
		var set unix.CPUSet
		for _, c := range cpus {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			runtime.UnlockOSThread()
			t.Fatal(err)
		}
	}
	job, err := launch.Start(opts)
	if err := unix.SchedSetaffinity(0, &old); err == nil {
		runtime.UnlockOSThread()
	}
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = job.Wait(ctx)
	return out.All(), err
}

// firstCPUs returns up to n processors this process may run on.
func firstCPUs(t *testing.T, n int) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < n; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

var overLine = regexp.MustCompile(`rank (\d+): oversubscribed (true|false), release stores (true|false) before Open, (true|false) after`)

// oversubscribed: the rank says whether its context counts its host as
// oversubscribed, and whether the process published descriptors with
// release stores (package order) before and after Open: the shared-memory
// adapter turns them into fenced stores on an oversubscribed host only.
func oversubscribed() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := order.Relaxed()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	fmt.Printf("rank %d: oversubscribed %v, release stores %v before Open, %v after\n", cl.Rank(), cl.Context(0).Oversubscribed(), before, order.Relaxed())
	// Over shm a rank maps its peers' segments in Open: none may leave
	// before all have. Over tcp the ranks need not wait for each other.
	if os.Getenv("AMIGO_TRANSPORT") == "shm" {
		return cl.Barrier(ctx)
	}
	return nil
}

// Ranks bound one to a core each are not oversubscribed, although each may
// run on one processor only; as many ranks all allowed onto fewer
// processors are.
func TestOversubscribedByAffinity(t *testing.T) {
	cores, err := launch.Cores()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		n    int
		cpus []int
		want bool
	}{
		// With fewer cores than ranks, launch leaves the ranks free, on
		// every processor this process may use.
		{"bound one a core", 2, nil, len(cores) < 2},
		{"four on two processors", 4, firstCPUs(t, 2), true},
	}
	// The shared-memory and fabric adapters count processors the same way
	// (transport.HostProcessors); shm runs here too, the ranks on one host.
	for _, tr := range []string{"tcp", "shm"} {
		for _, c := range cases {
			t.Run(tr+"/"+c.name, func(t *testing.T) {
				out, err := runOn(t, c.n, c.cpus, "over", "AMIGO_TRANSPORT="+tr)
				if err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				got := overLine.FindAllStringSubmatch(out, -1)
				if len(got) != c.n {
					t.Fatalf("%d answers from %d ranks:\n%s", len(got), c.n, out)
				}
				for _, g := range got {
					if g[2] != strconv.FormatBool(c.want) {
						t.Errorf("rank %s: oversubscribed %s, want %v", g[1], g[2], c.want)
					}
					// Over shm an oversubscribed host fences its
					// stores, any other keeps the release stores it
					// had (none under the race detector): ranks bound
					// to a core each count the host's processors, not
					// the one each may run on.
					want := g[3] == "true" && (tr != "shm" || !c.want)
					if g[4] != strconv.FormatBool(want) {
						t.Errorf("rank %s: release stores %s after Open (%s before, oversubscribed %s), want %v", g[1], g[4], g[3], g[2], want)
					}
				}
			})
		}
	}
}

// Halo exchange parameters: each rank holds haloRows rows of haloCols
// doubles and exchanges its edge rows with the ranks above and below on a
// ring.
const haloRows, haloCols, haloIters = 8, 16, 300

// lateSender is how long rank 0 of the halo exchange waits in each
// iteration before it sends: far longer than its neighbours' spin and yield
// (AMIGO_SPIN=1, AMIGO_YIELD=1 in the test), so that they sleep.
const lateSender = time.Millisecond

var haloLine = regexp.MustCompile(`rank (\d+): oversubscribed (true|false), (\d+) sleeps, (\d+) ran to their bound, (\d+) handoffs`)

// halo: the rank runs the halo exchange over package mpi, checks what its
// halos hold every iteration, and reports its sleeps.
func halo() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	ac := cl.Context(0)
	w, err := mpi.World(ctx, ac, nil)
	if err != nil {
		return err
	}
	r, p := w.Rank(), w.Size()
	up, down := (r+p-1)%p, (r+1)%p
	u := make([]float64, (haloRows+2)*haloCols)
	row := func(i int) []float64 { return u[i*haloCols : (i+1)*haloCols] }
	reqs := make([]mpi.Request, 4)
	before, handoffs := ac.Stats(), tcp.ProcessStats().Handoffs
	for it := 0; it < haloIters; it++ {
		for j := range haloCols {
			row(1)[j] = float64(r*1000000 + it*100 + j)
			row(haloRows)[j] = -row(1)[j]
		}
		if r == 0 {
			// Rank 0 is late (its processor free meanwhile): its
			// neighbours, waiting for its rows, go to sleep.
			time.Sleep(lateSender)
		}
		if reqs[0], err = mpi.Irecv(w, row(0), up, 0); err != nil {
			return err
		}
		if reqs[1], err = mpi.Irecv(w, row(haloRows+1), down, 1); err != nil {
			return err
		}
		if reqs[2], err = mpi.Isend(w, row(1), up, 1); err != nil {
			return err
		}
		if reqs[3], err = mpi.Isend(w, row(haloRows), down, 0); err != nil {
			return err
		}
		if err := mpi.Waitall(ctx, reqs, nil); err != nil {
			return fmt.Errorf("iteration %d: %w", it, err)
		}
		for j := range haloCols {
			if row(0)[j] != -float64(up*1000000+it*100+j) || row(haloRows + 1)[j] != float64(down*1000000+it*100+j) {
				return fmt.Errorf("iteration %d: halo point %d holds %v and %v", it, j, row(0)[j], row(haloRows + 1)[j])
			}
		}
	}
	s := ac.Stats()
	fmt.Printf("rank %d: oversubscribed %v, %d sleeps, %d ran to their bound, %d handoffs\n", r, ac.Oversubscribed(), s.Sleeps-before.Sleeps, s.SleepTimeouts-before.SleepTimeouts, tcp.ProcessStats().Handoffs-handoffs)
	return mpi.Finalize(ctx, w)
}

// Four ranks on two processors (one, on a host that has one) exchange halos
// over TCP, as a new user's first program does. A wait that finds nothing
// sleeps after one spin and one yield (AMIGO_SPIN=1, AMIGO_YIELD=1), and
// rank 0 is late to send (lateSender), so its neighbours sleep in nearly
// every iteration; a sleep lasts up to 30 s (AMIGO_SLEEP_MAX), and
// the adapter's engine takes the sockets of a context that stopped polling
// only after 2 s (AMIGO_TCP_HANDOFF): a sleep that its socket did not end
// would stall the job, and run to its bound or count a handoff. Every sleep
// must have been ended by the socket.
func TestHaloOversubscribedSleepsWokenBySocket(t *testing.T) {
	const n = 4
	out, err := runOn(t, n, firstCPUs(t, 2), "halo", "AMIGO_SPIN=1", "AMIGO_YIELD=1", "AMIGO_SLEEP_MAX=30s", "AMIGO_TCP_HANDOFF=2s")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := haloLine.FindAllStringSubmatch(out, -1)
	if len(got) != n {
		t.Fatalf("%d reports from %d ranks:\n%s", len(got), n, out)
	}
	sleeps := 0
	for _, g := range got {
		k, _ := strconv.Atoi(g[3])
		sleeps += k
		if g[2] != "true" {
			t.Errorf("rank %s does not count its host oversubscribed", g[1])
		}
		if g[4] != "0" {
			t.Errorf("rank %s: %s of %s sleeps ran to their bound", g[1], g[4], g[3])
		}
		if g[5] != "0" {
			t.Errorf("rank %s: the engine took the sockets over %s times", g[1], g[5])
		}
	}
	if sleeps == 0 {
		t.Fatalf("no rank slept: the test did not drive the sleep\n%s", out)
	}
	t.Logf("%d sleeps in %d iterations of %d ranks, each ended by its socket:\n%s", sleeps, haloIters, n, strings.TrimSpace(out))
}
