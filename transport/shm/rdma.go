package shm

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/transport"
)

// The initiator's RDMA engine runs inside Progress on the goroutine that
// owns the port. Each link performs its descriptors in order, one at a time;
// a descriptor is a small state machine (xfer) that moves at most
// Options.Piece bytes per step, so that Progress never waits for a peer and
// never holds up message polling for long.

const (
	modeSegment = iota + 1 // memcpy from/to the owner's shared segment
	modeCMA                // process_vm_readv/writev
	modePipe               // pipelined copy through the owner's chunks
	modeAtomic             // an atomic the owner performs
)

// The smallest pieces of a cooperative copy: each piece costs a claim on a
// shared cache line, and by cross-memory attach a system call that pins the
// pages; measured on a 2-core machine, these sizes moved the most at 1 and
// 4 MiB (CMA at 32 KiB pieces: 30 GB/s; at 256 KiB: 45 GB/s).
//
// A transfer by cross-memory attach of less than twice helpPieceCMA bytes
// that goes alone (one of 256 KiB to 512 KiB with no other queued next to
// it, see batchBelow) is split in pieces of helpPieceCMAMid: the two
// halves of a 256 KiB message, each side copying its own. Windows of
// 256 KiB messages moved 26.0 GB/s so, against 20.5 batched four to a
// call by the receiver alone (medians of 8 interleaved rounds, two ranks
// on a loaded Intel 2-core machine); halves of 128 KiB messages, 64 KiB
// each, moved half as much as their batches.
const (
	helpPieceSegment = 64 << 10
	helpPieceCMA     = 256 << 10
	helpPieceCMAMid  = 128 << 10
)

type xfer struct {
	l      *link
	op     *transport.RDMAOp
	pr     *peer
	key    transport.Key
	off, n uint64
	mode   int
	pos    uint64 // bytes moved by this side (serial, pipelined)
	err    error

	ch     *channel // help or pipe: the channel in use
	id     uint64
	help   bool
	piece  uint64
	pieces uint64
	full   uint64 // done mask with every piece
	redone uint64 // pieces the owner gave back and we moved

	chunks []byte
	ring   int // pipelined: chunk ring of the owner's pool held, or -1
	base   uint64
	acked  bool
	last   time.Time // last progress of a pipelined copy
	idle   uint32    // steps without progress

	timed bool      // the way was chosen by measurement: time it
	t0    time.Time // start of a timed transfer

	// A batched cooperative copy (coop.go): batch descriptors from the
	// FIFO's head, front bytes of them moved by this side, backs entries
	// of back halves (n bytes in all); short when a call failed.
	batch, front, backs int
	short               bool
}

// runRDMA advances the descriptors of the port's links.
func (p *port) runRDMA() int {
	p.work.Store(0)
	raceAcquire()
	defer raceRelease()
	done := 0
	for _, l := range *p.out.Load() {
		for {
			if l.x == nil {
				if n := p.runBatch(l); n > 0 {
					done += n
					continue
				}
			}
			if l.x == nil {
				op := l.tl.RDMA.Next()
				if op == nil {
					break
				}
				x, wait, err := p.start(l, op)
				if wait {
					break // for the channel
				}
				if x == nil {
					l.tl.RDMA.Done(err)
					done++
					continue
				}
				l.x = x
				p.active++
			}
			moved, fin := p.step(l.x)
			if moved {
				done++
			}
			if !fin {
				break
			}
			x := l.x
			l.x = nil
			p.active--
			if x.batch > 0 {
				done += p.endCoop(l, x)
				continue
			}
			if x.timed && x.err == nil {
				p.ways[x.pr.li].record(x.mode, x.n, time.Since(x.t0))
			}
			if x.ch != nil {
				p.chanBy[x.pr.li] = nil
			}
			if x.ring >= 0 {
				releaseRing(x.pr.seg.ringHolder(x.ring), ringTag(p.a.li, p.ctx, x.pr.seg.l.nctx), holdInit)
			}
			l.tl.RDMA.Done(x.err)
			done++
		}
	}
	return done
}

