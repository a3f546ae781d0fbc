package mpi

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo"
)

// Accumulates the owner applies. An Accumulate or GetAccumulate of more
// than one element travels as one active message to the target's layer
// (or as several, each at most InlineMax bytes, so that the owner has each
// one's data the moment it arrives), which applies it element by element
// with the processor's atomic instructions on its window memory (an add, a
// swap, an and, an or, or a compare-and-swap loop on the aligned word that
// holds the element), and answers with the elements' old values when the
// origin fetches them, or with an empty reply. So every element's update
// stays atomic with respect to the AMI's remote atomics on it (which end as
// the same instructions on the same memory) and to the other accumulates,
// and a 4 KiB accumulate costs one round trip instead of a thousand remote
// atomics.
//
// The owner's layer applies a message when its program calls into mpi or
// amigo; a target that computes meanwhile would hold the origin up, and
// passive target must not need the target. So each message carries a
// sequence number per (origin, target), and the owner claims it before
// applying it: a compare-and-swap of the origin's claim word in the
// owner's control region from the number before to its own. An origin
// that has had no reply from a target for a while
// (Options.AccumulateRescue) takes its messages back (win_rescue.go): one
// remote swap of that word to the last number it sent, which the target's
// adapter performs without the program. The
// swap's old value says which messages the owner claimed (it replies to
// those); the others it will find taken and drop, and the origin applies
// them itself, element by element, with remote atomics. Either side owns a
// message whole, never both. The one-element operations (FetchAndOp,
// CompareAndSwap, an Accumulate of one element) are remote atomics that
// need nothing of the owner from the start.
//
// Accumulates from one origin to one target keep their order (MPI's
// default accumulate_ordering): while a message to a target awaits its
// reply, the one-element operations to that target travel as messages
// too; after a rescue, this rank applies its accumulates to that target
// itself until the target answers again (its notices of the messages it
// dropped say so) or the epoch ends.
//
// Header of an accumulate message:
//
//	bytes 0-3   window id (the id of the window's communicator)
//	bytes 4-7   slot of the operation at the origin: index | generation<<16
//	bytes 8-11  blocks of the target layout (1: contiguous)
//	byte  12    kind: kindRMA
//	byte  13    operation (opCode)
//	byte  14    element kind
//	byte  15    flags: rmaFetch, the origin wants the old values
//	bytes 16-23 byte offset in the target's window of the first block
//	bytes 24-27 bytes of a block
//	bytes 28-31 bytes from a block's start to the next one's
//	bytes 32-35 the origin's rank in the window's communicator
//	bytes 36-39 sequence number of the message from the origin to the
//	            target (wrapping; at most maxMsgs are out at a time)
//
// The data is the origin's elements, the blocks one after the other (none
// for NoOp). The reply has the layer's 16-byte header: bytes 0-7 as the
// request's, byte 12 kindRMAReply, byte 13 a status (rmaOK, or why the
// owner refused the operation and touched nothing); its data is the old
// elements when the origin fetches them.
const rmaHdrLen = 40

const rmaFetch = 1

// Reply statuses.
const (
	rmaOK byte = iota
	rmaUnknown
	rmaRange
	rmaBadOp
	rmaDropped // a message its origin took back, dropped unapplied
	rmaHeld    // the users word stayed held by another's plain update
)

// layout is a target layout: blocks of blockLen bytes, stride bytes from
// one block's start to the next one's.
type layout struct {
	blocks           int
	blockLen, stride uint64
}

// span is the bytes from the first block's start to the last block's end.
func (l layout) span() uint64 { return uint64(l.blocks-1)*l.stride + l.blockLen }

// rmaMsg is an accumulate sent to its owner, until its reply (or its
// rescue) and its send's completion.
type rmaMsg struct {
	w      *Win
	idx    uint16
	gen    uint16
	target int
	seq    uint32
	// sending: the send's done callback is still to come (the slot stays
	// taken until it is). settled: the operation completed, by a reply or
	// by its rescue. cancelled: a rescue took it back from the target.
	// inUse: the slot holds an operation.
	inUse, sending, settled, cancelled bool
	err                                error
	// What a rescue needs to apply the operation itself: the element
	// kind and op, the origin's elements and the result's place, where
	// the first block lies (its offset in the target's region) and the
	// layout.
	k              kind
	op             Op
	origin, result []byte
	pl             place
	lay            layout
	small          [16]byte // the origin's element when it is one (accumulateOne)
	left           int      // a rescue's element updates still in flight
	cost           int      // what it counts against the budget
	req            *rmaReq  // the request it completes, if any
	sent           func(error)
	hdr            [rmaHdrLen]byte
}

