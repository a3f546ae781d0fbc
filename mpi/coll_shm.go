package mpi

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Collectives through shared memory. The ranks of a communicator that all
// run on one host do Barrier, and Allreduce of up to Options.SharedCollMax
// bytes, through a segment of the communicator instead of messages, as
// Open MPI's coll/sm and MPICH's release-gather collectives do: a Barrier
// between two ranks is then one trip of a cache line between their cores,
// where messages take a round trip.
//
// The segment holds a block per rank, which only its rank writes:
//
//	bytes 0-7     arrival: the sequence number of the rank's last
//	              collective on the segment (1 for the first)
//	bytes 8-23    what the collectives of even and odd sequence
//	              numbers are (collInfo): kind, element kind and length
//	bytes 24-31   drowsy: the sequence number of a collective the rank
//	              waits for long enough to fall asleep, or 0
//	bytes 64-     the data of the collectives of even sequence numbers,
//	              then (at 64+slot) of odd ones: slot bytes each
//
// Blocks are a multiple of 128 bytes, so no two ranks write one cache
// line (or one pair of lines, which processors prefetch together).
//
// A rank starting its n-th collective writes its data into the half of
// its block that n's parity selects, its info, and then n as its arrival
// (an atomic store: the data and the info are visible before it); it waits
// until every rank's arrival is n or more, checks that every rank runs the
// same collective with the same length, and reads every rank's data,
// combining it in rank order (so every rank computes the same result, and
// non-commutative operations are served). Two halves are enough: a rank
// that writes n+2 into a half has seen every rank arrive at n+1, so every
// rank has finished reading the half of n.
//
// A waiting rank polls the arrivals briefly, then waits as every wait of
// the layer does (engine.wait): it advances its context, so other traffic
// progresses; where ranks outnumber processors it yields its processor at
// once after a pass that found nothing (the context's idle policy), for
// the rank it waits for to run; and it watches the ranks of the
// communicator for failure, so that a rank that died fails the wait
// (ErrProcFailed) instead of hanging it. A wait that lasts falls asleep
// on the context's doorbell, which stores into the segment do not ring:
// so before it may sleep, a rank stores the collective's sequence number
// as its drowsy word and looks at the arrivals again, and a rank that sees
// every rank arrived takes (compare-and-swap) the drowsy word of each
// rank that stored the current one and sends it an empty message
// (kindWake), which rings its doorbell. Both sides store, then load (all
// sequentially consistent): either the sleeper sees the last arrival or
// the rank that saw it sees the drowsy word. Where ranks outnumber
// processors a rank announces early, after a few yields: ranks asleep
// leave the processors to the ranks yet to arrive, and yielding instead
// hands them over far less surely (measured: 8 ranks on 2 cores, 64 B,
// 170 us an Allreduce yielding against a fraction of that sleeping).
//
// The segment is made on a communicator's first Barrier or Allreduce that
// can use it, collectively (a memfd of the lowest rank that the others map
// through /proc, as the shared windows are), and unmapped by Free. A
// communicator over several hosts (or whose ranks reach each other by
// another adapter than shared memory), of one rank, or of more than
// sharedCollRanks ranks keeps the collectives by messages; so do the
// nonblocking collectives (Ibarrier, Iallreduce), which match only each
// other.

const (
	// sharedCollRanks is the most ranks that use a segment: each rank
	// reads every rank's arrival and data.
	sharedCollRanks = 64
	// sharedCollSlotMax bounds Options.SharedCollMax.
	sharedCollSlotMax = 4096
	// sharedArrivalSpin is how many times a rank polls the arrivals before
	// it waits with its context, when the host has a processor per rank.
	sharedArrivalSpin = 256
)

// The states of a communicator's shared-memory collectives.
const (
	shmUnknown = iota // not tried yet
	shmSetup          // being made: the collectives making it use messages
	shmOn             // c.shm is in use
	shmOff            // not available: messages
	shmBroken         // making it failed on this rank: shmErr
)

// collInfo says what a collective is, for a check that every rank runs the
// same one: kind in the top byte, element kind in the next, length in
// bytes below.
const (
	infoBarrier   = 1 << 56
	infoAllreduce = 2 << 56
)

// shmColl is the shared-memory state of one communicator.
type shmColl struct {
	c      *Comm
	seg    []byte
	p, r   int
	slot   int // bytes of one half of a block's data
	stride int // bytes of a block
	seq    uint64
	next   int // lowest rank not yet seen arrived at seq
	// tmp holds a rank's data while a non-commutative op combines it.
	tmp []byte
	// ready is arrived as a method value, made once.
	ready func() bool
	// waiting is set while the rank waits for arrivals: failure detection
	// then watches every rank of the communicator (engine.waitedFor).
	waiting bool
	// polls counts the polls of the arrivals of this collective while it
	// waits with the context; at drowsyAt the rank announces that it may
	// sleep.
	polls, drowsyAt int
	wakeHdr         [hdrLen]byte
	// race is the segment's key for the race detector (race_on.go).
	race unsafe.Pointer
}