func (p *port) accessErr(x *xfer, rlen uint64, err error) error {
	return peerErr(x.l.tl.To, &transport.AccessError{Key: x.key, Off: x.off, Len: x.n, RegionLen: rlen, Err: err})
}

var (
	errNotShared   = errors.New("region is not in a shared segment (way segment forced)")
	errNotMirrored = errors.New("region is beyond the mirror (way forced)")
	errNoCMA       = errors.New("cross-memory attach refused (way cma forced)")
)

// start chooses the way of a descriptor. It reports wait when the
// descriptor must wait for the channel, and a nil xfer when the descriptor
// is over at once, with err.
func (p *port) start(l *link, op *transport.RDMAOp) (x *xfer, wait bool, err error) {
	if err := l.tl.Err(); err != nil {
		return nil, false, err
	}
	a := p.a
	pr := l.pr
	to := l.tl.To
	if op.Kind == transport.Atomic {
		return p.startAtomic(l, op)
	}
	if op.Kind != transport.Get && op.Kind != transport.Put {
		return nil, false, peerErr(to, fmt.Errorf("unknown RDMA operation %v", op.Kind))
	}
	x = &l.xbuf
	*x = xfer{l: l, op: op, pr: pr, key: op.Key, off: op.Off, n: uint64(len(op.Local)), ring: -1}
	way := a.opts.Way
	var reg region
	var ok, held bool
	if way != WayCopy {
		reg, ok, held = a.lookup(pr, p.ctx, op.Key)
		if ok {
			a.release(pr, p.ctx)
			if x.off > reg.len || x.n > reg.len-x.off {
				return nil, false, p.accessErr(x, reg.len, transport.ErrBounds)
			}
			if reg.perm&transport.PermFor(op.Kind) == 0 {
				return nil, false, p.accessErr(x, 0, transport.ErrPermission)
			}
		} else if held {
			return nil, false, p.accessErr(x, 0, transport.ErrBadKey)
		}
	}
	if x.n == 0 {
		return nil, false, nil
	}
	switch way {
	case WaySegment, WayCMA:
		if !ok {
			return nil, false, peerErr(to, errNotMirrored)
		}
		if way == WaySegment {
			if reg.seg == 0 {
				return nil, false, peerErr(to, errNotShared)
			}
			if _, err := pr.allocMem(int(reg.seg - 1)); err != nil {
				return nil, false, peerErr(to, err)
			}
			x.mode = modeSegment
		} else {
			if !pr.cma {
				return nil, false, peerErr(to, errNoCMA)
			}
			x.mode = modeCMA
		}
	case WayCopy:
		x.mode = modePipe
	default:
		x.mode = modePipe
		if ok && reg.seg != 0 {
			if _, err := pr.allocMem(int(reg.seg - 1)); err == nil {
				x.mode = modeSegment
			}
		}
		if ok && x.mode == modePipe && pr.cma {
			x.mode = modeCMA
			if x.n >= measureMin {
				x.mode = p.ways[pr.li].pick()
				x.timed = true
			}
		}
	}
	busy := p.chanBy[pr.li] != nil
	if x.mode == modePipe && !busy {
		if x.ring = claimRing(pr.seg, ringTag(a.li, p.ctx, pr.seg.l.nctx)); x.ring < 0 {
			if way != WayCopy && ok && pr.cma {
				// The owner's chunk rings are all in flight: this
				// one moves by cross-memory attach.
				x.mode = modeCMA
			} else {
				// Wait for a ring; its holder, in another process,
				// does not ring us when it gives it back.
				p.work.Store(1)
				return nil, true, nil
			}
		}
	}
	help := x.mode != modePipe && !a.opts.HelpOff && x.n >= uint64(a.opts.HelpMin) && x.n >= 2*helpPiece(x.mode, x.n) && !busy
	if x.mode == modeCMA {
		// Before the owner is asked: it writes into this buffer by
		// cross-memory attach, pinning its pages (see startCoop).
		least := hugeMinOverlap
		if help {
			least = pageSize
		}
		a.prepareHuge(x.op.Local, least)
	}
	if x.mode == modePipe {
		if busy {
			return nil, true, nil
		}
		p.startPipe(x)
	} else if help {
		p.startHelp(x)
	}
	if x.timed {
		x.t0 = time.Now()
	}
	return x, false, nil
}