func (m *rmaMsg) slot() uint32 { return uint32(m.idx) | uint32(m.gen)<<16 }

// own returns origin, or the message's copy of it when it is one element
// (at most 16 bytes): accumulateOne's lies in the window's scratch, which
// the next call overwrites while the message may still need it.
func (m *rmaMsg) own(origin []byte) []byte {
	if origin != nil && len(origin) <= len(m.small) {
		n := copy(m.small[:], origin)
		return m.small[:n]
	}
	return origin
}

func (w *Win) allocMsg() *rmaMsg {
	if n := len(w.msgFree); n > 0 {
		m := w.msgs[w.msgFree[n-1]]
		w.msgFree = w.msgFree[:n-1]
		return m
	}
	m := &rmaMsg{w: w, idx: uint16(len(w.msgs))}
	m.sent = m.onSent
	w.msgs = append(w.msgs, m)
	return m
}

// maxMsgs bounds the accumulates in flight to their owners per window: the
// slot's index is 16 bits.
const maxMsgs = 1 << 16

func (w *Win) freeMsg(m *rmaMsg) {
	m.gen++
	m.origin, m.result, m.err, m.req = nil, nil, nil, nil
	m.inUse, m.settled, m.cancelled, m.sending = false, false, false, false
	w.msgFree = append(w.msgFree, m.idx)
}

// accMsgs sends an accumulate of origin (nil for NoOp) to target's window
// at pl with target layout lay, as one message, or as several when its
// data is above what a message carries inline; result, if not nil,
// receives the old elements. It returns the number of parts issued, and
// sets rq.left to the number it means to issue before the first. The
// caller holds the engine's lock and checked the access.
//
// The messages to a target that have not been answered stay within
// msgBudget bytes, so that a target that does not drain its descriptor
// buffer cannot make it fill up, which would hold back this rank's
// remote atomics to it (they queue behind the messages): a part that
// would go beyond waits for earlier replies or their rescue, and goes by
// remote atomics (accAtomics) when the budget stays spent (by messages
// taken back that the target has not looked at yet) or after a rescue.
func (w *Win) accMsgs(k kind, op Op, origin, result []byte, target int, pl place, lay layout, rq *rmaReq) (int, error) {
	es := uint64(k.size())
	room := max(min(w.inline, w.msgBudget/2)-rmaHdrLen, 0)
	most := max(uint64(room)/es*es, es)
	if uint64(lay.blocks)*lay.blockLen <= most {
		if rq != nil {
			rq.left = 1
		}
		if err := w.accPart(k, op, origin, result, target, pl, lay, rq); err != nil {
			return 0, err
		}
		return 1, nil
	}
	if rq != nil {
		rq.left = lay.split(most, func(uint64, uint64, layout) bool { return true })
	}
	sent := 0
	var err error
	lay.split(most, func(data, mem uint64, sub layout) bool {
		n := uint64(sub.blocks) * sub.blockLen
		var o, r []byte
		if origin != nil {
			o = origin[data : data+n]
		}
		if result != nil {
			r = result[data : data+n]
		}
		at := pl
		at.off, at.at = pl.off+mem, pl.at+mem
		if err = w.accPart(k, op, o, r, target, at, sub, rq); err != nil {
			return false
		}
		sent++
		return true
	})
	return sent, err
}

// msgCost is what a message of n bytes of elements counts against the
// budget: its data, header and framing.
func msgCost(n int) int { return rmaHdrLen + n + 64 }

