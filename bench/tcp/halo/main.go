// Command halo measures what a new user of package mpi sees first on a
// small machine: ranks on a ring, each holding a block of rows x cols
// doubles, exchange their edge rows (cols doubles) with the ranks above and
// below every iteration (Irecv, Isend, Waitall), with the ranks as processes
// sharing -cpus processors. It prints the time an iteration takes and, from
// each rank's Stats over the timed iterations, the sleeps of its waits and
// how many of them ran to their bound (Config.SleepMax) instead of being
// woken by what they waited for.
//
//	go run ./bench/tcp/halo -transport tcp -n 4 -cpus 2
//
// Run bare, it starts -n copies of itself (internal/launch, as amibench
// does), all allowed onto the first -cpus processors this process may use
// (0: wherever the kernel puts them). Output is one JSON object per line,
// like amibench -json.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/mpi"
)

type options struct {
	ranks, cpus, rows, cols, iters, warmup int
	transport                              string
	timeout                                time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.ranks, "n", 4, "ranks")
	flag.IntVar(&o.cpus, "cpus", 2, "processors the ranks share (the first this process may use; 0: no binding)")
	flag.IntVar(&o.rows, "rows", 8, "rows of each rank's block")
	flag.IntVar(&o.cols, "cols", 16, "doubles in a row (the halo message)")
	flag.IntVar(&o.iters, "iterations", 5000, "timed iterations")
	flag.IntVar(&o.warmup, "warmup", 500, "iterations before the timed ones")
	flag.StringVar(&o.transport, "transport", "tcp", "adapter between the ranks (AMIGO_TRANSPORT): tcp or shm")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	var err error
	if launch.InRank() {
		err = rank(o)
	} else {
		err = start(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "halo:", err)
		os.Exit(1)
	}
}

// start runs the ranks, bound to the first o.cpus processors of this
// process: the child inherits the affinity of the thread that starts it.
func start(o options) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	if o.cpus > 0 {
		var set unix.CPUSet
		for c, k := 0, 0; c < 1024 && k < o.cpus; c++ {
			if old.IsSet(c) {
				set.Set(c)
				k++
			}
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return err
		}
	}
	job, err := launch.Start(launch.Options{
		N:    o.ranks,
		Argv: append([]string{self}, os.Args[1:]...),
		Env:  []string{"AMIGO_TRANSPORT=" + o.transport},
		Output: func(r int) (stdout, stderr io.Writer) {
			if r == 0 {
				return os.Stdout, os.Stderr
			}
			return nil, os.Stderr
		},
	})
	if o.cpus > 0 {
		_ = unix.SchedSetaffinity(0, &old)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout+10*time.Second)
	defer cancel()
	return job.Wait(ctx)
}

// rank is one rank of the job.
func rank(o options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	ac := cl.Context(0)
	w, err := mpi.World(ctx, ac, nil)
	if err != nil {
		return err
	}
	r, p := w.Rank(), w.Size()
	up, down := (r+p-1)%p, (r+1)%p
	// The block with a halo row above and below.
	u := make([]float64, (o.rows+2)*o.cols)
	for i := range u {
		u[i] = float64(r)
	}
	row := func(i int) []float64 { return u[i*o.cols : (i+1)*o.cols] }
	reqs := make([]mpi.Request, 4)
	exchange := func() error {
		var err error
		if reqs[0], err = mpi.Irecv(w, row(0), up, 0); err != nil {
			return err
		}
		if reqs[1], err = mpi.Irecv(w, row(o.rows+1), down, 1); err != nil {
			return err
		}
		if reqs[2], err = mpi.Isend(w, row(1), up, 1); err != nil {
			return err
		}
		if reqs[3], err = mpi.Isend(w, row(o.rows), down, 0); err != nil {
			return err
		}
		return mpi.Waitall(ctx, reqs, nil)
	}
	for i := 0; i < o.warmup; i++ {
		if err := exchange(); err != nil {
			return err
		}
	}
	if err := w.Barrier(ctx); err != nil {
		return err
	}
	before := ac.Stats()
	t0 := time.Now()
	for i := 0; i < o.iters; i++ {
		if err := exchange(); err != nil {
			return err
		}
	}
	took := time.Since(t0)
	after := ac.Stats()
	if row(0)[0] != float64(up) || row(o.rows + 1)[0] != float64(down) {
		return fmt.Errorf("rank %d: halo rows hold %v and %v, want %d and %d", r, row(0)[0], row(o.rows + 1)[0], up, down)
	}
	mine := []float64{
		float64(after.Sleeps - before.Sleeps),
		float64(after.SleepTimeouts - before.SleepTimeouts),
		float64(took.Nanoseconds()) / 1e3 / float64(o.iters),
	}
	all := make([]float64, 3*p)
	if err := mpi.Gather(ctx, w, mine, all, 0); err != nil {
		return err
	}
	if r == 0 {
		var sleeps, timeouts, us float64
		for q := 0; q < p; q++ {
			sleeps = max(sleeps, all[3*q])
			timeouts = max(timeouts, all[3*q+1])
			us = max(us, all[3*q+2])
		}
		b, _ := json.Marshal(map[string]any{
			"benchmark": "halo", "transport": o.transport, "ranks": p, "cpus": o.cpus,
			"size": o.cols * 8, "us_per_iter": us,
			"sleeps_per_rank": sleeps, "sleep_timeouts_per_rank": timeouts,
		})
		fmt.Println(string(b))
	}
	return mpi.Finalize(ctx, w)
}
