package amigo

import (
	"fmt"

	"github.com/amigo-hpc/amigo/transport"
)

// SendParams describes a Send with every option.
type SendParams struct {
	Dest     Endpoint
	Dispatch Dispatch
	// Header is delivered to the handler whole; it is limited to
	// Config.InlineMax bytes and 65535.
	Header []byte
	// Data is the message's data, of any length.
	Data []byte
	// Done, if not nil, is called once Header and Data may be reused: the
	// local completion.
	Done func(error)
	// RemoteDone, if not nil, is called once the receiver has the data: the
	// remote completion.
	RemoteDone func(error)
}

// Send posts an active message to dispatch d of ep: header and data, with
// done called once both buffers may be reused. Data up to Config.InlineMax
// travels inline in the descriptor buffer (in a window, over some links,
// less: see Config.InlineMax); larger data is announced to the
// receiver, which fetches it from the registered send buffer (rendezvous),
// and done is called once the receiver acknowledged it. The buffers belong to
// amigo until done is called. Send never blocks; it is safe from any
// goroutine. Errors it returns concern the arguments; everything after comes
// through done.
func (c *Context) Send(ep Endpoint, d Dispatch, header, data []byte, done func(error)) error {
	if traceOn {
		return c.tracedSend(ep, d, header, data, done, nil)
	}
	return c.send(ep, d, header, data, done, nil)
}

// SendWith posts a Send described by p.
func (c *Context) SendWith(p *SendParams) error {
	if traceOn {
		return c.tracedSend(p.Dest, p.Dispatch, p.Header, p.Data, p.Done, p.RemoteDone)
	}
	return c.send(p.Dest, p.Dispatch, p.Header, p.Data, p.Done, p.RemoteDone)
}

func (c *Context) send(ep Endpoint, d Dispatch, header, data []byte, done, rdone func(error)) error {
	if rdone == nil && c.sendSlot(ep, d, header, data, done) {
		return nil
	}
	idx, err := c.sendTo(ep, d, header)
	if err != nil {
		return err
	}
	if rdone == nil && len(header)+len(data) <= c.cfg.InlineMax {
		if done == nil && c.injectDirect(idx, d, header, data) || done != nil && c.injectDirectDone(idx, d, header, data, done) {
			return nil
		}
	}
	return c.postSend(idx, d, header, data, done, rdone)
}

// sendTo checks the arguments of a Send and returns the peer index of ep.
func (c *Context) sendTo(ep Endpoint, d Dispatch, header []byte) (int32, error) {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return 0, err
	}
	if d >= MaxDispatch {
		return 0, fmt.Errorf("amigo: dispatch %d: %w", d, ErrBadDispatch)
	}
	if len(header) > c.cfg.InlineMax || len(header) > 0xffff {
		return 0, fmt.Errorf("amigo: header of %d bytes, limit %d: %w", len(header), min(c.cfg.InlineMax, 0xffff), ErrTooLarge)
	}
	return idx, nil
}

// postSend queues a Send for the next Advance.
func (c *Context) postSend(idx int32, d Dispatch, header, data []byte, done, rdone func(error)) error {
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instSend
	in.dest = idx
	in.disp = uint16(d)
	in.hdr = header
	in.data = data
	in.done = done
	in.rdone = rdone
	c.post(in, pos)
	return nil
}

// SendImmediate posts a small active message with no callback: header and
// data are copied before it returns, so the caller may reuse them at once.
// Their total is limited to ImmediateMax bytes.
func (c *Context) SendImmediate(ep Endpoint, d Dispatch, header, data []byte) error {
	if traceOn {
		return c.tracedImmediate(ep, d, header, data)
	}
	return c.sendImmediate(ep, d, header, data)
}

func (c *Context) sendImmediate(ep Endpoint, d Dispatch, header, data []byte) error {
	idx, err := c.immediateTo(ep, d, header, data)
	if err != nil {
		return err
	}
	if c.injectDirect(idx, d, header, data) {
		return nil
	}
	return c.postImmediate(idx, d, header, data)
}

// immediateTo checks the arguments of a SendImmediate (or a holder's) and
// returns the peer index of ep.
func (c *Context) immediateTo(ep Endpoint, d Dispatch, header, data []byte) (int32, error) {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return 0, err
	}
	return idx, c.checkImmediate("SendImmediate", d, len(header)+len(data))
}

// checkImmediate checks the dispatch id and size n of a small message with
// no callback; what names the call in the error.
func (c *Context) checkImmediate(what string, d Dispatch, n int) error {
	if d >= MaxDispatch {
		return fmt.Errorf("amigo: dispatch %d: %w", d, ErrBadDispatch)
	}
	if n > ImmediateMax || n > c.cfg.InlineMax {
		return fmt.Errorf("amigo: %s of %d bytes, limit %d: %w", what, n, min(ImmediateMax, c.cfg.InlineMax), ErrTooLarge)
	}
	return nil
}

// postImmediate queues a SendImmediate for the next Advance.
func (c *Context) postImmediate(idx int32, d Dispatch, header, data []byte) error {
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instImm
	in.dest = idx
	in.disp = uint16(d)
	in.hlen = uint16(copy(in.imm[:], header))
	in.dlen = uint16(copy(in.imm[in.hlen:], data))
	c.post(in, pos)
	return nil
}

