//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// spinningPair is a benchPair over shm whose ports spin (one more read of
// their queues, whatever a read costs on this machine), as ports whose
// reads look at memory do. Rank 0's port stays taken by the test's
// goroutine, as by its context, until the test ends: the adapter's
// watcher, which reads the queues of a port its context left alone for a
// tick, never reads it in the test's place.
func spinningPair(t *testing.T) *benchPair {
	bp := newBenchPair(t, "shm")
	for r := range 2 {
		p := bp.ports[r].(*port)
		p.enter()
		p.spin = 1
		if r == 1 {
			p.leave()
		}
	}
	p0 := bp.ports[0].(*port)
	t.Cleanup(p0.leave) // before the pair's cleanup closes the adapters
	return bp
}

// TestWaitingPortReadsInPoll checks where a port that waits for its peer
// reads its receive queue: in the Poll after Progress, which hands the
// answer to its handler at once, not in Progress, which would queue it in
// pending for that Poll. Rank 0 pings, rank 1 answers from its handler;
// rank 0, driven Progress then Poll as the AMI drives it, must receive
// every answer with nothing ever queued in pending.
func TestWaitingPortReadsInPoll(t *testing.T) {
	bp := spinningPair(t)
	p0, p1 := bp.ports[0].(*port), bp.ports[1].(*port)
	out0 := p0.outs[p0.index(transport.Addr{Rank: 1})]
	out1 := p1.outs[p1.index(transport.Addr{Rank: 0})]
	rp := &replier{t: t, bp: bp, r: 1, push: true}
	deadline := time.Now().Add(time.Minute)
	for round := 1; round <= 5; round++ {
		bp.send(t, 0, 8)
		// Until the ping is posted (a provider may refuse the first
		// packets to a new peer for a while): no answer can come before.
		for out0.posted < uint64(round) {
			bp.ports[0].Progress()
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the ping was not posted", round)
			}
		}
		for rp.n < round || out1.posted < uint64(round) {
			bp.ports[1].Progress()
			bp.ports[1].Poll(rp, 64)
			if time.Now().After(deadline) {
				t.Fatalf("round %d: rank 1 did not receive the ping or answer it", round)
			}
		}
		for bp.got[0].n < round {
			bp.ports[0].Progress()
			bp.ports[0].Poll(&bp.got[0], 64)
			if time.Now().After(deadline) {
				t.Fatalf("round %d: rank 0 did not receive the answer", round)
			}
		}
		bp.trs[0].Complete()
		bp.trs[1].Complete()
	}
	if p0.pendTail != 0 {
		t.Fatalf("%d answers went through pending: Progress read the receive queue of a port that waits, ahead of its Poll", p0.pendTail)
	}
}

// TestProgressAloneReadsAcks checks that a caller that only calls
// Progress (a flush waiting for its packets to be taken) still reads the
// receive queue of a port that waits: the acknowledgement of its packet
// arrives.
func TestProgressAloneReadsAcks(t *testing.T) {
	bp := spinningPair(t)
	p0 := bp.ports[0].(*port)
	out := p0.outs[p0.index(transport.Addr{Rank: 1})]
	deadline := time.Now().Add(time.Minute)
	for round := 1; round <= 3; round++ {
		bp.send(t, 0, 8)
		for bp.got[1].n < round {
			bp.ports[0].Progress()
			bp.ports[1].Poll(&bp.got[1], 64)
			if time.Now().After(deadline) {
				t.Fatalf("round %d: rank 1 did not receive the packet", round)
			}
		}
		// The next Poll acknowledges what the last one took.
		bp.ports[1].Poll(&bp.got[1], 64)
		bp.ports[1].Progress()
		for out.acked != out.posted {
			bp.ports[0].Progress()
			if time.Now().After(deadline) {
				t.Fatalf("round %d: Progress alone never read the acknowledgement (%d of %d acknowledged)", round, out.acked, out.posted)
			}
		}
		bp.trs[0].Complete()
	}
}