// arrival returns rank j's arrival word.
func (s *shmColl) arrival(j int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.seg[j*s.stride]))
}

// info returns rank j's info word for the collectives of parity par.
func (s *shmColl) info(j int, par uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.seg[j*s.stride+8+8*int(par)]))
}

// data returns rank j's data half for the collectives of parity par, n
// bytes of it.
func (s *shmColl) data(j int, par uint64, n int) []byte {
	lo := j*s.stride + 64 + int(par)*s.slot
	return s.seg[lo : lo+n : lo+n]
}

// arrive publishes this rank's next collective: data (at most slot bytes)
// and info, then its arrival.
func (s *shmColl) arrive(info uint64, data []byte) {
	s.seq++
	s.next, s.polls = 0, 0
	par := s.seq & 1
	if len(data) > 0 {
		copy(s.data(s.r, par, len(data)), data)
	}
	if in := s.info(s.r, par); in.Load() != info {
		in.Store(info) // most collectives repeat the one before: no store
	}
	raceRelease(s.race)
	s.arrival(s.r).Store(s.seq)
}

// drowsy returns rank j's drowsy word.
func (s *shmColl) drowsy(j int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.seg[j*s.stride+24]))
}

// arrived reports whether every rank has arrived at this rank's collective,
// or a rank of the communicator is known to have failed (await tells).
func (s *shmColl) arrived() bool {
	s.polls++
	if s.polls == s.drowsyAt {
		s.drowsy(s.r).Store(s.seq)
	}
	for s.next < s.p {
		if s.arrival(s.next).Load() < s.seq {
			return s.c.ft.nfailed > 0 || s.c.ft.revoked
		}
		s.next++
	}
	return true
}

// await waits until every rank has arrived, and checks that every rank
// runs the collective described by info.
func (s *shmColl) await(ctx context.Context, info uint64) error {
	c, e := s.c, s.c.e
	if !e.oversub {
		s.polls = -sharedArrivalSpin // these polls announce nothing
		for i := 0; i < sharedArrivalSpin && s.next < s.p; i++ {
			s.arrived()
		}
	}
	if s.next < s.p {
		// The context sleeps after Config.SpinIterations idle passes (or
		// more, if 0) and YieldIterations more: the rank announces that it
		// may sleep well before, counting its polls from here, where they
		// go one to a pass.
		s.polls = 0
		if e.driving {
			// Another goroutine advances the context, and this one sleeps
			// until an event wakes it: a kindWake is one.
			s.drowsy(s.r).Store(s.seq)
		}
		s.waiting = true
		e.shmWaits++
		err := e.wait(ctx, s.ready)
		e.shmWaits--
		s.waiting = false
		if err != nil {
			return e.waitErr(err, "collective waiting for", noArg, noArg)
		}
		if s.next < s.p {
			if c.ft.revoked {
				return ErrRevoked
			}
			return c.firstFailed(nil)
		}
	}
	raceAcquire(s.race)
	s.wake()
	par := s.seq & 1
	for j := 0; j < s.p; j++ {
		if got := s.info(j, par).Load(); got != info {
			return s.mismatch(j, got, info)
		}
	}
	return nil
}

// wake sends kindWake to each rank that announced it may sleep in this
// collective, which every rank has arrived at: one rank does, the first to
// take its drowsy word.
func (s *shmColl) wake() {
	e := s.c.e
	for j := 0; j < s.p; j++ {
		d := s.drowsy(j)
		if j == s.r || d.Load() != s.seq || !d.CompareAndSwap(s.seq, 0) {
			continue
		}
		// A failed send is a failed peer, which wakes no more.
		if e.held != nil {
			_ = e.held.SendImmediate(s.c.eps[j], e.disp, s.wakeHdr[:], nil)
		} else {
			_ = e.ac.SendImmediate(s.c.eps[j], e.disp, s.wakeHdr[:], nil)
		}
		e.unflushed = true
	}
}

// mismatch is the error of a collective that rank j runs otherwise.
func (s *shmColl) mismatch(j int, got, want uint64) error {
	s.c.e.stats.Truncated++
	name := func(i uint64) string {
		switch i &^ (1<<56 - 1) {
		case infoBarrier:
			return "Barrier"
		case infoAllreduce:
			return fmt.Sprintf("Allreduce of %d bytes", i&(1<<48-1))
		}
		return fmt.Sprintf("collective %#x", i)
	}
	return fmt.Errorf("%w: rank %d runs %s where rank %d runs %s", ErrCount, j, name(got), s.r, name(want))
}

// start begins a collective on the segment: c's failures and revocation
// fail it before it arrives, as they fail a collective's sends.
func (s *shmColl) start() error {
	e := s.c.e
	e.stats.Collectives++
	e.pollStart()
	if e.ft.on {
		if s.c.ft.revoked {
			return ErrRevoked
		}
		if s.c.ft.nfailed > 0 {
			return s.c.firstFailed(nil)
		}
	}
	return nil
}

