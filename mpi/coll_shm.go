package mpi

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/order"

	"golang.org/x/sys/unix"
)

// Collectives through shared memory. The ranks of a communicator that all
// run on one host do Barrier, and Allreduce of up to Options.SharedCollMax
// bytes, through a segment of the communicator instead of messages, as
// Open MPI's coll/sm and MPICH's release-gather collectives do: a Barrier
// between two ranks is then one trip of a cache line between their cores,
// where messages take a round trip.
//
// The segment holds a block per rank, which only its rank writes (but
// for the drowsy word, below), of two regions: one for the collectives of
// even sequence numbers, then one for odd ones. A region is a run of
// 64-byte lines (regionLines), each of which carries the sequence number
// of the collective that wrote it:
//
//	line 0:  bytes 0-7     the sequence number (1 for the first collective)
//	         bytes 8-15    what the collective is (collInfo): kind,
//	                       element kind and length
//	         bytes 16-23   drowsy: the sequence number of the collective if
//	                       the rank waits for it long enough to fall
//	                       asleep, else anything else
//	         bytes 24-63   the first 40 bytes of the rank's data
//	line i:  bytes 0-7     the sequence number
//	         bytes 8-63    the next 56 bytes of the data
//
// Blocks are a multiple of 128 bytes, so no two ranks write one cache
// line (or one pair of lines, which processors prefetch together).
//
// A rank starting its n-th collective writes its data into the lines of
// the region that n's parity selects, each line's data and then n as its
// sequence number, line 0 last. It waits until every rank's lines that
// the collective covers hold n (or a rank's line 0 holds n with another
// collective's info: the ranks disagree), checks that every rank runs the
// same collective with the same length, and reads every rank's data,
// combining it in rank order (so every rank computes the same result, and
// non-commutative operations are served). Two regions are enough: a rank
// that writes n+2 into a region has seen every rank arrive at n+1, so
// every rank has finished reading the region of n.
//
// Memory ordering: a line's data is written with plain stores and its
// number after it, with a release store (package order) for lines 1 and
// up and an atomic store, a full fence, for line 0; the reader loads the
// numbers atomically and reads a line's data only once every number it
// waits for is n, so it sees each line's data of collective n. Line 0
// goes last, so a rank whose line 0 holds n has all its lines written;
// the reader still loads every line's number in each poll (below). The
// fence of line 0 orders the rank's arrival before its loads of the
// drowsy words (wake).
//
// # Why the number is in every line
//
// A reader that waits for one arrival word and then reads the data waits
// for two lines in turn: the arrival's, then the data's, each a trip
// between the cores once the writer has taken it. With the number in
// every line the waiting rank loads all the lines it needs in each poll,
// and their trips overlap. A 64-byte Allreduce of two ranks on a 2-core
// host, against the arrival word (bench/SMALL_PATH.md): 0.86x the time
// where a line's trip is short (0.127 against 0.148 us) and 0.65x where
// it is long (0.368 against 0.569 us).
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

// Where a region's lines hold the data (the layout above).
const (
	lineHead = 40 // data bytes in line 0
	lineData = 56 // data bytes in each further line
)

// regionLines is the number of lines of a region that holds n bytes of
// data (at least line 0).
func regionLines(n int) int {
	if n <= lineHead {
		return 1
	}
	return 1 + (n-lineHead+lineData-1)/lineData
}

// shmColl is the shared-memory state of one communicator.
type shmColl struct {
	c      *Comm
	seg    []byte
	p, r   int
	slot   int // most bytes of data a collective carries
	region int // bytes of a region (regionLines(slot) lines)
	stride int // bytes of a block
	seq    uint64
	// info and lines describe this rank's current collective: its
	// collInfo and the lines of a region its data covers.
	info  uint64
	lines int
	next  int // lowest rank not yet seen arrived at seq
	// tmp holds a rank's data while it is combined, own this rank's.
	tmp, own []byte
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

// line returns line l of rank j's region for the collectives of parity
// par.
func (s *shmColl) line(j int, par uint64, l int) []byte {
	lo := j*s.stride + int(par)*s.region + 64*l
	return s.seg[lo : lo+64 : lo+64]
}

// word returns the 8-byte word at off of line b.
func word(b []byte, off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&b[off])) }