// accPart issues one part of an accumulate (accMsgs): as a message when
// the budget allows, else by remote atomics.
func (w *Win) accPart(k kind, op Op, origin, result []byte, target int, pl place, lay layout, rq *rmaReq) error {
	cost := msgCost(int(uint64(lay.blocks) * lay.blockLen))
	if op.code == opNoOp {
		cost = msgCost(0)
	}
	if w.rescuing[target] != nil {
		if err := w.awaitRescue(target); err != nil {
			return err
		}
	}
	if !(w.bypass[target] && k.size() <= 8) && w.inflight[target]+cost > w.msgBudget && w.msgOut[target] > 0 {
		if err := w.awaitBudget(target, cost); err != nil {
			return err
		}
	}
	if w.rescuing[target] != nil {
		if err := w.awaitRescue(target); err != nil {
			return err
		}
	}
	if w.bypass[target] && k.size() <= 8 || w.inflight[target]+cost > w.msgBudget || lay.stride > math.MaxUint32 {
		return w.accDirect(k, op, origin, result, target, pl, lay, rq)
	}
	return w.accMsg(k, op, origin, result, target, pl, lay, rq, cost)
}

// awaitBudget waits until a message of cost fits in the budget to target,
// or no message to it is out (its replies came, or a rescue took them
// back), or a rescue started applying accumulates itself.
func (w *Win) awaitBudget(target, cost int) error {
	ctx, cancel := context.WithTimeout(context.Background(), rescueTimeout)
	defer cancel()
	err := w.comm.e.wait(ctx, func() bool {
		return w.bypass[target] || w.inflight[target]+cost <= w.msgBudget || w.msgOut[target] == 0
	})
	if err != nil {
		return errorf("mpi: accumulate on rank %d: %w", target, err)
	}
	return nil
}

// accDirect applies one part of an accumulate itself, as a rescue
// applies the messages it took back (rescueOp.apply), with a slot of msgs,
// never sent, that completes the part as its reply would have. Later
// accumulates to the target wait for it (awaitRescue).
func (w *Win) accDirect(k kind, op Op, origin, result []byte, target int, pl place, lay layout, rq *rmaReq) error {
	if len(w.msgFree) == 0 && len(w.msgs) >= maxMsgs {
		return fmt.Errorf("%w: more than %d accumulates in flight on a window (flush)", ErrRMASync, maxMsgs)
	}
	m := w.allocMsg()
	m.target, m.result, m.req = target, result, rq
	m.k, m.op, m.origin, m.pl, m.lay, m.inUse, m.cancelled = k, op, m.own(origin), pl, lay, true, true
	w.pending++
	w.msgOut[target]++
	r := &rescueOp{w: w, target: target, last: w.seq[target], start: time.Now(), taken: []*rmaMsg{m}}
	w.rescuing[target] = r
	r.apply()
	return nil
}

// split cuts the layout into parts of at most most bytes of elements (a
// multiple of the element size, as the blocks are): runs of whole blocks,
// or pieces of one block. It calls fn with each part's offset in the
// packed elements, its offset from the first block's start, and its
// layout, until fn returns false, and returns the number of calls.
func (l layout) split(most uint64, fn func(data, mem uint64, sub layout) bool) int {
	calls := 0
	if l.blocks > 1 && l.blockLen <= most {
		per := most / l.blockLen
		for b := uint64(0); b < uint64(l.blocks); b += per {
			n := min(per, uint64(l.blocks)-b)
			calls++
			if !fn(b*l.blockLen, b*l.stride, layout{blocks: int(n), blockLen: l.blockLen, stride: l.stride}) {
				return calls
			}
		}
		return calls
	}
	for b := uint64(0); b < uint64(l.blocks); b++ {
		for o := uint64(0); o < l.blockLen; o += most {
			n := min(most, l.blockLen-o)
			calls++
			if !fn(b*l.blockLen+o, b*l.stride+o, layout{blocks: 1, blockLen: n, stride: n}) {
				return calls
			}
		}
	}
	return calls
}

