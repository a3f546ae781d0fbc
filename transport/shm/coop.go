package shm

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/transport"
)

// Batched cooperative copy.
//
// A window of mid-size messages (tens of kilobytes) is fetched in batches
// (batch.go), one process_vm_readv of up to batchBytes each; the receiver's
// core then copies every byte of the window while the sender's waits for
// the acknowledgements. In a batched cooperative copy the initiator splits
// each descriptor of a batch at a page boundary (the owner's part, the
// back, a share that follows the two sides' pace: link.share), names the back parts in one request on
// its channel to the owner (reqBatch, the table of channel.tab), and moves
// the fronts with one call while the owner moves the backs with one call
// of its own: a process_vm_writev into the initiator's buffers for a batch
// of GETs, a process_vm_readv out of them for PUTs. The handshake is one
// per batch, not one per message, and each side writes the same part of a
// receive buffer that a window reuses. (The channel's words and tab say
// "halves" for the two parts.)
//
// The back halves are piece 1 of a cooperative copy of two pieces under
// the channel's claim word (channel.go); the initiator claims piece 0 in
// the request. When it is done with the fronts, it claims piece 1 too if
// the owner has not (the owner is not advancing, or cannot reach it by
// cross-memory attach), so a batch never waits for an owner that does not
// help; once the owner has claimed it, the initiator waits for the owner's
// done bit, set after one bounded call. The descriptors complete only once
// both pieces are done. A batch whose either call failed or fell short,
// or whose owner gave its piece back (redo), or whose link failed, is not
// completed as a batch: its descriptors go the usual way one by one, which
// moves the same bytes again and reports each one's error (runBatch).
//
// The initiator's accessAll claim on its access slot at the owner (see
// runBatch) lasts from the gathering of the batch to its end: it covers
// the initiator's call on the fronts, and its call on the backs when it
// moves them itself. While the owner moves the backs, the claim waits for
// the owner's one call, which needs no one's progress.

// coopMin is the least bytes of back parts a batch needs to be split
// with the owner: a request, a wait for the owner's done bit and a second
// call are not worth a few pages. It was not measured; the batches of the
// bandwidth windows, megabytes each from 32 KiB messages up, are well above
// it.
const coopMin = 64 << 10

// coopSteal lets an initiator move the back halves itself when the owner
// has not claimed them by the time the fronts are moved; tests turn it
// off to make the owner's side run.
var coopSteal = true

// coopSplitMin is the smallest descriptor a batched cooperative copy
// splits (its back part is a page at least); smaller ones go whole with
// the fronts. Every larger one a batch gathers (up to batchBelow) is
// split: windows of 128 KiB messages moved 0.82 times as much split as
// fetched by the initiator alone in one call (medians of 7 interleaved
// rounds) while the owner wrote its parts into small pages (see
// startCoop), 1.28 times as much (23.5 -> 30.1 GB/s, 10 rounds) since it
// writes into a huge page; windows of 64 KiB messages 1.04-1.43 times.
// Descriptors of 16 KiB go whole: windows of 16 KiB messages, announced
// and fetched, moved 1.05 times as much fetched by the initiator alone
// (AMIGO_SHM_HELP=off, 8 interleaved rounds, an AMD 2-core host whose
// cores passed lines slowly; 1.07 in an earlier series), the owner's
// page of each costing more than it saved.
const coopSplitMin = 5 * pageSize

// The owner's share of each descriptor, the back part, whole pages of
// coopBack, is counted in sixteenths per link (link.share), from
// shareStart, between shareMin and shareMax, and moved by one after each
// batch toward where both sides finish together (judgeShare): up when
// the owner had moved its backs by the time the initiator had moved its
// fronts, down when it had not, or had not begun.
//
// # Why
//
// No fixed share fits every host, size and load. The owner's
// process_vm_writev of a batch of back halves once took 2-3 times as
// long as the initiator's process_vm_readv of the fronts in a window of
// 128 KiB messages (56 us against 20 for 480 KiB), which then waited for
// it; with a quarter an owner that sends too claimed four batches in five
// and windows of 128 KiB moved 24-30 GB/s against 22-28 by the initiator
// alone, halves 13-25. Since the sender's own work per message shrank
// (its acknowledgements in one packet, deregistered together), fixed
// shares on the AMD host's slow state, against a quarter: 3/8 moved
// 1.07 / 1.10 / 1.09x at 32 / 64 / 128 KiB, a third 1.07 / 1.08 / 1.07x,
// halves 1.13 / 1.02 / 0.83x (4 interleaved rounds). The owner is mostly
// done first even with halves, yet halves move less from 128 KiB (its
// writes into the initiator's pages slow the initiator's own call), so
// the share stops at 3/8: moved between an eighth and 3/8, windows of 32
// / 64 / 128 / 256 KiB moved 1.09 / 1.10 / 1.10 / 1.12x a fixed quarter,
// and up to halves 1.06 / 1.04 / 0.95 / 0.91x (6 interleaved rounds, the
// slow state).
const (
	shareStart = 4 // a quarter
	shareMin   = 2
	shareMax   = 6
)

