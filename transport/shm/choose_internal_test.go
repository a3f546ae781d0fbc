package shm

import (
	"testing"
	"time"
)

func TestWayChooser(t *testing.T) {
	var w wayChooser
	// Each way is measured first; its first transfer, slow with cold
	// pages, is not counted.
	for _, mode := range []int{modeCMA, modeCMA, modePipe, modePipe} {
		if m := w.pick(); m != mode {
			t.Fatalf("pick %d, want %d (rates %v)", m, mode, w.rate)
		}
		d := 50 * time.Microsecond // ~21 GB/s
		if mode == modePipe {
			d = 30 * time.Microsecond // ~35 GB/s
		}
		if w.seen[wayIndex(mode)] == 0 {
			d = time.Millisecond // the cold first transfer
		}
		w.record(mode, 1<<20, d)
	}
	if w.rate[0] < 20e9 || w.rate[1] < 34e9 {
		t.Fatalf("rates %v: the cold transfers were counted", w.rate)
	}
	// Then the faster, but for one in exploreEvery.
	count := func(k int) (cma, pipe int) {
		for range k {
			if w.pick() == modePipe {
				pipe++
			} else {
				cma++
			}
		}
		return
	}
	cma, pipe := count(exploreEvery * 4)
	if cma != 4 || pipe != exploreEvery*4-4 {
		t.Fatalf("after pipe measured faster: %d CMA, %d pipe picks", cma, pipe)
	}
	// The pipe slows down (an owner that stopped advancing): within a few
	// transfers of it the choice turns to CMA.
	for range 6 {
		w.record(modePipe, 1<<20, 500*time.Microsecond)
	}
	if w.rate[1] >= w.rate[0] {
		t.Fatalf("rates %v after a slow pipe", w.rate)
	}
	cma, pipe = count(exploreEvery * 2)
	if pipe != 2 || cma != exploreEvery*2-2 {
		t.Fatalf("after pipe measured slower: %d CMA, %d pipe picks", cma, pipe)
	}
	// A zero duration does not divide by zero.
	w.record(modeCMA, 1, 0)
	if w.rate[0] <= 0 {
		t.Fatalf("rate %v", w.rate[0])
	}
}
