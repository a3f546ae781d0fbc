package amigo

import (
	"errors"
	"slices"

	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

type opKind uint8

const (
	opSendRV     opKind = iota + 1 // sender of an RTS, waiting for the ACK
	opSendAck                      // sender of an AM that asked for an ACK
	opRecvRV                       // receiver of an RTS: announced, or fetching the data
	opRDMA                         // a Put or Get in pieces, or with remote completion
	opSendStream                   // sender of a SEND streamed as eager packets
	opRecvStream                   // receiver of a SEND
	opMcOrigin                     // origin of a multicast
	opMcTarget                     // target of a multicast
)

// issued reports whether an operation of kind k is one its context started
// (a send, a Put or Get, a multicast's origin), as opposed to the receiving
// side of a peer's message.
func (k opKind) issued() bool {
	return k != opRecvRV && k != opRecvStream && k != opMcTarget
}

// op is the state of an operation that outlives one descriptor. Its id (a
// generation and a table index) is what travels on the wire; a stale or
// forged id finds no live op.
type op struct {
	c    *Context
	kind opKind
	idx  uint32
	gen  uint32
	live bool
	next int32 // free list

	peer  *peer
	done  func(error)
	rdone func(error)
	err   error

	// RDMA pieces (opRDMA, opRecvRV): the byte counter remaining starts at
	// size and goes down as pieces land.
	rk        transport.RDMAKind
	local     []byte
	key       transport.Key
	off       uint64
	size      uint64
	posted    uint64
	remaining uint64
	inflight  int
	remote    bool
	vec       [][]byte // PutV, GetV: the local buffers, local unused
	vi        int      // the buffer of the next piece
	vo        uint64   // and its offset in it
	lay       Strided  // PutStrided, GetStrided, when lay.Block > 0

	region transport.Key // opSendRV, opSendStream: the registered send buffer
	srcOp  uint64        // opRecvRV, opRecvStream: the sender's op, for the ACK
	sidx   int           // opRecvStream: its index in peer.streams
	disp   Dispatch      // opRecvRV, opRecvStream

	parent    *op    // opRDMA: the stream or multicast this GET or PUT serves
	parentGen uint32 // parent's generation, in case it completed meanwhile
	mc        *mcState

	// opSendStream
	sent     uint64 // bytes streamed eagerly
	pkt      uint64 // size of the next eager packet
	putting  bool   // PUTting the rest after a STOP that named a buffer
	finished bool   // completed; waits for the engine to take its last packets
	acked    bool   // its ACK came: finished at the end of the pass (ackSend)
	hold     bool   // and opRecvStream: the SEND waits for GO (letStream); opRecvRV: such a SEND, fetched at once (fetchHeld)
	goSeen   bool   // and opRecvStream: the receiver said GO (the sender read it, holdRest; the receiver sent it)
	ackErr   error  // the ACK's status

	// opRecvStream
	buf          []byte
	tmp          [][]byte // unexpected eager data, in the budget
	contig       uint64   // bytes [0, contig) arrived in order
	bottom       uint64   // bytes from bottom up are fetched by GET
	frozen       bool     // an eager packet was dropped: contig stays
	stopped      bool     // STOP sent (receiver) or received (sender)
	busy         bool     // the SEND said its sender had others in progress
	variant      uint32
	ctsSeen      bool
	finSeen      bool
	putRequested bool
	children     int           // GETs in flight
	rkey         transport.Key // the receive buffer, registered for the sender's PUT
}

func (o *op) id() uint64 { return uint64(o.gen)<<32 | uint64(o.idx) }

// Done is called by the RDMA completion tracker once per piece of the op, in
// the order the pieces were injected.
func (o *op) Done(err error) {
	if err != nil && o.err == nil {
		o.err = err
	}
	piece := uint64(o.peer.chunk)
	if o.remaining < piece {
		piece = o.remaining
	}
	o.remaining -= piece
	o.inflight--
	if o.inflight == 0 && o.posted == o.size {
		o.c.finishRDMA(o)
	}
}

// opTable holds a context's live operations. It grows on demand and reuses
// entries, so a steady stream of operations allocates nothing.
type opTable struct {
	c    *Context
	ops  []*op
	free int32 // head of the free list, -1 when empty
	live int
}

// opFirstBlock is the number of entries of an op table's first block.
const opFirstBlock = 128

func (t *opTable) alloc(kind opKind, p *peer) *op {
	if t.ops == nil {
		t.free = -1
	}
	if t.free < 0 {
		n := len(t.ops)
		// The first block holds a bandwidth window's worth (64 messages
		// and their acknowledgements), so that a program that keeps
		// fewer operations live never grows the table after its first
		// one.
		grow := n
		if grow < opFirstBlock {
			grow = opFirstBlock
		}
		block := make([]op, grow)
		t.ops = slices.Grow(t.ops, grow)
		for i := range block {
			o := &block[i]
			o.c = t.c
			o.idx = uint32(n + i)
			o.next = int32(n + i + 1)
			t.ops = append(t.ops, o)
		}
		block[grow-1].next = t.free
		t.free = int32(n)
	}
	o := t.ops[t.free]
	t.free = o.next
	o.gen++
	o.live = true
	o.kind = kind
	o.peer = p
	p.ops++
	if kind.issued() {
		p.issued++
	}
	t.live++
	t.c.activate(p)
	return o
}

func (t *opTable) release(o *op) {
	o.peer.ops--
	if o.kind.issued() {
		o.peer.issued--
	}
	t.live--
	gen, idx := o.gen, o.idx
	*o = op{c: t.c, idx: idx, gen: gen, next: t.free}
	t.free = int32(idx)
}

// lookup returns the live op with id, or nil.
func (t *opTable) lookup(id uint64) *op {
	idx := uint32(id)
	if int(idx) >= len(t.ops) {
		return nil
	}
	o := t.ops[idx]
	if !o.live || o.gen != uint32(id>>32) {
		return nil
	}
	return o
}

// childOf accounts a finished child GET or PUT of p.
func (c *Context) childOf(p *op, off, n uint64, err error) {
	if p.kind == opMcOrigin || p.kind == opMcTarget {
		c.mcChildDone(p, off, n, err)
		return
	}
	c.childDone(p, n, err)
}

// failPeer fails every live op bound to p that no tracker will complete.
func (t *opTable) failPeer(p *peer, err error) int {
	t.c.failMcastPeer(p, err)
	n := 0
	for _, o := range t.ops {
		if o.live && o.peer == p && o.finished {
			t.release(o)
			continue
		}
		if o.live && o.peer == p && (o.inflight == 0 || o.kind == opSendStream) {
			t.c.failOp(o, err)
			n++
		}
	}
	return n
}

func (t *opTable) failAll(err error) {
	for _, o := range t.ops {
		switch {
		case o.live && o.finished:
			t.release(o)
		case o.live:
			t.c.failOp(o, err)
		}
	}
}

// failOp completes o with err. Pieces in flight, if any, are abandoned.
func (c *Context) failOp(o *op, err error) {
	switch o.kind {
	case opSendRV:
		c.releaseSendKey(o.region)
		callBoth(o.done, o.rdone, err)
	case opSendAck:
		callBoth(nil, o.rdone, err)
	case opRecvRV:
		callBoth(o.done, o.rdone, err)
	case opRDMA:
		if p := o.parent; p != nil {
			gen, off := o.parentGen, o.off
			c.ops.release(o)
			if p.live && p.gen == gen {
				c.childOf(p, off, 0, err)
			}
			return
		}
		callBoth(o.done, o.rdone, err)
	case opMcOrigin:
		c.mcAbort(o, -1, err)
		return
	case opMcTarget:
		c.mcFinish(o, err)
		return
	case opSendStream:
		if o.acked {
			// Delivered: its ACK came in this pass.
			err = o.ackErr
		}
		c.finishSend(o, err)
		return
	case opRecvStream:
		done := o.done
		c.releaseStream(o)
		if done != nil {
			done(err)
		}
		return
	}
	c.ops.release(o)
}

func callBoth(done, rdone func(error), err error) {
	if done != nil {
		done(err)
	}
	if rdone != nil {
		rdone(err)
	}
}

// finishRDMA completes an op whose pieces have all landed.
func (c *Context) finishRDMA(o *op) {
	switch o.kind {
	case opRDMA:
		if p := o.parent; p != nil {
			n, err, gen, off := o.size, o.err, o.parentGen, o.off
			c.ops.release(o)
			if p.live && p.gen == gen {
				c.childOf(p, off, n, err)
			}
			return
		}
		callBoth(o.done, o.rdone, o.err)
	case opRecvRV:
		// The byte counter is at zero: acknowledge to the origin, then
		// complete the receive.
		if o.err != nil {
			c.sendACK(o.peer.idx, o.srcOp, wire.StatusRemoteIO)
		} else if c.sendACK(o.peer.idx, o.srcOp, wire.StatusOK); o.hold {
			// A SEND that waited for GO, fetched at once.
			c.stats.ReceivedEager++
			c.stats.FetchedBytes += o.size
		} else {
			c.stats.ReceivedRendezvous++
		}
		if o.done != nil {
			o.done(asPeerErr(o.peer.ep, o.err))
		}
	}
	c.ops.release(o)
}

// onACK completes the sender's side of an AM or RTS.
func (c *Context) onACK(from int32, op uint64, status uint32) {
	if status == wire.StatusRefused {
		c.onRefused(from, op) // early.go
		return
	}
	o := c.ops.lookup(op)
	if o == nil || o.peer.idx != from || (o.kind != opSendRV && o.kind != opSendAck && o.kind != opSendStream) {
		c.stats.StaleAcks++
		c.asyncError(peerErr(c.endpointAt(from), errors.New("acknowledgement of an unknown operation")))
		return
	}
	c.stats.AcksReceived++
	err := statusErr(o.peer.ep, status)
	if o.kind == opSendStream {
		if o.putting {
			return // the PUT's completion finishes the send
		}
		c.ackSend(o, err)
		return
	}
	if o.kind == opSendRV {
		c.releaseSendKey(o.region)
		callBoth(o.done, o.rdone, err)
	} else {
		callBoth(nil, o.rdone, err)
	}
	c.ops.release(o)
}

// asPeerErr wraps err in a PeerError naming ep unless it already names a peer.
func asPeerErr(ep Endpoint, err error) error {
	if err == nil {
		return nil
	}
	var pe *PeerError
	if errors.As(err, &pe) {
		return err
	}
	return peerErr(ep, err)
}
