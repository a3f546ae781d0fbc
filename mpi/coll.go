package mpi

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/amigo-hpc/amigo"
)

// Collectives. Every rank of the communicator must call the same
// collectives in the same order, with matching arguments (the same root, op
// and element counts). Blocking collectives return once this rank's part is
// done and its buffers may be reused; ctx bounds the wait. Nonblocking ones
// (Ibarrier, Ibcast, Iallreduce, ...) return a Request; their buffers belong
// to the operation until it completes.
//
// Where MPI has MPI_IN_PLACE, a nil send buffer means in place: the input
// is taken from the receive buffer (for Gather and Scatter, from the root's
// own block of it).

// Barrier returns once every rank of c has called it.
//
// Ranks that all run on one host (up to 64 of them) meet in a segment of
// shared memory of c (coll_shm.go): each stores its arrival and waits for
// the others', and no message is sent. Other ranks exchange messages: on
// up to Options.BarrierFlatRanks ranks (16 by default) every rank checks
// in with rank 0, which releases them all: two rounds, and each rank waits
// for one message, however the ranks are scheduled. Two ranks, and more
// than that bound, use dissemination (ceil(log2 p) rounds of exchanges).
//
// Barrier by messages runs without a schedule (its messages are empty, and
// each round waits for one of them); Ibarrier, on any communicator, sends
// the same messages from one.
func (c *Comm) Barrier(ctx context.Context) error {
	if c == nil {
		return c.check()
	}
	s, err := c.shared(ctx, 0)
	if err != nil {
		return err
	}
	c.e.lock()
	defer c.e.unlock()
	return c.barrier(ctx, s)
}

// barrier is Barrier with the engine locked, on the shared segment s if not
// nil. (Apart from Barrier, so that each has one defer and its defers stay
// open-coded: a stack-allocated defer costs a deferreturn of some 200
// instructions a call.)
func (c *Comm) barrier(ctx context.Context, s *shmColl) error {
	if err := c.check(); err != nil {
		return err
	}
	if s != nil {
		return s.barrier(ctx)
	}
	if c.e.inDirect {
		// Another goroutine's collective uses the engine's scratch.
		s, _ := c.barrierSched()
		return c.run(ctx, s)
	}
	tag := c.holdDirect()
	defer c.releaseDirect()
	p, r := c.size, c.rank
	if p > 2 && p <= c.e.opts.BarrierFlatRanks {
		if r != 0 {
			if err := c.sendDirect(0, tag, nil); err != nil {
				return err
			}
			return c.recvDirect(ctx, 0, tag, nil)
		}
		for i := 1; i < p; i++ {
			if err := c.recvDirect(ctx, i, tag, nil); err != nil {
				return err
			}
		}
		for i := 1; i < p; i++ {
			if err := c.sendDirect(i, tag, nil); err != nil {
				return err
			}
		}
	} else {
		for k := 1; k < p; k <<= 1 {
			if err := c.sendDirect((r+k)%p, tag, nil); err != nil {
				return err
			}
			if err := c.recvDirect(ctx, (r-k+p)%p, tag, nil); err != nil {
				return err
			}
		}
	}
	c.e.flush()
	return nil
}

// holdDirect begins a blocking collective run without a schedule (Barrier,
// and the small Bcast, Reduce, Allreduce, Allgather, Alltoall): it takes the collective's tag, as newSched does, and
// claims the engine's scratch until releaseDirect (the context is held
// already: the engine's lock is its hold). Such a collective sends only
// messages that travel by SendImmediate (sendDirect) and receives only
// messages of known length (recvDirect), so it needs no request, schedule
// or buffer; its messages are those the schedule of the same collective
// sends, with the same tags.
func (c *Comm) holdDirect() int32 {
	e := c.e
	tag := int32(c.seq & TagUB)
	c.seq++
	e.stats.Collectives++
	e.pollStart()
	e.inDirect = true
	return tag
}

// releaseDirect ends what holdDirect began.
func (c *Comm) releaseDirect() { c.e.inDirect = false }

// sendDirect sends buf, at most immMax bytes, to rank peer with the
// collective's tag.
func (c *Comm) sendDirect(peer int, tag int32, buf []byte) error {
	e := c.e
	e.direct = true
	_, err := e.sendMsg(c.eps[peer], c.coll, int32(c.rank), tag, buf, false)
	e.direct = false
	return err
}

// recvDirect receives rank peer's message with the collective's tag, which
// must carry exactly len(buf) bytes, into buf.
func (c *Comm) recvDirect(ctx context.Context, peer int, tag int32, buf []byte) error {
	return c.e.recvSmall(ctx, c.coll, int32(peer), tag, buf)
}

