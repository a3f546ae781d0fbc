package shm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/internal/procfs"
	"github.com/amigo-hpc/amigo/transport/shm"
)

// The tests below run ranks as real processes: the test binary re-runs
// itself (the os/exec pattern), with rankEnv naming what the rank does, and
// internal/launch serving them PMI as a launcher would.

const rankEnv = "AMIGO_SHM_TEST_RANK"

func TestMain(m *testing.M) {
	if mode := os.Getenv(rankEnv); mode != "" {
		os.Exit(rankMain(mode))
	}
	os.Exit(m.Run())
}

// runJob runs n ranks of mode and returns each rank's output.
func runJob(t *testing.T, n int, mode string, keepGoing bool, timeout time.Duration) ([]string, []int, error, time.Duration) {
	t.Helper()
	outs := launch.NewCapture(n)
	job, err := launch.Start(launch.Options{
		N:         n,
		Argv:      []string{os.Args[0]},
		Env:       []string{rankEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"},
		KeepGoing: keepGoing,
		Output:    outs.Output,
	})
	if err != nil {
		t.Fatal(err)
	}
	pids := make([]int, n)
	for r := range pids {
		pids[r] = job.Pid(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err = job.Wait(ctx)
	elapsed := time.Since(start)
	res := make([]string, n)
	for r := range res {
		res[r] = outs.Rank(r)
	}
	return res, pids, err, elapsed
}

// leftovers lists what the ranks of job left behind: files in /dev/shm
// named for one of them (amigo-PID-...), and memfd segments of theirs (named after their
// pids) that any process still holds open. Other tests may run amigo jobs
// at the same time; only this job's segments count.
func leftovers(t *testing.T, pids []int) []string {
	t.Helper()
	var out []string
	// Only the job's own files count: a process killed earlier by another
	// test may have left its file, which names its own pid.
	ents, _ := os.ReadDir("/dev/shm")
	for _, e := range ents {
		for _, pid := range pids {
			if strings.HasPrefix(e.Name(), fmt.Sprintf("amigo-%d-", pid)) {
				out = append(out, "/dev/shm/"+e.Name())
			}
		}
	}
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		l, err := os.Readlink(fd)
		if err != nil || !strings.Contains(l, "memfd:amigo-shm") {
			continue
		}
		for _, pid := range pids {
			if strings.Contains(l, fmt.Sprintf("-p%d ", pid)) || strings.Contains(l, fmt.Sprintf("-p%d-", pid)) {
				out = append(out, fd+" -> "+l)
			}
		}
	}
	return out
}

// Sixteen ranks, as processes, on however few cores: an all-to-all of 1 KiB
// messages completes in seconds (ranks that wait sleep on their futex
// instead of spinning the cores away from the ranks they wait for), and no
// segment is left once they exit.
func TestProcessesAllToAll(t *testing.T) {
	const n, rounds = 16, 50
	outs, pids, err, elapsed := runJob(t, n, "a2a:"+strconv.Itoa(rounds), false, 3*time.Minute)
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(outs, ""))
	}
	for r, o := range outs {
		if !strings.Contains(o, fmt.Sprintf("rank %d: all-to-all done", r)) {
			t.Fatalf("rank %d did not finish:\n%s", r, o)
		}
	}
	t.Logf("%d ranks, %d rounds of all-to-all of 1 KiB messages: %v including start-up", n, rounds, elapsed.Round(time.Millisecond))
	if left := leftovers(t, pids); len(left) > 0 {
		t.Fatalf("segments left after the job: %v", left)
	}
}

var failLine = regexp.MustCompile(`(?m)^rank (\d+): (\w+) with rank 3 failed: (.*)$`)

// A rank killed in the middle of transfers with its peers: their
// operations complete with an error that names it, without hanging; the
// surviving ranks go on exchanging among themselves; nothing is left in
// /dev/shm or held open. Once with the automatic choice of ways (cross-memory
// attach with the owner's help, here), once with the pipelined copy, which
// needs the dead rank's engine; and once with windows of mid-size
// transfers, which go in batches split with the owner (coop.go).
func TestProcessKilled(t *testing.T) {
	for _, way := range []string{"auto", "copy", "mid"} {
		t.Run(way, func(t *testing.T) { testProcessKilled(t, way) })
	}
}

