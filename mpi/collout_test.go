package mpi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/mpi"
)

// A blocking collective whose last step on a rank is a send returns with
// that message on its way, as a blocking Send does
// (TestSendLeavesWithoutAnotherCall): rank 0 runs a series of collectives
// whose part on it ends with a send to rank 1, then makes no further call
// until rank 1 has finished them all. The TCP adapter's own goroutines are
// held off for the test's length, so that what reaches rank 1 is what the
// collectives moved.
func TestCollectiveLeavesWithoutAnotherCall(t *testing.T) {
	const rounds = 64
	kinds := []struct {
		name string
		run  func(ctx context.Context, w *mpi.Comm, i int) error
	}{
		{"bcast", func(ctx context.Context, w *mpi.Comm, i int) error {
			buf := []int64{int64(i)}
			if err := mpi.Bcast(ctx, w, buf, 0); err != nil {
				return err
			}
			if buf[0] != int64(i) {
				return fmt.Errorf("bcast %d carries %d", i, buf[0])
			}
			return nil
		}},
		{"bcast-large", func(ctx context.Context, w *mpi.Comm, i int) error {
			buf := make([]int64, 4096)
			if w.Rank() == 0 {
				buf[len(buf)-1] = int64(i)
			}
			if err := mpi.Bcast(ctx, w, buf, 0); err != nil {
				return err
			}
			if buf[len(buf)-1] != int64(i) {
				return fmt.Errorf("bcast %d carries %d", i, buf[len(buf)-1])
			}
			return nil
		}},
		{"reduce", func(ctx context.Context, w *mpi.Comm, i int) error {
			send, recv := []int64{int64(i)}, []int64{0}
			if err := mpi.Reduce(ctx, w, send, recv, mpi.Sum, 1); err != nil {
				return err
			}
			if w.Rank() == 1 && recv[0] != int64(2*i) {
				return fmt.Errorf("reduce %d gives %d", i, recv[0])
			}
			return nil
		}},
		{"gather", func(ctx context.Context, w *mpi.Comm, i int) error {
			send, recv := []int64{int64(i + w.Rank())}, []int64{0, 0}
			if err := mpi.Gather(ctx, w, send, recv, 1); err != nil {
				return err
			}
			if w.Rank() == 1 && (recv[0] != int64(i) || recv[1] != int64(i+1)) {
				return fmt.Errorf("gather %d gives %v", i, recv)
			}
			return nil
		}},
		{"scatter", func(ctx context.Context, w *mpi.Comm, i int) error {
			send, recv := []int64{int64(i), int64(i + 1)}, []int64{0}
			if err := mpi.Scatter(ctx, w, send, recv, 0); err != nil {
				return err
			}
			if recv[0] != int64(i+w.Rank()) {
				return fmt.Errorf("scatter %d gives %d", i, recv[0])
			}
			return nil
		}},
		{"ibcast-test", func(ctx context.Context, w *mpi.Comm, i int) error {
			// Rank 0 tests its request until it completes, rank 1 waits.
			buf := []int64{int64(i)}
			r, err := mpi.Ibcast(w, buf, 0)
			if err != nil {
				return err
			}
			if w.Rank() == 1 {
				_, err := r.Wait(ctx)
				if err == nil && buf[0] != int64(i) {
					err = fmt.Errorf("ibcast %d carries %d", i, buf[0])
				}
				return err
			}
			for {
				done, _, err := r.Test()
				if done || err != nil {
					return err
				}
			}
		}},
		{"ibcast-testall", func(ctx context.Context, w *mpi.Comm, i int) error {
			// As ibcast-test, with Testall and Testany.
			buf := []int64{int64(i)}
			r, err := mpi.Ibcast(w, buf, 0)
			if err != nil {
				return err
			}
			reqs := []mpi.Request{r}
			if w.Rank() == 1 {
				return mpi.Waitall(ctx, reqs, nil)
			}
			for {
				var done bool
				var err error
				if i%2 == 0 {
					done, err = mpi.Testall(reqs, nil)
				} else {
					_, done, _, err = mpi.Testany(reqs)
				}
				if done || err != nil {
					return err
				}
			}
		}},
		{"ssend", func(ctx context.Context, w *mpi.Comm, i int) error {
			// Rank 0's Recv acknowledges rank 1's Ssend.
			buf := []byte{byte(i)}
			if w.Rank() == 1 {
				return w.Ssend(ctx, buf, 0, 3)
			}
			if _, err := w.Recv(ctx, buf, 1, 3); err != nil {
				return err
			}
			if buf[0] != byte(i) {
				return fmt.Errorf("ssend %d carries %d", i, buf[0])
			}
			return nil
		}},
		{"ibcast", func(ctx context.Context, w *mpi.Comm, i int) error {
			buf := []int64{int64(i)}
			r, err := mpi.Ibcast(w, buf, 0)
			if err != nil {
				return err
			}
			if _, err := r.Wait(ctx); err != nil {
				return err
			}
			if buf[0] != int64(i) {
				return fmt.Errorf("ibcast %d carries %d", i, buf[0])
			}
			return nil
		}},
	}
	// Generalised active target: rank 0 puts into rank 1's window in an
	// access epoch of its own each round; its Complete's notice ends rank
	// 1's Wait. Each rank keeps its window in its own element.
	var wins [2]*mpi.Win
	kinds = append(kinds, struct {
		name string
		run  func(ctx context.Context, w *mpi.Comm, i int) error
	}{"pscw", func(ctx context.Context, w *mpi.Comm, i int) error {
		me := w.Rank()
		if i == 0 {
			win, err := mpi.WinAllocate(ctx, w, 8, 8)
			if err != nil {
				return err
			}
			wins[me] = win
		}
		win := wins[me]
		all, err := w.Group()
		if err != nil {
			return err
		}
		other, err := all.Incl([]int{1 - me})
		if err != nil {
			return err
		}
		if me == 0 {
			if err := win.Start(ctx, other, 0); err != nil {
				return err
			}
			if err := mpi.Put(win, []int64{int64(i)}, 1, 0); err != nil {
				return err
			}
			if err := win.Complete(ctx); err != nil {
				return err
			}
		} else {
			if err := win.Post(other, 0); err != nil {
				return err
			}
			if err := win.Wait(ctx); err != nil {
				return err
			}
			if got := mpi.View[int64](win.Memory())[0]; got != int64(i) {
				return fmt.Errorf("epoch %d: the window holds %d", i, got)
			}
		}
		return nil
	}})
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, k := range kinds {
			t.Run(over+"/"+k.name, func(t *testing.T) {
				done := make(chan struct{})
				runHandoffOff(t, over, func(r *amigotest.Rank, w *mpi.Comm) error {
					// Both ranks' links made first (as in
					// TestInlineSendCompletesLocally).
					if err := w.Barrier(r.Deadline); err != nil {
						return err
					}
					for i := 0; i < rounds; i++ {
						if err := k.run(r.Deadline, w, i); err != nil {
							return err
						}
					}
					if w.Rank() == 1 {
						close(done)
					} else {
						// No call into the library until rank 1 is done.
						select {
						case <-done:
						case <-time.After(10 * time.Second):
							return fmt.Errorf("rank 1 did not finish %d %s while rank 0 made no call", rounds, k.name)
						}
					}
					if win := wins[w.Rank()]; win != nil {
						wins[w.Rank()] = nil
						return win.Free(r.Deadline)
					}
					return nil
				})
			})
		}
	}
}
