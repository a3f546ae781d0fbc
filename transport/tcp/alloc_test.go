package tcp

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// The small-message paths of the adapter allocate nothing: a packet
// written by Progress, read and delivered by Poll, acknowledged, its
// descriptor given back; and a small GET and PUT, requested, served from
// the target's region and answered, all on the contexts' goroutines.
func TestZeroAlloc(t *testing.T) {
	ads, regs, _ := newWorld(t, 2, Options{})
	ports := openAll(t, ads)
	src, dst := ports[0], ports[1]
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 4096)
	key, err := regs[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{l: l}
	var sink countingReceiver
	msg := make([]byte, 8)
	roundTrip := func() {
		for !p.send(msg) {
			src.Progress()
			dst.Poll(&sink, 64)
		}
		want := sink.n + 1
		for sink.n < want {
			src.Progress()
			dst.Poll(&sink, 64)
		}
	}
	var pos uint64
	rdma := func(kind transport.RDMAKind, buf []byte) {
		d := l.RDMA.Slot(pos)
		d.Kind, d.Local, d.Key, d.Off = kind, buf, key, 64
		pos++
		l.RDMA.Publish(pos)
		for l.RDMA.TransferCounter().Load() != pos {
			src.Progress()
			dst.Poll(&sink, 64)
		}
		if err := l.RDMA.Status(pos - 1); err != nil {
			t.Fatal(err)
		}
	}
	get, put := make([]byte, 64), make([]byte, 64)
	// Warm up: connect, size the buffers.
	for i := 0; i < 2000; i++ {
		roundTrip()
	}
	rdma(transport.Get, get)
	rdma(transport.Put, put)
	if n := testing.AllocsPerRun(2000, roundTrip); n != 0 {
		t.Errorf("packet: %v allocations per round", n)
	}
	if n := testing.AllocsPerRun(500, func() { rdma(transport.Get, get) }); n != 0 {
		t.Errorf("GET: %v allocations per operation", n)
	}
	if n := testing.AllocsPerRun(500, func() { rdma(transport.Put, put) }); n != 0 {
		t.Errorf("PUT: %v allocations per operation", n)
	}
}

type countingReceiver struct{ n int }

func (c *countingReceiver) Receive(transport.Addr, []byte) { c.n++ }

// In a ping-pong the ack of each packet rides in the header of the packet
// that answers it: no ack frame, one write per message. The descriptor
// buffers hold 16 slots, so the 500 rounds complete only if the piggybacked
// acks give every descriptor back.
func TestPiggybackedAcks(t *testing.T) {
	ports, prod := pairLinks(t, Options{RingSlots: 16})
	var sink [2]countingReceiver
	msg := make([]byte, 8)
	deadline := time.Now().Add(30 * time.Second)
	step := func() {
		if time.Now().After(deadline) {
			t.Fatal("ping-pong stalled: descriptors not given back")
		}
		for _, p := range ports {
			p.Progress()
		}
		for r, p := range ports {
			p.Poll(&sink[r], 64)
		}
	}
	const rounds = 500
	for i := 1; i <= rounds; i++ {
		for from := range 2 {
			to := 1 - from
			for !prod[from].send(msg) {
				step()
			}
			for sink[to].n < i {
				step()
			}
		}
	}
	var piggy, frames uint64
	for _, p := range ports {
		s := p.(*port).a.Stats()
		piggy += s.Piggybacked
		frames += s.AckFrames
	}
	t.Logf("%d packets: %d acknowledged in packet headers, %d ack frames", 2*rounds, piggy, frames)
	if piggy < 2*rounds*9/10 || frames > 2*rounds/10 {
		t.Fatalf("%d packets: %d acknowledged in packet headers and %d ack frames; want nearly all piggybacked", 2*rounds, piggy, frames)
	}
}