// coopBack returns the bytes of a descriptor of n bytes, at least
// coopSplitMin, that the owner is offered at share sixteenths: whole
// pages, at least one (an eighth of 12 KiB rounds to none).
func coopBack(n int, share uint8) int {
	return max((n*int(share)/16+pageSize/2)&^(pageSize-1), pageSize)
}

// judgeShare moves l's owner share by a sixteenth after a batch whose
// fronts this side has just moved, from where the owner stands on the
// back halves (ch's claim word and done bits): up when it has moved
// them, down when it is still moving them or has not claimed them.
// Owner goroutine of the port only; the loads are only a hint.
func (l *link) judgeShare(ch *channel) {
	_, _, back := claimParts(ch.claim.Load())
	if back != 2 && ch.done.Load()&2 != 0 {
		if l.share < shareMax {
			l.share++
		}
	} else if l.share > shareMin {
		l.share--
	}
}

// errBatchEntry is the owner's refusal of an entry of a batch table that
// names no bytes.
var errBatchEntry = errors.New("empty entry in a batch")

// startCoop offers the owner the back halves of the k descriptors from the
// FIFO position h, gathered in p.batch.l and p.batch.r (total bytes), then
// moves their front halves. It reports false, having changed nothing, when
// the batch is not worth splitting or the channel to the owner is in use.
func (p *port) startCoop(l *link, h uint64, k, total int) bool {
	a, pr := p.a, l.pr
	if a.opts.HelpOff || p.chanBy[pr.li] != nil || total < 2*coopMin {
		return false
	}
	back := 0
	for i := 0; i < k; i++ {
		if n := int(p.batch.l[i].Len); n >= coopSplitMin {
			back += coopBack(n, l.share)
		}
	}
	if back < coopMin {
		return false
	}
	q := l.tl.RDMA
	ch := pr.seg.channel(a.li, p.ctx)
	nb := 0
	for i := 0; i < k; i++ {
		n := int(p.batch.l[i].Len)
		if n < coopSplitMin {
			continue
		}
		half := coopBack(n, l.share)
		f := n - half
		op := q.At(h + uint64(i))
		// The owner pins the pages it writes into one by one, a quarter
		// of the cost on a huge page (bench/cma/probe.sh: 25.9 against
		// 13.8 GB/s for pieces of 16 KiB): back the block under the
		// receive buffer with one first, as the owner does for the
		// regions it registers (hugeRegionOverlap), once per block.
		a.prepareHuge(op.Local[f:], pageSize)
		p.batch.l[i].SetLen(f)
		p.batch.r[i].Len = f
		p.batch.bl[nb].Base = &op.Local[f]
		p.batch.bl[nb].SetLen(half)
		p.batch.br[nb] = unix.RemoteIovec{Base: p.batch.r[i].Base + uintptr(f), Len: half}
		ch.tab[nb] = batchEntry{key: uint64(op.Key), off: op.Off + uint64(f), n: uint64(half), laddr: addrOf(op.Local[f:])}
		nb++
	}
	x := &l.xbuf
	*x = xfer{l: l, op: q.At(h), pr: pr, n: uint64(back), mode: modeCMA, ring: -1,
		ch: ch, help: true, pieces: 2, full: 3, batch: k, backs: nb, front: total - back}
	p.newID(x)
	ch.done.Store(0)
	ch.redo.Store(0)
	ch.piece.Store(uint64(nb))
	ch.claim.Store(claimWord(x.id, 1, 2))
	raceRelease()
	p.post(x, reqBatch)
	l.x = x
	p.active++
	got, err := vmCopyAll(x.op.Kind == transport.Put, pr.pub.pid, p.batch.l[:k], p.batch.r[:k])
	if err != nil || got != x.front {
		x.short = true
		p.cmaFailed(pr, err)
	}
	l.judgeShare(ch)
	ch.done.Or(1)
	return true
}

