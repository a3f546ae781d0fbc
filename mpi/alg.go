package mpi

// The algorithms of the collectives, as schedule builders. Buffers are byte
// views; es is the element size, so that blocks split on element
// boundaries. Each builder appends the steps of rank c.rank.

// pof2 returns the largest power of two not above p.
func pof2(p int) int {
	k := 1
	for k*2 <= p {
		k *= 2
	}
	return k
}

func lowbit(v int) int { return v & -v }

// barrier: dissemination, ceil(log2 p) rounds of empty messages.
func (s *sched) barrier() {
	c := s.c
	p, r := c.size, c.rank
	for k := 1; k < p; k <<= 1 {
		s.send(nil, (r+k)%p)
		s.recv(nil, (r-k+p)%p)
		s.end()
	}
}

// barrierFlat: every rank checks in with rank 0, which releases them all
// once each has; two rounds, one message each way per rank.
func (s *sched) barrierFlat() {
	c := s.c
	p, r := c.size, c.rank
	if r != 0 {
		s.send(nil, 0)
		s.recv(nil, 0)
		s.end()
		return
	}
	for i := 1; i < p; i++ {
		s.recv(nil, i)
	}
	s.end()
	for i := 1; i < p; i++ {
		s.send(nil, i)
	}
	s.end()
}

// bcastBinomial: the root sends to the roots of ever smaller subtrees;
// log2 p rounds, whole messages.
func (s *sched) bcastBinomial(buf []byte, root int) {
	c := s.c
	p := c.size
	vr := (c.rank - root + p) % p
	mask := 1
	for mask < p {
		if vr&mask != 0 {
			s.recv(buf, (vr-mask+root)%p)
			s.end()
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			s.send(buf, (vr+mask+root)%p)
		}
	}
	s.end()
}

// bcastFlat: the root sends the whole message to every other rank itself,
// in rank order from the root; one round, and no rank's receive waits on
// another non-root being scheduled to forward it.
func (s *sched) bcastFlat(buf []byte, root int) {
	c := s.c
	p := c.size
	if c.rank != root {
		s.recv(buf, root)
		s.end()
		return
	}
	for i := 1; i < p; i++ {
		s.send(buf, (root+i)%p)
	}
	s.end()
}

// bcastChain: the message is cut into segments that flow along the chain
// of ranks from the root, each rank forwarding segment k-1 while it
// receives segment k.
func (s *sched) bcastChain(buf []byte, root, seg int) {
	c := s.c
	p := c.size
	n := len(buf)
	nseg := (n + seg - 1) / seg
	vr := (c.rank - root + p) % p
	segment := func(k int) []byte { return buf[k*seg : min((k+1)*seg, n)] }
	next := (vr + 1 + root) % p
	if vr == 0 {
		for k := 0; k < nseg; k++ {
			s.send(segment(k), next)
		}
		s.end()
		return
	}
	prev := (vr - 1 + root) % p
	last := vr == p-1
	for k := 0; k <= nseg; k++ {
		if k < nseg {
			s.recv(segment(k), prev)
		}
		if k > 0 && !last {
			s.send(segment(k-1), next)
		}
		s.end()
	}
}

// blocks splits count elements into nb blocks as even as can be; off(i)
// is the byte offset of block i, off(nb) the end.
type blocks struct{ q, rem, es int }

func splitBlocks(count, nb, es int) blocks { return blocks{count / nb, count % nb, es} }

func (b blocks) off(i int) int { return (i*b.q + min(i, b.rem)) * b.es }

// fold maps ranks onto the largest power of two below p, as MPICH does:
// of the first 2*rem ranks the even ones hand their data to the odd ones
// and sit out; newrank is the rank among the pof2 remaining, or -1.
type fold struct{ p, pof2, rem int }

func newFold(p int) fold {
	q := pof2(p)
	return fold{p, q, p - q}
}

func (f fold) newrank(r int) int {
	switch {
	case r >= 2*f.rem:
		return r - f.rem
	case r%2 == 1:
		return r / 2
	}
	return -1
}

func (f fold) real(nr int) int {
	if nr < f.rem {
		return 2*nr + 1
	}
	return nr + f.rem
}

// foldIn is the first step of fold: acc of an even rank among the first
// 2*rem goes to the next odd rank, which combines it (from a lower rank)
// into its own with t as scratch.
func (s *sched) foldIn(f fold, acc, t []byte) int {
	r := s.c.rank
	if r < 2*f.rem {
		if r%2 == 0 {
			s.send(acc, r+1)
		} else {
			s.recv(t[:len(acc)], r-1)
		}
		s.end()
		if r%2 == 1 {
			s.accLeft(acc, t[:len(acc)])
		}
	}
	return f.newrank(r)
}

