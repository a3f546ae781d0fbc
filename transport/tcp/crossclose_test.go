package tcp

import (
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// Both contexts of a pair link to each other at once, so that one
// connection wins and the higher side hands its link over to it
// (verdictReverse, handOver); that side closes as soon as it has the
// other's packet, before its hand-over is done. Its own packet, queued on
// the link before the close, still arrives, ahead of its goodbye. (It was
// lost: the hand-over gave up when the port closed, and the goodbye could
// go out on the winning connection before the link was on it.) The dials
// wait until both links exist, and the hand-over until the close began.
func TestCrossingLinksClose(t *testing.T) {
	for round := 0; round < 20; round++ {
		crossingClose(t, round)
	}
}

// As TestCrossingLinksClose, but the higher side's port closes (its
// adapter stays) before the other side's connection has come: the closing
// port still takes that connection, for the link it hands over, and its
// packet arrives.
func TestCrossingLinksCloseFirst(t *testing.T) {
	for round := 0; round < 20; round++ {
		ads, _, _ := newWorld(t, 2, Options{})
		ports := openAll(t, ads)
		a, b := ports[0], ports[1]
		rb := addr(1, 0)
		ap, bp := a.(*port), b.(*port)
		bDialed := make(chan struct{})
		connectHook = func(p *port) {
			if p == ap {
				// a dials once b has closed.
				<-bDialed
				for !bp.closed.Load() {
					time.Sleep(20 * time.Microsecond)
				}
			}
		}
		handOverHook = func(p *port) {
			if p == bp {
				close(bDialed)
			}
		}
		linkBoth(t, a, b)
		closed := make(chan error, 1)
		go func() {
			<-bDialed
			closed <- b.Close()
		}()
		var ca collector
		if !pollFrom(a, &ca, rb, time.Now().Add(20*time.Second)) {
			t.Fatalf("round %d: a never got b's packet", round)
		}
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		connectHook, handOverHook = nil, nil
		ads[0].Close()
	}
}

func crossingClose(t *testing.T, round int) {
	ads, _, _ := newWorld(t, 2, Options{})
	ports := openAll(t, ads)
	a, b := ports[0], ports[1]
	ra, rb := addr(0, 0), addr(1, 0)
	var gate sync.WaitGroup
	gate.Add(1)
	handed := make(chan struct{}, 1)
	connectHook = func(*port) { gate.Wait() }
	handOverHook = func(p *port) {
		if p != b.(*port) {
			return
		}
		handed <- struct{}{}
		for !p.closed.Load() {
			time.Sleep(20 * time.Microsecond)
		}
	}
	defer func() { connectHook, handOverHook = nil, nil }()
	linkBoth(t, a, b)
	gate.Done()
	var ca, cb collector
	deadline := time.Now().Add(20 * time.Second)
	for cb.count(ra) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("round %d: b never got a's packet", round)
		}
		a.Progress()
		a.Poll(&ca, 64)
		b.Progress()
		b.Poll(&cb, 64)
	}
	select {
	case <-handed:
	case <-time.After(20 * time.Second):
		t.Fatalf("round %d: b's link was not handed over to a's connection", round)
	}
	closed := make(chan error, 1)
	go func() { closed <- ads[1].Close() }()
	if !pollFrom(a, &ca, rb, deadline) {
		t.Fatalf("round %d: a never got b's packet (b's close: %v)", round, <-closed)
	}
	if got := string(ca.pkts[rb][0]); got != "from b" {
		t.Fatalf("round %d: a got %q", round, got)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	ads[0].Close()
}

// linkBoth links a (rank 0) and b (rank 1) to each other and queues a
// packet on each link.
func linkBoth(t *testing.T, a, b transport.Port) {
	t.Helper()
	la, err := a.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Link(addr(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	(&producer{l: la}).send([]byte("from a"))
	(&producer{l: lb}).send([]byte("from b"))
}

// As TestCrossingLinksClose, but the higher side's port closes just as
// its hand-over ended the link's own connection, before the winning
// connection took the link: Close waits for the hand-over, and its
// goodbye leaves after the link's packet. (The goodbye went out first,
// and the packet was lost behind it.) The hand-over waits there until the
// goodbye is written, or for a second.
func TestCrossingLinksCloseMidHandOver(t *testing.T) {
	for round := 0; round < 3; round++ {
		ads, _, _ := newWorld(t, 2, Options{})
		ports := openAll(t, ads)
		a, b := ports[0], ports[1]
		rb := addr(1, 0)
		bp := b.(*port)
		var gate sync.WaitGroup
		gate.Add(1)
		closed := make(chan error, 1)
		connectHook = func(*port) { gate.Wait() }
		handedHook = func(p *port, r *conn) {
			if p != bp {
				return
			}
			go func() { closed <- bp.Close() }()
			for deadline := time.Now().Add(time.Second); !r.byeSent.Load() && time.Now().Before(deadline); {
				time.Sleep(100 * time.Microsecond)
			}
		}
		linkBoth(t, a, b)
		gate.Done()
		var ca collector
		if !pollFrom(a, &ca, rb, time.Now().Add(10*time.Second)) {
			t.Fatalf("round %d: a never got b's packet", round)
		}
		if got := string(ca.pkts[rb][0]); got != "from b" {
			t.Fatalf("round %d: a got %q", round, got)
		}
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: b's close did not return", round)
		}
		connectHook, handedHook = nil, nil
		ads[0].Close()
		ads[1].Close()
	}
}
