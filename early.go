package amigo

import (
	"fmt"
	"time"

	"github.com/amigo-hpc/amigo/internal/wire"
)

// Early messages: a message that arrives for a dispatch id with no handler
// yet is held, within the context's unexpected-data budget, until a handler
// for its id is registered or Config.DispatchGrace has passed since it
// arrived. Then it is delivered as if it had just arrived, or refused: the
// sender of an RTS, a SEND or an AM that asked for an ACK gets
// ErrNoDispatch through its callback; the sender of an inline AM that asked
// for none is told by a refusal notice (an ACK with StatusRefused), which
// it reports to its Config.OnError as a *DispatchError naming both ends.
//
// Messages for one dispatch id keep their order: while one is held, those
// that follow it for the same id are held behind it even if the handler
// appeared meanwhile. Messages for other ids overtake it.
//
// The hot path pays one load and compare (Context.earlyN) per delivered
// message; everything else here runs only while messages are held.

// earlyOverhead is what a held message costs the budget besides its bytes,
// so that empty messages are bounded too.
const earlyOverhead = 64

// earlyMsg is a held message.
type earlyMsg struct {
	src      int32
	kind     wire.Kind
	flags    uint8
	disp     uint16
	op       uint64
	size     uint64 // RTS, SEND: announced size
	key      uint64
	stream   uint64 // SEND: id of the receiver's stream state, announced on arrival
	hdr      []byte // copies, in one allocation
	data     []byte
	deadline time.Time
	cost     int
}

// earlyState holds the messages that wait for their handler, oldest first.
type earlyState struct {
	msgs  []earlyMsg
	count [MaxDispatch]int32  // held messages by dispatch id
	kept  [MaxDispatch]uint32 // pass that last kept a message of the id
	pass  uint32
}

// DispatchError reports a message refused because its receiver had no
// handler for its dispatch id when the message arrived or, at the latest,
// Config.DispatchGrace after. It matches ErrNoDispatch with errors.Is.
// Receivers report it to Config.OnError for messages that asked for no
// acknowledgement, and so do their senders, once the receiver's refusal
// reaches them.
type DispatchError struct {
	Dispatch Dispatch
	From     Endpoint // the sender
	At       Endpoint // the receiver
}

func (e *DispatchError) Error() string {
	return fmt.Sprintf("amigo: dispatch %d from %s at %s: no handler registered", e.Dispatch, e.From.short(), e.At.short())
}

// Is makes errors.Is(err, ErrNoDispatch) hold.
func (e *DispatchError) Is(target error) bool { return target == ErrNoDispatch }

// short names an endpoint by its rank alone when it is context 0.
func (e Endpoint) short() string {
	if e.Context == 0 {
		return fmt.Sprintf("rank %d", e.Rank)
	}
	return e.String()
}

// holdOrRefuse is deliver's way for a message whose handler h is missing,
// or which may have to wait behind held messages of its id. It reports
// whether it took the message (held or refused); false means deliver it.
func (c *Context) holdOrRefuse(src int32, pk *wire.Packet, h *handlerEntry, ack bool) bool {
	d := pk.Dispatch
	if d >= MaxDispatch {
		c.refuse(src, pk.Kind, d, pk.Op, ack, 0)
		return true
	}
	if h != nil && (c.early == nil || c.early.count[d] == 0) {
		return false
	}
	cost := len(pk.Header) + earlyOverhead
	if pk.Kind == wire.KindAM {
		cost += len(pk.Data)
	}
	if c.cfg.DispatchGrace <= 0 || c.unexpected+cost > c.cfg.UnexpectedBudget {
		if h != nil {
			// Holding it is the only way to keep its order, and there
			// is no room: its handler is there, so deliver it now.
			return false
		}
		c.refuse(src, pk.Kind, d, pk.Op, ack, 0)
		return true
	}
	if c.early == nil {
		c.early = new(earlyState)
	}
	e := earlyMsg{src: src, kind: pk.Kind, flags: pk.Flags, disp: d, op: pk.Op, size: pk.Size, key: pk.Key,
		deadline: time.Now().Add(c.cfg.DispatchGrace), cost: cost}
	b := make([]byte, len(pk.Header)+len(pk.Data))
	e.hdr = b[:copy(b, pk.Header):len(pk.Header)]
	if pk.Kind == wire.KindAM {
		e.data = b[len(e.hdr):]
		copy(e.data, pk.Data)
	}
	if pk.Kind == wire.KindSEND {
		// The stream starts now: its eager packets are kept in the budget
		// as for a deferred message, and a large one is stopped at once.
		o := c.announce(src, pk)
		e.stream = o.id()
		if c.cfg.Protocol == "stop" && o.size-min(o.contig, o.size) > o.peer.stopAbove {
			c.stop(o)
		}
		c.letStream(o)
	}
	c.early.msgs = append(c.early.msgs, e)
	c.early.count[d]++
	c.earlyN++
	c.unexpected += cost
	if c.unexpected > c.stats.UnexpectedPeak {
		c.stats.UnexpectedPeak = c.unexpected
	}
	c.stats.HeldForDispatch++
	return true
}