// atomicInPlace performs an atomic on a word of the owner's shared
// segment with the processor's atomics on this process's mapping of it, on
// the goroutine that holds the context, when the mirror says the word is
// there (Link.Atomic). It reports false, having done nothing, otherwise.
func (p *port) atomicInPlace(l *link, op transport.AtomicArgs) (uint64, bool, error) {
	n := uint64(op.Width)
	c := p.claimInPlace(l, op.Key, op.Off, n, transport.PermAtomic)
	if c == nil {
		return 0, false, nil
	}
	w := c.mem[op.Off : op.Off+n]
	if op.Op == transport.AtomicAdd && n == 8 && uintptr(unsafe.Pointer(&w[0]))&7 == 0 {
		// The common case, without ApplyChecked's dispatch.
		old := atomic.AddUint64((*uint64)(unsafe.Pointer(&w[0])), op.Operand) - op.Operand
		order.Store64(l.slot, 0)
		return old, true, nil
	}
	old, err := transport.ApplyChecked(w, op.Op, int(op.Width), op.Operand, op.Compare)
	// A release store ends the claim: the owner needs to see the slot
	// cleared only after our access, not at once.
	order.Store64(l.slot, 0)
	if err != nil {
		return 0, true, peerErr(l.tl.To, &transport.AccessError{Key: op.Key, Off: op.Off, Len: n, Err: err})
	}
	return old, true, nil
}

// copyInPlace performs a Get or a Put of at most copyInPlaceMax bytes
// on the owner's shared segment with one copy through this process's
// mapping of it, on the goroutine that holds the context, when the mirror
// says the region is there (Link.Copy): the way modeSegment moves it, at
// once. It reports false, having done nothing, otherwise.
func (p *port) copyInPlace(l *link, k transport.RDMAKind, local []byte, key transport.Key, off uint64) bool {
	n := uint64(len(local))
	if n == 0 || n > copyInPlaceMax || n > uint64(p.a.opts.Piece) || (k != transport.Get && k != transport.Put) {
		return false
	}
	if w := p.a.opts.Way; w != WayAuto && w != WaySegment {
		return false
	}
	c := p.claimInPlace(l, key, off, n, transport.PermFor(k))
	if c == nil {
		return false
	}
	if k == transport.Put {
		copy(c.mem[off:off+n], local)
	} else {
		copy(local, c.mem[off:off+n])
	}
	// A release store ends the claim (atomicInPlace).
	order.Store64(l.slot, 0)
	return true
}

// copyInPlaceMax is the largest Get or Put copyInPlace performs (and no
// more than one Options.Piece, which bounds a claim of the owner's slot):
// a copy of a few microseconds at most, below the transfers the owner
// helps with (Options.HelpMin); larger ones take the RDMA FIFO.
const copyInPlaceMax = 64 << 10

