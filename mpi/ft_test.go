package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/internal/procfs"
	"github.com/amigo-hpc/amigo/mpi"
)

// Fault tolerance with ranks as real processes: rank 2 of 4 kills itself
// (SIGKILL) in the middle of an operation, the survivors must each get
// ErrProcFailed naming it within a bound (ftBoundEnv), shrink the world to
// the 3 survivors and compute on it; and agreements must give every
// survivor the same value while a rank dies part way through one.

const (
	ftBoundEnv = "AMIGO_MPI_TEST_FT_BOUND"
	victim     = 2
)

// ftProgram returns the rank program "ft:<phase>", or nil.
func ftProgram(name string) func(ctx context.Context, w *mpi.Comm) error {
	phase, ok := strings.CutPrefix(name, "ft:")
	if !ok {
		return nil
	}
	if phase == "closed" {
		return ftClosed
	}
	if kind, ok := strings.CutPrefix(phase, "agree:"); ok {
		return func(ctx context.Context, w *mpi.Comm) error { return ftAgree(ctx, w, kind) }
	}
	run := map[string]func(ctx context.Context, w *mpi.Comm) (time.Time, error){
		"allreduce": ftAllreduce, "bcast": ftBcast, "p2p": ftP2P, "get": ftGet, "stopped": ftStopped,
		"shm-barrier": ftSharedBarrier, "shm-allreduce": ftSharedAllreduce,
	}[phase]
	if run == nil {
		return nil
	}
	return func(ctx context.Context, w *mpi.Comm) error {
		last, err := run(ctx, w)
		if err := expectFailed(err, last, victim); err != nil {
			return err
		}
		if phase == "stopped" && !errors.Is(err, amigo.ErrLost) {
			return fmt.Errorf("%v: want amigo.ErrLost in it", err)
		}
		return shrinkAndCompute(ctx, w, []int{0, 1, 3})
	}
}

// die ends this process as a crash does.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// expectFailed checks that err reports the failure of world rank dead, no
// later than the bound after last (when this rank last saw it alive).
func expectFailed(err error, last time.Time, dead int) error {
	took := time.Since(last)
	var pf *mpi.ProcFailedError
	if !errors.Is(err, mpi.ErrProcFailed) || !errors.As(err, &pf) {
		return fmt.Errorf("got %v, want ErrProcFailed", err)
	}
	if pf.WorldRank != dead || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", dead)) {
		return fmt.Errorf("got %v (world rank %d), want a failure of rank %d", err, pf.WorldRank, dead)
	}
	var pe *amigo.PeerError
	if !errors.As(err, &pe) {
		return fmt.Errorf("%v: no *amigo.PeerError in it", err)
	}
	bound, _ := time.ParseDuration(os.Getenv(ftBoundEnv))
	if took > bound {
		return fmt.Errorf("failure of rank %d reported after %v, want within %v", dead, took, bound)
	}
	return nil
}

// shrinkAndCompute shrinks w and checks the survivors' communicator: its
// members (world ranks want, in order) and an Allreduce on it.
func shrinkAndCompute(ctx context.Context, w *mpi.Comm, want []int) error {
	s, err := w.Shrink(ctx)
	if err != nil {
		return err
	}
	var got []int
	for r := 0; r < s.Size(); r++ {
		got = append(got, s.WorldRank(r))
	}
	if !slices.Equal(got, want) || s.WorldRank(s.Rank()) != w.Rank() {
		return fmt.Errorf("Shrink: world ranks %v, this one %d; want %v", got, s.WorldRank(s.Rank()), want)
	}
	sum := 0
	for _, r := range want {
		sum += 1 << r
	}
	for i := 0; i < 20; i++ {
		out := []int64{0, 0}
		if err := mpi.Allreduce(ctx, s, []int64{1 << w.Rank(), int64(i)}, out, mpi.Sum); err != nil {
			return fmt.Errorf("Allreduce on the shrunk communicator: %w", err)
		}
		if out[0] != int64(sum) || out[1] != int64(i*len(want)) {
			return fmt.Errorf("Allreduce on the shrunk communicator: %v, want [%d %d]", out, sum, i*len(want))
		}
	}
	return s.Free()
}

