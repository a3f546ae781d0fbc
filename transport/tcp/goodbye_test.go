package tcp

import (
	"testing"
	"time"
)

// A rank that closes while its own link to a peer is still connecting,
// after the peer has taken its goodbye on the peer's link to it: the packet
// it queued on the connecting link still arrives. (The peer took the
// goodbye for the loss of the rank and refused the link, and a barrier's
// last message was lost with it.) The link's dial waits until the peer
// has seen the goodbye, so that the order is the one that lost it.
func TestLinkUpAfterGoodbye(t *testing.T) {
	ads, _, _ := newWorld(t, 2, Options{})
	ports := openAll(t, ads)
	a, b := ports[0], ports[1]
	from, to := addr(0, 0), addr(1, 0)
	exchange(t, b, a, to, from, 1) // b's link to a is up

	release := make(chan struct{})
	connectHook = func() { <-release }
	defer func() { connectHook = nil }()
	l, err := a.Link(to)
	if err != nil {
		t.Fatal(err)
	}
	if !(&producer{l: l}).send([]byte("last")) {
		t.Fatal("no room for one packet")
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()

	var col collector
	bp := b.(*port)
	goodbye := func() bool {
		bp.mu.Lock()
		defer bp.mu.Unlock()
		return bp.failed[from] != nil
	}
	deadline := time.Now().Add(20 * time.Second)
	for !goodbye() {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the peer never took the closing rank's goodbye")
		}
		b.Poll(&col, 64)
		b.Progress()
	}
	close(release)
	for col.count(from) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the packet queued on the closing rank's link never arrived (close: %v)", <-closed)
		}
		b.Poll(&col, 64)
		b.Progress()
	}
	if got := string(col.pkts[from][0]); got != "last" {
		t.Fatalf("got %q, want \"last\"", got)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
