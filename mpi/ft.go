package mpi

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Fault tolerance, after the ULFM chapter proposed for MPI
// (MPIX_Comm_revoke, _shrink, _agree, _failure_ack, _failure_get_acked).
//
// Detection. A rank fails when the AMI reports its path broken: its process
// gone (shm watches the peer's pidfd), its connection lost or silent beyond
// the adapter's timeout (tcp), its context closed (loop, or a peer that
// closed cleanly). The goroutine that advances the context asks the AMI
// about every rank of the job (amigo.Context.PeerErr) at most once per
// scanInterval while it waits, so the check costs the waiting loop one
// counter increment per poll. A failure found is applied at once, after the
// context was advanced until quiet (what the rank sent before it went is
// delivered first):
//
//  1. every receive posted for the failed rank, and every receive with
//     AnySource on a communicator where the failure is not acknowledged
//     (FailureAck), completes with a *ProcFailedError naming it;
//  2. every receive of a collective on a communicator that holds the rank
//     fails with it, so that no survivor waits for a peer that gave up;
//  3. from then on, a send to it, a receive from it and a collective on a
//     communicator that holds it fail at once.
//
// Recovery. Revoke makes every rank of a communicator fail its pending and
// later operations on it with ErrRevoked (the revocation is flooded: every
// rank that learns of it passes it on). Agree and Shrink still work on a
// failed or revoked communicator: they run a fault-tolerant consensus, the
// flooding consensus with early stopping of Cachin, Guerraoui and
// Rodrigues ("Introduction to Reliable and Secure Distributed Programming",
// algorithm 5.1) over a perfect failure detector, the AMI's. Each round,
// every rank sends every other rank still alive the AND of the values it
// knows; a rank that heard in one round from every rank it believes alive
// ends the round, and decides when it heard from the same ranks in two
// rounds in a row; a decision is flooded and adopted by the ranks that
// have not decided. So every rank that returns returns the same value,
// however many ranks fail during it, in at most f+2 rounds for f failures.

// ErrProcFailed reports an operation that involves a rank that failed
// (MPIX_ERR_PROC_FAILED). It comes as a *ProcFailedError naming the rank.
var ErrProcFailed = errors.New("mpi: process failed")

// ErrRevoked reports an operation on a revoked communicator
// (MPIX_ERR_REVOKED).
var ErrRevoked = errors.New("mpi: communicator revoked")

// ProcFailedError names the rank whose failure failed an operation: Rank in
// the communicator of the operation (-1 if it is no member of it),
// WorldRank in the job, and Err the AMI's report (a *amigo.PeerError).
// errors.Is finds ErrProcFailed and the AMI's sentinel; errors.As finds
// the *amigo.PeerError.
type ProcFailedError struct {
	Rank, WorldRank int
	Err             error
}

func (e *ProcFailedError) Error() string {
	if e.Rank == e.WorldRank || e.Rank < 0 {
		return fmt.Sprintf("mpi: rank %d failed: %v", e.WorldRank, e.Err)
	}
	return fmt.Sprintf("mpi: rank %d (world rank %d) failed: %v", e.Rank, e.WorldRank, e.Err)
}

func (e *ProcFailedError) Unwrap() []error { return []error{ErrProcFailed, e.Err} }

// scanInterval is how often a waiting rank asks the AMI about its peers.
const scanInterval = time.Millisecond

// ftState is the engine's fault-tolerance state, guarded by the engine's
// lock except where noted.
type ftState struct {
	// on is set once a failure or a revocation is known: the checks of
	// postRecv, sendMsg and recvSmall look further only then.
	on       bool
	polls    uint32
	lastScan time.Time
	failed   []error  // by world rank: the AMI's report, or nil
	fresh    []int    // world ranks found failed, not yet applied
	want     []uint64 // scan's set of ranks waited for
	probing  int      // Probes waiting: scan asks about every rank
	agrees   map[agreeKey]*agreement

	// comms are the communicators in use by id, for the handler and the
	// failure rules; commsMu guards it, taken after the engine's lock
	// (communicators are made without it).
	commsMu sync.Mutex
	comms   map[int]*Comm
}