// claimInPlace claims the owner's region key for an access of n bytes at
// off with permission perm in place (atomicInPlace, copyInPlace), and
// returns its cached place in this process's mapping; the caller ends the
// claim with a release store of zero into l.slot. It returns nil, having
// claimed nothing, when the region is not in a shared allocation of the
// owner's, the access is outside it or not permitted, or the link failed.
func (p *port) claimInPlace(l *link, key transport.Key, off, n uint64, perm transport.Perm) *atomRegion {
	a, pr := p.a, l.pr
	if l.tl.Err() != nil {
		return nil
	}
	slot := l.slot
	c := &l.atom[0]
	if key != c.key {
		c = &l.atom[1]
	}
	if key != c.key || key == 0 {
		c = &l.atom[l.atomNext]
		l.atomNext ^= 1
		reg, ok := a.lookupAtomic(pr, slot, key)
		if !ok {
			return nil
		}
		*c = atomRegion{}
		if reg.seg != 0 {
			mem, err := pr.allocMem(int(reg.seg - 1))
			if err == nil && reg.segOff <= uint64(len(mem)) && reg.len <= uint64(len(mem))-reg.segOff {
				*c = atomRegion{key: key, entry: pr.seg.mirrorEntry(int(uint64(key) & keyIndexMask)),
					mem: mem[reg.segOff : reg.segOff+reg.len : reg.segOff+reg.len], perm: reg.perm}
			}
		}
		if c.key == 0 {
			order.Store64(slot, 0)
			return nil
		}
	} else {
		// The claim of lookupAtomic, on the entry kept.
		order.Store64(slot, uint64(key))
		if !claimedInPlace(c.entry, key) {
			order.Store64(slot, 0)
			*c = atomRegion{}
			return nil
		}
	}
	if off > uint64(len(c.mem)) || n > uint64(len(c.mem))-off || c.perm&perm == 0 {
		order.Store64(slot, 0)
		return nil
	}
	return c
}

// atomRegion is a link's cache of the region of its last atomic or copy
// performed in place: its key, its bytes in this process's mapping of the owner's
// shared allocation, and its permissions. The entry and the bytes are in
// mappings the peer keeps until it closes (Link.Err, checked first).
type atomRegion struct {
	key   transport.Key
	entry *mirrorEntry // the key's entry in the owner's mirror
	mem   []byte
	perm  transport.Perm
}

// startAtomic performs an atomic at once on a word of the owner's shared
// segment, with the processor's atomics on this process's mapping of it;
// on any other memory (Go memory the owner registered, reached otherwise
// by cross-memory attach, which is not atomic) it asks the owner to.
func (p *port) startAtomic(l *link, op *transport.RDMAOp) (x *xfer, wait bool, err error) {
	a, pr, to := p.a, l.pr, l.tl.To
	x = &l.xbuf
	*x = xfer{l: l, op: op, pr: pr, key: op.Key, off: op.Off, n: uint64(op.Width), ring: -1}
	if err := transport.CheckAtomic(op.AOp, int(op.Width)); err != nil {
		return nil, false, peerErr(to, err)
	}
	if reg, ok, held := a.lookup(pr, p.ctx, op.Key); ok {
		switch {
		case x.off > reg.len || x.n > reg.len-x.off:
			err = p.accessErr(x, reg.len, transport.ErrBounds)
		case reg.perm&transport.PermAtomic == 0:
			err = p.accessErr(x, 0, transport.ErrPermission)
		case reg.seg != 0:
			if mem, e := pr.allocMem(int(reg.seg - 1)); e == nil {
				at := reg.segOff + x.off
				if at < reg.segOff || at > uint64(len(mem)) || x.n > uint64(len(mem))-at {
					err = peerErr(to, fmt.Errorf("%w: mirror entry beyond its segment", transport.ErrCorrupt))
				} else {
					var old uint64
					if old, err = transport.ApplyAtomic(mem[at:at+x.n], op.AOp, int(op.Width), op.Operand, op.Compare); err != nil {
						err = p.accessErr(x, 0, err)
					} else {
						op.SetResult(old)
						a.stats.atomicsDirect.Add(1)
					}
				}
				a.release(pr, p.ctx)
				return nil, false, err
			}
		}
		a.release(pr, p.ctx)
		if err != nil {
			return nil, false, err
		}
	} else if held {
		return nil, false, p.accessErr(x, 0, transport.ErrBadKey)
	}
	if p.chanBy[pr.li] != nil {
		return nil, true, nil
	}
	ch := pr.seg.channel(a.li, p.ctx)
	x.ch, x.mode = ch, modeAtomic
	p.newID(x)
	ch.aop.Store(uint64(op.AOp) | uint64(op.Width)<<8)
	ch.arg.Store(op.Operand)
	ch.cmp.Store(op.Compare)
	x.last = time.Now()
	p.post(x, reqAtomic)
	transport.RingShared(pr.seg.engineBell())
	return x, false, nil
}

