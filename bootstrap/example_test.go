package bootstrap_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/amigo-hpc/amigo/bootstrap"
)

// Ranks that are goroutines share addresses the way launched processes do:
// put, fence, get.
func ExampleNewLocal() {
	jobs := bootstrap.NewLocal(3)
	ctx := context.Background()
	var wg sync.WaitGroup
	out := make([]string, len(jobs))
	for _, job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer job.Close()
			job.Put("addr", fmt.Appendf(nil, "endpoint-%d", job.Rank()))
			if err := job.Fence(ctx); err != nil {
				out[job.Rank()] = err.Error()
				return
			}
			next := (job.Rank() + 1) % job.Size()
			addr, err := job.Get(ctx, next, "addr")
			if err != nil {
				out[job.Rank()] = err.Error()
				return
			}
			out[job.Rank()] = fmt.Sprintf("rank %d reaches rank %d at %s (same host: %v)",
				job.Rank(), next, addr, job.Node(next) == job.Node(job.Rank()))
		}()
	}
	wg.Wait()
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// rank 0 reaches rank 1 at endpoint-1 (same host: true)
	// rank 1 reaches rank 2 at endpoint-2 (same host: true)
	// rank 2 reaches rank 0 at endpoint-0 (same host: true)
}

// Open joins whatever job the process was started in; without a launcher it
// is a job of one.
func ExampleOpen() {
	job, err := bootstrap.OpenConfig(context.Background(), bootstrap.Config{PMI: "singleton"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer job.Close()
	fmt.Println(job.Rank(), job.Size(), len(job.Secret()))
	// Output: 0 1 32
}
