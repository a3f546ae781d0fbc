package shm

// ForgetHuge empties the table of blocks this process asked to collapse, so
// that a test sees its buffers asked for whatever earlier tests did.
func ForgetHuge() {
	for i := range hugeBlocks {
		hugeBlocks[i].Store(0)
	}
	hugeLast.Store(0)
}

// ClaimAll stores the claim a batched cross-memory attach call holds
// (accessAll) in the access slot of a's context ctx at the owner rank, and
// returns the function that clears it.
func ClaimAll(a *Adapter, owner, ctx int) (release func()) {
	pr := a.peers[a.localOf[owner]]
	slot := pr.seg.access(a.li, ctx)
	slot.Store(accessAll)
	return func() { slot.Store(0) }
}

// ClaimKey stores the claim of one key that a transfer holds (lookup) in
// the access slot of a's context ctx at the owner rank, and returns the
// function that clears it.
func ClaimKey(a *Adapter, owner, ctx int, key uint64) (release func()) {
	pr := a.peers[a.localOf[owner]]
	slot := pr.seg.access(a.li, ctx)
	slot.Store(key)
	return func() { slot.Store(0) }
}

// ReclaimAll ends the claim of every key that ClaimAll stored for a's
// context ctx at the owner rank and claims them again, as one batch's end
// and the next one's start (endAll, runBatch), with the slot never clear
// in between.
func ReclaimAll(a *Adapter, owner, ctx int) {
	pr := a.peers[a.localOf[owner]]
	pr.seg.accessEnds(a.li, ctx).Add(1)
	pr.seg.access(a.li, ctx).Store(accessAll)
}

// MirrorState returns the state word of the owner's mirror entry for key.
func MirrorState(a *Adapter, key uint64) uint64 {
	return a.self.mirrorEntry(int(key & keyIndexMask)).state.Load()
}

// RingHolders returns the holder words of the chunk rings of a's pool.
func RingHolders(a *Adapter) []uint64 {
	h := make([]uint64, a.self.l.rings)
	for i := range h {
		h[i] = a.self.ringHolder(i).Load()
	}
	return h
}

// HoldRing marks chunk ring i of owner's pool, as seen from a, held by an
// initiator that is not a, and returns the function that frees it.
func HoldRing(a *Adapter, owner, i int) (release func()) {
	w := a.peers[a.localOf[owner]].seg.ringHolder(i)
	w.Store(0x7777<<2 | holdInit)
	return func() { w.Store(0) }
}

// SetAttachHook sets the function Start calls before it maps the segment of
// each rank of the host.
func SetAttachHook(f func(rank, pid int)) { attachHook = f }

// CoopOwnerOnly makes initiators of batched cooperative copies wait for
// the owner to move the back halves, and returns the function that undoes
// it.
func CoopOwnerOnly() (restore func()) {
	coopSteal = false
	return func() { coopSteal = true }
}