// Ibarrier starts a barrier; the request completes once every rank of c
// has started it.
func (c *Comm) Ibarrier() (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := c.barrierSched()
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

func (c *Comm) barrierSched() (*sched, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	s := c.e.newSched(c)
	if c.size > 2 && c.size <= c.e.opts.BarrierFlatRanks {
		s.barrierFlat()
	} else {
		s.barrier()
	}
	return s, nil
}

// Bcast sends buf from rank root to every rank of c, which receive it into
// their buf of the same length.
//
// Small messages on up to 16 ranks go from the root to each rank directly
// (Options.BcastFlatMax, BcastFlatRanks: 4 KiB, 16); other small messages,
// and any message between two ranks, go down a binomial tree; larger ones are pipelined along a chain in segments
// (Options.BcastShortMax, BcastSegment). From Options.BcastMulticastMin
// bytes on (256 KiB by default), a broadcast to more than two ranks uses the
// AMI's RDMA multicast instead (seed 004: one announcement, check-in
// acknowledgements, one direct put of the data forwarded along the ranks).
//
// A blocking Bcast of data that fits a descriptor with its header runs the
// flat or binomial algorithm without a schedule (as Barrier does); Ibcast
// sends the same messages from one.
func Bcast[T Numeric](ctx context.Context, c *Comm, buf []T, root int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	b := Bytes(buf)
	if !c.e.inDirect && c.size > 1 && len(b) > 0 && len(b) <= c.e.immMax {
		// The algorithms bcastSched would choose, without a schedule.
		n, p, o := len(b), c.size, &c.e.opts
		if !(n >= o.BcastMulticastMin && p > 2) && (n <= o.BcastFlatMax && p <= o.BcastFlatRanks || n <= o.BcastShortMax || p <= 2) {
			return c.bcastSmall(ctx, b, root)
		}
	}
	s, err := bcastSched(c, b, root)
	if err != nil {
		return err
	}
	return c.run(ctx, s)
}

// bcastSmall is a blocking Bcast of at most immMax bytes: bcastFlat or
// bcastBinomial as bcastSched would choose, run in place of a schedule.
// A rank whose message has another length gets ErrCount.
func (c *Comm) bcastSmall(ctx context.Context, buf []byte, root int) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	tag := c.holdDirect()
	defer c.releaseDirect()
	p := c.size
	o := &c.e.opts
	if len(buf) <= o.BcastFlatMax && p <= o.BcastFlatRanks {
		if c.rank != root {
			return c.recvDirect(ctx, root, tag, buf)
		}
		for i := 1; i < p; i++ {
			if err := c.sendDirect((root+i)%p, tag, buf); err != nil {
				return err
			}
		}
		c.e.flush()
		return nil
	}
	vr := (c.rank - root + p) % p
	mask := 1
	for mask < p {
		if vr&mask != 0 {
			if err := c.recvDirect(ctx, (vr-mask+root)%p, tag, buf); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			if err := c.sendDirect((vr+mask+root)%p, tag, buf); err != nil {
				return err
			}
		}
	}
	c.e.flush()
	return nil
}

// Ibcast starts a Bcast.
func Ibcast[T Numeric](c *Comm, buf []T, root int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := bcastSched(c, Bytes(buf), root)
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

func bcastSched(c *Comm, buf []byte, root int) (*sched, error) {
	if err := c.checkRoot(root); err != nil {
		return nil, err
	}
	s := c.e.newSched(c)
	n, p := len(buf), c.size
	o := &c.e.opts
	switch {
	case p == 1 || n == 0:
	case n >= o.BcastMulticastMin && p > 2 && c.bcastMulticast(s, buf, root):
	case n <= o.BcastFlatMax && p <= o.BcastFlatRanks:
		s.bcastFlat(buf, root)
	case n <= o.BcastShortMax || p <= 2:
		s.bcastBinomial(buf, root)
	default:
		s.bcastChain(buf, root, o.BcastSegment)
	}
	return s, nil
}

// bcastMulticast broadcasts buf with the AMI's RDMA multicast (seed 004):
// the root announces it once to every other rank, in chain order from the
// root, and sends the data once, which each target deposits and forwards
// along the chain; the targets' receives match the announcement like any
// message, so a target names its buffer when it has posted its receive.
// The root's step completes with the multicast's "sent" callback, each
// target's with its receive.
func (c *Comm) bcastMulticast(s *sched, buf []byte, root int) bool {
	if c.rank != root {
		s.recv(buf, root)
		s.end()
		return true
	}
	targets := make([]amigo.Endpoint, 0, c.size-1)
	for i := 1; i < c.size; i++ {
		targets = append(targets, c.eps[(root+i)%c.size])
	}
	var hdr [hdrLen]byte
	putHdr(&hdr, c.coll, int32(root), s.tag)
	ac, disp := c.e.ac, c.e.disp
	s.call(func(done func(error)) error { return ac.Multicast(targets, disp, hdr[:], buf, done) })
	s.end()
	return true
}

// Reduce combines send of every rank of c element-wise with op, in rank
// order, into recv at root. recv is used at root only; send nil at root
// means in place (the input is in recv).
//
// Small messages and non-commutative ops go up a binomial tree; larger ones
// with a commutative op are reduce-scattered by recursive halving and the
// blocks gathered at the root (Options.ReduceShortMax). A blocking Reduce
// of data that fits a descriptor with its header climbs the tree without a
// schedule.
func Reduce[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op, root int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	if n := len(send) * sizeOf[T](); !c.e.inDirect && c.size > 1 && n > 0 && n <= c.e.immMax &&
		!(op.commute && n > c.e.opts.ReduceShortMax && len(send) >= pof2(c.size)) {
		return reduceSmall(ctx, c, send, recv, op, root)
	}
	s, err := reduceSched(c, send, recv, op, root)
	if err != nil {
		return err
	}
	return c.run(ctx, s)
}

// reduceSmall is a blocking Reduce of data small enough to travel in a
// descriptor with its header: reduceBinomial run in place of a schedule,
// with the same messages and order of operands.
func reduceSmall[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op, root int) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	k := kindOf[T]()
	if err := op.check(k); err != nil {
		return err
	}
	if err := op.checkPairs(max(len(send), len(recv))); err != nil {
		return err
	}
	e := c.e
	n := len(send) * sizeOf[T]()
	var acc []byte
	if c.rank == root {
		if len(recv) != len(send) {
			return fmt.Errorf("%w: Reduce: recv of %d elements for send of %d", ErrCount, len(recv), len(send))
		}
		if err := noOverlap(send, recv); err != nil {
			return err
		}
		acc = Bytes(recv)
	} else {
		acc = Bytes(e.partial[:])[:n]
	}
	copy(acc, Bytes(send))
	tag := c.holdDirect()
	defer c.releaseDirect()
	t := Bytes(e.small[:])[:n]
	p := c.size
	tree := root
	if !op.commute {
		tree = 0
	}
	vr := (c.rank - tree + p) % p
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			if err := c.sendDirect((vr-mask+tree)%p, tag, acc); err != nil {
				return err
			}
			break
		}
		if src := vr | mask; src < p {
			if err := c.recvDirect(ctx, (src+tree)%p, tag, t); err != nil {
				return err
			}
			if op.commute {
				combine(k, op, t, acc)
			} else {
				combine(k, op, acc, t)
				copy(acc, t)
			}
		}
	}
	if tree != root {
		switch c.rank {
		case tree:
			if err := c.sendDirect(root, tag, acc); err != nil {
				return err
			}
		case root:
			if err := c.recvDirect(ctx, tree, tag, acc); err != nil {
				return err
			}
		}
	}
	e.flush()
	return nil
}

