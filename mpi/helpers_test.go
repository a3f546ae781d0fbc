package mpi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/mpi"
)

// job describes how a test's ranks run.
type job struct {
	cfg     amigo.Config
	opts    *mpi.Options
	timeout time.Duration
}

// run runs fn on n ranks, each with the world communicator. On the loop
// adapter the ranks are goroutines of the test.
func run(t testing.TB, n int, fn func(ctx context.Context, w *mpi.Comm) error) {
	t.Helper()
	runWith(t, n, job{}, fn)
}

func runWith(t testing.TB, n int, j job, fn func(ctx context.Context, w *mpi.Comm) error) {
	t.Helper()
	if j.cfg.SpinIterations == 0 {
		// Up to 17 ranks share this machine's cores as goroutines: a rank
		// that waits long yields soon, or the one it waits for cannot run.
		j.cfg.SpinIterations, j.cfg.YieldIterations = 50, 50
	}
	timeout := j.timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	amigotest.Run(t, n, amigotest.Options{Config: j.cfg, Timeout: timeout}, func(r *amigotest.Rank) error {
		w, err := mpi.World(r.Deadline, r.Ctx, j.opts)
		if err != nil {
			return err
		}
		defer w.Free()
		return fn(r.Deadline, w)
	})
}

func check(cond bool, format string, args ...any) error {
	if cond {
		return nil
	}
	return fmt.Errorf(format, args...)
}
