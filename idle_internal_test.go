package amigo

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// The idle policy: the spin the program set wins, except on an
// oversubscribed host; left to the context, it is long on a host with a
// processor per rank and short when nothing is known.
func TestIdlePolicy(t *testing.T) {
	for _, c := range []struct {
		spin    int
		reports []bool
		want    int
		yield   bool
	}{
		{0, nil, defaultSpin, false},             // ranks as goroutines
		{0, []bool{false}, DedicatedSpin, false}, // a processor per rank
		{0, []bool{true}, oversubscribedSpin, true},
		{0, []bool{false, true}, oversubscribedSpin, true},
		{500, []bool{false}, 500, false}, // the program's choice
		{500, nil, 500, false},
		{500, []bool{true}, oversubscribedSpinMax, true},
		{5, []bool{true}, 5, true},
	} {
		spin, yield := idlePolicy(c.spin, c.reports)
		if spin != c.want || yield != c.yield {
			t.Errorf("idlePolicy(%d, %v) = %d, %v; want %d, %v", c.spin, c.reports, spin, yield, c.want, c.yield)
		}
	}
}

// A context on an oversubscribed host does not spin, and its yields, which
// give the thread to other processes, still let the goroutines of its own
// process run on its one thread of Go code: a goroutine made runnable while
// the context waits runs within two of its runtime.Gosched calls (the Go
// scheduler takes the goroutine that called one back at once now and then,
// to be fair to its global queue), 2*osGoschedEvery idle rounds.
func TestOversubscribedIdleRunsGoroutines(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	cl, err := NewLocal(1, Config{YieldIterations: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer cl[0].Close()
	c := cl[0].Context(0)
	c.spin, c.osYield = idlePolicy(0, []bool{true})
	if c.spin != 0 {
		t.Fatalf("spin %d on an oversubscribed host, want 0", c.spin)
	}
	c.enter()
	defer c.leave()
	for round := 0; round < 1000; round++ {
		var ran atomic.Bool
		go ran.Store(true)
		idle, n := 0, 0
		for ; n < 2*osGoschedEvery && !ran.Load(); n++ {
			idle = c.idle(idle, nil)
		}
		if !ran.Load() {
			t.Fatalf("round %d: a runnable goroutine did not run in %d idle rounds", round, n)
		}
	}
}
