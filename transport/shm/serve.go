package shm

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/transport"
)

// server is the owner's side of the channels in its segment: it takes part
// in pipelined copies of its memory (which need it) and helps with
// cooperative ones (which merely go faster with it). Any goroutine of the
// owner may serve, one at a time: the contexts' Progress when they advance,
// and the engine goroutine when an initiator finds nobody served it.
type server struct {
	a      *Adapter
	lock   atomic.Uint32
	active atomic.Int32 // requests in progress
	st     []serving    // by channel, li*nctx+d; under lock
	act    []int        // channels with a request in progress; under lock
	cma    cmaIO
	// bl, br and bacc hold the vectors and accesses of one batched
	// cooperative copy (stepBatch); under lock.
	bl   [batchMax]unix.Iovec
	br   [batchMax]unix.RemoteIovec
	bacc [batchMax]transport.Access
	// servedAtomic says an atomic was served since the engine last looked
	// (it then lingers, see engine).
	servedAtomic atomic.Bool
}

// serving is the owner's copy of a request it took. It copies what it read
// from the channel once, validated, and never re-reads it.
type serving struct {
	seen   uint64 // last request id looked at
	id     uint64
	mode   uint64
	kind   transport.RDMAKind
	key    transport.Key
	off, n uint64
	base   uint64
	pos    uint64
	piece  uint64
	pieces uint64
	aop    uint64
	arg    uint64
	cmp    uint64
	lseg   uint64
	loff   uint64
	laddr  uint64
	li, d  int
	ch     *channel
	ring   uint64 // pipelined: chunk ring of the pool
	holds  bool   // pipelined: the owner holds that ring (pool.go)
	chunks []byte
	active bool
}

func (s *server) init(a *Adapter) {
	s.a = a
	s.st = make([]serving, len(a.local)*a.self.l.nctx)
}

// pending reports whether there is anything to serve: a request posted
// since the last look, or one in progress. It is one load on the fast path.
func (s *server) pending() bool {
	return s.a.self.engineWork().Load() != 0 || s.active.Load() > 0
}

// serve takes new requests and advances those in progress. It returns the
// number of pieces moved and requests answered.
func (s *server) serve() int {
	if !s.lock.CompareAndSwap(0, 1) {
		return 0
	}
	defer s.lock.Store(0)
	raceAcquire()
	defer raceRelease()
	n := 0
	if w := s.a.self.engineWork(); w.Load() != 0 {
		w.Store(0)
		n += s.scan()
	}
	for i := 0; i < len(s.act); {
		st := &s.st[s.act[i]]
		k, fin := s.step(st)
		n += k
		if fin {
			s.drop(st)
			st.active = false
			s.act[i] = s.act[len(s.act)-1]
			s.act = s.act[:len(s.act)-1]
			s.active.Add(-1)
			continue
		}
		i++
	}
	return n
}

// scan looks at every channel for a new request.
func (s *server) scan() int {
	a := s.a
	nctx := a.self.l.nctx
	n := 0
	for li := range a.local {
		pr := a.peers[li]
		if li == a.li || pr == nil || pr.gone() {
			continue
		}
		for d := 0; d < nctx; d++ {
			ch := a.self.channel(li, d)
			seq := ch.seq.Load()
			st := &s.st[li*nctx+d]
			if seq == st.seen {
				continue
			}
			var r serving
			r.mode = ch.mode.Load()
			r.key = transport.Key(ch.key.Load())
			r.off = ch.off.Load()
			r.n = ch.n.Load()
			r.base = ch.base.Load()
			r.piece = ch.piece.Load()
			r.lseg = ch.lseg.Load()
			r.loff = ch.loff.Load()
			r.laddr = ch.laddr.Load()
			r.ring = ch.ring.Load()
			r.aop = ch.aop.Load()
			r.arg = ch.arg.Load()
			r.cmp = ch.cmp.Load()
			if ch.seq.Load() != seq {
				// Rewritten while we read: look again next time.
				a.self.engineWork().Store(1)
				continue
			}
			st.seen = seq
			r.seen, r.id, r.li, r.d, r.ch = seq, seq, li, d, ch
			r.kind = transport.RDMAKind(r.mode >> 8)
			r.mode &= 0xff
			if !s.accept(&r, pr) {
				continue
			}
			n++
			r.active = true
			wasActive := st.active
			if wasActive {
				// The initiator moved on from its previous request.
				s.drop(st)
			}
			*st = r
			if !wasActive {
				s.act = append(s.act, li*nctx+d)
				s.active.Add(1)
			}
		}
	}
	return n
}

