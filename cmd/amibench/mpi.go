package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo/mpi"
)

// Point-to-point benchmarks over package mpi: osu_latency with Send and
// Recv, and osu_mbw_mr's message rate with windows of Isend and Irecv, from
// one goroutine of each rank or from several goroutines of each rank at
// once on one communicator (MPI_THREAD_MULTIPLE, each goroutine on a tag of
// its own).

func init() {
	register(Benchmark{Name: "mpi_latency", Doc: "one-way latency by ping-pong of mpi Send and Recv between ranks 0 and 1 (osu_latency over package mpi)", Run: mpiLatency})
	register(Benchmark{Name: "mpi_rate", Doc: "message rate of windows of mpi Isend and Irecv from rank 0 to rank 1, one goroutine a rank (osu_mbw_mr over package mpi)", Run: func(e *Env) error { return mpiRate(e, 1) }})
	register(Benchmark{Name: "mpi_mt_rate", Doc: "mpi_rate from 4 goroutines of each rank at once on one communicator, each goroutine on a tag of its own: the sum of their rates", Run: func(e *Env) error { return mpiRate(e, mtGoroutines) }})
}

// mtGoroutines is the goroutines per rank of mpi_mt_rate.
const mtGoroutines = 4

// rateMaxSize is the largest message of the rate benchmarks.
const rateMaxSize = 64 << 10

func mpiLatency(e *Env) error {
	w, err := mpi.World(e.Deadline, e.Ctx, nil)
	if err != nil {
		return err
	}
	buf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	e.Header("MPI Latency Test", fLatency)
	ctx := e.Deadline
	for _, size := range e.Sizes(true) {
		iters, warm := e.Iters(size, latCounts)
		if err := w.Barrier(ctx); err != nil {
			return err
		}
		if e.Rank > 1 {
			continue
		}
		b, peer := buf[:size], 1-e.Rank
		var start time.Time
		for i := 0; i < iters+warm; i++ {
			if i == warm {
				e.CountAllocs()
				start = time.Now()
			}
			if e.Rank == 0 {
				if err := w.Send(ctx, b, peer, 1); err != nil {
					return err
				}
				if _, err := w.Recv(ctx, b, peer, 1); err != nil {
					return err
				}
			} else {
				if _, err := w.Recv(ctx, b, peer, 1); err != nil {
					return err
				}
				if err := w.Send(ctx, b, peer, 1); err != nil {
					return err
				}
			}
		}
		elapsed := time.Since(start)
		e.AllocsPer(2 * iters)
		e.Row(size, us(elapsed)/float64(2*iters))
	}
	return w.Barrier(ctx)
}

// mpiRate: g goroutines of rank 0 each send windows of e.Opts.Window
// messages (Isend, then Waitall) to the same goroutine of rank 1, which
// receives them (Irecv, Waitall) and answers each window with an empty
// message, on the goroutine's tag.
func mpiRate(e *Env, g int) error {
	w, err := mpi.World(e.Deadline, e.Ctx, nil)
	if err != nil {
		return err
	}
	win := e.Opts.Window
	var sizes []int
	for _, s := range e.Sizes(false) {
		if s <= rateMaxSize {
			sizes = append(sizes, s)
		}
	}
	if len(sizes) == 0 {
		return fmt.Errorf("sizes %d to %d: the message rate is measured up to %d bytes", e.Opts.MinSize, e.Opts.MaxSize, rateMaxSize)
	}
	// Every message of a window has a buffer of its own.
	bufs := make([][]byte, g)
	for i := range bufs {
		if bufs[i], err = e.Buffer(sizes[len(sizes)-1] * win); err != nil {
			return err
		}
	}
	title := "MPI Message Rate Test"
	if g > 1 {
		title = fmt.Sprintf("MPI Message Rate Test, %d goroutines a rank", g)
	}
	e.Header(title, fMBs, fMsgRate)
	ctx := e.Deadline
	for _, size := range sizes {
		iters, warm := e.Iters(size, bwCounts)
		// A window of small messages is short: more of them, as
		// osu_mbw_mr's 64-message windows run 100 times over a
		// longer-lived job.
		if size <= largeSize && e.Opts.Iterations == 0 {
			iters *= 10
		}
		if err := w.Barrier(ctx); err != nil {
			return err
		}
		if e.Rank > 1 {
			if err := w.Barrier(ctx); err != nil {
				return err
			}
			continue
		}
		// The warm-up windows, then the timed ones, each goroutine
		// started with the others.
		if err := rateRun(g, func(k int) error { return rateWindows(ctx, w, e.Rank, k, bufs[k], size, win, warm) }); err != nil {
			return fmt.Errorf("size %d: %w", size, err)
		}
		if err := w.Barrier(ctx); err != nil {
			return err
		}
		e.CountAllocs()
		t0 := time.Now()
		if err := rateRun(g, func(k int) error { return rateWindows(ctx, w, e.Rank, k, bufs[k], size, win, iters) }); err != nil {
			return fmt.Errorf("size %d: %w", size, err)
		}
		elapsed := time.Since(t0)
		msgs := g * win * iters
		e.AllocsPer(msgs)
		sec := elapsed.Seconds()
		e.Row(size, float64(msgs*size)/sec/1e6, float64(msgs)/sec)
	}
	return w.Barrier(ctx)
}

// rateRun runs fn(k) for k below g, each on a goroutine of its own, and
// returns the first error.
func rateRun(g int, fn func(k int) error) error {
	errs := make([]error, g)
	var wg sync.WaitGroup
	for k := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = fn(k)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// rateWindows runs n windows of win messages of size bytes on tag k, rank
// 0 sending and rank 1 receiving, each window answered by an empty message.
func rateWindows(ctx context.Context, w *mpi.Comm, rank, k int, buf []byte, size, win, n int) error {
	reqs := make([]mpi.Request, win)
	var ack [1]byte
	peer := 1 - rank
	for i := 0; i < n; i++ {
		for j := range reqs {
			b := buf[j*size : (j+1)*size]
			var err error
			if rank == 0 {
				reqs[j], err = w.Isend(b, peer, k)
			} else {
				reqs[j], err = w.Irecv(b, peer, k)
			}
			if err != nil {
				return err
			}
		}
		if err := mpi.Waitall(ctx, reqs, nil); err != nil {
			return err
		}
		if rank == 0 {
			if _, err := w.Recv(ctx, ack[:0], peer, k); err != nil {
				return err
			}
		} else if err := w.Send(ctx, ack[:0], peer, k); err != nil {
			return err
		}
	}
	return nil
}
