package shm

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/amigo-hpc/amigo/internal/nap"
	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/transport"
)

// mirrorEntry publishes one entry of the owner's region table, so that a
// peer can resolve a key to memory without the owner's CPU: to a place in
// one of the owner's shared segments (seg, segOff), or to an address in the
// owner's process for cross-memory attach (addr).
//
// Memory ordering: a seqlock whose readers announce themselves. The owner
// changes the other words of an entry only while state is zero, and makes
// state zero only in Deregistered, which then waits until no access slot of
// a live peer holds the old key. A peer context that accesses the region
// stores the key into its access slot in the owner's segment, then loads
// state, and reads the other words only if state equals the key; it stores
// zero into its slot when its piece of the transfer is done. Both sides store
// their word before they load the other's (sequentially consistent atomics),
// so either the peer sees state zero and touches nothing, or the owner sees
// the slot and waits. The slot is held for one piece (a bounded copy that
// needs no one else's progress), never across Progress calls, so the
// owner's wait is short. DeregisteredAll is Deregistered for several
// keys at once: release stores of zero into each state, then one full
// fence, then the loads; so either a peer's load of a state follows
// that fence and sees zero, or its store into its slot precedes it and
// the owner sees the slot, as for one key.
//
// An atomic or a copy performed in place (lookupAtomic, claimInPlace)
// claims its slot with a release store (order.Store64), which may pass
// the load of state: it acts only on regions in a shared allocation
// (seg != 0), and the owner, before it waits for the slots of such a
// region, issues order.BarrierPeers, which makes every peer's claim
// stored before it visible (either the peer's load of state follows the
// barrier and sees zero, or its claim precedes it and the owner sees the
// slot). The barrier interrupts every processor of the host (a
// membarrier): 15-30 us on a 2-core virtual machine, which a Send from a
// shared buffer, registered and deregistered per message, paid each time
// (a window of 32 KiB messages moved 2.4 GB/s, against 17 from Go memory).
// So the owner issues it only for a key that was claimed in place:
// inPlace holds the last key a peer claimed so, and the peer makes it hold
// its key (a sequentially consistent store when it does not yet) after
// it loaded state equal to its key and before it loads state again, and
// acts only if that second load finds its key too (claimInPlace). The
// owner stores zero into state, then loads inPlace, both sequentially
// consistent: if inPlace does not hold the key, every peer's store or
// load of inPlace with that key came after the owner's load, so that
// peer's second load of state comes after the owner's store of zero and
// the peer does not act. A peer that finds state holding another key
// stores nothing into inPlace, so a stale claim cannot overwrite the key
// of a live one.
type mirrorEntry struct {
	state  atomic.Uint64 // the key, or 0
	addr   atomic.Uint64 // address of the region in the owner
	len    atomic.Uint64 // its length
	seg    atomic.Uint64 // alloc index + 1 of the segment holding it, or 0
	segOff atomic.Uint64 // its offset in that segment
	perm   atomic.Uint64 // its transport.Perm
	// inPlace is the last key claimed in place by a peer (see above).
	inPlace atomic.Uint64
	_       [8]byte
}

// Registered publishes a registration (transport.Mirror).
func (a *Adapter) Registered(index int, key transport.Key, mem []byte, perm transport.Perm) {
	if index >= a.self.l.mirror {
		return
	}
	e := a.self.mirrorEntry(index)
	if int64(index) >= a.mirrorHigh.Load() {
		a.mirrorHigh.Store(int64(index) + 1)
	}
	seg, off := a.allocOf(mem)
	if seg == 0 && a.peerCMA() {
		a.prepareHuge(mem, regionOverlap(len(mem)))
	}
	e.addr.Store(addrOf(mem))
	e.len.Store(uint64(len(mem)))
	e.seg.Store(uint64(seg))
	e.segOff.Store(off)
	e.perm.Store(uint64(perm))
	e.state.Store(uint64(key))
}

// Deregistered withdraws a registration and waits until no live peer
// accesses it (transport.Mirror).
func (a *Adapter) Deregistered(index int, key transport.Key) {
	if index >= a.self.l.mirror {
		return
	}
	e := a.self.mirrorEntry(index)
	e.state.Store(0)
	if e.seg.Load() != 0 && e.inPlace.Load() == uint64(key) {
		order.BarrierPeers() // see mirrorEntry
		a.stats.barriers.Add(1)
	}
	a.waitAccess(uint64(key))
}

var _ transport.MirrorBatch = (*Adapter)(nil)

// DeregisteredAll is Deregistered for every key of keys at once
// (transport.MirrorBatch): it stores zero into each state with a release
// store, and then one fence
// orders all those stores before the loads of inPlace and of the access
// slots, as Deregistered's sequentially consistent store does for one
// key. The processor-wide barrier of a region claimed in place is issued
// once if any of them needs it. (Asking for every entry's line for
// writing first, PREFETCHW, moved windows of 16-128 KiB 0.98-1.01x as
// much: the stores' trips overlap without it.)
func (a *Adapter) DeregisteredAll(keys []transport.Key) {
	n := 0
	for _, key := range keys {
		if idx := int(uint64(key) & keyIndexMask); key != 0 && idx < a.self.l.mirror {
			order.Store64(&a.self.mirrorEntry(idx).state, 0)
			n++
		}
	}
	if n == 0 {
		return
	}
	a.fence.Add(1) // a full fence: the stores above before the loads below
	barrier := false
	for _, key := range keys {
		if idx := int(uint64(key) & keyIndexMask); key != 0 && idx < a.self.l.mirror {
			e := a.self.mirrorEntry(idx)
			barrier = barrier || e.seg.Load() != 0 && e.inPlace.Load() == uint64(key)
		}
	}
	if barrier {
		order.BarrierPeers() // see mirrorEntry
		a.stats.barriers.Add(1)
	}
	for _, key := range keys {
		if idx := int(uint64(key) & keyIndexMask); key != 0 && idx < a.self.l.mirror {
			a.waitAccess(uint64(key))
		}
	}
}