// ftAllreduce: Allreduce after Allreduce; rank 2 starts one (its first
// messages leave) and dies.
func ftAllreduce(ctx context.Context, w *mpi.Comm) (time.Time, error) {
	in, out := make([]float64, 64), make([]float64, 64)
	for i := 0; ; i++ {
		for k := range in {
			in[k] = float64(w.Rank() + k + i)
		}
		if w.Rank() == victim && i == 300 {
			q, err := mpi.Iallreduce(w, in, out, mpi.Sum)
			if err != nil {
				return time.Time{}, err
			}
			_, _, _ = q.Test()
			die()
		}
		last := time.Now()
		if err := mpi.Allreduce(ctx, w, in, out, mpi.Sum); err != nil {
			return last, err
		}
		for k := range out {
			if want := float64(6 + 4*(k+i)); out[k] != want {
				return last, fmt.Errorf("Allreduce %d: element %d is %v, want %v", i, k, out[k], want)
			}
		}
	}
}

// ftStopped: Allreduce after Allreduce; rank 2 stops itself (SIGSTOP)
// instead of contributing to one. Its peers cannot tell over TCP before
// the timeout; the launcher, told by the test, reports it lost.
func ftStopped(ctx context.Context, w *mpi.Comm) (time.Time, error) {
	in, out := []int64{int64(w.Rank())}, []int64{0}
	for i := 0; ; i++ {
		if w.Rank() == victim && i == 300 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			select {} // killed by the test
		}
		last := time.Now()
		if err := mpi.Allreduce(ctx, w, in, out, mpi.Sum); err != nil {
			return last, err
		}
		if out[0] != 6 {
			return last, fmt.Errorf("Allreduce %d: %d, want 6", i, out[0])
		}
	}
}

// ftBcast: Bcast after Bcast from rank 0; rank 2 starts one and dies.
func ftBcast(ctx context.Context, w *mpi.Comm) (time.Time, error) {
	buf := make([]int32, 100)
	for i := 0; ; i++ {
		if w.Rank() == 0 {
			for k := range buf {
				buf[k] = int32(i + k)
			}
		}
		if w.Rank() == victim && i == 300 {
			q, err := mpi.Ibcast(w, buf, 0)
			if err != nil {
				return time.Time{}, err
			}
			_, _, _ = q.Test()
			die()
		}
		last := time.Now()
		if err := mpi.Bcast(ctx, w, buf, 0); err != nil {
			return last, err
		}
		if buf[99] != int32(i+99) {
			return last, fmt.Errorf("Bcast %d: %d, want %d", i, buf[99], i+99)
		}
	}
}

// ftP2P: rank 2 serves requests from the others and dies between a
// request and its reply.
func ftP2P(ctx context.Context, w *mpi.Comm) (time.Time, error) {
	// Rank 2 dies only once every rank is past World (not fault tolerant).
	if err := w.Barrier(ctx); err != nil {
		return time.Time{}, err
	}
	buf := make([]byte, 512)
	if w.Rank() == victim {
		for i := 0; ; i++ {
			st, err := w.Recv(ctx, buf, mpi.AnySource, 1)
			if err != nil {
				return time.Time{}, err
			}
			if i == 600 {
				die()
			}
			if err := w.Send(ctx, buf[:st.Count], st.Source, 2); err != nil {
				return time.Time{}, err
			}
		}
	}
	for i := 0; ; i++ {
		last := time.Now()
		buf[0] = byte(i)
		if err := w.Send(ctx, buf, victim, 1); err != nil {
			return last, err
		}
		st, err := w.Recv(ctx, buf, victim, 2)
		if err != nil {
			return last, err
		}
		if st.Count != len(buf) || buf[0] != byte(i) {
			return last, fmt.Errorf("reply %d: %d bytes, first %d", i, st.Count, buf[0])
		}
	}
}

// ftGet: the others read rank 2's window with Get after Get; rank 2 dies
// once each of them said it has read a hundred times.
func ftGet(ctx context.Context, w *mpi.Comm) (time.Time, error) {
	win, err := mpi.WinAllocate(ctx, w, 1<<16, 1)
	if err != nil {
		return time.Time{}, err
	}
	mem := win.Memory()
	for k := range mem {
		mem[k] = byte(k*7 + w.Rank())
	}
	if err := w.Barrier(ctx); err != nil {
		return time.Time{}, err
	}
	if w.Rank() == victim {
		for i := 0; i < 3; i++ {
			if _, err := w.Recv(ctx, nil, mpi.AnySource, 5); err != nil {
				return time.Time{}, err
			}
		}
		die()
	}
	if err := win.Lock(ctx, mpi.LockShared, victim); err != nil {
		return time.Time{}, err
	}
	buf := make([]byte, 1<<14)
	for i := 0; ; i++ {
		last := time.Now()
		off := (i * 4096) % (len(mem) - len(buf))
		if err := win.Get(buf, victim, off); err != nil {
			return last, err
		}
		if err := win.FlushLocal(ctx, victim); err != nil {
			return last, err
		}
		for k := range buf {
			if want := byte((off+k)*7 + victim); buf[k] != want {
				return last, fmt.Errorf("Get %d: byte %d is %d, want %d", i, off+k, buf[k], want)
			}
		}
		if i == 100 {
			if err := w.Send(ctx, nil, victim, 5); err != nil {
				return last, err
			}
		}
	}
}