// Ireduce starts a Reduce.
func Ireduce[T Numeric](c *Comm, send, recv []T, op Op, root int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := reduceSched(c, send, recv, op, root)
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

func reduceSched[T Numeric](c *Comm, send, recv []T, op Op, root int) (*sched, error) {
	if err := c.checkRoot(root); err != nil {
		return nil, err
	}
	k := kindOf[T]()
	if err := op.check(k); err != nil {
		return nil, err
	}
	if err := op.checkPairs(max(len(send), len(recv))); err != nil {
		return nil, err
	}
	count := len(send)
	atRoot := c.rank == root
	if atRoot {
		if send == nil {
			count = len(recv)
		} else if len(recv) != len(send) {
			return nil, fmt.Errorf("%w: Reduce: recv of %d elements for send of %d", ErrCount, len(recv), len(send))
		}
		if err := noOverlap(send, recv); err != nil {
			return nil, err
		}
	} else if send == nil {
		return nil, fmt.Errorf("%w: Reduce: nil send buffer away from the root", ErrCount)
	}
	es := sizeOf[T]()
	n := count * es
	s := c.e.newSched(c)
	s.k, s.op = k, op
	var acc []byte
	if atRoot {
		acc = Bytes(recv)
	} else {
		acc = s.tmp(n)
	}
	switch {
	case c.size == 1 || n == 0:
		if send != nil {
			s.copy(acc, Bytes(send))
		}
	case op.commute && n > c.e.opts.ReduceShortMax && count >= pof2(c.size):
		var out []byte
		if atRoot {
			out = acc
		}
		s.reduceRSG(Bytes(send), acc, out, count, es, root)
	default:
		if send != nil {
			s.copy(acc, Bytes(send))
		}
		s.reduceBinomial(acc, root)
	}
	return s, nil
}

// Allreduce combines send of every rank of c element-wise with op, in rank
// order, into recv on every rank; send nil means in place. Every rank gets
// the same result, bit for bit.
//
// On ranks that all run on one host, data of up to Options.SharedCollMax
// bytes (256 by default) goes through a segment of shared memory of c
// (coll_shm.go): each rank stores its data, and reads and combines every
// rank's once all have stored theirs. Otherwise, small messages and non-commutative ops use recursive doubling (on a
// power of two ranks, data that fits a descriptor with its header runs it
// without building a schedule); larger
// ones with a commutative op a reduce-scatter by recursive halving and an
// allgather by recursive doubling (Rabenseifner's algorithm,
// Options.AllreduceShortMax). Ranks beyond a power of two hand their data to
// a neighbour first and get the result back last.
func Allreduce[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return c.check()
	}
	var s *shmColl
	if n := len(recv) * sizeOf[T](); n > 0 && c.shmState != shmOff {
		var err error
		if s, err = c.shared(ctx, n); err != nil {
			return err
		}
	}
	// One defer and few returns: the defer stays open-coded (see barrier).
	c.e.lock()
	defer c.e.unlock()
	if s != nil {
		k, err := checkReduce(c, send, recv, op, "Allreduce")
		if err != nil {
			return err
		}
		return allreduceShared(ctx, s, k, op, Bytes(send), Bytes(recv))
	}
	n := len(recv) * sizeOf[T]()
	switch {
	case c.e.inDirect:
	case c.flatAllreduce(n):
		return allreduceFlat(ctx, c, send, recv, op)
	case c.size > 1 && c.size&(c.size-1) == 0 && n > 0 && n <= c.e.immMax &&
		!(op.commute && n > c.e.opts.AllreduceShortMax && len(recv) >= c.size):
		return allreduceSmall(ctx, c, send, recv, op)
	}
	sc, err := allreduceSched(c, send, recv, op)
	if err != nil {
		return err
	}
	return c.run(ctx, sc)
}

// checkReduce checks the arguments of an element-wise reduction (Allreduce,
// Scan, Exscan): a usable communicator, an op defined on T, send nil (in
// place) or as long as recv, and no overlap; it returns T's kind.
func checkReduce[T Numeric](c *Comm, send, recv []T, op Op, name string) (kind, error) {
	if err := c.check(); err != nil {
		return kInvalid, err
	}
	k := kindOf[T]()
	if err := op.check(k); err != nil {
		return kInvalid, err
	}
	if err := op.checkPairs(len(recv)); err != nil {
		return kInvalid, err
	}
	if send != nil && len(send) != len(recv) {
		return kInvalid, fmt.Errorf("%w: %s: recv of %d elements for send of %d", ErrCount, name, len(recv), len(send))
	}
	if err := noOverlap(send, recv); err != nil {
		return kInvalid, err
	}
	return k, nil
}

