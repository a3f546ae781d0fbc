package main

import (
	"fmt"
	"time"

	"github.com/amigo-hpc/amigo/mpi"
)

// The OSU collective benchmarks over package mpi: osu_allreduce,
// osu_reduce, osu_bcast, osu_allgather, osu_alltoall and osu_barrier. As
// OSU does, each size is timed over its iterations, one call at a time with
// a barrier after each (not timed), after a warm-up; each rank averages its
// own times and the row gives the average over the ranks (latency_us), and
// the least and largest rank averages. Elements are float64 (MPI_DOUBLE):
// size is in bytes, so 8 doubles are size 64; reductions sum; roots are
// rank 0.

var (
	fMinLat = Field{"Min Latency(us)", "min_latency_us"}
)

func init() {
	for _, c := range []struct {
		name, title, doc string
		run              func(w *mpi.Comm, e *Env, send, recv []float64) func() error
		sizes            bool
	}{
		{"allreduce", "Allreduce Latency Test", "osu_allreduce: Allreduce of doubles, Sum", runAllreduce, true},
		{"reduce", "Reduce Latency Test", "osu_reduce: Reduce of doubles to rank 0, Sum", runReduce, true},
		{"bcast", "Broadcast Latency Test", "osu_bcast: Bcast from rank 0", runBcast, true},
		{"allgather", "Allgather Latency Test", "osu_allgather: Allgather, size per rank", runAllgather, true},
		{"alltoall", "All-to-All Personalized Exchange Latency Test", "osu_alltoall: Alltoall of package mpi, size per pair", runAlltoall, true},
		{"barrier", "Barrier Latency Test", "osu_barrier: Barrier", runBarrier, false},
	} {
		register(Benchmark{Name: c.name, Doc: c.doc, MinRanks: 1, Run: func(e *Env) error {
			return collBench(e, c.title, c.sizes, c.run)
		}})
	}
}

func runAllreduce(w *mpi.Comm, e *Env, send, recv []float64) func() error {
	return func() error { return mpi.Allreduce(e.Deadline, w, send, recv, mpi.Sum) }
}

func runReduce(w *mpi.Comm, e *Env, send, recv []float64) func() error {
	return func() error { return mpi.Reduce(e.Deadline, w, send, recv, mpi.Sum, 0) }
}

func runBcast(w *mpi.Comm, e *Env, send, _ []float64) func() error {
	return func() error { return mpi.Bcast(e.Deadline, w, send, 0) }
}

func runAllgather(w *mpi.Comm, e *Env, send, recv []float64) func() error {
	return func() error { return mpi.Allgather(e.Deadline, w, send, recv) }
}

func runAlltoall(w *mpi.Comm, e *Env, send, recv []float64) func() error {
	return func() error { return mpi.Alltoall(e.Deadline, w, send, recv) }
}

func runBarrier(w *mpi.Comm, e *Env, _, _ []float64) func() error {
	return func() error { return w.Barrier(e.Deadline) }
}

// collBench measures one collective at every size.
func collBench(e *Env, title string, sized bool, mk func(w *mpi.Comm, e *Env, send, recv []float64) func() error) error {
	w, err := mpi.World(e.Deadline, e.Ctx, nil)
	if err != nil {
		return err
	}
	e.Header(title, fAvgLat, fMinLat, fMaxLat)
	sizes := []int{0}
	if sized {
		sizes = sizes[:0]
		for _, s := range e.Sizes(false) {
			if s >= 8 {
				sizes = append(sizes, s)
			}
		}
		if len(sizes) == 0 {
			return fmt.Errorf("sizes %d to %d: the collectives move doubles, 8 bytes or more", e.Opts.MinSize, e.Opts.MaxSize)
		}
	}
	maxCount := sizes[len(sizes)-1] / 8
	// alltoall and allgather send or receive a block per rank.
	send := make([]float64, maxCount*e.Size)
	recv := make([]float64, maxCount*e.Size)
	for i := range send {
		send[i] = float64(i%1000) + float64(e.Rank)
	}
	for _, size := range sizes {
		n := size / 8
		var s, r []float64
		switch e.bench {
		case "allgather":
			s, r = send[:n], recv[:n*e.Size]
		case "alltoall":
			s, r = send[:n*e.Size], recv[:n*e.Size]
		default:
			s, r = send[:n], recv[:n]
		}
		op := mk(w, e, s, r)
		iters, warm := e.Iters(size, collCounts)
		if err := w.Barrier(e.Deadline); err != nil {
			return err
		}
		var total time.Duration
		for i := 0; i < iters+warm; i++ {
			t0 := time.Now()
			if err := op(); err != nil {
				return fmt.Errorf("size %d: %w", size, err)
			}
			if i >= warm {
				total += time.Since(t0)
			}
			if err := w.Barrier(e.Deadline); err != nil {
				return err
			}
		}
		avg := us(total) / float64(iters)
		all, err := e.Gather(avg)
		if err != nil {
			return err
		}
		if e.Rank == 0 {
			sum, lo, hi := 0.0, all[0], all[0]
			for _, v := range all {
				sum += v
				lo, hi = min(lo, v), max(hi, v)
			}
			e.Row(size, sum/float64(len(all)), lo, hi)
		}
	}
	return nil
}
