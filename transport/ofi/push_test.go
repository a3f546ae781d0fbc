//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// TestPushPostsQuietLink checks the link's Push: a packet published on a
// link whose every earlier packet the target took is posted by Push
// itself, with no Progress of the sender; one published while another is
// not yet taken is left to Progress (a window is posted together); both
// arrive. And a reply a handler pushes carries the acknowledgement of the
// packet that caused it: the sender of that packet learns it was taken
// from the reply alone.
func TestPushPostsQuietLink(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			bp := newBenchPair(t, prov)
			p0 := bp.ports[0].(*port)
			out := p0.outs[p0.index(transport.Addr{Rank: 1})]
			if bp.links[0].Push == nil {
				t.Fatal("an ofi link has no Push")
			}
			deadline := time.Now().Add(time.Minute)
			// A few packets through, then until the target took them all.
			for i := 0; i < 3; i++ {
				bp.send(t, 0, 8)
			}
			for bp.got[1].n < 3 || out.acked != out.posted {
				bp.advance(0)
				bp.advance(1)
				if time.Now().After(deadline) {
					t.Fatalf("%d packets delivered, %d of %d acknowledged", bp.got[1].n, out.acked, out.posted)
				}
			}
			posted := out.posted
			bp.send(t, 0, 8)
			bp.links[0].Push()
			if out.posted != posted+1 {
				t.Fatalf("Push of a packet on a quiet link posted %d packets, want 1", out.posted-posted)
			}
			bp.send(t, 0, 8)
			bp.links[0].Push()
			if out.posted != posted+1 {
				t.Fatalf("Push posted a packet while another was not taken (posted %d, acknowledged %d)", out.posted, out.acked)
			}
			for bp.got[1].n < 5 {
				bp.advance(0)
				bp.advance(1)
				if time.Now().After(deadline) {
					t.Fatalf("%d of 5 packets delivered", bp.got[1].n)
				}
			}
			// Quiet again: a pushed ping, answered by a pushed reply.
			for out.acked != out.posted {
				bp.advance(0)
				bp.advance(1)
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d packets acknowledged", out.acked, out.posted)
				}
			}
			rp := &replier{t: t, bp: bp, r: 1, push: true}
			for round := 1; round <= 3; round++ {
				bp.send(t, 0, 8)
				bp.links[0].Push()
				sent := out.posted
				for rp.n < round {
					bp.ports[1].Progress()
					bp.ports[1].Poll(rp, 64)
					if time.Now().After(deadline) {
						t.Fatalf("round %d: rank 1 did not receive the ping", round)
					}
				}
				got := bp.got[0].n
				for bp.got[0].n == got {
					bp.ports[0].Progress()
					bp.ports[0].Poll(&bp.got[0], 64)
					bp.trs[0].Complete()
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the reply did not arrive", round)
					}
				}
				if out.acked != sent {
					t.Fatalf("round %d: after the reply, %d of rank 0's %d packets acknowledged: the reply did not carry the acknowledgement of the ping", round, out.acked, sent)
				}
			}
		})
	}
}