// commFT is a communicator's fault-tolerance state, guarded by the engine's
// lock.
type commFT struct {
	revoked bool
	failed  []uint64 // ranks of the communicator known failed
	nfailed int
	acked   []uint64 // failed ranks acknowledged (FailureAck)
	// agreeSeq counts the agreements started on the communicator, which
	// names their messages; agreeDone is the last one decided here.
	agreeSeq, agreeDone uint32
}

func bitGet(s []uint64, i int) bool { return i/64 < len(s) && s[i/64]&(1<<(i%64)) != 0 }
func bitSet(s []uint64, i int)      { s[i/64] |= 1 << (i % 64) }

func (e *engine) register(c *Comm) {
	e.ft.commsMu.Lock()
	if e.ft.comms == nil {
		e.ft.comms = map[int]*Comm{}
	}
	e.ft.comms[c.id] = c
	e.ft.commsMu.Unlock()
}

func (e *engine) deregister(c *Comm) {
	e.ft.commsMu.Lock()
	if e.ft.comms[c.id] == c {
		delete(e.ft.comms, c.id)
	}
	e.ft.commsMu.Unlock()
}

// commOf returns the communicator whose point-to-point or collective
// context id is cid, or nil.
func (e *engine) commOf(cid uint32) *Comm {
	e.ft.commsMu.Lock()
	c := e.ft.comms[int(cid/2)]
	e.ft.commsMu.Unlock()
	return c
}

// pollFailures is part of the driver's wait condition: once per
// scanInterval it asks the AMI about the peers, and reports a failure not
// known before (wait applies it). It looks at the clock every 64th poll
// only: a spinning wait pays well under a nanosecond per poll, and one
// that sleeps (SleepMax, a millisecond by default) looks within 64 ms.
func (e *engine) pollFailures() bool {
	e.ft.polls++
	if e.ft.polls&63 != 0 {
		return false
	}
	return e.pollFailuresNow()
}

func (e *engine) pollFailuresNow() bool {
	if len(e.ft.fresh) > 0 {
		return true
	}
	now := time.Now()
	if now.Sub(e.ft.lastScan) < scanInterval {
		return false
	}
	e.ft.lastScan = now
	return e.scan()
}

// scan asks the AMI about the peers this rank waits for, and lists the
// failures not known yet. Those are the ranks a receive waits for (its
// source; every rank of the communicator for a collective's receive or
// one from AnySource), those a synchronous send waits for, and every rank
// of a communicator in agreement; while a Probe waits, every rank. A
// failure of any other peer shows in the operations in flight with it,
// which the AMI fails (peerFailure). So a rank connects only to the peers
// it waits for.
func (e *engine) scan() bool {
	if e.closed {
		return false
	}
	want := e.waitedFor()
	for r := 0; r < e.size; r++ {
		if r == e.rank || !bitGet(want, r) || e.ft.failed != nil && e.ft.failed[r] != nil {
			continue
		}
		if err := e.ac.PeerErr(amigo.Endpoint{Rank: r, Context: e.cidx}); err != nil {
			if e.ft.failed == nil {
				e.ft.failed = make([]error, e.size)
			}
			e.ft.failed[r] = err
			e.ft.fresh = append(e.ft.fresh, r)
		}
	}
	return len(e.ft.fresh) > 0
}

// waitedFor returns the set of world ranks this rank waits for (see scan).
func (e *engine) waitedFor() []uint64 {
	if e.ft.want == nil {
		e.ft.want = make([]uint64, (e.size+63)/64)
	}
	want := e.ft.want
	if e.ft.probing > 0 {
		for i := 0; i < e.size; i++ {
			bitSet(want, i)
		}
		return want
	}
	clear(want)
	e.ft.commsMu.Lock()
	defer e.ft.commsMu.Unlock()
	mark := func(cid uint32, src int32) {
		c := e.ft.comms[int(cid/2)]
		switch {
		case c == nil || c.e != e:
		case cid == c.coll || src == AnySource:
			for _, ep := range c.eps {
				bitSet(want, ep.Rank)
			}
		case src >= 0 && int(src) < c.size:
			bitSet(want, c.eps[src].Rank)
		}
	}
	visit := func(l *reqList) {
		for r := l.head; r != nil; r = r.next {
			mark(r.ctx, r.src)
		}
	}
	for i := range e.posted.buckets {
		visit(&e.posted.buckets[i])
	}
	visit(&e.posted.wild)
	if e.exp.on {
		mark(e.exp.ctx, e.exp.src)
	}
	if e.shmWaits > 0 {
		for _, c := range e.ft.comms {
			if c.e == e && c.shm != nil && c.shm.waiting {
				mark(c.coll, AnySource)
			}
		}
	}
	for _, r := range e.syncReqs {
		if r != nil {
			mark(r.ctx, r.src)
		}
	}
	for _, a := range e.ft.agrees {
		if a.c != nil && !a.decided {
			mark(a.c.p2p, AnySource)
		}
	}
	return want
}

