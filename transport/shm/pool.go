package shm

import "sync/atomic"

// The chunk rings of the pipelined copy are a pool in the owner's segment
// (Options.ChunkRings of them), not one per peer context: a host of n ranks
// would otherwise hold n*(n-1) of them, a mebibyte each, of which a rank
// uses at most one per owner at a time. A transfer draws a ring when it
// starts and gives it back when it is over; a pipelined copy that finds the
// pool empty moves by cross-memory attach instead when the kernel allows it,
// or waits for a ring. Rings are drawn lowest first, so a pool's pages are
// touched only as far as transfers were ever in flight at once.
//
// Each ring has a holder word in the pool table:
//
//	0                     free
//	tag<<2 | 1            held by the initiator of channel tag-1
//	                      (li*nctx+d), which named it in its request
//	tag<<2 | 3            held by it and by the owner, who took the request
//	tag<<2 | 2            held by the owner alone (the initiator is done)
//
// Memory ordering: every change is a compare-and-swap (sequentially
// consistent in Go), and the ring's bytes are only touched by a side that
// holds it: the initiator from its claim (0 -> tag|1) to its release, the
// owner from its take (tag|1 -> tag|3, which fails unless the initiator
// still holds it for that channel) to its release. The side that clears the
// last bit stores 0, and the ring's next holder starts after that CAS, so
// the previous holders' copies happen before its own. A ring whose
// initiator died is freed by the owner (sweep): its own bit is clear by
// then, since a request of a peer that is gone is over on its side.

// ringTag is the holder tag of channel (li, d) in an owner of nctx contexts.
func ringTag(li, d, nctx int) uint64 { return uint64(li*nctx+d) + 1 }

const (
	holdInit  = 1
	holdOwner = 2
)

// claimRing takes a free chunk ring of s's pool for channel tag; it returns
// -1 when every ring is held.
func claimRing(s *segment, tag uint64) int {
	for i := 0; i < s.l.rings; i++ {
		if w := s.ringHolder(i); w.Load() == 0 && w.CompareAndSwap(0, tag<<2|holdInit) {
			return i
		}
	}
	return -1
}

// takeRing is the owner's side of a claim: it reports whether ring i is
// held by the initiator of channel tag, and holds it too.
func takeRing(s *segment, i uint64, tag uint64) bool {
	if i >= uint64(s.l.rings) {
		return false
	}
	return s.ringHolder(int(i)).CompareAndSwap(tag<<2|holdInit, tag<<2|holdInit|holdOwner)
}

// releaseRing drops side's hold (holdInit or holdOwner) on ring i for
// channel tag; the ring is free once neither side holds it. It does nothing
// if that side does not hold it.
func releaseRing(w *atomic.Uint64, tag, side uint64) {
	for {
		v := w.Load()
		if v>>2 != tag || v&side == 0 {
			return
		}
		nv := v &^ side
		if nv&(holdInit|holdOwner) == 0 {
			nv = 0
		}
		if w.CompareAndSwap(v, nv) {
			return
		}
	}
}

// sweepRings frees the rings that peer li's channels still hold in s while
// the owner does not: li is gone and will never release them.
func sweepRings(s *segment, li int) {
	nctx := uint64(s.l.nctx)
	for i := 0; i < s.l.rings; i++ {
		w := s.ringHolder(i)
		v := w.Load()
		if tag := v >> 2; v != 0 && v&holdOwner == 0 && (tag-1)/nctx == uint64(li) {
			w.CompareAndSwap(v, 0)
		}
	}
}
