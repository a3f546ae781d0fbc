package mpi_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/mpi"
)

// A rescue of a strided accumulate writes back only the blocks the
// accumulate covers. Rank 0 is busy outside mpi, so rank 1's accumulate of
// every other element (a Vector) is taken back and applied by rank 1 on a
// copy of rank 0's memory. Between the copy and its return, rank 0 stores
// into the gaps (as another origin's Put could): those values must
// survive.
func TestWinRescueStridedKeepsGaps(t *testing.T) {
	const n = 8
	// 0: rank 0 not yet busy; 4: rank 0 is busy; 1: rank 1's copy is
	// applied; 2: the gaps are written; 3: rank 1's epoch is over.
	var stage atomic.Int32
	mpi.SetRescueHook(func() {
		stage.Store(1)
		for end := time.Now().Add(10 * time.Second); stage.Load() == 1 && time.Now().Before(end); {
			runtime.Gosched()
		}
	})
	defer mpi.SetRescueHook(nil)
	opts := &mpi.Options{AccumulateRescue: 2000} // 2 ms
	runWith(t, 2, job{opts: opts}, func(ctx context.Context, c *mpi.Comm) error {
		w, err := mpi.WinAllocate(ctx, c, 8*n, 8)
		if err != nil {
			return err
		}
		mem := mpi.View[int64](w.Memory())
		clear(mem)
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			// Busy, calling nothing of mpi, until rank 1's epoch is over.
			stage.Store(4)
			for stage.Load() != 3 {
				if stage.Load() == 1 {
					for i := 1; i < n; i += 2 {
						atomic.StoreInt64(&mem[i], 77)
					}
					stage.Store(2)
				}
				if ctx.Err() != nil {
					return fmt.Errorf("rank 1's epoch did not end: %w", ctx.Err())
				}
				runtime.Gosched()
			}
		} else {
			// Rank 0 must be busy before the epoch starts: inside the
			// Barrier it would answer at once.
			for stage.Load() != 4 {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				runtime.Gosched()
			}
			ones := []int64{1, 1, 1, 1}
			if err := w.Lock(ctx, mpi.LockShared, 0); err != nil {
				return err
			}
			if err := mpi.AccumulateVector(w, ones, 0, 0, mpi.Vector{Count: n / 2, BlockLen: 1, Stride: 2}, mpi.Sum); err != nil {
				return err
			}
			err := w.Unlock(ctx, 0)
			rescues := mpi.WinRescues(w)
			stage.Store(3)
			if err != nil {
				return err
			}
			if rescues == 0 {
				return fmt.Errorf("no rescue: rank 0 answered while it was busy")
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if c.Rank() == 0 {
			want := []int64{1, 77, 1, 77, 1, 77, 1, 77}
			for i, v := range mem {
				if v != want[i] {
					return fmt.Errorf("window %v after the rescue, want %v", mem, want)
				}
			}
		}
		return w.Free(ctx)
	})
}
