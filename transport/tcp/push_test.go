package tcp

import (
	"testing"
	"time"
)

// TestPushWritesQuietLink checks the link's Push: a packet published on a
// link with nothing awaiting the target's acknowledgement is written by
// Push itself, before any Progress of the sender; one published while
// another is unacknowledged is left to Progress (a window goes in one
// write), and both arrive in order.
func TestPushWritesQuietLink(t *testing.T) {
	// The engine takes a context's sockets over only after 10 s without a
	// poll: what is written here, Push or Progress wrote.
	ads, _, _ := newWorld(t, 2, Options{Timeout: time.Minute, Handoff: 10 * time.Second})
	ports := openAll(t, ads)
	from, to := addr(0, 0), addr(1, 0)
	exchange(t, ports[0], ports[1], from, to, 3)
	l, err := ports[0].Link(to)
	if err != nil {
		t.Fatal(err)
	}
	if l.Push == nil {
		t.Fatal("a TCP link has no Push")
	}
	c := ports[0].(*port).list(&ports[0].(*port).outs)[0]
	// Until the target's acknowledgements of the exchange are in.
	var col collector
	deadline := time.Now().Add(10 * time.Second)
	for c.acked.Load() != c.peeked.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("acknowledged %d of %d packets after 10s", c.acked.Load(), c.peeked.Load())
		}
		ports[1].Poll(&col, 64)
		ports[1].Progress()
		ports[0].Progress()
	}
	producersMu.Lock()
	p := producers[l]
	producersMu.Unlock()
	before := ads[0].Stats().BytesSent
	if !p.send([]byte("packet 3")) {
		t.Fatal("no room")
	}
	l.Push()
	// Push writes, or leaves the write to whoever holds the write side
	// at that moment, which writes it before letting go.
	deadline = time.Now().Add(10 * time.Second)
	for ads[0].Stats().BytesSent == before || c.wlock.Load() != 0 || c.wpend.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Push of a packet on a quiet link wrote nothing in 10s (ready %v blocked %v wlock %d wpend %d acked %d peeked %d failure %v)", c.ready.Load(), c.wblocked.Load(), c.wlock.Load(), c.wpend.Load(), c.acked.Load(), c.peeked.Load(), c.err())
		}
		time.Sleep(time.Millisecond)
	}
	pushed := ads[0].Stats().BytesSent
	if !p.send([]byte("packet 4")) {
		t.Fatal("no room")
	}
	l.Push()
	if got := ads[0].Stats().BytesSent; got != pushed {
		t.Fatalf("Push wrote %d bytes with a packet unacknowledged", got-pushed)
	}
	// The first arrives with no Progress of the sender.
	col = collector{}
	deadline = time.Now().Add(10 * time.Second)
	for col.count(from) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the pushed packet did not arrive")
		}
		ports[1].Poll(&col, 64)
	}
	for col.count(from) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the second packet did not arrive")
		}
		ports[0].Progress()
		ports[1].Poll(&col, 64)
	}
	for i, b := range col.pkts[from] {
		if want := []string{"packet 3", "packet 4"}[i]; string(b) != want {
			t.Fatalf("packet %d is %q, want %q", i, b, want)
		}
	}
}
