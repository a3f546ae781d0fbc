package mpi

import "fmt"

// Persistent requests (MPI_Send_init, MPI_Recv_init, MPI_Start,
// MPI_Startall, MPI_Request_free). A persistent request names an operation
// once — buffer, peer, tag, communicator — and is started any number of
// times; each start is completed by Wait or Test (or the calls on several
// requests), which leave the handle naming the request, inactive, ready to
// be started again. Starting and completing allocate nothing: the request
// stays out of the free list until Free, a persistent receive is itself
// the receive posted, and a persistent send's message goes as Isend's does.
// An inactive persistent request is passed over by Waitany, Waitsome,
// Testany and Testsome, and Wait on it returns at once.

// SendInit makes a persistent request to send buf to rank dest of c with
// tag (MPI_Send_init); Start sends it. buf must not be modified from a
// Start until the completion of that start.
func (c *Comm) SendInit(buf []byte, dest, tag int) (Request, error) {
	return c.initPersistent(reqSend, buf, dest, tag)
}

// RecvInit makes a persistent request to receive into buf a message from
// rank src (or AnySource) of c with tag (or AnyTag) (MPI_Recv_init); Start
// posts the receive.
func (c *Comm) RecvInit(buf []byte, src, tag int) (Request, error) {
	return c.initPersistent(reqRecv, buf, src, tag)
}

func (c *Comm) initPersistent(k reqKind, buf []byte, peer, tag int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	var err error
	if k == reqSend {
		err = c.checkSend(peer, tag)
	} else {
		err = c.checkRecv(peer, tag)
	}
	if err != nil {
		return Request{}, err
	}
	r := e.allocReq(k)
	r.persistent, r.comm, r.peer, r.buf = true, c, peer, buf
	r.ctx, r.src, r.tag = c.p2p, int32(peer), int32(tag)
	return Request{r: r, gen: r.gen}, nil
}

// Start starts the persistent request q (MPI_Start). Starting a request
// that is active, or one that is not persistent, is an error.
func (q *Request) Start() error {
	if q.r == nil {
		return fmt.Errorf("%w: Start of the null request", ErrRequest)
	}
	e := q.r.e
	e.lock()
	defer e.unlock()
	return q.start()
}

// Startall starts every persistent request of reqs (MPI_Startall); it
// stops at the first that cannot start, naming its index.
func Startall(reqs []Request) error {
	e := engineOf(reqs)
	if e == nil {
		return nil
	}
	e.lock()
	defer e.unlock()
	for i := range reqs {
		if err := reqs[i].start(); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
	}
	return nil
}

func (q *Request) start() error {
	if q.r == nil {
		return fmt.Errorf("%w: Start of the null request", ErrRequest)
	}
	r, err := q.live()
	if err != nil {
		return err
	}
	switch {
	case !r.persistent:
		return fmt.Errorf("%w: Start of a request that is not persistent", ErrRequest)
	case r.active:
		return fmt.Errorf("%w: Start of an active request", ErrRequest)
	}
	c, e := r.comm, r.e
	if err := c.check(); err != nil {
		return err
	}
	r.active, r.done, r.err, r.status = true, false, nil, Status{}
	if r.build != nil {
		s, err := r.build()
		if err != nil {
			r.active = false
			return err
		}
		r.sched, s.req = s, r
		e.direct = true
		s.progress()
		e.direct = false
		return nil
	}
	if r.peer == ProcNull {
		r.done = true
		if r.kind == reqRecv {
			r.status = procNullStatus
		}
		return nil
	}
	c.track(r)
	if r.kind == reqRecv {
		e.postRecv(r)
		return nil
	}
	in, err := e.sendMsg(c.eps[r.peer], c.p2p, int32(c.rank), r.tag, r.buf, false)
	if err != nil {
		r.active = false
		r.counted = nil
		c.untrack()
		return err
	}
	if in == nil {
		r.done = true
		r.counted = nil
		c.untrack()
		e.unflushed = true
		return nil
	}
	in.parent, in.parentGen = r, r.gen
	return nil
}

