//go:build ofi

package ofi

// #include "amigo_ofi.h"
import "C"

import (
	"fmt"

	"github.com/amigo-hpc/amigo/transport"
)

// floorPingPong runs the provider's floor for the port's ping-pong with
// peer (amigo_floor_pingpong): iters round trips driven by a loop in C on
// the port's endpoint, with no call from Go between messages; as the
// answering side (server), until the pinging side ends it with
// endFloorPingPong. It is an instrument of BenchmarkProcessPingPong: what
// the same endpoint, buffers and queues cost without the Go side. The
// caller holds the port (enter) and has nothing else in flight on it.
func (p *port) floorPingPong(peer transport.Addr, iters int64, server bool) (int64, error) {
	l := p.outs[p.index(peer)]
	if l == nil {
		return 0, fmt.Errorf("no link to %v", peer)
	}
	n := int64(C.amigo_floor_pingpong(p.e.eph, p.e.rxh, l.dest, C.int64_t(iters), C.int(boolInt(server)),
		C.uintptr_t(addrOf(p.rxMem)), C.size_t(p.rxSize), C.uintptr_t(p.rxDesc), C.uintptr_t(p.ctxBase),
		C.size_t(ctxStride), C.int(boolInt(p.multi)), C.uint32_t(p.a.rank)))
	if n < 0 {
		return 0, fiErr("floor ping-pong", C.ssize_t(n))
	}
	return n, nil
}

// endFloorPingPong ends the answering side's floorPingPong.
func (p *port) endFloorPingPong(peer transport.Addr) error {
	l := p.outs[p.index(peer)]
	if l == nil {
		return fmt.Errorf("no link to %v", peer)
	}
	var msg [hdrSize]byte
	putHeader(msg[:], header{kind: kindPacket, rank: uint32(p.a.rank), ctx: uint16(p.ctx)})
	for !p.sendRaw(l.dest, msg[:]) {
	}
	return nil
}