// accMsg sends one accumulate message (accMsgs) to target's window at pl;
// cost is what it counts against the budget.
func (w *Win) accMsg(k kind, op Op, origin, result []byte, target int, pl place, lay layout, rq *rmaReq, cost int) error {
	if len(w.msgFree) == 0 && len(w.msgs) >= maxMsgs {
		return fmt.Errorf("%w: more than %d accumulates in flight on a window (flush)", ErrRMASync, maxMsgs)
	}
	m := w.allocMsg()
	m.target, m.result, m.req = target, result, rq
	m.k, m.op, m.origin, m.pl, m.lay, m.inUse = k, op, m.own(origin), pl, lay, true
	origin = m.origin
	m.seq = w.seq[target] + 1
	h := &m.hdr
	binary.LittleEndian.PutUint32(h[0:], uint32(w.comm.id))
	binary.LittleEndian.PutUint32(h[4:], m.slot())
	binary.LittleEndian.PutUint32(h[8:], uint32(lay.blocks))
	h[12], h[13], h[14], h[15] = kindRMA, byte(op.code), byte(k), 0
	if result != nil {
		h[15] = rmaFetch
	}
	binary.LittleEndian.PutUint64(h[16:], pl.at)
	binary.LittleEndian.PutUint32(h[24:], uint32(lay.blockLen))
	binary.LittleEndian.PutUint32(h[28:], uint32(lay.stride))
	binary.LittleEndian.PutUint32(h[32:], uint32(w.comm.rank))
	binary.LittleEndian.PutUint32(h[36:], m.seq)
	e := w.comm.e
	var err error
	if rmaHdrLen+len(origin) <= min(amigo.ImmediateMax, w.inline) {
		err = e.held.SendImmediate(w.eps[target], e.disp, h[:], origin)
	} else {
		m.sending = true
		err = e.held.Send(w.eps[target], e.disp, h[:], origin, m.sent)
	}
	if err != nil {
		w.freeMsg(m)
		return errorf("mpi: accumulate on rank %d: %w", target, err)
	}
	w.seq[target] = m.seq
	m.cost = cost
	w.inflight[target] += cost
	w.pending++
	w.msgOut[target]++
	w.armRescue()
	return nil
}

// onSent is the send's done callback: the origin's data may be reused. A
// failed send gets no reply.
func (m *rmaMsg) onSent(err error) {
	m.sending = false
	if err != nil && !m.settled && !m.cancelled {
		m.settle(err)
		return
	}
	if m.settled {
		m.w.freeMsg(m)
	}
}

// settle completes the operation (its reply came, or its rescue is done,
// or it failed), and frees its slot unless the send still holds it.
func (m *rmaMsg) settle(err error) {
	w := m.w
	if err != nil && m.err == nil {
		m.err = err
	}
	m.settled = true
	w.msgOut[m.target]--
	err, rq := m.err, m.req
	m.req = nil
	w.opDone(err)
	if rq != nil {
		rq.finish(err)
	}
	if !m.sending {
		w.freeMsg(m)
	}
}

// onRMA handles the layer's one-sided messages: accumulates to apply, and
// their replies. The caller checked that the header holds a kind.
func (e *engine) onRMA(m *amigo.Message) {
	h := m.Header
	e.events++
	switch h[12] {
	case kindRMAReply:
		e.onRMAReply(m)
		return
	case kindRMACtl:
		e.onRMACtl(m)
		return
	}
	if len(h) != rmaHdrLen {
		e.stats.Malformed++
		return
	}
	w := e.wins[binary.LittleEndian.Uint32(h[0:])]
	if w == nil {
		e.replyRMA(m.Source, h, rmaUnknown, nil)
		return
	}
	from, seq := uint64(binary.LittleEndian.Uint32(h[32:])), binary.LittleEndian.Uint32(h[36:])
	// The communicator's size, not len(w.eps): the window is known (and
	// a fast origin's accumulate may come) before its exchange ends.
	if from >= uint64(w.comm.size) {
		e.stats.Malformed++
		return
	}
	if m.Inline() && !w.claim(int(from), seq) {
		// Taken back by its origin, which applies it itself.
		e.replyDropped(m.Source, w, m.Size())
		return
	}
	k, op, lay, at, fetch := parseRMA(h)
	st := checkLayout(k, op, lay, m.Size(), fetch)
	var mem []byte
	var off uint64
	if st == rmaOK {
		var ok bool
		if mem, off, ok = w.local(at, lay.span()); !ok {
			st = rmaRange
		} else {
			st = checkPlace(mem, off, lay, k.size())
		}
	}
	if st != rmaOK {
		e.replyRMA(m.Source, h, st, nil)
		return
	}
	if m.Inline() {
		w.applyReply(m.Source, h, k, op, mem[off:off+lay.span()], lay, m.Data, fetch, m)
		return
	}
	// Data above the inline limit (an origin whose InlineMax is above
	// this rank's): fetched into scratch, claimed and applied when it is
	// there.
	rx := &rmaRecv{w: w, src: m.Source, from: int(from), seq: seq, k: k, op: op, mem: mem[off : off+lay.span()], lay: lay, fetch: fetch, data: e.scratch.get(m.Size())}
	copy(rx.hdr[:], h)
	if err := m.Receive(rx.data, rx.done); err != nil {
		e.scratch.put(rx.data)
		e.replyRMA(m.Source, h, rmaRange, nil)
	}
}

