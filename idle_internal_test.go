package amigo

import (
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/amigo-hpc/amigo/transport"
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

// countPort counts a port's Poll and Progress calls; poll, if set, runs
// in each Poll.
type countPort struct {
	transport.Port
	polls, progs int
	poll         func()
}

func (p *countPort) Poll(r transport.Receiver, budget int) int {
	p.polls++
	if p.poll != nil {
		p.poll()
	}
	return p.Port.Poll(r, budget)
}

func (p *countPort) Progress() int {
	p.progs++
	return p.Port.Progress()
}

// A waiting context whose only possible work is an arrival (quiet) runs
// its ports' Progress, the service of its peers and its callbacks in one
// idle pass of four while it spins, and only polls in the others; one with
// anything that Progress moves (progressDue: a descriptor a link's adapter
// moves in its Progress) runs whole passes, and so does one that does not
// spin (an oversubscribed host's, whose every idle pass is followed by a
// yield).
func TestQuietWaitPolls(t *testing.T) {
	for _, tc := range []struct {
		due, over bool
	}{{false, false}, {true, false}, {false, true}} {
		due := tc.due || tc.over // every pass whole
		cl, err := NewLocal(1, Config{SpinIterations: 1 << 20, YieldIterations: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		c := cl[0].Context(0)
		if tc.over {
			c.spin, c.osYield = idlePolicy(0, []bool{true})
		}
		var ports []*countPort
		for i, p := range c.ports {
			cp := &countPort{Port: p}
			if tc.due {
				cp.poll = func() { c.progressDue = true }
			}
			ports = append(ports, cp)
			c.ports[i] = cp
		}
		calls := 0
		if err := c.Wait(nil, func() bool { calls++; return calls > 400 }); err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			switch {
			case p.polls < 390:
				t.Errorf("%+v: %d polls in a wait of 400 idle passes", tc, p.polls)
			case due && p.progs != p.polls:
				t.Errorf("%+v: Progress ran %d times in %d passes, want every pass", tc, p.progs, p.polls)
			case !due && (p.progs > p.polls/4+1 || p.progs < p.polls/4-1):
				t.Errorf("quiet: Progress ran %d times in %d passes, want one pass of four", p.progs, p.polls)
			}
		}
		cl[0].Close()
	}
}
