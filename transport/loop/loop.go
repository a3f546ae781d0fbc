// Package loop is the in-process adapter: the ranks of a job are goroutines of
// one process (tests, and threads used as endpoints).
//
// Each link from a context A to a context B is a descriptor buffer in Go
// memory. A writes packets into it; B's port, when polled, reads them in
// place and hands them to B's receiver, then releases the slots and counts the
// transfer complete. From A's side that is an engine consuming its injection
// FIFO asynchronously, as a DMA engine does.
//
// One-sided GET and PUT descriptors go to a second FIFO per link, served by
// the port's RDMA engine, which copies between the local buffer and the
// target rank's registered region after checking the key and the bounds
// against the target's region table. The engine runs either on the initiator's
// goroutine, inside Progress (EngineInline), or on a goroutine of its own per
// port that sleeps when idle (EngineAsync).
package loop

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// Engine selects where RDMA descriptors are performed.
type Engine int

const (
	// EngineInline performs RDMA descriptors in Progress, on the goroutine
	// that owns the initiating context.
	EngineInline Engine = iota
	// EngineAsync performs them on a goroutine per port, concurrently with
	// the initiating context.
	EngineAsync
)

func (e Engine) String() string {
	switch e {
	case EngineInline:
		return "inline"
	case EngineAsync:
		return "async"
	}
	return fmt.Sprintf("Engine(%d)", int(e))
}

// Options configure a fabric. Zero values select the defaults.
type Options struct {
	RingSlots int    // slots per descriptor buffer; default 1024 (64 KiB)
	RDMASlots int    // descriptors per RDMA FIFO; default 256
	MaxRDMA   int    // largest single GET/PUT; default 0, no limit
	Engine    Engine // where RDMA descriptors run
}

// Fabric connects the ranks of one in-process job.
type Fabric struct {
	mu    sync.Mutex
	opts  Options
	ranks []*adapter
}

// NewFabric returns a fabric for n ranks.
func NewFabric(n int, opts Options) (*Fabric, error) {
	if n < 1 {
		return nil, fmt.Errorf("loop: %d ranks", n)
	}
	if opts.RingSlots == 0 {
		opts.RingSlots = 1024
	}
	if opts.RDMASlots == 0 {
		opts.RDMASlots = 256
	}
	if opts.RingSlots < 2 || opts.RingSlots > ring.MaxSlots || opts.RingSlots&(opts.RingSlots-1) != 0 {
		return nil, fmt.Errorf("loop: ring slots %d: want a power of two in [2, %d]", opts.RingSlots, ring.MaxSlots)
	}
	if opts.RDMASlots < 1 || opts.RDMASlots&(opts.RDMASlots-1) != 0 {
		return nil, fmt.Errorf("loop: RDMA slots %d: want a power of two", opts.RDMASlots)
	}
	return &Fabric{opts: opts, ranks: make([]*adapter, n)}, nil
}

// Size returns the number of ranks.
func (f *Fabric) Size() int { return len(f.ranks) }

// Attach returns the adapter of rank, whose registered memory is regions.
func (f *Fabric) Attach(rank int, regions *transport.Regions) (transport.Adapter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rank < 0 || rank >= len(f.ranks) {
		return nil, fmt.Errorf("loop: rank %d outside job of %d", rank, len(f.ranks))
	}
	if f.ranks[rank] != nil {
		return nil, fmt.Errorf("loop: rank %d attached twice", rank)
	}
	a := &adapter{f: f, rank: rank, regions: regions}
	f.ranks[rank] = a
	return a, nil
}

func (f *Fabric) port(to transport.Addr) (*port, error) {
	if to.Rank < 0 || int(to.Rank) >= len(f.ranks) || f.ranks[to.Rank] == nil {
		return nil, transport.ErrUnreachable
	}
	a := f.ranks[to.Rank]
	if to.Context < 0 || int(to.Context) >= len(a.ports) || a.ports[to.Context] == nil {
		return nil, transport.ErrUnreachable
	}
	p := a.ports[to.Context]
	if p.closed.Load() {
		return nil, transport.ErrClosed
	}
	return p, nil
}