// ftAgree: rank 2 dies first; the others find out in a Barrier. Then rank
// 1 dies in an agreement, after it sent a message of kind to rank 0 and
// before it sent it to rank 3; ranks 0 and 3 must agree all the same, on
// a value with or without rank 1's flag; and agree again.
func ftAgree(ctx context.Context, w *mpi.Comm, kind string) error {
	// Rank 2 dies once every rank is past World.
	if w.Rank() == victim {
		for i := 0; i < 3; i++ {
			if _, err := w.Recv(ctx, nil, mpi.AnySource, 9); err != nil {
				return err
			}
		}
		die()
	}
	if err := w.Send(ctx, nil, victim, 9); err != nil {
		return err
	}
	last := time.Now()
	err := w.Barrier(ctx)
	var pf *mpi.ProcFailedError
	if errors.As(err, &pf) && pf.WorldRank == 1 {
		// Rank 1 got through, and died in Agree before this rank's
		// Barrier failed: it names the lowest failed rank.
		err = expectFailed(err, last, 1)
	} else {
		err = expectFailed(err, last, victim)
	}
	if err != nil {
		return fmt.Errorf("Barrier: %w", err)
	}
	flags := map[int]int{0: 0b111, 1: 0b011, 3: 0b110}
	if w.Rank() == 1 {
		round := 1
		if kind == "decided" {
			round = 0
		}
		mpi.DieInAgree(kind, round, 3, die)
	}
	// Rank 2's failure, known to every survivor and acknowledged by
	// none, raises MPI_ERR_PROC_FAILED with the agreed value (rank 1's
	// too where a survivor knew of it before the call).
	v, err := w.Agree(ctx, flags[w.Rank()])
	if pf := (*mpi.ProcFailedError)(nil); !errors.As(err, &pf) || !errors.Is(err, mpi.ErrProcFailed) || (pf.WorldRank != victim && pf.WorldRank != 1) {
		return fmt.Errorf("Agree with rank %d failed and not acknowledged: %v, want a ProcFailedError naming it", victim, err)
	}
	if v != 0b010 && v != 0b110 {
		return fmt.Errorf("Agree: %#b, want 0b10 or 0b110", v)
	}
	s, err := w.Shrink(ctx)
	if err != nil {
		return err
	}
	if s.Size() != 2 {
		return fmt.Errorf("Shrink: %d ranks, want 2", s.Size())
	}
	all := make([]int64, 2)
	if err := mpi.Allgather(ctx, s, []int64{int64(v)}, all); err != nil {
		return err
	}
	if all[0] != all[1] {
		return fmt.Errorf("Agree gave %#b and %#b", all[0], all[1])
	}
	// And again, on the communicator with the failures, whose failures
	// every survivor knows (Shrink agreed on them) but none acknowledged:
	// they all name rank 1.
	v, err = w.Agree(ctx, 0b1011|w.Rank())
	if pf := (*mpi.ProcFailedError)(nil); !errors.As(err, &pf) || pf.WorldRank != 1 || v != 0b1011 {
		return fmt.Errorf("Agree with ranks 1 and 2 failed and not acknowledged: %#b %v, want 0b1011 and a ProcFailedError naming rank 1", v, err)
	}
	// Acknowledged everywhere, the failures raise nothing: on the
	// communicator with the failures and on the new one.
	if err := w.FailureAck(); err != nil {
		return err
	}
	for _, c := range []*mpi.Comm{w, s} {
		v, err := c.Agree(ctx, 0b1011|w.Rank())
		if err != nil {
			return err
		}
		if v != 0b1011 {
			return fmt.Errorf("second Agree: %#b, want 0b1011", v)
		}
	}
	return s.Free()
}

