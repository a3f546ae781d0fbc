// Command jobqueue is a master–worker job queue written with goroutines
// and package mpi: rank 0 serves a queue of jobs (counting the primes in
// one chunk of a range each) from a goroutine of its own, while the
// program's worker goroutines — several on every rank, rank 0 included —
// ask it for jobs, compute them and hand in their results with their next
// request. All of them share one communicator; each worker goroutine
// receives its jobs on a tag of its own, and the server receives requests
// from any rank and any goroutine at once (AnySource).
//
// Under a launcher every process is one rank:
//
//	amirun -n 4 jobqueue -limit 2000000 -workers 4
//
// Run bare, it starts -ranks ranks as goroutines of this process:
//
//	go run ./examples/jobqueue -ranks 3 -workers 4
//
// Rank 0 prints the number of primes below the limit, and how many jobs
// each rank computed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// Params describe a run.
type Params struct {
	Limit   int // count the primes below Limit
	Chunk   int // numbers per job
	Workers int // worker goroutines per rank
}

// Result is what every rank learns at the end.
type Result struct {
	Primes int     // primes below Limit (rank 0 only)
	Jobs   []int64 // jobs computed by each rank
}

// Tags: requests to the server; a worker's jobs come on tagJob plus its
// index on its rank.
const (
	tagReq = 1
	tagJob = 100
)

// Run runs the job queue on the ranks of w; every rank calls it.
func Run(ctx context.Context, w *mpi.Comm, prm Params) (Result, error) {
	if prm.Limit < 0 || prm.Chunk < 1 || prm.Workers < 1 {
		return Result{}, fmt.Errorf("limit %d, chunk %d, workers %d: want limit >= 0, the others >= 1", prm.Limit, prm.Chunk, prm.Workers)
	}
	var primes int64
	errs := make(chan error, prm.Workers+1)
	if w.Rank() == 0 {
		go func() { errs <- serve(ctx, w, prm, &primes) }()
	}
	var mine int64
	var mu sync.Mutex
	for g := 0; g < prm.Workers; g++ {
		go func() {
			n, err := work(ctx, w, g)
			mu.Lock()
			mine += n
			mu.Unlock()
			errs <- err
		}()
	}
	var err error
	n := prm.Workers
	if w.Rank() == 0 {
		n++
	}
	for range n {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		return Result{}, err
	}
	res := Result{Primes: int(primes), Jobs: make([]int64, w.Size())}
	if err := mpi.Allgather(ctx, w, []int64{mine}, res.Jobs); err != nil {
		return Result{}, err
	}
	return res, nil
}

// serve is rank 0's server: it answers every request with the next job,
// or with a stop once the jobs ran out, until every worker of every rank
// stopped; it adds up the results the requests carry.
func serve(ctx context.Context, w *mpi.Comm, prm Params, primes *int64) error {
	next, stopped, workers := 0, 0, w.Size()*prm.Workers
	req := make([]int64, 2) // the worker's index on its rank, its last result
	job := make([]int64, 2) // [lo, hi), or lo -1: stop
	for stopped < workers {
		st, err := mpi.Recv(ctx, w, req, mpi.AnySource, tagReq)
		if err != nil {
			return err
		}
		*primes += req[1]
		if next < prm.Limit {
			job[0], job[1] = int64(next), int64(min(next+prm.Chunk, prm.Limit))
			next += prm.Chunk
		} else {
			job[0], job[1] = -1, 0
			stopped++
		}
		if err := mpi.Send(ctx, w, job, st.Source, tagJob+int(req[0])); err != nil {
			return err
		}
	}
	return nil
}

// work is one worker goroutine: it asks for jobs until told to stop, and
// returns how many it computed.
func work(ctx context.Context, w *mpi.Comm, g int) (int64, error) {
	req := []int64{int64(g), 0}
	job := make([]int64, 2)
	var jobs int64
	for {
		if err := mpi.Send(ctx, w, req, 0, tagReq); err != nil {
			return jobs, err
		}
		if _, err := mpi.Recv(ctx, w, job, 0, tagJob+g); err != nil {
			return jobs, err
		}
		if job[0] < 0 {
			return jobs, nil
		}
		req[1] = int64(countPrimes(int(job[0]), int(job[1])))
		jobs++
	}
}

// countPrimes counts the primes in [lo, hi) by trial division: the
// compute of a job.
func countPrimes(lo, hi int) int {
	n := 0
	for x := max(lo, 2); x < hi; x++ {
		prime := true
		for d := 2; d*d <= x; d++ {
			if x%d == 0 {
				prime = false
				break
			}
		}
		if prime {
			n++
		}
	}
	return n
}

func main() {
	var prm Params
	flag.IntVar(&prm.Limit, "limit", 1000000, "count the primes below this")
	flag.IntVar(&prm.Chunk, "chunk", 10000, "numbers per job")
	flag.IntVar(&prm.Workers, "workers", 4, "worker goroutines per rank")
	ranks := flag.Int("ranks", 1, "ranks to start as goroutines when not run under a launcher")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if *ranks < 1 {
		fmt.Fprintln(os.Stderr, "jobqueue: -ranks must be at least 1")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	if os.Getenv("PMI_FD") != "" || os.Getenv("PMI_PORT") != "" || os.Getenv("PMI_RANK") != "" {
		err = launched(ctx, prm)
	} else {
		err = inProcess(ctx, prm, *ranks)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobqueue:", err)
		os.Exit(1)
	}
}

// launched runs this process as one rank of a launched job.
func launched(ctx context.Context, prm Params) error {
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	return rank(ctx, cl, prm)
}

// inProcess runs n ranks as goroutines of this process.
func inProcess(ctx context.Context, prm Params, n int) error {
	cls, err := amigo.NewLocal(n, amigo.Config{})
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cls {
			c.Close()
		}
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rank(ctx, cl, prm)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func rank(ctx context.Context, cl *amigo.Client, prm Params) error {
	w, err := mpi.World(ctx, cl.Context(0), nil)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := Run(ctx, w, prm)
	if err != nil {
		return fmt.Errorf("rank %d: %w", w.Rank(), err)
	}
	if w.Rank() == 0 {
		fmt.Printf("jobqueue: %d primes below %d, %d ranks x %d worker goroutines, %v\n",
			res.Primes, prm.Limit, w.Size(), prm.Workers, time.Since(start).Round(time.Millisecond))
		fmt.Printf("jobqueue: jobs per rank %v\n", res.Jobs)
	}
	return mpi.Finalize(ctx, w)
}