// stepCoop advances a batched cooperative copy whose fronts are moved:
// it moves the backs if the owner has not claimed them, and reports the
// transfer over once both pieces are done.
func (p *port) stepCoop(x *xfer) (moved, fin bool) {
	ch := x.ch
	for coopSteal {
		w := ch.claim.Load()
		id, front, back := claimParts(w)
		if id != x.id || front >= back {
			break
		}
		if ch.claim.CompareAndSwap(w, claimWord(id, back, back)) {
			p.moveBacks(x)
			ch.done.Or(2)
			moved = true
			break
		}
	}
	if ch.done.Load() != x.full {
		return moved, false
	}
	raceAcquire()
	if ch.redo.Load()&2 != 0 && !x.short {
		// The owner gave its piece back: move it here.
		p.moveBacks(x)
		moved = true
	}
	return moved, true
}

// moveBacks moves the back halves of x's batch on this side.
func (p *port) moveBacks(x *xfer) {
	got, err := vmCopyAll(x.op.Kind == transport.Put, x.pr.pub.pid, p.batch.bl[:x.backs], p.batch.br[:x.backs])
	if err != nil || uint64(got) != x.n {
		x.short = true
		p.cmaFailed(x.pr, err)
	}
}

// cmaFailed notes the owner's end when a call failed because it is gone.
func (p *port) cmaFailed(pr *peer, err error) {
	if errors.Is(err, unix.ESRCH) {
		p.a.peerGone(pr)
	}
}

// endCoop ends a batched cooperative copy that is over on both sides: it
// ends the access claim, gives the channel back, and completes the
// batch's descriptors, or leaves them to go the usual way (runBatch) when
// a piece failed or the link did. It returns how many it completed.
func (p *port) endCoop(l *link, x *xfer) int {
	a, pr := p.a, x.pr
	p.endAll(pr)
	p.batch.clear(x.batch)
	p.chanBy[pr.li] = nil
	q := l.tl.RDMA
	h := q.HeadCounter().Load()
	if x.short || x.err != nil {
		l.serialTo = h + uint64(x.batch)
		return 0
	}
	a.stats.cma.Add(uint64(x.front) + x.n)
	a.stats.cmaBatches.Add(1)
	a.stats.coopBatches.Add(1)
	for i := 0; i < x.batch; i++ {
		q.Done(nil)
	}
	return x.batch
}

// stepBatch serves a batched cooperative copy: it claims the back halves
// and moves them in one call, or gives them back (redo) when an entry is
// refused or the call fails. It reports the request over either way.
func (s *server) stepBatch(r *serving, pr *peer) (int, bool) {
	ch := r.ch
	for {
		w := ch.claim.Load()
		id, front, back := claimParts(w)
		if id != r.id || front >= back || back != 2 {
			return 0, true
		}
		if ch.claim.CompareAndSwap(w, claimWord(id, front, 1)) {
			break
		}
	}
	raceAcquire()
	if s.moveBatch(r, pr) != nil {
		ch.redo.Or(2)
	}
	raceRelease()
	ch.done.Or(2)
	transport.RingShared(pr.seg.portBell(r.d))
	return 1, true
}

// moveBatch moves the back halves that the table of r's channel names,
// each checked against this rank's regions, in one call.
func (s *server) moveBatch(r *serving, pr *peer) error {
	k := int(r.piece)
	var total uint64
	var err error
	i := 0
	for ; i < k; i++ {
		e := r.ch.tab[i]
		if e.n == 0 {
			err = errBatchEntry
			break
		}
		var mem []byte
		mem, s.bacc[i], err = s.a.regions.AcquireFor(transport.Key(e.key), e.off, e.n, transport.PermFor(r.kind))
		if err != nil {
			break
		}
		s.bl[i].Base = &mem[0]
		s.bl[i].SetLen(len(mem))
		s.br[i] = unix.RemoteIovec{Base: uintptr(e.laddr), Len: len(mem)}
		total += e.n
	}
	if err == nil {
		var got int
		got, err = vmCopyAll(r.kind == transport.Get, pr.pub.pid, s.bl[:k], s.br[:k])
		if err == nil && uint64(got) != total {
			err = errShortCMA
		}
	}
	for j := 0; j < i; j++ {
		s.bacc[j].Release()
		s.bacc[j] = transport.Access{}
		s.bl[j].Base = nil
	}
	if err == nil {
		s.a.stats.helped.Add(total)
	}
	return err
}