// applyFailures applies the failures scan found (see the rules above).
func (e *engine) applyFailures() {
	if len(e.ft.fresh) == 0 {
		return
	}
	// What the failed ranks sent before they went comes first.
	for i := 0; i < 16; i++ {
		if e.held.Advance() == 0 {
			break
		}
	}
	e.ft.on = true
	e.events++
	fresh := e.ft.fresh
	e.ft.fresh = nil
	e.ft.commsMu.Lock()
	comms := make([]*Comm, 0, len(e.ft.comms))
	for _, c := range e.ft.comms {
		comms = append(comms, c)
	}
	e.ft.commsMu.Unlock()
	for _, c := range comms {
		hit := false
		for _, w := range fresh {
			for i, ep := range c.eps {
				if ep.Rank == w && ep.Context == e.cidx {
					if c.ft.failed == nil {
						c.ft.failed = make([]uint64, (c.size+63)/64)
						c.ft.acked = make([]uint64, (c.size+63)/64)
					}
					if !bitGet(c.ft.failed, i) {
						bitSet(c.ft.failed, i)
						c.ft.nfailed++
						hit = true
					}
				}
			}
		}
		if hit {
			e.failPending(c, nil)
		}
	}
}

// failPending fails the receives pending on c that the failures of c (or
// its revocation, if cause is ErrRevoked) leave without a sender.
func (e *engine) failPending(c *Comm, cause error) {
	type held struct {
		r   *request
		gen uint32
	}
	var rs []held
	visit := func(l *reqList) {
		for r := l.head; r != nil; r = r.next {
			if r.ctx == c.p2p || r.ctx == c.coll {
				rs = append(rs, held{r, r.gen})
			}
		}
	}
	for i := range e.posted.buckets {
		visit(&e.posted.buckets[i])
	}
	visit(&e.posted.wild)
	for _, h := range rs {
		r := h.r
		if r.gen != h.gen || !r.posted {
			continue // a failed schedule took it out
		}
		err := cause
		if err == nil {
			err = c.recvFailure(r.ctx, r.src)
		}
		if err != nil {
			e.posted.remove(r)
			e.complete(r, err)
		}
	}
	// Synchronous sends waiting for an acknowledgement that will not come.
	for _, r := range e.syncReqs {
		if r == nil || r.ctx != c.p2p {
			continue
		}
		err := cause
		if err == nil && bitGet(c.ft.failed, int(r.src)) {
			err = c.procFailed(int(r.src))
		}
		if err == nil {
			continue
		}
		e.dropSync(r)
		if r.sentDone {
			e.complete(r, err)
		} else {
			r.ftErr = err // the AMI's completion ends it
		}
	}
	if x := &e.exp; x.on && (x.ctx == c.p2p || x.ctx == c.coll) {
		err := cause
		if err == nil {
			err = c.recvFailure(x.ctx, x.src)
		}
		if err != nil {
			x.on, x.done, x.err = false, true, err
		}
	}
}

// procFailed returns the error of a failure of rank r of c.
func (c *Comm) procFailed(r int) error {
	w := c.eps[r].Rank
	return &ProcFailedError{Rank: r, WorldRank: w, Err: c.e.ft.failed[w]}
}

// firstFailed returns the error of the lowest failed rank of c not in skip.
func (c *Comm) firstFailed(skip []uint64) error {
	for i, word := range c.ft.failed {
		if i < len(skip) {
			word &^= skip[i]
		}
		if word != 0 {
			return c.procFailed(64*i + bits.TrailingZeros64(word))
		}
	}
	return nil
}

// recvFailure returns the error of a receive on c's context cid from src
// that c's failures or revocation fail, or nil.
func (c *Comm) recvFailure(cid uint32, src int32) error {
	switch {
	case c.ft.revoked:
		return ErrRevoked
	case c.ft.nfailed == 0:
		return nil
	case cid == c.coll:
		return c.firstFailed(nil)
	case src == AnySource:
		return c.firstFailed(c.ft.acked)
	case bitGet(c.ft.failed, int(src)):
		return c.procFailed(int(src))
	}
	return nil
}

