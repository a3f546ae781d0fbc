package amigo

import (
	"errors"
	"testing"

	"github.com/amigo-hpc/amigo/internal/wire"
)

// Packets no correct peer sends are counted and reported, never acted on,
// and the context goes on working.
func TestMalformedPackets(t *testing.T) {
	var reported []error
	cl, err := NewLocal(2, Config{OnError: func(err error) { reported = append(reported, err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer cl[0].Close()
	defer cl[1].Close()
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	got := 0
	c1.SetDispatch(1, func(c *Context, m *Message) { got++ })
	p := c0.peer(1) // c0's link to rank 1, as c0's AMI writes it
	raw := func(pkt []byte) {
		b := p.reserve(len(pkt))
		if b == nil {
			t.Fatal("no room")
		}
		copy(b, pkt)
		p.commit(nil)
	}
	ack := make([]byte, wire.ACKSize)
	wire.PutACK(ack, 12345, wire.StatusOK) // acknowledges nothing
	eager := make([]byte, wire.EagerSize(10))
	wire.PutEager(eager, 999, 0) // data of no stream
	stop := make([]byte, wire.STOPSize)
	wire.PutSTOP(stop, 777, wire.StopPut, 1, 0) // stops nothing
	mcdata := make([]byte, wire.MCSize(0, 0))
	wire.PutMC(mcdata, wire.KindMCDATA, 0, nil, &wire.MC{Op: 5, OriginRank: 99}) // origin outside the job
	for _, pkt := range [][]byte{
		{},                         // empty
		{1, 2, 3},                  // short
		{200, 0, 0, 0, 0, 0, 0, 0}, // unknown kind
		{1, 0, 5, 0, 50, 0, 0, 0},  // header beyond the packet
		ack, eager, stop, mcdata,
	} {
		raw(pkt)
	}
	c0.SendImmediate(EndpointOf(1), 1, nil, []byte("still fine"))
	for i := 0; i < 100 && got == 0; i++ {
		c0.Advance()
		c1.Advance()
	}
	if got != 1 {
		t.Fatal("the context stopped working after malformed packets")
	}
	s := c1.Stats()
	if s.Malformed < 4 {
		t.Fatalf("%d malformed packets counted, want at least 4", s.Malformed)
	}
	if s.StaleAcks < 1 || s.EagerBytesDropped != 10 {
		t.Fatalf("stale ACK %d, dropped eager bytes %d", s.StaleAcks, s.EagerBytesDropped)
	}
	if len(reported) < 5 {
		t.Fatalf("OnError got %d reports", len(reported))
	}
	for _, err := range reported {
		var pe *PeerError
		if !errors.As(err, &pe) {
			t.Fatalf("report %v does not name the peer", err)
		}
	}
}
