package amigo

import (
	"context"
	"encoding/binary"
	"fmt"
)

// The two collective helpers every one-sided program needs (a barrier to
// separate phases, and the exchange of region keys, as MPI_Win_create and
// OpenSHMEM's symmetric memory do), on a client's job without package mpi.
// Their messages travel on context 0 of every rank with dispatch ids above
// the program's (MaxDispatch and up, which no program can send to), so they
// never meet the program's handlers.

const (
	sysBarrier = MaxDispatch + iota // header: epoch u64, round u8
	sysKeys                         // header: sequence u64; data: key u64, length u64
	sysMax
)

// sysState is context 0's side of the helpers. It belongs to the goroutine
// that owns the context. A rank is at most one barrier (one exchange) ahead
// of any other: it leaves one only once every rank has entered it. So the
// counts of two consecutive ones, kept apart by parity, are enough.
type sysState struct {
	epoch   uint64
	arrived [2][64]int // by epoch parity and round: messages not yet taken
	seq     uint64
	keys    [2][]uint64 // by sequence parity, by rank: key, length pairs
	got     [2]int
}

// sysDeliver takes a message sent to one of amigo's own dispatch ids.
func (c *Context) sysDeliver(src int32, d uint16, header, data []byte) {
	s := &c.sys
	switch {
	case d == sysBarrier && len(header) == 9 && header[8] < 64 && len(data) == 0:
		s.arrived[binary.LittleEndian.Uint64(header)&1][header[8]]++
	case d == sysKeys && len(header) == 8 && len(data) == 16:
		p := c.client.size
		k := binary.LittleEndian.Uint64(header) & 1
		if s.keys[k] == nil {
			s.keys[k] = make([]uint64, 2*p)
		}
		rank := int(c.endpointAt(src).Rank)
		if rank < 0 || rank >= p || s.keys[k][2*rank+1] != 0 {
			c.stats.Malformed++
			return
		}
		s.keys[k][2*rank] = binary.LittleEndian.Uint64(data)
		s.keys[k][2*rank+1] = binary.LittleEndian.Uint64(data[8:]) + 1 // 0: not yet
		s.got[k]++
	default:
		c.stats.Malformed++
	}
}

// sendSys sends a small message to context 0 of rank on one of amigo's own
// dispatch ids.
func (c *Context) sendSys(rank int, d Dispatch, header, data []byte) error {
	idx, err := c.peerIndex(EndpointOf(rank))
	if err != nil {
		return err
	}
	if c.injectDirect(idx, d, header, data) {
		return nil
	}
	return c.postImmediate(idx, d, header, data)
}

// sysSent reports whether the messages the helpers posted have left the
// context's queues: written into the peers' descriptor buffers, from which
// the adapters deliver them even if the rank closes right after (Close
// fails what is still queued). A helper that returns with its last message
// still queued (its own wait was over before the next Advance) would leave
// a peer waiting for it forever.
func (c *Context) sysSent() bool {
	if c.inq.nonEmpty() {
		return false
	}
	for _, p := range c.peers {
		if p != nil && p.failed == nil && (p.q.len() > 0 || p.more.len() > 0) {
			return false
		}
	}
	return true
}

// Barrier returns once every rank of the job has called it. It runs on
// context 0, from the goroutine that owns it (which it advances while it
// waits, running the context's callbacks): ceil(log2 p) rounds of empty
// messages (dissemination). Every rank calls it the same number of times.
func (cl *Client) Barrier(ctx context.Context) error {
	if traceOn {
		defer traceRegion("amigo.Barrier").End()
	}
	c := cl.contexts[0]
	p, r := cl.size, cl.rank
	if p == 1 {
		return nil
	}
	s := &c.sys
	e := s.epoch
	s.epoch++
	var hdr [9]byte
	binary.LittleEndian.PutUint64(hdr[:], e)
	for k, round := 1, 0; k < p; k, round = k<<1, round+1 {
		hdr[8] = byte(round)
		if err := c.sendSys((r+k)%p, sysBarrier, hdr[:], nil); err != nil {
			return fmt.Errorf("amigo: barrier: %w", err)
		}
		slot := &s.arrived[e&1][round]
		if err := c.Wait(ctx, func() bool { return *slot > 0 }); err != nil {
			return fmt.Errorf("amigo: barrier: %w", err)
		}
		*slot--
	}
	if err := c.Wait(ctx, c.sysSent); err != nil {
		return fmt.Errorf("amigo: barrier: %w", err)
	}
	return nil
}

