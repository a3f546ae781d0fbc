package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/mpi"
)

// rmaJobs are the adapters and rank counts the window tests run on.
var rmaJobs = []struct {
	over string
	n    []int
}{
	{"loop", []int{1, 2, 4, 8}},
	{"shm", []int{2, 4}},
	{"tcp", []int{2, 4}},
}

func runRMA(t *testing.T, fn func(ctx context.Context, w *mpi.Comm) error) {
	for _, j := range rmaJobs {
		for _, n := range j.n {
			t.Run(fmt.Sprintf("%s/%d", j.over, n), func(t *testing.T) {
				cfg := amigo.Config{SpinIterations: 50, YieldIterations: 50}
				amigotest.Run(t, n, amigotest.Options{Config: cfg, Timeout: time.Minute, Over: j.over}, func(r *amigotest.Rank) error {
					w, err := mpi.World(r.Deadline, r.Ctx, nil)
					if err != nil {
						return err
					}
					defer w.Free()
					return fn(r.Deadline, w)
				})
			})
		}
	}
}

// Fence epochs: every rank puts a pattern into its right neighbour's
// window, between guard bytes nobody may touch, and gets its left
// neighbour's pattern back; after the closing Fence every byte is where it
// belongs. Both window kinds: memory of the caller's (WinCreate) and of
// amigo's (WinAllocate).
func TestWinFenceRing(t *testing.T) { runRMA(t, rmaFenceRing) }