// allreduceSmall is a blocking Allreduce of data small enough to travel
// in a descriptor with its header (amigo.Context.SendImmediate), on a power
// of two ranks: recursive doubling as allreduceRD builds it, run in place
// of a schedule. It uses the same tags, matching and order of operands as
// the schedule, so its messages and results are those of the general path;
// what it saves is the schedule's bookkeeping, a third of the layer's cost
// per collective at this size.
func allreduceSmall[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	k, err := checkReduce(c, send, recv, op, "Allreduce")
	if err != nil {
		return err
	}
	acc := Bytes(recv)
	if send != nil {
		copy(acc, Bytes(send))
	}
	e := c.e
	tag := c.holdDirect()
	defer c.releaseDirect()
	t := Bytes(e.small[:])[:len(acc)]
	for mask := 1; mask < c.size; mask <<= 1 {
		peer := c.rank ^ mask
		if err := c.sendDirect(peer, tag, acc); err != nil {
			return err
		}
		if err := c.recvDirect(ctx, peer, tag, t); err != nil {
			return err
		}
		if peer < c.rank {
			combine(k, op, t, acc)
		} else if op.commute {
			combine(k, op, t, acc)
		} else {
			combine(k, op, acc, t)
			copy(acc, t)
		}
	}
	e.flush()
	return nil
}

// flatAllreduce reports whether an Allreduce of n bytes on c gathers at rank
// 0 and is sent back by it (Options.AllreduceFlatRanks): on more than 4
// ranks of a job with an oversubscribed host (engine.oversubJob: every rank
// must choose the same). Measured on a 2-core host, 64 B, against
// recursive doubling: 8 ranks 48-52 us against 74-86, 16 ranks 121-136
// against 240-250; but 4 ranks 16-20 against 10-15, two rounds of
// exchanges between pairs costing less than rank 0's three receptions.
func (c *Comm) flatAllreduce(n int) bool {
	return c.size > 4 && c.size <= c.e.opts.AllreduceFlatRanks && n > 0 && n <= c.e.immMax && c.e.oversubJob
}

// allreduceFlat is a blocking Allreduce of at most immMax bytes on an
// oversubscribed host: every rank sends its data to rank 0, which combines
// them in rank order (so that it serves non-commutative ops) and sends the
// result back to each. Each rank other than 0 waits once, for the result;
// recursive doubling makes every rank wait log2 p times, and where ranks
// outnumber processors each wait is for a sender to get a processor
// (Options.AllreduceFlatRanks). allreduceSched builds the same messages.
func allreduceFlat[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	k, err := checkReduce(c, send, recv, op, "Allreduce")
	if err != nil {
		return err
	}
	acc := Bytes(recv)
	if send != nil {
		copy(acc, Bytes(send))
	}
	e := c.e
	tag := c.holdDirect()
	defer c.releaseDirect()
	if c.rank != 0 {
		if err := c.sendDirect(0, tag, acc); err != nil {
			return err
		}
		if err := c.recvDirect(ctx, 0, tag, acc); err != nil {
			return err
		}
		e.flush()
		return nil
	}
	t := Bytes(e.small[:])[:len(acc)]
	for i := 1; i < c.size; i++ {
		if err := c.recvDirect(ctx, i, tag, t); err != nil {
			return err
		}
		if op.commute {
			combine(k, op, t, acc)
		} else {
			combine(k, op, acc, t)
			copy(acc, t)
		}
	}
	for i := 1; i < c.size; i++ {
		if err := c.sendDirect(i, tag, acc); err != nil {
			return err
		}
	}
	e.flush()
	return nil
}

// Iallreduce starts an Allreduce.
func Iallreduce[T Numeric](c *Comm, send, recv []T, op Op) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := allreduceSched(c, send, recv, op)
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

func allreduceSched[T Numeric](c *Comm, send, recv []T, op Op) (*sched, error) {
	k, err := checkReduce(c, send, recv, op, "Allreduce")
	if err != nil {
		return nil, err
	}
	es := sizeOf[T]()
	count := len(recv)
	acc := Bytes(recv)
	s := c.e.newSched(c)
	s.k, s.op = k, op
	switch {
	case c.size == 1 || count == 0:
		if send != nil {
			s.copy(acc, Bytes(send))
		}
	case c.flatAllreduce(len(acc)):
		if send != nil {
			s.copy(acc, Bytes(send))
		}
		s.allreduceFlat(acc)
	case op.commute && len(acc) > c.e.opts.AllreduceShortMax && count >= pof2(c.size):
		s.allreduceRSAG(Bytes(send), acc, count, es)
	default:
		if send != nil {
			s.copy(acc, Bytes(send))
		}
		s.allreduceRD(acc)
	}
	return s, nil
}

// Gather collects send of every rank of c into recv at root, in rank order:
// recv holds Size blocks of len(send) elements. recv is used at root only;
// send nil at root means in place (the root's block is already in recv).
func Gather[T Numeric](ctx context.Context, c *Comm, send, recv []T, root int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return gatherWith(c, send, recv, root, func(s *sched) error { return c.run(ctx, s) })
}