// foldOut is the last step of fold: the odd ranks hand the result back.
func (s *sched) foldOut(f fold, acc []byte) {
	r := s.c.rank
	if r < 2*f.rem {
		if r%2 == 1 {
			s.send(acc, r-1)
		} else {
			s.recv(acc, r+1)
		}
		s.end()
	}
}

// allreduceRD: recursive doubling; acc holds this rank's input and ends
// with the result. log2 p rounds of whole messages, plus two for the ranks
// beyond a power of two. The order of operands is kept, so it serves
// non-commutative ops.
func (s *sched) allreduceRD(acc []byte) {
	f := newFold(s.c.size)
	t := s.tmp(len(acc))
	nr := s.foldIn(f, acc, t)
	if nr >= 0 {
		for mask := 1; mask < f.pof2; mask <<= 1 {
			peer := f.real(nr ^ mask)
			s.send(acc, peer)
			s.recv(t, peer)
			s.end()
			if peer < s.c.rank {
				s.accLeft(acc, t)
			} else {
				s.accRight(acc, t)
			}
		}
		s.end()
	}
	s.foldOut(f, acc)
}

// allreduceFlat: every rank sends acc to rank 0, which combines them in rank
// order and sends the result back; acc holds this rank's input and ends with
// the result.
func (s *sched) allreduceFlat(acc []byte) {
	c := s.c
	if c.rank != 0 {
		s.send(acc, 0)
		s.end()
		s.recv(acc, 0)
		s.end()
		return
	}
	t := s.tmp(len(acc))
	for i := 1; i < c.size; i++ {
		s.recv(t, i)
		s.end()
		s.accRight(acc, t)
	}
	s.end()
	for i := 1; i < c.size; i++ {
		s.send(acc, i)
	}
	s.end()
}

// reduceScatterHalving: recursive halving over the pof2 ranks of f, on
// blocks b of acc: at distance d each rank keeps the half of its range on
// its side, sends the other half to its partner and combines the half it
// receives. It ends with rank nr holding block nr of the result in acc; t
// is scratch as long as acc. If src is not nil, this rank's input is in src
// rather than acc: the first step sends from src and receives straight into
// acc, so that no copy of the input is made. The op must be commutative.
func (s *sched) reduceScatterHalving(f fold, nr int, b blocks, src, acc, t []byte) {
	lo, hi := 0, f.pof2
	for d := f.pof2 / 2; d >= 1; d /= 2 {
		peer := f.real(nr ^ d)
		mid := lo + (hi-lo)/2
		klo, khi, slo, shi := lo, mid, mid, hi
		if nr&d != 0 {
			klo, khi, slo, shi = mid, hi, lo, mid
		}
		keep := acc[b.off(klo):b.off(khi)]
		if src != nil {
			s.send(src[b.off(slo):b.off(shi)], peer)
			s.recv(keep, peer)
			s.end()
			s.accLeft(keep, src[b.off(klo):b.off(khi)])
			src = nil
		} else {
			s.send(acc[b.off(slo):b.off(shi)], peer)
			s.recv(t[b.off(klo):b.off(khi)], peer)
			s.end()
			s.accLeft(keep, t[b.off(klo):b.off(khi)])
		}
		lo, hi = klo, khi
	}
	s.end()
}

// allgatherDoubling is the reverse of reduceScatterHalving: from block nr,
// each rank doubles its range with its partner's at distances 1, 2, ...
func (s *sched) allgatherDoubling(f fold, nr int, b blocks, acc []byte) {
	lo, hi := nr, nr+1
	for d := 1; d < f.pof2; d <<= 1 {
		peer := f.real(nr ^ d)
		size := hi - lo
		plo, phi := hi, hi+size
		if nr&d != 0 {
			plo, phi = lo-size, lo
		}
		s.send(acc[b.off(lo):b.off(hi)], peer)
		s.recv(acc[b.off(plo):b.off(phi)], peer)
		s.end()
		lo, hi = min(lo, plo), max(hi, phi)
	}
}

// allreduceRSAG: Rabenseifner's algorithm, a reduce-scatter by recursive
// halving and an allgather by recursive doubling: each rank sends and
// receives about twice the message instead of log2 p times. Commutative ops
// only, count >= pof2. The input is in src, or in acc if src is nil; the
// result ends in acc. With src apart, the input is never copied: the ranks
// that fold hand src over, and the others start halving from it.
func (s *sched) allreduceRSAG(src, acc []byte, count, es int) {
	f := newFold(s.c.size)
	t := s.tmp(len(acc))
	nr := s.foldInFrom(f, src, acc)
	if nr >= 0 {
		if s.c.rank < 2*f.rem {
			src = nil // the folded input is in acc
		}
		b := splitBlocks(count, f.pof2, es)
		s.reduceScatterHalving(f, nr, b, src, acc, t)
		s.allgatherDoubling(f, nr, b, acc)
	}
	s.foldOut(f, acc)
}

