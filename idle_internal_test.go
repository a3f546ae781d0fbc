package amigo

import "testing"

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
		{500, []bool{true}, oversubscribedSpin, true},
		{5, []bool{true}, 5, true},
	} {
		spin, yield := idlePolicy(c.spin, c.reports)
		if spin != c.want || yield != c.yield {
			t.Errorf("idlePolicy(%d, %v) = %d, %v; want %d, %v", c.spin, c.reports, spin, yield, c.want, c.yield)
		}
	}
}
