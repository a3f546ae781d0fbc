//go:build ofi

package ofi

import (
	"errors"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// TestCloseBeforeInProcessPeer: an adapter that closes while another
// adapter of the same process still sends to it (the peer has not yet
// polled its goodbye) keeps its endpoints until that one closes too. A
// provider that reaches endpoints of its own process through their memory
// (shm) would otherwise write into memory the closed one had given back:
// the sender's next post crashed the process.
func TestCloseBeforeInProcessPeer(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			bp := newBenchPair(t, prov)
			for i := 1; i <= 3; i++ {
				bp.send(t, 0, 8)
				bp.wait(t, 1, i)
				bp.send(t, 1, 8)
				bp.wait(t, 0, i)
			}
			if err := bp.ads[1].Close(); err != nil {
				t.Fatal(err)
			}
			// Rank 0 has not polled since: it does not know rank 1
			// left, and posts to it.
			for i := 0; i < 8; i++ {
				bp.send(t, 0, 8)
				bp.ports[0].Progress()
			}
			deadline := time.Now().Add(time.Minute)
			for bp.links[0].Err() == nil {
				bp.advance(0)
				if time.Now().After(deadline) {
					t.Fatal("rank 0's link to the closed rank 1 did not fail")
				}
			}
			var pe *transport.PeerError
			if err := bp.links[0].Err(); !errors.As(err, &pe) || pe.Addr.Rank != 1 {
				t.Fatalf("link error %v: want a *transport.PeerError naming rank 1", err)
			}
		})
	}
}
