package shm

import (
	"testing"
	"time"
)

// run makes k transfers of 1 MiB with w, each taking the time dur gives its
// way, and returns how many went by each way.
func (w *wayChooser) run(k int, dur func(mode int) time.Duration) (cma, pipe int) {
	for range k {
		m := w.pick()
		if m == modePipe {
			pipe++
		} else {
			cma++
		}
		w.record(m, 1<<20, dur(m))
	}
	return
}

// ways returns a duration function: CMA takes c, the pipelined copy p.
func ways(c, p time.Duration) func(int) time.Duration {
	return func(m int) time.Duration {
		if m == modePipe {
			return p
		}
		return c
	}
}

func TestWayChooser(t *testing.T) {
	var w wayChooser
	// Each way is measured first; its first transfer, slow with cold
	// pages, is not counted.
	for _, mode := range []int{modeCMA, modeCMA, modePipe, modePipe} {
		if m := w.pick(); m != mode {
			t.Fatalf("pick %d, want %d (rates %v)", m, mode, w.rate)
		}
		d := 40 * time.Microsecond // ~26 GB/s
		if mode == modePipe {
			d = 30 * time.Microsecond // ~35 GB/s
		}
		if w.seen[wayIndex(mode)] == 0 {
			d = time.Millisecond // the cold first transfer
		}
		w.record(mode, 1<<20, d)
	}
	if w.rate[0] < 26e9 || w.rate[1] < 34e9 {
		t.Fatalf("rates %v: the cold transfers were counted", w.rate)
	}
	// Then the faster, but for one in exploreEarly until the slower was
	// counted twice (once more: at transfer exploreEarly) and one in
	// exploreEvery after that (at transfer exploreEvery).
	steady := ways(40*time.Microsecond, 30*time.Microsecond)
	cma, pipe := w.run(exploreEvery-4, steady)
	if cma != 2 {
		t.Fatalf("first transfers: %d CMA, %d pipe; want 2 CMA", cma, pipe)
	}
	cma, pipe = w.run(exploreEvery*4, steady)
	if cma != 4 || pipe != exploreEvery*4-4 {
		t.Fatalf("after pipe measured faster: %d CMA, %d pipe", cma, pipe)
	}
	// CMA slows to under two thirds of the pipe: it is tried less often.
	far := ways(60*time.Microsecond, 30*time.Microsecond)
	w.run(exploreEvery, far)
	cma, pipe = w.run(exploreRare*2, far)
	if cma != 2 || pipe != exploreRare*2-2 {
		t.Fatalf("with CMA far slower: %d CMA, %d pipe", cma, pipe)
	}
	// A transfer that waits for its owner's channel picks again: the same
	// way, whatever the count of picks.
	for range exploreEvery {
		if m := w.pick(); m != modePipe {
			t.Fatal("picks without transfers explored")
		}
		if w.n%exploreEvery == exploreEvery-1 {
			break
		}
	}
	// The pipe slows down (an owner that stopped advancing): within a few
	// transfers of it the choice turns to CMA, and stays there while the
	// pipe, tried now and then, stays slow.
	slow := ways(50*time.Microsecond, 500*time.Microsecond)
	for w.pick() == modePipe {
		w.record(modePipe, 1<<20, 500*time.Microsecond)
		if w.rate[1] < 5e9 {
			t.Fatalf("rates %v: still on the pipe", w.rate)
		}
	}
	w.run(exploreEvery, slow) // one trial at the old, closer rates
	cma, pipe = w.run(exploreRare*2, slow)
	if pipe != 2 || cma != exploreRare*2-2 {
		t.Fatalf("after pipe measured slower: %d CMA, %d pipe", cma, pipe)
	}
	// It recovers: the first trial that measures it faster turns the
	// choice back at once, though its average was low.
	cma, pipe = w.run(exploreRare*2, steady)
	if pipe < exploreRare-2 || w.pick() != modePipe {
		t.Fatalf("after the pipe recovered: %d CMA, %d pipe (rates %v)", cma, pipe, w.rate)
	}
	// A zero duration does not divide by zero.
	w.record(modeCMA, 1, 0)
	if w.rate[0] <= 0 {
		t.Fatalf("rate %v", w.rate[0])
	}
}

// A cold start: the first counted transfers of the pipelined copy ran at a
// tenth of its rate (cold chunk ring, destination pages faulted in). The
// choice must not stay on the slower way for hundreds of transfers.
func TestWayChooserColdStart(t *testing.T) {
	var w wayChooser
	cold := ways(60*time.Microsecond, 600*time.Microsecond) // 17 and 1.7 GB/s
	w.run(4, cold)
	if fast, _ := w.fast(); fast != modeCMA {
		t.Fatalf("rates %v", w.rate)
	}
	warm := ways(60*time.Microsecond, 32*time.Microsecond) // 17 and 33 GB/s
	w.run(exploreEarly, warm)
	if fast, _ := w.fast(); fast != modePipe {
		t.Fatalf("after %d warm transfers the choice is still CMA (rates %v)", exploreEarly, w.rate)
	}
	cma, pipe := w.run(exploreEvery*2, warm)
	if cma > 8 {
		t.Fatalf("%d CMA and %d pipe transfers after the pipe warmed up", cma, pipe)
	}
}
