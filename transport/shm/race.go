//go:build race

package shm

import (
	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// The race detector does not see atomic operations on memory outside the Go
// heap, so it cannot see that a counter in a shared segment orders the
// copies before it with the copies after it. When ranks are goroutines of
// one process (the tests), each side of such an exchange also touches
// order's race word: raceRelease after its copies, raceAcquire before it
// trusts the other's, which gives the detector the edge the segment's
// atomics give the hardware. The descriptor buffers' producers release it
// when they publish (package ring), so that the polls' acquire orders a
// message after what its sender wrote before sending it.
func raceRelease() { order.RaceRelease() }
func raceAcquire() { order.RaceAcquire() }

// raceRecv takes the ordering word before each packet it hands on: a
// packet may announce bytes another goroutine copied after the Poll began
// (a notification after a pipelined Put the owner's engine finished).
type raceRecv struct{ r transport.Receiver }

func (x *raceRecv) Receive(from transport.Addr, pkt []byte) {
	raceAcquire()
	x.r.Receive(from, pkt)
}

// FromRing hands the reader on, if the receiver takes it.
func (x *raceRecv) FromRing(rd *ring.Reader) {
	if rr, ok := x.r.(transport.RingReceiver); ok {
		rr.FromRing(rd)
	}
}

func (p *port) raceReceiver(r transport.Receiver) transport.Receiver {
	p.race.r = r
	return &p.race
}
