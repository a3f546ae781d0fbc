package amigo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/internal/launch"
)

func init() {
	rankPrograms["hygiene-kill"] = hygieneKillProgram
}

// resources is what a process holds that Close must give back.
type resources struct {
	fds        map[string]string // descriptor -> what it points to
	goroutines int
}

func takeResources() resources {
	r := resources{fds: map[string]string{}, goroutines: runtime.NumGoroutine()}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed meanwhile
		}
		r.fds[e.Name()] = target
	}
	return r
}

// leaks returns what now holds beyond base: descriptors that are new or
// point elsewhere, and goroutines beyond base's count.
func (base resources) leaks(now resources) string {
	var out []string
	for fd, target := range now.fds {
		if base.fds[fd] != target {
			out = append(out, fmt.Sprintf("fd %s -> %s", fd, target))
		}
	}
	sort.Strings(out)
	if now.goroutines > base.goroutines {
		out = append(out, fmt.Sprintf("%d goroutines, %d before", now.goroutines, base.goroutines))
	}
	return strings.Join(out, "; ")
}

// awaitReleased waits, bounded, until the process holds no more than
// base: goroutines that Close stopped may take a moment to return.
func awaitReleased(base resources, bound time.Duration) string {
	deadline := time.Now().Add(bound)
	for {
		l := base.leaks(takeResources())
		if l == "" || time.Now().After(deadline) {
			if l != "" {
				buf := make([]byte, 1<<20)
				l += "\n" + string(buf[:runtime.Stack(buf, true)])
			}
			return l
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func devShm(t testing.TB) map[string]bool {
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

// newIn returns the entries of after not in before, but for those another
// live process owns: a name that starts with the process id of a process
// other than this one that is still running (libfabric's shm provider names
// its regions "pid:..."), which other jobs on the machine make.
func newIn(before, after map[string]bool) []string {
	var out []string
	for n := range after {
		if before[n] {
			continue
		}
		if pid, _, ok := strings.Cut(n, ":"); ok {
			if p, err := strconv.Atoi(pid); err == nil && p != os.Getpid() && syscall.Kill(p, 0) == nil {
				continue
			}
		}
		out = append(out, n)
	}
	return out
}

// hygieneJob exchanges small and large messages and RMA between all ranks.
func hygieneJob(r *amigotest.Rank) error {
	c := r.Ctx
	n, me := r.Size(), r.Rank()
	got := 0
	c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		if m.Inline() {
			got++
			return
		}
		if err := m.Receive(make([]byte, m.Size()), func(error) { got++ }); err != nil {
			panic(err)
		}
	})
	region, err := r.AllocMemory(4096)
	if err != nil {
		return err
	}
	defer region.Deregister()
	if err := r.Barrier(); err != nil {
		return err
	}
	k := amigo.NewCounter()
	big := make([]byte, 1<<20)
	for p := 0; p < n; p++ {
		if p == me {
			continue
		}
		k.Add(2)
		if err := c.Send(amigo.EndpointOf(p), 1, nil, []byte("hi"), k.Done()); err != nil {
			return err
		}
		if err := c.SendWith(&amigo.SendParams{Dest: amigo.EndpointOf(p), Dispatch: 1, Data: big, RemoteDone: k.Done()}); err != nil {
			return err
		}
	}
	if err := c.WaitCounter(r.Deadline, k); err != nil {
		return err
	}
	if err := c.Wait(r.Deadline, func() bool { return got == 2*(n-1) }); err != nil {
		return err
	}
	return r.Barrier()
}

// Close gives back every descriptor and goroutine a job took, over every
// adapter, and leaves nothing in /dev/shm.
func TestCloseReleasesResources(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			opts := amigotest.Options{Over: over, Timeout: time.Minute}
			// A first job starts what a process starts once (the
			// runtime's, the packages' own).
			amigotest.Run(t, 4, opts, hygieneJob)
			shm := devShm(t)
			base := takeResources()
			for i := 0; i < 3; i++ {
				amigotest.Run(t, 4, opts, hygieneJob)
			}
			if l := awaitReleased(base, 10*time.Second); l != "" {
				t.Fatalf("after Close: %s", l)
			}
			if extra := newIn(shm, devShm(t)); len(extra) > 0 {
				t.Fatalf("left in /dev/shm: %v", extra)
			}
		})
	}
}

const hygieneVictim = 2