// foldInFrom is foldIn for an input in src (or in acc if src is nil): the
// even ranks of the first 2*rem send it, the odd ones receive theirs into
// acc and combine their own src into it (the op is commutative).
func (s *sched) foldInFrom(f fold, src, acc []byte) int {
	if src == nil {
		return s.foldIn(f, acc, s.tmp(len(acc)))
	}
	r := s.c.rank
	if r < 2*f.rem {
		if r%2 == 0 {
			s.send(src, r+1)
		} else {
			s.recv(acc, r-1)
		}
		s.end()
		if r%2 == 1 {
			s.accLeft(acc, src)
		}
	}
	return f.newrank(r)
}

// reduceBinomial: children combine into parents along a binomial tree
// rooted at root, or, for a non-commutative op, at rank 0 (which keeps the
// operands in rank order) and then sent to root. acc holds this rank's
// input and, at root, ends with the result.
func (s *sched) reduceBinomial(acc []byte, root int) {
	c := s.c
	p := c.size
	tree := root
	if !s.op.commute {
		tree = 0
	}
	vr := (c.rank - tree + p) % p
	t := s.tmp(len(acc))
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			s.send(acc, (vr-mask+tree)%p)
			s.end()
			break
		}
		if src := vr | mask; src < p {
			s.recv(t, (src+tree)%p)
			s.end()
			s.accRight(acc, t)
		}
	}
	s.end()
	if tree != root {
		switch c.rank {
		case tree:
			s.send(acc, root)
		case root:
			s.recv(acc, tree)
		}
		s.end()
	}
}

// reduceRSG: a reduce-scatter by recursive halving, then every block sent
// straight to the root, which receives them into out. Commutative ops only,
// count >= pof2. The input is in src, or in acc if src is nil.
func (s *sched) reduceRSG(src, acc, out []byte, count, es, root int) {
	c := s.c
	f := newFold(c.size)
	t := s.tmp(len(acc))
	nr := s.foldInFrom(f, src, acc)
	b := splitBlocks(count, f.pof2, es)
	if nr >= 0 {
		if c.rank < 2*f.rem {
			src = nil
		}
		s.reduceScatterHalving(f, nr, b, src, acc, t)
	}
	if c.rank == root {
		for i := 0; i < f.pof2; i++ {
			blk := out[b.off(i):b.off(i+1)]
			if i == nr {
				s.copy(blk, acc[b.off(i):b.off(i+1)])
			} else {
				s.recv(blk, f.real(i))
			}
		}
	} else if nr >= 0 {
		s.send(acc[b.off(nr):b.off(nr+1)], root)
	}
	s.end()
}

// gatherBinomial: blocks of bs bytes flow up a binomial tree, each rank
// forwarding its subtree's blocks in one message.
func (s *sched) gatherBinomial(send, recv []byte, bs, root int) {
	c := s.c
	p := c.size
	vr := (c.rank - root + p) % p
	span := p - vr // blocks from vr to the end
	sub := span
	if vr != 0 {
		sub = min(lowbit(vr), span)
	}
	var t []byte
	if vr == 0 && root == 0 {
		t = recv[:p*bs]
	} else {
		t = s.tmp(sub * bs)
	}
	if send != nil {
		s.copy(t[:bs], send)
	}
	mask := 1
	for ; mask < p && vr&mask == 0; mask <<= 1 {
		if vr+mask < p {
			s.recv(t[mask*bs:min(2*mask, span)*bs], (vr+mask+root)%p)
		}
	}
	s.end()
	if vr != 0 {
		s.send(t[:sub*bs], (vr-mask+root)%p)
		s.end()
	} else if root != 0 {
		// t is in the order of vr; put it in rank order.
		s.copy(recv[root*bs:p*bs], t[:(p-root)*bs])
		s.copy(recv[:root*bs], t[(p-root)*bs:p*bs])
	}
}

// scatterBinomial: the reverse of gatherBinomial.
func (s *sched) scatterBinomial(send, recv []byte, bs, root int) {
	c := s.c
	p := c.size
	vr := (c.rank - root + p) % p
	span := p - vr
	var t []byte
	top := 1
	switch {
	case vr == 0 && root == 0:
		t = send[:p*bs]
		top = pof2(p) * 2
	case vr == 0:
		t = s.tmp(p * bs)
		s.copy(t[:(p-root)*bs], send[root*bs:p*bs])
		s.copy(t[(p-root)*bs:], send[:root*bs])
		top = pof2(p) * 2
	default:
		top = lowbit(vr)
		sub := min(top, span)
		t = s.tmp(sub * bs)
		s.recv(t, (vr-top+root)%p)
		s.end()
	}
	for mask := top / 2; mask > 0; mask >>= 1 {
		if vr+mask < p {
			s.send(t[mask*bs:min(2*mask, span)*bs], (vr+mask+root)%p)
		}
	}
	if recv != nil {
		s.copy(recv[:bs], t[:bs])
	}
	s.end()
}

