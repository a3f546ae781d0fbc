//go:build ofi

package ofi

import (
	"runtime"
	"testing"
	"time"
)

// TestDirectCalls runs packets both ways, small ones injected and large
// ones sent, with the message path's calls on the port's own stack (the
// default, where the platform has it and the port spins on its queues)
// and through cgo (CgoCalls, and tcp;ofi_rxm, whose looks are system
// calls), and checks which way each port calls.
func TestDirectCalls(t *testing.T) {
	direct := runtime.GOOS == "linux" && runtime.GOARCH == "amd64"
	for _, prov := range providers() {
		for _, cgo := range []bool{false, true} {
			name := prov + "/direct"
			if cgo {
				name = prov + "/cgo"
			}
			t.Run(name, func(t *testing.T) {
				bp := newBenchPairOpts(t, Options{Provider: prov, Timeout: time.Minute, CgoCalls: cgo})
				for r := range 2 {
					p := bp.ports[r].(*port)
					// Direct where the port spins on its queues.
					want := direct && !cgo && bp.calibrated[r] > 0
					if has := p.direct.st != nil; has != want {
						t.Fatalf("rank %d: a stack of its own %v, want %v", r, has, want)
					}
				}
				inject := bp.ports[0].(*port).a.injectSize - hdrSize
				sizes := []int{8, inject, inject + 1, 3000}
				for i := range 400 {
					size := sizes[i%len(sizes)]
					bp.send(t, i%2, size)
					bp.wait(t, 1-i%2, i/2+1)
				}
				if bp.got[0].n != 200 || bp.got[1].n != 200 {
					t.Fatalf("received %d and %d packets, want 200 each", bp.got[0].n, bp.got[1].n)
				}
			})
		}
	}
}

// TestDirectStacksReused opens and closes ports many times: their stacks
// go back for the next ports, and are never unmapped.
func TestDirectStacksReused(t *testing.T) {
	direct := runtime.GOOS == "linux" && runtime.GOARCH == "amd64"
	stacks.Lock()
	before := len(stacks.free)
	stacks.Unlock()
	spins := true
	for range 8 {
		bp := newBenchPair(t, "shm")
		spins = spins && bp.calibrated[0] > 0 && bp.calibrated[1] > 0
		for r := range 2 {
			bp.ports[r].Close()
		}
		bp.ads[0].Close()
		bp.ads[1].Close()
	}
	stacks.Lock()
	after := len(stacks.free)
	stacks.Unlock()
	if !direct {
		if after != before {
			t.Fatalf("%d stacks free, %d before, on a platform without direct calls", after, before)
		}
		return
	}
	if !spins {
		// Some ports did not spin (a slow read of their queues), and had
		// no stack: only the bound holds.
		if after > before+2 {
			t.Fatalf("%d stacks free after 8 pairs of ports (%d before): not reused", after, before)
		}
		return
	}
	if after < 2 || after > before+2 {
		t.Fatalf("%d stacks free after 8 pairs of ports opened and closed (%d before): want them reused, at most 2 more", after, before)
	}
}