// Reply sends a small active message with no callback back to m's
// source, as SendImmediate does, from inside the handler that received m:
// the handler runs on the goroutine that owns the context, so the reply is
// written straight into the source's descriptor buffer, in this Advance,
// unless instructions posted earlier still wait in the queue (then it
// queues behind them, keeping the order). Header and data are copied
// before it returns; their total is limited to ImmediateMax bytes. Reply
// may be called only by the handler, before it returns; a request-reply
// exchange answered with Reply costs one pass through the instruction
// queue less than one answered with SendImmediate.
func (m *Message) Reply(d Dispatch, header, data []byte) error {
	c := m.c
	if err := c.checkImmediate("Reply", d, len(header)+len(data)); err != nil {
		return err
	}
	if c.busy.Load() == busyAdvance && !c.closed.Load() && c.injectOwned(m.src, d, header, data) {
		return nil
	}
	return c.SendImmediate(m.Source, d, header, data)
}

// RMAParams describes a one-sided operation with every option.
type RMAParams struct {
	Dest Endpoint
	// Local is the local buffer: the source of a Put, the destination of a
	// Get. It belongs to amigo until Done is called.
	Local []byte
	// Remote and Offset address the target memory: a region the peer
	// registered, and a byte offset in it.
	Remote Key
	Offset uint64
	// Done, if not nil, is called when the local buffer may be reused (Put)
	// or holds the data (Get).
	Done func(error)
	// RemoteDone, if not nil, is called when the data is visible at the
	// target (Put) or, for a Get, when Done is.
	RemoteDone func(error)
}

// Put copies local into the peer's registered region remote at offset off,
// one-sided: the peer's application takes no part. done is called once local
// may be reused. The owner of the region checks the key and the bounds; a
// refused access comes to done as an *AccessError inside a *PeerError.
func (c *Context) Put(ep Endpoint, local []byte, remote Key, off uint64, done func(error)) error {
	if traceOn {
		return c.tracedRMA(transport.Put, ep, local, remote, off, done, nil)
	}
	return c.rma(transport.Put, ep, local, remote, off, done, nil)
}

// Get copies len(local) bytes from the peer's registered region remote at
// offset off into local, one-sided; done is called once they have landed.
func (c *Context) Get(ep Endpoint, local []byte, remote Key, off uint64, done func(error)) error {
	if traceOn {
		return c.tracedRMA(transport.Get, ep, local, remote, off, done, nil)
	}
	return c.rma(transport.Get, ep, local, remote, off, done, nil)
}

// PutWith posts a Put described by p.
func (c *Context) PutWith(p *RMAParams) error {
	return c.rma(transport.Put, p.Dest, p.Local, p.Remote, p.Offset, p.Done, p.RemoteDone)
}

// GetWith posts a Get described by p.
func (c *Context) GetWith(p *RMAParams) error {
	return c.rma(transport.Get, p.Dest, p.Local, p.Remote, p.Offset, p.Done, p.RemoteDone)
}

// Rput copies n bytes at offset loff of the local region local into the
// peer's region remote at offset roff. Both sides are registered memory, the
// form adapters can move without staging.
func (c *Context) Rput(ep Endpoint, local *MemRegion, loff uint64, remote Key, roff uint64, n int, done func(error)) error {
	b, err := c.regionSlice(local, loff, n)
	if err != nil {
		return err
	}
	return c.rma(transport.Put, ep, b, remote, roff, done, nil)
}

// Rget copies n bytes at offset roff of the peer's region remote into the
// local region local at offset loff.
func (c *Context) Rget(ep Endpoint, local *MemRegion, loff uint64, remote Key, roff uint64, n int, done func(error)) error {
	b, err := c.regionSlice(local, loff, n)
	if err != nil {
		return err
	}
	return c.rma(transport.Get, ep, b, remote, roff, done, nil)
}

func (c *Context) regionSlice(m *MemRegion, off uint64, n int) ([]byte, error) {
	if m == nil || m.c != c.client {
		return nil, fmt.Errorf("amigo: local region not registered by this client: %w", ErrBadKey)
	}
	if n <= 0 || off > uint64(len(m.mem)) || uint64(n) > uint64(len(m.mem))-off {
		return nil, &AccessError{Key: transport.Key(m.key), Off: off, Len: uint64(max(n, 0)), RegionLen: uint64(len(m.mem)), Err: ErrBounds}
	}
	return m.mem[off : off+uint64(n) : off+uint64(n)], nil
}

func (c *Context) rma(k transport.RDMAKind, ep Endpoint, local []byte, remote Key, off uint64, done, rdone func(error)) error {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return err
	}
	if len(local) == 0 {
		return fmt.Errorf("amigo: %v with no local buffer: %w", k, ErrNilBuffer)
	}
	return c.postRMA(idx, k, local, nil, Strided{}, remote, off, done, rdone)
}

// postRMA posts a one-sided operation on the peer at idx: from or into
// local, or the buffers of vec (PutV, GetV), or the blocks of lay in local
// (PutStrided, GetStrided, when lay.Block > 0).
func (c *Context) postRMA(idx int32, k transport.RDMAKind, local []byte, vec [][]byte, lay Strided, remote Key, off uint64, done, rdone func(error)) error {
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind, in.rdma, in.dest = instRDMA, k, idx
	in.data, in.vec, in.lay = local, vec, lay
	in.key, in.off = remote, off
	in.done, in.rdone = done, rdone
	c.post(in, pos)
	return nil
}
