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
		limitProcs(ads, c.procs)
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("GOMAXPROCS env %q, oversubscribed %v, OversubscribedProcs %d: got %d, want %d", c.env, c.reports, c.procs, got, c.want)
		}
	}
}
