package amigo

import (
	"errors"
	"fmt"

	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// MulticastWay selects how the request to send reaches the targets.
type MulticastWay int

// Ways of a multicast.
const (
	// MulticastForward forwards the request along the targets unprocessed;
	// each target checks in with the origin.
	MulticastForward MulticastWay = 1
	// MulticastStoreForward has each target add its storage to the request
	// before it forwards it; the last one returns it to the origin.
	MulticastStoreForward MulticastWay = 2
)

// MulticastParams describes a multicast.
type MulticastParams struct {
	// Targets receive the data, in chain order. They must be distinct and
	// must not include the origin's own endpoint.
	Targets  []Endpoint
	Dispatch Dispatch
	// Header is delivered to every target's handler.
	Header []byte
	// Data belongs to amigo until Sent is called.
	Data []byte
	// Way defaults to MulticastForward.
	Way MulticastWay
	// Sent is called once every target has the data, or with the error
	// that failed the multicast.
	Sent func(error)
}

// ErrMulticast reports a multicast that a target failed; errors.As finds the
// *PeerError naming the target.
var ErrMulticast = errors.New("multicast failed")

// errTargetFailed is what a target learns of another target that failed
// the multicast: the origin's call-off says which, not why.
var errTargetFailed = errors.New("failed, as the origin reported")

// errOriginLost is why a target of a multicast called it off for the
// others of its chain (mcCallOff).
var errOriginLost = errors.New("lost its path to the multicast's origin")

// Multicast sends data to every target of targets with one announcement and
// one transfer of the data from the origin, forwarded along the targets. Each
// target's handler for dispatch d sees an announced message (Message.Multicast
// reports true) and names a buffer with Receive or Defer/Accept. sent is
// called once every target has the data.
func (c *Context) Multicast(targets []Endpoint, d Dispatch, header, data []byte, sent func(error)) error {
	return c.MulticastWith(&MulticastParams{Targets: targets, Dispatch: d, Header: header, Data: data, Sent: sent})
}

// MulticastWith posts the multicast p describes.
func (c *Context) MulticastWith(p *MulticastParams) error {
	if len(p.Targets) == 0 {
		return errors.New("amigo: multicast with no targets")
	}
	if p.Dispatch >= MaxDispatch {
		return fmt.Errorf("amigo: dispatch %d: %w", p.Dispatch, ErrBadDispatch)
	}
	way := p.Way
	if way == 0 {
		way = MulticastForward
	}
	if way != MulticastForward && way != MulticastStoreForward {
		return fmt.Errorf("amigo: multicast way %d", way)
	}
	if wire.MCSize(len(p.Targets), len(p.Header)) > c.cfg.packetMax() || len(p.Header) > 0xffff {
		return fmt.Errorf("amigo: multicast to %d targets with a %d-byte header: %w", len(p.Targets), len(p.Header), ErrTooLarge)
	}
	st := &mcState{
		way:     uint32(way),
		targets: append([]Endpoint(nil), p.Targets...),
		idx:     make([]int32, len(p.Targets)),
		hdr:     append([]byte(nil), p.Header...),
		disp:    uint16(p.Dispatch),
	}
	self := c.Endpoint()
	seen := make(map[Endpoint]bool, len(p.Targets))
	for i, t := range st.targets {
		idx, err := c.peerIndex(t)
		if err != nil {
			return err
		}
		if t == self {
			return fmt.Errorf("amigo: multicast origin %v among its targets", t)
		}
		if seen[t] {
			return fmt.Errorf("amigo: multicast target %v twice", t)
		}
		seen[t] = true
		st.idx[i] = idx
	}
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instMcast
	in.dest = st.idx[0]
	in.mc = st
	in.data = p.Data
	in.done = p.Sent
	c.post(in, pos)
	return nil
}

// mcState is the state of a multicast at the origin or at a target.
type mcState struct {
	way     uint32
	targets []Endpoint
	idx     []int32
	keys    []uint64
	hdr     []byte
	disp    uint16

	// origin
	checked  int
	started  bool
	firstPut bool

	// target
	originIdx int32
	originOp  uint64
	pos       int
	received  uint64
	forwarded uint64
	notified  bool // the first MCDATA to the next target went out
	handled   bool // the received callback ran
	named     bool
	// fwdErr is why the multicast cannot go on at this target: the next
	// target could not take a deposit or the request, or the target next
	// to it in the chain (either side) failed. The origin was told
	// (MCFAIL), and the target keeps its buffer registered, so that the
	// origin's deposits still land, until the origin calls the multicast
	// off (MCABORT) or dies. Were it to withdraw at once, the origin's
	// next deposit would fail on it and the origin would blame it
	// instead of the target that failed.
	fwdErr error
	// watching: the target counts among the operations of the targets
	// next to it in the chain (mcWatchNeighbours).
	watching bool
}

// entries encodes the chain with the keys known.
func (st *mcState) entries() []byte {
	b := make([]byte, len(st.targets)*wire.MCEntrySize)
	for i, t := range st.targets {
		var k uint64
		if st.keys != nil {
			k = st.keys[i]
		}
		wire.PutEntry(b, i, uint32(t.Rank), uint32(t.Context), k)
	}
	return b
}

// sendRaw sends an encoded packet of a multicast under way to the peer at
// idx, queueing a copy if need be with the control packets of the STOP
// protocol, ahead of the instructions queued for the peer (peer.ctl): behind
// them it could wait for a Fence that waits for the multicast, or for
// another rank whose own Fence does. (The multicast itself started in its
// turn among the instructions for its first target.)
func (c *Context) sendRaw(idx int32, pkt []byte) {
	p := c.peer(idx)
	if p.failed != nil {
		return
	}
	in := inst{kind: instRaw, dest: idx, data: pkt}
	if p.ctl.len() > 0 || !c.inject(p, &in) {
		p.ctl.push(&in)
		c.activate(p)
	}
}

func (c *Context) injectRaw(p *peer, in *inst) bool {
	b := p.reserve(len(in.data))
	if b == nil {
		return false
	}
	copy(b, in.data)
	p.commit(nil)
	p.owed = p.msg.Injected()
	return true
}

// sendMC sends a packet of a multicast under way.
func (c *Context) sendMC(idx int32, k wire.Kind, disp uint16, hdr []byte, m *wire.MC) {
	c.sendRaw(idx, encodeMC(k, disp, hdr, m))
}

func encodeMC(k wire.Kind, disp uint16, hdr []byte, m *wire.MC) []byte {
	pkt := make([]byte, wire.MCSize(len(m.Entries)/wire.MCEntrySize, len(hdr)))
	wire.PutMC(pkt, k, disp, hdr, m)
	return pkt
}

// watch makes the origin notice the failure of any of its targets.
func (c *Context) watch(st *mcState, d int) {
	for _, idx := range st.idx {
		p := c.peer(idx)
		p.ops += d
		c.activate(p)
	}
}

// mcStart begins a multicast at the origin.
func (c *Context) mcStart(in *inst) {
	st := in.mc
	o := c.ops.alloc(opMcOrigin, c.peer(st.idx[0]))
	o.mc = st
	o.local = in.data
	o.size = uint64(len(in.data))
	o.done = in.done
	st.keys = make([]uint64, len(st.targets))
	c.watch(st, +1)
	for _, idx := range st.idx {
		if p := c.peer(idx); p.failed != nil {
			c.mcAbort(o, c.posOf(st, idx), p.failed)
			return
		}
	}
	c.stats.MulticastsSent++
	self := c.Endpoint()
	c.sendMC(st.idx[0], wire.KindMCRTS, st.disp, st.hdr, &wire.MC{
		Op: o.id(), Size: o.size, Pos: 0, Way: st.way,
		OriginRank: uint32(self.Rank), OriginCtx: uint32(self.Context),
		Entries: st.entries(),
	})
}

func (c *Context) posOf(st *mcState, idx int32) int {
	for i, x := range st.idx {
		if x == idx {
			return i
		}
	}
	return -1
}

// mcOrigin returns the live origin op with id, if src is one of its targets.
func (c *Context) mcOrigin(src int32, id uint64) *op {
	o := c.ops.lookup(id)
	if o == nil || o.kind != opMcOrigin || c.posOf(o.mc, src) < 0 {
		return nil
	}
	return o
}

// onMCOrigin handles the packets the targets send the origin.
func (c *Context) onMCOrigin(src int32, pk *wire.Packet) {
	m := &pk.MC
	o := c.mcOrigin(src, m.Op)
	if o == nil {
		c.stats.StaleAcks++
		// A target that checks in with a multicast already called off (the
		// request overtook nothing: it travels on other links than the
		// abort) is told again.
		if pk.Kind == wire.KindMCFAIL {
			// A target waits for the call-off of a multicast already
			// over here: tell it.
			c.sendAbort(src, m.Op, m.Pos, c.Endpoint())
			return
		}
		if pk.Kind == wire.KindMCCTS && m.Status == wire.StatusOK {
			for _, g := range c.mcGone {
				if g.op == m.Op {
					c.sendAbort(src, m.Op, g.pos, c.Endpoint())
				}
			}
		}
		if pk.Kind == wire.KindMCGO {
			c.mcGoneGO(m)
		}
		return
	}
	st := o.mc
	n := len(st.targets)
	switch pk.Kind {
	case wire.KindMCCTS:
		if int(m.Pos) >= n || st.idx[m.Pos] != src {
			c.mcAbort(o, c.posOf(st, src), ErrCorrupt)
			return
		}
		if m.Status != wire.StatusOK {
			c.mcAbort(o, int(m.Pos), statusErr(st.targets[m.Pos], m.Status))
			return
		}
		if st.keys[m.Pos] == 0 {
			st.keys[m.Pos] = m.Key
			st.checked++
		}
		if st.checked == n {
			c.mcData(o)
		}
	case wire.KindMCGO:
		if m.NumEntries() != n || st.idx[n-1] != src {
			c.mcAbort(o, c.posOf(st, src), ErrCorrupt)
			return
		}
		for i := 0; i < n; i++ {
			r, cx, k := m.Entry(i)
			if int(r) != st.targets[i].Rank || int(cx) != st.targets[i].Context {
				c.mcAbort(o, i, ErrCorrupt)
				return
			}
			st.keys[i] = k
		}
		st.checked = n
		c.mcData(o)
	case wire.KindMCFAIL:
		pos := int(m.Pos)
		if pos >= n {
			pos = c.posOf(st, src)
		}
		c.mcAbort(o, pos, statusErr(st.targets[pos], m.Status))
	case wire.KindMCDONE:
		if st.idx[n-1] != src || !st.started {
			c.mcAbort(o, c.posOf(st, src), ErrCorrupt)
			return
		}
		c.watch(st, -1)
		done := o.done
		c.ops.release(o)
		if done != nil {
			done(nil)
		}
	}
}

// mcData starts the transfer of the data once every target checked in.
func (c *Context) mcData(o *op) {
	st := o.mc
	if st.started {
		return
	}
	st.started = true
	if o.size == 0 {
		c.mcNotify(o, 0, 0)
		return
	}
	chunk := uint64(c.cfg.McastChunk)
	for off := uint64(0); off < o.size; off += chunk {
		n := min(chunk, o.size-off)
		c.mcPut(o, o.local[off:off+n:off+n], transport.Key(st.keys[0]), off)
	}
}

// mcPut PUTs a piece of the data into the next buffer of the chain, as a
// child of o whose completion sends the deposit notice.
func (c *Context) mcPut(o *op, local []byte, key transport.Key, off uint64) {
	p := c.peer(c.mcNext(o))
	ch := c.ops.alloc(opRDMA, p)
	ch.parent, ch.parentGen = o, o.gen
	ch.rk = transport.Put
	ch.local = local
	ch.key = key
	ch.off = off
	ch.size = uint64(len(local))
	ch.remaining = ch.size
	ch.remote = true
	c.stats.MulticastBytesPut += ch.size
	o.children++
	if p.failed != nil {
		ch.err = p.failed
		c.finishRDMA(ch)
		return
	}
	if p.q.len() > 0 || !c.pump(ch) {
		c.queueMore(p, ch)
	}
}

// mcNext is the peer index o deposits into: the first target for the origin,
// the next one for a target.
func (c *Context) mcNext(o *op) int32 {
	if o.kind == opMcOrigin {
		return o.mc.idx[0]
	}
	return o.mc.idx[o.mc.pos+1]
}

// mcNotify tells the next in the chain that [off, off+n) was deposited.
func (c *Context) mcNotify(o *op, off, n uint64) {
	st := o.mc
	m := wire.MC{Off: off, Len: n, Size: o.size, Way: st.way}
	if o.kind == opMcOrigin {
		self := c.Endpoint()
		m.Op, m.Pos = o.id(), 0
		m.OriginRank, m.OriginCtx = uint32(self.Rank), uint32(self.Context)
		if !st.firstPut {
			st.firstPut = true
			m.Entries = st.entries()
		}
	} else {
		origin := c.endpointAt(st.originIdx)
		m.Op, m.Pos = st.originOp, uint32(st.pos+1)
		m.OriginRank, m.OriginCtx = uint32(origin.Rank), uint32(origin.Context)
		if !st.notified {
			st.notified = true
			m.Entries = st.entries()
		}
	}
	c.sendMC(c.mcNext(o), wire.KindMCDATA, 0, nil, &m)
}

// mcAbort calls the multicast off for the failure of the target at pos:
// every target is told, and sent completes with the error. The one at pos
// is told too: the origin may still reach a target that another target
// failed (the path between those two broke), and it would wait for its
// data for ever. (The call-off to a peer this context has failed is
// dropped.)
func (c *Context) mcAbort(o *op, pos int, cause error) {
	st := o.mc
	var failed Endpoint
	if pos >= 0 && pos < len(st.targets) {
		failed = st.targets[pos]
	}
	err := fmt.Errorf("%w: target %v: %w", ErrMulticast, failed, asPeerErr(failed, cause))
	self := c.Endpoint()
	for _, idx := range st.idx {
		c.sendAbort(idx, o.id(), uint32(max(pos, 0)), self)
	}
	c.watch(st, -1)
	if len(c.mcGone) >= 64 {
		copy(c.mcGone, c.mcGone[1:])
		c.mcGone = c.mcGone[:63]
	}
	c.mcGone = append(c.mcGone, mcTombstone{op: o.id(), pos: uint32(max(pos, 0))})
	done := o.done
	c.ops.release(o)
	if done != nil {
		done(err)
	}
}

// mcGoneGO answers the last target's return of a store-and-forward request
// that the origin called off before the request reached the targets after
// the one that failed: the call-off overtook the request on its way (it
// travels on other links) and they prepared their buffers after it, so
// every target of the chain is told again (see mcAbort).
func (c *Context) mcGoneGO(m *wire.MC) {
	for _, g := range c.mcGone {
		if g.op == m.Op {
			c.mcCallOff(m, g.pos)
			return
		}
	}
}

// mcCallOff calls the multicast m names (origin and op) off at every
// target of its chain (m's entries) but this context, for the failure of
// the target at pos (sendAbort).
func (c *Context) mcCallOff(m *wire.MC, pos uint32) {
	self := c.Endpoint()
	origin := Endpoint{Rank: int(m.OriginRank), Context: int(m.OriginCtx)}
	for i := 0; i < m.NumEntries(); i++ {
		r, cx, _ := m.Entry(i)
		ep := Endpoint{Rank: int(r), Context: int(cx)}
		if idx, err := c.peerIndex(ep); err == nil && ep != self {
			c.sendAbort(idx, m.Op, pos, origin)
		}
	}
}

// sendAbort tells the peer at idx that the multicast op of origin is
// called off for the failure of the target at pos (MCABORT). A target that
// does not know the multicast, or knows it no more, ignores it.
func (c *Context) sendAbort(idx int32, op uint64, pos uint32, origin Endpoint) {
	c.sendMC(idx, wire.KindMCABORT, 0, nil, &wire.MC{
		Op: op, Pos: pos, Status: wire.StatusRemoteIO,
		OriginRank: uint32(origin.Rank), OriginCtx: uint32(origin.Context),
	})
}

// mcTombstone remembers a multicast the origin called off, for targets that
// check in late.
type mcTombstone struct {
	op  uint64
	pos uint32
}

// mcTarget returns the target op for the multicast op of the origin at
// origin, or nil.
func (c *Context) mcTarget(origin int32, op uint64) *op {
	for _, o := range c.mcTargets {
		if o.mc.originIdx == origin && o.mc.originOp == op {
			return o
		}
	}
	return nil
}

// onMCRTS is a target's side of the request to send.
func (c *Context) onMCRTS(src int32, pk *wire.Packet) {
	m := &pk.MC
	n := m.NumEntries()
	self := c.Endpoint()
	origin, err := c.peerIndex(Endpoint{Rank: int(m.OriginRank), Context: int(m.OriginCtx)})
	if err != nil || int(m.Pos) >= n {
		c.stats.Malformed++
		c.asyncError(peerErr(c.endpointAt(src), fmt.Errorf("multicast request: %w", ErrCorrupt)))
		return
	}
	if r, cx, _ := m.Entry(int(m.Pos)); int(r) != self.Rank || int(cx) != self.Context {
		c.stats.Malformed++
		c.asyncError(peerErr(c.endpointAt(src), fmt.Errorf("multicast request for another target: %w", ErrCorrupt)))
		return
	}
	if c.mcTarget(origin, m.Op) != nil {
		return // a duplicate
	}
	if c.peer(origin).failed != nil {
		// A target forwarded the request of an origin this context has
		// failed already: nothing would fail a target made now (its
		// origin's failure was handled), and no call-off can come.
		// Dropped unseen, like the rest of what the origin sent. The
		// targets before this one hold the request and may wait for
		// data: the origin has lost this target and calls the multicast
		// off, but its call-off may have reached them before the
		// request did, and the request's return that would have had it
		// call the multicast off again (MCGO, see mcGoneGO) cannot reach
		// it from here. So this target calls it off along the chain.
		c.stats.MulticastsDropped++
		c.mcCallOff(m, m.Pos)
		return
	}
	st := &mcState{
		way:       m.Way,
		targets:   make([]Endpoint, n),
		idx:       make([]int32, n),
		keys:      make([]uint64, n),
		hdr:       append([]byte(nil), pk.Header...),
		disp:      pk.Dispatch,
		originIdx: origin,
		originOp:  m.Op,
		pos:       int(m.Pos),
	}
	for i := 0; i < n; i++ {
		r, cx, k := m.Entry(i)
		ep := Endpoint{Rank: int(r), Context: int(cx)}
		idx, err := c.peerIndex(ep)
		if err != nil {
			c.stats.Malformed++
			c.asyncError(peerErr(c.endpointAt(src), fmt.Errorf("multicast request: %w", err)))
			return
		}
		st.targets[i], st.idx[i], st.keys[i] = ep, idx, k
	}
	o := c.ops.alloc(opMcTarget, c.peer(origin))
	o.mc = st
	o.size = m.Size
	c.mcTargets = append(c.mcTargets, o)
	c.stats.MulticastsReceived++
	c.mcWatchNeighbours(o, +1)
	if st.way == uint32(MulticastForward) && st.pos+1 < n {
		// Forward the request unprocessed before the handler runs,
		// unless the next target has failed here: the origin, which
		// may still reach it, would wait for its check-in for ever.
		if err := c.peerFault(st.idx[st.pos+1]); err != nil {
			c.mcForwardFailed(o, err)
		} else {
			fwd := *m
			fwd.Pos++
			c.sendMC(st.idx[st.pos+1], wire.KindMCRTS, st.disp, st.hdr, &fwd)
		}
	}
	var h *handlerEntry
	if pk.Dispatch < MaxDispatch {
		h = c.dispatch[pk.Dispatch].Load()
	}
	if h == nil {
		c.stats.NoDispatch++
		c.mcDecline(o, wire.StatusNoDispatch)
		return
	}
	msg := &c.msg
	msg.Source = c.endpointAt(origin)
	msg.Dispatch = Dispatch(pk.Dispatch)
	msg.Header = pk.Header
	msg.Data = nil
	msg.src = origin
	msg.claimed = false
	msg.inline = false
	msg.size = m.Size
	msg.stream, msg.hold = nil, false
	msg.mc = o
	h.fn(c, msg)
	msg.Header, msg.mc = nil, nil
	if !msg.claimed {
		c.stats.Declined++
		c.mcDecline(o, wire.StatusDeclined)
	}
}

// mcPrepare names a target's buffer and checks in.
func (c *Context) mcPrepare(o *op, buf []byte, done func(error)) {
	st := o.mc
	st.named = true
	o.buf = buf[:o.size:o.size]
	o.done = done
	var key uint64
	if o.size > 0 {
		k, err := c.client.regions.Register(o.buf)
		if err != nil {
			c.mcDecline(o, wire.StatusRemoteIO)
			if done != nil {
				done(err)
			}
			return
		}
		o.rkey = k
		key = uint64(k)
	}
	n := len(st.targets)
	switch st.way {
	case uint32(MulticastForward):
		c.sendMC(st.originIdx, wire.KindMCCTS, 0, nil, &wire.MC{
			Op: st.originOp, Pos: uint32(st.pos), Key: key,
			OriginRank: uint32(c.endpointAt(st.originIdx).Rank), OriginCtx: uint32(c.endpointAt(st.originIdx).Context),
		})
	default:
		st.keys[st.pos] = key
		origin := c.endpointAt(st.originIdx)
		m := wire.MC{Op: st.originOp, Size: o.size, Way: st.way, OriginRank: uint32(origin.Rank), OriginCtx: uint32(origin.Context), Entries: st.entries()}
		if st.pos+1 < n {
			m.Pos = uint32(st.pos + 1)
			if err := c.peerFault(st.idx[st.pos+1]); err != nil {
				// The request cannot go on: tell the origin, which may
				// have called the multicast off before this target had
				// its request (see mcGoneGO), and wait for its call-off.
				c.mcForwardFailed(o, err)
				return
			}
			c.sendMC(st.idx[st.pos+1], wire.KindMCRTS, st.disp, st.hdr, &m)
		} else {
			m.Pos = uint32(st.pos)
			c.sendMC(st.originIdx, wire.KindMCGO, 0, nil, &m)
		}
	}
}

// mcDecline reports a target that will not take the data.
func (c *Context) mcDecline(o *op, status uint32) {
	st := o.mc
	origin := c.endpointAt(st.originIdx)
	k := wire.KindMCFAIL
	if st.way == uint32(MulticastForward) {
		k = wire.KindMCCTS
	}
	c.sendMC(st.originIdx, k, 0, nil, &wire.MC{
		Op: st.originOp, Pos: uint32(st.pos), Status: status,
		OriginRank: uint32(origin.Rank), OriginCtx: uint32(origin.Context),
	})
	c.mcRelease(o)
}

// onMCTarget handles the packets a target receives after the request.
func (c *Context) onMCTarget(src int32, pk *wire.Packet) {
	m := &pk.MC
	origin, err := c.peerIndex(Endpoint{Rank: int(m.OriginRank), Context: int(m.OriginCtx)})
	if err != nil {
		c.stats.Malformed++
		return
	}
	o := c.mcTarget(origin, m.Op)
	if o == nil {
		return // called off, or completed
	}
	st := o.mc
	switch pk.Kind {
	case wire.KindMCABORT:
		if src != origin {
			// Another target of the chain, the one at m.Pos, called it
			// off: it lost its path to the origin (failMcastPeer,
			// onMCRTS). Tell the origin, which then calls the multicast
			// off naming that target, or has already and tells this one
			// again, and keep the buffer meanwhile (see fwdErr): were
			// it withdrawn at once, the origin's next deposit would fail
			// on it and the origin would blame this target. An origin
			// gone from here too fails this target by itself.
			if st.fwdErr == nil && int(m.Pos) < len(st.targets) && int(m.Pos) != st.pos {
				c.mcTargetFailed(o, int(m.Pos), errOriginLost)
			}
			return
		}
		if st.fwdErr != nil {
			c.mcFinish(o, st.fwdErr)
			return
		}
		if int(m.Pos) >= len(st.targets) {
			c.mcFinish(o, ErrMulticast)
			return
		}
		failed := st.targets[m.Pos]
		if int(m.Pos) == st.pos {
			// The target before this one could not pass the multicast
			// on to it: this target names the one it was to come from.
			failed = c.endpointAt(c.mcPrev(o))
		}
		c.mcFinish(o, fmt.Errorf("%w: target %v: %w", ErrMulticast, failed, peerErr(failed, errTargetFailed)))
	case wire.KindMCDATA:
		if st.fwdErr != nil {
			return // waiting for the origin to call it off
		}
		if !st.named || m.Off+m.Len < m.Off || m.Off+m.Len > o.size {
			c.mcFinish(o, peerErr(c.endpointAt(src), fmt.Errorf("multicast deposit outside the buffer: %w", ErrCorrupt)))
			return
		}
		if n := m.NumEntries(); n > 0 {
			if n != len(st.targets) {
				c.mcFinish(o, peerErr(c.endpointAt(src), ErrCorrupt))
				return
			}
			for i := 0; i < n; i++ {
				_, _, st.keys[i] = m.Entry(i)
			}
		}
		st.received += m.Len
		last := st.pos+1 == len(st.targets)
		if !last {
			if m.Len == 0 {
				c.mcNotify(o, m.Off, 0)
				st.forwarded = o.size
			} else {
				c.mcPut(o, o.buf[m.Off:m.Off+m.Len:m.Off+m.Len], transport.Key(st.keys[st.pos+1]), m.Off)
			}
		}
		if st.received == o.size {
			if last {
				c.sendMC(st.originIdx, wire.KindMCDONE, 0, nil, &wire.MC{Op: st.originOp, Pos: uint32(st.pos), OriginRank: m.OriginRank, OriginCtx: m.OriginCtx})
			}
			if last || st.forwarded == o.size {
				c.mcFinish(o, nil)
			}
		}
	}
}

// mcReceived runs a target's received callback once.
func (c *Context) mcReceived(o *op, err error) {
	st := o.mc
	if st.handled {
		return
	}
	st.handled = true
	if err == nil {
		c.stats.MulticastsDelivered++
	}
	if o.done != nil {
		o.done(err)
	}
}

// mcFinish completes a target with err and frees it.
func (c *Context) mcFinish(o *op, err error) {
	// Withdraw the buffer first: no deposit lands in it once the program
	// has it back.
	if o.rkey != 0 {
		_ = c.client.regions.Deregister(o.rkey)
		o.rkey = 0
	}
	c.mcReceived(o, err)
	c.mcRelease(o)
}

func (c *Context) mcRelease(o *op) {
	c.mcWatchNeighbours(o, -1)
	if o.rkey != 0 {
		_ = c.client.regions.Deregister(o.rkey)
		o.rkey = 0
	}
	for i, x := range c.mcTargets {
		if x == o {
			last := len(c.mcTargets) - 1
			c.mcTargets[i] = c.mcTargets[last]
			c.mcTargets[last] = nil
			c.mcTargets = c.mcTargets[:last]
			break
		}
	}
	c.ops.release(o)
}

// mcChildDone accounts a finished deposit PUT of the origin or a target.
func (c *Context) mcChildDone(o *op, off, n uint64, err error) {
	o.children--
	st := o.mc
	if o.kind == opMcOrigin {
		if err != nil {
			c.mcAbort(o, 0, err)
			return
		}
		c.mcNotify(o, off, n)
		return
	}
	if err != nil || st.fwdErr != nil {
		if st.fwdErr == nil {
			// The next target could not take the deposit.
			c.mcForwardFailed(o, err)
		}
		return // waiting for the origin's MCABORT (see fwdErr)
	}
	c.mcNotify(o, off, n)
	st.forwarded += n
	if st.forwarded == o.size && st.received == o.size {
		c.mcFinish(o, nil)
	}
}

// mcForwardFailed tells the origin that the target o could not pass the
// multicast on to the next target, for err, and has o wait for the origin
// to call the multicast off (see fwdErr).
func (c *Context) mcForwardFailed(o *op, err error) {
	c.mcTargetFailed(o, o.mc.pos+1, err)
}

// mcTargetFailed tells the origin that the target at pos failed here, for
// err, and has o wait for the origin to call the multicast off (see
// fwdErr).
func (c *Context) mcTargetFailed(o *op, pos int, err error) {
	st := o.mc
	origin := c.endpointAt(st.originIdx)
	c.sendMC(st.originIdx, wire.KindMCFAIL, 0, nil, &wire.MC{
		Op: st.originOp, Pos: uint32(pos), Status: wire.StatusRemoteIO,
		OriginRank: uint32(origin.Rank), OriginCtx: uint32(origin.Context),
	})
	failed := st.targets[pos]
	st.fwdErr = fmt.Errorf("%w: target %v: %w", ErrMulticast, failed, asPeerErr(failed, err))
}

// mcPrev is the peer a target's data comes from: the target before it in
// the chain, or the origin.
func (c *Context) mcPrev(o *op) int32 {
	if o.mc.pos == 0 {
		return o.mc.originIdx
	}
	return o.mc.idx[o.mc.pos-1]
}

// mcWatchNeighbours makes a target notice (d = +1), or stop noticing
// (d = -1), the failure of the targets before and after it in the chain,
// which it may have nothing in flight with while it waits (see
// failMcastPeer). The origin's failure fails the target's op itself.
func (c *Context) mcWatchNeighbours(o *op, d int) {
	st := o.mc
	if st.watching == (d > 0) {
		return
	}
	st.watching = d > 0
	if st.pos > 0 {
		p := c.peer(st.idx[st.pos-1])
		p.ops += d
		c.activate(p)
	}
	if st.pos+1 < len(st.idx) {
		p := c.peer(st.idx[st.pos+1])
		p.ops += d
		c.activate(p)
	}
}

// peerFault returns why the peer at idx cannot be reached, or nil.
func (c *Context) peerFault(idx int32) error {
	p := c.peer(idx)
	if p.failed != nil {
		return p.failed
	}
	return p.link.Err()
}

// failMcastPeer fails the multicasts of which the peer p is a target, and
// tells the origin of every multicast under way here whose chain breaks
// at p: the target after this one, which then cannot be passed the
// multicast, or the one before it, which then cannot pass it on here.
// The origin may still reach p (only the path between p and this context
// broke), and without word from here it would wait for p for ever.
func (c *Context) failMcastPeer(p *peer, err error) {
	for _, o := range c.ops.ops {
		if o.live && o.kind == opMcOrigin {
			if pos := c.posOf(o.mc, p.idx); pos >= 0 {
				c.mcAbort(o, pos, err)
			}
		}
	}
	for _, o := range c.mcTargets {
		st := o.mc
		switch {
		case st.originIdx == p.idx:
			// The target's op fails with its origin (failOp). The
			// other targets may still reach the origin, which has lost
			// this one and calls the multicast off; but its call-off
			// may have reached them before the request did, and the
			// request's return that would have had it call the
			// multicast off again (this target's MCGO or MCCTS) may be
			// lost with the path: call it off along the chain.
			origin := c.endpointAt(st.originIdx)
			for i, idx := range st.idx {
				if i != st.pos {
					c.sendAbort(idx, st.originOp, uint32(st.pos), origin)
				}
			}
		case st.fwdErr != nil:
		case st.pos+1 < len(st.idx) && st.idx[st.pos+1] == p.idx:
			c.mcForwardFailed(o, err)
		case st.pos > 0 && st.idx[st.pos-1] == p.idx && (o.size == 0 || st.received < o.size):
			c.mcTargetFailed(o, st.pos-1, err)
		}
	}
}