// Free releases the request q names and sets q to null
// (MPI_Request_free): an operation still in flight goes on and is released
// when it completes, without anyone learning its result. It is how a
// persistent request ends; a receive should rather be completed or
// canceled, since its buffer is written until it matches.
func (q *Request) Free() error {
	if q.r == nil {
		return nil
	}
	e := q.r.e
	e.lock()
	defer e.unlock()
	r, err := q.live()
	if err != nil {
		return err
	}
	*q = Request{}
	if r.done || r.persistent && !r.active {
		e.release(r)
		return nil
	}
	r.orphan = true
	return nil
}

// Persistent collectives (MPI-4: MPI_Barrier_init, MPI_Bcast_init, ...).
// The Init call names the collective and its buffers; every Start runs it
// once, as the nonblocking collective would, and Wait or Test completes
// that run. Every rank of the communicator starts its persistent
// collectives in the same order as its other collectives.

// initColl makes a persistent collective request on c whose every start
// runs the schedule build makes. The arguments are checked by each Start,
// which reports what is wrong with them.
func (c *Comm) initColl(build func() (*sched, error)) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.check(); err != nil {
		return Request{}, err
	}
	r := e.allocReq(reqColl)
	r.persistent, r.comm, r.build = true, c, build
	return Request{r: r, gen: r.gen}, nil
}

// built adapts a collective's argument check and schedule builder (its
// ...With function) to initColl.
func built(with func(finish func(*sched) error) error) func() (*sched, error) {
	return func() (*sched, error) {
		var s *sched
		err := with(func(x *sched) error {
			s = x
			return nil
		})
		return s, err
	}
}

// BarrierInit makes a persistent Barrier (MPI_Barrier_init).
func (c *Comm) BarrierInit() (Request, error) {
	return c.initColl(c.barrierSched)
}

// BcastInit makes a persistent Bcast of buf from root (MPI_Bcast_init).
func BcastInit[T Numeric](c *Comm, buf []T, root int) (Request, error) {
	return c.initColl(func() (*sched, error) { return bcastSched(c, Bytes(buf), root) })
}

// ReduceInit makes a persistent Reduce (MPI_Reduce_init).
func ReduceInit[T Numeric](c *Comm, send, recv []T, op Op, root int) (Request, error) {
	return c.initColl(func() (*sched, error) { return reduceSched(c, send, recv, op, root) })
}

// AllreduceInit makes a persistent Allreduce (MPI_Allreduce_init).
func AllreduceInit[T Numeric](c *Comm, send, recv []T, op Op) (Request, error) {
	return c.initColl(func() (*sched, error) { return allreduceSched(c, send, recv, op) })
}

// AllgatherInit makes a persistent Allgather (MPI_Allgather_init).
func AllgatherInit[T Numeric](c *Comm, send, recv []T) (Request, error) {
	return c.initColl(func() (*sched, error) { return allgatherSched(c, send, recv) })
}

// AlltoallInit makes a persistent Alltoall (MPI_Alltoall_init).
func AlltoallInit[T Numeric](c *Comm, send, recv []T) (Request, error) {
	return c.initColl(func() (*sched, error) { return alltoallSched(c, send, recv) })
}

// GatherInit makes a persistent Gather (MPI_Gather_init).
func GatherInit[T Numeric](c *Comm, send, recv []T, root int) (Request, error) {
	return c.initColl(built(func(f func(*sched) error) error { return gatherWith(c, send, recv, root, f) }))
}

// ScatterInit makes a persistent Scatter (MPI_Scatter_init).
func ScatterInit[T Numeric](c *Comm, send, recv []T, root int) (Request, error) {
	return c.initColl(built(func(f func(*sched) error) error { return scatterWith(c, send, recv, root, f) }))
}

// ReduceScatterInit makes a persistent ReduceScatter
// (MPI_Reduce_scatter_init).
func ReduceScatterInit[T Numeric](c *Comm, send, recv []T, counts []int, op Op) (Request, error) {
	return c.initColl(built(func(f func(*sched) error) error { return reduceScatterWith(c, send, recv, counts, op, f) }))
}

// ScanInit makes a persistent Scan (MPI_Scan_init).
func ScanInit[T Numeric](c *Comm, send, recv []T, op Op) (Request, error) {
	return c.initColl(built(func(f func(*sched) error) error { return scanWith(c, send, recv, op, false, f) }))
}