// hygieneKillProgram is a rank of TestKilledPeerReleased: every rank
// exchanges with every other, then rank hygieneVictim kills itself
// (SIGKILL); the others send to it until a send fails, close, and report
// what they hold beyond what they held before Open.
func hygieneKillProgram() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	base := takeResources()
	got, ready := 0, 0
	cl, err := amigo.Open(ctx, amigo.Config{Handlers: map[amigo.Dispatch]amigo.Handler{
		1: func(c *amigo.Context, m *amigo.Message) { got++ },
		2: func(c *amigo.Context, m *amigo.Message) {}, // probes
		3: func(c *amigo.Context, m *amigo.Message) { ready++ },
	}})
	if err != nil {
		return err
	}
	c := cl.Context(0)
	n, me := cl.Size(), cl.Rank()
	// Every hello delivered before anyone dies: each waits for its own
	// to be received, and for everyone's.
	k := amigo.NewCounter()
	for p := 0; p < n; p++ {
		if p != me {
			k.Add(1)
			if err := c.SendWith(&amigo.SendParams{Dest: amigo.EndpointOf(p), Dispatch: 1, Data: []byte("hello"), RemoteDone: k.Done()}); err != nil {
				return err
			}
		}
	}
	if err := c.WaitCounter(ctx, k); err != nil {
		return fmt.Errorf("rank %d: hellos: %w", me, err)
	}
	if err := c.Wait(ctx, func() bool { return got == n-1 }); err != nil {
		return fmt.Errorf("rank %d: got %d hellos: %w %+v", me, got, err, c.Stats())
	}
	// The victim dies once every other rank has what it expects of it.
	if me != hygieneVictim {
		if err := c.SendImmediate(amigo.EndpointOf(hygieneVictim), 3, nil, nil); err != nil {
			return err
		}
	} else if err := c.Wait(ctx, func() bool { return ready == n-1 }); err != nil {
		return err
	}
	if me == hygieneVictim {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	// Until a send to the victim fails: its death reached this rank.
	var failed error
	pending := false
	for failed == nil {
		if !pending {
			pending = true
			if err := c.SendWith(&amigo.SendParams{Dest: amigo.EndpointOf(hygieneVictim), Dispatch: 2, Data: []byte("are you there"),
				RemoteDone: func(err error) { failed, pending = err, false }}); err != nil {
				failed = err
				break
			}
		}
		if err := c.Wait(ctx, func() bool { return !pending }); err != nil {
			return fmt.Errorf("rank %d: no failure of rank %d seen: %w %+v", me, hygieneVictim, err, c.Stats())
		}
	}
	var pe *amigo.PeerError
	if !errors.As(failed, &pe) || int(pe.Addr.Rank) != hygieneVictim {
		return fmt.Errorf("rank %d: send to the killed rank: %v", me, failed)
	}
	if err := cl.Close(); err != nil {
		return err
	}
	if l := awaitReleased(base, 10*time.Second); l != "" {
		fmt.Printf("rank %d: leaks: %s\n", me, l)
		return nil
	}
	fmt.Printf("rank %d: clean\n", me)
	return nil
}

// A rank killed with SIGKILL leaves nothing behind: its peers, once its
// death reached them, close and hold no descriptor or goroutine more than
// before they opened, and nothing appears in /dev/shm.
func TestKilledPeerReleased(t *testing.T) {
	const ranks = 4
	for _, over := range []string{"shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			shm := devShm(t)
			out := launch.NewCapture(ranks)
			job, err := launch.Start(launch.Options{
				N:         ranks,
				Argv:      []string{os.Args[0]},
				Env:       []string{rankEnv + "=hygiene-kill", "AMIGO_TRANSPORT=" + over, "AMIGO_TCP_TIMEOUT=5s", "GORACE=atexit_sleep_ms=0"},
				KeepGoing: true,
				Output:    out.Output,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = job.Wait(ctx)
			all := out.All()
			var ee *launch.ExitErrors
			if !errors.As(err, &ee) || len(ee.Ranks) != 1 || ee.Ranks[0] != hygieneVictim {
				t.Fatalf("want only rank %d to fail (killed), got %v\n%s", hygieneVictim, err, all)
			}
			clean := regexp.MustCompile(`(?m)^rank (\d+): clean$`).FindAllStringSubmatch(all, -1)
			if len(clean) != ranks-1 {
				t.Fatalf("want %d survivors clean after Close:\n%s", ranks-1, all)
			}
			if extra := newIn(shm, devShm(t)); len(extra) > 0 {
				t.Fatalf("left in /dev/shm: %v", extra)
			}
		})
	}
}