// waitAccess waits until no access slot of a live peer holds key.
//
// A peer's claim of every key (accessAll, a batch: batch.go) covers key
// only if the batch loaded key's state before Deregistered stored zero
// into it, that is, only a batch under way when the slot is first
// loaded here: one that claims the slot later finds state zero and
// leaves key out. So for accessAll the wait ends when that batch ends,
// which the slot's word accessEnds counts (endAll) before the slot is
// cleared: a window of messages fetched in batches claims the slot
// again microseconds after it clears it, and an owner waiting to find
// it clear waited for a gap between batches (a window of 256 KiB
// messages whose sender deregisters each buffer as its message
// completes moved 9-28 GB/s so, its sender asleep in the wait). The
// count is loaded after the slot: if the batch seen ended in between,
// the wait lasts for one more batch, which is bounded as well.
func (a *Adapter) waitAccess(key uint64) {
	for li := range a.local {
		if li == a.li {
			continue
		}
		pr := a.peers[li]
		for d := 0; d < a.self.l.nctx; d++ {
			slot, ends := a.self.access(li, d), a.self.accessEnds(li, d)
			v := slot.Load()
			if v != key && v != accessAll {
				continue
			}
			n := ends.Load()
			for spins := 0; ; spins++ {
				if w := slot.Load(); w != v || v == accessAll && ends.Load() != n {
					break
				}
				if pr == nil || pr.gone() {
					break
				}
				switch {
				case spins < 100:
				case spins < 1000:
					runtime.Gosched()
				default:
					nap.Nap(20 * time.Microsecond)
				}
			}
		}
	}
}

// region is what a peer learned from a mirror entry.
type region struct {
	addr, len   uint64
	seg, segOff uint64
	perm        transport.Perm
}

// lookup announces an access of key by this rank's context d to the owner
// pr, and reads the mirror entry. ok is false when the mirror does not hold
// key (held says whether it could: a key whose index the mirror covers is
// then unknown to the owner). On ok the caller must call release when its
// piece is done.
func (a *Adapter) lookup(pr *peer, d int, key transport.Key) (r region, ok, held bool) {
	idx := int(uint64(key) & keyIndexMask)
	if idx >= pr.seg.l.mirror {
		return region{}, false, false
	}
	slot := pr.seg.access(a.li, d)
	slot.Store(uint64(key))
	e := pr.seg.mirrorEntry(idx)
	if e.state.Load() != uint64(key) || key == 0 {
		slot.Store(0)
		return region{}, false, true
	}
	r = region{addr: e.addr.Load(), len: e.len.Load(), seg: e.seg.Load(), segOff: e.segOff.Load(), perm: transport.Perm(e.perm.Load())}
	return r, true, true
}

func (a *Adapter) release(pr *peer, d int) { pr.seg.access(a.li, d).Store(0) }

// lookupAtomic is lookup for an atomic performed in place: its claim is a
// release store, which the owner orders with order.BarrierPeers (see
// mirrorEntry). The caller acts on the region only if it is in a shared
// allocation, and ends the claim with a release store of zero.
func (a *Adapter) lookupAtomic(pr *peer, slot *atomic.Uint64, key transport.Key) (r region, ok bool) {
	idx := int(uint64(key) & keyIndexMask)
	if idx >= pr.seg.l.mirror || key == 0 {
		return region{}, false
	}
	order.Store64(slot, uint64(key))
	e := pr.seg.mirrorEntry(idx)
	if !claimedInPlace(e, key) {
		order.Store64(slot, 0)
		return region{}, false
	}
	r = region{addr: e.addr.Load(), len: e.len.Load(), seg: e.seg.Load(), segOff: e.segOff.Load(), perm: transport.Perm(e.perm.Load())}
	return r, true
}

// claimedInPlace completes a claim in place of key on e, whose access slot
// the caller stored: it reports whether e holds key, having made inPlace
// hold it too (see mirrorEntry).
func claimedInPlace(e *mirrorEntry, key transport.Key) bool {
	if e.state.Load() != uint64(key) {
		return false
	}
	if e.inPlace.Load() != uint64(key) {
		e.inPlace.Store(uint64(key))
	}
	return e.state.Load() == uint64(key)
}

// keyIndexMask extracts the table index of a key (transport.Key's layout:
// the low 24 bits index the owner's table).
const keyIndexMask = 1<<24 - 1

// clearMirror withdraws every entry, waiting for accessors, when the
// adapter closes.
func (a *Adapter) clearMirror() {
	order.BarrierPeers() // see mirrorEntry
	for i := 0; i < int(a.mirrorHigh.Load()); i++ {
		e := a.self.mirrorEntry(i)
		if k := e.state.Load(); k != 0 {
			e.state.Store(0)
			a.waitAccess(k)
		}
	}
}