// Igather starts a Gather; see Gather. The buffers belong to the operation until
// the request completes.
func Igather[T Numeric](c *Comm, send, recv []T, root int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := gatherWith(c, send, recv, root, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// gatherWith checks the arguments of Gather, builds its schedule and hands it
// to finish, with the engine locked.
func gatherWith[T Numeric](c *Comm, send, recv []T, root int, finish func(*sched) error) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	p := c.size
	atRoot := c.rank == root
	count := len(send)
	if atRoot {
		if send == nil {
			if len(recv)%p != 0 {
				return fmt.Errorf("%w: Gather in place: recv of %d elements for %d ranks", ErrCount, len(recv), p)
			}
			count = len(recv) / p
			send = recv[root*count : (root+1)*count]
		} else {
			if len(recv) < p*count {
				return fmt.Errorf("%w: Gather: recv of %d elements for %d ranks of %d", ErrCount, len(recv), p, count)
			}
			if err := noOverlap(send, recv); err != nil {
				return err
			}
		}
	}
	es := sizeOf[T]()
	bs := count * es
	s := c.e.newSched(c)
	sb, rb := Bytes(send), Bytes(recv)
	switch {
	case p == 1:
		s.copy(rb[:bs], sb)
	case p*bs <= c.e.opts.GatherShortMax && p > 2:
		if !atRoot {
			rb = nil
		}
		s.gatherBinomial(sb, rb, bs, root)
	default:
		s.gatherLinear(sb, rb, root, func(i int) (int, int) { return i * bs, (i + 1) * bs })
	}
	return finish(s)
}

// Gatherv collects send of every rank of c into recv at root: rank i's
// block of counts[i] elements at displs[i]. counts and displs are used at
// root only.
func Gatherv[T Numeric](ctx context.Context, c *Comm, send, recv []T, counts, displs []int, root int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return gathervWith(c, send, recv, counts, displs, root, func(s *sched) error { return c.run(ctx, s) })
}

// Igatherv starts a Gatherv; see Gatherv. The buffers belong to the operation until
// the request completes.
func Igatherv[T Numeric](c *Comm, send, recv []T, counts, displs []int, root int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := gathervWith(c, send, recv, counts, displs, root, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// gathervWith checks the arguments of Gatherv, builds its schedule and hands it
// to finish, with the engine locked.
func gathervWith[T Numeric](c *Comm, send, recv []T, counts, displs []int, root int, finish func(*sched) error) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	es := sizeOf[T]()
	var off func(int) (int, int)
	if c.rank == root {
		if err := checkBlocks(c.size, counts, displs, len(recv)); err != nil {
			return fmt.Errorf("Gatherv: %w", err)
		}
		if send == nil {
			send = recv[displs[root] : displs[root]+counts[root]]
		} else if len(send) != counts[root] {
			return fmt.Errorf("%w: Gatherv: root sends %d elements, counts says %d", ErrCount, len(send), counts[root])
		}
		off = func(i int) (int, int) { return displs[i] * es, (displs[i] + counts[i]) * es }
	}
	s := c.e.newSched(c)
	s.gatherLinear(Bytes(send), Bytes(recv), root, off)
	return finish(s)
}

func (s *sched) gatherLinear(send, recv []byte, root int, off func(int) (int, int)) {
	c := s.c
	if c.rank != root {
		s.send(send, root)
		s.end()
		return
	}
	for i := 0; i < c.size; i++ {
		lo, hi := off(i)
		if i == root {
			s.copy(recv[lo:hi], send)
		} else {
			s.recv(recv[lo:hi], i)
		}
	}
	s.end()
}

// Scatter sends block i of send at root (Size blocks of len(recv) elements)
// to rank i of c, which receives it into recv. send is used at root only;
// recv nil at root means in place (the root's block stays in send).
func Scatter[T Numeric](ctx context.Context, c *Comm, send, recv []T, root int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return scatterWith(c, send, recv, root, func(s *sched) error { return c.run(ctx, s) })
}

// Iscatter starts a Scatter; see Scatter. The buffers belong to the operation until
// the request completes.
func Iscatter[T Numeric](c *Comm, send, recv []T, root int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := scatterWith(c, send, recv, root, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// scatterWith checks the arguments of Scatter, builds its schedule and hands it
// to finish, with the engine locked.
func scatterWith[T Numeric](c *Comm, send, recv []T, root int, finish func(*sched) error) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	p := c.size
	atRoot := c.rank == root
	count := len(recv)
	if atRoot {
		if recv == nil {
			if len(send)%p != 0 {
				return fmt.Errorf("%w: Scatter in place: send of %d elements for %d ranks", ErrCount, len(send), p)
			}
			count = len(send) / p
		} else {
			if len(send) < p*count {
				return fmt.Errorf("%w: Scatter: send of %d elements for %d ranks of %d", ErrCount, len(send), p, count)
			}
			if err := noOverlap(send, recv); err != nil {
				return err
			}
		}
	}
	es := sizeOf[T]()
	bs := count * es
	s := c.e.newSched(c)
	sb, rb := Bytes(send), Bytes(recv)
	switch {
	case p == 1:
		if rb != nil {
			s.copy(rb, sb[:bs])
		}
	case p*bs <= c.e.opts.GatherShortMax && p > 2:
		s.scatterBinomial(sb, rb, bs, root)
	default:
		s.scatterLinear(sb, rb, root, func(i int) (int, int) { return i * bs, (i + 1) * bs })
	}
	return finish(s)
}

// Scatterv sends rank i of c the block of counts[i] elements at displs[i]
// of send at root. send, counts and displs are used at root only.
func Scatterv[T Numeric](ctx context.Context, c *Comm, send []T, counts, displs []int, recv []T, root int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return scattervWith(c, send, counts, displs, recv, root, func(s *sched) error { return c.run(ctx, s) })
}

// Iscatterv starts a Scatterv; see Scatterv. The buffers belong to the operation until
// the request completes.
func Iscatterv[T Numeric](c *Comm, send []T, counts, displs []int, recv []T, root int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := scattervWith(c, send, counts, displs, recv, root, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// scattervWith checks the arguments of Scatterv, builds its schedule and hands it
// to finish, with the engine locked.
func scattervWith[T Numeric](c *Comm, send []T, counts, displs []int, recv []T, root int, finish func(*sched) error) error {
	if err := c.checkRoot(root); err != nil {
		return err
	}
	es := sizeOf[T]()
	var off func(int) (int, int)
	if c.rank == root {
		if err := checkBlocks(c.size, counts, displs, len(send)); err != nil {
			return fmt.Errorf("Scatterv: %w", err)
		}
		if recv != nil && len(recv) < counts[root] {
			return fmt.Errorf("%w: Scatterv: root receives %d elements into %d", ErrCount, counts[root], len(recv))
		}
		off = func(i int) (int, int) { return displs[i] * es, (displs[i] + counts[i]) * es }
	}
	s := c.e.newSched(c)
	s.scatterLinear(Bytes(send), Bytes(recv), root, off)
	return finish(s)
}

func (s *sched) scatterLinear(send, recv []byte, root int, off func(int) (int, int)) {
	c := s.c
	if c.rank != root {
		s.recv(recv, root)
		s.end()
		return
	}
	for i := 0; i < c.size; i++ {
		lo, hi := off(i)
		if i == root {
			if recv != nil {
				s.copy(recv[:hi-lo], send[lo:hi])
			}
		} else {
			s.send(send[lo:hi], i)
		}
	}
	s.end()
}

// Allgather collects send of every rank of c into recv on every rank, in
// rank order: recv holds Size blocks of len(send) elements. send nil means
// in place (this rank's block is already in recv).
//
// Small results use Bruck's algorithm (ceil(log2 p) rounds); larger ones go
// around a ring (Options.AllgatherShortMax). A blocking Allgather whose
// whole result fits a descriptor with its header runs Bruck's algorithm
// without a schedule.
func Allgather[T Numeric](ctx context.Context, c *Comm, send, recv []T) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	if !c.e.inDirect && c.size > 1 {
		bs := len(send) * sizeOf[T]()
		if send == nil {
			bs = len(recv) / c.size * sizeOf[T]()
		}
		if n := c.size * bs; bs > 0 && n <= c.e.immMax && n <= c.e.opts.AllgatherShortMax {
			return allgatherSmall(ctx, c, send, recv)
		}
	}
	s, err := allgatherSched(c, send, recv)
	if err != nil {
		return err
	}
	return c.run(ctx, s)
}

// Iallgather starts an Allgather.
func Iallgather[T Numeric](c *Comm, send, recv []T) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := allgatherSched(c, send, recv)
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

// allgatherCheck checks Allgather's arguments and returns the size of a
// block in bytes.
func allgatherCheck[T Numeric](c *Comm, send, recv []T) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	p := c.size
	count := len(send)
	if send == nil {
		if len(recv)%p != 0 {
			return 0, fmt.Errorf("%w: Allgather in place: recv of %d elements for %d ranks", ErrCount, len(recv), p)
		}
		count = len(recv) / p
	} else {
		if len(recv) < p*count {
			return 0, fmt.Errorf("%w: Allgather: recv of %d elements for %d ranks of %d", ErrCount, len(recv), p, count)
		}
		if err := noOverlap(send, recv); err != nil {
			return 0, err
		}
	}
	return count * sizeOf[T](), nil
}

// allgatherSmall is a blocking Allgather whose result, Size blocks, fits
// a descriptor with its header: allgatherBruck run in place of a schedule,
// with the same messages.
func allgatherSmall[T Numeric](ctx context.Context, c *Comm, send, recv []T) error {
	bs, err := allgatherCheck(c, send, recv)
	if err != nil {
		return err
	}
	p, r := c.size, c.rank
	rb := Bytes(recv)
	t := Bytes(c.e.partial[:])[:p*bs]
	if send != nil {
		copy(t[:bs], Bytes(send))
	} else {
		copy(t[:bs], rb[r*bs:(r+1)*bs])
	}
	tag := c.holdDirect()
	defer c.releaseDirect()
	for k := 1; k < p; k <<= 1 {
		cnt := min(k, p-k)
		if err := c.sendDirect((r-k+p)%p, tag, t[:cnt*bs]); err != nil {
			return err
		}
		if err := c.recvDirect(ctx, (r+k)%p, tag, t[k*bs:(k+cnt)*bs]); err != nil {
			return err
		}
	}
	// t holds the blocks of ranks r, r+1, ...
	copy(rb[r*bs:p*bs], t[:(p-r)*bs])
	copy(rb[:r*bs], t[(p-r)*bs:p*bs])
	c.e.flush()
	return nil
}

func allgatherSched[T Numeric](c *Comm, send, recv []T) (*sched, error) {
	bs, err := allgatherCheck(c, send, recv)
	if err != nil {
		return nil, err
	}
	p, r := c.size, c.rank
	rb := Bytes(recv)
	s := c.e.newSched(c)
	switch {
	case p > 1 && bs > 0 && p*bs > c.e.opts.AllgatherShortMax:
		s.allgatherRing(rb, Bytes(send), func(i int) (int, int) { return i * bs, (i + 1) * bs })
		return s, nil
	case send != nil:
		s.copy(rb[r*bs:(r+1)*bs], Bytes(send))
	}
	if p > 1 && bs > 0 {
		s.allgatherBruck(rb, bs)
	}
	return s, nil
}

// Allgatherv collects send of every rank of c into recv on every rank: rank
// i's block of counts[i] elements at displs[i]. send nil means in place.
func Allgatherv[T Numeric](ctx context.Context, c *Comm, send, recv []T, counts, displs []int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return allgathervWith(c, send, recv, counts, displs, func(s *sched) error { return c.run(ctx, s) })
}

// Iallgatherv starts a Allgatherv; see Allgatherv. The buffers belong to the operation until
// the request completes.
func Iallgatherv[T Numeric](c *Comm, send, recv []T, counts, displs []int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := allgathervWith(c, send, recv, counts, displs, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// allgathervWith checks the arguments of Allgatherv, builds its schedule and hands it
// to finish, with the engine locked.
func allgathervWith[T Numeric](c *Comm, send, recv []T, counts, displs []int, finish func(*sched) error) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := checkBlocks(c.size, counts, displs, len(recv)); err != nil {
		return fmt.Errorf("Allgatherv: %w", err)
	}
	r := c.rank
	if send != nil && len(send) != counts[r] {
		return fmt.Errorf("%w: Allgatherv: rank %d sends %d elements, counts says %d", ErrCount, r, len(send), counts[r])
	}
	es := sizeOf[T]()
	rb := Bytes(recv)
	off := func(i int) (int, int) { return displs[i] * es, (displs[i] + counts[i]) * es }
	s := c.e.newSched(c)
	if c.size > 1 {
		s.allgatherRing(rb, Bytes(send), off)
	} else if send != nil {
		lo, hi := off(r)
		s.copy(rb[lo:hi], Bytes(send))
	}
	return finish(s)
}

// Alltoall sends block i of send to rank i of c and receives rank i's block
// into block i of recv; send and recv hold Size blocks of the same length.
// Small blocks are all exchanged at once; larger ones one partner at a time
// (Options.AlltoallShortMax). A blocking Alltoall of small blocks that
// each fit a descriptor with its header runs without a schedule.
func Alltoall[T Numeric](ctx context.Context, c *Comm, send, recv []T) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	if !c.e.inDirect && c.size > 1 && len(send)%c.size == 0 {
		if bs := len(send) / c.size * sizeOf[T](); bs > 0 && bs <= c.e.immMax && bs <= c.e.opts.AlltoallShortMax {
			return alltoallSmall(ctx, c, send, recv)
		}
	}
	s, err := alltoallSched(c, send, recv)
	if err != nil {
		return err
	}
	return c.run(ctx, s)
}

// alltoallSmall is a blocking Alltoall of blocks of at most immMax bytes,
// all exchanged at once as alltoall without pairwise does, in place of a
// schedule: the same messages, sent to every peer before any is received.
func alltoallSmall[T Numeric](ctx context.Context, c *Comm, send, recv []T) error {
	if err := c.check(); err != nil {
		return err
	}
	p, r := c.size, c.rank
	if len(recv) < len(send) {
		return fmt.Errorf("%w: Alltoall: send of %d and recv of %d elements for %d ranks", ErrCount, len(send), len(recv), p)
	}
	if err := noOverlap(send, recv); err != nil {
		return err
	}
	bs := len(send) / p * sizeOf[T]()
	sb, rb := Bytes(send), Bytes(recv)
	copy(rb[r*bs:(r+1)*bs], sb[r*bs:(r+1)*bs])
	tag := c.holdDirect()
	defer c.releaseDirect()
	for i := 1; i < p; i++ {
		dst := (r + i) % p
		if err := c.sendDirect(dst, tag, sb[dst*bs:(dst+1)*bs]); err != nil {
			return err
		}
	}
	for i := 1; i < p; i++ {
		src := (r - i + p) % p
		if err := c.recvDirect(ctx, src, tag, rb[src*bs:(src+1)*bs]); err != nil {
			return err
		}
	}
	c.e.flush()
	return nil
}

// Ialltoall starts an Alltoall.
func Ialltoall[T Numeric](c *Comm, send, recv []T) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := alltoallSched(c, send, recv)
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

func alltoallSched[T Numeric](c *Comm, send, recv []T) (*sched, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	p := c.size
	if len(send)%p != 0 || len(recv) < len(send) {
		return nil, fmt.Errorf("%w: Alltoall: send of %d and recv of %d elements for %d ranks", ErrCount, len(send), len(recv), p)
	}
	if err := noOverlap(send, recv); err != nil {
		return nil, err
	}
	bs := len(send) / p * sizeOf[T]()
	off := func(i int) (int, int) { return i * bs, (i + 1) * bs }
	s := c.e.newSched(c)
	s.alltoall(Bytes(send), Bytes(recv), off, off, bs > c.e.opts.AlltoallShortMax)
	return s, nil
}

// Alltoallv sends rank i of c the block of scounts[i] elements at
// sdispls[i] of send, and receives rank i's block into the rcounts[i]
// elements at rdispls[i] of recv.
func Alltoallv[T Numeric](ctx context.Context, c *Comm, send []T, scounts, sdispls []int, recv []T, rcounts, rdispls []int) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return alltoallvWith(c, send, scounts, sdispls, recv, rcounts, rdispls, func(s *sched) error { return c.run(ctx, s) })
}

// Ialltoallv starts a Alltoallv; see Alltoallv. The buffers belong to the operation until
// the request completes.
func Ialltoallv[T Numeric](c *Comm, send []T, scounts, sdispls []int, recv []T, rcounts, rdispls []int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := alltoallvWith(c, send, scounts, sdispls, recv, rcounts, rdispls, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// alltoallvWith checks the arguments of Alltoallv, builds its schedule and hands it
// to finish, with the engine locked.
func alltoallvWith[T Numeric](c *Comm, send []T, scounts, sdispls []int, recv []T, rcounts, rdispls []int, finish func(*sched) error) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := checkBlocks(c.size, scounts, sdispls, len(send)); err != nil {
		return fmt.Errorf("Alltoallv send: %w", err)
	}
	if err := checkBlocks(c.size, rcounts, rdispls, len(recv)); err != nil {
		return fmt.Errorf("Alltoallv recv: %w", err)
	}
	if err := noOverlap(send, recv); err != nil {
		return err
	}
	if r := c.rank; scounts[r] != rcounts[r] {
		return fmt.Errorf("%w: Alltoallv: rank %d sends itself %d elements and receives %d", ErrCount, r, scounts[r], rcounts[r])
	}
	es := sizeOf[T]()
	soff := func(i int) (int, int) { return sdispls[i] * es, (sdispls[i] + scounts[i]) * es }
	roff := func(i int) (int, int) { return rdispls[i] * es, (rdispls[i] + rcounts[i]) * es }
	s := c.e.newSched(c)
	s.alltoall(Bytes(send), Bytes(recv), soff, roff, true)
	return finish(s)
}

// ReduceScatter combines send of every rank of c element-wise with op, and
// scatters the result: rank i receives into recv the counts[i] elements
// that follow those of ranks below it. send holds the sum of counts.
//
// With a commutative op, each rank exchanges with every other one block
// per round; otherwise the result is reduced at rank 0, in rank order, and
// scattered from there.
func ReduceScatter[T Numeric](ctx context.Context, c *Comm, send, recv []T, counts []int, op Op) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return reduceScatterWith(c, send, recv, counts, op, func(s *sched) error { return c.run(ctx, s) })
}

// IreduceScatter starts a ReduceScatter; see ReduceScatter. The buffers belong to the operation until
// the request completes.
func IreduceScatter[T Numeric](c *Comm, send, recv []T, counts []int, op Op) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := reduceScatterWith(c, send, recv, counts, op, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// reduceScatterWith checks the arguments of ReduceScatter, builds its schedule and hands it
// to finish, with the engine locked.
func reduceScatterWith[T Numeric](c *Comm, send, recv []T, counts []int, op Op, finish func(*sched) error) error {
	if err := c.check(); err != nil {
		return err
	}
	k := kindOf[T]()
	if err := op.check(k); err != nil {
		return err
	}
	for _, n := range counts {
		if err := op.checkPairs(n); err != nil {
			return err
		}
	}
	p, r := c.size, c.rank
	if len(counts) != p {
		return fmt.Errorf("%w: ReduceScatter: %d counts for %d ranks", ErrCount, len(counts), p)
	}
	total := 0
	for _, n := range counts {
		if n < 0 {
			return fmt.Errorf("%w: ReduceScatter: negative count", ErrCount)
		}
		total += n
	}
	if len(send) != total || len(recv) < counts[r] {
		return fmt.Errorf("%w: ReduceScatter: send of %d elements for counts totalling %d, recv of %d for %d", ErrCount, len(send), total, len(recv), counts[r])
	}
	if err := noOverlap(send, recv); err != nil {
		return err
	}
	es := sizeOf[T]()
	displs := make([]int, p+1)
	for i, n := range counts {
		displs[i+1] = displs[i] + n*es
	}
	off := func(i int) (int, int) { return displs[i], displs[i+1] }
	s := c.e.newSched(c)
	s.k, s.op = k, op
	sb, rb := Bytes(send), Bytes(recv)
	switch {
	case p == 1:
		s.copy(rb[:len(sb)], sb)
	case op.commute:
		s.reduceScatterPairwise(sb, rb, off)
	default:
		acc := s.tmp(len(sb))
		s.copy(acc, sb)
		if total > 0 {
			s.reduceBinomial(acc, 0)
		}
		s.scatterLinear(acc, rb, 0, off)
	}
	return finish(s)
}

// Scan gives rank i the combination with op of send of ranks 0 to i, in
// rank order, in recv; send nil means in place.
func Scan[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return scan(ctx, c, send, recv, op, false)
}

// Exscan gives rank i the combination with op of send of ranks 0 to i-1, in
// rank order, in recv; recv of rank 0 is left as it was. send nil means in
// place.
func Exscan[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return scan(ctx, c, send, recv, op, true)
}

func scan[T Numeric](ctx context.Context, c *Comm, send, recv []T, op Op, exclusive bool) error {
	return scanWith(c, send, recv, op, exclusive, func(s *sched) error { return c.run(ctx, s) })
}

// Iscan starts a Scan; see Scan.
func Iscan[T Numeric](c *Comm, send, recv []T, op Op) (Request, error) {
	return iscan(c, send, recv, op, false)
}

// Iexscan starts an Exscan; see Exscan.
func Iexscan[T Numeric](c *Comm, send, recv []T, op Op) (Request, error) {
	return iscan(c, send, recv, op, true)
}

func iscan[T Numeric](c *Comm, send, recv []T, op Op, exclusive bool) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	var q Request
	err := scanWith(c, send, recv, op, exclusive, func(s *sched) error {
		q = c.start(s)
		return nil
	})
	return q, err
}

// scanWith checks the arguments of Scan or Exscan, builds the schedule
// and hands it to finish, with the engine locked.
func scanWith[T Numeric](c *Comm, send, recv []T, op Op, exclusive bool, finish func(*sched) error) error {
	k, err := checkReduce(c, send, recv, op, "Scan")
	if err != nil {
		return err
	}
	s := c.e.newSched(c)
	s.k, s.op = k, op
	rb := Bytes(recv)
	partial := s.tmp(len(rb))
	if send != nil {
		s.copy(partial, Bytes(send))
		if !exclusive {
			s.copy(rb, Bytes(send))
		}
	} else {
		s.copy(partial, rb)
	}
	if c.size > 1 && len(rb) > 0 {
		s.scan(rb, partial, exclusive)
	}
	return finish(s)
}

func (c *Comm) checkRoot(root int) error {
	if err := c.check(); err != nil {
		return err
	}
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: root %d of a communicator of %d", ErrRank, root, c.size)
	}
	return nil
}

// checkBlocks checks that counts and displs describe p blocks inside a
// buffer of n elements.
func checkBlocks(p int, counts, displs []int, n int) error {
	if len(counts) != p || len(displs) != p {
		return fmt.Errorf("%w: %d counts and %d displacements for %d ranks", ErrCount, len(counts), len(displs), p)
	}
	for i := range counts {
		if counts[i] < 0 || displs[i] < 0 || displs[i] > n || counts[i] > n-displs[i] {
			return fmt.Errorf("%w: block %d (%d elements at %d) outside a buffer of %d", ErrCount, i, counts[i], displs[i], n)
		}
	}
	return nil
}

// noOverlap reports an error if a and b share memory without being the
// same slice; MPI forbids aliased send and receive buffers except in place.
func noOverlap[T Numeric](a, b []T) error {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	pa, pb := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	size := unsafe.Sizeof(a[0])
	ea, eb := pa+uintptr(len(a))*size, pb+uintptr(len(b))*size
	if pa < eb && pb < ea {
		return fmt.Errorf("%w: send and receive buffers overlap (pass a nil send buffer for in place)", ErrCount)
	}
	return nil
}