// stepAtomic waits for the owner's answer to an atomic request.
func (p *port) stepAtomic(x *xfer) (moved, fin bool) {
	ch := x.ch
	if st := ch.status.Load(); st>>8 == x.id && st&0xff != stOK {
		x.err = p.statusErr(x, st&0xff, ch.rlen.Load())
		return false, true
	}
	if ch.ack.Load() != x.id {
		p.escalate(x)
		return false, false
	}
	x.op.SetResult(ch.result.Load())
	return true, true
}

// newID takes the id of x's request on its channel.
func (p *port) newID(x *xfer) {
	li := x.pr.li
	p.nextID[li] = (p.nextID[li] + 1) & idMask
	if p.nextID[li] == 0 {
		p.nextID[li] = 1
	}
	x.id = p.nextID[li]
}

// post publishes the request words the caller filled in x.ch.
func (p *port) post(x *xfer, mode uint64) {
	li := x.pr.li
	ch := x.ch
	ch.mode.Store(mode | uint64(x.op.Kind)<<8)
	ch.key.Store(uint64(x.key))
	ch.off.Store(x.off)
	ch.n.Store(x.n)
	ch.seq.Store(x.id)
	x.pr.seg.engineWork().Store(1)
	p.chanBy[li] = x.l
}

// helpPiece is the smallest piece of a cooperative copy of n bytes by
// mode; a transfer of fewer than two such pieces is not split.
func helpPiece(mode int, n uint64) uint64 {
	switch {
	case mode != modeCMA:
		return helpPieceSegment
	case n < 2*helpPieceCMA:
		return helpPieceCMAMid
	}
	return helpPieceCMA
}

// startHelp offers the owner to copy part of x on its side.
func (p *port) startHelp(x *xfer) {
	a := p.a
	ch := x.pr.seg.channel(a.li, p.ctx)
	x.ch = ch
	x.help = true
	p.newID(x)
	piece := max(helpPiece(x.mode, x.n), (x.n+maxPieces-1)/maxPieces)
	piece = (piece + pageSize - 1) &^ (pageSize - 1)
	x.piece = piece
	x.pieces = (x.n + piece - 1) / piece
	if x.pieces == 64 {
		x.full = ^uint64(0)
	} else {
		x.full = 1<<x.pieces - 1
	}
	seg, off := a.allocOf(x.op.Local)
	ch.done.Store(0)
	ch.redo.Store(0)
	ch.piece.Store(piece)
	ch.lseg.Store(uint64(seg))
	ch.loff.Store(off)
	ch.laddr.Store(addrOf(x.op.Local))
	ch.claim.Store(claimWord(x.id, 0, x.pieces))
	p.post(x, reqHelp)
}

// startPipe asks the owner for a pipelined copy of x.
func (p *port) startPipe(x *xfer) {
	a := p.a
	ch := x.pr.seg.channel(a.li, p.ctx)
	x.ch = ch
	p.newID(x)
	x.chunks = x.pr.seg.chunkRing(x.ring)
	x.base = max(ch.wr.Load(), ch.rd.Load())
	ch.base.Store(x.base)
	ch.ring.Store(uint64(x.ring))
	if x.op.Kind == transport.Get {
		ch.rd.Store(x.base)
	} else {
		ch.wr.Store(x.base)
	}
	x.last = time.Now()
	p.post(x, reqPipe)
}

