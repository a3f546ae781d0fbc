package main

import (
	"fmt"
	"time"

	"github.com/amigo-hpc/amigo/mpi"
)

// One-sided latencies through package mpi's windows, with the OSU
// definitions in their default mode (osu_put_latency, osu_get_latency,
// osu_acc_latency, osu_fop_latency: a window made by WinAllocate, one
// passive-target epoch by LockAll, each operation completed by Flush);
// bench/osu/osu_rma.c measures the same under C MPI.
//
//	win_put   Put of size bytes into rank 1's window, then Flush
//	win_get   Get of size bytes from rank 1's window, then Flush
//	win_acc   Accumulate of size/4 int32 with Sum, then Flush
//	win_fop   FetchAndOp of one int64 with Sum, then Flush (8 bytes)
func init() {
	for _, b := range []struct{ name, doc string }{
		{"win_put", "latency of an mpi window Put and Flush, rank 0 into rank 1 (osu_put_latency)"},
		{"win_get", "latency of an mpi window Get and Flush, rank 0 from rank 1 (osu_get_latency)"},
		{"win_acc", "latency of an mpi window Accumulate of int32 with Sum and Flush (osu_acc_latency)"},
		{"win_fop", "latency of an mpi window FetchAndOp of an int64 with Sum and Flush (osu_fop_latency)"},
	} {
		register(Benchmark{Name: b.name, Doc: b.doc, Run: winBench})
	}
}

func winBench(e *Env) error {
	w, err := mpi.World(e.Deadline, e.Ctx, nil)
	if err != nil {
		return err
	}
	var sizes []int
	switch e.bench {
	case "win_fop":
		sizes = []int{8}
	case "win_acc":
		for _, s := range e.Sizes(false) {
			if s >= 4 {
				sizes = append(sizes, s)
			}
		}
	default:
		sizes = e.Sizes(true)
	}
	if len(sizes) == 0 {
		return fmt.Errorf("sizes %d to %d: nothing to measure", e.Opts.MinSize, e.Opts.MaxSize)
	}
	largest := sizes[len(sizes)-1]
	win, err := mpi.WinAllocate(e.Deadline, w, max(largest, 8), 1)
	if err != nil {
		return err
	}
	e.Header("MPI one-sided "+e.bench[4:]+" latency", fLatency)
	buf := make([]byte, max(largest, 8))
	for i := range buf {
		buf[i] = 1
	}
	ints := mpi.View[int32](buf[:largest&^3])
	var fetched int64
	if err := win.LockAll(e.Deadline); err != nil {
		return err
	}
	for _, size := range sizes {
		iters, warm := e.Iters(size, latCounts)
		if err := w.Barrier(e.Deadline); err != nil {
			return err
		}
		if e.Rank == 0 {
			var start time.Time
			for i := 0; i < iters+warm; i++ {
				if i == warm {
					start = time.Now()
				}
				switch e.bench {
				case "win_put":
					err = win.Put(buf[:size], 1, 0)
				case "win_get":
					err = win.Get(buf[:size], 1, 0)
				case "win_acc":
					err = mpi.Accumulate(win, ints[:size/4], 1, 0, mpi.Sum)
				case "win_fop":
					err = mpi.FetchAndOp(win, int64(1), &fetched, 1, 0, mpi.Sum)
				}
				if err == nil {
					err = win.Flush(e.Deadline, 1)
				}
				if err != nil {
					return fmt.Errorf("size %d: %w", size, err)
				}
			}
			e.Row(size, us(time.Since(start))/float64(iters))
		}
		if err := w.Barrier(e.Deadline); err != nil {
			return err
		}
	}
	if err := win.UnlockAll(e.Deadline); err != nil {
		return err
	}
	return win.Free(e.Deadline)
}
