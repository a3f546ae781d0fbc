package amigo

import (
	"errors"
	"fmt"

	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// Handler is an active-message handler. It runs inside Advance on the
// goroutine that owns the context, once per arriving message, in the order
// the messages from one context on one dispatch id were sent. m and the
// slices it holds are valid only until the handler returns.
//
// A message small enough to travel inline has its data in m.Data. For a
// larger one, m.Data is nil and m.Size gives its length: the handler names a
// buffer with m.Receive, which fetches the data and calls the done callback
// once it has landed; or it keeps the announcement with m.Defer and names the
// buffer later with Context.Accept. A handler that does neither declines the
// message, and the sender's done callback gets ErrDeclined.
type Handler func(c *Context, m *Message)

type handlerEntry struct{ fn Handler }

// SetDispatch registers fn as the handler of dispatch id d, replacing any
// earlier one; a nil fn removes it. It is safe from any goroutine.
//
// A message that arrives before its handler is registered is held, within
// the context's unexpected-data budget (Config.UnexpectedBudget), until
// SetDispatch registers one (the next Advance delivers it, before later
// messages for d) or Config.DispatchGrace has passed; then it is refused
// and its sender told: ErrNoDispatch through the callback of a Send that
// waits for an acknowledgement, a *DispatchError at the sender's
// Config.OnError for an inline message that asked for none. Handlers that
// must be there before any peer can reach the context are given when the
// client opens (Config.Handlers).
func (c *Context) SetDispatch(d Dispatch, fn Handler) error {
	if d >= MaxDispatch {
		return fmt.Errorf("amigo: dispatch %d: %w", d, ErrBadDispatch)
	}
	if fn == nil {
		c.dispatch[d].Store(nil)
		return nil
	}
	c.dispatch[d].Store(&handlerEntry{fn: fn})
	// Messages held for d are delivered by the owner's next Advance.
	c.dispatchSet.Store(true)
	c.bell.Ring()
	return nil
}

// Message is an arriving active message, as its handler sees it.
type Message struct {
	// Source is the endpoint that sent the message.
	Source Endpoint
	// Dispatch is the dispatch id it was sent to.
	Dispatch Dispatch
	// Header is the application header, always inline.
	Header []byte
	// Data is the message's data when it travelled inline, else nil.
	Data []byte

	c       *Context
	src     int32
	size    uint64
	inline  bool
	claimed bool
	op, key uint64
	flags   uint8 // the SEND's (wire.FlagBusy, wire.FlagHold)
	hold    bool  // a SEND that waits for GO, with no stream yet (streamHeld)
	stream  *op   // the receiver's state of a SEND
	mc      *op   // the target's state of a multicast
}

// Multicast reports whether the message is the announcement of a multicast:
// naming a buffer makes this target part of the multicast's chain.
func (m *Message) Multicast() bool { return m.mc != nil }

// Size returns the length of the message's data.
func (m *Message) Size() int { return int(m.size) }

// Inline reports whether the data is in m.Data.
func (m *Message) Inline() bool { return m.inline }

// CopyTo copies the data of an inline message into dst, as copy(dst,
// m.Data) does, and returns the number of bytes copied; m.Data is nil
// after it. Where the data lies in the descriptor buffer it came in
// (shared memory, in-process links), CopyTo gives the buffer's room back
// as it copies, which moved 16 KiB messages faster than a copy of m.Data
// followed by the handler's return (see ring.Reader.CopyOut). A
// handler that copies an inline message out, as an MPI receive does,
// should copy with CopyTo: over shared memory, the slots of data not
// copied out with it may go back to the sender unzeroed (ShmConfig.Keep),
// which only pays where the handler did not read the data.
func (m *Message) CopyTo(dst []byte) int {
	// The context names the reader while a descriptor it holds slots of
	// is handed over (transport.PollRing); CopyOut is copy for data it
	// does not hold.
	var n int
	if rd := m.c.rd; rd != nil && rd.Holds() {
		n = rd.CopyOut(dst, m.Data)
	} else {
		n = copy(dst, m.Data)
	}
	m.Data = nil
	return n
}

// Receive names buf as the destination of the message's data; done (which
// may be nil) is called inside a later Advance once the data has landed in
// buf, or with the reason it could not. buf must hold Size bytes, else
// Receive returns ErrTooSmall and the handler may try again or decline. For an
// inline message Receive copies m.Data into buf, as CopyTo does: m.Data is
// nil after it.
func (m *Message) Receive(buf []byte, done func(error)) error {
	if m.claimed {
		return errors.New("amigo: message already received or deferred")
	}
	if uint64(len(buf)) < m.size {
		return fmt.Errorf("amigo: receive buffer of %d bytes for a message of %d: %w", len(buf), m.size, ErrTooSmall)
	}
	m.claimed = true
	c := m.c
	if traceOn {
		done = tracedReceive(m, done)
	}
	if m.inline {
		m.CopyTo(buf)
		c.doLater(done, nil)
		return nil
	}
	m.streamHeld(true)
	if m.stream != nil {
		c.nameBuffer(m.stream, buf, done)
		return nil
	}
	if m.mc != nil {
		c.mcPrepare(m.mc, buf, done)
		return nil
	}
	c.startFetch(m.recvOp(), buf, done)
	return nil
}

// streamHeld makes the receiver's state of a SEND that waits for GO and
// has none yet: its handler defers it, or names a buffer (receive) it is
// not fetched into at once (fetchHeld), and the stream's rules decide
// (nameBuffer, Defer). One fetched at once is stopped without a word and
// fetched as an RTS is (recvOp).
//
// # Why
//
// A SEND that waits for GO and that a handler names a buffer for is
// nearly always fetched at once, as an RTS is: the receiver's state of a
// stream (an entry in the peer's stream list, a child GET per fetch, the
// stream's completion checks) cost windows of 16 and 32 KiB messages some
// 10% against RTS on a 2-core AMD host (bench/MID_PATH.md).
func (m *Message) streamHeld(receive bool) {
	if m.hold && !(receive && m.c.fetchHeld(m.size)) {
		m.hold = false
		m.stream = m.c.announceOf(m.src, m.op, m.key, m.size, uint16(m.Dispatch), m.flags)
	}
}

// recvOp is the operation that receives an announced message.
func (m *Message) recvOp() *op {
	o := m.c.ops.alloc(opRecvRV, m.c.peer(m.src))
	o.srcOp, o.key, o.size, o.disp = m.op, transport.Key(m.key), m.size, m.Dispatch
	if m.hold {
		// A SEND that waits for GO, fetched at once (streamHeld).
		o.hold = true
		m.c.stats.Stops++
	}
	return o
}

// Deferred is a message announcement kept for later: its data stays at the
// sender until Accept names a buffer for it or Reject declines it.
type Deferred struct{ id uint64 }

// Defer keeps the announcement of a message that did not travel inline. The
// sender's buffer stays registered, and its send incomplete, until the
// receiver accepts or rejects it.
func (m *Message) Defer() (Deferred, error) {
	if m.claimed {
		return Deferred{}, errors.New("amigo: message already received or deferred")
	}
	if m.inline {
		return Deferred{}, errors.New("amigo: an inline message cannot be deferred: its data is in m.Data until the handler returns")
	}
	m.claimed = true
	c := m.c
	c.stats.Deferred++
	if m.mc != nil {
		return Deferred{id: m.mc.id()}, nil
	}
	m.streamHeld(false)
	if o := m.stream; o != nil {
		// Data-flow condition: eager data for a message with no buffer is
		// worth holding only if little is still to come; stop a large one
		// now rather than after it filled the budget.
		if c.cfg.Protocol == "stop" && o.size-min(o.contig, o.size) > o.peer.stopAbove && !o.stopped {
			c.stop(o)
		}
		c.letStream(o) // into the unexpected-data budget
		return Deferred{id: o.id()}, nil
	}
	return Deferred{id: m.recvOp().id()}, nil
}

// Accept names buf as the destination of a deferred message; done is called
// inside Advance once the data has landed, or with the reason it could not
// (ErrTooSmall if buf is shorter than the message, in which case the message
// stays deferred). It is safe from any goroutine.
func (c *Context) Accept(d Deferred, buf []byte, done func(error)) error {
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instAccept
	in.op = d.id
	in.data = buf
	in.done = done
	c.post(in, pos)
	return nil
}

// Reject declines a deferred message: the sender's done callback gets
// ErrDeclined. It is safe from any goroutine.
func (c *Context) Reject(d Deferred) error {
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instReject
	in.op = d.id
	c.post(in, pos)
	return nil
}

func (c *Context) deferredOp(id uint64) *op {
	o := c.ops.lookup(id)
	switch {
	case o == nil:
		return nil
	case o.kind == opRecvStream:
		if o.buf != nil {
			return nil
		}
		return o
	case o.kind == opMcTarget:
		if o.mc.named {
			return nil
		}
		return o
	case o.kind != opRecvRV || o.posted != 0 || o.done != nil || o.local != nil:
		return nil
	}
	return o
}

func (c *Context) accept(in *inst) {
	o := c.deferredOp(in.op)
	switch {
	case o == nil:
		c.callNow(in.done, ErrStale)
	case uint64(len(in.data)) < o.size:
		c.callNow(in.done, fmt.Errorf("amigo: receive buffer of %d bytes for a message of %d: %w", len(in.data), o.size, ErrTooSmall))
	case o.kind == opRecvStream:
		c.nameBuffer(o, in.data, in.done)
	case o.kind == opMcTarget:
		c.mcPrepare(o, in.data, in.done)
	default:
		c.startFetch(o, in.data, in.done)
	}
}

func (c *Context) reject(in *inst) {
	o := c.deferredOp(in.op)
	if o == nil {
		c.asyncError(fmt.Errorf("amigo: Reject: %w", ErrStale))
		return
	}
	if o.kind == opMcTarget {
		c.stats.Declined++
		c.mcDecline(o, wire.StatusDeclined)
		return
	}
	c.sendACK(o.peer.idx, o.srcOp, wire.StatusDeclined)
	c.stats.Declined++
	if o.kind == opRecvStream {
		c.releaseStream(o)
		return
	}
	c.ops.release(o)
}

// callNow calls fn, a callback due now: at once inside Advance, and in
// the next Advance or Wait inside the holder's Send (Held.Send), whose
// caller has not yet seen the call return. A message that Held.Send found
// behind descriptors the peer had not taken, and injected itself, can find
// them taken when it is written, go inline, and be complete at once: the
// mpi layer, which names a send's owner once Send returns, saw the
// completion of a collective's send before it knew whose send it was, and
// its schedule waited for ever.
func (c *Context) callNow(fn func(error), err error) {
	if fn == nil {
		return
	}
	if c.holderSend {
		c.doLater(fn, err)
		return
	}
	fn(err)
}

// startFetch GETs the announced data of o from the sender into buf:
// target-administered rendezvous.
func (c *Context) startFetch(o *op, buf []byte, done func(error)) {
	o.done = done
	o.rk = transport.Get
	if o.vec == nil && o.lay.Block == 0 {
		o.local = buf[:o.size:o.size]
	} else {
		o.local = buf // ReceiveV, ReceiveStrided: pieces by nextPiece
	}
	o.off = 0
	o.remaining = o.size
	if o.size == 0 {
		c.finishRDMA(o)
		return
	}
	p := o.peer
	if p.failed != nil {
		o.err = p.failed
		c.finishRDMA(o)
		return
	}
	if p.q.len() > 0 || !c.pump(o) {
		c.queueMore(p, o)
	}
}

func (c *Context) endpointAt(idx int32) Endpoint {
	return Endpoint{Rank: int(idx) / c.nctx, Context: int(idx) % c.nctx}
}

// receive decodes and delivers one packet.
//
// An inline active message that asks for no acknowledgement, with nothing
// held before it (Context.earlyN), is deliver's common case: it is decoded
// in one step (wire.ParseAM) and its handler runs here, without deliver's
// branches for the other kinds and without a call more (a window of small
// messages runs this once a message).
func (c *Context) receive(from transport.Addr, pkt []byte) {
	if uint32(from.Rank) >= uint32(c.client.size) || uint32(from.Context) >= uint32(c.nctx) {
		c.stats.Malformed++
		c.asyncError(fmt.Errorf("amigo: packet from %v, outside the job", from))
		return
	}
	idx := int32(int(from.Rank)*c.nctx + int(from.Context))
	if d, hdr, data, ok := wire.ParseAM(pkt); ok && d < MaxDispatch && c.earlyN == 0 {
		if h := c.dispatch[d].Load(); h != nil {
			m := &c.msg
			m.Source = Endpoint{Rank: int(from.Rank), Context: int(from.Context)}
			m.Dispatch = Dispatch(d)
			m.Header, m.Data = hdr, data
			m.src = idx
			m.claimed = false
			m.op, m.key = 0, 0
			m.stream, m.mc, m.hold = nil, nil, false
			m.inline = true
			m.size = uint64(len(data))
			c.stats.ReceivedInline++
			if traceOn {
				c.tracedHandler(h.fn, m)
			} else {
				h.fn(c, m)
			}
			m.Header, m.Data = nil, nil
			return
		}
	}
	pk := &c.pkt
	err := wire.ParseInto(pk, pkt)
	if err != nil {
		c.stats.Malformed++
		c.asyncError(peerErr(c.endpointAt(idx), err))
		return
	}
	switch pk.Kind {
	case wire.KindAM, wire.KindRTS, wire.KindSEND:
		c.deliver(idx, pk, nil, nil)
	case wire.KindEAGER:
		c.onEager(idx, pk)
	case wire.KindACK:
		c.onACK(idx, pk.Op, pk.Status)
	case wire.KindACKS:
		for i, n := 0, len(pk.Data)/wire.ACKEntrySize; i < n; i++ {
			op, status := wire.ACKAt(pk.Data, i)
			c.onACK(idx, op, status)
		}
	case wire.KindSTOP:
		c.onSTOP(idx, pk)
	case wire.KindCTS:
		c.onCTS(idx, pk)
	case wire.KindFIN:
		c.onFIN(idx, pk)
	case wire.KindGO:
		c.onGO(idx, pk)
	case wire.KindMCRTS:
		c.onMCRTS(idx, pk)
	case wire.KindMCCTS, wire.KindMCGO, wire.KindMCFAIL, wire.KindMCDONE:
		c.onMCOrigin(idx, pk)
	case wire.KindMCDATA, wire.KindMCABORT:
		c.onMCTarget(idx, pk)
	}
}

// deliver runs the handler of an AM, RTS or SEND. Packets from the
// adapters come with a nil h and stream; a message held for its handler
// (early.go) comes with both: the handler found for it, and, for a SEND,
// the receiver's state announced when it arrived.
func (c *Context) deliver(src int32, pk *wire.Packet, h *handlerEntry, stream *op) {
	rts := pk.Kind == wire.KindRTS || pk.Kind == wire.KindSEND
	ack := rts || pk.Flags&wire.FlagAck != 0
	if h == nil {
		if pk.Dispatch >= MaxDispatch && pk.Dispatch < sysMax && !ack {
			c.sysDeliver(src, pk.Dispatch, pk.Header, pk.Data) // collective.go
			return
		}
		if pk.Dispatch < MaxDispatch {
			h = c.dispatch[pk.Dispatch].Load()
		}
		if (h == nil || c.earlyN != 0) && c.holdOrRefuse(src, pk, h, ack) {
			return // early.go
		}
		if pk.Kind == wire.KindSEND {
			if pk.Flags&wire.FlagHold != 0 && c.cfg.Protocol == "stop" {
				c.heldArrived(src)
			} else {
				stream = c.announce(src, pk)
			}
		}
	}
	m := &c.msg
	m.Source = c.endpointAt(src)
	m.Dispatch = Dispatch(pk.Dispatch)
	m.Header = pk.Header
	m.src = src
	m.claimed = false
	m.op = pk.Op
	m.stream = stream
	m.flags = pk.Flags
	m.hold = stream == nil && pk.Kind == wire.KindSEND
	m.mc = nil
	if rts {
		m.Data = nil
		m.inline = false
		m.size = pk.Size
		m.key = pk.Key
		c.stats.Announced++
	} else {
		m.Data = pk.Data
		m.inline = true
		m.size = uint64(len(pk.Data))
		m.key = 0
		c.stats.ReceivedInline++
	}
	if traceOn {
		c.tracedHandler(h.fn, m)
	} else {
		h.fn(c, m)
	}
	m.Header, m.Data = nil, nil
	switch {
	case rts && !m.claimed:
		c.stats.Declined++
		c.sendACK(src, pk.Op, wire.StatusDeclined)
		if m.stream != nil {
			c.releaseStream(m.stream)
		}
	case !rts && ack:
		c.sendACK(src, pk.Op, wire.StatusOK)
	}
}