// parseRMA decodes an accumulate's header (rmaHdrLen bytes); checkLayout
// and checkPlace judge what it says.
func parseRMA(h []byte) (k kind, op Op, lay layout, at uint64, fetch bool) {
	k, op = kind(h[14]), Op{code: opCode(h[13])}
	lay = layout{blocks: int(binary.LittleEndian.Uint32(h[8:])), blockLen: uint64(binary.LittleEndian.Uint32(h[24:])), stride: uint64(binary.LittleEndian.Uint32(h[28:]))}
	return k, op, lay, binary.LittleEndian.Uint64(h[16:]), h[15]&rmaFetch != 0
}

// rmaRecv is an accumulate whose data is on its way to the owner.
type rmaRecv struct {
	w     *Win
	src   amigo.Endpoint
	from  int    // the origin's rank
	seq   uint32 // the message's sequence number
	k     kind
	op    Op
	mem   []byte // the window's memory the layout spans
	lay   layout
	fetch bool
	data  []byte
	hdr   [rmaHdrLen]byte
}

func (rx *rmaRecv) done(err error) {
	e := rx.w.comm.e
	e.events++
	switch {
	case err != nil:
		e.replyRMA(rx.src, rx.hdr[:], rmaRange, nil)
	case rx.w.freed:
		e.replyRMA(rx.src, rx.hdr[:], rmaUnknown, nil)
	case !rx.w.claim(rx.from, rx.seq):
		// Taken back by its origin (or an earlier message is not
		// claimed yet): the origin applies it itself.
		e.replyDropped(rx.src, rx.w, len(rx.data))
	default:
		rx.w.applyReply(rx.src, rx.hdr[:], rx.k, rx.op, rx.mem, rx.lay, rx.data, rx.fetch, nil)
	}
	e.scratch.put(rx.data)
}

// checkLayout checks an accumulate that arrived: its operation, and its
// layout against the data's length, size.
func checkLayout(k kind, op Op, lay layout, size int, fetch bool) byte {
	es := k.size()
	switch {
	case es == 0 || op.code == opUser || op.code == opMinLoc || op.code == opMaxLoc || op.code > opNoOp:
		return rmaBadOp
	case op.code < opReplace && op.check(k) != nil:
		return rmaBadOp
	case op.code == opNoOp && !fetch:
		return rmaBadOp
	}
	const most = 1 << 40 // far beyond any window; keeps the arithmetic exact
	if lay.blocks < 1 || lay.blockLen == 0 || lay.blockLen > most || lay.stride > most || uint64(lay.blocks) > most/max(lay.stride, lay.blockLen) ||
		lay.blockLen%uint64(es) != 0 || lay.stride%uint64(es) != 0 || (lay.blocks > 1 && lay.stride < lay.blockLen) {
		return rmaRange
	}
	total := uint64(lay.blocks) * lay.blockLen
	if (op.code == opNoOp && size != 0) || (op.code != opNoOp && uint64(size) != total) {
		return rmaRange
	}
	return rmaOK
}

// checkPlace checks that the layout from byte off of mem lies inside it,
// every element in an aligned word of it.
func checkPlace(mem []byte, off uint64, lay layout, es int) byte {
	end := lay.span()
	if off > uint64(len(mem)) || end > uint64(len(mem))-off {
		return rmaRange
	}
	if es > 8 {
		return rmaOK
	}
	// The first and the last element's words: the others lie between,
	// at the same alignment.
	base := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	if !elemFits(base, uint64(len(mem)), off, es) || !elemFits(base, uint64(len(mem)), off+end-uint64(es), es) {
		return rmaRange
	}
	return rmaOK
}

// elemFits reports whether the es-byte element at byte off of memory at
// base (n bytes) lies in an aligned word (4 bytes, 8 for es 8) of it.
func elemFits(base uintptr, n, off uint64, es int) bool {
	width := uint64(4)
	if es == 8 {
		width = 8
	}
	lead := (uint64(base) + off) % width
	return lead%uint64(es) == 0 && off >= lead && off-lead+width <= n
}

