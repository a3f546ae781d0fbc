package amigo

import (
	"cmp"
	"math"
	"sync/atomic"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/memcopy"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// peer is a context's state toward one remote context: the link's two
// injection FIFOs with their completion trackers, and the instructions that
// wait for room in them. It belongs to the owner goroutine.
type peer struct {
	_    [64]byte // written per message by the owner: no sharing of lines
	idx  int32
	ep   Endpoint
	link *transport.Link

	ring *ring.Ring
	bell *transport.Doorbell
	push func() // transport.Link.Push
	due  *bool  // Context.progressDue
	// sendNow is transport.Link.SendNow; pkt is where writeAM builds a
	// packet offered to it.
	sendNow func(pkt []byte) bool
	pkt     [ring.SlotSize - ring.HeaderSize]byte
	sentNow *atomic.Uint64 // Context.sentNow
	msg     *fifo.Tracker
	k       int // slots of the descriptor reserved and not yet committed
	size    int // its payload bytes
	// records: the link's consumer reads the ring with ring.Reader.Take, so
	// small messages may share slots (writeRecord). roff is the offset of
	// the next record in the slot of records at rpos, or 0 when there is
	// none to append to. epoch is Context.epoch at the last small message.
	records bool
	roff    int
	rpos    uint64
	epoch   uint64

	rq    *transport.RDMAQueue
	rdma  *fifo.Tracker
	chunk int
	// stopAbove is Config.StopAbove for this peer: the program's, else the
	// link's, else the default.
	stopAbove uint64
	// stopBusy is the threshold while other messages of this peer are in
	// progress (transport.Link.StopBusyAbove; Config.StopAbove sets both).
	stopBusy uint64
	// inlineBusy is transport.Link.InlineBusyMax for this peer, or the
	// largest int: see busyFor.
	inlineBusy int
	// inlineKept is the most header plus data a Send carries inline in a
	// window while the peer leaves the data of inline descriptors where it
	// lay (its reader says so in the ring's wrap word, ring.Ring.Wrap):
	// the context's InlineMax where inlineBusy is the link's, else
	// inlineBusy. busyMax is inlineKept while the peer says so and
	// inlineBusy otherwise, set where reserve reads the word, once a lap.
	// See busyFor.
	inlineKept, busyMax int
	// midMin is transport.Link.InlineBusyMin for this peer where the way
	// of mid-size messages is open (Config.MidWay), else inlineBusy: a
	// Send of more header plus data than midMin, up to busyMax, goes
	// announced in a window when midFetch says so (busyFor, mid.go).
	midMin   int
	midFetch bool
	mid      midWay
	stats    *Stats // the context's: mid.go counts its epochs there
	// sendStreams counts the messages this context is streaming to the
	// peer; recvStreams (len(streams)) those the peer streams to it.
	sendStreams int

	// acks holds the ACKs this context owes the peer for receives that
	// completed in one pass over its RDMA completions (Context.service),
	// written together after it (sendACKs).
	acks []wire.ACKEntry

	q instRing // instructions waiting for FIFO space, in order
	// ctl holds control packets (STOP, CTS, FIN, ACK) waiting for FIFO
	// space, in order. They go before q: none of them has to follow an
	// instruction still queued (each answers a packet that came, or ends an
	// operation whose packets are out), and behind q they could wait for a
	// whole stream: two ranks streaming to each other had each's STOP of
	// the other's stream queued behind the rest of its own, and both sent
	// all of their data eagerly for nothing.
	ctl instRing
	// more holds the eager streams waiting for FIFO space, behind q: a
	// new announcement goes before the rest of an earlier stream, so
	// that the receiver sees a window's announcements early and fetches
	// them together (stopWorth), rather than after the first message
	// streamed whole.
	more instRing
	// owed is the FIFO's injection count after the last control packet
	// (ACK, STOP, CTS, FIN, a multicast's) injected: the peer has them all
	// once the transfer counter reaches it. Close waits for that on links
	// where injected is not yet delivered (farewell).
	owed    uint64
	streams []*op // messages this peer is streaming to us
	ops     int   // live operations bound to this peer
	// issued counts those of ops this context started toward the peer
	// (opKind.issued): a Fence waits for them, and not for the receiving
	// side of the peer's messages, which may wait for this context's own
	// later Accept or receive.
	issued   int
	isActive bool
	failed   error

	_ [64]byte // see the padding at the top
	// wrap: where the consumer asks laps to end (ring.Wrap), read at
	// position wrapAt, again a lap later.
	wrap, wrapAt uint64
}

func (p *peer) idle() bool {
	return p.q.len() == 0 && p.ctl.len() == 0 && p.more.len() == 0 && p.ops == 0 && (p.failed != nil || p.msg.Pending() == 0 && p.rdma.Pending() == 0)
}

// peerIndex validates ep and returns its index.
func (c *Context) peerIndex(ep Endpoint) (int32, error) {
	if ep.Rank < 0 || ep.Rank >= c.client.size || ep.Context < 0 || ep.Context >= c.nctx {
		return 0, peerErr(ep, ErrUnknownEndpoint)
	}
	return int32(ep.Rank*c.nctx + ep.Context), nil
}

// peer returns the peer at idx, connecting on first use. A peer that cannot
// be connected comes back failed.
func (c *Context) peer(idx int32) *peer {
	if p := c.peers[idx]; p != nil {
		return p
	}
	return c.connect(idx)
}

func (c *Context) connect(idx int32) *peer {
	ep := Endpoint{Rank: int(idx) / c.nctx, Context: int(idx) % c.nctx}
	port := c.ports[c.client.route[ep.Rank]]
	link, err := port.Link(ep.addr())
	if err != nil {
		// A stand-in with a failed link, so that every instruction for the
		// peer completes with the error.
		link = &transport.Link{To: ep.addr(), RDMA: transport.NewRDMAQueue(1)}
		link.Msg, _ = ring.NewHeap(2)
		link.Fail(err)
	}
	p := &peer{idx: idx, ep: ep, link: link, ring: link.Msg, bell: link.MsgBell, push: link.Push, due: &c.progressDue, sendNow: link.SendNow, sentNow: &c.sentNow, rq: link.RDMA, records: link.Shared}
	p.msg = fifo.New(link.Msg.Slots(), link.Msg.HeadCounter(), link.Msg.TransferCounter(), nil)
	p.rdma = fifo.New(link.RDMA.Slots(), link.RDMA.HeadCounter(), link.RDMA.TransferCounter(), link.RDMA.Status)
	p.chunk = c.cfg.RDMAChunk
	p.stopAbove = uint64(c.cfg.StopAbove)
	if p.stopAbove == 0 {
		p.stopAbove = uint64(cmp.Or(link.StopAbove, defaultStopAbove))
		p.stopBusy = uint64(cmp.Or(link.StopBusyAbove, int(p.stopAbove)))
	} else {
		p.stopBusy = p.stopAbove
	}
	p.inlineBusy, p.midMin, p.inlineKept, p.busyMax = math.MaxInt, math.MaxInt, math.MaxInt, math.MaxInt
	if c.cfg.inlineAuto && link.InlineBusyMax > 0 {
		p.inlineBusy = link.InlineBusyMax
		way := c.cfg.MidWay
		if way == "auto" && c.cfg.Protocol != "stop" {
			way = "inline" // measured against the STOP protocol's way only
		}
		p.initMid(way, link.InlineBusyMin)
		p.inlineKept = max(p.inlineBusy, c.cfg.InlineMax)
	}
	p.stats = &c.stats
	if link.MaxRDMA > 0 && link.MaxRDMA < p.chunk {
		p.chunk = link.MaxRDMA
	}
	if err != nil {
		p.failed = err
	}
	c.peers[idx] = p
	c.logConnect(p)
	return p
}

// reserve returns the payload area of a descriptor of size bytes in the
// peer's message FIFO, writing a pad first if the descriptor would wrap. It
// returns nil when the FIFO has no room: the caller keeps its instruction.
func (p *peer) reserve(size int) []byte {
	p.roff = 0 // records may not follow another descriptor
	k := ring.SlotsFor(size)
	tail := p.msg.Tail()
	if p.wrap == 0 || tail-p.wrapAt >= uint64(p.ring.Slots()) {
		var inPlace bool
		p.wrap, inPlace = p.ring.Wrap() // the consumer's wish, read once a lap
		p.wrapAt = tail
		p.busyMax = p.inlineBusy
		if inPlace {
			p.busyMax = p.inlineKept
		}
	}
	pad := p.ring.PadAt(tail, k, p.wrap)
	if !p.msg.Space(pad + k) {
		return nil
	}
	if pad > 0 {
		p.ring.WritePad(tail, pad)
		p.msg.Inject(pad, nil)
		tail += uint64(pad)
	}
	p.k = k
	p.size = size
	return p.ring.Payload(tail, size)
}

// commit injects the descriptor filled in after reserve, listing cb.
func (p *peer) commit(cb fifo.Done) {
	p.ring.Seal(p.msg.Tail(), p.size)
	p.msg.Inject(p.k, cb)
	k := p.k
	p.k = 0
	p.ring.Publish(p.msg.Tail())
	if k == 1 {
		// A one-slot descriptor is mostly a control packet of a
		// window (SEND, STOP, ACK), and the next one follows soon:
		// ask for the next slot's line now (ring.Prepare), so that
		// the fence after the next store does not wait for it.
		p.ring.Prepare(p.msg.Tail())
	}
	if p.bell != nil {
		p.bell.Ring()
	} else {
		*p.due = true
	}
}

// execute carries out a posted instruction, or queues it at its peer when the
// peer's FIFO has no room.
func (c *Context) execute(in *inst) {
	switch in.kind {
	case instCall:
		in.fn(c)
		return
	case instAccept:
		c.accept(in)
		return
	case instReject:
		c.reject(in)
		return
	case instMcast:
		// In its turn among the instructions for the first target: behind
		// a Fence there, which must not wait for it.
		if p := c.peer(in.dest); p.q.len() > 0 {
			p.q.push(in)
			c.stats.Queued++
			c.activate(p)
			return
		}
		c.mcStart(in)
		return
	}
	p := c.peer(in.dest)
	if p.failed != nil {
		c.failInst(in, p.failed)
		return
	}
	if p.q.len() > 0 || !c.inject(p, in) {
		p.q.push(in)
		c.stats.Queued++
		c.activate(p)
	}
}

// flush injects the instructions queued at p while there is room.
func (c *Context) flush(p *peer) int {
	n := 0
	for p.ctl.len() > 0 && p.failed == nil {
		if !c.inject(p, p.ctl.front()) {
			return n
		}
		p.ctl.popFront()
		n++
	}
	for p.q.len() > 0 && p.failed == nil {
		if !c.inject(p, p.q.front()) {
			break
		}
		p.q.popFront()
		n++
	}
	for p.more.len() > 0 && p.failed == nil {
		if !c.inject(p, p.more.front()) {
			break
		}
		p.more.popFront()
		n++
	}
	return n
}

// busyFor reports whether a Send of n bytes of header and data, within
// InlineMax, is to go as a large message rather than inline: above
// inlineBusy while the peer has not taken every descriptor sent to it. On
// an AMD 2-core host whose cores pass lines slowly, windows of 32 KiB
// messages moved 1.23 times as much announced and fetched by cross-memory
// attach as inline (6 interleaved runs), while a lone one took 1.17 times
// as long; 16 KiB moved 0.87-0.91 times as much. A message of a header
// alone (data false) goes inline however busy the peer: announced, it
// would have no data to register.
//
// Between midMin and busyMax the way is measured (mid.go): busy, such a
// Send goes announced when midFetch says so. busyMax is inlineBusy, or
// inlineKept while the peer leaves inline data where it lay, as a handler
// that does not read it does (ring.Reader.SetKeep): the sender's copy
// then stays in its own core, and on the AMD host a window of 32 KiB
// messages to such a handler moved 1.32-1.78x as much with the range
// widened as announced (amibench -b am_bw, the host's slow and fast
// states, 4-6 interleaved rounds each). Copied out, inline 32 KiB moves
// 0.78-0.83x of announced, and with the range widened for every receiver
// the trials of inline cost windows of 32 KiB 5% (bench/MID_PATH.md).
func (p *peer) busyFor(n int, data bool) bool {
	return data && n > p.midMin && (n > p.busyMax || p.midFetch) && p.msg.Outstanding() > 0
}

// inject tries to inject in into p's FIFOs and reports whether it did. An
// instruction that fails for good completes with its error and counts as
// injected.
func (c *Context) inject(p *peer, in *inst) bool {
	switch in.kind {
	case instFence:
		if in.status == fenceNotify && p.link.Ordered {
			return true
		}
		if !p.fenceReady() {
			return false // it waits at the front of p.q, and so does what follows it
		}
		c.doLater(in.done, nil)
		return true
	case instImm:
		size := wire.AMSize(int(in.hlen), int(in.dlen), false)
		hdr, data := in.imm[:in.hlen], in.imm[in.hlen:in.hlen+in.dlen]
		if p.sendNow != nil && p.sendAtOnce(in.disp, hdr, data, size) {
			c.stats.SentInline++
			return true
		}
		b := p.reserve(size)
		if b == nil {
			return false
		}
		wire.PutAM(b, in.disp, hdr, data, false, 0)
		p.commit(nil)
		c.stats.SentInline++
		return true
	case instSend:
		if n := len(in.hdr) + len(in.data); n <= c.cfg.InlineMax && !p.busyFor(n, len(in.data) > 0 || in.vec != nil) {
			return c.injectAM(p, in)
		}
		if c.cfg.Protocol == "rendezvous" {
			return c.injectRTS(p, in)
		}
		return c.injectSend(p, in)
	case instRDMA:
		return c.injectRDMA(p, in)
	case instCtl:
		return c.writeCtl(p, in.ctl, in.op, in.status, uint64(in.key), in.off)
	case instRaw:
		return c.injectRaw(p, in)
	case instMcast:
		c.mcStart(in)
		return true
	case instMore:
		o := c.ops.lookup(in.op)
		if o == nil {
			return true
		}
		if o.kind == opSendStream {
			if c.holdRest(o) {
				return true
			}
			return c.pumpEager(o)
		}
		return c.pump(o)
	}
	return true
}

func (c *Context) injectAM(p *peer, in *inst) bool {
	ack := in.rdone != nil
	dlen := len(in.data)
	if in.vec != nil {
		dlen = rmaSize(in) // SendV: gathered into the descriptor
	}
	size := wire.AMSize(len(in.hdr), dlen, ack)
	if p.sendNow != nil && !ack && in.vec == nil && in.done == nil && p.sendAtOnce(in.disp, in.hdr, in.data, size) {
		c.stats.SentInline++
		return true
	}
	b := p.reserve(size)
	if b == nil {
		return false
	}
	var id uint64
	if ack {
		o := c.ops.alloc(opSendAck, p)
		o.rdone = in.rdone
		id = o.id()
	}
	memcopy.Copy(b[wire.PutAMHead(b, in.disp, in.hdr, ack, id):], in.data)
	if in.vec != nil {
		at := size - dlen
		for _, v := range in.vec {
			at += copy(b[at:], v)
		}
	}
	// On a link whose descriptor buffer the consumer reads in place, the
	// message is delivered once published. With no earlier callback of
	// this FIFO pending, calling done at once keeps the FIFO's callbacks in
	// injection order; otherwise, and on links that still move the bytes
	// (a socket, where done means the engine sent them), it waits its turn
	// in the pending list, as every descriptor's does.
	p.sentMid(len(in.hdr) + dlen)
	if in.done == nil || p.link.Shared && p.msg.Pending() == 0 {
		p.commit(nil)
		c.stats.SentInline++
		c.callNow(in.done, nil)
		return true
	}
	c.activate(p)
	p.commit(fifo.Func(in.done))
	c.stats.SentInline++
	return true
}

// injectRTS announces a send by rendezvous: the send buffer is registered
// for the receiver to GET, and the RTS carries its key; the receiver's ACK
// completes the send.
func (c *Context) injectRTS(p *peer, in *inst) bool {
	key, err := c.sendKey(in.data)
	if err != nil {
		c.failInst(in, err)
		return true
	}
	b := p.reserve(wire.RTSSize(len(in.hdr)))
	if b == nil {
		c.releaseSendKey(key)
		return false
	}
	o := c.ops.alloc(opSendRV, p)
	o.done, o.rdone = in.done, in.rdone
	o.region = key
	o.size = uint64(len(in.data))
	wire.PutRTS(b, in.disp, in.hdr, o.id(), o.size, uint64(key))
	p.commit(nil)
	c.stats.SentRendezvous++
	return true
}

// injectRDMA starts a Put or Get. One piece with no remote completion
// requested lists the user's callback directly; anything else runs as an
// operation whose pieces each count down its byte counter.
func (c *Context) injectRDMA(p *peer, in *inst) bool {
	n := len(in.data)
	if in.vec != nil || in.lay.Block > 0 {
		n = rmaSize(in)
	} else if n <= p.chunk && in.rdone == nil {
		if !p.rdma.Space(1) {
			return false
		}
		pos := p.rdma.Tail()
		op := p.rq.Slot(pos)
		op.Kind, op.Local, op.Key, op.Off, op.Remote = in.rdma, in.data, transport.Key(in.key), in.off, false
		if in.rdma == transport.Atomic {
			op.AOp, op.Width, op.Operand, op.Compare = in.aop, in.width, in.arg, in.cmp
		}
		var cb fifo.Done
		if in.done != nil {
			cb = fifo.Func(in.done)
			c.activate(p)
		}
		p.rdma.Inject(1, cb)
		p.rq.Publish(p.rdma.Tail())
		if p.rq.Bell != nil {
			p.rq.Bell.Ring()
		}
		c.countRDMA(in.rdma)
		return true
	}
	if !p.rdma.Space(1) {
		return false
	}
	o := c.ops.alloc(opRDMA, p)
	o.rk = in.rdma
	o.local = in.data
	o.vec, o.vi, o.vo, o.lay = in.vec, 0, 0, in.lay
	o.key = transport.Key(in.key)
	o.off = in.off
	o.size = uint64(n)
	o.remaining = o.size
	o.remote = in.rdone != nil
	o.done, o.rdone = in.done, in.rdone
	c.countRDMA(in.rdma)
	if !c.pump(o) {
		c.queueMore(p, o)
	}
	return true
}

func (c *Context) countRDMA(k transport.RDMAKind) {
	switch k {
	case transport.Get:
		c.stats.Gets++
	case transport.Put:
		c.stats.Puts++
	default:
		c.stats.Atomics++
	}
}

// queueMore queues the injection of o's remaining pieces behind p's other
// instructions; an eager stream's, behind the other streams (peer.more),
// and so the RDMA that carries on an operation under way (a receiver's
// fetch, a PUT after STOP, a multicast deposit): behind p.q it could wait
// for a Fence there that waits for it, or for the peer, whose own Fence
// waits for it (two ranks that each sent the other a large message and
// then a PutNotify waited for each other for ever).
func (c *Context) queueMore(p *peer, o *op) {
	var in inst
	in.kind = instMore
	in.dest = p.idx
	in.op = o.id()
	if o.kind == opSendStream || o.parent != nil || !o.kind.issued() {
		p.more.push(&in)
	} else {
		p.q.push(&in)
	}
	c.activate(p)
}

// pump injects o's pieces while the RDMA FIFO has room, and reports whether
// all of them are injected.
func (c *Context) pump(o *op) bool {
	p := o.peer
	for o.posted < o.size {
		if o.err != nil {
			// Stop fetching after a failure; what is not injected counts as
			// done.
			o.remaining -= o.size - o.posted
			o.posted = o.size
			break
		}
		if !p.rdma.Space(1) {
			return false
		}
		local, roff := o.nextPiece(uint64(p.chunk))
		n := uint64(len(local))
		pos := p.rdma.Tail()
		d := p.rq.Slot(pos)
		d.Kind = o.rk
		d.Local = local
		d.Key = o.key
		d.Off = roff
		d.Remote = o.remote
		p.rdma.Inject(1, o)
		o.posted += n
		o.inflight++
		p.rq.Publish(p.rdma.Tail())
		if p.rq.Bell != nil {
			p.rq.Bell.Ring()
		}
	}
	if o.inflight == 0 {
		c.finishRDMA(o)
	}
	return true
}

// sendACK answers op of the peer at idx with status.
func (c *Context) sendACK(idx int32, op uint64, status uint32) {
	c.sendCtl(idx, wire.KindACK, op, status, 0, 0)
}

// failInst completes an instruction that will never be injected.
func (c *Context) failInst(in *inst, err error) {
	switch in.kind {
	case instSend, instRDMA, instAccept, instMcast, instFence:
		if c.holderSend {
			// Inside the holder's Send (Held.Send): its callbacks run in
			// the next Advance or Wait, as every callback does.
			c.doLater(in.done, err)
			c.doLater(in.rdone, err)
			return
		}
		if in.done != nil {
			in.done(err)
		}
		if in.rdone != nil {
			in.rdone(err)
		}
	case instImm:
		c.asyncError(err)
	case instMore:
		if o := c.ops.lookup(in.op); o != nil && o.kind == opSendStream {
			c.failOp(o, err)
		} else if o != nil {
			if o.err == nil {
				o.err = err
			}
			o.remaining -= o.size - o.posted
			o.posted = o.size
			if o.inflight == 0 {
				c.finishRDMA(o)
			}
		}
	}
}

// failPeer completes everything outstanding with p with err: listed
// callbacks, queued instructions and operations.
func (c *Context) failPeer(p *peer, err error) int {
	c.peerFailed(p, err)
	p.failed = err
	n := p.msg.Fail(err)
	n += p.rdma.Fail(err)
	for p.q.len() > 0 {
		in := *p.q.front()
		p.q.popFront()
		c.failInst(&in, err)
		n++
	}
	for p.more.len() > 0 {
		in := *p.more.front()
		p.more.popFront()
		c.failInst(&in, err)
		n++
	}
	for p.ctl.len() > 0 {
		p.ctl.popFront() // a control packet has no callback
		n++
	}
	n += c.ops.failPeer(p, err)
	c.activate(p)
	return n
}
