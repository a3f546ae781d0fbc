package tcp

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// connected returns how many connections each adapter attached.
func connected(ads []*Adapter) []uint64 {
	out := make([]uint64, len(ads))
	for i, a := range ads {
		out[i] = a.Stats().Connected
	}
	return out
}

// A pair of contexts that both send shares one connection: the second link
// takes the connection the first one made, whichever side made it, and
// packets flow both ways, in order, however the two links interleave.
func TestOneConnectionPerPair(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first int // the rank whose link is made first; -1: its packets first, then the peer's link
	}{
		{"lower links, then higher", -1},
		{"both at once, lower first", 0},
		{"both at once, higher first", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ads, _, log := newWorld(t, 2, Options{RingSlots: 64})
			ports := openAll(t, ads)
			a0, a1 := addr(0, 0), addr(1, 0)
			switch tc.first {
			case -1:
				exchange(t, ports[0], ports[1], a0, a1, 300)
			case 0:
				mustLink(t, ports[0], a1)
				mustLink(t, ports[1], a0)
			case 1:
				mustLink(t, ports[1], a0)
				mustLink(t, ports[0], a1)
			}
			for round := 0; round < 3; round++ {
				exchange(t, ports[1], ports[0], a1, a0, 300)
				exchange(t, ports[0], ports[1], a0, a1, 300)
			}
			got := connected(ads)
			// Higher first: the lower side may admit the higher one's
			// connection before it makes its own link, and then both
			// connections stay, one per direction (correct, if slower).
			if tc.first != 1 && (got[0] != 1 || got[1] != 1) {
				t.Fatalf("connections attached per rank: %v, want one each", got)
			}
			for i, a := range ads {
				if s := a.Stats(); s.Refused != 0 || s.Failed != 0 {
					t.Fatalf("rank %d: %d refused and %d failed connections", i, s.Refused, s.Failed)
				}
			}
			if log.has("failed") || log.has("refused") {
				t.Fatal("a connection failed or was refused")
			}
		})
	}
}

func mustLink(t *testing.T, p transport.Port, to transport.Addr) *transport.Link {
	t.Helper()
	l, err := p.Link(to)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Both contexts of a pair GET from each other at once, far more pieces than
// a target queues replies for, over their one connection: each side keeps
// reading the other's answers while it serves the other's requests, and
// every byte arrives.
func TestPairGetsBothWays(t *testing.T) {
	const pieces, size = 400, 128 << 10
	ads, regs, _ := newWorld(t, 2, Options{RingSlots: 64, RDMASlots: 256})
	ports := openAll(t, ads)
	a0, a1 := addr(0, 0), addr(1, 0)
	exchange(t, ports[0], ports[1], a0, a1, 10)
	exchange(t, ports[1], ports[0], a1, a0, 10)
	if got := connected(ads); got[0] != 1 || got[1] != 1 {
		t.Fatalf("connections attached per rank: %v, want one each", got)
	}
	var keys [2]transport.Key
	var mems [2][]byte
	for r := range 2 {
		mems[r] = make([]byte, size)
		for i := range mems[r] {
			mems[r][i] = byte(i*7 + r*100)
		}
		k, err := regs[r].Register(mems[r])
		if err != nil {
			t.Fatal(err)
		}
		keys[r] = k
	}
	type side struct {
		l    *transport.Link
		tail uint64
		bufs [][]byte
	}
	var s [2]side
	s[0].l = mustLink(t, ports[0], a1)
	s[1].l = mustLink(t, ports[1], a0)
	for r := range 2 {
		s[r].bufs = make([][]byte, pieces)
		for i := range s[r].bufs {
			s[r].bufs[i] = make([]byte, size)
		}
	}
	var col collector
	deadline := time.Now().Add(30 * time.Second)
	for {
		done := true
		for r := range 2 {
			q := s[r].l.RDMA
			// Keep the FIFO full: every piece is in flight as soon as
			// there is room for it.
			for s[r].tail < pieces && s[r].tail-q.HeadCounter().Load() < uint64(q.Slots()) {
				op := q.Slot(s[r].tail)
				*op = transport.RDMAOp{Kind: transport.Get, Local: s[r].bufs[s[r].tail], Key: keys[1-r]}
				s[r].tail++
				q.Publish(s[r].tail)
			}
			if q.TransferCounter().Load() < pieces {
				done = false
			}
			ports[r].Progress()
			ports[r].Poll(&col, 64)
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: rank 0 has %d, rank 1 %d of %d pieces (link errors %v, %v)",
				s[0].l.RDMA.TransferCounter().Load(), s[1].l.RDMA.TransferCounter().Load(), pieces, s[0].l.Err(), s[1].l.Err())
		}
	}
	for r := range 2 {
		for i := uint64(0); i < pieces; i++ {
			if err := s[r].l.RDMA.Status(i); err != nil {
				t.Fatalf("rank %d piece %d: %v", r, i, err)
			}
			if !bytes.Equal(s[r].bufs[i], mems[1-r]) {
				t.Fatalf("rank %d piece %d: wrong bytes", r, i)
			}
		}
	}
	if got := connected(ads); got[0] != 1 || got[1] != 1 {
		t.Fatal(fmt.Sprintf("connections attached per rank: %v, want one each", got))
	}
}