// applyReply applies an accumulate to mem, the part of this rank's window
// its layout spans, and replies to src: by m.Reply when m is the message
// and the reply is small.
func (w *Win) applyReply(src amigo.Endpoint, h []byte, k kind, op Op, mem []byte, lay layout, data []byte, fetch bool, m *amigo.Message) {
	e := w.comm.e
	var old []byte
	if fetch {
		old = e.scratch.get(int(uint64(lay.blocks) * lay.blockLen))
	}
	if op.code == opNoOp {
		data = nil
	}
	if !w.applyLayout(k, op, mem, lay, data, old) {
		if old != nil {
			e.scratch.put(old)
		}
		e.replyRMA(src, h, rmaHeld, nil)
		return
	}
	if m != nil && hdrLen+len(old) <= amigo.ImmediateMax {
		var r [hdrLen]byte
		copy(r[:8], h[:8])
		r[12], r[13] = kindRMAReply, rmaOK
		// A reply that cannot be sent has lost its origin, whose
		// flush reports it.
		_ = m.Reply(e.disp, r[:], old)
		if old != nil {
			e.scratch.put(old)
		}
		return
	}
	e.replyRMA(src, h, rmaOK, old)
}

// replyRMA answers an accumulate. data (from the scratch pool, or nil) is
// the old elements; it goes back to the pool once sent.
func (e *engine) replyRMA(src amigo.Endpoint, h []byte, status byte, data []byte) {
	if hdrLen+len(data) <= min(amigo.ImmediateMax, e.immMax+hdrLen) {
		var r [hdrLen]byte
		copy(r[:8], h[:8])
		r[12], r[13] = kindRMAReply, status
		_ = e.held.SendImmediate(src, e.disp, r[:], data)
		if data != nil {
			e.scratch.put(data)
		}
		return
	}
	rs := &rmaSend{e: e, data: data}
	copy(rs.hdr[:8], h[:8])
	rs.hdr[12], rs.hdr[13] = kindRMAReply, status
	if err := e.held.Send(src, e.disp, rs.hdr[:], data, rs.done); err != nil {
		e.scratch.put(data)
	}
}

// replyDropped tells the origin at src that this rank dropped, unapplied,
// a message of size bytes of elements it had taken back, so that the
// message no longer counts against its budget (accMsgs). The notice is a
// reply with status rmaDropped whose bytes 4-7 are this rank's rank in the
// window's communicator and bytes 8-11 the message's cost.
func (e *engine) replyDropped(src amigo.Endpoint, w *Win, size int) {
	var r [hdrLen]byte
	binary.LittleEndian.PutUint32(r[0:], uint32(w.comm.id))
	binary.LittleEndian.PutUint32(r[4:], uint32(w.comm.rank))
	binary.LittleEndian.PutUint32(r[8:], uint32(msgCost(size)))
	r[12], r[13] = kindRMAReply, rmaDropped
	_ = e.held.SendImmediate(src, e.disp, r[:], nil)
}

// rmaSend is a large reply in flight.
type rmaSend struct {
	e    *engine
	data []byte
	hdr  [hdrLen]byte
}

func (rs *rmaSend) done(error) { rs.e.scratch.put(rs.data) }

// onRMAReply completes the accumulate a reply answers.
func (e *engine) onRMAReply(m *amigo.Message) {
	h := m.Header
	if len(h) != hdrLen {
		e.stats.Malformed++
		return
	}
	w := e.wins[binary.LittleEndian.Uint32(h[0:])]
	if h[13] == rmaDropped {
		if t := int(binary.LittleEndian.Uint32(h[4:])); w != nil && t < len(w.inflight) {
			w.inflight[t] = max(w.inflight[t]-int(binary.LittleEndian.Uint32(h[8:])), 0)
			w.bypass[t] = false // the target reads its messages again
		}
		return
	}
	slot := binary.LittleEndian.Uint32(h[4:])
	idx, gen := int(slot&0xffff), uint16(slot>>16)
	if w == nil || idx >= len(w.msgs) || w.msgs[idx].gen != gen || w.msgs[idx].settled || w.msgs[idx].cancelled {
		e.stats.Malformed++
		return
	}
	rm := w.msgs[idx]
	w.replies[rm.target]++
	w.bypass[rm.target] = false
	w.inflight[rm.target] -= rm.cost
	var err error
	switch {
	case h[13] != rmaOK:
		err = fmt.Errorf("%w: rank %d refused an accumulate (%s)", ErrRMARange, rm.target, rmaStatusText(h[13]))
	case rm.result != nil && m.Inline() && len(m.Data) == len(rm.result):
		copy(rm.result, m.Data)
	case rm.result != nil && !m.Inline() && m.Size() == len(rm.result):
		// The old values are fetched into the result; the reply counts
		// when they are there. A rescue leaves it alone meanwhile.
		rm.cancelled = true
		if err = m.Receive(rm.result, rm.received); err == nil {
			return
		}
	case rm.result != nil:
		err = errorf("mpi: rank %d answered an accumulate of %d bytes with %d", rm.target, len(rm.result), m.Size())
	}
	rm.settle(err)
}

