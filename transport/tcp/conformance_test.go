package tcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport/transporttest"
)

func factory(opts Options) transporttest.Factory {
	return func(t *testing.T, n int) *transporttest.World {
		ads, regs, _ := newWorld(t, n, opts)
		w := &transporttest.World{Regions: regs}
		for _, a := range ads {
			w.Adapters = append(w.Adapters, a)
		}
		return w
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, factory(Options{RingSlots: 64, RDMASlots: 8}))
}

func TestConformanceDefaults(t *testing.T) {
	transporttest.Run(t, factory(Options{}))
}

// With more links into a port than it reads one by one, Poll asks the
// port's epoll which sockets are readable; every packet still arrives, in
// order per link.
func TestManyLinksIn(t *testing.T) {
	const n, msgs = 9, 300
	ads, _, _ := newWorld(t, n, Options{RingSlots: 64})
	ports := openAll(t, ads)
	prods := make([]*producer, n)
	for r := 1; r < n; r++ {
		l, err := ports[r].Link(addr(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		prods[r] = &producer{l: l}
	}
	var col collector
	sent := make([]int, n)
	deadline := time.Now().Add(30 * time.Second)
	total := func() int {
		s := 0
		for r := 1; r < n; r++ {
			s += col.count(addr(r, 0))
		}
		return s
	}
	for total() < (n-1)*msgs {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d packets after 30s", total(), (n-1)*msgs)
		}
		for r := 1; r < n; r++ {
			for sent[r] < msgs && prods[r].send([]byte(fmt.Sprintf("%d/%d", r, sent[r]))) {
				sent[r]++
			}
			ports[r].Progress()
		}
		ports[0].Poll(&col, 64)
	}
	for r := 1; r < n; r++ {
		for i, b := range col.pkts[addr(r, 0)] {
			if string(b) != fmt.Sprintf("%d/%d", r, i) {
				t.Fatalf("from rank %d: packet %d is %q", r, i, b)
			}
		}
	}
}