// step advances x; it reports whether it moved bytes and whether x is over.
func (p *port) step(x *xfer) (moved, fin bool) {
	if err := x.l.tl.Err(); err != nil {
		if x.err == nil {
			x.err = err
		}
		if !x.help || x.pr.gone() {
			return false, true
		}
		// The owner may still write into our buffer: stop claiming, and wait
		// for the pieces it claimed.
		p.exhaust(x)
		return false, x.ch.done.Load() == x.full
	}
	switch {
	case x.mode == modeAtomic:
		return p.stepAtomic(x)
	case x.mode == modePipe:
		return p.stepPipe(x)
	case x.batch > 0:
		return p.stepCoop(x)
	case x.help:
		return p.stepHelp(x)
	default:
		e := min(x.n, x.pos+uint64(p.a.opts.Piece))
		if err := p.move(x, x.pos, e); err != nil {
			x.err = err
			return false, true
		}
		x.pos = e
		return true, x.pos == x.n
	}
}

// exhaust claims every remaining piece of a cooperative copy and marks them
// done without moving them.
func (p *port) exhaust(x *xfer) {
	for {
		w := x.ch.claim.Load()
		id, front, back := claimParts(w)
		if id != x.id || front >= back {
			return
		}
		if x.ch.claim.CompareAndSwap(w, claimWord(id, back, back)) {
			for k := front; k < back; k++ {
				x.ch.done.Or(1 << k)
			}
			return
		}
	}
}

func (p *port) stepHelp(x *xfer) (moved, fin bool) {
	ch := x.ch
	budget := p.a.opts.Piece
	for budget > 0 {
		w := ch.claim.Load()
		id, k, back := claimParts(w)
		if id != x.id || k >= back {
			break
		}
		if !ch.claim.CompareAndSwap(w, claimWord(id, k+1, back)) {
			continue
		}
		s, e := k*x.piece, min(x.n, (k+1)*x.piece)
		if x.err == nil {
			if err := p.move(x, s, e); err != nil {
				x.err = err
			}
		}
		ch.done.Or(1 << k)
		moved = true
		budget -= int(e - s)
	}
	if ch.done.Load() != x.full {
		return moved, false
	}
	// The owner gave back pieces it could not move: move them here.
	for redo := ch.redo.Load() &^ x.redone; redo != 0; redo &= redo - 1 {
		k := uint64(bits.TrailingZeros64(redo))
		x.redone |= 1 << k
		if x.err == nil {
			if err := p.move(x, k*x.piece, min(x.n, (k+1)*x.piece)); err != nil {
				x.err = err
			}
		}
		moved = true
	}
	return moved, true
}

// move copies bytes [s, e) of x on this side, by segment or CMA, under an
// access slot (see mirrorEntry).
func (p *port) move(x *xfer, s, e uint64) error {
	a := p.a
	reg, ok, _ := a.lookup(x.pr, p.ctx, x.key)
	if !ok {
		return p.accessErr(x, 0, transport.ErrBadKey)
	}
	defer a.release(x.pr, p.ctx)
	if x.off > reg.len || x.n > reg.len-x.off {
		return p.accessErr(x, reg.len, transport.ErrBounds)
	}
	local := x.op.Local[s:e]
	if x.mode == modeSegment {
		mem, err := x.pr.allocMem(int(reg.seg) - 1)
		if err != nil {
			return peerErr(x.l.tl.To, err)
		}
		if reg.segOff > uint64(len(mem)) || reg.len > uint64(len(mem))-reg.segOff {
			return peerErr(x.l.tl.To, fmt.Errorf("%w: mirror entry outside segment", transport.ErrCorrupt))
		}
		at := reg.segOff + x.off + s
		remote := mem[at : at+(e-s)]
		if x.op.Kind == transport.Get {
			copy(local, remote)
		} else {
			copy(remote, local)
		}
		a.stats.segment.Add(e - s)
		return nil
	}
	var err error
	if x.op.Kind == transport.Get {
		err = p.cma.read(x.pr.pub.pid, local, reg.addr+x.off+s)
	} else {
		err = p.cma.write(x.pr.pub.pid, local, reg.addr+x.off+s)
	}
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			// The owner is gone; say so now rather than when the
			// watcher notices.
			a.peerGone(x.pr)
		}
		if x.pr.gone() {
			return peerErr(x.l.tl.To, x.pr.err())
		}
		return peerErr(x.l.tl.To, err)
	}
	a.stats.cma.Add(e - s)
	return nil
}