func (m *rmaMsg) received(err error) {
	m.w.comm.e.events++
	m.settle(err)
}

func rmaStatusText(s byte) string {
	switch s {
	case rmaUnknown:
		return "no such window"
	case rmaRange:
		return "outside the window"
	case rmaBadOp:
		return "operation"
	case rmaHeld:
		return "the window stayed held by a plain update of a rank that does not end it"
	}
	return fmt.Sprintf("status %d", s)
}

// applyLayout applies op to the blocks of lay in mem (from its start),
// with operands in (nil for NoOp) and old values into old (if not nil),
// both holding the blocks one after the other.
//
// When no origin uses remote atomics on the window (usersWord is zero),
// the update is plain loads and stores, the reduction kernels' loops:
// claiming the word with bulkBit holds the origins that would start off
// until the update is done (useAtomics), and the owner applies one
// accumulate at a time, so each element's update is atomic with respect
// to every other. Otherwise every element's update is an atomic
// instruction or a compare-and-swap loop (applyBlock).
//
// A plain update an origin holds (win_rescue.go) is waited for, up to
// rescueTimeout: after that the holder is taken for lost, and applyLayout
// returns false, having touched nothing.
func (w *Win) applyLayout(k kind, op Op, mem []byte, lay layout, in, old []byte) bool {
	users := w.usersWord()
	var since time.Time
	for spins := 0; ; spins++ {
		if atomic.CompareAndSwapUint64(users, 0, bulkBit) {
			w.eachBlock(mem, lay, in, old, func(dst, s, o []byte) { w.applyPlain(k, op, dst, s, o) })
			atomic.AddUint64(users, ^uint64(bulkBit-1)) // -bulkBit
			w.plainUpdates++
			return true
		}
		// Count as a user of atomics for the update, unless a plain
		// update holds the word: an origin's that took an accumulate
		// back (win_rescue.go), which ends without this rank's help.
		if atomic.AddUint64(users, 1)&bulkBit == 0 {
			w.eachBlock(mem, lay, in, old, func(dst, s, o []byte) { w.applyBlock(k, op, dst, s, o) })
			atomic.AddUint64(users, ^uint64(0))
			return true
		}
		atomic.AddUint64(users, ^uint64(0))
		if spins%64 == 63 {
			if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > rescueTimeout {
				return false
			}
			runtime.Gosched()
		}
	}
}

// eachBlock calls fn on each block of lay in mem with its operands and
// its place for old values.
func (w *Win) eachBlock(mem []byte, lay layout, in, old []byte, fn func(dst, in, old []byte)) {
	bl := lay.blockLen
	for b := uint64(0); b < uint64(lay.blocks); b++ {
		at, lo := b*lay.stride, b*bl
		var s, o []byte
		if in != nil {
			s = in[lo : lo+bl]
		}
		if old != nil {
			o = old[lo : lo+bl]
		}
		fn(mem[at:at+bl], s, o)
	}
}

// applyPlain applies op to the elements of dst with plain loads and
// stores. Operands not aligned for their type (a message's data) are
// copied into aligned scratch first.
func (w *Win) applyPlain(k kind, op Op, dst, in, old []byte) {
	if old != nil {
		copy(old, dst)
	}
	switch op.code {
	case opNoOp:
		return
	case opReplace:
		copy(dst, in)
		return
	}
	es := min(k.size(), 8)
	if uintptr(unsafe.Pointer(unsafe.SliceData(in)))%uintptr(es) != 0 {
		e := w.comm.e
		a := e.scratch.get(len(in))
		copy(a, in)
		combine(k, op, a, dst)
		e.scratch.put(a)
		return
	}
	combine(k, op, in, dst)
}