type adapter struct {
	f       *Fabric
	rank    int
	regions *transport.Regions
	ports   []*port // guarded by f.mu
	closed  bool
}

func (a *adapter) Name() string { return "loop" }

func (a *adapter) Reaches(rank int) bool {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	return rank >= 0 && rank < len(a.f.ranks) && a.f.ranks[rank] != nil
}

func (a *adapter) Open(ctx int, bell *transport.Doorbell) (transport.Port, error) {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if a.closed {
		return nil, transport.ErrClosed
	}
	if ctx < 0 {
		return nil, fmt.Errorf("loop: context %d", ctx)
	}
	for len(a.ports) <= ctx {
		a.ports = append(a.ports, nil)
	}
	if a.ports[ctx] != nil {
		return nil, fmt.Errorf("loop: rank %d context %d opened twice", a.rank, ctx)
	}
	p := &port{
		a:     a,
		addr:  transport.Addr{Rank: int32(a.rank), Context: int32(ctx)},
		bell:  bell,
		links: make(map[transport.Addr]*transport.Link),
		stop:  make(chan struct{}),
	}
	empty := []*inbound{}
	p.inbound.Store(&empty)
	if a.f.opts.Engine == EngineAsync {
		p.ebell = transport.NewDoorbell()
		p.wg.Add(1)
		go p.engineLoop()
	}
	a.ports[ctx] = p
	return p, nil
}

func (a *adapter) Close() error {
	a.f.mu.Lock()
	if a.closed {
		a.f.mu.Unlock()
		return nil
	}
	a.closed = true
	ports := append([]*port(nil), a.ports...)
	a.f.mu.Unlock()
	for _, p := range ports {
		if p != nil {
			_ = p.Close()
		}
	}
	return nil
}

// inbound is the consumer side of a link into a port.
type inbound struct {
	from transport.Addr
	rd   *ring.Reader
	link *transport.Link
	bell *transport.Doorbell // the producer's doorbell
}

type port struct {
	_    [64]byte // ports of different ranks sit side by side; each is written per poll
	a    *adapter
	addr transport.Addr
	bell *transport.Doorbell

	inbound atomic.Pointer[[]*inbound] // copy-on-write under f.mu
	rr      int

	links map[transport.Addr]*transport.Link // owner goroutine only
	out   atomic.Pointer[[]*transport.Link]  // read by the engine

	closed atomic.Bool
	work   atomic.Uint32 // set when an RDMA FIFO of the port got descriptors

	// EngineAsync
	ebell *transport.Doorbell
	stop  chan struct{}
	wg    sync.WaitGroup

	_ [64]byte // see the padding at the top
}

func (p *port) Link(to transport.Addr) (*transport.Link, error) {
	if l, ok := p.links[to]; ok {
		return l, nil
	}
	if p.closed.Load() {
		return nil, transport.ErrClosed
	}
	f := p.a.f
	f.mu.Lock()
	defer f.mu.Unlock()
	dst, err := f.port(to)
	if err != nil {
		return nil, &transport.PeerError{Addr: to, Err: err}
	}
	r, err := ring.NewHeap(f.opts.RingSlots)
	if err != nil {
		return nil, err
	}
	l := &transport.Link{
		To:      to,
		Msg:     r,
		MsgBell: dst.bell,
		RDMA:    transport.NewRDMAQueue(f.opts.RDMASlots),
		MaxRDMA: f.opts.MaxRDMA,
		Shared:  true,
	}
	l.RDMA.Bell = p.ebell
	l.RDMA.Work = &p.work
	in := &inbound{from: p.addr, rd: r.NewReader(), link: l, bell: p.bell}
	old := *dst.inbound.Load()
	grown := append(old[:len(old):len(old)], in)
	dst.inbound.Store(&grown)
	var outs []*transport.Link
	if o := p.out.Load(); o != nil {
		outs = *o
	}
	outs = append(outs[:len(outs):len(outs)], l)
	p.out.Store(&outs)
	p.links[to] = l
	return l, nil
}

