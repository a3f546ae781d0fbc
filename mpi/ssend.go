package mpi

import (
	"context"
	"fmt"

	"github.com/amigo-hpc/amigo"
)

// Synchronous sends. A message sent by Ssend or Issend carries kindSync
// and the sender's slot (a 16-bit index and an 8-bit generation) in its
// header; the receiver, when the message matches a receive — at once if
// the receive was posted, when the receive is posted if the message
// waited — answers with an empty kindAck message naming the slot. The
// send completes once the AMI is done with its buffer and the
// acknowledgement came back, whatever its size.

// maxSyncSlots bounds the synchronous sends of a context in flight at once.
const maxSyncSlots = 1 << 16

// Ssend sends buf to rank dest of c with tag, and returns once a receive
// matched it (MPI_Ssend): a program that works with Ssend works whatever
// the buffering of Send. ctx bounds the wait.
func (c *Comm) Ssend(ctx context.Context, buf []byte, dest, tag int) error {
	if c == nil {
		return c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	q, err := c.issend(buf, dest, tag)
	if err != nil {
		return err
	}
	_, err = q.wait(ctx)
	if !q.Null() {
		q.r.orphan = true
	}
	return err
}

// Issend starts a synchronous send: the request completes once a receive
// matched the message and buf may be reused.
func (c *Comm) Issend(buf []byte, dest, tag int) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return c.issend(buf, dest, tag)
}

func (c *Comm) issend(buf []byte, dest, tag int) (Request, error) {
	if err := c.checkSend(dest, tag); err != nil {
		return Request{}, err
	}
	e := c.e
	if dest == ProcNull {
		return e.doneReq(reqSend, Status{}), nil
	}
	if e.ft.on {
		if err := e.ftSend(c.eps[dest], c.p2p); err != nil {
			return Request{}, err
		}
	}
	r := e.allocReq(reqSend)
	slot, err := e.takeSyncSlot(r)
	if err != nil {
		e.freeReq(r)
		return Request{}, err
	}
	putHdr(&r.hdr, c.p2p, int32(c.rank), int32(tag))
	r.hdr[12], r.hdr[13] = kindSync, e.syncGen[slot]
	r.hdr[14], r.hdr[15] = byte(slot), byte(slot>>8)
	r.buf = buf
	r.inAMI = true
	r.ctx, r.src, r.tag = c.p2p, int32(dest), int32(tag) // for failures and errors
	c.track(r)
	e.stats.Sent++
	if err := e.held.Send(c.eps[dest], e.disp, r.hdr[:], buf, r.onAMI); err != nil {
		e.dropSync(r)
		r.counted = nil
		c.untrack()
		e.freeReq(r)
		return Request{}, err
	}
	return Request{r: r, gen: r.gen}, nil
}

// takeSyncSlot lists r as waiting for an acknowledgement.
func (e *engine) takeSyncSlot(r *request) (int, error) {
	var slot int
	if n := len(e.syncFree); n > 0 {
		slot = int(e.syncFree[n-1])
		e.syncFree = e.syncFree[:n-1]
	} else {
		if len(e.syncReqs) == maxSyncSlots {
			return 0, fmt.Errorf("%w: more than %d synchronous sends in flight", ErrCount, maxSyncSlots)
		}
		slot = len(e.syncReqs)
		e.syncReqs = append(e.syncReqs, nil)
		e.syncGen = append(e.syncGen, 0)
	}
	e.syncReqs[slot] = r
	r.syncSlot = int32(slot) + 1
	return slot, nil
}

// dropSync frees r's slot: its acknowledgement came, or it will not be
// waited for. A late acknowledgement finds another generation.
func (e *engine) dropSync(r *request) {
	slot := int(r.syncSlot) - 1
	if slot < 0 {
		return
	}
	r.syncSlot = 0
	e.syncReqs[slot] = nil
	e.syncGen[slot]++
	e.syncFree = append(e.syncFree, uint16(slot))
}

// onAck handles the acknowledgement of a synchronous send's match.
func (e *engine) onAck(h []byte) {
	slot := int(h[14]) | int(h[15])<<8
	if slot >= len(e.syncReqs) || e.syncGen[slot] != h[13] || e.syncReqs[slot] == nil {
		e.stats.Malformed++
		return
	}
	r := e.syncReqs[slot]
	e.dropSync(r)
	e.events++
	if r.sentDone {
		e.complete(r, nil)
	}
}

// sendAck acknowledges to ep the match of the synchronous message whose
// header is h.
func (e *engine) sendAck(ep amigo.Endpoint, h []byte) {
	var a [hdrLen]byte
	a[12] = kindAck
	copy(a[13:16], h[13:16])
	_ = e.held.SendImmediate(ep, e.disp, a[:], nil)
}

// doneReq returns a handle of a request complete at once with st.
func (e *engine) doneReq(k reqKind, st Status) Request {
	r := e.allocReq(k)
	r.done, r.status = true, st
	return Request{r: r, gen: r.gen}
}