func rmaFenceRing(ctx context.Context, c *mpi.Comm) error {
	const guard, body = 16, 1000
	me, n := c.Rank(), c.Size()
	right, left := (me+1)%n, (me+n-1)%n
	for _, alloc := range []bool{false, true} {
		var w *mpi.Win
		var err error
		if alloc {
			w, err = mpi.WinAllocate(ctx, c, (2*guard+body)*4, 4)
		} else {
			w, err = mpi.WinCreate(ctx, c, make([]byte, (2*guard+body)*4), 4)
		}
		if err != nil {
			return err
		}
		mem := mpi.View[int32](w.Memory())
		for i := range mem {
			mem[i] = -7
		}
		if err := w.Fence(ctx, 0); err != nil {
			return err
		}
		out := make([]int32, body)
		for i := range out {
			out[i] = int32(me*100000 + i)
		}
		if err := mpi.Put(w, out, right, guard); err != nil {
			return err
		}
		if err := w.Fence(ctx, 0); err != nil {
			return err
		}
		for i, v := range mem {
			want := int32(-7)
			if i >= guard && i < guard+body {
				want = int32(left*100000 + i - guard)
			}
			if v != want {
				return fmt.Errorf("alloc %v: element %d is %d after the Put, want %d", alloc, i, v, want)
			}
		}
		in := make([]int32, body+2*guard)
		if err := mpi.Get(w, in, left, 0); err != nil {
			return err
		}
		if err := w.Fence(ctx, mpi.ModeNoSucceed); err != nil {
			return err
		}
		for i, v := range in {
			want := int32(-7)
			if i >= guard && i < guard+body {
				want = int32(((left+n-1)%n)*100000 + i - guard)
			}
			if v != want {
				return fmt.Errorf("alloc %v: got element %d = %d, want %d", alloc, i, v, want)
			}
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Passive target, exclusive: every rank increments a counter in rank 0's
// window by Get, add, Put under an exclusive lock, many times; no
// increment is lost. Rank 0 takes part too, and no rank's program serves
// the others.
func TestWinLockCounter(t *testing.T) { runRMA(t, rmaLockCounter) }

func rmaLockCounter(ctx context.Context, c *mpi.Comm) error {
	const rounds = 50
	w, err := mpi.WinCreate(ctx, c, make([]byte, 8), 8)
	if err != nil {
		return err
	}
	v := make([]int64, 1)
	for i := 0; i < rounds; i++ {
		if err := w.Lock(ctx, mpi.LockExclusive, 0); err != nil {
			return err
		}
		if err := mpi.Get(w, v, 0, 0); err != nil {
			return err
		}
		if err := w.FlushLocal(ctx, 0); err != nil {
			return err
		}
		v[0]++
		if err := mpi.Put(w, v, 0, 0); err != nil {
			return err
		}
		if err := w.Unlock(ctx, 0); err != nil {
			return err
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == 0 {
		if got := mpi.View[int64](w.Memory())[0]; got != int64(rounds*c.Size()) {
			return fmt.Errorf("counter %d after %d locked increments", got, rounds*c.Size())
		}
	}
	return w.Free(ctx)
}

// FetchAndOp under a shared LockAll: every rank adds 1 to rank 0's
// counter many times; the values fetched are distinct across all ranks
// and cover 0..total-1, and the counter ends at the total.
func TestWinFetchAndOp(t *testing.T) { runRMA(t, rmaFetchAndOp) }

func rmaFetchAndOp(ctx context.Context, c *mpi.Comm) error {
	const per = 10000
	w, err := mpi.WinAllocate(ctx, c, 8, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	got := make([]int64, per)
	for i := range got {
		if err := mpi.FetchAndOp(w, int64(1), &got[i], 0, 0, mpi.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	all := make([]int64, per*c.Size())
	if err := mpi.Allgather(ctx, c, got, all); err != nil {
		return err
	}
	seen := make([]bool, len(all))
	for _, v := range all {
		if v < 0 || v >= int64(len(all)) || seen[v] {
			return fmt.Errorf("fetched %d twice or out of range [0, %d)", v, len(all))
		}
		seen[v] = true
	}
	if c.Rank() == 0 {
		if v := mpi.View[int64](w.Memory())[0]; v != int64(len(all)) {
			return fmt.Errorf("counter %d, want %d", v, len(all))
		}
	}
	return w.Free(ctx)
}

// A mutex made of CompareAndSwap on a word of rank 0's window guards a
// counter that is updated by plain Get and Put: no update is lost.
func TestWinCompareAndSwapMutex(t *testing.T) { runRMA(t, rmaCompareAndSwapMutex) }

func rmaCompareAndSwapMutex(ctx context.Context, c *mpi.Comm) error {
	const rounds = 30
	w, err := mpi.WinAllocate(ctx, c, 16, 8) // word 0: the mutex, word 1: the counter
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	me := uint64(c.Rank() + 1)
	v := make([]uint64, 1)
	for i := 0; i < rounds; i++ {
		for {
			var old uint64
			if err := mpi.CompareAndSwap(w, me, 0, &old, 0, 0); err != nil {
				return err
			}
			if err := w.Flush(ctx, 0); err != nil {
				return err
			}
			if old == 0 {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if err := mpi.Get(w, v, 0, 1); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		v[0]++
		if err := mpi.Put(w, v, 0, 1); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		var old uint64
		if err := mpi.CompareAndSwap(w, 0, me, &old, 0, 0); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		if old != me {
			return fmt.Errorf("released a mutex held by %d", old)
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == 0 {
		if got := mpi.View[uint64](w.Memory())[1]; got != uint64(rounds*c.Size()) {
			return fmt.Errorf("counter %d, want %d", got, rounds*c.Size())
		}
	}
	return w.Free(ctx)
}

// Accumulate from every rank into every rank's window in one Fence epoch:
// Sum on int32, float64 and int8 (an element narrower than any atomic,
// updated by a compare-and-swap on its word, beside neighbours updated at
// once), Max on float32, and Replace, whose result is one rank's
// contribution whole.
func TestWinAccumulate(t *testing.T) { runRMA(t, rmaAccumulate) }

func rmaAccumulate(ctx context.Context, c *mpi.Comm) error {
	const m = 37
	n, me := c.Size(), c.Rank()
	wi, err := mpi.WinAllocate(ctx, c, m*4, 4)
	if err != nil {
		return err
	}
	wf, err := mpi.WinCreate(ctx, c, make([]byte, m*8), 8)
	if err != nil {
		return err
	}
	// A window of bytes whose length is a multiple of 4: an element
	// in a trailing partial word has no aligned word inside the
	// window to be updated by (TestWinErrors).
	wb, err := mpi.WinCreate(ctx, c, make([]byte, m+3), 1)
	if err != nil {
		return err
	}
	wm, err := mpi.WinAllocate(ctx, c, m*4, 4)
	if err != nil {
		return err
	}
	wr, err := mpi.WinAllocate(ctx, c, m*8, 8)
	if err != nil {
		return err
	}
	wins := []*mpi.Win{wi, wf, wb, wm, wr}
	for _, w := range wins {
		if err := w.Fence(ctx, mpi.ModeNoPrecede); err != nil {
			return err
		}
	}
	ints, floats, bytes, f32, rep := make([]int32, m), make([]float64, m), make([]int8, m), make([]float32, m), make([]uint64, m)
	for i := 0; i < m; i++ {
		ints[i] = int32(me + i)
		floats[i] = float64(me) + 0.5
		bytes[i] = int8(me + 1)
		f32[i] = float32(me*10 + i)
		rep[i] = uint64(me)<<32 | uint64(me)
	}
	for t := 0; t < n; t++ {
		if err := mpi.Accumulate(wi, ints, t, 0, mpi.Sum); err != nil {
			return err
		}
		if err := mpi.Accumulate(wf, floats, t, 0, mpi.Sum); err != nil {
			return err
		}
		if err := mpi.Accumulate(wb, bytes, t, 0, mpi.Sum); err != nil {
			return err
		}
		if err := mpi.Accumulate(wm, f32, t, 0, mpi.Max); err != nil {
			return err
		}
		if err := mpi.Accumulate(wr, rep, t, 0, mpi.Replace); err != nil {
			return err
		}
	}
	for _, w := range wins {
		if err := w.Fence(ctx, mpi.ModeNoSucceed); err != nil {
			return err
		}
	}
	gi, gf, gb := mpi.View[int32](wi.Memory()), mpi.View[float64](wf.Memory()), mpi.View[int8](wb.Memory())
	gm, gr := mpi.View[float32](wm.Memory()), mpi.View[uint64](wr.Memory())
	sumRanks := n * (n - 1) / 2
	for i := 0; i < m; i++ {
		if want := int32(sumRanks + n*i); gi[i] != want {
			return fmt.Errorf("int32 element %d: %d, want %d", i, gi[i], want)
		}
		if want := float64(sumRanks) + 0.5*float64(n); math.Abs(gf[i]-want) > 1e-9 {
			return fmt.Errorf("float64 element %d: %v, want %v", i, gf[i], want)
		}
		if want := int8(sumRanks + n); gb[i] != want {
			return fmt.Errorf("int8 element %d: %d, want %d", i, gb[i], want)
		}
		if want := float32((n-1)*10 + i); gm[i] != want {
			return fmt.Errorf("float32 max element %d: %v, want %v", i, gm[i], want)
		}
		if hi, lo := gr[i]>>32, gr[i]&0xffffffff; hi != lo || hi >= uint64(n) {
			return fmt.Errorf("replaced element %d: %#x is no rank's whole contribution", i, gr[i])
		}
	}
	for _, w := range wins {
		if err := w.Free(ctx); err != nil {
			return err
		}
	}
	return nil
}

// GetAccumulate fetches the old elements: with Sum from every rank on rank
// 0's window, the fetched values of each element are distinct partial sums;
// with NoOp it fetches without changing anything.
func TestWinGetAccumulate(t *testing.T) { runRMA(t, rmaGetAccumulate) }

func rmaGetAccumulate(ctx context.Context, c *mpi.Comm) error {
	w, err := mpi.WinAllocate(ctx, c, 4*8, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	one := []int64{1, 1, 1, 1}
	old := make([]int64, 4)
	if err := mpi.GetAccumulate(w, one, old, 0, 0, mpi.Sum); err != nil {
		return err
	}
	if err := w.Flush(ctx, 0); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	for _, v := range old[1:] {
		if v != old[0] {
			return fmt.Errorf("fetched %v: one rank's adds to the four elements should see the same count", old)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Lock(ctx, mpi.LockShared, 0); err != nil {
		return err
	}
	now := make([]int64, 4)
	if err := mpi.GetAccumulate(w, nil, now, 0, 0, mpi.NoOp); err != nil {
		return err
	}
	if err := w.Unlock(ctx, 0); err != nil {
		return err
	}
	for _, v := range now {
		if v != int64(c.Size()) {
			return fmt.Errorf("NoOp fetched %v, want every element %d", now, c.Size())
		}
	}
	return w.Free(ctx)
}

// Errors touch nothing: an access outside an epoch, beyond the window, an
// Unlock without a Lock, an op that does not apply to the type, Replace in
// a collective, a misaligned accumulate.
func TestWinErrors(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *mpi.Comm) error {
		w, err := mpi.WinCreate(ctx, c, make([]byte, 64), 8)
		if err != nil {
			return err
		}
		other := 1 - c.Rank()
		v := []float64{1}
		if err := mpi.Put(w, v, other, 0); !errors.Is(err, mpi.ErrRMASync) {
			return fmt.Errorf("Put outside an epoch: %v, want ErrRMASync", err)
		}
		if err := w.Unlock(ctx, other); !errors.Is(err, mpi.ErrRMASync) {
			return fmt.Errorf("Unlock without Lock: %v, want ErrRMASync", err)
		}
		if err := w.Fence(ctx, 0); err != nil {
			return err
		}
		if err := mpi.Put(w, v, other, 8); !errors.Is(err, mpi.ErrRMARange) {
			return fmt.Errorf("Put beyond the window: %v, want ErrRMARange", err)
		}
		if err := mpi.Put(w, make([]float64, 9), other, 0); !errors.Is(err, mpi.ErrRMARange) {
			return fmt.Errorf("Put longer than the window: %v, want ErrRMARange", err)
		}
		if err := mpi.Put(w, v, 2, 0); !errors.Is(err, mpi.ErrRank) {
			return fmt.Errorf("Put to rank 2 of 2: %v, want ErrRank", err)
		}
		if err := mpi.Accumulate(w, v, other, 0, mpi.Bxor); !errors.Is(err, mpi.ErrOp) {
			return fmt.Errorf("Bxor on float64: %v, want ErrOp", err)
		}
		if err := mpi.Accumulate(w, []int8{1}, other, 7, mpi.Sum); err != nil {
			return fmt.Errorf("int8 accumulate on the last word of a 64-byte window: %v", err)
		}
		var oldc complex128
		if err := mpi.CompareAndSwap(w, 1, 0, &oldc, other, 0); !errors.Is(err, mpi.ErrOp) {
			return fmt.Errorf("CompareAndSwap of complex128: %v, want ErrOp", err)
		}
		if err := mpi.Accumulate(w, []int64{1, 2}, other, 0, mpi.MinLoc); !errors.Is(err, mpi.ErrOp) {
			return fmt.Errorf("accumulate with MinLoc: %v, want ErrOp", err)
		}
		if err := mpi.Accumulate(w, make([]int64, 8), other, 1, mpi.Sum); !errors.Is(err, mpi.ErrRMARange) {
			return fmt.Errorf("accumulate of 8 elements beyond the window's end: %v, want ErrRMARange", err)
		}
		if err := mpi.Allreduce(ctx, c, []int32{1}, make([]int32, 1), mpi.Replace); !errors.Is(err, mpi.ErrOp) {
			return fmt.Errorf("Allreduce with Replace: %v, want ErrOp", err)
		}
		if err := w.Lock(ctx, mpi.LockShared, other); !errors.Is(err, mpi.ErrRMASync) {
			return fmt.Errorf("Lock inside a Fence epoch: %v, want ErrRMASync", err)
		}
		if err := w.Fence(ctx, mpi.ModeNoSucceed); err != nil {
			return err
		}
		if got := w.Memory(); got[56] != 1 || !allZero(got[:56]) || !allZero(got[57:]) {
			return fmt.Errorf("refused operations wrote %v", got)
		}
		units, err := mpi.WinCreate(ctx, c, make([]byte, 64), 4)
		if err != nil {
			return err
		}
		if err := units.Fence(ctx, 0); err != nil {
			return err
		}
		if err := mpi.Accumulate(units, []int64{1, 2}, other, 1, mpi.Sum); !errors.Is(err, mpi.ErrRMARange) || !strings.Contains(err.Error(), "unit of 4 bytes") {
			return fmt.Errorf("int64 accumulate at displacement 1 of a window of 4-byte units: %v, want ErrRMARange naming the unit", err)
		}
		if err := mpi.FetchAndOp(units, int64(1), new(int64), other, 3, mpi.Sum); !errors.Is(err, mpi.ErrRMARange) {
			return fmt.Errorf("int64 FetchAndOp at displacement 3 of a window of 4-byte units: %v, want ErrRMARange", err)
		}
		if err := units.Fence(ctx, mpi.ModeNoSucceed); err != nil {
			return err
		}
		if !allZero(units.Memory()) {
			return fmt.Errorf("refused accumulates wrote %v", units.Memory())
		}
		if err := units.Free(ctx); err != nil {
			return err
		}
		odd, err := mpi.WinCreate(ctx, c, make([]byte, 37), 1)
		if err != nil {
			return err
		}
		if err := odd.Fence(ctx, 0); err != nil {
			return err
		}
		if err := mpi.Accumulate(odd, []int8{1}, other, 36, mpi.Sum); !errors.Is(err, mpi.ErrRMARange) {
			return fmt.Errorf("accumulate on a byte of a trailing partial word: %v, want ErrRMARange", err)
		}
		if err := odd.Fence(ctx, mpi.ModeNoSucceed); err != nil {
			return err
		}
		if err := odd.Free(ctx); err != nil {
			return err
		}
		if err := w.Free(ctx); err != nil {
			return err
		}
		if err := mpi.Put(w, v, other, 0); !errors.Is(err, mpi.ErrWin) {
			return fmt.Errorf("Put on a freed window: %v, want ErrWin", err)
		}
		return nil
	})
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

// Window calls from several goroutines of each rank at once: under one
// LockAll, four goroutines a rank add to rank 0's counter with FetchAndOp
// and Flush; no add is lost and no fetched value repeats.
func TestWinGoroutines(t *testing.T) { runRMA(t, rmaGoroutines) }

func rmaGoroutines(ctx context.Context, c *mpi.Comm) error {
	const workers, per = 4, 40
	w, err := mpi.WinAllocate(ctx, c, 8, 8)
	if err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	got := make([]int64, workers*per)
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		go func(g int) {
			for i := 0; i < per; i++ {
				if err := mpi.FetchAndOp(w, int64(1), &got[g*per+i], 0, 0, mpi.Sum); err != nil {
					errs <- err
					return
				}
				if err := w.Flush(ctx, 0); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < workers; g++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	all := make([]int64, len(got)*c.Size())
	if err := mpi.Allgather(ctx, c, got, all); err != nil {
		return err
	}
	seen := make(map[int64]bool, len(all))
	for _, v := range all {
		if seen[v] || v < 0 || v >= int64(len(all)) {
			return fmt.Errorf("fetched %d twice or out of [0, %d)", v, len(all))
		}
		seen[v] = true
	}
	return w.Free(ctx)
}

// Generalised active target: every rank exposes its window to its left
// neighbour (Post) and accesses its right neighbour's (Start), puts a
// pattern between guard bytes nobody may touch and accumulates into a
// counter, for several epochs in a row; after Wait (or a loop of Test)
// the window holds the left neighbour's pattern of this epoch and the
// guards are intact. Posts of the next epoch may overtake the Start of
// this one: the epochs are counted, not merely flagged.
func TestWinPSCWRing(t *testing.T) { runRMA(t, rmaPSCWRing) }

func rmaPSCWRing(ctx context.Context, c *mpi.Comm) error {
	const guard, body, epochs = 8, 300, 5
	me, n := c.Rank(), c.Size()
	right, left := (me+1)%n, (me+n-1)%n
	w, err := mpi.WinAllocate(ctx, c, (2*guard+body+1)*8, 8)
	if err != nil {
		return err
	}
	mem := mpi.View[int64](w.Memory())
	for i := range mem {
		mem[i] = -7
	}
	mem[len(mem)-1] = 0
	all, err := c.Group()
	if err != nil {
		return err
	}
	from, err := all.Incl([]int{left})
	if err != nil {
		return err
	}
	to, err := all.Incl([]int{right})
	if err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	out := make([]int64, body)
	for e := 0; e < epochs; e++ {
		if err := w.Post(from, 0); err != nil {
			return err
		}
		if err := w.Start(ctx, to, 0); err != nil {
			return err
		}
		for i := range out {
			out[i] = int64(e*1000000 + me*1000 + i)
		}
		if err := mpi.Put(w, out, right, guard); err != nil {
			return err
		}
		if err := mpi.Accumulate(w, []int64{1}, right, len(mem)-1, mpi.Sum); err != nil {
			return err
		}
		if err := w.Complete(ctx); err != nil {
			return err
		}
		if e%2 == 0 {
			if err := w.Wait(ctx); err != nil {
				return err
			}
		} else {
			for {
				done, err := w.Test()
				if err != nil {
					return err
				}
				if done {
					break
				}
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		for i, v := range mem[:len(mem)-1] {
			want := int64(-7)
			if i >= guard && i < guard+body {
				want = int64(e*1000000 + left*1000 + i - guard)
			}
			if v != want {
				return fmt.Errorf("epoch %d: element %d is %d, want %d", e, i, v, want)
			}
		}
		if got := mem[len(mem)-1]; got != int64(e+1) {
			return fmt.Errorf("epoch %d: counter %d, want %d", e, got, e+1)
		}
	}
	// Out of the epochs, the window refuses access and the calls that
	// close epochs not open.
	if err := mpi.Put(w, out[:1], right, 0); !errors.Is(err, mpi.ErrRMASync) {
		return fmt.Errorf("Put after Complete: %v, want ErrRMASync", err)
	}
	if err := w.Complete(ctx); !errors.Is(err, mpi.ErrRMASync) {
		return fmt.Errorf("Complete without Start: %v, want ErrRMASync", err)
	}
	if err := w.Wait(ctx); !errors.Is(err, mpi.ErrRMASync) {
		return fmt.Errorf("Wait without Post: %v, want ErrRMASync", err)
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// Request-based operations under LockAll: each rank Rputs a block into its
// right neighbour's window and waits for that request alone, Rgets it
// back, Raccumulates into a shared counter block of rank 0 and
// RgetAccumulates a fetch of it; Waitall covers the lot, and after
// UnlockAll and a barrier every value is where it belongs.
func TestWinRequests(t *testing.T) { runRMA(t, rmaRequests) }

func rmaRequests(ctx context.Context, c *mpi.Comm) error {
	const body = 64
	me, n := c.Rank(), c.Size()
	right := (me + 1) % n
	w, err := mpi.WinAllocate(ctx, c, (n*body+body)*8, 8)
	if err != nil {
		return err
	}
	mem := mpi.View[int64](w.Memory())
	clear(mem)
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	out := make([]int64, body)
	for i := range out {
		out[i] = int64(me*1000 + i)
	}
	q, err := mpi.Rput(w, out, right, me*body)
	if err != nil {
		return err
	}
	if _, err := q.Wait(ctx); err != nil {
		return err
	}
	if err := w.Flush(ctx, right); err != nil {
		return err
	}
	// Element 0 is replaced meanwhile: the Get leaves it out.
	back := make([]int64, body-1)
	var reqs []mpi.Request
	if q, err = mpi.Rget(w, back, right, me*body+1); err != nil {
		return err
	}
	reqs = append(reqs, q)
	ones := make([]int64, body)
	for i := range ones {
		ones[i] = int64(i + 1)
	}
	for k := 0; k < 3; k++ {
		if q, err = mpi.Raccumulate(w, ones, 0, n*body, mpi.Sum); err != nil {
			return err
		}
		reqs = append(reqs, q)
	}
	one := []int64{5}
	if q, err = mpi.Raccumulate(w, one, right, me*body, mpi.Replace); err != nil {
		return err
	}
	reqs = append(reqs, q)
	fetched := make([]int64, body)
	if q, err = mpi.RgetAccumulate(w, nil, fetched, 0, n*body, mpi.NoOp); err != nil {
		return err
	}
	reqs = append(reqs, q)
	if err := mpi.Waitall(ctx, reqs, nil); err != nil {
		return err
	}
	for i, v := range back {
		if v != int64(me*1000+i+1) {
			return fmt.Errorf("Rget element %d = %d, want %d", i+1, v, me*1000+i+1)
		}
	}
	for i, v := range fetched {
		if v < 3*int64(i+1) || v > int64(3*n*(i+1)) || v%int64(i+1) != 0 {
			return fmt.Errorf("RgetAccumulate element %d = %d: not a sum of whole accumulates", i, v)
		}
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	left := (me + n - 1) % n
	for i, v := range mem[left*body : left*body+body] {
		want := int64(left*1000 + i)
		if i == 0 {
			want = 5
		}
		if v != want {
			return fmt.Errorf("element %d of the left neighbour's block = %d, want %d", i, v, want)
		}
	}
	if me == 0 {
		for i, v := range mem[n*body:] {
			if v != int64(3*n*(i+1)) {
				return fmt.Errorf("counter block element %d = %d, want %d", i, v, 3*n*(i+1))
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// A shared window: every rank stores into its own part with plain stores,
// then Sync, Barrier, Sync, and loads every other rank's part directly
// through SharedQuery; then every rank adds to a counter in rank 0's part
// with the processor's atomics through its mapping, and Puts into its
// right neighbour's part through the window, which a third rank sees by a
// load.
func TestWinShared(t *testing.T) { runRMA(t, rmaShared) }

func rmaShared(ctx context.Context, c *mpi.Comm) error {
	const per = 100
	me, n := c.Rank(), c.Size()
	w, err := mpi.WinAllocateShared(ctx, c, (per+1)*8, 8)
	if err != nil {
		return err
	}
	mine := mpi.View[int64](w.Memory())
	if len(mine) != per+1 {
		return fmt.Errorf("own part of %d elements, want %d", len(mine), per+1)
	}
	for i := range mine {
		mine[i] = int64(me*1000 + i)
	}
	if err := w.Sync(); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Sync(); err != nil {
		return err
	}
	parts := make([][]int64, n)
	for r := 0; r < n; r++ {
		b, unit, err := w.SharedQuery(r)
		if err != nil {
			return err
		}
		if unit != 8 {
			return fmt.Errorf("rank %d's unit %d, want 8", r, unit)
		}
		parts[r] = mpi.View[int64](b)
		for i, v := range parts[r] {
			if v != int64(r*1000+i) {
				return fmt.Errorf("rank %d's element %d loads as %d, want %d", r, i, v, r*1000+i)
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if me == 0 {
		mine[per] = 0
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	for i := 0; i < 1000; i++ {
		atomic.AddInt64(&parts[0][per], 1)
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	right := (me + 1) % n
	if err := mpi.Put(w, []int64{int64(-me - 1)}, right, 0); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := w.Sync(); err != nil {
		return err
	}
	if got := atomic.LoadInt64(&parts[0][per]); got != int64(1000*n) {
		return fmt.Errorf("shared counter %d, want %d", got, 1000*n)
	}
	// Rank r's part, element 0, holds what r's left neighbour put.
	for r := 0; r < n; r++ {
		left := (r + n - 1) % n
		if got := parts[r][0]; got != int64(-left-1) {
			return fmt.Errorf("rank %d's element 0 loads as %d after the Put, want %d", r, got, -left-1)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// A dynamic window: every rank attaches two buffers after the window is
// made and sends their addresses around; the others Put into one and
// accumulate into the other at those addresses, under a lock; then each
// rank detaches the first, attaches a new buffer, and an access to the
// detached address is refused while one to the new buffer lands.
func TestWinDynamic(t *testing.T) { runRMA(t, rmaDynamic) }

func rmaDynamic(ctx context.Context, c *mpi.Comm) error {
	const body = 32
	me, n := c.Rank(), c.Size()
	right, left := (me+1)%n, (me+n-1)%n
	w, err := mpi.WinCreateDynamic(ctx, c)
	if err != nil {
		return err
	}
	if err := mpi.Put(w, []int64{1}, right, 0); !errors.Is(err, mpi.ErrRMASync) {
		return fmt.Errorf("Put outside an epoch: %v, want ErrRMASync", err)
	}
	a, b := make([]int64, body), make([]int64, body)
	if err := w.Attach(mpi.Bytes(a)); err != nil {
		return err
	}
	if err := w.Attach(mpi.Bytes(b)); err != nil {
		return err
	}
	if err := w.Attach(mpi.Bytes(a[1:3])); !errors.Is(err, mpi.ErrWin) {
		return fmt.Errorf("overlapping Attach: %v, want ErrWin", err)
	}
	addrs := make([]int64, 2*n)
	if err := mpi.Allgather(ctx, c, []int64{int64(mpi.Address(mpi.Bytes(a))), int64(mpi.Address(mpi.Bytes(b)))}, addrs); err != nil {
		return err
	}
	out := make([]int64, body)
	ones := make([]int64, body)
	for i := range out {
		out[i], ones[i] = int64(me*100+i), 1
	}
	if err := w.Lock(ctx, mpi.LockShared, right); err != nil {
		return err
	}
	if err := mpi.Put(w, out, right, int(addrs[2*right])); err != nil {
		return err
	}
	if err := w.Unlock(ctx, right); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		if err := mpi.Accumulate(w, ones, r, int(addrs[2*r+1]), mpi.Sum); err != nil {
			return err
		}
	}
	if err := mpi.Put(w, out[:2], right, int(addrs[2*right])+8*(body-1)); !errors.Is(err, mpi.ErrRMARange) {
		return fmt.Errorf("Put across an attachment's end: %v, want ErrRMARange", err)
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	for i := range a {
		if a[i] != int64(left*100+i) || b[i] != int64(n) {
			return fmt.Errorf("element %d: put %d (want %d), accumulated %d (want %d)", i, a[i], left*100+i, b[i], n)
		}
	}
	if err := w.Detach(mpi.Bytes(a)); err != nil {
		return err
	}
	if err := w.Detach(mpi.Bytes(a)); !errors.Is(err, mpi.ErrWin) {
		return fmt.Errorf("second Detach: %v, want ErrWin", err)
	}
	oldA := int(addrs[2*right])
	fresh := make([]int64, body)
	if err := w.Attach(mpi.Bytes(fresh)); err != nil {
		return err
	}
	if err := mpi.Allgather(ctx, c, []int64{int64(mpi.Address(mpi.Bytes(fresh))), 0}, addrs); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	if err := mpi.Put(w, out[:1], right, oldA); !errors.Is(err, mpi.ErrRMARange) {
		return fmt.Errorf("Put to detached memory: %v, want ErrRMARange", err)
	}
	if err := mpi.Put(w, out[:1], right, int(addrs[2*right])); err != nil {
		return err
	}
	if err := w.UnlockAll(ctx); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if fresh[0] != int64(left*100) {
		return fmt.Errorf("fresh attachment holds %d, want %d", fresh[0], left*100)
	}
	runtime.KeepAlive(a) // its address stays the detached one's
	return w.Free(ctx)
}

// Strided target layouts: each rank's window is a rows x cols matrix of
// int32, row-major. Every rank puts a column into its right neighbour's
// column 1, gets its left neighbour's column 1 back, adds a column of ones
// into column 3 of every rank, and fetches rank 0's column 3 atomically;
// blocks of two elements go into columns 5-6. Every other element keeps
// its guard value.
func TestWinVector(t *testing.T) { runRMA(t, rmaVector) }

func rmaVector(ctx context.Context, c *mpi.Comm) error {
	const rows, cols = 9, 8
	me, n := c.Rank(), c.Size()
	right, left := (me+1)%n, (me+n-1)%n
	w, err := mpi.WinCreate(ctx, c, make([]byte, rows*cols*4), 4)
	if err != nil {
		return err
	}
	m := mpi.View[int32](w.Memory())
	for i := range m {
		m[i] = -1
	}
	for r := 0; r < rows; r++ {
		m[r*cols+3] = 0
	}
	if err := w.Fence(ctx, 0); err != nil {
		return err
	}
	col := mpi.Vector{Count: rows, BlockLen: 1, Stride: cols}
	out := make([]int32, rows)
	ones := make([]int32, rows)
	pairs := make([]int32, 2*rows)
	for i := range out {
		out[i], ones[i] = int32(me*100+i), 1
	}
	for i := range pairs {
		pairs[i] = int32(me*1000 + i)
	}
	if err := mpi.PutVector(w, out, right, 1, col); err != nil {
		return err
	}
	if err := mpi.PutVector(w, pairs, right, 5, mpi.Vector{Count: rows, BlockLen: 2, Stride: cols}); err != nil {
		return err
	}
	for r := 0; r < n; r++ {
		if err := mpi.AccumulateVector(w, ones, r, 3, col, mpi.Sum); err != nil {
			return err
		}
	}
	if err := mpi.PutVector(w, out, right, 2, mpi.Vector{Count: rows, BlockLen: 1, Stride: cols + 1}); !errors.Is(err, mpi.ErrRMARange) {
		return fmt.Errorf("vector beyond the window: %v, want ErrRMARange", err)
	}
	if err := mpi.PutVector(w, out, right, 2, mpi.Vector{Count: rows, BlockLen: 2, Stride: 1}); !errors.Is(err, mpi.ErrCount) {
		return fmt.Errorf("overlapping vector: %v, want ErrCount", err)
	}
	if err := w.Fence(ctx, 0); err != nil {
		return err
	}
	back := make([]int32, rows)
	if err := mpi.GetVector(w, back, left, 1, col); err != nil {
		return err
	}
	fetched := make([]int32, rows)
	if err := mpi.GetAccumulateVector(w, nil, fetched, 0, 3, col, mpi.NoOp); err != nil {
		return err
	}
	if err := w.Fence(ctx, mpi.ModeNoSucceed); err != nil {
		return err
	}
	for r := 0; r < rows; r++ {
		for k := 0; k < cols; k++ {
			v, want := m[r*cols+k], int32(-1)
			switch k {
			case 1:
				want = int32(left*100 + r)
			case 3:
				want = int32(n)
			case 5, 6:
				want = int32(left*1000 + 2*r + k - 5)
			}
			if v != want {
				return fmt.Errorf("row %d column %d = %d, want %d", r, k, v, want)
			}
		}
		ll := (left + n - 1) % n
		if back[r] != int32(ll*100+r) || fetched[r] != int32(n) {
			return fmt.Errorf("row %d: got %d (want %d), fetched %d (want %d)", r, back[r], ll*100+r, fetched[r], n)
		}
	}
	return w.Free(ctx)
}

// rmaPrograms are the window checks that run on every adapter and rank
// count, in this process (runRMA) and as processes (TestWinProcs).
var rmaPrograms = []struct {
	name string
	fn   func(ctx context.Context, c *mpi.Comm) error
}{
	{"FenceRing", rmaFenceRing},
	{"LockCounter", rmaLockCounter},
	{"FetchAndOp", rmaFetchAndOp},
	{"CompareAndSwapMutex", rmaCompareAndSwapMutex},
	{"Accumulate", rmaAccumulate},
	{"GetAccumulate", rmaGetAccumulate},
	{"Goroutines", rmaGoroutines},
	{"PSCWRing", rmaPSCWRing},
	{"Requests", rmaRequests},
	{"Shared", rmaShared},
	{"Dynamic", rmaDynamic},
	{"Vector", rmaVector},
	{"MixedAtomicity", rmaMixedAtomicity},
	{"BusyTarget", rmaBusyTarget},
}

// rmaProgram returns the rank program of TestWinProcs called name: "all"
// runs every window check in turn; "hosts" checks shared windows on a job
// whose ranks the launcher places on two hosts.
func rmaProgram(name string) func(ctx context.Context, c *mpi.Comm) error {
	switch name {
	case "all":
		return func(ctx context.Context, c *mpi.Comm) error {
			for _, p := range rmaPrograms {
				if err := p.fn(ctx, c); err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
			}
			return nil
		}
	case "hosts":
		return rmaHosts
	case "busy":
		return rmaBusyTarget
	case "dead":
		return rmaDeadTarget
	}
	return nil
}

// rmaHosts, on ranks the launcher places on two hosts: a shared window
// over all of them is refused on every rank, clearly; one over the ranks
// of each host, split by SplitType, works.
func rmaHosts(ctx context.Context, c *mpi.Comm) error {
	if _, err := mpi.WinAllocateShared(ctx, c, 64, 8); !errors.Is(err, mpi.ErrWin) {
		return fmt.Errorf("shared window over two hosts: %v, want ErrWin", err)
	}
	host, err := c.SplitType(ctx, mpi.SplitShared, 0)
	if err != nil {
		return err
	}
	if host.Size() == c.Size() {
		return fmt.Errorf("the host's communicator has all %d ranks", c.Size())
	}
	return rmaShared(ctx, host)
}

// The window checks with ranks as processes, over shared memory and over
// TCP, on 1, 2, 4 and 8 ranks; and shared windows on a job the launcher
// spreads over two hosts.
func TestWinProcs(t *testing.T) {
	for _, over := range []string{"shm", "tcp"} {
		for _, n := range []int{1, 2, 4, 8} {
			t.Run(fmt.Sprintf("%s/%d", over, n), func(t *testing.T) {
				runProcs(t, n, "rma:all", "AMIGO_TRANSPORT="+over)
			})
		}
	}
	t.Run("two-hosts", func(t *testing.T) {
		runProcsOn(t, []int{0, 0, 1, 1}, 4, "rma:hosts", "AMIGO_TRANSPORT=tcp")
	})
}

// Many-element accumulates and one-element atomics on the same elements at
// once, under LockAll: even ranks add to each element of rank 0's vector
// with FetchAndOp (remote atomics), odd ranks add ones to the whole vector
// with Accumulate (one message rank 0 applies), and some epochs have only
// the latter (rank 0 then updates plainly). No update is lost.
func TestWinMixedAtomicity(t *testing.T) { runRMA(t, rmaMixedAtomicity) }

func rmaMixedAtomicity(ctx context.Context, c *mpi.Comm) error {
	const elems, rounds, epochs = 64, 30, 4
	me, n := c.Rank(), c.Size()
	w, err := mpi.WinAllocate(ctx, c, elems*8, 8)
	if err != nil {
		return err
	}
	clear(w.Memory())
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	ones := make([]int64, elems)
	for i := range ones {
		ones[i] = 1
	}
	want := int64(0)
	for e := 0; e < epochs; e++ {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		fops := e%2 == 0 // odd epochs: accumulates only
		for r := 0; r < rounds; r++ {
			if me%2 == 1 || !fops {
				if err := mpi.Accumulate(w, ones, 0, 0, mpi.Sum); err != nil {
					return err
				}
			} else {
				var old int64
				for i := 0; i < elems; i++ {
					if err := mpi.FetchAndOp(w, int64(1), &old, 0, i, mpi.Sum); err != nil {
						return err
					}
				}
			}
			if err := w.FlushAll(ctx); err != nil {
				return err
			}
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
		want += int64(rounds * n)
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if me == 0 {
			mem := mpi.View[int64](w.Memory())
			for i := range mem {
				if v := atomic.LoadInt64(&mem[i]); v != want {
					return fmt.Errorf("epoch %d: element %d = %d, want %d", e, i, v, want)
				}
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	return w.Free(ctx)
}

// The handshake between remote atomics and the owner's plain updates, step
// by step on two ranks: an epoch of accumulates alone is applied plainly;
// once rank 1 uses a remote atomic on rank 0's window, rank 0 applies
// atomically until that epoch ends; and an origin that starts using
// atomics while rank 0 is inside a plain update (the bit set here by
// hand) waits until the update is done before its atomic touches memory.
func TestWinAtomicsHandshake(t *testing.T) {
	// A rescue (a slow reply taken for a busy target) would apply the
	// accumulate with atomics: none within the test's time.
	opts := &mpi.Options{AccumulateRescue: int(time.Hour / time.Microsecond)}
	runWith(t, 2, job{opts: opts}, func(ctx context.Context, c *mpi.Comm) error {
		me := c.Rank()
		w, err := mpi.WinAllocate(ctx, c, 64, 8)
		if err != nil {
			return err
		}
		clear(w.Memory())
		users := mpi.WinUsers(w)
		ones := []int64{1, 1, 1, 1}
		epoch := func(fop bool) error {
			if err := w.LockAll(ctx); err != nil {
				return err
			}
			if me == 1 {
				if fop {
					var old int64
					if err := mpi.FetchAndOp(w, int64(1), &old, 0, 7, mpi.Sum); err != nil {
						return err
					}
				}
				if err := mpi.Accumulate(w, ones, 0, 0, mpi.Sum); err != nil {
					return err
				}
			}
			if err := w.UnlockAll(ctx); err != nil {
				return err
			}
			return c.Barrier(ctx)
		}
		if err := epoch(false); err != nil {
			return err
		}
		plain := mpi.WinPlainUpdates(w)
		if me == 0 && plain != 1 {
			return fmt.Errorf("%d plain updates after an epoch of one accumulate, want 1", plain)
		}
		if err := epoch(true); err != nil {
			return err
		}
		if got := mpi.WinPlainUpdates(w); me == 0 && got != plain {
			return fmt.Errorf("a plain update while rank 1 used remote atomics")
		}
		if me == 0 && atomic.LoadUint64(users) != 0 {
			return fmt.Errorf("users word %#x after the epochs ended", atomic.LoadUint64(users))
		}
		// Rank 0 "is inside a plain update": rank 1's FetchAndOp waits.
		if me == 0 {
			atomic.OrUint64(users, mpi.BulkBit)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		mem := mpi.View[int64](w.Memory())
		if me == 1 {
			if err := w.LockAll(ctx); err != nil {
				return err
			}
			var old int64
			if err := mpi.FetchAndOp(w, int64(5), &old, 0, 6, mpi.Sum); err != nil {
				return err
			}
			if err := w.UnlockAll(ctx); err != nil {
				return err
			}
		} else {
			for atomic.LoadUint64(users) != mpi.BulkBit|1 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("rank 1 never registered: %w", err)
				}
				runtime.Gosched()
			}
			if v := atomic.LoadInt64(&mem[6]); v != 0 {
				return fmt.Errorf("rank 1's atomic landed (%d) inside a plain update", v)
			}
			atomic.AddUint64(users, ^uint64(mpi.BulkBit-1))
			for atomic.LoadInt64(&mem[6]) != 5 {
				if err := ctx.Err(); err != nil {
					return fmt.Errorf("rank 1's atomic never landed: %w", err)
				}
				runtime.Gosched()
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		return w.Free(ctx)
	})
}