// runFT runs program name on 4 ranks as processes that may die: it fails
// t unless exactly the ranks dead failed.
func runFT(t *testing.T, transport, name string, bound time.Duration, dead []int) {
	t.Helper()
	out := launch.NewCapture(4)
	env := []string{rankEnv + "=" + name, "AMIGO_TRANSPORT=" + transport, "GORACE=atexit_sleep_ms=0",
		"AMIGO_SPIN=50", "AMIGO_YIELD=50", ftBoundEnv + "=" + bound.String(), "AMIGO_MPI_TEST_TIMEOUT=60s"}
	if transport == "tcp" {
		env = append(env, "AMIGO_TCP_TIMEOUT=2s")
	}
	job, err := launch.Start(launch.Options{N: 4, Argv: []string{os.Args[0]}, Env: env, Output: out.Output, KeepGoing: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = job.Wait(ctx)
	var ee *launch.ExitErrors
	if !errors.As(err, &ee) || !slices.Equal(slices.Sorted(slices.Values(ee.Ranks)), dead) {
		t.Fatalf("%s over %s: %v, want ranks %v killed\n%s", name, transport, err, dead, out.All())
	}
	for _, r := range dead {
		if !strings.Contains(ee.Errs[slices.Index(ee.Ranks, r)].Error(), "killed") {
			t.Fatalf("rank %d: %v, want killed\n%s", r, ee.Errs, out.All())
		}
	}
}

// ftClosed: rank 1 closes its client cleanly, and stays (until SIGTERM);
// a receive from it fails at once, naming it, and the others shrink.
func ftClosed(ctx context.Context, w *mpi.Comm) error {
	if w.Rank() == 1 {
		for i := 0; i < 2; i++ {
			if _, err := w.Recv(ctx, nil, mpi.AnySource, 9); err != nil {
				return err
			}
		}
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		if err := w.Context().Client().Close(); err != nil {
			return err
		}
		<-term
		os.Exit(0)
	}
	if err := w.Send(ctx, nil, 1, 9); err != nil {
		return err
	}
	long, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := w.Recv(long, make([]byte, 8), 1, 3)
	if err := expectFailedWithin(err, start, 1, 500*time.Millisecond); err != nil {
		return fmt.Errorf("Recv from the rank that closed: %w", err)
	}
	if !errors.Is(err, amigo.ErrClosed) {
		return fmt.Errorf("Recv from the rank that closed: %v, want amigo.ErrClosed in it", err)
	}
	return shrinkAndCompute(ctx, w, []int{0, 2})
}

// A peer that closed cleanly counts as failed too: over shared memory and
// TCP, rank 1 of 3 closes its client and stays; a receive from it fails at
// once, naming it, instead of waiting for its deadline.
func TestClosedPeer(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			out := launch.NewCapture(3)
			job, err := launch.Start(launch.Options{N: 3, Argv: []string{os.Args[0]}, Output: out.Output, KeepGoing: true,
				Env: []string{rankEnv + "=ft:closed", "AMIGO_TRANSPORT=" + tr, "AMIGO_TCP_TIMEOUT=60s", "GORACE=atexit_sleep_ms=0",
					"AMIGO_SPIN=50", "AMIGO_YIELD=50", "AMIGO_MPI_TEST_TIMEOUT=60s"}})
			if err != nil {
				t.Fatal(err)
			}
			waitExited(t, job, []int{0, 2}, out)
			_ = syscall.Kill(job.Pid(1), syscall.SIGTERM)
			if err := job.Wait(context.Background()); err != nil {
				t.Fatalf("%v\n%s", err, out.All())
			}
		})
	}
}

// waitExited waits until the ranks have exited (or are zombies), for a
// minute at most.
func waitExited(t *testing.T, job *launch.Job, ranks []int, out *launch.Capture) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		exited := 0
		for _, r := range ranks {
			if st, err := procfs.State(job.Pid(r)); err != nil || st == 'Z' {
				exited++
			}
		}
		if exited == len(ranks) {
			return
		}
		if time.Now().After(deadline) {
			job.Kill()
			t.Fatalf("ranks %v did not finish\n%s", ranks, out.All())
		}
	}
}

