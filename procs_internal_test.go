package amigo

import (
	"runtime"
	"testing"

	"github.com/amigo-hpc/amigo/transport"
)

type hostReport struct {
	transport.Adapter
	over bool
}

func (h hostReport) Oversubscribed() bool { return h.over }

// A rank on an oversubscribed host runs with Config.OversubscribedProcs
// threads of Go code, unless the environment or the program says otherwise.
func TestLimitProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	if processRanks.Load() != 0 {
		t.Skip("clients of other tests are open in this process")
	}
	processRanks.Store(1) // one rank in this process
	defer processRanks.Store(0)
	for _, c := range []struct {
		env     string
		reports []bool
		procs   int
		want    int
	}{
		{"", []bool{true}, 1, 1},
		{"", []bool{false, true}, 1, 1},
		{"", []bool{false}, 1, 4},
		{"", nil, 1, 4},
		{"", []bool{true}, -1, 4},
		{"", []bool{true}, 2, 2},
		{"4", []bool{true}, 1, 4},
	} {
		t.Setenv("GOMAXPROCS", c.env)
		runtime.GOMAXPROCS(4)
		var ads []transport.Adapter
		for _, o := range c.reports {
			ads = append(ads, hostReport{over: o})
		}
		set, was := limitProcs(ads, c.procs)
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("GOMAXPROCS env %q, oversubscribed %v, OversubscribedProcs %d: got %d, want %d", c.env, c.reports, c.procs, got, c.want)
		}
		if (set != 0) != (c.want != 4) || set != 0 && was != 4 {
			t.Errorf("limitProcs returned %d, %d", set, was)
		}
		(&Client{procsSet: set, procsWas: was}).restoreProcs()
		if got := runtime.GOMAXPROCS(0); got != 4 {
			t.Errorf("GOMAXPROCS %d after restoreProcs, want 4", got)
		}
	}
	// Two ranks in this process: neither limits the other's threads.
	processRanks.Store(2)
	t.Setenv("GOMAXPROCS", "")
	if set, _ := limitProcs([]transport.Adapter{hostReport{over: true}}, 1); set != 0 || runtime.GOMAXPROCS(0) != 4 {
		t.Errorf("with two ranks in the process, GOMAXPROCS lowered to %d", runtime.GOMAXPROCS(0))
	}
}
