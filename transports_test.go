package amigo_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/bootstrap"
)

// openOver opens an n-rank job inside this test process whose ranks reach
// each other through the named adapter between processes ("shm", "tcp"),
// or through the in-process adapter ("loop").
func openOver(t testing.TB, n int, cfg amigo.Config, over string) []*amigo.Client {
	t.Helper()
	if over == "loop" {
		cl, err := amigo.NewLocal(n, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, c := range cl {
				c.Close()
			}
		})
		return cl
	}
	cfg.Transport = over
	jobs := bootstrap.NewLocal(n)
	cl := make([]*amigo.Client, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for r := range jobs {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			cl[r], errs[r] = amigo.OpenJob(ctx, jobs[r], cfg)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d over %s: %v", r, over, err)
		}
	}
	t.Cleanup(func() {
		for _, c := range cl {
			c.Close()
		}
		for _, j := range jobs {
			j.Close()
		}
	})
	return cl
}
