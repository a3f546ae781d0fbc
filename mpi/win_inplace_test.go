package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/mpi"
)

// Passive target the way OSU's latency tests use it: under one LockAll,
// every rank puts into its right neighbour's window (WinAllocate; over
// shared memory the AMI copies into the mapped window at once) and flushes,
// element by element and as a whole, between guard bytes nobody may touch;
// gets them back; and counts with FetchAndOp on rank 0. A Put or Get
// outside the window is refused with ErrRMARange and touches nothing, and
// Rput, Rget and a Put behind a queued Get still complete.
func TestWinPassiveInPlace(t *testing.T) { runRMA(t, rmaPassiveInPlace) }

func rmaPassiveInPlace(ctx context.Context, c *mpi.Comm) error {
	const guard, body, counts = 24, 400, 200
	me, n := c.Rank(), c.Size()
	right, left := (me+1)%n, (me+n-1)%n
	size := 2*guard + body + 8 // the counter is the last 8 bytes
	w, err := mpi.WinAllocate(ctx, c, size, 1)
	if err != nil {
		return err
	}
	mem := w.Memory()
	for i := range mem[:size-8] {
		mem[i] = 0xee
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if err := w.LockAll(ctx); err != nil {
		return err
	}
	pattern := func(r, i int) byte { return byte(r*37 + i*11 + 1) }
	out := make([]byte, body)
	for i := range out {
		out[i] = pattern(me, i)
	}
	// The first half byte by byte, each flushed; the rest at once.
	for i := 0; i < body/2; i++ {
		if err := w.Put(out[i:i+1], right, guard+i); err != nil {
			return err
		}
		if err := w.Flush(ctx, right); err != nil {
			return err
		}
	}
	if err := w.Put(out[body/2:], right, guard+body/2); err != nil {
		return err
	}
	if err := w.Flush(ctx, right); err != nil {
		return err
	}
	// Outside the window: refused, and nothing moves.
	for _, disp := range []int{size - 4, size, -1, 1 << 40} {
		if err := w.Put(out[:8], right, disp); !errors.Is(err, mpi.ErrRMARange) {
			return fmt.Errorf("Put of 8 bytes at %d of a %d-byte window: %v, want ErrRMARange", disp, size, err)
		}
		if err := w.Get(out[:8], right, disp); !errors.Is(err, mpi.ErrRMARange) {
			return fmt.Errorf("Get of 8 bytes at %d of a %d-byte window: %v, want ErrRMARange", disp, size, err)
		}
	}
	var old int64
	for i := 0; i < counts; i++ {
		if err := mpi.FetchAndOp(w, int64(1), &old, 0, size-8, mpi.Sum); err != nil {
			return err
		}
		if err := w.Flush(ctx, 0); err != nil {
			return err
		}
		if old < 0 || old >= counts*int64(n) {
			return fmt.Errorf("FetchAndOp fetched %d, outside [0, %d)", old, counts*n)
		}
	}
	// Rget and Rput complete, and a Put posted behind a Get to the same
	// target lands with it.
	back := make([]byte, 2*guard+body)
	q, err := w.Rget(back, right, 0)
	if err != nil {
		return err
	}
	if _, err := q.Wait(ctx); err != nil {
		return err
	}
	for i, b := range back {
		want := byte(0xee)
		if i >= guard && i < guard+body {
			want = pattern(me, i-guard)
		}
		if b != want {
			return fmt.Errorf("rank %d's window, byte %d: %#x, want %#x", right, i, b, want)
		}
	}
	if err := w.Get(back[:guard], right, 0); err != nil {
		return err
	}
	if err := w.Put(out[:4], right, guard); err != nil {
		return err
	}
	q, err = w.Rput(out[4:8], right, guard+4)
	if err != nil {
		return err
	}
	if _, err := q.Wait(ctx); err != nil {
		return err
	}
	if err := w.FlushAll(ctx); err != nil {
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
	for i, b := range mem[:size-8] {
		want := byte(0xee)
		if i >= guard && i < guard+body {
			want = pattern(left, i-guard)
		}
		if b != want {
			return fmt.Errorf("byte %d of this rank's window: %#x, want %#x (from rank %d)", i, b, want, left)
		}
	}
	if me == 0 {
		if got := mpi.View[int64](mem[size-8:])[0]; got != counts*int64(n) {
			return fmt.Errorf("counter %d after %d FetchAndOps by %d ranks", got, counts, n)
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}

// Over shared memory, into a window of WinAllocate, a Put, a Get, a
// FetchAndOp and an Accumulate are complete when they return (the AMI
// copied, or performed the atomic, in the target's mapped window; the
// origin applied the accumulate there), so that Flush owes nothing; with
// the Flush they allocate nothing.
func TestWinInPlaceShm(t *testing.T) {
	amigotest.Run(t, 2, amigotest.Options{Config: amigo.Config{SpinIterations: 50, YieldIterations: 50}, Timeout: time.Minute, Over: "shm"}, func(r *amigotest.Rank) error {
		ctx := r.Deadline
		c, err := mpi.World(ctx, r.Ctx, nil)
		if err != nil {
			return err
		}
		defer c.Free()
		w, err := mpi.WinAllocate(ctx, c, 4096, 1)
		if err != nil {
			return err
		}
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			buf := make([]byte, 4096)
			ints := make([]int32, 256)
			var old int64
			ops := []struct {
				name string
				do   func() error
			}{
				{"Put of 8 bytes", func() error { return w.Put(buf[:8], 1, 8) }},
				{"Put of 4 KiB", func() error { return w.Put(buf, 1, 0) }},
				{"Get of 64 bytes", func() error { return w.Get(buf[:64], 1, 64) }},
				{"FetchAndOp", func() error { return mpi.FetchAndOp(w, int64(1), &old, 1, 4088, mpi.Sum) }},
				{"Accumulate of 2 int32", func() error { return mpi.Accumulate(w, ints[:2], 1, 256, mpi.Sum) }},
				{"Accumulate of 1 KiB", func() error { return mpi.Accumulate(w, ints, 1, 1024, mpi.Sum) }},
			}
			for _, op := range ops {
				var ferr error
				round := func() {
					if err := op.do(); err != nil && ferr == nil {
						ferr = err
					}
					if err := w.Flush(ctx, 1); err != nil && ferr == nil {
						ferr = err
					}
				}
				for i := 0; i < 50; i++ { // the link connects, free lists fill
					round()
				}
				if err := op.do(); err != nil {
					return err
				}
				if mpi.WinOwed(w, 1) {
					return fmt.Errorf("%s: the Flush after it still has work", op.name)
				}
				if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
					return fmt.Errorf("%s and Flush: %v allocations", op.name, allocs)
				}
				if ferr != nil {
					return fmt.Errorf("%s: %w", op.name, ferr)
				}
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
		return w.Free(ctx)
	})
}

// Accumulates into rank 0's window under LockAll: a vector of int32 every
// rank adds ones to, uint8 elements at an odd offset every rank fetches and
// adds one to (each old value is fetched exactly once), float64 halves,
// between guard bytes nobody may touch. In the first epoch only
// accumulates run (over shared memory the origins apply them in place,
// under the bulk bit); in the second, odd ranks also add to the vector's
// ends with FetchAndOp (remote atomics: while more than one origin counts
// in rank 0's users word, accumulates go to rank 0 as messages). No update
// is lost or doubled, over every adapter.
func TestWinAccumulateInPlace(t *testing.T) {
	for _, over := range []string{"shm", "tcp", "loop"} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/%d", over, n), func(t *testing.T) {
				amigotest.Run(t, n, amigotest.Options{Config: amigo.Config{SpinIterations: 50, YieldIterations: 50}, Timeout: time.Minute, Over: over}, func(r *amigotest.Rank) error {
					c, err := mpi.World(r.Deadline, r.Ctx, nil)
					if err != nil {
						return err
					}
					defer c.Free()
					return accInPlace(r.Deadline, c, over)
				})
			})
		}
	}
}