// A 4-rank job loses rank 2 in the middle of an Allreduce, a Bcast,
// point-to-point traffic and a Get; the survivors get ErrProcFailed naming
// it within 1 s over shared memory and within the TCP timeout (2 s here)
// over TCP, shrink to 3 ranks, and compute on them.
func TestProcFailure(t *testing.T) {
	for _, tr := range []struct {
		name  string
		bound time.Duration
	}{{"shm", time.Second}, {"tcp", 3 * time.Second}} {
		for _, phase := range []string{"allreduce", "bcast", "p2p", "get"} {
			t.Run(tr.name+"/"+phase, func(t *testing.T) {
				runFT(t, tr.name, "ft:"+phase, tr.bound, []int{victim})
			})
		}
	}
}

// A rank stopped (SIGSTOP) in the middle of an Allreduce, with a TCP
// timeout of a minute: the launcher gives up on it and reports it lost,
// and the survivors fail with ErrProcFailed (and amigo.ErrLost) naming it
// long before their adapter would have, shrink and compute.
func TestLauncherReportsLost(t *testing.T) {
	out := launch.NewCapture(4)
	job, err := launch.Start(launch.Options{N: 4, Argv: []string{os.Args[0]}, Output: out.Output, KeepGoing: true,
		Env: []string{rankEnv + "=ft:stopped", "AMIGO_TRANSPORT=tcp", "AMIGO_TCP_TIMEOUT=60s", "GORACE=atexit_sleep_ms=0",
			"AMIGO_SPIN=50", "AMIGO_YIELD=50", ftBoundEnv + "=10s", "AMIGO_MPI_TEST_TIMEOUT=60s"}})
	if err != nil {
		t.Fatal(err)
	}
	// Once rank 2 has stopped, the launcher gives up on it.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		st, err := procfs.State(job.Pid(victim))
		if err == nil && st == 'T' {
			break
		}
		if time.Now().After(deadline) {
			job.Kill()
			t.Fatalf("rank 2 did not stop: %v\n%s", err, out.All())
		}
	}
	job.Lose(victim)
	done := make(chan error, 1)
	go func() { done <- job.Wait(context.Background()) }()
	// The survivors finish; then rank 2 goes.
	waitExited(t, job, []int{0, 1, 3}, out)
	_ = syscall.Kill(job.Pid(victim), syscall.SIGKILL)
	err = <-done
	var ee *launch.ExitErrors
	if !errors.As(err, &ee) || !slices.Equal(ee.Ranks, []int{victim}) {
		t.Fatalf("%v, want rank 2 killed only\n%s", err, out.All())
	}
}

// Agree gives every survivor the same value when a rank dies part way
// through it: after sending its proposal, or its decision, to some ranks
// only.
func TestAgreeSecondFailure(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		for _, kind := range []string{"propose", "decided"} {
			t.Run(tr+"/"+kind, func(t *testing.T) {
				runFT(t, tr, "ft:agree:"+kind, 3*time.Second, []int{1, victim})
			})
		}
	}
}