// barrier is Barrier on the segment.
func (s *shmColl) barrier(ctx context.Context) error {
	if err := s.start(); err != nil {
		return err
	}
	s.arrive(infoBarrier, nil)
	err := s.await(ctx, infoBarrier)
	s.c.e.flush()
	return err
}

// allreduceShared is Allreduce on the segment, with send and recv checked
// (send nil: in place) and len(acc) at most s.slot.
func allreduceShared(ctx context.Context, s *shmColl, k kind, op Op, send, acc []byte) error {
	if err := s.start(); err != nil {
		return err
	}
	n := len(acc)
	info := infoAllreduce | uint64(k)<<48 | uint64(n)
	if send == nil {
		send = acc
	}
	s.arrive(info, send)
	if err := s.await(ctx, info); err != nil {
		return err
	}
	par := s.seq & 1
	copy(acc, s.data(0, par, n))
	for j := 1; j < s.p; j++ {
		d := s.data(j, par, n)
		if op.commute {
			combine(k, op, d, acc)
			continue
		}
		t := s.tmp[:n]
		copy(t, d)
		combine(k, op, acc, t)
		copy(acc, t)
	}
	s.c.e.flush()
	return nil
}

// shared returns c's segment for a collective of n bytes (Barrier: 0), or
// nil if it runs by messages; it makes the segment on first use, with the
// engine unlocked.
func (c *Comm) shared(ctx context.Context, n int) (*shmColl, error) {
	switch c.shmState {
	case shmOn:
		if n <= c.shm.slot {
			return c.shm, nil
		}
		return nil, nil
	case shmUnknown:
	case shmBroken:
		return nil, c.shmErr
	default:
		return nil, nil
	}
	c.e.lock()
	if err := c.check(); err != nil {
		c.e.unlock()
		return nil, err
	}
	limit := c.e.opts.SharedCollMax
	ok := c.size > 1 && c.size <= sharedCollRanks && limit >= 0 && c.sharesMemory()
	c.e.unlock()
	if !ok {
		c.shmState = shmOff
		return nil, nil
	}
	slot := (min(limit, sharedCollSlotMax) + 63) &^ 63
	stride := (64 + 2*slot + 127) &^ 127
	c.shmState = shmSetup
	seg, id, err := mapCollSegment(ctx, c, stride*c.size)
	switch {
	case err == errNoSegment:
		c.shmState = shmOff
		return nil, nil
	case err != nil:
		c.shmState, c.shmErr = shmBroken, err
		return nil, err
	}
	s := &shmColl{c: c, seg: seg, p: c.size, r: c.rank, slot: slot, stride: stride, tmp: make([]byte, slot), race: raceKey(id)}
	s.ready = s.arrived
	cfg := c.e.ac.Client().Config()
	s.drowsyAt = max((cfg.SpinIterations+max(cfg.YieldIterations, 0))/4, 1)
	putHdr(&s.wakeHdr, c.coll, int32(c.rank), 0)
	s.wakeHdr[12] = kindWake
	c.e.lock()
	if err := c.check(); err != nil {
		c.e.unlock()
		_ = unix.Munmap(seg)
		return nil, err
	}
	c.shm, c.shmState = s, shmOn
	c.e.unlock()
	if n <= slot {
		return s, nil
	}
	return nil, nil
}

// sharesMemory reports whether this rank reaches every rank of c through
// memory: in this process, or through the shared-memory adapter. Ranks of
// this host reached otherwise (AMIGO_TRANSPORT=tcp) keep the collectives
// by messages, as the job asked; and their adapter's goroutines, which
// write this rank's memory for its peers, are ordered with this rank only
// by messages as far as the race detector can tell.
func (c *Comm) sharesMemory() bool {
	cl := c.e.ac.Client()
	for _, ep := range c.eps {
		if ep.Rank == c.e.rank {
			continue
		}
		pi, err := cl.Peer(ep.Rank)
		if err != nil || !pi.SameHost || pi.Adapter != "shm" && pi.Adapter != "loop" {
			return false
		}
	}
	return true
}

// freeShared unmaps c's segment; Free calls it.
func (c *Comm) freeShared() {
	if c.shm != nil {
		_ = unix.Munmap(c.shm.seg)
		c.shm = nil
	}
	c.shmState = shmOff
}

// errNoSegment reports that a rank could not make or map the segment: every
// rank then keeps the collectives by messages.
var errNoSegment = fmt.Errorf("mpi: no shared segment for the collectives")

// mapCollSegment makes (on rank 0 of c) and maps (on every rank) a zeroed
// segment of size bytes for c's collectives, and returns it with its
// maker's process id and descriptor. Collective: every rank gets
// errNoSegment if one could not map it, and another error if the
// collectives that agree on it failed.
func mapCollSegment(ctx context.Context, c *Comm, size int) ([]byte, [2]int64, error) {
	sh := shareSegment(ctx, c, "amigo-coll", size)
	switch {
	case sh.coll != nil:
		return nil, [2]int64{}, errorf("mpi: making the collectives' shared segment: %w", sh.coll)
	case sh.local != nil || sh.others:
		return nil, [2]int64{}, errNoSegment
	}
	return sh.seg, sh.where, nil
}
