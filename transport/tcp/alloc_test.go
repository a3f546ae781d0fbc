package tcp

import (
	"testing"

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
