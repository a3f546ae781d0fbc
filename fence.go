package amigo

import (
	"errors"

	"github.com/amigo-hpc/amigo/transport"
)

// Fence orders the operations toward one peer (PAMI_Fence_begin/end,
// ucp_ep_fence with ucp_ep_flush): every Send, SendImmediate, Put, Get and
// multicast this context issued to ep before the Fence completes at the
// peer (its done callback would have run: delivered, landed or read) before
// any issued after it starts, and done runs once those earlier ones are
// complete. It is a flush as well: "put the data, then tell the target" is
// a Put, a Fence, and a Send. Operations toward other peers are not held.
//
// Operations that fail count as complete; if ep fails while the Fence
// waits, done receives the peer's error.
func (c *Context) Fence(ep Endpoint, done func(error)) error {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return err
	}
	return c.postFence(idx, done, 0)
}

// postFence posts a Fence on the peer at idx; status fenceNotify marks
// PutNotify's.
func (c *Context) postFence(idx int32, done func(error), status uint32) error {
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind, in.dest, in.done, in.status = instFence, idx, done, status
	c.post(in, pos)
	return nil
}

// Flush calls done once every operation this context issued to ep before it
// has completed at the peer (ucp_ep_flush). It is Fence: operations issued
// after it wait for it.
func (c *Context) Flush(ep Endpoint, done func(error)) error { return c.Fence(ep, done) }

// FenceAll is Fence toward every peer this context has issued operations
// to; done runs once all of them completed. It is an instruction like Do:
// what is posted after it waits for it, and the fences it places stand
// before those.
func (c *Context) FenceAll(done func(error)) error {
	return c.Do(func(c *Context) {
		pending, errs := 1, []error(nil)
		finish := func(err error) {
			if err != nil {
				errs = append(errs, err)
			}
			if pending--; pending == 0 && done != nil {
				done(errors.Join(errs...))
			}
		}
		for _, p := range c.peers {
			if p == nil {
				continue
			}
			pending++
			// Executed here, not posted: a posted Fence would queue
			// behind the instructions posted after FenceAll.
			in := inst{kind: instFence, dest: p.idx, done: finish}
			c.execute(&in)
		}
		finish(nil)
	})
}

// fenceReady reports whether nothing issued to p before a Fence at the
// front of its queue is still in flight: no operation this context started
// (the receiving side of p's own messages does not count: a Deferred
// announcement waits for this context's Accept, which may come after the
// Fence), no listed callback, no RDMA descriptor the engine has not
// finished (a Put with no callback lists none), no packet a socket still
// carries (over a Shared link a packet is delivered once written).
func (p *peer) fenceReady() bool {
	return p.issued == 0 && p.msg.Pending() == 0 && p.rdma.Pending() == 0 && p.rdma.Outstanding() == 0 &&
		(p.link.Shared || p.msg.Outstanding() == 0) && p.more.len() == 0
}

// fenceNotify marks the Fence of a PutNotify (inst.status): on a link that
// lands RDMA and packets in the order it sends them (transport.Link.Ordered)
// it holds nothing.
const fenceNotify = 1

// PutNotify copies local into the peer's registered region remote at offset
// off, as Put, then runs the handler of dispatch d at the peer with header
// as the message's header (at most ImmediateMax bytes, copied before
// PutNotify returns) and no data: the handler sees the data in the region
// (PAMI's remote callback of a PUT; ucp_put, a fence and an active
// message). done is called once local may be reused. Of the three steps
// only the ordering costs anything, and each adapter keeps it without a
// round trip where it can:
//
//   - tcp: the Put's request and data and the notification travel one
//     connection in order, and the target writes the data into the region
//     before it reads the next frame: nothing is held.
//   - shm and loop: the notification waits until the Put is complete at
//     the initiator, which over shared memory is when the data is in the
//     target's memory (the initiator copied it into the shared segment or
//     by cross-memory attach itself; a pipelined copy completes when the
//     owner has copied the last chunk out): no message comes back.
func (c *Context) PutNotify(ep Endpoint, local []byte, remote Key, off uint64, d Dispatch, header []byte, done func(error)) error {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return err
	}
	if err := c.checkImmediate("PutNotify header", d, len(header)); err != nil {
		return err
	}
	if err := c.rma(transport.Put, ep, local, remote, off, done, nil); err != nil {
		return err
	}
	if err := c.postFence(idx, nil, fenceNotify); err != nil {
		return err
	}
	return c.postImmediate(idx, d, header, nil)
}