// Over the loop adapter (ranks are goroutines), rank 1 closes its client
// cleanly: a receive from it fails at once naming it, a collective fails
// on every survivor, and the survivors shrink, agree, revoke and
// acknowledge. A wait that ends on its context names its operation.
func TestClosedPeerLoop(t *testing.T) {
	run(t, 3, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 1 {
			for i := 0; i < 2; i++ {
				if _, err := w.Recv(ctx, nil, mpi.AnySource, 9); err != nil {
					return err
				}
			}
			return w.Context().Client().Close()
		}
		// A synchronous send that rank 1 will never match.
		sq, err := w.Issend([]byte{1}, 1, 11)
		if err != nil {
			return err
		}
		if err := w.Send(ctx, nil, 1, 9); err != nil {
			return err
		}
		// A wait that ends on its context says for what.
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = w.Recv(short, nil, 2-w.Rank(), 3)
		cancel()
		want := fmt.Sprintf("mpi: Recv from rank %d tag 3: context deadline exceeded", 2-w.Rank())
		if !errors.Is(err, context.DeadlineExceeded) || err.Error() != want {
			return fmt.Errorf("Recv with a short deadline: %v, want %q", err, want)
		}
		// A receive from the closed rank fails at once, naming it.
		long, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err = w.Recv(long, make([]byte, 8), 1, 4)
		if err := expectFailedWithin(err, start, 1, 500*time.Millisecond); err != nil {
			return fmt.Errorf("Recv from the closed rank: %w", err)
		}
		if !errors.Is(err, amigo.ErrClosed) {
			return fmt.Errorf("Recv from the closed rank: %v, want amigo.ErrClosed in it", err)
		}
		if _, err := w.Probe(long, 1, 4); expectFailedWithin(err, start, 1, time.Second) != nil {
			return fmt.Errorf("Probe for the closed rank: %v", err)
		}
		if _, err := sq.Wait(long); expectFailedWithin(err, start, 1, time.Second) != nil {
			return fmt.Errorf("synchronous send the closed rank never matched: %v", err)
		}
		if err := w.Ssend(long, nil, 1, 12); expectFailedWithin(err, start, 1, time.Second) != nil {
			return fmt.Errorf("synchronous send to the closed rank: %v", err)
		}
		// Every survivor's collective fails, and so do later ones.
		for i := 0; i < 2; i++ {
			err := mpi.Allreduce(ctx, w, []int32{1}, make([]int32, 1), mpi.Sum)
			if err := expectFailedWithin(err, start, 1, time.Second); err != nil {
				return fmt.Errorf("Allreduce %d: %w", i, err)
			}
		}
		// AnySource fails until the failure is acknowledged.
		if _, err := w.Recv(long, nil, mpi.AnySource, 8); !errors.Is(err, mpi.ErrProcFailed) {
			return fmt.Errorf("AnySource receive before FailureAck: %v, want ErrProcFailed", err)
		}
		if err := w.FailureAck(); err != nil {
			return err
		}
		g, err := w.FailureGetAcked()
		if err != nil || g.Size() != 1 || g.WorldRank(0) != 1 {
			return fmt.Errorf("FailureGetAcked: %v, %v; want rank 1", g, err)
		}
		if w.Rank() == 2 {
			if err := w.Send(ctx, []byte{7}, 0, 5); err != nil {
				return err
			}
		} else {
			buf := make([]byte, 1)
			st, err := w.Recv(long, buf, mpi.AnySource, 5)
			if err != nil || st.Source != 2 || buf[0] != 7 {
				return fmt.Errorf("AnySource receive after FailureAck: %+v %v %v", st, buf, err)
			}
		}
		if !slices.Equal(w.Failed(), []int{1}) {
			return fmt.Errorf("Failed: %v, want [1]", w.Failed())
		}
		s, err := w.Shrink(ctx)
		if err != nil {
			return err
		}
		defer s.Free()
		if s.Size() != 2 || s.WorldRank(1) != 2 {
			return fmt.Errorf("Shrink: %d ranks", s.Size())
		}
		out := make([]int32, 1)
		if err := mpi.Allreduce(ctx, s, []int32{int32(w.Rank())}, out, mpi.Sum); err != nil || out[0] != 2 {
			return fmt.Errorf("Allreduce on the shrunk communicator: %v %v", out, err)
		}
		if v, err := s.Agree(ctx, 0b110|w.Rank()); err != nil || v != 0b110 {
			return fmt.Errorf("Agree: %#b %v", v, err)
		}
		// Revoke: rank 1 of s revokes it while rank 0 waits in a receive.
		if s.Rank() == 0 {
			q, err := s.Irecv(nil, 1, 6)
			if err != nil {
				return err
			}
			if _, err := q.Wait(long); !errors.Is(err, mpi.ErrRevoked) {
				return fmt.Errorf("receive on a revoked communicator: %v, want ErrRevoked", err)
			}
		} else if err := s.Revoke(); err != nil {
			return err
		}
		if err := s.Send(ctx, nil, 1-s.Rank(), 6); !errors.Is(err, mpi.ErrRevoked) || !s.Revoked() {
			return fmt.Errorf("Send on a revoked communicator: %v, want ErrRevoked", err)
		}
		// Agree still works on it, and the failed world still finalizes.
		if v, err := s.Agree(ctx, 1); err != nil || v != 1 {
			return fmt.Errorf("Agree on a revoked communicator: %d %v", v, err)
		}
		return nil
	})
}

// expectFailedWithin is expectFailed with its bound given.
func expectFailedWithin(err error, last time.Time, dead int, bound time.Duration) error {
	took := time.Since(last)
	var pf *mpi.ProcFailedError
	if !errors.As(err, &pf) || pf.WorldRank != dead {
		return fmt.Errorf("got %v, want ErrProcFailed naming rank %d", err, dead)
	}
	if took > bound {
		return fmt.Errorf("failure of rank %d reported after %v, want within %v", dead, took, bound)
	}
	return nil
}
