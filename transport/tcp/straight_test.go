package tcp

import (
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// seqReceiver checks that packets "n" come in order, counts them, and can
// run a function in its handler.
type seqReceiver struct {
	t    testing.TB
	n    int
	also func()
}

func (s *seqReceiver) Receive(from transport.Addr, pkt []byte) {
	if want := fmt.Sprint(s.n); string(pkt) != want {
		s.t.Errorf("packet %q, want %q", pkt, want)
	}
	s.n++
	if s.also != nil {
		s.also()
	}
}

// connOf returns the connection of port p's list (ins or outs) to rank.
func connOf(t testing.TB, p transport.Port, outs bool, rank int) *conn {
	pt := p.(*port)
	list := &pt.ins
	if outs {
		list = &pt.outs
	}
	for _, c := range pt.list(list) {
		if c.peer.Rank == int32(rank) {
			return c
		}
	}
	t.Fatalf("no connection (outs %v) with rank %d", outs, rank)
	return nil
}

// TestPacketsStraightFromReadBuffer checks that a Poll that reads its
// socket itself hands the packets it finds whole in the read buffer to
// the receiver without the reception ring, in order with those the ring
// holds: in a ping-pong most packets go straight; packets read into the
// ring first (by a read with no receiver, as the engine's) are delivered
// before any that arrive after them, whatever Poll's budget.
func TestPacketsStraightFromReadBuffer(t *testing.T) {
	ports, prod := pairLinks(t, Options{})
	recv := [2]*seqReceiver{{t: t}, {t: t}}
	deadline := time.Now().Add(30 * time.Second)
	wait := func(r, n, budget int) {
		for recv[r].n < n {
			if time.Now().After(deadline) {
				t.Fatalf("rank %d: %d of %d packets", r, recv[r].n, n)
			}
			ports[1-r].Progress()
			ports[r].Poll(recv[r], budget)
		}
	}
	sent := [2]int{}
	send := func(from int) {
		for !prod[from].send([]byte(fmt.Sprint(sent[from]))) {
			ports[from].Progress()
			ports[1-from].Poll(recv[1-from], 64)
			if time.Now().After(deadline) {
				t.Fatal("no room in the link")
			}
		}
		sent[from]++
	}
	const rounds = 200
	for i := 0; i < rounds; i++ {
		send(0)
		wait(1, sent[0], 64)
		send(1)
		wait(0, sent[1], 64)
	}
	c1 := connOf(t, ports[1], false, 0)
	if c1.straightN < rounds/2 {
		t.Fatalf("%d of %d packets of a ping-pong went straight to the receiver", c1.straightN, rounds)
	}
	// Packets in the ring first: read without a receiver, as the engine
	// reads, then more that arrive while they wait.
	for _, budget := range []int{1, 3, 64} {
		for k := 0; k < 5; k++ {
			send(0)
		}
		for !c1.rxRead.Pending() {
			ports[0].Progress()
			c1.pollInline()
			if time.Now().After(deadline) {
				t.Fatal("the packets did not reach the ring")
			}
		}
		for k := 0; k < 5; k++ {
			send(0)
		}
		if budget == 64 {
			// Poll drains the ring before it reads the socket, but the
			// engine may read in between: reading with a receiver while
			// the ring holds packets must put the new ones behind them.
			c0 := connOf(t, ports[0], true, 1)
			ports[0].Progress()
			for c1.rcvd.Load() != c0.sent.Load() || c1.rd.r != c1.rd.w || c0.wpos.Load() != prod[0].tail {
				ports[0].Progress()
				if _, got := c1.pollDeliver(recv[1], 64); got != 0 {
					t.Fatalf("%d packets went straight to the receiver ahead of those in the ring", got)
				}
				if time.Now().After(deadline) {
					t.Fatalf("the second packets did not arrive: rcvd %d sent %d r %d w %d wpos %d tail %d", c1.rcvd.Load(), c0.sent.Load(), c1.rd.r, c1.rd.w, c0.wpos.Load(), prod[0].tail)
				}
			}
		}
		wait(1, sent[0], budget)
	}
}

// TestHandlerPollsWhileStraight runs a Poll from inside a handler of a
// packet handed over straight from the read buffer, as an Advance in a
// handler would: it must return at once without reading the socket whose
// buffer holds the packet, and every packet must still arrive, in order.
func TestHandlerPollsWhileStraight(t *testing.T) {
	ads, _, _ := newWorld(t, 2, Options{})
	ports := openAll(t, ads)
	l, err := ports[0].Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	prod := &producer{l: l}
	inner := &seqReceiver{t: t}
	nested := 0
	recv := &seqReceiver{t: t}
	recv.also = func() {
		nested++
		if got := ports[1].Poll(inner, 64); got != 0 {
			t.Errorf("a Poll inside a handler delivered %d packets", got)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 100; i++ {
		for !prod.send([]byte(fmt.Sprint(i))) {
			ports[0].Progress()
			ports[1].Poll(recv, 64)
		}
		for recv.n <= i {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d packets", recv.n, i+1)
			}
			ports[0].Progress()
			ports[1].Poll(recv, 64)
		}
	}
	if nested != 100 || inner.n != 0 {
		t.Fatalf("%d nested Polls, %d packets to the inner receiver", nested, inner.n)
	}
}
