package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// A rank that closes while its own link to a peer is still dialing, with
// a packet queued on it and a connection of the peer's to it up: the packet
// arrives. Close lets the handshake finish before it says goodbye on any
// connection, and a peer that took a goodbye still admits the rank's link
// (admitLocked). The dial waits until the rank began to close. The two
// ranks' descriptor buffers differ in size, so that the link cannot take
// the connection the peer made (port.reusable) and dials its own.
func TestLinkUpAfterGoodbye(t *testing.T) {
	ads := unlikeWorld(t, Options{RingSlots: 64}, Options{RingSlots: 128})
	ports := openAll(t, ads)
	a, b := ports[0], ports[1]
	from, to := addr(0, 0), addr(1, 0)
	exchange(t, b, a, to, from, 1) // b's link to a is up

	ap := a.(*port)
	dialed := make(chan struct{})
	connectHook = func(*port) {
		close(dialed)
		for !ap.closed.Load() {
			time.Sleep(20 * time.Microsecond)
		}
	}
	defer func() { connectHook = nil }()
	l, err := a.Link(to)
	if err != nil {
		t.Fatal(err)
	}
	if !(&producer{l: l}).send([]byte("last")) {
		t.Fatal("no room for one packet")
	}
	select {
	case <-dialed:
	case <-time.After(20 * time.Second):
		t.Fatal("the link took the peer's connection instead of dialing its own")
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()

	var col collector
	deadline := time.Now().Add(20 * time.Second)
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

// unlikeWorld is newWorld with options of each rank's own.
func unlikeWorld(t *testing.T, opts ...Options) []*Adapter {
	t.Helper()
	log := &logSink{t: t}
	js := jobs(len(opts), testSecret)
	ads := make([]*Adapter, len(opts))
	for r, o := range opts {
		o.Logf, o.Addr = log.logf, "127.0.0.1"
		a, err := New(js[r], transport.NewRegions(), o)
		if err != nil {
			t.Fatal(err)
		}
		ads[r] = a
	}
	for _, a := range ads {
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return ads
}
