// Command jacobi solves the steady 2-D heat equation on a square plate by
// Jacobi iteration, distributed over the ranks of a job with package mpi:
// the plate's rows are split among the ranks; every iteration each rank
// exchanges its edge rows with its neighbours (the halo), updates its rows,
// and all ranks agree on the largest change with an Allreduce, stopping when
// it falls below the tolerance. The top edge is held at 1, the other edges at
// 0.
//
// Under a launcher every process is one rank:
//
//	amirun -n 4 jacobi -n 512
//	mpiexec -n 4 jacobi -n 512
//
// Run bare, it starts -ranks ranks as goroutines of this process:
//
//	go run ./examples/jacobi -ranks 4 -n 512
//
// It prints the grid, the number of iterations, the last change, a checksum
// of the whole plate (gathered at rank 0 and summed in row order, so that it
// is the same whatever the number of ranks) and the time per iteration.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// Params describe a run.
type Params struct {
	N       int     // interior points per side
	MaxIter int     // give up after this many iterations
	Tol     float64 // stop when no point changed by more than this
}

// Result is what rank 0 reports.
type Result struct {
	Iterations int
	Change     float64   // the largest change of the last iteration
	Checksum   float64   // sum of the interior, in row order
	Plate      []float64 // the interior, N*N, row by row (rank 0 only)
	PerIter    time.Duration
	Halo       time.Duration // of which halo exchange, per iteration
	Reduce     time.Duration // of which the convergence Allreduce
}

// rows returns the interior rows [lo, hi) of rank r of p.
func rows(n, p, r int) (lo, hi int) {
	q, rem := n/p, n%p
	lo = r*q + min(r, rem)
	hi = lo + q
	if r < rem {
		hi++
	}
	return lo, hi
}

// Solve runs the solver on the ranks of w; every rank calls it. The result
// is complete on rank 0; other ranks get the iteration count and change.
func Solve(ctx context.Context, w *mpi.Comm, prm Params) (Result, error) {
	n, p, r := prm.N, w.Size(), w.Rank()
	if p > n {
		return Result{}, fmt.Errorf("%d ranks for %d rows: want at most one rank a row", p, n)
	}
	lo, hi := rows(n, p, r)
	m := hi - lo   // rows of this rank
	width := n + 2 // a row with its left and right boundary points
	up, down := r-1, r+1
	// u and v hold m rows and a halo row above and below; row 0 and row
	// m+1 are halos, or the plate's boundary at the first and last rank.
	u := make([]float64, (m+2)*width)
	v := make([]float64, (m+2)*width)
	if r == 0 {
		for j := 0; j < width; j++ {
			u[j], v[j] = 1, 1 // the hot top edge
		}
	}
	row := func(a []float64, i int) []float64 { return a[i*width : (i+1)*width] }
	reqs := make([]mpi.Request, 4)
	var res Result
	change := []float64{0}
	var halo, reduce time.Duration
	start := time.Now()
	for it := 1; it <= prm.MaxIter; it++ {
		// Halo exchange: receive the neighbours' edge rows into the halos,
		// send them ours.
		t0 := time.Now()
		k := 0
		var err error
		if up >= 0 {
			if reqs[k], err = mpi.Irecv(w, row(u, 0), up, 0); err != nil {
				return res, err
			}
			if reqs[k+1], err = mpi.Isend(w, row(u, 1), up, 1); err != nil {
				return res, err
			}
			k += 2
		}
		if down < p {
			if reqs[k], err = mpi.Irecv(w, row(u, m+1), down, 1); err != nil {
				return res, err
			}
			if reqs[k+1], err = mpi.Isend(w, row(u, m), down, 0); err != nil {
				return res, err
			}
			k += 2
		}
		if err := mpi.Waitall(ctx, reqs[:k], nil); err != nil {
			return res, err
		}
		t1 := time.Now()
		// Update the rows of this rank.
		local := 0.0
		for i := 1; i <= m; i++ {
			a, b, c := row(u, i-1), row(u, i), row(u, i+1)
			d := row(v, i)
			for j := 1; j <= n; j++ {
				x := 0.25 * (a[j] + c[j] + b[j-1] + b[j+1])
				local = max(local, math.Abs(x-b[j]))
				d[j] = x
			}
		}
		u, v = v, u
		// Agree on the largest change.
		t2 := time.Now()
		change[0] = local
		if err := mpi.Allreduce(ctx, w, nil, change, mpi.Max); err != nil {
			return res, err
		}
		t3 := time.Now()
		halo += t1.Sub(t0)
		reduce += t3.Sub(t2)
		res.Iterations = it
		if change[0] < prm.Tol {
			break
		}
	}
	res.Change = change[0]
	if res.Iterations > 0 {
		res.PerIter = time.Since(start) / time.Duration(res.Iterations)
		res.Halo = halo / time.Duration(res.Iterations)
		res.Reduce = reduce / time.Duration(res.Iterations)
	}
	// Gather the interior at rank 0.
	mine := make([]float64, 0, m*n)
	for i := 1; i <= m; i++ {
		mine = append(mine, row(u, i)[1:n+1]...)
	}
	var counts, displs []int
	if r == 0 {
		res.Plate = make([]float64, n*n)
		counts, displs = make([]int, p), make([]int, p)
		for q := 0; q < p; q++ {
			l, h := rows(n, p, q)
			counts[q], displs[q] = (h-l)*n, l*n
		}
	}
	if err := mpi.Gatherv(ctx, w, mine, res.Plate, counts, displs, 0); err != nil {
		return res, err
	}
	for _, x := range res.Plate {
		res.Checksum += x
	}
	return res, nil
}

func main() {
	var prm Params
	flag.IntVar(&prm.N, "n", 256, "interior points per side of the plate")
	flag.IntVar(&prm.MaxIter, "iter", 20000, "most iterations")
	flag.Float64Var(&prm.Tol, "tol", 1e-4, "stop when no point changes by more than this")
	ranks := flag.Int("ranks", 1, "ranks to start as goroutines when not run under a launcher")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	flag.Parse()
	if prm.N < 1 || prm.MaxIter < 1 || *ranks < 1 {
		fmt.Fprintln(os.Stderr, "jacobi: -n, -iter and -ranks must be at least 1")
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
		fmt.Fprintln(os.Stderr, "jacobi:", err)
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
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func rank(ctx context.Context, cl *amigo.Client, prm Params) error {
	w, err := mpi.World(ctx, cl.Context(0), nil)
	if err != nil {
		return err
	}
	res, err := Solve(ctx, w, prm)
	if err != nil {
		return fmt.Errorf("rank %d: %w", w.Rank(), err)
	}
	if w.Rank() == 0 {
		fmt.Printf("jacobi: %dx%d plate on %d ranks: %d iterations, last change %.3g, checksum %.9f\n",
			prm.N, prm.N, w.Size(), res.Iterations, res.Change, res.Checksum)
		fmt.Printf("jacobi: %.2f us per iteration (halo exchange %.2f us, convergence allreduce %.2f us)\n",
			us(res.PerIter), us(res.Halo), us(res.Reduce))
	}
	return mpi.Finalize(ctx, w)
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