// allgatherBruck: in round k each rank sends the blocks it has to the rank
// 2^k below and receives as many from the rank 2^k above; ceil(log2 p)
// rounds for any p, then one rotation.
func (s *sched) allgatherBruck(recv []byte, bs int) {
	c := s.c
	p, r := c.size, c.rank
	t := s.tmp(p * bs)
	s.copy(t[:bs], recv[r*bs:(r+1)*bs])
	for k := 1; k < p; k <<= 1 {
		cnt := min(k, p-k)
		s.send(t[:cnt*bs], (r-k+p)%p)
		s.recv(t[k*bs:(k+cnt)*bs], (r+k)%p)
		s.end()
	}
	// t holds the blocks of ranks r, r+1, ...
	s.copy(recv[r*bs:p*bs], t[:(p-r)*bs])
	s.copy(recv[:r*bs], t[(p-r)*bs:p*bs])
}

// allgatherRing: p-1 rounds, each rank passing the block it received last
// to its right neighbour; blocks may differ in size (off gives them).
//
// own, if not nil, is this rank's block, not yet in recv: the first round
// sends it from own and copies it into recv once the exchange is posted, so
// that the copy overlaps the transfers.
func (s *sched) allgatherRing(recv, own []byte, off func(int) (int, int)) {
	c := s.c
	p, r := c.size, c.rank
	right, left := (r+1)%p, (r-1+p)%p
	for i := 0; i < p-1; i++ {
		sb, rb := (r-i+p)%p, (r-i-1+p)%p
		slo, shi := off(sb)
		rlo, rhi := off(rb)
		if i == 0 && own != nil {
			s.send(own, right)
		} else {
			s.send(recv[slo:shi], right)
		}
		s.recv(recv[rlo:rhi], left)
		if i == 0 && own != nil {
			s.copy(recv[slo:shi], own)
		}
		s.end()
	}
}

// alltoall: every rank exchanges a block with every other; with pairwise
// set, one partner a round ((r+i) to send, (r-i) to receive), else all at
// once. soff and roff give each peer's block in send and recv.
func (s *sched) alltoall(send, recv []byte, soff, roff func(int) (int, int), pairwise bool) {
	c := s.c
	p, r := c.size, c.rank
	slo, shi := soff(r)
	rlo, rhi := roff(r)
	s.copy(recv[rlo:rhi], send[slo:shi])
	for i := 1; i < p; i++ {
		dst, src := (r+i)%p, (r-i+p)%p
		rlo, rhi := roff(src)
		slo, shi := soff(dst)
		s.recv(recv[rlo:rhi], src)
		s.send(send[slo:shi], dst)
		if pairwise {
			s.end()
		}
	}
	s.end()
}

// reduceScatterPairwise: in round i each rank sends the block of rank r+i
// to it and combines the block it receives from rank r-i into its own.
// Commutative ops only. off gives each rank's block of send.
func (s *sched) reduceScatterPairwise(send, recv []byte, off func(int) (int, int)) {
	c := s.c
	p, r := c.size, c.rank
	lo, hi := off(r)
	n := hi - lo
	s.copy(recv[:n], send[lo:hi])
	t := s.tmp(n)
	for i := 1; i < p; i++ {
		dst, src := (r+i)%p, (r-i+p)%p
		dlo, dhi := off(dst)
		s.send(send[dlo:dhi], dst)
		s.recv(t, src)
		s.end()
		s.accLeft(recv[:n], t)
	}
	s.end()
}

// scan: recursive doubling after MPICH. partial holds the combination of
// the ranks this rank has heard from, including itself; acc the prefix
// result. With exclusive set, acc gets the combination of lower ranks only
// (undefined at rank 0). partial and acc both start as this rank's input,
// except that for exclusive acc's content is not read.
func (s *sched) scan(acc, partial []byte, exclusive bool) {
	c := s.c
	p, r := c.size, c.rank
	t := s.tmp(len(acc))
	first := true
	for mask := 1; mask < p; mask <<= 1 {
		dst := r ^ mask
		if dst >= p {
			continue
		}
		s.send(partial, dst)
		s.recv(t, dst)
		s.end()
		if dst < r {
			if exclusive && first {
				s.copy(acc, t)
			} else {
				s.accLeft(acc, t)
			}
			first = false
			s.accLeft(partial, t)
		} else {
			s.accRight(partial, t)
		}
	}
	s.end()
}