func accInPlace(ctx context.Context, c *mpi.Comm, over string) error {
	// A window of unit 1: displacements are byte offsets.
	const (
		guard, m, small, floats, iters = 16, 2048, 7, 4, 30
		reps                           = 10 // vector accumulates per iteration
		vecAt                          = guard
		smallAt                        = vecAt + 4*m + guard + 1 // odd: uint8 elements
		floatAt                        = 12288
		size                           = floatAt + 8*floats + guard
	)
	me, n := c.Rank(), c.Size()
	w, err := mpi.WinAllocate(ctx, c, size, 1)
	if err != nil {
		return err
	}
	mem := w.Memory()
	for i := range mem {
		mem[i] = 0xee
	}
	clear(mem[vecAt : vecAt+4*m])
	clear(mem[smallAt : smallAt+small])
	clear(mem[floatAt : floatAt+8*floats])
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	ones := make([]int32, m)
	for i := range ones {
		ones[i] = 1
	}
	incs := []uint8{1, 1, 1, 1, 1, 1, 1}
	halves := []float64{0.5, 0.5, 0.5, 0.5}
	seen := make([]int32, 2*n*iters)
	old := make([]uint8, small)
	fops := 0
	for epoch := 0; epoch < 2; epoch++ {
		if err := w.LockAll(ctx); err != nil {
			return err
		}
		for i := 0; i < iters; i++ {
			for k := 0; k < reps; k++ {
				if err := mpi.Accumulate(w, ones, 0, vecAt, mpi.Sum); err != nil {
					return err
				}
			}
			if err := mpi.Accumulate(w, halves, 0, floatAt, mpi.Sum); err != nil {
				return err
			}
			if err := mpi.GetAccumulate(w, incs, old, 0, smallAt, mpi.Sum); err != nil {
				return err
			}
			if epoch == 1 && me%2 == 1 {
				var prev int32
				for _, at := range []int{vecAt, vecAt + 4*(m-1)} {
					if err := mpi.FetchAndOp(w, int32(1), &prev, 0, at, mpi.Sum); err != nil {
						return err
					}
				}
				fops++
			}
			if err := w.Flush(ctx, 0); err != nil {
				return err
			}
			for j, v := range old {
				if v != old[0] {
					return fmt.Errorf("GetAccumulate fetched %v: element %d differs from element 0", old, j)
				}
			}
			if int(old[0]) < 0 || int(old[0]) >= len(seen) {
				return fmt.Errorf("GetAccumulate fetched %d, outside [0, %d)", old[0], len(seen))
			}
			seen[old[0]]++
		}
		if err := w.UnlockAll(ctx); err != nil {
			return err
		}
		if in := mpi.WinInPlaceUpdates(w); epoch == 0 && over == "shm" && me != 0 && in == 0 {
			return fmt.Errorf("no accumulate applied in place over shared memory")
		} else if over != "shm" && in != 0 {
			return fmt.Errorf("%d accumulates applied in place over %s", in, over)
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
	}
	all := make([]int32, len(seen))
	if err := mpi.Allreduce(ctx, c, seen, all, mpi.Sum); err != nil {
		return err
	}
	for v, k := range all {
		if k != 1 {
			return fmt.Errorf("old value %d fetched %d times", v, k)
		}
	}
	allFops := []int64{0}
	if err := mpi.Allreduce(ctx, c, []int64{int64(fops)}, allFops, mpi.Sum); err != nil {
		return err
	}
	if me == 0 {
		if err := w.Sync(); err != nil {
			return err
		}
		for i, v := range mpi.View[int32](mem[vecAt : vecAt+4*m]) {
			want := int32(2 * n * iters * reps)
			if i == 0 || i == m-1 {
				want += int32(allFops[0])
			}
			if v != want {
				return fmt.Errorf("vector element %d: %d, want %d", i, v, want)
			}
		}
		for i, v := range mem[smallAt : smallAt+small] {
			if int(v) != 2*n*iters {
				return fmt.Errorf("uint8 element %d: %d, want %d", i, v, 2*n*iters)
			}
		}
		for i, v := range mpi.View[float64](mem[floatAt : floatAt+8*floats]) {
			if v != float64(n*iters) {
				return fmt.Errorf("float64 element %d: %v, want %v", i, v, float64(n*iters))
			}
		}
		for _, g := range [][2]int{{0, vecAt}, {vecAt + 4*m, smallAt}, {smallAt + small, floatAt}, {floatAt + 8*floats, size}} {
			for i := g[0]; i < g[1]; i++ {
				if mem[i] != 0xee {
					return fmt.Errorf("guard byte %d: %#x", i, mem[i])
				}
			}
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	return w.Free(ctx)
}