func testProcessKilled(t *testing.T, way string) {
	outs, pids, err, elapsed := runJob(t, 4, "crash:"+way, true, 2*time.Minute)
	all := strings.Join(outs, "")
	var ee *launch.ExitErrors
	if !errors.As(err, &ee) || len(ee.Ranks) != 1 || ee.Ranks[0] != 3 || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("want only rank 3 killed, got %v\n%s", err, all)
	}
	seen := map[string]bool{}
	for _, m := range failLine.FindAllStringSubmatch(all, -1) {
		seen[m[1]+" "+m[2]] = true
		if !strings.Contains(m[3], "rank 3") {
			t.Errorf("error does not name rank 3: %s", m[0])
		}
	}
	for _, want := range []string{"0 send", "1 get", "2 put"} {
		if !seen[want] {
			t.Errorf("no failure reported for %q\n%s", want, all)
		}
	}
	for r := 0; r < 3; r++ {
		if !strings.Contains(outs[r], fmt.Sprintf("rank %d: survivors exchanged", r)) {
			t.Errorf("rank %d did not go on after rank 3 died:\n%s", r, outs[r])
		}
	}
	t.Logf("job with a killed rank over in %v:\n%s", elapsed.Round(time.Millisecond), all)
	if left := leftovers(t, pids); len(left) > 0 {
		t.Fatalf("segments left after the job: %v", left)
	}
}

// rankMain is the program of one rank.
func rankMain(mode string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	cfg := amigo.Config{Transport: "shm"}
	mid := false
	if way, ok := strings.CutPrefix(mode, "crash:"); ok {
		if way == "mid" {
			way, mid = "auto", true
		}
		cfg.Shm.RDMA = way
		mode = "crash"
	}
	if mode == "closefirst" {
		// Every rank but the last maps the last rank's segment only once
		// that rank's process has exited.
		last := launchSize() - 1
		shm.SetAttachHook(func(rank, pid int) {
			if rank == last {
				waitExited(pid, 30*time.Second)
			}
		})
	}
	c, err := amigo.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	r := &rankProg{c: c, ctx: ctx, x: c.Context(0), mid: mid}
	r.bar.counts = map[uint32]int{}
	r.x.SetDispatch(barrierID, func(_ *amigo.Context, m *amigo.Message) {
		if len(m.Header) == 4 {
			r.bar.counts[binary.LittleEndian.Uint32(m.Header)]++
		}
	})
	switch {
	case strings.HasPrefix(mode, "a2a:"):
		rounds, _ := strconv.Atoi(strings.TrimPrefix(mode, "a2a:"))
		err = r.allToAll(rounds, 1024)
		if err == nil {
			err = r.barrier(nil)
		}
		if err == nil {
			fmt.Printf("rank %d: all-to-all done\n", c.Rank())
		}
	case mode == "crash":
		err = r.crash()
	case mode == "closefirst":
		err = r.closeFirst()
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", c.Rank(), err)
		return 1
	}
	return 0
}

const (
	barrierID amigo.Dispatch = 100
	dataID    amigo.Dispatch = 101
	keyID     amigo.Dispatch = 102
)

type rankProg struct {
	c   *amigo.Client
	ctx context.Context
	x   *amigo.Context
	mid bool // crash: windows of mid-size transfers, not one large one
	bar struct {
		epoch  uint32
		counts map[uint32]int
	}
}

// barrier waits until every rank in ranks (all if nil) called it as often.
func (r *rankProg) barrier(ranks []int) error {
	if ranks == nil {
		for p := 0; p < r.c.Size(); p++ {
			ranks = append(ranks, p)
		}
	}
	r.bar.epoch++
	ep := r.bar.epoch
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], ep)
	k := amigo.NewCounter()
	for _, p := range ranks {
		if p != r.c.Rank() {
			k.Add(1)
			if err := r.x.Send(amigo.EndpointOf(p), barrierID, hdr[:], nil, k.Done()); err != nil {
				return err
			}
		}
	}
	err := r.x.Wait(r.ctx, func() bool { return r.bar.counts[ep] >= len(ranks)-1 && k.Pending() == 0 })
	if err == nil {
		err = k.Err()
	}
	return err
}

