package mpi

import (
	"context"
	"fmt"
)

func (c *Comm) checkPeer(rank int, any bool) error {
	if rank >= 0 && rank < c.size || any && rank == AnySource || rank == ProcNull {
		return nil
	}
	return fmt.Errorf("%w: rank %d of a communicator of %d", ErrRank, rank, c.size)
}

func checkTag(tag int, any bool) error {
	if tag >= 0 && tag <= TagUB || any && tag == AnyTag {
		return nil
	}
	return fmt.Errorf("%w: %d", ErrTag, tag)
}

// checkSend and checkRecv check a point-to-point call's arguments; the
// caller holds c's engine (so c is not nil). Their first test passes the
// common case, a live communicator, a rank of it (or AnySource, -1) and a
// tag in range (or AnyTag, -1), in one call of some fifteen instructions;
// the rest, which also says what is wrong, took three calls and some 70
// instructions every Send and Recv.
func (c *Comm) checkSend(dest, tag int) error {
	if !c.freed && !c.e.closed && uint(dest) < uint(c.size) && uint(tag) <= TagUB {
		return nil
	}
	return c.checkSendSlow(dest, tag)
}

func (c *Comm) checkSendSlow(dest, tag int) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := c.checkPeer(dest, false); err != nil {
		return err
	}
	return checkTag(tag, false)
}

func (c *Comm) checkRecv(src, tag int) error {
	if !c.freed && !c.e.closed && uint(src+1) <= uint(c.size) && uint(tag+1) <= TagUB+1 {
		return nil
	}
	return c.checkRecvSlow(src, tag)
}

func (c *Comm) checkRecvSlow(src, tag int) error {
	if err := c.check(); err != nil {
		return err
	}
	if err := c.checkPeer(src, true); err != nil {
		return err
	}
	return checkTag(tag, true)
}

