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

// Over shared memory, into a window of WinAllocate, a Put, a Get and a
// FetchAndOp are complete when they return (the AMI copied, or performed
// the atomic, in the target's mapped window), so that Flush owes nothing;
// with the Flush they allocate nothing.
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
			var old int64
			ops := []struct {
				name string
				do   func() error
			}{
				{"Put of 8 bytes", func() error { return w.Put(buf[:8], 1, 8) }},
				{"Put of 4 KiB", func() error { return w.Put(buf, 1, 0) }},
				{"Get of 64 bytes", func() error { return w.Get(buf[:64], 1, 64) }},
				{"FetchAndOp", func() error { return mpi.FetchAndOp(w, int64(1), &old, 1, 4088, mpi.Sum) }},
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