func (r *rankProg) allToAll(rounds, size int) error {
	n, me := r.c.Size(), r.c.Rank()
	got := 0
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = make([]byte, size)
	}
	r.x.SetDispatch(dataID, func(_ *amigo.Context, m *amigo.Message) {
		if m.Inline() && len(m.Data) == size && m.Data[0] == byte(m.Source.Rank) {
			copy(bufs[m.Source.Rank], m.Data)
			got++
		}
	})
	if err := r.barrier(nil); err != nil {
		return err
	}
	data := bytes.Repeat([]byte{byte(me)}, size)
	k := amigo.NewCounter()
	for i := 0; i < rounds; i++ {
		for j := 1; j < n; j++ {
			k.Add(1)
			if err := r.x.Send(amigo.EndpointOf((me+j)%n), dataID, nil, data, k.Done()); err != nil {
				return err
			}
		}
		want := (i + 1) * (n - 1)
		if err := r.x.Wait(r.ctx, func() bool { return got >= want && k.Pending() == 0 }); err != nil {
			return fmt.Errorf("round %d: got %d of %d: %w", i, got, want, err)
		}
		if err := k.Err(); err != nil {
			return err
		}
	}
	return nil
}

// crash: rank 3 dies by SIGKILL once transfers with every other rank are
// in flight: rank 0 sends it large messages, rank 1 gets from its memory,
// rank 2 puts into it. Their operations must fail naming rank 3; then the
// three survivors exchange among themselves.
func (r *rankProg) crash() error {
	me := r.c.Rank()
	const big = 64 << 20
	var key amigo.Key
	haveKey := false
	r.x.SetDispatch(keyID, func(_ *amigo.Context, m *amigo.Message) {
		if len(m.Data) == 8 {
			key = amigo.Key(binary.LittleEndian.Uint64(m.Data))
			haveKey = true
		}
	})
	inflight := 0
	var buf []byte
	if me == 3 {
		buf = make([]byte, big)
		r.x.SetDispatch(dataID, func(_ *amigo.Context, m *amigo.Message) {
			if !m.Inline() {
				m.Receive(buf[:m.Size()], func(error) {})
				inflight++
			}
		})
	}
	if err := r.barrier(nil); err != nil {
		return err
	}
	if me == 3 {
		reg, err := r.c.RegisterMemory(make([]byte, big))
		if err != nil {
			return err
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(reg.Key()))
		for p := 1; p <= 2; p++ {
			if err := r.x.SendImmediate(amigo.EndpointOf(p), keyID, nil, b[:]); err != nil {
				return err
			}
		}
		// Die while the transfers run: once a large message is being
		// fetched, and a little later.
		r.x.Wait(r.ctx, func() bool { return inflight > 0 })
		deadline := time.Now().Add(20 * time.Millisecond)
		r.x.Wait(r.ctx, func() bool { return time.Now().After(deadline) })
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	peer := amigo.EndpointOf(3)
	var failed error
	done := func(err error) {
		if err != nil && failed == nil {
			failed = err
		}
	}
	what := map[int]string{0: "send", 1: "get", 2: "put"}[me]
	if me != 0 {
		if err := r.x.Wait(r.ctx, func() bool { return haveKey }); err != nil {
			return err
		}
	}
	local := make([]byte, 8<<20)
	deadline := time.Now().Add(60 * time.Second)
	for failed == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("operations with rank 3 still succeed after 60s")
		}
		k := amigo.NewCounter()
		n, size := 1, len(local)
		if r.mid {
			n, size = 32, 48<<10
		}
		var err error
		for i := 0; i < n && err == nil; i++ {
			k.Add(1)
			part := local[i*size : (i+1)*size]
			switch me {
			case 0:
				if r.mid {
					err = r.x.Send(peer, dataID, nil, part, k.Done())
				} else {
					err = r.x.Send(peer, dataID, nil, make([]byte, big), k.Done())
				}
			case 1:
				err = r.x.Get(peer, part, key, uint64(i*size), k.Done())
			case 2:
				err = r.x.Put(peer, part, key, uint64(i*size), k.Done())
			}
		}
		if err != nil {
			failed = err
			break
		}
		if err := r.x.WaitCounter(r.ctx, k); err != nil {
			done(err)
		}
	}
	fmt.Printf("rank %d: %s with rank 3 failed: %v\n", me, what, failed)
	var pe *amigo.PeerError
	if !errors.As(failed, &pe) || pe.Addr.Rank != 3 || !errors.Is(failed, shm.ErrExited) {
		return fmt.Errorf("%s failed with %v, want a PeerError for rank 3 wrapping shm.ErrExited", what, failed)
	}
	// The survivors go on.
	if err := r.allToAllAmong([]int{0, 1, 2}, 20); err != nil {
		return fmt.Errorf("survivors: %w", err)
	}
	fmt.Printf("rank %d: survivors exchanged\n", me)
	return r.barrier([]int{0, 1, 2})
}