// ftRecv is postRecv's and recvSmall's check once a failure or revocation
// is known.
func (e *engine) ftRecv(cid uint32, src int32) error {
	if c := e.commOf(cid); c != nil {
		return c.recvFailure(cid, src)
	}
	return nil
}

// ftSend is sendMsg's check once a failure or revocation is known.
func (e *engine) ftSend(dest amigo.Endpoint, cid uint32) error {
	c := e.commOf(cid)
	if c == nil {
		return nil
	}
	if c.ft.revoked {
		return ErrRevoked
	}
	if cid == c.coll && c.ft.nfailed > 0 {
		return c.firstFailed(nil)
	}
	if dest.Context == e.cidx && e.ft.failed[dest.Rank] != nil {
		for i, ep := range c.eps {
			if ep == dest {
				return c.procFailed(i)
			}
		}
		return &ProcFailedError{Rank: -1, WorldRank: dest.Rank, Err: e.ft.failed[dest.Rank]}
	}
	return nil
}

// peerFailure turns err, an AMI error of an operation, into a
// *ProcFailedError if the peer it names has failed.
func (e *engine) peerFailure(err error) error {
	var pe *amigo.PeerError
	if e.closed || !errors.As(err, &pe) || errors.Is(err, ErrProcFailed) {
		return err
	}
	w := int(pe.Addr.Rank)
	if w < 0 || w >= e.size || int(pe.Addr.Context) != e.cidx {
		return err
	}
	if e.ft.failed == nil || e.ft.failed[w] == nil {
		ferr := e.ac.PeerErr(amigo.Endpoint{Rank: w, Context: e.cidx})
		if ferr == nil {
			return err
		}
		if e.ft.failed == nil {
			e.ft.failed = make([]error, e.size)
		}
		e.ft.failed[w] = ferr
		e.ft.fresh = append(e.ft.fresh, w)
	}
	return &ProcFailedError{Rank: -1, WorldRank: w, Err: err}
}

// Revoke revokes c on every rank (MPIX_Comm_revoke): the operations
// pending on c fail with ErrRevoked, and so do later ones, except Agree,
// Shrink, FailureAck, FailureGetAcked and Free. It does not wait: the
// other ranks learn of it as their contexts are advanced (a rank that has
// not made c yet when the notice comes ignores it).
func (c *Comm) Revoke() error {
	if c == nil {
		return c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkFT(); err != nil {
		return err
	}
	e.revoke(c)
	return nil
}

// revoke revokes c here and tells every other rank of c.
func (e *engine) revoke(c *Comm) {
	if c.ft.revoked {
		return
	}
	c.ft.revoked = true
	e.ft.on = true
	e.events++
	e.failPending(c, ErrRevoked)
	for i, ep := range c.eps {
		if i == c.rank || e.ft.failed != nil && e.ft.failed[ep.Rank] != nil {
			continue
		}
		hdr := make([]byte, hdrLen)
		putHdr((*[hdrLen]byte)(hdr), c.p2p, int32(c.rank), 0)
		hdr[12] = kindRevoke
		_ = e.held.Send(ep, e.disp, hdr, nil, nil)
	}
	e.unflushed = true
}

// onRevoke handles a revocation notice for context id cid.
func (e *engine) onRevoke(cid uint32) {
	if c := e.commOf(cid); c != nil && cid == c.p2p && !e.closed {
		e.revoke(c)
	}
}

// checkFT is check for the calls that a failure or revocation does not
// stop.
func (c *Comm) checkFT() error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: nil", ErrComm)
	case c.freed:
		return fmt.Errorf("%w: freed", ErrComm)
	case c.e.closed:
		return ErrClosed
	}
	return nil
}

// Revoked reports whether c was revoked, here or by another rank.
func (c *Comm) Revoked() bool {
	if c == nil {
		return false
	}
	c.e.lock()
	defer c.e.unlock()
	return c.ft.revoked
}

// FailureAck acknowledges the failures of ranks of c known here
// (MPIX_Comm_failure_ack): receives from AnySource on c no longer fail
// because of them. Collectives on c still fail.
func (c *Comm) FailureAck() error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	if err := c.checkFT(); err != nil {
		return err
	}
	copy(c.ft.acked, c.ft.failed)
	return nil
}

