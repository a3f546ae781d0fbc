package shm

import (
	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/transport"
)

// Batched cross-memory attach.
//
// A system call costs more than copying a few kilobytes: on a 2-core
// virtual machine one process_vm_readv of 16 KiB took 3.5 us (4.7 GB/s),
// while one call gathering 64 such pieces moved 24 GB/s. Messages of a few
// kilobytes to a few hundred come in windows (a bandwidth run posts 64 at
// once, a halo exchange one per neighbour), and a receiver that fetches
// them finds their GETs queued one after the other in the RDMA FIFO toward
// the sender. So before it starts a descriptor the usual way, the engine
// gathers the consecutive small GETs (or PUTs) at the head of a link's FIFO
// that cross-memory attach would move, resolves their keys together, and
// moves them all in one vectored call.
//
// The keys are resolved under one access claim, accessAll in the access
// slot (see mirrorEntry): stored before any entry's state is loaded, it
// makes a deregistration of any key of this owner wait until the call is
// over, as a single key's claim does for that key. The claim is held for
// one bounded call that needs no one else's progress.
//
// A descriptor that is not a candidate (a key the mirror does not hold, a
// region in a shared segment, bounds a region does not have, a transfer
// large enough to be timed and helped) ends the batch; it then goes the
// usual way, which reports its error. A batch whose call fails or falls
// short is not retried as a batch: its descriptors go the usual way, one by
// one, so that each gets its own outcome (moving the same bytes again is
// harmless for a GET and for a PUT alike).

const (
	// batchMax is the most descriptors one call gathers.
	batchMax = 64
	// batchBelow is the size from which a descriptor goes alone: such
	// transfers are timed and offered to the owner as a cooperative copy
	// (choose.go, helpPiece). Windows of 256 KiB messages moved 35-45
	// GB/s four to a call, against 12-27 one by one, when the owner did
	// not take half of each (helpPieceCMAMid); with it, on an Intel
	// 2-core machine, they moved more one by one (26.0 against 20.5
	// GB/s). On an AMD one, one by one in halves moved 29.6 GB/s, a
	// batch four to a call 38.2 whether split with the owner or not,
	// and 128 KiB, batched, 37.3: a window of 256 KiB
	// moved less than one of 128 (medians of 6 interleaved rounds). On
	// the Intel machine a batch split with the owner had moved 1.28
	// times a batch by the receiver alone at 128 KiB, as halves did at
	// 256 KiB; so 256 KiB up to 512 KiB is batched and split too.
	batchBelow = 512 << 10
	// batchBytes bounds the bytes of one call, and so how long a batch
	// holds up this port's polling: some 60-120 us at 4 MiB (35-70 GB/s),
	// where one piece of a large transfer (Options.Piece) holds it a few.
	//
	// # Why
	//
	// Each batch costs its calls, the owner's request and the wait for
	// its part; windows of 32 / 64 / 128 / 256 KiB messages moved 1.05 /
	// 1.18 / 1.16 / 1.17x and 1.11 / 1.19 / 1.23 / 1.22x as much in
	// batches of 4 MiB as of 1 MiB (two runs of 6 interleaved rounds, the
	// AMD host's slow state; 8 MiB 1.07-1.24x, 2 MiB 0.99-1.17x). A
	// window of 64 x 32 KiB is one batch (batchMax) from 2 MiB on.
	batchBytes = 4 << 20

	// accessAll in an access slot claims every key of the owner (see
	// mirrorEntry). No key equals it: a key's low 24 bits index the
	// owner's table, which has fewer entries (maxMirror).
	accessAll = ^uint64(0)
)

// cmaBatch holds the vectors of one batched call, so that it allocates
// nothing: l and r the whole descriptors, or their front halves in a
// batched cooperative copy, bl and br their back halves.
type cmaBatch struct {
	l  [batchMax]unix.Iovec
	r  [batchMax]unix.RemoteIovec
	bl [batchMax]unix.Iovec
	br [batchMax]unix.RemoteIovec
}

// runBatch moves the small cross-memory attach descriptors at the head of
// l's RDMA FIFO in one call, and returns how many it completed: 0 when
// fewer than two qualify, or when the call failed (they then go the usual
// way). When the batch is split with the owner instead (startCoop), it
// leaves the transfer in l.x and returns 0.
func (p *port) runBatch(l *link) int {
	a := p.a
	pr := l.pr
	if !pr.cma || a.opts.Way != WayAuto && a.opts.Way != WayCMA || pr.gone() {
		return 0
	}
	q := l.tl.RDMA
	h := q.HeadCounter().Load()
	if h < l.serialTo {
		return 0
	}
	first, second := q.At(h), q.At(h+1)
	if first == nil || second == nil || l.tl.Err() != nil {
		return 0
	}
	kind := first.Kind
	if kind != transport.Get && kind != transport.Put {
		return 0
	}
	pr.seg.access(a.li, p.ctx).Store(accessAll)
	k, total := 0, 0
	for ; k < batchMax; k++ {
		op := q.At(h + uint64(k))
		if op == nil || op.Kind != kind {
			break
		}
		n := len(op.Local)
		if n == 0 || n >= batchBelow || total+n > batchBytes {
			break
		}
		idx := int(uint64(op.Key) & keyIndexMask)
		if op.Key == 0 || idx >= pr.seg.l.mirror {
			break
		}
		e := pr.seg.mirrorEntry(idx)
		if e.state.Load() != uint64(op.Key) || e.seg.Load() != 0 || transport.Perm(e.perm.Load())&transport.PermFor(kind) == 0 {
			break
		}
		addr, rlen := e.addr.Load(), e.len.Load()
		if op.Off > rlen || uint64(n) > rlen-op.Off {
			break
		}
		p.batch.l[k].Base = &op.Local[0]
		p.batch.l[k].SetLen(n)
		p.batch.r[k] = unix.RemoteIovec{Base: uintptr(addr + op.Off), Len: n}
		total += n
	}
	if k < 2 {
		p.endAll(pr)
		p.batch.clear(k)
		return 0
	}
	if p.startCoop(l, h, k, total) {
		return 0
	}
	got, err := vmCopyAll(kind == transport.Put, pr.pub.pid, p.batch.l[:k], p.batch.r[:k])
	p.endAll(pr)
	p.batch.clear(k)
	if err != nil || got != total {
		// Each goes the usual way, which says what went wrong.
		l.serialTo = h + uint64(k)
		return 0
	}
	a.stats.cma.Add(uint64(total))
	a.stats.cmaBatches.Add(1)
	for i := 0; i < k; i++ {
		q.Done(nil)
	}
	return k
}

// endAll ends this context's claim of every key of pr (accessAll). It
// counts the end in the slot's word accessEnds before it clears the slot:
// the next batch claims the slot again within microseconds, and an owner
// waiting for this claim to end (waitAccess) might never find the slot
// clear between two batches, but sees the count move.
func (p *port) endAll(pr *peer) {
	pr.seg.accessEnds(p.a.li, p.ctx).Add(1)
	pr.seg.access(p.a.li, p.ctx).Store(0)
}

// vmCopyAll is vmCopy, made again while interrupted.
func vmCopyAll(write bool, pid int, l []unix.Iovec, r []unix.RemoteIovec) (int, error) {
	for {
		got, err := vmCopy(write, pid, l, r)
		if err != unix.EINTR {
			return got, err
		}
	}
}

// clear drops the batch's references to the first k local buffers.
func (b *cmaBatch) clear(k int) {
	for i := 0; i < k; i++ {
		b.l[i].Base = nil
		b.bl[i].Base = nil
	}
}
