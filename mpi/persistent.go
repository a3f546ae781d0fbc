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