func (r *rankProg) allToAllAmong(ranks []int, rounds int) error {
	got := 0
	r.x.SetDispatch(dataID, func(_ *amigo.Context, m *amigo.Message) { got++ })
	if err := r.barrier(ranks); err != nil {
		return err
	}
	k := amigo.NewCounter()
	for i := 0; i < rounds; i++ {
		for _, p := range ranks {
			if p != r.c.Rank() {
				k.Add(1)
				if err := r.x.Send(amigo.EndpointOf(p), dataID, nil, make([]byte, 100), k.Done()); err != nil {
					return err
				}
			}
		}
		want := (i + 1) * (len(ranks) - 1)
		if err := r.x.Wait(r.ctx, func() bool { return got >= want && k.Pending() == 0 }); err != nil {
			return err
		}
	}
	return k.Err()
}

// launchSize is the number of ranks of the job this process is a rank of.
func launchSize() int {
	n, _ := strconv.Atoi(os.Getenv("PMI_SIZE"))
	return n
}

// waitExited waits, at most max, until process pid has exited (it is gone
// or a zombie: either way its descriptors are closed).
func waitExited(pid int, max time.Duration) {
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) {
		if st, err := procfs.State(pid); err != nil || st == 'Z' {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// closeFirst: the last rank opens and closes at once; the others map its
// segment only after its process exited. Their Open succeeds, a message to
// the gone rank fails with a PeerError that names it and wraps
// amigo.ErrClosed, and they go on among themselves.
func (r *rankProg) closeFirst() error {
	me, last := r.c.Rank(), r.c.Size()-1
	if me == last {
		fmt.Printf("rank %d: closing first\n", me)
		return nil
	}
	k := amigo.NewCounter()
	k.Add(1)
	failed := r.x.Send(amigo.EndpointOf(last), dataID, nil, []byte("late"), k.Done())
	if failed == nil {
		if err := r.x.WaitCounter(r.ctx, k); err != nil {
			failed = err
		}
	}
	var pe *amigo.PeerError
	if !errors.As(failed, &pe) || int(pe.Addr.Rank) != last || !errors.Is(failed, amigo.ErrClosed) {
		return fmt.Errorf("a send to rank %d, which closed first, ended with %v, want a PeerError for it wrapping ErrClosed", last, failed)
	}
	fmt.Printf("rank %d: send to rank %d failed: %v\n", me, last, failed)
	others := make([]int, last)
	for i := range others {
		others[i] = i
	}
	if err := r.allToAllAmong(others, 10); err != nil {
		return fmt.Errorf("the others: %w", err)
	}
	fmt.Printf("rank %d: the others exchanged\n", me)
	return nil
}

// A rank that opens and closes before its local peers have mapped its
// segment (Open does not wait for every rank to start) leaves them a job
// in which it has closed: their Open succeeds, and operations toward it
// fail at once with an error that names it.
func TestProcessClosedFirst(t *testing.T) {
	const n = 3
	outs, _, err, _ := runJob(t, n, "closefirst", false, time.Minute)
	all := strings.Join(outs, "")
	if err != nil {
		t.Fatalf("%v\n%s", err, all)
	}
	if !strings.Contains(outs[n-1], fmt.Sprintf("rank %d: closing first", n-1)) {
		t.Fatalf("rank %d did not close first:\n%s", n-1, all)
	}
	for r := 0; r < n-1; r++ {
		if !strings.Contains(outs[r], fmt.Sprintf("rank %d: send to rank %d failed: ", r, n-1)) ||
			!strings.Contains(outs[r], "had closed before this rank attached") ||
			!strings.Contains(outs[r], fmt.Sprintf("rank %d: the others exchanged", r)) {
			t.Fatalf("rank %d:\n%s", r, all)
		}
	}
	t.Logf("%s", all)
}