// FailureGetAcked returns the group of the ranks of c whose failure
// FailureAck acknowledged (MPIX_Comm_failure_get_acked), in c's order.
func (c *Comm) FailureGetAcked() (*Group, error) {
	if c == nil {
		return nil, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	if err := c.checkFT(); err != nil {
		return nil, err
	}
	g := &Group{me: c.e.rank}
	for i := 0; i < c.size; i++ {
		if bitGet(c.ft.acked, i) {
			g.world = append(g.world, c.eps[i].Rank)
		}
	}
	return g, nil
}

// Failed returns the ranks of c known here to have failed, in c's order.
// Ranks learn of a failure at different times: to act on the same set
// everywhere, agree on it (Shrink does).
func (c *Comm) Failed() []int {
	if c == nil {
		return nil
	}
	c.e.lock()
	defer c.e.unlock()
	var out []int
	for i := 0; i < c.size; i++ {
		if bitGet(c.ft.failed, i) {
			out = append(out, i)
		}
	}
	return out
}

// Agree returns the bitwise AND of the flags of the ranks of c
// (MPIX_Comm_agree): every rank of c that returns returns the same value,
// even when ranks fail during the call. The flag of a rank that failed
// counts if it reached a rank that did not fail. Agree works on a
// communicator with failed ranks and on a revoked one; it is collective
// over the ranks of c still alive.
//
// If a rank of the agreement knew, when it called Agree, of a failed rank
// of c whose failure it had not acknowledged (FailureAck), every rank that
// returns returns the agreed value with a *ProcFailedError
// (MPIX_ERR_PROC_FAILED) naming the lowest such rank; failures every rank
// acknowledged before the call raise none. The error's Err is the AMI's
// report where this rank knows of the failure, else ErrAgreedFailed.
func (c *Comm) Agree(ctx context.Context, flag int) (int, error) {
	if c == nil {
		return 0, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkFT(); err != nil {
		return 0, err
	}
	// The flag, then the ranks whose failure is known and not
	// acknowledged here, complemented: the AND of the complements is the
	// complement of the union.
	aw := (c.size + 63) / 64
	vals := make([]uint64, 1+aw)
	vals[0] = uint64(flag)
	for w := range aw {
		vals[1+w] = ^uint64(0)
		if w < len(c.ft.failed) {
			vals[1+w] = ^(c.ft.failed[w] &^ c.ft.acked[w])
		}
	}
	v, err := e.agree(ctx, c, vals)
	if err != nil {
		return 0, errorf("mpi: Agree: %w", err)
	}
	for w := range aw {
		if unacked := ^v[1+w]; unacked != 0 {
			r := 64*w + bits.TrailingZeros64(unacked)
			if r >= c.size {
				break
			}
			return int(v[0]), c.agreedFailed(r)
		}
	}
	return int(v[0]), nil
}

// ErrAgreedFailed is the cause of an Agree's *ProcFailedError naming a
// rank whose failure another rank of the agreement knew of, and this one
// not yet.
var ErrAgreedFailed = errors.New("failed, as a rank of the agreement knew")

// agreedFailed returns the error of Agree for rank r of c, which a rank of
// the agreement knew failed and had not acknowledged.
func (c *Comm) agreedFailed(r int) error {
	w := c.eps[r].Rank
	if f := c.e.ft.failed; f != nil && f[w] != nil {
		return &ProcFailedError{Rank: r, WorldRank: w, Err: f[w]}
	}
	return &ProcFailedError{Rank: r, WorldRank: w, Err: ErrAgreedFailed}
}

// Shrink returns a communicator of the ranks of c that have not failed,
// in c's order (MPIX_Comm_shrink): the ranks agree on which failed and on
// a context id, so every rank that returns has the same communicator. It
// works on a communicator with failed ranks and on a revoked one.
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	if c == nil {
		return nil, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkFT(); err != nil {
		return nil, err
	}
	aw := (c.size + 63) / 64
	// The ranks agree on the survivors until an agreement changes nothing:
	// a rank that failed during one is known failed at its end by the
	// ranks that waited for it, and the next agreement drops it.
	var prev []uint64
	for {
		// The offer of free context ids follows agreeID's rule.
		vals := make([]uint64, aw+idWords+1)
		for i := 0; i < c.size; i++ {
			if !bitGet(c.ft.failed, i) && (prev == nil || bitGet(prev, i)) {
				bitSet(vals, i)
			}
		}
		owner := !e.idOwned && (e.idNext < 0 || e.idNext >= c.id)
		if owner {
			e.idOwned = true
			if e.idNext == c.id {
				e.idNext = -1
			}
			copy(vals[aw:], e.ids[:])
			vals[aw+idWords] = 1
		} else if e.idNext < 0 || c.id < e.idNext {
			e.idNext = c.id
		}
		v, err := e.agree(ctx, c, vals)
		if owner {
			e.idOwned = false
		}
		if err != nil {
			if e.idNext == c.id {
				e.idNext = -1
			}
			return nil, errorf("mpi: Shrink: %w", err)
		}
		if !bitGet(v, c.rank) {
			return nil, errorf("mpi: Shrink: %w: the other ranks count this one failed", ErrProcFailed)
		}
		if prev == nil || !slices.Equal(prev, v[:aw]) {
			prev = v[:aw]
			continue
		}
		id := -1
		for w, free := range v[aw : aw+idWords] {
			if free != 0 {
				id = w*64 + bits.TrailingZeros64(free)
				break
			}
		}
		if id < 0 {
			if v[aw+idWords] != 0 {
				return nil, ErrContextIDs
			}
			e.unlock()
			runtime.Gosched()
			e.lock()
			continue
		}
		e.ids[id/64] &^= 1 << (id % 64)
		s := &Comm{e: e, cart: nil}
		for i := 0; i < c.size; i++ {
			if bitGet(v, i) {
				if i == c.rank {
					s.rank = len(s.eps)
				}
				s.eps = append(s.eps, c.eps[i])
			}
		}
		s.size = len(s.eps)
		s.setID(id)
		// Ranks that failed after the agreement are failed here too.
		if e.ft.failed != nil {
			for i, ep := range s.eps {
				if e.ft.failed[ep.Rank] != nil {
					if s.ft.failed == nil {
						s.ft.failed = make([]uint64, (s.size+63)/64)
						s.ft.acked = make([]uint64, (s.size+63)/64)
					}
					bitSet(s.ft.failed, i)
					s.ft.nfailed++
				}
			}
		}
		return s, nil
	}
}

// waitErr names the operation a wait was for when it ended without the
// operation (its context ended, or the AMI context closed): "mpi: Recv
// from rank 1 tag 3: context deadline exceeded". A peer or tag of noArg is
// left out. The error wraps err.
func (e *engine) waitErr(err error, op string, peer, tag int) error {
	switch {
	case peer >= 0:
		op += fmt.Sprintf(" rank %d", peer)
	case peer == AnySource:
		op += " any rank"
	}
	switch {
	case tag >= 0:
		op += fmt.Sprintf(" tag %d", tag)
	case tag == AnyTag:
		op += " any tag"
	}
	return errorf("mpi: %s: %w", op, err)
}

// noArg is a peer or tag that waitErr leaves out.
const noArg = -3

// waitErr names the operation of a request whose wait ended without it.
func (r *request) waitErr(err error) error {
	switch r.kind {
	case reqRecv:
		return r.e.waitErr(err, "Wait for a receive from", int(r.src), int(r.tag))
	case reqSend:
		if r.persistent {
			return r.e.waitErr(err, "Wait for a send to", r.peer, noArg)
		}
		return r.e.waitErr(err, "Wait for a send to", int(r.src), int(r.tag))
	case reqColl:
		return r.e.waitErr(err, "Wait for a collective", noArg, noArg)
	}
	return r.e.waitErr(err, "Wait", noArg, noArg)
}

// pollStart is pollFailures for a call that may complete without waiting
// (a collective whose messages all leave at once): it applies what it
// finds.
func (e *engine) pollStart() {
	if e.pollFailures() {
		e.applyFailures()
	}
}

// targetFailure returns the error of a one-sided access to rank r of c
// once a failure or revocation is known, or nil.
func (c *Comm) targetFailure(r int) error {
	if c.ft.revoked {
		return ErrRevoked
	}
	if bitGet(c.ft.failed, r) {
		return c.procFailed(r)
	}
	return nil
}
