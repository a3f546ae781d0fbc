//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// replier answers every packet it receives with a packet of its own,
// written into its rank's link from the handler, as an active message's
// handler that sends does; with push, it then calls the link's Push, as
// the AMI does after a Send of one slot.
type replier struct {
	t    testing.TB
	bp   *benchPair
	r    int
	n    int
	push bool
}

func (rp *replier) Receive(from transport.Addr, pkt []byte) {
	rp.n++
	rp.bp.send(rp.t, rp.r, 8)
	if rp.push {
		rp.bp.links[rp.r].Push()
	}
}

// TestPollPostsReplies checks that a packet a handler writes while Poll
// delivers leaves from that Poll: the reply of a ping-pong goes to the
// provider before Poll returns, not at the next Progress, after the rest
// of the AMI's pass; and that it reaches the peer.
func TestPollPostsReplies(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			bp := newBenchPair(t, prov)
			out := bp.ports[1].(*port).outs[bp.ports[1].(*port).index(transport.Addr{Rank: 0})]
			rp := &replier{t: t, bp: bp, r: 1}
			deadline := time.Now().Add(time.Minute)
			for round := 1; round <= 3; round++ {
				bp.send(t, 0, 8)
				for rp.n < round {
					bp.ports[0].Progress()
					bp.ports[1].Progress()
					before := out.posted
					bp.ports[1].Poll(rp, 64)
					if rp.n == round && out.posted != before+1 {
						t.Fatalf("round %d: the handler's reply was not posted by the Poll that ran it (posted %d, then %d)", round, before, out.posted)
					}
					if time.Now().After(deadline) {
						t.Fatalf("round %d: rank 1 did not receive the packet", round)
					}
				}
				for bp.got[0].n < round {
					bp.advance(0)
					bp.advance(1)
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the reply did not arrive", round)
					}
				}
			}
		})
	}
}
