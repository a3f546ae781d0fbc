package amigo

import (
	"errors"
	"fmt"

	"github.com/amigo-hpc/amigo/transport"
)

// Non-contiguous one-sided data: a list of local buffers against a
// contiguous remote range (PutV, GetV: writev and readv), and a strided
// layout on both sides (PutStrided, GetStrided: MPI_Type_vector, PAMI_Type's
// strided form), such as a column of a row-major matrix. Nothing is packed
// into a temporary buffer: each buffer or block is a piece of its own in the
// peer's RDMA FIFO, and the adapters move consecutive pieces together where
// they can (over shared memory, small pieces of Go memory in one
// process_vm_readv or process_vm_writev; over TCP, one vectored write).
// One callback reports the whole operation.
//
// The owner checks each piece against the region as it arrives: a Put whose
// later blocks fall outside the region fails with ErrBounds after the
// earlier blocks were written. A GlobalRegion's Len tells the caller the
// bounds beforehand.

// Strided is a layout of Count blocks of Block bytes: block i starts at
// i*LocalStride in the local buffer and at offset + i*RemoteStride in the
// remote region. A stride equal to Block is contiguous on that side.
type Strided struct {
	Count, Block              int
	LocalStride, RemoteStride int
}

func (s Strided) check(local []byte) error {
	if s.Count <= 0 || s.Block <= 0 || s.LocalStride < s.Block || s.RemoteStride < s.Block {
		return fmt.Errorf("amigo: strided layout %+v: want positive count and block, strides of at least a block: %w", s, ErrBadLayout)
	}
	if need := (s.Count-1)*s.LocalStride + s.Block; need/s.LocalStride < s.Count-1 || len(local) < need {
		return fmt.Errorf("amigo: strided layout %+v needs %d local bytes, the buffer has %d: %w", s, (s.Count-1)*s.LocalStride+s.Block, len(local), ErrBadLayout)
	}
	return nil
}

// PutV copies the local buffers, one after the other, into the peer's
// region remote from offset off (a gathering Put). The list and the
// buffers belong to amigo until done is called, once every buffer may be
// reused.
func (c *Context) PutV(ep Endpoint, local [][]byte, remote Key, off uint64, done func(error)) error {
	return c.rmaV(transport.Put, ep, local, remote, off, done)
}

// GetV copies the peer's region remote from offset off into the local
// buffers, one after the other (a scattering Get). done is called once all
// of them hold their data.
func (c *Context) GetV(ep Endpoint, local [][]byte, remote Key, off uint64, done func(error)) error {
	return c.rmaV(transport.Get, ep, local, remote, off, done)
}

// PutStrided copies the blocks of layout s from local into the peer's
// region remote at offset off and its strides. done is called once local
// may be reused.
func (c *Context) PutStrided(ep Endpoint, local []byte, s Strided, remote Key, off uint64, done func(error)) error {
	return c.rmaStrided(transport.Put, ep, local, s, remote, off, done)
}

// GetStrided copies the blocks of layout s from the peer's region remote
// at offset off into local at its strides. done is called once they have
// landed.
func (c *Context) GetStrided(ep Endpoint, local []byte, s Strided, remote Key, off uint64, done func(error)) error {
	return c.rmaStrided(transport.Get, ep, local, s, remote, off, done)
}

func (c *Context) rmaV(k transport.RDMAKind, ep Endpoint, local [][]byte, remote Key, off uint64, done func(error)) error {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return err
	}
	total := 0
	for _, b := range local {
		total += len(b)
	}
	if total == 0 {
		return fmt.Errorf("amigo: %v of no bytes: %w", k, ErrNilBuffer)
	}
	return c.postRMA(idx, k, nil, local, Strided{}, remote, off, done, nil)
}

func (c *Context) rmaStrided(k transport.RDMAKind, ep Endpoint, local []byte, s Strided, remote Key, off uint64, done func(error)) error {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return err
	}
	if err := s.check(local); err != nil {
		return err
	}
	return c.postRMA(idx, k, local, nil, s, remote, off, done, nil)
}

// rmaSize is the bytes an instruction of PutV, GetV, PutStrided or
// GetStrided moves.
func rmaSize(in *inst) int {
	if in.vec != nil {
		n := 0
		for _, b := range in.vec {
			n += len(b)
		}
		return n
	}
	return in.lay.Count * in.lay.Block
}

