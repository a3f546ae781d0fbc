package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// Barrier and small Allreduce through a shared-memory segment of the
// communicator, ranks as processes over shared memory: the segment is used
// (and only where every rank runs on one host), a barrier orders what the
// ranks store on either side of it, the results of every Allreduce are
// those of the reference computed in rank order, on the world, a Dup and a
// Split, with other traffic in flight; ranks that disagree get ErrCount;
// a rank that dies fails the others' wait.

// sharedProgram returns the rank program "shm:<what>".
func sharedProgram(what string) func(ctx context.Context, w *mpi.Comm) error {
	switch what {
	case "checks":
		return func(ctx context.Context, w *mpi.Comm) error { return sharedComms(ctx, w, true) }
	case "off":
		return func(ctx context.Context, w *mpi.Comm) error { return sharedComms(ctx, w, false) }
	case "hosts":
		return sharedHosts
	case "mismatch":
		return sharedMismatch
	}
	return nil
}

// sharedComms runs sharedChecks on w, a Dup of it and a Split of it in two
// (ranks of even and odd rank); shared says whether they use a segment.
func sharedComms(ctx context.Context, w *mpi.Comm, shared bool) error {
	if err := sharedChecks(ctx, w, shared); err != nil {
		return fmt.Errorf("world: %w", err)
	}
	d, err := w.Dup(ctx)
	if err != nil {
		return err
	}
	if err := sharedChecks(ctx, d, shared); err != nil {
		return fmt.Errorf("dup: %w", err)
	}
	s, err := w.Split(ctx, w.Rank()%2, -w.Rank())
	if err != nil {
		return err
	}
	if err := sharedChecks(ctx, s, shared); err != nil {
		return fmt.Errorf("split: %w", err)
	}
	if err := s.Free(); err != nil {
		return err
	}
	if err := d.Free(); err != nil {
		return err
	}
	// The world still works after its siblings went.
	return sharedAllreduce(ctx, w, 3, 8)
}

// sharedChecks checks Barrier and Allreduce on c.
func sharedChecks(ctx context.Context, c *mpi.Comm, shared bool) error {
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if want := shared && c.Size() > 1; mpi.SharedColl(c) != want {
		return fmt.Errorf("shared-memory collectives %v, want %v", mpi.SharedColl(c), want)
	}
	if err := sharedBarrierOrders(ctx, c, 300); err != nil {
		return err
	}
	// Counts on both sides of where a segment's line fills (40 and 96
	// bytes of data) and of its 256 bytes.
	for i, n := range []int{1, 2, 3, 5, 6, 7, 8, 12, 13, 31, 32, 33, 64} {
		if err := sharedAllreduce(ctx, c, i, n); err != nil {
			return fmt.Errorf("Allreduce of %d int64: %w", n, err)
		}
	}
	if err := sharedNonCommutative(ctx, c); err != nil {
		return err
	}
	if err := sharedFloats(ctx, c); err != nil {
		return err
	}
	return sharedWithTraffic(ctx, c)
}