// drop gives back the chunk ring r held; with its initiator gone, also the
// rings that initiator will never give back.
func (s *server) drop(r *serving) {
	if !r.holds {
		return
	}
	r.holds = false
	r.chunks = nil
	releaseRing(s.a.self.ringHolder(int(r.ring)), ringTag(r.li, r.d, s.a.self.l.nctx), holdOwner)
	if pr := s.a.peers[r.li]; pr == nil || pr.gone() {
		sweepRings(s.a.self, r.li)
	}
}

// accept validates a request read from a peer's channel; for a pipelined
// copy it checks the region and answers. It reports whether the request is
// now in progress.
func (s *server) accept(r *serving, pr *peer) bool {
	ch := r.ch
	refuse := func(code uint64, rlen uint64) bool {
		if r.mode == reqPipe || r.mode == reqAtomic {
			ch.rlen.Store(rlen)
			ch.status.Store(r.id<<8 | code)
		}
		return false
	}
	if r.mode == reqAtomic {
		s.atomic(r)
		return false
	}
	if (r.kind != transport.Get && r.kind != transport.Put) || r.n == 0 || r.n > maxSegment {
		return refuse(stBadRequest, 0)
	}
	switch r.mode {
	case reqPipe:
		_, acc, err := s.a.regions.AcquireFor(r.key, r.off, r.n, transport.PermFor(r.kind))
		if err != nil {
			code, rlen := accessCode(err)
			return refuse(code, rlen)
		}
		acc.Release()
		if !takeRing(s.a.self, r.ring, ringTag(r.li, r.d, s.a.self.l.nctx)) {
			return refuse(stBadRequest, 0)
		}
		r.holds = true
		r.chunks = s.a.self.chunkRing(int(r.ring))
		if r.kind == transport.Get {
			ch.wr.Store(r.base)
		} else {
			ch.rd.Store(r.base)
		}
		ch.ack.Store(r.id)
		return true
	case reqHelp:
		if r.piece < pageSize || r.piece > r.n+pageSize {
			return false
		}
		r.pieces = (r.n + r.piece - 1) / r.piece
		if r.pieces > maxPieces {
			return false
		}
		// Help only where we can reach the initiator's buffer.
		if r.lseg != 0 {
			mem, err := pr.allocMem(int(r.lseg) - 1)
			if err != nil || r.loff > uint64(len(mem)) || r.n > uint64(len(mem))-r.loff {
				return false
			}
			return true
		}
		return pr.cma
	case reqBatch:
		// piece: the entries of the batch table.
		return r.piece >= 1 && r.piece <= batchMax && pr.cma
	}
	return refuse(stBadRequest, 0)
}

// atomic performs an atomic request on the owner's memory and answers it.
func (s *server) atomic(r *serving) {
	ch := r.ch
	op, width := transport.AtomicOp(r.aop&0xff), int(r.aop>>8&0xff)
	if r.kind != transport.Atomic || r.n != uint64(width) || transport.CheckAtomic(op, width) != nil {
		ch.status.Store(r.id<<8 | stBadRequest)
		return
	}
	mem, acc, err := s.a.regions.AcquireFor(r.key, r.off, r.n, transport.PermAtomic)
	if err != nil {
		code, rlen := accessCode(err)
		ch.rlen.Store(rlen)
		ch.status.Store(r.id<<8 | code)
		return
	}
	old, err := transport.ApplyAtomic(mem, op, width, r.arg, r.cmp)
	acc.Release()
	if err != nil {
		ch.status.Store(r.id<<8 | stMisaligned)
		return
	}
	s.a.stats.atomics.Add(1)
	ch.result.Store(old)
	ch.ack.Store(r.id)
	s.servedAtomic.Store(true)
}

func accessCode(err error) (code, rlen uint64) {
	var ae *transport.AccessError
	if errors.As(err, &ae) {
		switch {
		case errors.Is(err, transport.ErrPermission):
			return stPerm, 0
		case errors.Is(err, transport.ErrBounds):
			return stBounds, ae.RegionLen
		case errors.Is(err, transport.ErrClosed):
			return stClosed, 0
		}
	}
	return stBadKey, 0
}