// The lower side admits the higher one's connection and, before its port
// takes the connection, makes a link of its own to it: the connection the
// higher side was told to use stays (the pair then has two, one per
// direction), rather than close under it without notice.
func TestLinkWhileAdmitting(t *testing.T) {
	admitted, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	acceptedHook = func(*Adapter) {
		once.Do(func() {
			close(admitted)
			<-resume
		})
	}
	defer func() { acceptedHook = nil }()
	ads, _, log := newWorld(t, 2, Options{RingSlots: 64})
	ports := openAll(t, ads)
	a0, a1 := addr(0, 0), addr(1, 0)
	mustLink(t, ports[1], a0)
	select {
	case <-admitted:
	case <-time.After(20 * time.Second):
		t.Fatal("rank 0 admitted no connection in 20s")
	}
	mustLink(t, ports[0], a1)
	close(resume)
	exchange(t, ports[1], ports[0], a1, a0, 100)
	exchange(t, ports[0], ports[1], a0, a1, 100)
	for i, a := range ads {
		if s := a.Stats(); s.Refused != 0 || s.Failed != 0 {
			t.Fatalf("rank %d: %d refused and %d failed connections", i, s.Refused, s.Failed)
		}
	}
	if log.has("failed") || log.has("refused") {
		t.Fatal("a connection failed or was refused")
	}
}

// The higher side's link takes the connection the lower side dialed, and
// the lower side's context only polls (Poll, no Progress) while the
// packets of that link come: Poll reads them. The watcher's hand-over of
// the sockets to the engine, which a pause of the polls brings, is kept
// out of the picture (Handoff longer than the exchange may take), and so
// is the keepalive: without Poll's look at the connections it dialed, the
// packets stayed in the socket until the peer counted the lower side
// silent and the connection failed (TestBadPackets's exchange after a
// rogue connection, now and then).
func TestPollReadsReusedDialedConnection(t *testing.T) {
	for _, n := range []int{2, 3} { // 3: oversubscribed, Poll asks epoll
		ads, _, log := newWorld(t, n, Options{Timeout: 2 * time.Minute, Handoff: 30 * time.Second})
		ports := openAll(t, ads)
		a0, a1 := addr(0, 0), addr(1, 0)
		exchange(t, ports[0], ports[1], a0, a1, 100)
		exchange(t, ports[1], ports[0], a1, a0, 100)
		exchange(t, ports[0], ports[1], a0, a1, 100)
		if got := connected(ads); got[0] != 1 || got[1] != 1 {
			t.Fatalf("%d ranks: connections attached per rank: %v, want one each", n, got)
		}
		for i, a := range ads {
			if s := a.Stats(); s.Handoffs != 0 || s.Failed != 0 {
				t.Fatalf("%d ranks: rank %d: %d hand-overs to the engine, %d failed connections", n, i, s.Handoffs, s.Failed)
			}
		}
		if log.has("failed") {
			t.Fatalf("%d ranks: a connection failed", n)
		}
	}
}