func (p *port) Poll(r transport.Receiver, budget int) int {
	ins := *p.inbound.Load()
	n := len(ins)
	if n == 0 || budget <= 0 {
		return 0
	}
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
		k, wake, err := transport.PollRing(in.rd, in.from, r, budget-got)
		got += k
		if err != nil {
			in.link.Fail(&transport.PeerError{Addr: in.from, Err: transport.ErrCorrupt})
		}
		if wake {
			in.bell.Ring()
		}
	}
	p.rr = start + 1
	return got
}

func (p *port) Progress() int {
	if p.ebell != nil || p.work.Load() == 0 {
		return 0
	}
	return p.runRDMA()
}

// runRDMA performs the descriptors waiting in the RDMA FIFOs of the port's
// links.
func (p *port) runRDMA() int {
	p.work.Store(0)
	o := p.out.Load()
	if o == nil {
		return 0
	}
	done := 0
	for _, l := range *o {
		q := l.RDMA
		for op := q.Next(); op != nil; op = q.Next() {
			q.Done(p.perform(l, op))
			done++
		}
	}
	return done
}

func (p *port) perform(l *transport.Link, op *transport.RDMAOp) error {
	if err := l.Err(); err != nil {
		return err
	}
	dst := p.a.f.ranks[l.To.Rank]
	n := uint64(len(op.Local))
	if op.Kind == transport.Atomic {
		n = uint64(op.Width)
		if err := transport.CheckAtomic(op.AOp, int(op.Width)); err != nil {
			return &transport.PeerError{Addr: l.To, Err: err}
		}
	}
	mem, acc, err := dst.regions.AcquireFor(op.Key, op.Off, n, transport.PermFor(op.Kind))
	if err != nil {
		return &transport.PeerError{Addr: l.To, Err: err}
	}
	switch op.Kind {
	case transport.Atomic:
		// The processor's atomics on the owner's memory, as every adapter.
		var old uint64
		if old, err = transport.ApplyAtomic(mem, op.AOp, int(op.Width), op.Operand, op.Compare); err != nil {
			err = &transport.PeerError{Addr: l.To, Err: &transport.AccessError{Key: op.Key, Off: op.Off, Len: n, Err: err}}
		} else {
			op.SetResult(old)
		}
	case transport.Get:
		copy(op.Local, mem)
	case transport.Put:
		copy(mem, op.Local)
	default:
		err = &transport.PeerError{Addr: l.To, Err: fmt.Errorf("unknown RDMA operation %v", op.Kind)}
	}
	acc.Release()
	return err
}

func (p *port) hasRDMA() bool {
	o := p.out.Load()
	if o == nil {
		return false
	}
	for _, l := range *o {
		if l.RDMA.Pending() {
			return true
		}
	}
	return false
}

func (p *port) engineLoop() {
	defer p.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	idle := 0
	for {
		select {
		case <-p.stop:
			// Finish what was injected before the close, failing it.
			p.runRDMA()
			return
		default:
		}
		if n := p.runRDMA(); n > 0 {
			idle = 0
			p.bell.Ring()
			continue
		}
		idle++
		if idle < 64 {
			runtime.Gosched()
			continue
		}
		p.ebell.Arm()
		if p.hasRDMA() {
			p.ebell.Disarm()
			continue
		}
		p.ebell.Sleep(p.stop, t, 10*time.Millisecond)
	}
}

func (p *port) Close() error {
	// Under the fabric lock, so that a link being made to this port either
	// sees it closed or is among the inbound links failed below.
	p.a.f.mu.Lock()
	if !p.closed.CompareAndSwap(false, true) {
		p.a.f.mu.Unlock()
		return nil
	}
	ins := *p.inbound.Load()
	p.a.f.mu.Unlock()
	err := &transport.PeerError{Addr: p.addr, Err: transport.ErrClosed}
	// Links into this port fail: nothing will consume them any more.
	for _, in := range ins {
		in.link.Fail(err)
		in.bell.Ring()
	}
	// Links out of it fail too: their producer is gone.
	if o := p.out.Load(); o != nil {
		for _, l := range *o {
			l.Fail(transport.ErrClosed)
		}
	}
	if p.ebell != nil {
		close(p.stop)
		p.wg.Wait()
	}
	return nil
}