// Send sends buf to rank dest of c with tag, and returns once buf may be
// reused: at once for a small message, which is copied; after the receiver
// fetched the data for a large one, which is announced to the receiver and
// fetched by it (rendezvous). ctx bounds the wait.
func (c *Comm) Send(ctx context.Context, buf []byte, dest, tag int) error {
	if c == nil {
		return c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkSend(dest, tag); err != nil || dest == ProcNull {
		return err
	}
	r, err := e.sendMsg(c.eps[dest], c.p2p, int32(c.rank), int32(tag), buf, false)
	if err != nil {
		return err
	}
	if r == nil {
		// Copied: push it out now rather than at the next call, unless it
		// is in the peer's memory already (a shared-memory descriptor
		// buffer): a whole pass of every port after each such Send was a
		// tenth of a ping-pong's round trip.
		if e.unsent() {
			e.advanceOnce()
		}
		return nil
	}
	c.track(r)
	if err := e.waitDone(ctx, &r.done, r.cond); err != nil {
		r.orphan = true
		return e.waitErr(err, "Send to", dest, tag)
	}
	err = r.err
	e.freeReq(r)
	return err
}

// Isend starts sending buf to rank dest of c with tag. buf must not be
// modified until the request completes.
func (c *Comm) Isend(buf []byte, dest, tag int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return c.isend(buf, dest, tag)
}

func (c *Comm) isend(buf []byte, dest, tag int) (Request, error) {
	if err := c.checkSend(dest, tag); err != nil {
		return Request{}, err
	}
	e := c.e
	if dest == ProcNull {
		return e.doneReq(reqSend, Status{}), nil
	}
	r, err := e.sendMsg(c.eps[dest], c.p2p, int32(c.rank), int32(tag), buf, false)
	if err != nil {
		return Request{}, err
	}
	if r == nil {
		r = e.allocReq(reqSend)
		r.done = true
		e.unflushed = true
	} else {
		r.src, r.tag = int32(dest), int32(tag) // for a wait's error
		c.track(r)
	}
	return Request{r: r, gen: r.gen}, nil
}

// Recv receives into buf a message from rank src (or AnySource) of c with
// tag (or AnyTag), and returns its status. A message longer than buf is an
// error (ErrTruncate) that writes nothing beyond buf. If ctx ends first, the
// receive is canceled, unless its data was already being fetched.
func (c *Comm) Recv(ctx context.Context, buf []byte, src, tag int) (Status, error) {
	if c == nil {
		return Status{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkRecv(src, tag); err != nil {
		return Status{}, err
	}
	if src == ProcNull {
		return procNullStatus, nil
	}
	if src >= 0 && tag >= 0 && e.canExpect(c.p2p, int32(src), int32(tag)) {
		return c.recvExpected(ctx, buf, int32(src), int32(tag))
	}
	r := c.newRecv(c.p2p, buf, src, tag)
	e.postRecv(r)
	return c.recvWait(ctx, r)
}

// recvWait waits for the posted receive r of Recv.
func (c *Comm) recvWait(ctx context.Context, r *request) (Status, error) {
	e := c.e
	src, tag := int(r.src), int(r.tag)
	if err := e.waitDone(ctx, &r.done, r.cond); err != nil {
		e.abandon(r)
		return Status{}, e.waitErr(err, "Recv from", src, tag)
	}
	st, err := r.status, r.err
	e.freeReq(r)
	return st, err
}

// Irecv starts receiving into buf a message from rank src (or AnySource) of
// c with tag (or AnyTag). buf must not be used until the request completes.
func (c *Comm) Irecv(buf []byte, src, tag int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return c.irecv(buf, src, tag)
}

func (c *Comm) irecv(buf []byte, src, tag int) (Request, error) {
	if err := c.checkRecv(src, tag); err != nil {
		return Request{}, err
	}
	if src == ProcNull {
		return c.e.doneReq(reqRecv, procNullStatus), nil
	}
	r := c.newRecv(c.p2p, buf, src, tag)
	c.e.postRecv(r)
	return Request{r: r, gen: r.gen}, nil
}

func (c *Comm) newRecv(ctx uint32, buf []byte, src, tag int) *request {
	r := c.e.allocReq(reqRecv)
	r.ctx, r.src, r.tag, r.buf = ctx, int32(src), int32(tag), buf
	c.track(r)
	return r
}

// abandon gives up waiting for r: a posted receive is canceled; an
// operation the AMI still holds is released when it completes.
func (e *engine) abandon(r *request) {
	switch {
	case r.posted:
		e.posted.remove(r)
		e.freeReq(r)
	case r.done:
		e.freeReq(r)
	default:
		r.orphan = true
	}
}

// Sendrecv sends sendbuf to dest with sendtag and receives into recvbuf from
// src with recvtag, both at once, and returns the receive's status.
func (c *Comm) Sendrecv(ctx context.Context, sendbuf []byte, dest, sendtag int, recvbuf []byte, src, recvtag int) (Status, error) {
	if c == nil {
		return Status{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return c.sendrecv(ctx, sendbuf, dest, sendtag, recvbuf, src, recvtag)
}

func (c *Comm) sendrecv(ctx context.Context, sendbuf []byte, dest, sendtag int, recvbuf []byte, src, recvtag int) (Status, error) {
	if err := c.checkSend(dest, sendtag); err != nil {
		return Status{}, err
	}
	rq, err := c.irecv(recvbuf, src, recvtag)
	if err != nil {
		return Status{}, err
	}
	sq, err := c.isend(sendbuf, dest, sendtag)
	if err != nil {
		c.e.abandon(rq.r)
		return Status{}, err
	}
	st, rerr := rq.wait(ctx)
	if !rq.Null() {
		// ctx ended: give up both.
		c.e.abandon(rq.r)
		c.e.abandon(sq.r)
		return Status{}, rerr
	}
	_, serr := sq.wait(ctx)
	if !sq.Null() {
		c.e.abandon(sq.r)
	}
	if rerr != nil {
		return st, rerr
	}
	return st, serr
}

// Iprobe advances the context once and reports whether a message from src
// (or AnySource) with tag (or AnyTag) has arrived and waits for a receive;
// if so it returns the message's status, and a receive with the status's
// source and tag will take that message (unless another goroutine receives
// it first: Improbe hands the message to one caller).
func (c *Comm) Iprobe(src, tag int) (bool, Status, error) {
	if c == nil {
		return false, Status{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkRecv(src, tag); err != nil {
		return false, Status{}, err
	}
	if src == ProcNull {
		return true, procNullStatus, nil
	}
	u := e.unexp.find(c.p2p, int32(src), int32(tag))
	if u == nil {
		e.advanceOnce()
		if u = e.unexp.find(c.p2p, int32(src), int32(tag)); u == nil {
			return false, Status{}, nil
		}
	}
	return true, Status{Source: int(u.src), Tag: int(u.tag), Count: u.size}, nil
}

// Probe waits until a message from src (or AnySource) with tag (or AnyTag)
// has arrived, and returns its status without receiving it.
func (c *Comm) Probe(ctx context.Context, src, tag int) (Status, error) {
	if c == nil {
		return Status{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkRecv(src, tag); err != nil {
		return Status{}, err
	}
	if src == ProcNull {
		return procNullStatus, nil
	}
	if err := e.waitProbe(ctx, c.p2p, int32(src), int32(tag)); err != nil {
		return Status{}, e.waitErr(err, "Probe for", src, tag)
	}
	u := e.unexp.find(c.p2p, int32(src), int32(tag))
	return Status{Source: int(u.src), Tag: int(u.tag), Count: u.size}, nil
}

// waitProbe waits, with the engine locked, until a message that fits (ctx,
// src, tag) waits in the unexpected queue.
func (e *engine) waitProbe(ctx context.Context, cid uint32, src, tag int32) error {
	if e.unexp.find(cid, src, tag) != nil {
		return nil
	}
	w := e.allocReq(reqWaiter)
	w.ctx, w.src, w.tag = cid, src, tag
	e.ft.probing++
	err := e.wait(ctx, w.waitCond)
	e.ft.probing--
	e.freeReq(w)
	if err == nil && e.unexp.find(cid, src, tag) == nil {
		err = e.ftRecv(cid, src) // the source failed
	}
	return err
}

// SendrecvReplace sends buf to dest with sendtag and receives into the same
// buf from src with recvtag (MPI_Sendrecv_replace): what is sent is buf's
// content before the call, and the message received may be at most
// len(buf) bytes.
func (c *Comm) SendrecvReplace(ctx context.Context, buf []byte, dest, sendtag, src, recvtag int) (Status, error) {
	if c == nil {
		return Status{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkSend(dest, sendtag); err != nil {
		return Status{}, err
	}
	if err := c.checkRecv(src, recvtag); err != nil {
		return Status{}, err
	}
	out := e.scratch.get(len(buf))
	copy(out, buf)
	st, err := c.sendrecv(ctx, out, dest, sendtag, buf, src, recvtag)
	if ctx == nil || ctx.Err() == nil {
		// Both operations ended: out is free. (When ctx ended, the send
		// may still read it.)
		e.scratch.put(out)
	}
	return st, err
}