// nextPiece returns the local bytes and the remote offset of o's next
// piece, at most chunk bytes, and moves o's place in its vector past it;
// the caller counts it posted.
func (o *op) nextPiece(chunk uint64) ([]byte, uint64) {
	var local []byte
	var roff uint64
	switch {
	case o.vec != nil:
		for o.vo == uint64(len(o.vec[o.vi])) {
			o.vi++
			o.vo = 0
		}
		b := o.vec[o.vi]
		n := min(uint64(len(b))-o.vo, chunk, o.size-o.posted)
		local, roff = b[o.vo:o.vo+n:o.vo+n], o.off+o.posted
		o.vo += n
	case o.lay.Block > 0:
		block := uint64(o.lay.Block)
		bi, wo := o.posted/block, o.posted%block
		n := min(block-wo, chunk, o.size-o.posted)
		at := bi*uint64(o.lay.LocalStride) + wo
		local, roff = o.local[at:at+n:at+n], o.off+bi*uint64(o.lay.RemoteStride)+wo
	default:
		n := min(o.size-o.posted, chunk)
		local, roff = o.local[o.posted:o.posted+n:o.posted+n], o.off+o.posted
	}
	return local, roff
}

// ReceiveV names the buffers of bufs, one after the other, as the
// destination of the message's data (a scattering Receive); done is called
// once the data has landed. Together they must hold Size bytes, else
// ReceiveV returns ErrTooSmall; bytes beyond Size are left alone. An inline
// message is copied at once; an announced one is fetched piece by piece
// into the buffers. A streamed message (the eager protocol) and a
// multicast, which land by offset in one buffer, are received into a
// buffer of Size bytes and copied out when complete.
func (m *Message) ReceiveV(bufs [][]byte, done func(error)) error {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if uint64(total) < m.size {
		return fmt.Errorf("amigo: receive buffers of %d bytes for a message of %d: %w", total, m.size, ErrTooSmall)
	}
	return m.receiveScatter(scatter{vec: bufs}, done)
}

// ReceiveStrided names the blocks of layout s in buf as the destination of
// the message's data: the message's bytes fill block after block, block i
// at i*s.LocalStride of buf (s.RemoteStride is not used). The blocks must
// hold Size bytes. It lands as ReceiveV's buffers do.
func (m *Message) ReceiveStrided(buf []byte, s Strided, done func(error)) error {
	s.RemoteStride = s.Block
	if err := s.check(buf); err != nil {
		return err
	}
	if uint64(s.Count)*uint64(s.Block) < m.size {
		return fmt.Errorf("amigo: receive layout of %d bytes for a message of %d: %w", s.Count*s.Block, m.size, ErrTooSmall)
	}
	return m.receiveScatter(scatter{buf: buf, lay: s}, done)
}

// scatter is a non-contiguous destination: a list of buffers, or the
// blocks of a layout in one buffer.
type scatter struct {
	vec [][]byte
	buf []byte
	lay Strided
}

// copyIn copies data into the destination from its start.
func (s *scatter) copyIn(data []byte) {
	if s.vec != nil {
		for _, b := range s.vec {
			if len(data) == 0 {
				return
			}
			data = data[copy(b, data):]
		}
		return
	}
	for i := 0; len(data) > 0; i++ {
		at := i * s.lay.LocalStride
		data = data[copy(s.buf[at:at+s.lay.Block], data):]
	}
}

func (m *Message) receiveScatter(s scatter, done func(error)) error {
	if m.claimed {
		return errors.New("amigo: message already received or deferred")
	}
	c := m.c
	if m.inline {
		m.claimed = true
		s.copyIn(m.Data)
		c.doLater(done, nil)
		return nil
	}
	m.streamHeld(true)
	if m.stream != nil || m.mc != nil {
		// These land by offset in one buffer: stage, then copy out.
		tmp := make([]byte, m.size)
		return m.Receive(tmp, func(err error) {
			if err == nil {
				s.copyIn(tmp)
			}
			if done != nil {
				done(err)
			}
		})
	}
	m.claimed = true
	o := m.recvOp()
	o.vec, o.lay = s.vec, s.lay
	c.startFetch(o, s.buf, done)
	return nil
}

// SendV sends header and the buffers of data, one after the other, as one
// active message (a gathering Send): the handler sees their concatenation.
// A message that travels inline is gathered straight into the peer's
// descriptor buffer; a larger one, which the protocols move from one
// registered buffer, is first copied into a buffer of its size. The list
// and the buffers belong to amigo until done.
func (c *Context) SendV(ep Endpoint, d Dispatch, header []byte, data [][]byte, done func(error)) error {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return err
	}
	if d >= MaxDispatch {
		return fmt.Errorf("amigo: dispatch %d: %w", d, ErrBadDispatch)
	}
	total := 0
	for _, b := range data {
		total += len(b)
	}
	if len(header)+total > c.cfg.InlineMax {
		flat := make([]byte, 0, total)
		for _, b := range data {
			flat = append(flat, b...)
		}
		return c.Send(ep, d, header, flat, done)
	}
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind, in.dest, in.disp = instSend, idx, uint16(d)
	in.hdr, in.vec, in.done = header, data, done
	c.post(in, pos)
	return nil
}
