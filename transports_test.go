package amigo_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/internal/sysmon"
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

// A job over shared memory holds the runtime's monitor thread in the
// policy its ranks report, and the last Close puts it back.
func TestMonitorOverShm(t *testing.T) {
	cl := openOver(t, 2, amigo.Config{Monitor: "batch"}, "shm")
	for r, c := range cl {
		if p, err := c.Monitor(); p != "batch" || err != nil {
			t.Errorf("rank %d: Monitor() = %q, %v", r, p, err)
		}
	}
	tid := sysmon.Thread()
	policy := func() uint32 {
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a.Policy
	}
	if tid == 0 || policy() != unix.SCHED_BATCH {
		t.Fatalf("monitor thread %d not in SCHED_BATCH while the job is open", tid)
	}
	cl[0].Close()
	if policy() != unix.SCHED_BATCH {
		t.Errorf("rank 0 closed: the monitor left SCHED_BATCH while rank 1 is open")
	}
	cl[1].Close()
	if policy() != unix.SCHED_NORMAL || sysmon.Thread() != 0 {
		t.Errorf("both ranks closed: monitor thread %d has policy %d", tid, policy())
	}
}
