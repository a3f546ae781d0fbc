//go:build ofi

package ofi

import (
	"runtime"
	"testing"
	"time"
)

// TestDirectCalls runs packets both ways, small ones injected and large
// ones sent, with the message path's calls on the port's own stack (the
// default, where the platform has it) and through cgo (CgoCalls), and
// checks which way each port calls.
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
					if has := p.direct.st != nil; has != (direct && !cgo) {
						t.Fatalf("rank %d: a stack of its own %v, want %v", r, has, direct && !cgo)
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
	for range 8 {
		bp := newBenchPair(t, "shm")
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
		if after != 0 {
			t.Fatalf("%d stacks on a platform without direct calls", after)
		}
		return
	}
	if after < 2 || after > before+2 {
		t.Fatalf("%d stacks free after 8 pairs of ports opened and closed (%d before): want them reused, at most 2 more", after, before)
	}
}