// refuse turns down a message for dispatch d that has no handler; stream
// is the receiver's state of a SEND, if it has one.
func (c *Context) refuse(src int32, kind wire.Kind, d uint16, op uint64, ack bool, stream uint64) {
	c.stats.NoDispatch++
	if ack {
		c.sendACK(src, op, wire.StatusNoDispatch)
		if o := c.ops.lookup(stream); stream != 0 && o != nil && o.kind == opRecvStream {
			c.releaseStream(o)
		}
		return
	}
	c.sendCtl(src, wire.KindACK, uint64(d), wire.StatusRefused, 0, 0)
	c.asyncError(&DispatchError{Dispatch: Dispatch(d), From: c.endpointAt(src), At: c.Endpoint()})
}

// onRefused reports the refusal notice of a peer: an inline message with
// no ACK that this context sent to dispatch id d found no handler there.
func (c *Context) onRefused(from int32, d uint64) {
	c.stats.RefusedByPeer++
	c.asyncError(&DispatchError{Dispatch: Dispatch(d), From: c.Endpoint(), At: c.endpointAt(from)})
}

// serviceEarly delivers the held messages whose handler appeared and
// refuses those whose grace ended. It runs in Advance while messages are
// held, when a handler was registered or the oldest message's grace ended.
func (c *Context) serviceEarly() int {
	e := c.early
	registered := c.dispatchSet.Swap(false)
	now := time.Now()
	if !registered && now.Before(e.msgs[0].deadline) {
		return 0
	}
	e.pass++
	n, kept := 0, 0
	msgs := e.msgs
	for i := range msgs {
		m := msgs[i]
		msgs[i] = earlyMsg{}
		var h *handlerEntry
		if e.kept[m.disp] != e.pass {
			h = c.dispatch[m.disp].Load()
		}
		switch {
		case h != nil:
			c.dropEarly(&m)
			c.deliverEarly(&m, h)
			n++
		case now.After(m.deadline):
			c.dropEarly(&m)
			ack := m.kind != wire.KindAM || m.flags&wire.FlagAck != 0
			c.refuse(m.src, m.kind, m.disp, m.op, ack, m.stream)
			n++
		default:
			e.kept[m.disp] = e.pass
			msgs[kept] = m
			kept++
		}
		if c.closed.Load() {
			// A handler closed the client: shutdown dropped the rest.
			return n
		}
	}
	// Handlers cannot hold messages (only Poll's deliveries do), so e.msgs
	// is still msgs; the entries after the kept ones were cleared above.
	e.msgs = msgs[:kept]
	return n
}

// dropEarly takes m off the books of the held messages.
func (c *Context) dropEarly(m *earlyMsg) {
	c.early.count[m.disp]--
	c.earlyN--
	c.unexpected -= m.cost
}

// deliverEarly hands a held message to its handler as if it had just
// arrived.
func (c *Context) deliverEarly(m *earlyMsg, h *handlerEntry) {
	pk := wire.Packet{Kind: m.kind, Flags: m.flags, Dispatch: m.disp, Op: m.op, Size: m.size, Key: m.key, Header: m.hdr, Data: m.data}
	var stream *op
	if m.kind == wire.KindSEND {
		stream = c.ops.lookup(m.stream)
		if stream == nil || stream.kind != opRecvStream {
			// The stream failed meanwhile (its peer did): its sender
			// has its error already.
			return
		}
	}
	c.deliver(m.src, &pk, h, stream)
}

// dropAllEarly forgets the held messages of a context that closes.
func (c *Context) dropAllEarly() {
	if c.early == nil {
		return
	}
	for _, m := range c.early.msgs {
		c.unexpected -= m.cost // zero for entries serviceEarly took
	}
	c.early, c.earlyN = nil, 0
}
