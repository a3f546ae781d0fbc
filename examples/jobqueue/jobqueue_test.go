package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// The job queue on 3 ranks of 4 worker goroutines each, as goroutines of
// the test: the count of primes is the sequential one, and every job was
// computed once (the jobs of the ranks add up to the number of chunks).
func TestJobQueue(t *testing.T) {
	prm := Params{Limit: 30000, Chunk: 500, Workers: 4}
	const p = 3
	cls, err := amigo.NewLocal(p, amigo.Config{SpinIterations: 50, YieldIterations: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cls {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results := make([]Result, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := mpi.World(ctx, cl.Context(0), nil)
			if err == nil {
				results[i], err = Run(ctx, w, prm)
				err = errors.Join(err, mpi.Finalize(ctx, w))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if want := countPrimes(0, prm.Limit); results[0].Primes != want {
		t.Errorf("%d primes, want %d", results[0].Primes, want)
	}
	var jobs int64
	for _, n := range results[0].Jobs {
		jobs += n
	}
	if want := int64((prm.Limit + prm.Chunk - 1) / prm.Chunk); jobs != want {
		t.Errorf("%d jobs computed (%v), want %d", jobs, results[0].Jobs, want)
	}
}

func TestBadParams(t *testing.T) {
	if _, err := Run(context.Background(), nil, Params{Limit: 10, Chunk: 0, Workers: 1}); err == nil {
		t.Error("chunk 0 accepted")
	}
}