// arrive publishes this rank's next collective: data (at most slot bytes)
// in the lines of its region after line 0, each with the sequence number
// stored after its data; then line 0 with the info and the first of the
// data, its number last, an atomic store (a full fence: every store of the
// collective is visible before it, and before the loads of await; see
// wake).
func (s *shmColl) arrive(info uint64, data []byte) {
	s.seq++
	s.next, s.polls = 0, 0
	s.info, s.lines = info, regionLines(len(data))
	par := s.seq & 1
	for l := 1; l < s.lines; l++ {
		b := s.line(s.r, par, l)
		copy(b[8:], data[lineHead+(l-1)*lineData:])
		order.Store64(word(b, 0), s.seq)
	}
	b := s.line(s.r, par, 0)
	copy(b[24:], data)
	order.Store64(word(b, 8), info)
	raceRelease(s.race)
	word(b, 0).Store(s.seq)
}

// drowsy returns rank j's drowsy word of the current collective. It lies
// in a line the waker has just read (line 0).
func (s *shmColl) drowsy(j int) *atomic.Uint64 {
	return word(s.line(j, s.seq&1, 0), 16)
}

// arrived reports whether every rank has arrived at this rank's collective,
// or a rank of the communicator is known to have failed (await tells).
func (s *shmColl) arrived() bool {
	s.polls++
	if s.polls == s.drowsyAt {
		s.drowsy(s.r).Store(s.seq)
	}
	return s.scan() || s.c.ft.nfailed > 0 || s.c.ft.revoked
}

// scan moves next past the ranks that have arrived and reports whether
// all have. A rank has arrived when each line this rank's collective
// covers holds the current sequence number in that rank's region, or when
// its line 0 does with another collective's info (await reports the
// mismatch: its other lines may never come). All of a rank's lines are
// loaded before any is compared, so that their trips from the writer's
// core overlap.
//
// It skips this rank's own lines (see gather): a spin that looked at them
// too, and counted its polls, made a 64-byte Allreduce of two ranks take
// 1.14x the time.
func (s *shmColl) scan() bool {
	par := s.seq & 1
	for ; s.next < s.p; s.next++ {
		if s.next == s.r {
			continue
		}
		l0 := s.line(s.next, par, 0)
		head := word(l0, 0).Load() != s.seq
		rest := false
		for l := 1; l < s.lines; l++ {
			if word(s.line(s.next, par, l), 0).Load() != s.seq {
				rest = true
			}
		}
		if head || rest && word(l0, 8).Load() == s.info {
			return false
		}
	}
	return true
}

// await waits until every rank has arrived, and checks that every rank
// runs the collective this rank does.
func (s *shmColl) await(ctx context.Context) error {
	c, e := s.c, s.c.e
	if !e.oversub {
		for i := 0; i < sharedArrivalSpin && !s.scan(); i++ {
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
		if j == s.r {
			continue // its own lines: see gather
		}
		if got := word(s.line(j, par, 0), 8).Load(); got != s.info {
			return s.mismatch(j, got, s.info)
		}
	}
	return nil
}

// gather copies rank j's data of the current collective into dst. Not for
// this rank's own data, which its writer keeps a copy of (allreduceShared):
// a 64-byte Allreduce of two ranks took 1.12x the time reading its own
// data (or its own info) back from the segment. A guess, not checked: a
// line written by one core and then read by another can move to the
// reader whole, as processors do for data that migrates, and reading it
// back then costs its writer a trip between the cores.
func (s *shmColl) gather(j int, dst []byte) {
	par := s.seq & 1
	n := copy(dst, s.line(j, par, 0)[24:])
	for l := 1; n < len(dst); l++ {
		n += copy(dst[n:], s.line(j, par, l)[8:])
	}
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
	err := s.await(ctx)
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
	// This rank's own data, a copy: send may be acc, which the combining
	// overwrites, and a non-commutative op overwrites its second operand.
	own := s.own[:n]
	copy(own, send)
	s.arrive(info, send)
	if err := s.await(ctx); err != nil {
		return err
	}
	t := s.tmp[:n]
	for j := 0; j < s.p; j++ {
		d := own
		if j != s.r {
			s.gather(j, t)
			d = t
		}
		switch {
		case j == 0:
			copy(acc, d)
		case op.commute:
			combine(k, op, d, acc)
		default:
			combine(k, op, acc, d)
			copy(acc, d)
		}
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
	region := 64 * regionLines(slot)
	stride := (2*region + 127) &^ 127
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
	s := &shmColl{c: c, seg: seg, p: c.size, r: c.rank, slot: slot, region: region, stride: stride, tmp: make([]byte, slot), own: make([]byte, slot), race: raceKey(id)}
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
