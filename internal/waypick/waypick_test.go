package waypick

import (
	"testing"
	"time"
)

// The two ways under test, as package shm names them: cross-memory attach
// (way0) and the pipelined copy (way1).
const (
	way0 = 0
	way1 = 1
)

// run makes k transfers of 1 MiB with w, each taking the time dur gives its
// way, and returns how many went by each way.
func (w *Chooser) run(k int, dur func(mode int) time.Duration) (cma, pipe int) {
	for range k {
		m := w.Pick()
		if m == way1 {
			pipe++
		} else {
			cma++
		}
		w.Record(m, 1<<20, dur(m))
	}
	return
}

// ways returns a duration function: CMA takes c, the pipelined copy p.
func ways(c, p time.Duration) func(int) time.Duration {
	return func(m int) time.Duration {
		if m == way1 {
			return p
		}
		return c
	}
}

func TestChooser(t *testing.T) {
	var w Chooser
	// Each way is measured first; its first transfer, slow with cold
	// pages, is not counted.
	for _, mode := range []int{way0, way0, way1, way1} {
		if m := w.Pick(); m != mode {
			t.Fatalf("pick %d, want %d (rates %v)", m, mode, w.rate)
		}
		d := 40 * time.Microsecond // ~26 GB/s
		if mode == way1 {
			d = 30 * time.Microsecond // ~35 GB/s
		}
		if w.seen[mode] == 0 {
			d = time.Millisecond // the cold first transfer
		}
		w.Record(mode, 1<<20, d)
	}
	if w.rate[0] < 26e9 || w.rate[1] < 34e9 {
		t.Fatalf("rates %v: the cold transfers were counted", w.rate)
	}
	// Then the faster, but for one in Early until the slower was
	// counted twice (once more: at transfer Early) and one in
	// Every after that (at transfer Every).
	steady := ways(40*time.Microsecond, 30*time.Microsecond)
	cma, pipe := w.run(Every-4, steady)
	if cma != 2 {
		t.Fatalf("first transfers: %d CMA, %d pipe; want 2 CMA", cma, pipe)
	}
	cma, pipe = w.run(Every*4, steady)
	if cma != 4 || pipe != Every*4-4 {
		t.Fatalf("after pipe measured faster: %d CMA, %d pipe", cma, pipe)
	}
	// CMA slows to under two thirds of the pipe: it is tried less often.
	far := ways(60*time.Microsecond, 30*time.Microsecond)
	w.run(Every, far)
	cma, pipe = w.run(Rare*2, far)
	if cma != 2 || pipe != Rare*2-2 {
		t.Fatalf("with CMA far slower: %d CMA, %d pipe", cma, pipe)
	}
	// A transfer that waits for its owner's channel picks again: the same
	// way, whatever the count of picks.
	for range Every {
		if m := w.Pick(); m != way1 {
			t.Fatal("picks without transfers explored")
		}
		if w.n%Every == Every-1 {
			break
		}
	}
	// The pipe slows down (an owner that stopped advancing): within a few
	// transfers of it the choice turns to CMA, and stays there while the
	// pipe, tried now and then, stays slow.
	slow := ways(50*time.Microsecond, 500*time.Microsecond)
	for w.Pick() == way1 {
		w.Record(way1, 1<<20, 500*time.Microsecond)
		if w.rate[1] < 5e9 {
			t.Fatalf("rates %v: still on the pipe", w.rate)
		}
	}
	w.run(Every, slow) // one trial at the old, closer rates
	cma, pipe = w.run(Rare*2, slow)
	if pipe != 2 || cma != Rare*2-2 {
		t.Fatalf("after pipe measured slower: %d CMA, %d pipe", cma, pipe)
	}
	// It recovers: the first trial that measures it faster turns the
	// choice back at once, though its average was low.
	cma, pipe = w.run(Rare*2, steady)
	if pipe < Rare-2 || w.Pick() != way1 {
		t.Fatalf("after the pipe recovered: %d CMA, %d pipe (rates %v)", cma, pipe, w.rate)
	}
	// A zero duration does not divide by zero.
	w.Record(way0, 1, 0)
	if w.rate[0] <= 0 {
		t.Fatalf("rate %v", w.rate[0])
	}
}

// A cold start: the first counted transfers of the pipelined copy ran at a
// tenth of its rate (cold chunk ring, destination pages faulted in). The
// choice must not stay on the slower way for hundreds of transfers.
func TestChooserColdStart(t *testing.T) {
	var w Chooser
	cold := ways(60*time.Microsecond, 600*time.Microsecond) // 17 and 1.7 GB/s
	w.run(4, cold)
	if fast, _ := w.Fast(); fast != way0 {
		t.Fatalf("rates %v", w.rate)
	}
	warm := ways(60*time.Microsecond, 32*time.Microsecond) // 17 and 33 GB/s
	w.run(Early, warm)
	if fast, _ := w.Fast(); fast != way1 {
		t.Fatalf("after %d warm transfers the choice is still CMA (rates %v)", Early, w.rate)
	}
	cma, pipe := w.run(Every*2, warm)
	if cma > 8 {
		t.Fatalf("%d CMA and %d pipe transfers after the pipe warmed up", cma, pipe)
	}
}

// A Cadence replaces the constants: two warm-up transfers a way, and the
// slower way tried every 8 transfers though it is far slower.
func TestCadence(t *testing.T) {
	w := Chooser{Cadence: Cadence{Every: 8, Rare: 8, Warm: 2}}
	for i, want := range []int{way0, way0, way0, way1, way1, way1} {
		if m := w.Pick(); m != want {
			t.Fatalf("pick %d: %d, want %d", i, m, want)
		}
		w.Record(want, 1<<20, map[int]time.Duration{way0: 100 * time.Microsecond, way1: 20 * time.Microsecond}[want])
	}
	if w.Rate(way0) == 0 || w.Rate(way1) < 4*w.Rate(way0) {
		t.Fatalf("rates %v after the warm-ups", w.rate)
	}
	far := ways(100*time.Microsecond, 20*time.Microsecond) // way0 a fifth of way1
	slow, fast := w.run(64, far)
	if slow != 8 || fast != 56 {
		t.Fatalf("way0 far slower: %d trials in 64, want 8 (every 8)", slow)
	}
}