// GlobalRegion is memory every rank registered together (RegisterAll): each
// rank's own region, and every rank's key and length, for Put and Get.
type GlobalRegion struct {
	Local *MemRegion
	keys  []Key
	lens  []int
}

// Key returns the key of rank's region.
func (g *GlobalRegion) Key(rank int) Key { return g.keys[rank] }

// Len returns the length of rank's region.
func (g *GlobalRegion) Len(rank int) int { return g.lens[rank] }

// RegisterAll registers mem on this rank and hands every rank the keys and
// lengths of every rank's region: each rank calls it, in the same order, with
// its own memory (of any length). It runs on context 0 from the goroutine
// that owns it, like Barrier, and returns once every rank's key is here; a
// rank's region may be accessed by others as soon as that rank's call
// returned... and its peers' too: call Barrier first if a rank must not
// see accesses before it has initialised its memory.
func (cl *Client) RegisterAll(ctx context.Context, mem []byte) (*GlobalRegion, error) {
	reg, err := cl.RegisterMemory(mem)
	if err != nil {
		return nil, fmt.Errorf("amigo: RegisterAll: %w", err)
	}
	return cl.shareRegion(ctx, reg)
}

// AllocAll is RegisterAll of n bytes every rank allocates with AllocMemory
// (OpenSHMEM's shmem_malloc): in memory the adapters share with peers of
// the same host, where Put and Get are plain copies and remote atomics are
// the initiator's own atomic instructions, with no message. The memory
// starts zeroed; its start is page-aligned.
func (cl *Client) AllocAll(ctx context.Context, n int) (*GlobalRegion, error) {
	reg, err := cl.AllocMemory(n)
	if err != nil {
		return nil, fmt.Errorf("amigo: AllocAll: %w", err)
	}
	return cl.shareRegion(ctx, reg)
}

// shareRegion hands every rank the key and length of reg, this rank's part
// of a collective registration.
func (cl *Client) shareRegion(ctx context.Context, reg *MemRegion) (*GlobalRegion, error) {
	mem := reg.mem
	c := cl.contexts[0]
	p, r := cl.size, cl.rank
	s := &c.sys
	seq := s.seq
	s.seq++
	k := seq & 1
	var hdr [8]byte
	var data [16]byte
	binary.LittleEndian.PutUint64(hdr[:], seq)
	binary.LittleEndian.PutUint64(data[:], uint64(reg.Key()))
	binary.LittleEndian.PutUint64(data[8:], uint64(len(mem)))
	fail := func(err error) (*GlobalRegion, error) {
		_ = reg.Deregister()
		return nil, fmt.Errorf("amigo: RegisterAll: %w", err)
	}
	for i := 1; i < p; i++ {
		if err := c.sendSys((r+i)%p, sysKeys, hdr[:], data[:]); err != nil {
			return fail(err)
		}
	}
	if err := c.Wait(ctx, func() bool { return s.got[k] == p-1 && c.sysSent() }); err != nil {
		return fail(err)
	}
	g := &GlobalRegion{Local: reg, keys: make([]Key, p), lens: make([]int, p)}
	for q := 0; q < p; q++ {
		if q == r {
			g.keys[q], g.lens[q] = reg.Key(), len(mem)
			continue
		}
		g.keys[q], g.lens[q] = Key(s.keys[k][2*q]), int(s.keys[k][2*q+1]-1)
	}
	s.keys[k], s.got[k] = nil, 0
	return g, nil
}
