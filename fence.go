package amigo

import "errors"

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
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instFence
	in.dest = idx
	in.done = done
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
// front of its queue is still in flight.
func (p *peer) fenceReady() bool {
	return p.ops == 0 && p.msg.Pending() == 0 && p.rdma.Pending() == 0 && p.more.len() == 0
}
