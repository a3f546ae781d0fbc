package mpi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// worlds opens n in-process ranks and their world communicators, each
// World called on a goroutine of its own (it is collective); the ranks are
// closed when b ends.
func worlds(b *testing.B, n int) []*mpi.Comm {
	cl, err := amigo.NewLocal(n, amigo.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		for _, c := range cl {
			c.Close()
		}
	})
	ctx := context.Background()
	worlds := make([]*mpi.Comm, n)
	werrs := make([]error, n)
	var wg sync.WaitGroup
	for r := range cl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worlds[r], werrs[r] = mpi.World(ctx, cl[r].Context(0), nil)
		}()
	}
	wg.Wait()
	for _, err := range werrs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return worlds
}

// spmd runs fn on n in-process ranks, rank 0 on the benchmark's goroutine.
func spmd(b *testing.B, n int, fn func(w *mpi.Comm, iters int) error) {
	ctx := context.Background()
	worlds := worlds(b, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for r := 1; r < n; r++ {
		go func() { errs <- fn(worlds[r], b.N) }()
	}
	b.ResetTimer()
	if err := fn(worlds[0], b.N); err != nil {
		b.Fatal(err)
	}
	for r := 1; r < n; r++ {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	for _, w := range worlds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = mpi.Finalize(ctx, w)
		}()
	}
	wg.Wait()
}

// BenchmarkAllreduce: ranks as goroutines over the in-process adapter, so
// it measures the layer's own cost more than a transport's.
func BenchmarkAllreduce(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		for _, count := range []int{8, 1 << 17} {
			b.Run(fmt.Sprintf("ranks=%d/doubles=%d", n, count), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(8 * count))
				spmd(b, n, func(w *mpi.Comm, iters int) error {
					send, recv := make([]float64, count), make([]float64, count)
					ctx := context.Background()
					for i := 0; i < iters; i++ {
						if err := mpi.Allreduce(ctx, w, send, recv, mpi.Sum); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}

// BenchmarkPingPong: one round trip of a small message with Send and Recv.
func BenchmarkPingPong(b *testing.B) {
	b.ReportAllocs()
	spmd(b, 2, func(w *mpi.Comm, iters int) error {
		buf := make([]float64, 8)
		ctx := context.Background()
		for i := 0; i < iters; i++ {
			if w.Rank() == 0 {
				if err := mpi.Send(ctx, w, buf, 1, 0); err != nil {
					return err
				}
				if _, err := mpi.Recv(ctx, w, buf, 1, 0); err != nil {
					return err
				}
			} else {
				if _, err := mpi.Recv(ctx, w, buf, 0, 0); err != nil {
					return err
				}
				if err := mpi.Send(ctx, w, buf, 0, 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// BenchmarkAllreduceLockstep: an allreduce of 8 doubles between two
// in-process ranks that one goroutine advances in turn (Iallreduce, then
// Test on each until both completed): no second core and no waiting, so it
// counts the layer's and the AMI's own instructions per collective.
func BenchmarkAllreduceLockstep(b *testing.B) {
	w := worlds(b, 2)
	send := [2][]float64{make([]float64, 8), make([]float64, 8)}
	recv := [2][]float64{make([]float64, 8), make([]float64, 8)}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var q [2]mpi.Request
		for r := range q {
			var err error
			if q[r], err = mpi.Iallreduce(w[r], send[r], recv[r], mpi.Sum); err != nil {
				b.Fatal(err)
			}
		}
		for done := 0; done < 2; {
			done = 0
			for r := range q {
				ok, _, err := q[r].Test()
				if err != nil {
					b.Fatal(err)
				}
				if ok {
					done++
				}
			}
		}
	}
}

// BenchmarkMessageRate: windows of 64 small messages (8 bytes, Isend and
// Irecv, then Waitall) from rank 0 to rank 1, sent by one goroutine per
// rank or by 4, each pair of goroutines on its own tag, with an empty
// acknowledgement per window. msgs/s counts the messages of all
// goroutines.
func BenchmarkMessageRate(b *testing.B) {
	const window = 64
	for _, gs := range []int{1, 4} {
		b.Run(fmt.Sprintf("goroutines=%d", gs), func(b *testing.B) {
			b.ReportAllocs()
			spmd(b, 2, func(w *mpi.Comm, iters int) error {
				ctx := context.Background()
				errs := make(chan error, gs)
				for g := 0; g < gs; g++ {
					go func() {
						errs <- rateWindows(ctx, w, g, window, iters)
					}()
				}
				var first error
				for g := 0; g < gs; g++ {
					if err := <-errs; err != nil && first == nil {
						first = err
					}
				}
				return first
			})
			b.ReportMetric(float64(gs*window)*float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// rateWindows is one goroutine of BenchmarkMessageRate.
func rateWindows(ctx context.Context, w *mpi.Comm, tag, window, iters int) error {
	bufs := make([][]byte, window)
	for i := range bufs {
		bufs[i] = make([]byte, 8)
	}
	reqs := make([]mpi.Request, window)
	for i := 0; i < iters; i++ {
		for j := range reqs {
			var err error
			if w.Rank() == 0 {
				reqs[j], err = w.Isend(bufs[j], 1, tag)
			} else {
				reqs[j], err = w.Irecv(bufs[j], 0, tag)
			}
			if err != nil {
				return err
			}
		}
		if err := mpi.Waitall(ctx, reqs, nil); err != nil {
			return err
		}
		if w.Rank() == 0 {
			if _, err := w.Recv(ctx, nil, 1, tag); err != nil {
				return err
			}
		} else if err := w.Send(ctx, nil, 0, tag); err != nil {
			return err
		}
	}
	return nil
}
