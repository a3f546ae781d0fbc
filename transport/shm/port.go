package shm

import (
	"fmt"
	"sync/atomic"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// port is one local context's attachment: the consumer of the rings into
// the context, in this rank's segment, and the producer side of its links
// into peers' segments, with the engine that performs its RDMA descriptors.
type port struct {
	a    *Adapter
	ctx  int
	addr transport.Addr
	bell *transport.Doorbell // the doorbell the context sleeps on
	race raceRecv            // race builds: Poll's receiver (race.go)

	// Consumer side; owner goroutine only.
	gen     *atomic.Uint64 // this context's linkgen word
	seenGen uint64
	ins     []*inbound
	have    []bool // by li*nctx+d: an inbound exists
	rr      int

	// Producer side.
	links  map[transport.Addr]*link // owner goroutine only
	out    atomic.Pointer[[]*link]  // read by the watcher too
	events *atomic.Uint64           // this context's events word
	seenEv uint64

	// RDMA engine; owner goroutine only but for work.
	work   atomic.Uint32 // set when a link's RDMA FIFO got descriptors
	active int           // transfers in progress
	chanBy []*link       // by owner local index: the link using the channel
	nextID []uint64      // by owner local index: last request id
	ways   []wayChooser  // by owner local index: measured rates
	closed atomic.Bool
	cma    cmaIO
	batch  cmaBatch
}

// inbound is the consumer side of one ring into the port.
type inbound struct {
	from     transport.Addr
	rd       *ring.Reader
	hdr      *linkHeader
	prodBell *atomic.Uint32 // the producing context's doorbell word
	dead     bool
}

// link is the producer side of one ring out of the port, with its RDMA FIFO.
type link struct {
	tl   *transport.Link
	pr   *peer
	ctx  int // the remote context
	hdr  *linkHeader
	slot *atomic.Uint64 // this context's access slot in the owner's segment
	// atom: the regions of the last two accesses performed in place (an
	// atomic on a lock word and a copy of the data it guards, say), and
	// which of them the next new region replaces. A key names one
	// registration for the owner's lifetime (transport.Key), so while the
	// mirror entry holds the key, the region it describes is this one: the
	// next access on the key checks the entry and skips reading it out.
	atom     [2]atomRegion
	atomNext uint8
	x        *xfer // the RDMA descriptor in progress, or nil
	xbuf     xfer  // its storage, reused
	// serialTo: descriptors below this FIFO position go one by one (a
	// batch of them failed; see runBatch).
	serialTo uint64
	// share is the owner's share of a batched cooperative copy's
	// descriptors, in sixteenths (coop.go).
	share uint8
}

func newPort(a *Adapter, ctx int, bell *transport.Doorbell) *port {
	n := len(a.local)
	p := &port{
		a:       a,
		ctx:     ctx,
		addr:    transport.Addr{Rank: int32(a.rank), Context: int32(ctx)},
		bell:    bell,
		gen:     a.self.linkGen(ctx),
		seenGen: ^uint64(0),
		have:    make([]bool, n*a.self.l.nctx),
		links:   make(map[transport.Addr]*link),
		events:  a.self.events(ctx),
		chanBy:  make([]*link, n),
		nextID:  make([]uint64, n),
		ways:    make([]wayChooser, n),
	}
	empty := []*link{}
	p.out.Store(&empty)
	return p
}

// Link returns the link to the remote context to, connecting the ring that
// to's rank holds for this context.
func (p *port) Link(to transport.Addr) (*transport.Link, error) {
	if l, ok := p.links[to]; ok {
		return l.tl, nil
	}
	if p.closed.Load() {
		return nil, transport.ErrClosed
	}
	a := p.a
	li, ok := a.localOf[int(to.Rank)]
	if ok && li != a.li && a.peers[li] == nil && a.lost[li] != nil {
		return nil, peerErr(to, a.lost[li])
	}
	if !ok || li == a.li || a.peers[li] == nil || to.Context < 0 || int(to.Context) >= a.self.l.nctx {
		return nil, peerErr(to, transport.ErrUnreachable)
	}
	pr := a.peers[li]
	if err := pr.err(); err != nil {
		return nil, peerErr(to, err)
	}
	c := int(to.Context)
	hdr := pr.seg.linkHeader(c, a.li, p.ctx)
	if hdr.connected.Load() != 0 {
		return nil, peerErr(to, fmt.Errorf("%w: ring already connected", transport.ErrCorrupt))
	}
	r, err := ring.New(pr.seg.ringMem(c, a.li, p.ctx), pr.seg.l.slots)
	if err != nil {
		return nil, err
	}
	tl := &transport.Link{
		To:      to,
		Msg:     r,
		MsgBell: transport.NewSharedDoorbell(pr.seg.portBell(c)),
		RDMA:    transport.NewRDMAQueue(a.opts.RDMASlots),
		// A lone message streams whole up to 64 KiB and is stopped and
		// fetched above: on an AMD 2-core host whose cores pass lines
		// slowly, a ping-pong of 128 / 256 KiB took 0.71 / 0.47 times as
		// long stopped as streamed whole, 64 KiB 1.08 times (medians of
		// 4 interleaved runs). Cross-memory attach had moved less when
		// 256 KiB was chosen here: then streamed whole moved twice as
		// much, and took half the time.
		StopAbove: 64 << 10,
		Shared:    true,
	}
	if pr.cma {
		// GETs toward one owner are moved together by cross-memory attach
		// (batch.go): with other messages of the peer in progress, a
		// window of 64 messages of 12 to 256 KiB moved 1.1 to 2 times
		// more stopped at once and fetched than streamed.
		tl.StopBusyAbove = 8 << 10
		tl.InlineBusyMax = 16<<10 + 512
		// From 8.5 KiB the way is measured: on an AMD 2-core host a
		// window of 16 KiB messages moved 1.07-1.18 times as much
		// announced and fetched as inline while its cores passed lines
		// slowly (one way 0.3 us), and 0.62 times as much while they
		// passed them fast (0.05 us).
		tl.InlineBusyMin = 8<<10 + 512
	}
	tl.RDMA.Work = &p.work
	// Connect, then look whether the consumer closed: see linkHeader.
	hdr.connected.Store(1)
	pr.seg.linkGen(c).Add(1)
	transport.RingShared(pr.seg.portBell(c))
	if pr.seg.portClosed(c).Load() != 0 || hdr.consClosed.Load() != 0 {
		tl.Fail(peerErr(to, transport.ErrClosed))
	}
	if err := pr.err(); err != nil {
		tl.Fail(peerErr(to, err))
	}
	l := &link{tl: tl, pr: pr, ctx: c, hdr: hdr, slot: pr.seg.access(a.li, p.ctx), share: shareStart}
	tl.Atomic = func(args transport.AtomicArgs) (uint64, bool, error) { return p.atomicInPlace(l, args) }
	tl.Copy = func(k transport.RDMAKind, local []byte, key transport.Key, off uint64) bool {
		return p.copyInPlace(l, k, local, key, off)
	}
	p.links[to] = l
	old := *p.out.Load()
	grown := append(old[:len(old):len(old)], l)
	p.out.Store(&grown)
	return tl, nil
}

// Poll hands arrived packets to r, visiting the rings round-robin.
func (p *port) Poll(r transport.Receiver, budget int) int {
	if g := p.gen.Load(); g != p.seenGen {
		p.rescan(g)
	}
	ins := p.ins
	n := len(ins)
	if n == 0 || budget <= 0 {
		return 0
	}
	// Handlers read memory the engines and other ranks' copies wrote, and
	// what they read before returning, those may overwrite once a message
	// sent afterwards arrives (race builds only; see race.go).
	raceAcquire()
	r = p.raceReceiver(r)
	got := 0
	start := p.rr
	if start >= n {
		start = 0
	}
	for i, j := 0, start; i < n && got < budget; i, j = i+1, j+1 {
		if j == n {
			j = 0
		}
		in := ins[j]
		if in.dead {
			continue
		}
		k, wake, err := transport.PollRing(in.rd, in.from, r, budget-got)
		got += k
		if err != nil {
			p.refuse(in, closeCorrupt)
		}
		if wake {
			transport.RingShared(in.prodBell)
		}
	}
	p.rr = start + 1
	raceRelease()
	return got
}

// rescan starts reading the rings producers connected since the last scan.
// KeepEpochs returns the epochs the port's readers counted, by how they
// gave back the slots of data not copied out: zeroed or left unzeroed
// (transport.KeepCounter, ring.Reader.KeepEpochs).
func (p *port) KeepEpochs() (zeroed, kept uint64) {
	for _, in := range p.ins {
		z, k := in.rd.KeepEpochs()
		zeroed += z
		kept += k
	}
	return zeroed, kept
}

func (p *port) rescan(g uint64) {
	p.seenGen = g
	a := p.a
	nctx := a.self.l.nctx
	for li := range a.local {
		if li == a.li || a.peers[li] == nil {
			continue
		}
		for d := 0; d < nctx; d++ {
			if p.have[li*nctx+d] {
				continue
			}
			hdr := a.self.linkHeader(p.ctx, li, d)
			if hdr.connected.Load() == 0 {
				continue
			}
			r, err := ring.New(a.self.ringMem(p.ctx, li, d), a.self.l.slots)
			if err != nil {
				continue
			}
			p.have[li*nctx+d] = true
			in := &inbound{
				from:     transport.Addr{Rank: int32(a.local[li]), Context: int32(d)},
				rd:       r.NewReader(),
				hdr:      hdr,
				prodBell: a.peers[li].seg.portBell(d),
			}
			in.rd.SetKeep(a.opts.keep())
			if p.closed.Load() {
				in.dead = true
			}
			p.ins = append(p.ins, in)
		}
	}
}

// refuse stops consuming a ring and tells its producer why.
func (p *port) refuse(in *inbound, why uint32) {
	in.dead = true
	in.hdr.consClosed.Store(why)
	li := p.a.localOf[int(in.from.Rank)]
	if pr := p.a.peers[li]; pr != nil {
		pr.seg.events(int(in.from.Context)).Add(1)
		transport.RingShared(pr.seg.portBell(int(in.from.Context)))
	}
}

// Progress runs the port's RDMA engine, notices links its peers closed, and
// serves peers' transfer requests on this rank's memory. It returns the
// number of descriptors finished and pieces moved.
func (p *port) Progress() int {
	n := 0
	if ev := p.events.Load(); ev != p.seenEv {
		p.seenEv = ev
		p.checkLinks()
	}
	if p.work.Load() != 0 || p.active > 0 {
		n += p.runRDMA()
	}
	if p.a.srv.pending() {
		n += p.a.srv.serve()
	}
	return n
}

// checkLinks fails the links whose consumer closed or refused the ring.
func (p *port) checkLinks() {
	for _, l := range *p.out.Load() {
		switch l.hdr.consClosed.Load() {
		case 0:
		case closeCorrupt:
			l.tl.Fail(peerErr(l.tl.To, fmt.Errorf("%w: the peer refused what this context wrote", transport.ErrCorrupt)))
		default:
			l.tl.Fail(peerErr(l.tl.To, transport.ErrClosed))
		}
	}
}

// Close detaches the context: rings into it are refused (their producers'
// links fail), links out of it fail.
func (p *port) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	a := p.a
	// Closed first, then look for connected rings: see linkHeader.
	a.self.portClosed(p.ctx).Store(1)
	p.rescan(p.gen.Load())
	for _, in := range p.ins {
		if in.hdr.consClosed.Load() == 0 {
			p.refuse(in, closeClosed)
		}
	}
	for _, l := range *p.out.Load() {
		l.hdr.prodClosed.Store(1)
		l.tl.Fail(transport.ErrClosed)
	}
	return nil
}

// failPeer fails the port's links to peer pr with err and wakes the
// context. The watcher calls it.
func (p *port) failPeer(pr *peer, err error) {
	for _, l := range *p.out.Load() {
		if l.pr == pr {
			l.tl.Fail(peerErr(l.tl.To, err))
		}
	}
	p.bell.Ring()
	transport.RingShared(p.a.self.portBell(p.ctx))
}