// sharedBarrierOrders: before barrier k every rank stores k into its part
// of a shared window; after it, every rank's part holds k, or k+1 if that
// rank already left the barrier and stored its next value, never less and
// never more.
func sharedBarrierOrders(ctx context.Context, c *mpi.Comm, rounds int) error {
	win, err := mpi.WinAllocateShared(ctx, c, 8, 8)
	if err != nil {
		return err
	}
	words := make([]*atomic.Int64, c.Size())
	for j := range words {
		b, _, err := win.SharedQuery(j)
		if err != nil {
			return err
		}
		words[j] = (*atomic.Int64)(unsafe.Pointer(&b[0]))
	}
	for k := int64(1); k <= int64(rounds); k++ {
		words[c.Rank()].Store(k)
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("barrier %d: %w", k, err)
		}
		for j, w := range words {
			if v := w.Load(); v != k && v != k+1 {
				return fmt.Errorf("after barrier %d rank %d's value is %d", k, j, v)
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return win.Free(ctx)
}

// sharedAllreduce checks Sum, Bxor and Max of n int64 over 20 rounds whose
// values change every round (a result read from the other half of a block
// would be stale), in place every other round.
func sharedAllreduce(ctx context.Context, c *mpi.Comm, seed, n int) error {
	p, r := c.Size(), c.Rank()
	val := func(rank, k, round int) int64 {
		return int64(rank+1)*1_000_003 + int64(k)*7919 + int64(round*31+seed)<<20 ^ int64(rank)<<40
	}
	in, out := make([]int64, n), make([]int64, n)
	for round := 0; round < 20; round++ {
		for oi, op := range []mpi.Op{mpi.Sum, mpi.Bxor, mpi.Max} {
			for k := range in {
				in[k] = val(r, k, round)
			}
			send := in
			if round%2 == 1 {
				copy(out, in)
				send = nil
			}
			if err := mpi.Allreduce(ctx, c, send, out, op); err != nil {
				return fmt.Errorf("round %d %v: %w", round, op, err)
			}
			for k := range out {
				want := val(0, k, round)
				for j := 1; j < p; j++ {
					v := val(j, k, round)
					switch oi {
					case 0:
						want += v
					case 1:
						want ^= v
					default:
						want = max(want, v)
					}
				}
				if out[k] != want {
					return fmt.Errorf("round %d %v: element %d is %#x, want %#x", round, op, k, out[k], want)
				}
			}
		}
	}
	return nil
}

// matMul is a non-commutative, associative operation: the product of 2x2
// integer matrices, four elements each, inout = in × inout.
var matMul = mpi.NewOp(func(in, inout []int64) {
	for i := 0; i+3 < len(in); i += 4 {
		a, b := in[i:i+4], inout[i:i+4]
		b[0], b[1], b[2], b[3] = a[0]*b[0]+a[1]*b[2], a[0]*b[1]+a[1]*b[3], a[2]*b[0]+a[3]*b[2], a[2]*b[1]+a[3]*b[3]
	}
}, false)

// sharedNonCommutative: a product of matrices comes out in rank order,
// from a send buffer and in place.
func sharedNonCommutative(ctx context.Context, c *mpi.Comm) error {
	for _, inPlace := range []bool{false, true} {
		if err := sharedMatrices(ctx, c, inPlace); err != nil {
			return fmt.Errorf("in place %v: %w", inPlace, err)
		}
	}
	return nil
}

func sharedMatrices(ctx context.Context, c *mpi.Comm, inPlace bool) error {
	mat := func(rank, i int) []int64 {
		return []int64{int64(rank + 1), int64(i + 2), int64(rank*i + 1), 1}
	}
	const mats = 8 // 256 bytes
	in, out := make([]int64, 4*mats), make([]int64, 4*mats)
	for i := 0; i < mats; i++ {
		copy(in[4*i:], mat(c.Rank(), i))
	}
	send := in
	if inPlace {
		copy(out, in)
		send = nil
	}
	if err := mpi.Allreduce(ctx, c, send, out, matMul); err != nil {
		return err
	}
	for i := 0; i < mats; i++ {
		want := mat(0, i)
		for j := 1; j < c.Size(); j++ {
			m := mat(j, i)
			want = []int64{want[0]*m[0] + want[1]*m[2], want[0]*m[1] + want[1]*m[3], want[2]*m[0] + want[3]*m[2], want[2]*m[1] + want[3]*m[3]}
		}
		if got := out[4*i : 4*i+4]; !equal(got, want) {
			return fmt.Errorf("matrix product %d: %v, want %v (in rank order)", i, got, want)
		}
	}
	return nil
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// sharedFloats: a float Sum whose value depends on the order of its terms
// is the same, bit for bit, on every rank.
func sharedFloats(ctx context.Context, c *mpi.Comm) error {
	in := []float64{1e16, 1 / 3.0, -1e16}
	for k := range in {
		in[k] *= float64(c.Rank()%3+1) + 0.1*float64(c.Rank())
	}
	out := make([]float64, len(in))
	if err := mpi.Allreduce(ctx, c, in, out, mpi.Sum); err != nil {
		return err
	}
	mine := make([]uint64, len(out))
	for k, v := range out {
		mine[k] = math.Float64bits(v)
	}
	all := make([]uint64, len(mine)*c.Size())
	if err := mpi.Allgather(ctx, c, mine, all); err != nil {
		return err
	}
	for j := 0; j < c.Size(); j++ {
		for k := range mine {
			if all[j*len(mine)+k] != mine[k] {
				return fmt.Errorf("float Sum: rank %d got %v, rank %d %v", j, math.Float64frombits(all[j*len(mine)+k]), c.Rank(), out[k])
			}
		}
	}
	return nil
}

// sharedWithTraffic: Barriers and Allreduces while each rank has a message
// on its way to the next and an Iallreduce (by messages) in flight; the
// receive is posted only after them, so the message waits in the
// receiver's context while it runs them.
func sharedWithTraffic(ctx context.Context, c *mpi.Comm) error {
	p, r := c.Size(), c.Rank()
	for round := 0; round < 10; round++ {
		msg := []int64{int64(r*100 + round)}
		q, err := c.Isend(mpi.Bytes(msg), (r+1)%p, round)
		if err != nil {
			return err
		}
		nb, nbOut := []int32{int32(r)}, []int32{0}
		nq, err := mpi.Iallreduce(c, nb, nbOut, mpi.Sum)
		if err != nil {
			return err
		}
		for i := 0; i < 5; i++ {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			got := []int64{0}
			if err := mpi.Allreduce(ctx, c, []int64{int64(r + i)}, got, mpi.Sum); err != nil {
				return err
			}
			if want := int64(p*(p-1)/2 + p*i); got[0] != want {
				return fmt.Errorf("Allreduce with traffic: %d, want %d", got[0], want)
			}
		}
		in := []int64{0}
		if _, err := c.Recv(ctx, mpi.Bytes(in), (r-1+p)%p, round); err != nil {
			return err
		}
		if want := int64(((r-1+p)%p)*100 + round); in[0] != want {
			return fmt.Errorf("message %d, want %d", in[0], want)
		}
		if _, err := q.Wait(ctx); err != nil {
			return err
		}
		if _, err := nq.Wait(ctx); err != nil {
			return err
		}
		if want := int32(p * (p - 1) / 2); nbOut[0] != want {
			return fmt.Errorf("Iallreduce: %d, want %d", nbOut[0], want)
		}
	}
	return nil
}

// sharedHosts: ranks on two hosts (the launcher says so; shared memory
// within a host, TCP between) keep the collectives by messages on the
// world; the ranks of each host, split off, share a segment.
func sharedHosts(ctx context.Context, w *mpi.Comm) error {
	if err := within(sharedAllreduce(ctx, w, 1, 4), "world"); err != nil {
		return err
	}
	if mpi.SharedColl(w) {
		return fmt.Errorf("world over two hosts uses a shared segment")
	}
	h, err := w.SplitType(ctx, mpi.SplitShared, 0)
	if err != nil {
		return err
	}
	if err := within(sharedChecks(ctx, h, true), "host"); err != nil {
		return err
	}
	if err := h.Free(); err != nil {
		return err
	}
	return w.Barrier(ctx)
}

func within(err error, where string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

// sharedMismatch: ranks that disagree on an Allreduce's count, or run a
// Barrier against an Allreduce, all get ErrCount; the communicator then
// works on.
func sharedMismatch(ctx context.Context, w *mpi.Comm) error {
	n := 4
	if w.Rank() == w.Size()-1 {
		n = 8
	}
	err := mpi.Allreduce(ctx, w, make([]int64, n), make([]int64, n), mpi.Sum)
	if !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("counts 4 and 8: %v, want ErrCount", err)
	}
	if w.Rank() == 0 {
		err = w.Barrier(ctx)
	} else {
		err = mpi.Allreduce(ctx, w, []int32{1}, []int32{0}, mpi.Sum)
	}
	if !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("Barrier against Allreduce: %v, want ErrCount", err)
	}
	if !mpi.SharedColl(w) {
		return fmt.Errorf("no shared-memory collectives")
	}
	return sharedAllreduce(ctx, w, 5, 8)
}

// Every rank count a user would run on one host, and the segment turned
// off (the same checks by messages).
func TestSharedCollectives(t *testing.T) {
	for _, p := range []int{1, 2, 3, 4, 7, 8} {
		t.Run("p="+strconv.Itoa(p), func(t *testing.T) { runProcs(t, p, "shm:checks") })
	}
	t.Run("off/p=4", func(t *testing.T) { runProcs(t, 4, "shm:off", "AMIGO_MPI_SHARED_COLL=-1") })
}

// Ranks as goroutines of one process (the loop adapter) share the segment
// too; under -race this runs the segment's users on several goroutines.
func TestSharedCollectivesInProcess(t *testing.T) {
	for _, p := range []int{2, 3} {
		t.Run("p="+strconv.Itoa(p), func(t *testing.T) {
			run(t, p, func(ctx context.Context, w *mpi.Comm) error { return sharedComms(ctx, w, true) })
		})
	}
}

func TestSharedCollectivesTwoHosts(t *testing.T) {
	runProcsOn(t, []int{0, 0, 1, 1}, 4, "shm:hosts", "AMIGO_TRANSPORT=auto")
}

// Two hosts of which only one is oversubscribed (its three ranks pinned to
// one processor, the other host's two free): every collective on five
// ranks. The choice of algorithm that depends on oversubscription must be
// the same on both hosts (an Allreduce of 32 bytes waited for ever when
// the first host's ranks gathered at rank 0 and the second's ran
// recursive doubling).
func TestCollectivesTwoHostsOneOversubscribed(t *testing.T) {
	runProcsOn(t, []int{0, 0, 0, 1, 1}, 5, "small:5", "AMIGO_TRANSPORT=auto", oneCPUEnv+"=0,1,2")
	runProcsOn(t, []int{0, 0, 0, 1, 1}, 5, "shm:hosts", "AMIGO_TRANSPORT=auto", oneCPUEnv+"=0,1,2")
}

// Ranks of one host that reach each other over TCP (AMIGO_TRANSPORT=tcp)
// keep the collectives by messages.
func TestSharedCollectivesOverTCP(t *testing.T) {
	runProcs(t, 3, "shm:off", "AMIGO_TRANSPORT=tcp")
}

func TestSharedCollectivesMismatch(t *testing.T) {
	for _, p := range []int{2, 5} {
		t.Run("p="+strconv.Itoa(p), func(t *testing.T) { runProcs(t, p, "shm:mismatch") })
	}
}

// A rank killed while the others wait in a Barrier, or an Allreduce,
// through shared memory: they get ErrProcFailed naming it within the
// bound, shrink and compute (ftProgram's checks).
func TestSharedCollectivesProcFailure(t *testing.T) {
	for _, tr := range []struct {
		name  string
		bound time.Duration
	}{{"shm", time.Second}} {
		for _, phase := range []string{"shm-barrier", "shm-allreduce"} {
			t.Run(tr.name+"/"+phase, func(t *testing.T) {
				runFT(t, tr.name, "ft:"+phase, tr.bound, []int{victim})
			})
		}
	}
}

// ftSharedBarrier: Barrier after Barrier; rank 2 dies instead of arriving
// at the 300th, after the segment is in use.
func ftSharedBarrier(ctx context.Context, w *mpi.Comm) (time.Time, error) {
	for i := 0; ; i++ {
		if i == 300 && w.Rank() == victim {
			die()
		}
		last := time.Now()
		if err := w.Barrier(ctx); err != nil {
			return last, err
		}
		if !mpi.SharedColl(w) {
			return last, fmt.Errorf("no shared-memory collectives")
		}
	}
}

// ftSharedAllreduce: small Allreduce after Allreduce; rank 2 dies instead
// of arriving at the 300th.
func ftSharedAllreduce(ctx context.Context, w *mpi.Comm) (time.Time, error) {
	in, out := make([]int64, 8), make([]int64, 8)
	for i := 0; ; i++ {
		if i == 300 && w.Rank() == victim {
			die()
		}
		for k := range in {
			in[k] = int64(w.Rank() + k + i)
		}
		last := time.Now()
		if err := mpi.Allreduce(ctx, w, in, out, mpi.Sum); err != nil {
			return last, err
		}
		for k := range out {
			if want := int64(6 + 4*(k+i)); out[k] != want {
				return last, fmt.Errorf("Allreduce %d: element %d is %d, want %d", i, k, out[k], want)
			}
		}
	}
}

// Barrier and small Allreduce through the segment allocate nothing on any
// rank, on 3 ranks of one process (the loop adapter shares it too).
func TestSharedCollectivesZeroAllocs(t *testing.T) {
	const p = 3
	cl, err := amigo.NewLocal(p, amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	ctx := context.Background()
	w := make([]*mpi.Comm, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w[r], errs[r] = mpi.World(ctx, cl[r].Context(0), nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	round := func(c *mpi.Comm, a, b []float64) error {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := mpi.Allreduce(ctx, c, a, b, mpi.Sum); err != nil {
			return err
		}
		return mpi.Allreduce(ctx, c, nil, b, mpi.Max)
	}
	const warm, runs = 100, 300
	peers := make(chan error, p-1)
	for r := 1; r < p; r++ {
		go func() {
			a, b := make([]float64, 8), make([]float64, 8)
			for i := 0; i < warm+runs+1; i++ { // AllocsPerRun calls once more
				if err := round(w[r], a, b); err != nil {
					peers <- err
					return
				}
			}
			peers <- nil
		}()
	}
	a, b := make([]float64, 8), make([]float64, 8)
	var rerr error
	f := func() {
		if err := round(w[0], a, b); err != nil && rerr == nil {
			rerr = err
		}
	}
	for i := 0; i < warm; i++ {
		f()
	}
	n := testing.AllocsPerRun(runs, f)
	for r := 1; r < p; r++ {
		if err := <-peers; err != nil {
			t.Fatal(err)
		}
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !mpi.SharedColl(w[0]) {
		t.Fatal("no shared-memory collectives")
	}
	if n != 0 {
		t.Errorf("%v allocations per round of three collectives (all %d ranks), want 0", n, p)
	}
	for _, c := range w {
		c.Free()
	}
}
