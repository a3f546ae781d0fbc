//go:build ofi

package ofi

/*
#include "amigo_ofi.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// keyCache is the number of entries of a link's cache of remote regions.
const keyCache = 256

// remoteRegion is what an initiator learned of a peer's region: where the
// provider reaches it, how long it is and what the owner permits.
type remoteRegion struct {
	key    transport.Key
	base   uint64 // the address of its first byte (FI_MR_VIRT_ADDR), else 0
	length uint64
	mrkey  uint64
	perm   transport.Perm
}

// olink is a link this port initiates: the descriptor buffer it sends
// from, the RDMA FIFO it performs, and the state of both.
type olink struct {
	p    *port
	l    *transport.Link
	to   transport.Addr
	dest C.fi_addr_t
	pins runtime.Pinner

	mem  []byte // the ring and, after it, the packets' header
	hdr  uintptr
	desc uintptr
	mr   *C.struct_fid_mr
	rd   *ring.Reader

	stalled  []byte // a packet peeked but not taken by the provider
	offered  uint64 // packets below had their region offered (offer)
	posted   uint64 // packets posted
	doneUpTo uint64 // packets whose send completed, all below
	sendDone []bool // by packet number mod len: completed out of order
	acked    uint64 // packets the target took
	released uint64 // packets whose slots went back to the AMI
	// outside is the number of the packet the AMI handed to sendNow, not
	// written into the ring, while the target has not taken it; 0 when
	// there is none (a packet number plus one).
	outside uint64

	q       *transport.RDMAQueue
	issued  uint64 // RDMA positions below are posted, answered or failed
	rdone   []bool
	rerr    []error
	rpins   []runtime.Pinner // the local buffer of each RDMA slot in flight
	rreg    []*regEntry      // its registration (FI_MR_LOCAL), from the port's cache
	keys    [keyCache]remoteRegion
	asking  transport.Key // key requested from the peer, 0 if none
	asked   uint64        // keys requested so far
	refused transport.Key // key the peer said it does not have

	moves    uint64 // answers and completions from the peer
	lastSeen uint64
	waitFrom time.Time
	failed   bool
}

func newOlink(p *port, to transport.Addr, dest C.fi_addr_t) (*olink, error) {
	a := p.a
	slots := a.opts.RingSlots
	l := &olink{p: p, to: to, dest: dest, sendDone: make([]bool, slots)}
	size := ring.MemSize(slots)
	l.mem = pinnedBytes(&l.pins, size+hdrSize)
	r, err := ring.New(l.mem[:size], slots)
	if err != nil {
		l.pins.Unpin()
		return nil, err
	}
	putHeader(l.mem[size:], header{kind: kindPacket, ctx: uint16(p.ctx), rank: uint32(a.rank)})
	l.hdr = addrOf(l.mem) + uintptr(size)
	if a.mrMode&C.FI_MR_LOCAL != 0 {
		if l.mr, l.desc, err = p.registerLocal(l.mem, C.FI_SEND); err != nil {
			l.pins.Unpin()
			return nil, err
		}
	}
	l.rd = r.NewReader()
	l.q = transport.NewRDMAQueue(a.opts.RDMASlots)
	n := l.q.Slots()
	l.rdone, l.rerr, l.rpins, l.rreg = make([]bool, n), make([]error, n), make([]runtime.Pinner, n), make([]*regEntry, n)
	l.l = &transport.Link{To: to, Msg: r, RDMA: l.q, MaxRDMA: a.opts.RDMAPiece}
	l.l.Push = l.push
	l.l.SendNow = l.sendNow
	return l, nil
}

// push posts what the link holds at once, from the Send that published it
// (transport.Link.Push), if every packet the link posted before was taken
// by the target: a message with nothing of its link in flight (a
// ping-pong's, the first of a window) goes to the provider without waiting
// for the rest of the AMI's pass and the next Progress. Otherwise the
// packets wait for Progress, which posts a window's together.
//
// # Why
//
// Between the reply's arrival and the next message's post, the rank that
// pings ran the rest of the AMI's pass, its Wait's return, the Send and
// the next pass up to Progress (bench/ofi/LATENCY.md). Posting every
// packet from its Send moved a window of 8-byte messages 0.77x as fast
// over shm; one with nothing in flight leaves a window's to Progress.
func (l *olink) push() {
	p := l.p
	if p.closed.Load() {
		return
	}
	// The adapter's watcher may hold the port, and read acknowledgements
	// in its turn: the link's state is looked at with the port taken.
	p.enter()
	if !l.failed && l.acked == l.posted && l.stalled == nil {
		l.postPackets()
	}
	p.leave()
}

// sendNow sends pkt, a packet of one slot the AMI has not written into the
// ring (transport.Link.SendNow), at once if the provider takes it as an
// inject and nothing of the link is in flight or waiting: every packet
// posted before was taken by the target and completed, and the ring holds
// nothing more. It then counts as a packet of the link (its number is
// posted's), and release adds it to the transfer counter once the target
// took it.
//
// # Why
//
// A packet written into the ring is peeked back out of it and its
// descriptor decoded before it is posted (push, postPackets, post); a
// ping-pong's message has nothing of its link in flight and goes to the
// provider without the ring (bench/ofi/LATENCY.md).
func (l *olink) sendNow(pkt []byte) bool {
	p := l.p
	if p.closed.Load() || hdrSize+len(pkt) > p.a.injectSize {
		return false
	}
	p.enter()
	if l.failed || l.stalled != nil {
		p.leave()
		return false
	}
	// Released are the packets both taken and completed (release).
	l.release()
	if l.released != l.posted || l.rd.Pending() {
		p.leave()
		return false
	}
	rc := l.inject(pkt)
	if rc == errAgain {
		p.leave()
		return false
	}
	seq := l.posted
	l.posted++
	l.outside = seq + 1
	if rc >= 0 {
		// Injected: complete at once, and every packet before it was
		// (released).
		l.doneUpTo = l.posted
	} else {
		l.sent(seq, fiErr("fi_inject", rc))
	}
	p.leave()
	return true
}

// progress posts the link's packets and RDMA descriptors, gives back the
// slots of acknowledged packets and completes RDMA descriptors in order.
func (l *olink) progress() int {
	return l.postPackets() + l.settle()
}

// postPackets hands the provider the packets the AMI wrote since the last
// call.
func (l *olink) postPackets() int {
	if l.failed {
		return 0
	}
	n := 0
	for {
		pkt := l.stalled
		if pkt == nil {
			var err error
			if pkt, err = l.rd.Peek(); err != nil {
				l.fail(&transport.PeerError{Addr: l.to, Err: fmt.Errorf("%w: own descriptor buffer: %v", transport.ErrCorrupt, err)})
				return n
			}
			if pkt == nil {
				break
			}
		}
		if !l.post(pkt) {
			l.stalled = pkt
			break
		}
		if l.failed {
			return n
		}
		l.stalled = nil
		n++
	}
	return n
}

// settle gives back the slots of acknowledged packets, posts the RDMA
// descriptors published since the last call and completes those done, in
// order.
func (l *olink) settle() int {
	if l.failed {
		return 0
	}
	l.release()
	return l.issueRDMA() + l.completeRDMA()
}

// post hands one packet to the provider: injected when it fits (no
// completion to wait for), else sent from the ring in place.
func (l *olink) post(pkt []byte) bool {
	p := l.p
	seq := l.posted
	if len(pkt) > 0 && offers[pkt[0]] && l.offered <= seq {
		if !l.offer(pkt) {
			return false
		}
		l.offered = seq + 1 // a packet that stalls is not offered again
	}
	if hdrSize+len(pkt) <= p.a.injectSize {
		rc := l.inject(pkt)
		if rc == errAgain {
			return false
		}
		l.posted++
		l.sent(seq, fiErr("fi_inject", rc))
		return true
	}
	op := p.allocOp(opSend, l, seq)
	if op < 0 {
		return false
	}
	rc := C.amigo_send(p.e.ep, C.uintptr_t(l.hdr), hdrSize, C.uintptr_t(l.desc), C.uintptr_t(addrOf(pkt)), C.size_t(len(pkt)), C.uintptr_t(l.desc), l.dest, p.opCtx(op))
	if rc == errAgain {
		p.freeOp(int(op))
		return false
	}
	l.posted++
	if rc < 0 {
		p.freeOp(int(op))
		l.sent(seq, fiErr("fi_send", rc))
	}
	return true
}

// inject posts pkt with fi_inject. An injected packet carries the
// acknowledgement of what this context took from the peer (it is copied
// now; a packet sent in place shares the link's header with others in
// flight and carries none).
func (l *olink) inject(pkt []byte) C.ssize_t {
	p := l.p
	in := p.ins[p.index(l.to)]
	var ack uint64
	if in != nil && !in.gone {
		ack = in.taken
	}
	rc := p.injectPacket(p.e.eph, C.uintptr_t(l.hdr), C.uintptr_t(addrOf(pkt)), C.size_t(len(pkt)), C.uint64_t(ack), l.dest)
	if in != nil && rc >= 0 {
		in.acked = max(in.acked, ack)
	}
	return rc
}

// offers are the kinds of packet that may name memory of the sender for
// the peer to reach by RDMA (package wire): a rendezvous announcement
// (RTS), a streamed one (SEND), a STOP naming the receive buffer.
var offers = [256]bool{wire.KindRTS: true, wire.KindSEND: true, wire.KindSTOP: true}

// offerAbove is the size of a SEND above which the peer is told of its
// buffer with the announcement: the AMI's default stop threshold, above
// which a receiver that names a buffer stops the stream and GETs. A SEND
// whose sender waits for the receiver's word (wire.FlagHold, a window's)
// is offered at every size: it is fetched unless the receiver has no
// buffer for it.
const offerAbove = 64 << 10

// offer tells the peer where the region pkt names is, ahead of pkt, when
// the peer is to reach it by RDMA: the answer it would otherwise ask for
// (kindKeyReq) once it has read the packet, a round trip before its first
// GET or PUT. Sends to one peer stay in order, and the answer, a control
// message, is handled as soon as it is read, before the packet is
// delivered. It reports false if the provider had no room for the answer
// (the packet waits, and so does the offer).
func (l *olink) offer(pkt []byte) bool {
	w, err := wire.Parse(pkt)
	if err != nil || w.Key == 0 {
		return true
	}
	switch {
	case w.Kind == wire.KindSEND && w.Size <= offerAbove && w.Flags&wire.FlagHold == 0:
		return true
	case w.Kind == wire.KindSTOP && w.Status != wire.StopPut:
		return true
	}
	in := l.p.ins[l.p.index(l.to)]
	if in != nil && in.gone {
		return true
	}
	base, length, mrkey, perm, st := l.p.a.resolve(transport.Key(w.Key), l.p.ctx)
	if st != stOK {
		return true
	}
	var b [32]byte
	putKeyBody(b[:], base, length, mrkey, uint8(perm))
	return l.p.sendCtrl(l.dest, header{kind: kindKeyRep, status: st, arg: w.Key}, b[:])
}

// sent records the local completion of packet seq.
func (l *olink) sent(seq uint64, err error) {
	if err != nil {
		l.fail(&transport.PeerError{Addr: l.to, Err: err})
		return
	}
	n := uint64(len(l.sendDone))
	l.sendDone[seq%n] = true
	for l.doneUpTo < l.posted && l.sendDone[l.doneUpTo%n] {
		l.sendDone[l.doneUpTo%n] = false
		l.doneUpTo++
	}
}

// ack records that the target took the link's packets up to count.
func (l *olink) ack(count uint64) {
	if count > l.acked && count <= l.posted {
		l.acked = count
		l.moves++
	}
}

// release gives the slots of packets both acknowledged and completed
// back to the AMI, counting them transferred: the target took them.
//
// A packet sent outside the ring (sendNow) was the only one in flight when
// it went, so the packets before it were released already: it is counted
// once the target took it, and the ring's packets after it from there.
func (l *olink) release() {
	k := min(l.acked, l.doneUpTo)
	if l.outside != 0 && k >= l.outside {
		l.outside = 0
		l.released++
		l.rd.CountOutside(1)
	}
	if k > l.released {
		l.released += uint64(l.rd.ReleaseFirst(int(k - l.released)))
	}
}

// issueRDMA posts the RDMA descriptors published since the last call, in
// order, each once the peer told where its region is. Accesses outside a
// region, or that the region does not permit, fail here, before anything
// reaches the wire.
func (l *olink) issueRDMA() int {
	p := l.p
	q := l.q
	mask := uint64(q.Slots() - 1)
	n := 0
	for {
		op := q.At(l.issued)
		if op == nil {
			return n
		}
		pos := l.issued
		i := pos & mask
		if op.Kind == transport.Atomic {
			var b [34]byte
			binary.LittleEndian.PutUint64(b[0:], uint64(op.Key))
			binary.LittleEndian.PutUint64(b[8:], op.Off)
			binary.LittleEndian.PutUint64(b[16:], op.Operand)
			binary.LittleEndian.PutUint64(b[24:], op.Compare)
			b[32], b[33] = uint8(op.AOp), op.Width
			p.queueCtrl(l.dest, header{kind: kindAtomReq, arg: pos}, b[:])
			l.issued++
			n++
			continue
		}
		size := uint64(len(op.Local))
		reg := &l.keys[keyHash(op.Key)]
		if reg.key != op.Key || op.Key == 0 {
			if op.Key != 0 && op.Key == l.refused || op.Key == 0 {
				l.refused = 0
				l.finish(pos, &transport.PeerError{Addr: l.to, Err: &transport.AccessError{Key: op.Key, Off: op.Off, Len: size, Err: transport.ErrBadKey}})
				l.issued++
				n++
				continue
			}
			if l.asking == 0 {
				l.asking = op.Key
				l.asked++
				p.queueCtrl(l.dest, header{kind: kindKeyReq, arg: uint64(op.Key)}, nil)
			}
			return n
		}
		if op.Off > reg.length || size > reg.length-op.Off {
			l.finish(pos, &transport.PeerError{Addr: l.to, Err: &transport.AccessError{Key: op.Key, Off: op.Off, Len: size, RegionLen: reg.length, Err: transport.ErrBounds}})
			l.issued++
			n++
			continue
		}
		if need := transport.PermFor(op.Kind); reg.perm&need != need {
			l.finish(pos, &transport.PeerError{Addr: l.to, Err: &transport.AccessError{Key: op.Key, Off: op.Off, Len: size, Err: transport.ErrPermission}})
			l.issued++
			n++
			continue
		}
		if size == 0 {
			l.finish(pos, nil)
			l.issued++
			n++
			continue
		}
		if !l.postRMA(op, pos, i, reg) {
			return n
		}
		if l.failed {
			return n
		}
		l.issued++
		n++
	}
}

// postRMA posts a GET or PUT and reports whether the provider took it.
func (l *olink) postRMA(op *transport.RDMAOp, pos, i uint64, reg *remoteRegion) bool {
	p := l.p
	buf := addrOf(op.Local)
	l.rpins[i].Pin(unsafe.Pointer(unsafe.SliceData(op.Local)))
	var desc uintptr
	if p.a.mrMode&C.FI_MR_LOCAL != 0 {
		e, err := p.regs.get(p, op.Local)
		if err != nil {
			l.rpins[i].Unpin()
			l.finish(pos, &transport.PeerError{Addr: l.to, Err: err})
			return true
		}
		l.rreg[i], desc = e, e.desc
	}
	idx := p.allocOp(opRMA, l, pos)
	if idx < 0 {
		l.unpinRMA(i)
		return false
	}
	write, flags := C.int(0), uint64(0)
	if op.Kind == transport.Put {
		write = 1
		if op.Remote {
			flags = C.FI_DELIVERY_COMPLETE
		}
	}
	rc := C.amigo_rma(p.e.ep, write, C.uintptr_t(buf), C.size_t(len(op.Local)), C.uintptr_t(desc), l.dest,
		C.uint64_t(reg.base+op.Off), C.uint64_t(reg.mrkey), p.opCtx(idx), C.uint64_t(flags))
	if rc == errAgain {
		p.freeOp(int(idx))
		l.unpinRMA(i)
		return false
	}
	if rc < 0 {
		p.freeOp(int(idx))
		l.unpinRMA(i)
		l.finish(pos, &transport.PeerError{Addr: l.to, Err: fiErr("rma", rc)})
		l.fail(&transport.PeerError{Addr: l.to, Err: fiErr("rma", rc)})
	}
	return true
}

func (l *olink) unpinRMA(i uint64) {
	if e := l.rreg[i]; e != nil {
		l.p.regs.put(e)
		l.rreg[i] = nil
	}
	l.rpins[i].Unpin()
}

// rmaDone records the completion of the GET or PUT at pos.
func (l *olink) rmaDone(pos uint64, err error) {
	i := pos & uint64(l.q.Slots()-1)
	l.unpinRMA(i)
	l.moves++
	if err != nil {
		err = &transport.PeerError{Addr: l.to, Err: err}
		l.finish(pos, err)
		l.fail(err)
		return
	}
	l.finish(pos, nil)
}

func (l *olink) finish(pos uint64, err error) {
	i := pos & uint64(l.q.Slots()-1)
	l.rdone[i], l.rerr[i] = true, err
}

// completeRDMA completes the descriptors at the head that are done.
func (l *olink) completeRDMA() int {
	mask := uint64(l.q.Slots() - 1)
	n := 0
	for h := l.q.HeadCounter().Load(); h < l.issued && l.rdone[h&mask]; h++ {
		i := h & mask
		err := l.rerr[i]
		l.rdone[i], l.rerr[i] = false, nil
		l.q.Done(err)
		n++
	}
	return n
}

// keyAnswer records the peer's answer about a region.
func (l *olink) keyAnswer(h header, body []byte) {
	key := transport.Key(h.arg)
	if l.asking == key {
		l.asking = 0
	}
	l.moves++
	if h.status != stOK {
		l.refused = key
		return
	}
	l.keys[keyHash(key)] = remoteRegion{
		key:    key,
		base:   binary.LittleEndian.Uint64(body[0:]),
		length: binary.LittleEndian.Uint64(body[8:]),
		mrkey:  binary.LittleEndian.Uint64(body[16:]),
		perm:   transport.Perm(body[24]),
	}
}

// atomAnswer completes the atomic at the position the answer names.
func (l *olink) atomAnswer(h header, body []byte) {
	pos := h.arg
	op := l.q.At(pos)
	if op == nil || pos < l.q.HeadCounter().Load() || pos >= l.issued || op.Kind != transport.Atomic {
		return
	}
	l.moves++
	if h.status != stOK {
		l.finish(pos, &transport.PeerError{Addr: l.to, Err: &transport.AccessError{Key: op.Key, Off: op.Off, Len: uint64(op.Width), Err: statusError(h.status)}})
		return
	}
	op.SetResult(binary.LittleEndian.Uint64(body))
	l.finish(pos, nil)
}

// waiting reports whether the link waits for its peer.
func (l *olink) waiting() bool {
	return l.stalled != nil || l.posted > l.acked || l.issued > l.q.HeadCounter().Load() || l.asking != 0
}

// checkSilence fails the link if it waited for its peer longer than the
// timeout without hearing anything.
func (l *olink) checkSilence(now time.Time) {
	if l.failed || !l.waiting() {
		l.waitFrom = time.Time{}
		return
	}
	mark := l.moves
	if l.waitFrom.IsZero() || mark != l.lastSeen {
		l.waitFrom, l.lastSeen = now, mark
		return
	}
	if d := now.Sub(l.waitFrom); d > l.p.a.opts.Timeout {
		l.fail(&transport.PeerError{Addr: l.to, Err: fmt.Errorf("%w (%v without an answer)", ErrSilent, d.Round(time.Millisecond))})
	}
}

// fail breaks the link with err, once: the AMI fails what the link holds.
// Buffers of GETs and PUTs the provider still has stay pinned until their
// completions arrive or the port closes.
func (l *olink) fail(err error) {
	if l.failed {
		return
	}
	l.failed = true
	l.l.Fail(err)
	if !errors.Is(err, transport.ErrClosed) {
		// A peer's goodbye is its orderly close, not a failure to report.
		l.p.a.opts.Logf("rank %d context %d: link to %v failed: %v", l.p.a.rank, l.p.ctx, l.to, err)
	}
	l.p.bell.Ring()
}

// release unpins the link's memory; the port's endpoint is closed.
func (l *olink) releaseAll() {
	for i := range l.rpins {
		l.unpinRMA(uint64(i))
	}
	if l.mr != nil {
		C.amigo_close(C.amigo_fid_mr(l.mr))
		l.mr = nil
	}
	l.pins.Unpin()
}