// stepPipe advances a pipelined copy: wait for the owner to take the
// request, then copy out of (Get) or into (Put) the chunk ring.
func (p *port) stepPipe(x *xfer) (moved, fin bool) {
	ch := x.ch
	if st := ch.status.Load(); st>>8 == x.id && st&0xff != stOK {
		x.err = p.statusErr(x, st&0xff, ch.rlen.Load())
		return false, true
	}
	if !x.acked {
		if ch.ack.Load() != x.id {
			p.escalate(x)
			return false, false
		}
		x.acked = true
	}
	capa := uint64(len(x.chunks))
	chunk := uint64(p.a.self.l.chunk)
	budget := uint64(p.a.opts.Piece)
	if x.op.Kind == transport.Get {
		wr := ch.wr.Load()
		at := x.base + x.pos
		if wr < at || wr-at > capa || wr-at > x.n-x.pos {
			x.err = peerErr(x.l.tl.To, fmt.Errorf("%w: pipelined copy position", transport.ErrCorrupt))
			x.l.tl.Fail(x.err)
			return false, true
		}
		for avail := wr - at; avail > 0 && budget > 0; {
			r := at % capa
			c := min(avail, capa-r, chunk, budget)
			copy(x.op.Local[x.pos:x.pos+c], x.chunks[r:r+c])
			p.a.stats.pipe.Add(c)
			x.pos += c
			at += c
			avail -= c
			budget -= c
			ch.rd.Store(at)
			moved = true
		}
		if moved {
			x.last = time.Now()
		} else {
			p.escalate(x)
		}
		return moved, x.pos == x.n
	}
	rd := ch.rd.Load()
	at := x.base + x.pos
	if rd > at || at-rd > capa || rd < x.base {
		x.err = peerErr(x.l.tl.To, fmt.Errorf("%w: pipelined copy position", transport.ErrCorrupt))
		x.l.tl.Fail(x.err)
		return false, true
	}
	for space := capa - (at - rd); space > 0 && budget > 0 && x.pos < x.n; {
		w := at % capa
		c := min(space, capa-w, chunk, budget, x.n-x.pos)
		copy(x.chunks[w:w+c], x.op.Local[x.pos:x.pos+c])
		p.a.stats.pipe.Add(c)
		x.pos += c
		at += c
		space -= c
		budget -= c
		ch.wr.Store(at)
		moved = true
	}
	if rd == x.base+x.n {
		return moved, true
	}
	if moved || ch.rd.Load() != rd {
		x.last = time.Now()
	} else {
		p.escalate(x)
	}
	return moved, false
}

// escalate wakes the owner's engine when the owner's contexts have not
// served a pipelined copy for a while: they may be busy or asleep.
func (p *port) escalate(x *xfer) {
	// The clock is read every 16th idle step only: waiting for the owner
	// is a spin of Progress calls, and reading the clock in each was a
	// tenth of the initiator's time in a bandwidth run.
	x.idle++
	if x.idle%16 != 0 {
		return
	}
	if now := time.Now(); now.Sub(x.last) > p.a.escalate {
		x.last = now
		transport.RingShared(x.pr.seg.engineBell())
	}
}

func (p *port) statusErr(x *xfer, code, rlen uint64) error {
	switch code {
	case stBadKey:
		return p.accessErr(x, 0, transport.ErrBadKey)
	case stBounds:
		return p.accessErr(x, rlen, transport.ErrBounds)
	case stClosed:
		return peerErr(x.l.tl.To, transport.ErrClosed)
	case stPerm:
		return p.accessErr(x, 0, transport.ErrPermission)
	case stMisaligned:
		return p.accessErr(x, 0, transport.ErrMisaligned)
	case stBadRequest:
		return peerErr(x.l.tl.To, fmt.Errorf("%w: the owner refused the request", transport.ErrCorrupt))
	}
	return peerErr(x.l.tl.To, fmt.Errorf("transfer failed at the owner (code %d)", code))
}
