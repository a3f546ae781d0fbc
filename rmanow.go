package amigo

import (
	"fmt"

	"github.com/amigo-hpc/amigo/transport"
)

// PutNow is Put for a caller that waits for the Put's completion at once:
// when it can be performed right away (over shared memory, into a peer's
// shared allocation, AllocMemory, at most 64 KiB, with nothing posted
// earlier to that peer still in flight) it copies local into the peer's
// memory on the calling goroutine and returns done true: the data is in
// the target's memory, as a Put is when its done callback and a Flush's
// have run, and done is not called. Otherwise it posts the Put as Put does
// (done is called as for Put) and returns false. It is the immediate
// completion of ucp_put_nbx (UCS_OK) and gex_RMA_PutNB (no event), and
// the direct load/store of MPI one-sided implementations over shared
// memory.
func (c *Context) PutNow(ep Endpoint, local []byte, remote Key, off uint64, done func(error)) (bool, error) {
	return c.rmaNow(transport.Put, ep, local, remote, off, done, false)
}

// GetNow is Get for a caller that waits for the data at once: when the
// Get can be performed right away (as PutNow) it copies the bytes into
// local on the calling goroutine and returns done true, and done is not
// called; otherwise it posts the Get as Get does and returns false.
func (c *Context) GetNow(ep Endpoint, local []byte, remote Key, off uint64, done func(error)) (bool, error) {
	return c.rmaNow(transport.Get, ep, local, remote, off, done, false)
}

// PutNow is Context.PutNow for the holder: what can be copied at once is,
// without taking the context; the rest is posted behind the instructions
// before it.
func (h *Held) PutNow(ep Endpoint, local []byte, remote Key, off uint64, done func(error)) (bool, error) {
	return h.c.rmaNow(transport.Put, ep, local, remote, off, done, true)
}

// GetNow is Context.GetNow for the holder.
func (h *Held) GetNow(ep Endpoint, local []byte, remote Key, off uint64, done func(error)) (bool, error) {
	return h.c.rmaNow(transport.Get, ep, local, remote, off, done, true)
}

// rmaNow performs a Get or a Put at once where copyDirect can, or posts
// it; held says the calling goroutine owns the context.
func (c *Context) rmaNow(k transport.RDMAKind, ep Endpoint, local []byte, remote Key, off uint64, done func(error), held bool) (bool, error) {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return false, err
	}
	if len(local) == 0 {
		return false, fmt.Errorf("amigo: %v with no local buffer: %w", k, ErrNilBuffer)
	}
	if c.copyDirect(idx, k, local, remote, off, held) {
		return true, nil
	}
	if traceOn {
		return false, c.tracedRMA(k, ep, local, remote, off, done, nil)
	}
	return false, c.postRMA(idx, k, local, nil, Strided{}, remote, off, done, nil)
}

// copyDirect performs a Get or a Put on the calling goroutine when the
// adapter can at once (Link.Copy) and nothing posted earlier to the peer
// is still in flight, so that it overtakes nothing, as atomicDirect does;
// it reports whether it did. A holder (held) owns the context already; any
// other goroutine takes it for the copy.
func (c *Context) copyDirect(idx int32, k transport.RDMAKind, local []byte, remote Key, off uint64, held bool) bool {
	var pr *peer
	if held {
		pr = c.owned(idx)
	} else {
		pr = c.direct(idx)
	}
	if pr == nil {
		return false
	}
	ok := pr.link.Copy != nil && pr.rdma.Outstanding() == 0 && pr.rdma.Pending() == 0 && pr.issued == 0 &&
		pr.link.Copy(k, local, transport.Key(remote), off)
	if ok {
		c.countRDMA(k)
	}
	if !held {
		c.leave()
	}
	return ok
}