// applyBlock applies op to the elements of kind k in dst, this rank's
// window memory, with operands in (nil for NoOp), storing their old values
// into old (if not nil). Each element's update is an atomic instruction,
// or a compare-and-swap loop, on its aligned word (checkApply); elements
// wider than 8 bytes, which no remote atomic touches, are updated in place.
func (w *Win) applyBlock(k kind, op Op, dst, in, old []byte) {
	es := k.size()
	for i := 0; i < len(dst); i += es {
		p := unsafe.Pointer(&dst[i])
		var s, o []byte
		if in != nil {
			s = in[i : i+es]
		}
		if old != nil {
			o = old[i : i+es]
		}
		if es > 8 {
			// Touched by no remote atomic: the owner's plain update.
			w.applyPlain(k, op, dst[i:i+es], s, o)
			continue
		}
		if !applyNative(k, op, p, es, s, o) {
			w.casElem(k, op, p, es, s, o)
		}
	}
}

// applyNative applies the update with one atomic instruction when the
// processor has one for it, and reports whether it did.
func applyNative(k kind, op Op, p unsafe.Pointer, es int, s, o []byte) bool {
	if es == 4 {
		var v uint32
		if s != nil {
			v = binary.LittleEndian.Uint32(s)
		}
		var prev uint32
		switch {
		case op.code == opSum && k.integer():
			prev = atomic.AddUint32((*uint32)(p), v) - v
		case op.code == opReplace:
			prev = atomic.SwapUint32((*uint32)(p), v)
		case op.code == opNoOp:
			prev = atomic.LoadUint32((*uint32)(p))
		case op.code == opBand && k.integer():
			prev = atomic.AndUint32((*uint32)(p), v)
		case op.code == opBor && k.integer():
			prev = atomic.OrUint32((*uint32)(p), v)
		default:
			return false
		}
		if o != nil {
			binary.LittleEndian.PutUint32(o, prev)
		}
		return true
	}
	if es == 8 {
		var v uint64
		if s != nil {
			v = binary.LittleEndian.Uint64(s)
		}
		var prev uint64
		switch {
		case op.code == opSum && k.integer():
			prev = atomic.AddUint64((*uint64)(p), v) - v
		case op.code == opReplace:
			prev = atomic.SwapUint64((*uint64)(p), v)
		case op.code == opNoOp:
			prev = atomic.LoadUint64((*uint64)(p))
		case op.code == opBand && k.integer():
			prev = atomic.AndUint64((*uint64)(p), v)
		case op.code == opBor && k.integer():
			prev = atomic.OrUint64((*uint64)(p), v)
		default:
			return false
		}
		if o != nil {
			binary.LittleEndian.PutUint64(o, prev)
		}
		return true
	}
	return false
}

// casElem updates the element at p by a compare-and-swap loop on its
// aligned word (4 bytes, or 8 for an 8-byte element), leaving the word's
// other bytes as they were.
func (w *Win) casElem(k kind, op Op, p unsafe.Pointer, es int, s, o []byte) {
	width := uintptr(4)
	if es == 8 {
		width = 8
	}
	lead := uintptr(p) % width
	wp := unsafe.Add(p, -int(lead))
	shift := uint(lead * 8)
	mask := ^uint64(0)
	if es < 8 {
		mask = uint64(1)<<(8*uint(es)) - 1
	}
	in, cur := w.elem[0][:es], w.elem[1][:es]
	if s != nil {
		copy(in, s)
	}
	for {
		var word uint64
		if width == 4 {
			word = uint64(atomic.LoadUint32((*uint32)(wp)))
		} else {
			word = atomic.LoadUint64((*uint64)(wp))
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], word>>shift&mask)
		copy(cur, b[:es])
		if o != nil {
			copy(o, cur)
		}
		switch op.code {
		case opReplace:
			copy(cur, in)
		case opNoOp:
		default:
			combine(k, op, in, cur)
		}
		copy(b[:es], cur)
		nw := word&^(mask<<shift) | binary.LittleEndian.Uint64(b[:])&mask<<shift
		if width == 4 {
			if atomic.CompareAndSwapUint32((*uint32)(wp), uint32(word), uint32(nw)) {
				return
			}
		} else if atomic.CompareAndSwapUint64((*uint64)(wp), word, nw) {
			return
		}
	}
}