// step advances one request; it returns the pieces moved and whether the
// request is over on the owner's side.
func (s *server) step(r *serving) (int, bool) {
	pr := s.a.peers[r.li]
	if pr == nil || pr.gone() || r.ch.seq.Load() != r.id {
		return 0, true
	}
	switch r.mode {
	case reqHelp:
		return s.stepHelp(r, pr)
	case reqBatch:
		return s.stepBatch(r, pr)
	}
	return s.stepPipe(r, pr)
}

func (s *server) stepHelp(r *serving, pr *peer) (int, bool) {
	ch := r.ch
	n := 0
	for budget := s.a.opts.Piece; budget > 0; {
		w := ch.claim.Load()
		id, front, back := claimParts(w)
		if id != r.id || front >= back || back > r.pieces {
			return n, true
		}
		k := back - 1
		if !ch.claim.CompareAndSwap(w, claimWord(id, front, k)) {
			continue
		}
		start, end := k*r.piece, min(r.n, (k+1)*r.piece)
		if s.helpPiece(r, pr, start, end) != nil {
			ch.redo.Or(1 << k)
		} else {
			s.a.stats.helped.Add(end - start)
		}
		raceRelease()
		ch.done.Or(1 << k)
		n++
		budget -= int(end - start)
	}
	transport.RingShared(pr.seg.portBell(r.d))
	return n, false
}

// helpPiece moves bytes [start, end) of a cooperative copy on the owner's
// side: between its own region and the initiator's buffer, in the
// initiator's segment or by CMA.
func (s *server) helpPiece(r *serving, pr *peer, start, end uint64) error {
	mem, acc, err := s.a.regions.AcquireFor(r.key, r.off+start, end-start, transport.PermFor(r.kind))
	if err != nil {
		return err
	}
	defer acc.Release()
	if r.lseg != 0 {
		seg, err := pr.allocMem(int(r.lseg) - 1)
		if err != nil {
			return err
		}
		local := seg[r.loff+start : r.loff+end]
		if r.kind == transport.Get {
			copy(local, mem)
		} else {
			copy(mem, local)
		}
		return nil
	}
	if r.kind == transport.Get {
		return s.cma.write(pr.pub.pid, mem, r.laddr+start)
	}
	return s.cma.read(pr.pub.pid, mem, r.laddr+start)
}

func (s *server) fail(r *serving, code uint64) (int, bool) {
	r.ch.status.Store(r.id<<8 | code)
	return 0, true
}

// stepPipe produces into (Get) or consumes from (Put) the chunk ring.
func (s *server) stepPipe(r *serving, pr *peer) (int, bool) {
	ch := r.ch
	capa := uint64(len(r.chunks))
	chunk := uint64(s.a.self.l.chunk)
	budget := uint64(s.a.opts.Piece)
	moved := 0
	at := r.base + r.pos
	if r.kind == transport.Get {
		rd := ch.rd.Load()
		if rd > at || at-rd > capa || rd < r.base {
			return s.fail(r, stBadRequest)
		}
		for space := capa - (at - rd); space > 0 && budget > 0 && r.pos < r.n; {
			w := at % capa
			c := min(space, capa-w, chunk, budget, r.n-r.pos)
			mem, acc, err := s.a.regions.AcquireFor(r.key, r.off+r.pos, c, transport.PermFor(r.kind))
			if err != nil {
				code, _ := accessCode(err)
				return s.fail(r, code)
			}
			copy(r.chunks[w:w+c], mem)
			acc.Release()
			raceRelease()
			r.pos += c
			at += c
			space -= c
			budget -= c
			ch.wr.Store(at)
			moved++
		}
	} else {
		wr := ch.wr.Load()
		if wr < at || wr-at > capa || wr-at > r.n-r.pos {
			return s.fail(r, stBadRequest)
		}
		for avail := wr - at; avail > 0 && budget > 0; {
			w := at % capa
			c := min(avail, capa-w, chunk, budget)
			mem, acc, err := s.a.regions.AcquireFor(r.key, r.off+r.pos, c, transport.PermFor(r.kind))
			if err != nil {
				code, _ := accessCode(err)
				return s.fail(r, code)
			}
			copy(mem, r.chunks[w:w+c])
			acc.Release()
			raceRelease()
			r.pos += c
			at += c
			avail -= c
			budget -= c
			ch.rd.Store(at)
			moved++
		}
	}
	if moved > 0 {
		transport.RingShared(pr.seg.portBell(r.d))
	}
	return moved, r.pos == r.n
}
