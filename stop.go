package amigo

import (
	"errors"
	"fmt"

	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// autoKeepAbove is where the "auto" STOP variant switches from discard to
// keep: from bench/stop.sh over shared memory, keep's two-ended fetch beat
// plain rendezvous from 2 MiB, and lost to discard below.
const autoKeepAbove = 2 << 20

// unexpectedChunk is the unit in which unexpected eager data is held.
const unexpectedChunk = 64 << 10

// injectSend announces a large send and starts streaming it.
func (c *Context) injectSend(p *peer, in *inst) bool {
	key, err := c.sendKey(in.data)
	if err != nil {
		c.failInst(in, err)
		return true
	}
	b := p.reserve(wire.SENDSize(len(in.hdr)))
	if b == nil {
		c.releaseSendKey(key)
		return false
	}
	o := c.ops.alloc(opSendStream, p)
	o.done, o.rdone = in.done, in.rdone
	o.region = key
	o.local = in.data
	o.size = uint64(len(in.data))
	o.pkt = uint64(min(c.cfg.EagerPacket, c.eagerMax(p)))
	p.sendStreams++
	// A receiver with a buffer stops such a message as soon as it sees the
	// announcement (nameBuffer): stream only when it says GO (letStream).
	o.hold = c.cfg.Protocol == "stop" && c.cfg.EagerInflight == 0 && (o.size > p.stopAbove || o.size > p.stopBusy && p.sendStreams > 1)
	wire.PutSEND(b, in.disp, in.hdr, o.id(), o.size, uint64(key), p.sendStreams > 1, o.hold)
	c.stats.SentEager++
	p.sentMid(len(in.hdr) + len(in.data))
	p.commit(nil)
	if o.hold {
		return true
	}
	if c.cfg.Protocol == "stop" && o.size > p.stopBusy {
		// Alone now, but maybe the first of a window: stream the first
		// packet, and the rest from progress, behind the announcements
		// of the messages sent meanwhile. A receiver that sees the
		// second announcement with most of this one still to come stops
		// it too (stopAlone). Streamed whole at once, the first message
		// of a window went through the descriptor buffer before the
		// receiver heard of the others, and their fetches waited for it:
		// windows of 64 to 256 KiB moved 1.15-1.16 times as much with
		// this (an AMD 2-core host whose cores pass lines slowly, 4
		// interleaved runs), and a lone 64 KiB message took 1.02 times
		// as long.
		c.pumpEagerTo(o, o.pkt)
		c.queueMore(p, o)
		return true
	}
	if !c.pumpEager(o) {
		c.queueMore(p, o)
	}
	return true
}

// holdRest holds the rest of the stream o, which started alone (its first
// packet went with its announcement, injectSend) and has announcements
// behind it now: a window's first message, which the receiver stops when
// it sees the second announcement if it has a buffer for it (stopAlone),
// and otherwise tells to go on. It reports whether o waits for the word.
//
// # Why
//
// Streamed from the sender's next Advance, the rest of a window's first
// message went through the descriptor buffer before the receiver saw the
// second announcement, and the STOP it then sent came after the data: on
// a 2-core AMD host, 900 windows of 32 KiB messages streamed and dropped
// 29 MB, each window's first message copied through the ring and then
// fetched.
func (c *Context) holdRest(o *op) bool {
	p := o.peer
	if o.goSeen || o.stopped || o.hold || p.sendStreams < 2 || o.size <= p.stopBusy || c.cfg.Protocol != "stop" || c.cfg.EagerInflight != 0 {
		return false
	}
	o.hold = true
	return true
}

// onGO is the sender's side of a GO: stream the held message. A GO may
// come for a stream that is not held (yet): the receiver answers a
// window's second announcement for the first message, which its sender
// may hold from its next Advance on (holdRest), and then does not.
func (c *Context) onGO(src int32, pk *wire.Packet) {
	o := c.ops.lookup(pk.Op)
	if o == nil || o.kind != opSendStream || o.peer.idx != src {
		c.stats.StaleAcks++
		return
	}
	o.goSeen = true
	if !o.hold {
		return
	}
	o.hold = false
	if o.stopped || o.finished {
		return
	}
	p := o.peer
	if p.failed != nil {
		return
	}
	if p.more.len() > 0 || !c.pumpEager(o) {
		c.queueMore(p, o)
	}
}

// pumpEager streams o's data as eager packets while the FIFO has room, and
// reports whether the stream is over (all sent, or stopped) or waits for the
// engine to take a packet in flight.
//
// A stream has at most Config.EagerInflight packets in the FIFO that the
// engine has not yet taken: the pace of the transmission, as a DMA engine
// sending one packet after another gives it, so that a receiver's STOP finds
// little sent. It is not a limit the receiver grants: the sender's own
// transfer counter releases the next packet.
func (c *Context) pumpEager(o *op) bool { return c.pumpEagerTo(o, o.size) }

// pumpEagerTo is pumpEager up to byte end of o's data.
func (c *Context) pumpEagerTo(o *op, end uint64) bool {
	p := o.peer
	max := uint64(c.eagerMax(p))
	for !o.stopped && o.sent < end {
		if c.cfg.EagerInflight > 0 && o.inflight >= c.cfg.EagerInflight {
			return false // retried from progress once a packet was taken
		}
		n := o.size - o.sent
		if n > o.pkt {
			n = o.pkt
		}
		b := p.reserve(wire.EagerSize(int(n)))
		if b == nil {
			return false
		}
		copy(wire.PutEager(b, o.id(), o.sent), o.local[o.sent:o.sent+n])
		o.inflight++
		p.commit((*eagerTaken)(o))
		o.sent += n
		c.stats.EagerBytesSent += n
		if o.pkt < max {
			o.pkt = min(2*o.pkt, max)
		}
	}
	return true
}

// eagerTaken is a streaming op seen as the callback of its eager packets:
// the engine took one, the next may go.
type eagerTaken op

func (e *eagerTaken) Done(err error) {
	o := (*op)(e)
	o.inflight--
	if o.finished && o.inflight == 0 {
		o.c.ops.release(o)
	}
}

// eagerMax is the largest eager packet payload for p's FIFO.
func (c *Context) eagerMax(p *peer) int {
	m := c.cfg.EagerPacketMax
	if lim := p.ring.Slots() * 64 / 4; m > lim {
		m = lim
	}
	return max(m-wire.EagerSize(0), 64)
}

// sendCtl sends a control packet of the STOP protocol to the peer at idx,
// queueing it, if need be, ahead of the instructions queued for the peer
// (peer.ctl).
func (c *Context) sendCtl(idx int32, k wire.Kind, op uint64, status uint32, key, off uint64) {
	p := c.peer(idx)
	if p.failed != nil {
		return
	}
	if k == wire.KindACK && p == c.gather {
		p.acks = append(p.acks, wire.ACKEntry{Op: op, Status: status})
		return
	}
	if p.ctl.len() == 0 && c.writeCtl(p, k, op, status, key, off) {
		return
	}
	// The instruction is built only to be queued: as a literal it clears
	// all of an inst, some 400 bytes, which took more instructions than
	// writing the packet (callgrind of a window of fetched messages, whose
	// receiver sends two of these a message).
	in := inst{kind: instCtl, ctl: k, dest: idx, op: op, status: status, key: Key(key), off: off}
	p.ctl.push(&in)
	c.activate(p)
}

// sendACKs sends the ACKs gathered for p while its RDMA completions ran
// (service): in one ACKS packet, or several of up to wire.MaxACKS, where
// p's FIFO has room and no control packet waits before them; else each as
// sendCtl sends an ACK.
//
// # Why
//
// The receiver of a window of fetched messages finishes a batch of GETs
// in one pass and owed an ACK for each, a descriptor of its own: the
// receiver's fenced publish of each waited for the slot's line, and the
// sender read each slot's line in turn (a window of 64 x 32 KiB on the
// AMD host's slow state: some 8 us of ACKs in a window of some 60). In
// one packet, windows of 32 / 64 KiB moved 1.06 / 1.02x as much there (6
// interleaved rounds), 0.97-1.01x in the fast state, where lines cost
// little.
func (c *Context) sendACKs(p *peer) {
	acks := p.acks
	p.acks = p.acks[:0]
	if p.failed != nil {
		return
	}
	for len(acks) > 1 && p.ctl.len() == 0 {
		n := min(len(acks), wire.MaxACKS)
		b := p.reserve(wire.ACKSSize(n))
		if b == nil {
			break
		}
		wire.PutACKS(b, acks[:n])
		c.stats.AcksSent += uint64(n)
		c.stats.AckPackets++
		p.commit(nil)
		p.owed = p.msg.Injected()
		acks = acks[n:]
	}
	for _, a := range acks {
		c.sendCtl(p.idx, wire.KindACK, a.Op, a.Status, 0, 0)
	}
}

// writeCtl writes a control packet of kind k into p's descriptor buffer,
// if it has room: at once from sendCtl, or for a queued instCtl (inject).
func (c *Context) writeCtl(p *peer, k wire.Kind, op uint64, status uint32, key, off uint64) bool {
	var size int
	switch k {
	case wire.KindSTOP:
		size = wire.STOPSize
	case wire.KindCTS:
		size = wire.CTSSize
	case wire.KindFIN:
		size = wire.FINSize
	case wire.KindGO:
		size = wire.GOSize
	default:
		size = wire.ACKSize
	}
	b := p.reserve(size)
	if b == nil {
		return false
	}
	switch k {
	case wire.KindSTOP:
		wire.PutSTOP(b, op, status, key, off)
		c.stats.Stops++
	case wire.KindCTS:
		wire.PutCTS(b, op, off)
	case wire.KindFIN:
		wire.PutFIN(b, op, status)
	case wire.KindGO:
		wire.PutGO(b, op)
	default:
		wire.PutACK(b, op, status)
		c.stats.AcksSent++
		c.stats.AckPackets++
	}
	p.commit(nil)
	p.owed = p.msg.Injected()
	return true
}

// findStream returns the receiver's state of the message the peer at idx
// sends as op, or nil.
func (c *Context) findStream(idx int32, op uint64) *op {
	p := c.peers[idx]
	if p == nil {
		return nil
	}
	for _, o := range p.streams {
		if o.srcOp == op {
			return o
		}
	}
	return nil
}

// announce creates the receiver's state of a SEND before its handler runs.
func (c *Context) announce(src int32, pk *wire.Packet) *op {
	return c.announceOf(src, pk.Op, pk.Key, pk.Size, pk.Dispatch, pk.Flags)
}

// announceOf is announce from the SEND's fields: for a SEND that waits
// for GO, once its handler defers it or names a buffer it is not fetched
// into at once (Message.streamHeld).
func (c *Context) announceOf(src int32, srcOp, key, size uint64, disp uint16, flags uint8) *op {
	p := c.peer(src)
	o := c.ops.alloc(opRecvStream, p)
	o.srcOp, o.key, o.size = srcOp, transport.Key(key), size
	o.remaining = o.size
	o.bottom = o.size
	o.disp = Dispatch(disp)
	o.busy = flags&wire.FlagBusy != 0
	o.hold = flags&wire.FlagHold != 0
	if p.streams == nil {
		// Room for a bandwidth window's streams at once.
		p.streams = make([]*op, 0, 64)
	}
	o.sidx = len(p.streams)
	p.streams = append(p.streams, o)
	if len(p.streams) == 2 && c.cfg.Protocol == "stop" {
		c.stopAlone(p.streams[0])
	}
	return o
}

// stopAlone stops the stream o, named while it was the peer's only one
// and not stopped then, if stopWorth says so now that a second message of
// the peer is announced: the first message of a window. Otherwise it
// tells o's sender to go on (GO), which may hold the rest for the word
// (holdRest).
func (c *Context) stopAlone(o *op) {
	if !o.stopped && !o.frozen && o.buf != nil && c.stopWorth(o) {
		c.stop(o)
		return
	}
	if !o.stopped && !o.hold && !o.goSeen && o.remaining > 0 {
		o.goSeen = true
		c.sendGO(o)
	}
}

// sendGO tells the sender of the stream o to stream it (onGO).
func (c *Context) sendGO(o *op) {
	c.sendCtl(o.peer.idx, wire.KindGO, o.srcOp, 0, 0, 0)
	c.stats.Gos++
}

// heldArrived marks the peer's one stream in progress, if any, busy when a
// SEND that waits for GO arrives from the peer: the window's first message
// has others behind it, and is stopped now if it has a buffer, or told to
// go on (stopAlone). The held SEND itself has no stream unless its handler
// defers it (Message.streamHeld).
func (c *Context) heldArrived(src int32) {
	if p := c.peer(src); len(p.streams) == 1 {
		o := p.streams[0]
		o.busy = true
		c.stopAlone(o)
	}
}

// fetchHeld reports whether a SEND of size bytes that waits for GO, for
// which a handler names a buffer, is fetched at once as an RTS would be:
// when the STOP it would need, and does not, is of the discard variant. (Keep's,
// for 2 MiB and more still to come, has the sender's CTS start the second
// half of a two-part fetch, which moved windows of 2 MiB messages 1.12x
// as much as one fetch of the whole; put's names the receive buffer.)
func (c *Context) fetchHeld(size uint64) bool {
	return c.stopVariant == wire.StopDiscard || c.stopVariant == 0 && size < autoKeepAbove
}

// letStream tells the sender of o, a SEND that waits for the receiver's
// word, to stream it, unless o was stopped.
//
// A SEND whose sender streams nothing until the receiver says GO
// (wire.FlagHold) is what a message the receiver would stop if it
// named a buffer at once is announced as (larger than the peer's stop
// threshold, or than its busy threshold while another message to the
// peer streams; see stopWorth). The receiver that fetches it stops it
// without a word (stop); one that has no buffer for it yet, or would not
// stop it, says GO, and the stream starts (onGO).
//
// # Why
//
// Every eager packet sent before a STOP arrives is copied into the
// descriptor buffer for nothing: a window of 64 messages of 32 KiB over
// shared memory streamed 3.4 KB of each before the STOPs came back, and
// the receiver, whose core is the bottleneck of such a stream, skipped
// them all. So such a SEND waited for the receiver to take its
// announcement and streamed only if no STOP had come by then; the
// receiver stopped nearly every message of a window, each STOP a packet
// the receiver wrote and the sender read, and the sender's callback on
// the announcement's slot waited in the FIFO's pending list. On a 2-core
// AMD host whose cores pass a line in 0.3 us, windows announced by RTS,
// which the receiver fetches without a word, moved 1.16-1.22x as much at
// 16 KiB, 1.03-1.20x at 32 KiB (bench/MID_PATH.md). The word is now the
// exception's: GO costs the one-way latency of the link to a message the
// receiver does not stop, as the wait for the announcement to be taken
// did, and nothing to one it stops.
func (c *Context) letStream(o *op) {
	if !o.hold || o.stopped {
		return
	}
	o.hold = false
	c.sendGO(o)
}

// onEager lands one eager packet.
func (c *Context) onEager(src int32, pk *wire.Packet) {
	o := c.findStream(src, pk.Op)
	n := uint64(len(pk.Data))
	if o == nil || o.frozen || pk.Off != o.contig || o.stopped && o.variant == wire.StopDiscard {
		c.stats.EagerBytesDropped += n
		if o != nil && pk.Off != o.contig {
			o.frozen = true
		}
		return
	}
	// Bytes at and below the bottom are being fetched by GET; keep only
	// what lies above it.
	keep := n
	if o.contig >= o.bottom {
		keep = 0
	} else if o.contig+keep > o.bottom {
		keep = o.bottom - o.contig
	}
	if o.buf != nil {
		copy(o.buf[o.contig:], pk.Data[:keep])
	} else if !c.holdUnexpected(o, pk.Data[:keep]) {
		// No room in the budget: drop it, and stop the stream.
		c.stats.EagerBytesDropped += n
		o.frozen = true
		if !o.stopped {
			c.stop(o)
		}
		return
	}
	o.contig += n
	o.remaining -= keep
	c.stats.EagerBytesKept += keep
	c.maybeCompleteStream(o)
}

// holdUnexpected appends data to o's unexpected store, within the budget.
func (c *Context) holdUnexpected(o *op, data []byte) bool {
	end := o.contig + uint64(len(data))
	need := int((end + unexpectedChunk - 1) / unexpectedChunk)
	if more := need - len(o.tmp); more > 0 {
		if c.unexpected+more*unexpectedChunk > c.cfg.UnexpectedBudget {
			return false
		}
		for i := 0; i < more; i++ {
			var ch []byte
			if n := len(c.chunks); n > 0 {
				ch = c.chunks[n-1]
				c.chunks = c.chunks[:n-1]
			} else {
				ch = make([]byte, unexpectedChunk)
			}
			o.tmp = append(o.tmp, ch)
		}
		c.unexpected += more * unexpectedChunk
		if c.unexpected > c.stats.UnexpectedPeak {
			c.stats.UnexpectedPeak = c.unexpected
		}
	}
	for off := o.contig; len(data) > 0; {
		ch := o.tmp[off/unexpectedChunk][off%unexpectedChunk:]
		k := copy(ch, data)
		data = data[k:]
		off += uint64(k)
	}
	return true
}

// releaseUnexpected gives o's unexpected store back to the budget, copying
// it into o.buf first when there is one.
func (c *Context) releaseUnexpected(o *op) {
	if len(o.tmp) == 0 {
		return
	}
	if o.buf != nil {
		held := min(o.contig, o.bottom)
		for i, ch := range o.tmp {
			start := uint64(i) * unexpectedChunk
			if start >= held {
				break
			}
			copy(o.buf[start:held], ch)
		}
	}
	for i, ch := range o.tmp {
		c.chunks = append(c.chunks, ch)
		o.tmp[i] = nil
	}
	c.unexpected -= len(o.tmp) * unexpectedChunk
	o.tmp = o.tmp[:0]
}

// stop sends STOP for o in the configured variant, and starts what the
// variant does on the receiver's side if it has a buffer.
func (c *Context) stop(o *op) {
	o.stopped = true
	o.variant = c.stopVariant
	if o.variant == 0 {
		// auto: fetching from both ends at once pays for large remainders.
		o.variant = wire.StopDiscard
		if o.size-min(o.contig, o.size) >= autoKeepAbove {
			o.variant = wire.StopKeep
		}
	}
	if o.hold && o.variant == wire.StopDiscard {
		// Its sender streamed nothing and waits for GO (letStream): it
		// needs no STOP, and everything is fetched. A STOP of the other
		// variants still goes (see fetchHeld).
		o.frozen = true
		c.stats.Stops++
		o.remaining = o.size
		if o.buf != nil {
			c.fetch(o, 0, o.size)
		}
		return
	}
	switch o.variant {
	case wire.StopDiscard:
		o.frozen = true
		c.stats.EagerBytesDropped += min(o.contig, o.bottom)
		c.sendCtl(o.peer.idx, wire.KindSTOP, o.srcOp, wire.StopDiscard, 0, 0)
		o.contig = 0
		o.remaining = o.size
		c.releaseUnexpected(o) // with no buffer: dropped
		if o.buf != nil {
			c.fetch(o, 0, o.size)
		}
	case wire.StopKeep:
		c.sendCtl(o.peer.idx, wire.KindSTOP, o.srcOp, wire.StopKeep, 0, 0)
		if o.buf != nil {
			c.fetchBottom(o)
		}
	case wire.StopPut:
		if o.buf != nil {
			c.requestPut(o)
		} else {
			// No buffer to name yet: stop the stream now, name the buffer
			// in a second STOP once there is one.
			c.sendCtl(o.peer.idx, wire.KindSTOP, o.srcOp, wire.StopPut, 0, 0)
		}
	}
}

// fetchBottom GETs the bottom half of what may still come, at once, while
// eager packets keep landing from the top.
func (c *Context) fetchBottom(o *op) {
	if o.ctsSeen {
		c.fetchMiddle(o)
		return
	}
	top := min(o.contig, o.bottom)
	mid := top + (o.bottom-top)/2
	mid &^= 4095
	if mid < top {
		mid = top
	}
	if mid < o.bottom {
		c.fetch(o, mid, o.bottom)
		o.bottom = mid
	}
}

// fetchMiddle GETs what neither the eager packets nor the bottom GETs
// brought, once the CTS said the stream is over.
func (c *Context) fetchMiddle(o *op) {
	top := min(o.contig, o.bottom)
	if top < o.bottom {
		c.fetch(o, top, o.bottom)
		o.bottom = top
	}
}

// requestPut registers o's buffer and sends the STOP that names it.
func (c *Context) requestPut(o *op) {
	key, err := c.client.regions.Register(o.buf)
	if err != nil {
		// Fall back to fetching the rest.
		o.variant = wire.StopKeep
		c.sendCtl(o.peer.idx, wire.KindSTOP, o.srcOp, wire.StopKeep, 0, 0)
		c.fetchBottom(o)
		return
	}
	o.rkey = key
	from := wire.FromSent
	if o.frozen {
		from = o.contig
	}
	o.putRequested = true
	c.sendCtl(o.peer.idx, wire.KindSTOP, o.srcOp, wire.StopPut, uint64(key), from)
}

// fetch GETs [from, to) of the send buffer into o.buf as a child operation.
func (c *Context) fetch(o *op, from, to uint64) {
	if from >= to {
		return
	}
	ch := c.ops.alloc(opRDMA, o.peer)
	ch.parent, ch.parentGen = o, o.gen
	ch.rk = transport.Get
	ch.local = o.buf[from:to:to]
	ch.key = o.key
	ch.off = from
	ch.size = to - from
	ch.remaining = ch.size
	o.children++
	c.stats.FetchedBytes += ch.size
	p := o.peer
	if p.failed != nil {
		ch.err = p.failed
		c.finishRDMA(ch)
		return
	}
	if p.q.len() > 0 || !c.pump(ch) {
		c.queueMore(p, ch)
	}
}

// childDone accounts a finished child GET or PUT of parent.
func (c *Context) childDone(parent *op, n uint64, err error) {
	if err != nil && parent.err == nil {
		parent.err = err
	}
	switch parent.kind {
	case opRecvStream:
		parent.children--
		if err == nil {
			parent.remaining -= n
		} else {
			parent.remaining = 0
		}
		c.maybeCompleteStream(parent)
	case opSendStream:
		// The PUT of what the stream did not carry has landed.
		status := wire.StatusOK
		if err != nil {
			status = wire.StatusRemoteIO2
		}
		c.sendCtl(parent.peer.idx, wire.KindFIN, parent.id(), status, 0, 0)
		c.finishSend(parent, asPeerErr(parent.peer.ep, err))
	}
}

// maybeCompleteStream completes the receive of o once its byte counter is
// at zero and nothing is in flight.
func (c *Context) maybeCompleteStream(o *op) {
	if o.buf == nil || o.children > 0 || o.remaining > 0 && o.err == nil {
		return
	}
	if o.err == nil && o.variant != wire.StopPut {
		c.sendCtl(o.peer.idx, wire.KindACK, o.srcOp, wire.StatusOK, 0, 0)
	} else if o.err != nil && !o.finSeen {
		c.sendCtl(o.peer.idx, wire.KindACK, o.srcOp, wire.StatusRemoteIO, 0, 0)
	}
	if o.err == nil {
		c.stats.ReceivedEager++
	}
	done, err := o.done, asPeerErr(o.peer.ep, o.err)
	c.releaseStream(o)
	if done != nil {
		done(err)
	}
}

// releaseStream frees the receiver's state of a message.
func (c *Context) releaseStream(o *op) {
	c.releaseUnexpected(o)
	if o.rkey != 0 {
		_ = c.client.regions.Deregister(o.rkey)
	}
	// o is at o.sidx (the index is kept as streams move): a window's
	// streams are removed without a look through the others.
	p := o.peer
	if i := o.sidx; i < len(p.streams) && p.streams[i] == o {
		last := len(p.streams) - 1
		moved := p.streams[last]
		p.streams[i] = moved
		moved.sidx = i
		p.streams[last] = nil
		p.streams = p.streams[:last]
	}
	c.ops.release(o)
}

// nameBuffer gives a stream its receive buffer (from the handler or Accept)
// and decides, from what is still to come, whether to stop the stream.
func (c *Context) nameBuffer(o *op, buf []byte, done func(error)) {
	o.buf = buf[:o.size:o.size]
	o.done = done
	c.releaseUnexpected(o)
	switch {
	case o.stopped && o.variant == wire.StopDiscard:
		c.fetch(o, 0, o.size)
	case o.stopped && o.variant == wire.StopKeep:
		c.fetchBottom(o)
	case o.stopped && o.variant == wire.StopPut:
		if !o.putRequested {
			c.requestPut(o)
		}
	case o.frozen:
		// Eager data was dropped: the stream cannot complete by itself.
		c.stop(o)
	case c.cfg.Protocol == "stop" && c.stopWorth(o):
		c.stop(o)
	}
	c.letStream(o)
	c.maybeCompleteStream(o)
}

// stopWorth reports whether what is still to come of o, whose buffer is
// named, is better fetched by RDMA than streamed: above the peer's stop
// threshold, or above its lower threshold for a busy link, when other
// messages of the peer are in progress here or the sender said it had
// others in progress (wire.FlagBusy). The second is the data-flow
// condition of a window of messages: their GETs go together (an adapter
// may move them in one call), where a lone message of the same size
// arrives sooner streamed. Over shared memory on a 2-core machine, a
// window of 64 messages of 16 KiB moved 20 GB/s stopped at once and
// fetched, against 15 streamed; one message of 16 KiB took 1.1 us
// streamed, against 4.5 fetched. The sender's word counts because the
// receiver's view lags: a window's first message streams (the sender
// does not know others follow), and has often arrived whole by the time
// the second is announced, which then looked alone here and streamed
// whole too.
func (c *Context) stopWorth(o *op) bool {
	rest := o.size - min(o.contig, o.size)
	p := o.peer
	return rest > p.stopAbove || rest > p.stopBusy && (len(p.streams) > 1 || o.busy)
}

// onSTOP is the sender's side of a STOP.
func (c *Context) onSTOP(src int32, pk *wire.Packet) {
	o := c.ops.lookup(pk.Op)
	if o == nil || o.kind != opSendStream || o.peer.idx != src {
		c.stats.StaleAcks++
		return
	}
	c.stats.StopsReceived++
	o.stopped = true
	switch pk.Status {
	case wire.StopKeep:
		c.sendCtl(src, wire.KindCTS, o.id(), 0, 0, o.sent)
	case wire.StopPut:
		if pk.Key == 0 || o.putting {
			return // paused until the receiver names its buffer
		}
		from := pk.Off
		if from == wire.FromSent {
			from = o.sent
		}
		if from > o.size {
			c.sendCtl(src, wire.KindFIN, o.id(), wire.StatusRemoteIO2, 0, 0)
			c.finishSend(o, peerErr(o.peer.ep, fmt.Errorf("STOP asks for data from byte %d of %d", from, o.size)))
			return
		}
		o.putting = true
		if from == o.size {
			c.sendCtl(src, wire.KindFIN, o.id(), wire.StatusOK, 0, 0)
			c.finishSend(o, nil)
			return
		}
		ch := c.ops.alloc(opRDMA, o.peer)
		ch.parent, ch.parentGen = o, o.gen
		ch.rk = transport.Put
		ch.local = o.local[from:o.size:o.size]
		ch.key = transport.Key(pk.Key)
		ch.off = from
		ch.size = o.size - from
		ch.remaining = ch.size
		ch.remote = true
		c.stats.PutBytes += ch.size
		p := o.peer
		if p.q.len() > 0 || !c.pump(ch) {
			c.queueMore(p, ch)
		}
	}
}

// onCTS is the receiver's side of a CTS: the stream is over.
func (c *Context) onCTS(src int32, pk *wire.Packet) {
	o := c.findStream(src, pk.Op)
	if o == nil {
		return // completed already from what the eager packets and GETs brought
	}
	o.ctsSeen = true
	if o.buf != nil {
		c.fetchMiddle(o)
		c.maybeCompleteStream(o)
	}
}

// onFIN is the receiver's side of a FIN: the sender PUT the rest.
func (c *Context) onFIN(src int32, pk *wire.Packet) {
	o := c.findStream(src, pk.Op)
	if o == nil {
		return
	}
	o.finSeen = true
	if pk.Status != wire.StatusOK {
		o.err = errors.New("the sender could not PUT into the receive buffer")
	}
	o.remaining = 0
	c.maybeCompleteStream(o)
}

// ackedSend is a streamed send whose ACK came, at the generation it had.
type ackedSend struct {
	o   *op
	gen uint32
}

// ackSend finishes o, whose ACK came with status err, once the Advance has
// polled (finishAckedNow), together with the other sends acknowledged in
// the same pass: their send buffers are deregistered with one wait for the
// peers' accesses (transport.Regions.DeregisterAll). A pass takes the
// acknowledgements of a window's messages several at a time. On the AMD
// host in the slow state, where a withdrawal held the sender up for the
// trip of the mirror's line each (transport.MirrorBatch), windows of 32
// KiB messages moved 1.09x as much, of 64-256 KiB 1.04-1.08x, and of 16
// KiB fetched (AMIGO_INLINE_MAX=8704) 1.07-1.10x (2 runs of 5 and 6
// interleaved rounds).
func (c *Context) ackSend(o *op, err error) {
	o.acked, o.ackErr = true, err
	if len(c.acked) == 0 {
		c.doLater(c.finishAcked, nil)
	}
	c.acked = append(c.acked, ackedSend{o, o.gen})
}

// finishAckedNow finishes the sends ackSend listed, but those finished
// meanwhile (failOp).
func (c *Context) finishAckedNow(error) {
	keys := c.ackKeys[:0]
	for _, a := range c.acked {
		if a.o.live && a.o.gen == a.gen && a.o.acked && c.dropSendKey(a.o.region) {
			keys = append(keys, a.o.region)
		}
	}
	_ = c.client.regions.DeregisterAll(keys)
	for i, a := range c.acked {
		c.acked[i] = ackedSend{}
		if o := a.o; o.live && o.gen == a.gen && o.acked {
			o.region = 0
			c.finishSend(o, o.ackErr)
		}
	}
	c.acked = c.acked[:0]
	clear(keys)
	c.ackKeys = keys[:0]
}

// finishSend completes the sender's side of a streamed send. Eager packets
// the engine has not taken yet still name the op as their callback: it is
// released only after the last of them.
func (c *Context) finishSend(o *op, err error) {
	o.peer.sendStreams--
	c.releaseSendKey(o.region)
	done, rdone := o.done, o.rdone
	o.done, o.rdone = nil, nil
	if o.inflight > 0 {
		o.finished = true
		o.gen++ // packets about it no longer find it
	} else {
		c.ops.release(o)
	}
	callBoth(done, rdone, err)
}
