package mpi

import (
	"context"
	"fmt"
)

// Matched probes (MPI_Mprobe, MPI_Improbe, MPI_Mrecv, MPI_Imrecv). Probe
// and Iprobe leave the message where any receive may take it: with several
// goroutines receiving, the message a goroutine probed may go to another.
// Mprobe and Improbe take the message out of the unexpected queue and hand
// it to the caller as a Message, which only Message.Recv or Message.Irecv
// receives: goroutines that probe at once each get a message of their own.

// Message is a message taken by Mprobe or Improbe, waiting to be received
// with Recv or Irecv, once. The zero Message is no message; the message
// of a probe of ProcNull receives at once with the status of a receive
// from ProcNull.
type Message struct {
	c      *Comm
	u      *unexpected
	gen    uint32
	noProc bool
}

// Improbe advances the context once and, if a message from src (or
// AnySource) with tag (or AnyTag) has arrived, takes it for the caller: it
// returns the message, true and its status. No other receive or probe
// matches it afterwards.
func (c *Comm) Improbe(src, tag int) (Message, bool, Status, error) {
	if c == nil {
		return Message{}, false, Status{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkRecv(src, tag); err != nil {
		return Message{}, false, Status{}, err
	}
	if src == ProcNull {
		return Message{c: c, noProc: true}, true, procNullStatus, nil
	}
	u := e.unexp.find(c.p2p, int32(src), int32(tag))
	if u == nil {
		e.advanceOnce()
		if u = e.unexp.find(c.p2p, int32(src), int32(tag)); u == nil {
			return Message{}, false, Status{}, nil
		}
	}
	m, st := c.take(u)
	return m, true, st, nil
}

// Mprobe waits until a message from src (or AnySource) with tag (or AnyTag)
// has arrived and takes it for the caller, as Improbe does.
func (c *Comm) Mprobe(ctx context.Context, src, tag int) (Message, Status, error) {
	if c == nil {
		return Message{}, Status{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.checkRecv(src, tag); err != nil {
		return Message{}, Status{}, err
	}
	if src == ProcNull {
		return Message{c: c, noProc: true}, procNullStatus, nil
	}
	if err := e.waitProbe(ctx, c.p2p, int32(src), int32(tag)); err != nil {
		return Message{}, Status{}, e.waitErr(err, "Mprobe for", src, tag)
	}
	m, st := c.take(e.unexp.find(c.p2p, int32(src), int32(tag)))
	return m, st, nil
}

// take removes u from the unexpected queue for a Message.
func (c *Comm) take(u *unexpected) (Message, Status) {
	c.e.unexp.remove(u)
	return Message{c: c, u: u, gen: u.gen}, Status{Source: int(u.src), Tag: int(u.tag), Count: u.size}
}

// Recv receives the message into buf (MPI_Mrecv) and returns its status;
// as with Comm.Recv, a message longer than buf fails with ErrTruncate. The
// Message becomes the zero Message.
func (m *Message) Recv(ctx context.Context, buf []byte) (Status, error) {
	if m.c == nil {
		return Status{}, fmt.Errorf("%w: no message", ErrRequest)
	}
	e := m.c.e
	e.lock()
	defer e.unlock()
	q, err := m.irecv(buf)
	if err != nil {
		return Status{}, err
	}
	st, err := q.wait(ctx)
	if !q.Null() {
		// ctx ended: the data is being fetched; let it land.
		q.r.orphan = true
	}
	return st, err
}

// Irecv starts receiving the message into buf (MPI_Imrecv). The Message
// becomes the zero Message.
func (m *Message) Irecv(buf []byte) (Request, error) {
	if m.c == nil {
		return Request{}, fmt.Errorf("%w: no message", ErrRequest)
	}
	e := m.c.e
	e.lock()
	defer e.unlock()
	return m.irecv(buf)
}

func (m *Message) irecv(buf []byte) (Request, error) {
	c, u := m.c, m.u
	if err := c.check(); err != nil {
		return Request{}, err
	}
	if m.noProc {
		*m = Message{}
		return c.e.doneReq(reqRecv, procNullStatus), nil
	}
	if u.gen != m.gen {
		return Request{}, fmt.Errorf("%w: message already received", ErrRequest)
	}
	*m = Message{}
	r := c.newRecv(c.p2p, buf, int(u.src), int(u.tag))
	c.e.recvUnexpected(r, u)
	return Request{r: r, gen: r.gen}, nil
}
