package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/transport"
)

// The optional interfaces of the transport contract this adapter implements.
var (
	_ transport.Starter          = (*Adapter)(nil)
	_ transport.DoorbellProvider = (*Adapter)(nil)
	_ transport.Allocator        = (*Adapter)(nil)
	_ transport.Oversubscriber   = (*Adapter)(nil)
)

// ErrExited reports a peer process that exited or was killed.
var ErrExited = errors.New("process exited")

// ExitError names the process of a peer rank that is gone.
type ExitError struct {
	Rank, PID int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("process %d of rank %d exited", e.PID, e.Rank)
}

func (e *ExitError) Unwrap() error { return ErrExited }

// Adapter is the shared-memory adapter of one rank. It reaches the ranks of
// the job that run on the same host.
type Adapter struct {
	opts Options
	job  transport.Bootstrap
	// hostCPUs is the number of processors the ranks of this host may run
	// on together, stored by Start; 0 if unknown.
	hostCPUs atomic.Int32
	rank     int
	regions  *transport.Regions
	local    []int       // ranks on this host, ascending
	localOf  map[int]int // their local index
	li       int         // this rank's local index
	secret   []byte
	self     *segment
	fd       int // the memfd of self
	probe    []byte
	peers    []*peer // by local index; nil for this rank
	// escalate is how long an initiator waits for an owner's contexts
	// before it wakes the owner's engine: escalateAfter, or escalateFull
	// on a host with no processor to spare.
	escalate time.Duration

	mu      sync.Mutex
	ports   []*port
	bells   []*transport.Doorbell
	nalloc  int
	allocs  atomic.Pointer[[]allocated]
	started bool
	closed  atomic.Bool

	mirrorHigh atomic.Int64  // one past the highest mirror entry ever written
	fence      atomic.Uint64 // an atomic add on it is DeregisteredAll's fence

	stats struct {
		segment, cma, pipe, helped atomic.Uint64
		atomicsDirect, atomics     atomic.Uint64
		hugeAsked, hugeCollapsed   atomic.Uint64
		cmaBatches, coopBatches    atomic.Uint64
		barriers                   atomic.Uint64
	}

	// lost holds, by local index, why a rank of the host that had closed
	// before Start could map its segment is unreachable (nil: attached or
	// this rank). Such a rank finished before this one started: links to
	// it fail at once, as to a rank that closes later.
	lost []error

	srv   server
	stop  chan struct{}
	wg    sync.WaitGroup
	evfd  int // wakes the watcher when the adapter closes
	pidfd []int
}

// peer is this rank's view of another rank on the host.
type peer struct {
	li, rank int
	pub      published
	seg      *segment
	cma      bool // this rank may read and write the peer's memory by CMA
	dead     atomic.Pointer[error]
	maps     []atomic.Pointer[[]byte] // the peer's alloc segments, mapped on first use
	mapMu    sync.Mutex
}

func (pr *peer) gone() bool { return pr.dead.Load() != nil }

func (pr *peer) err() error {
	if p := pr.dead.Load(); p != nil {
		return *p
	}
	return nil
}

// allocated is a segment made by Alloc.
type allocated struct {
	mem []byte
	fd  int
	idx int
}

// New makes the adapter of job's rank and publishes its segment with
// job.Put; Start completes it after the job's next fence. It returns nil
// when no other rank of the job runs on this host. regions is the rank's
// table of registered memory, which the adapter mirrors into its segment.
func New(job transport.Bootstrap, regions *transport.Regions, opts Options) (*Adapter, error) {
	opts, err := opts.Validate()
	if err != nil {
		return nil, err
	}
	me, size := job.Rank(), job.Size()
	node := job.Node(me)
	a := &Adapter{opts: opts, job: job, rank: me, regions: regions, localOf: map[int]int{}, secret: job.Secret(), fd: -1, evfd: -1}
	for r := 0; r < size; r++ {
		if job.Node(r) == node {
			a.localOf[r] = len(a.local)
			a.local = append(a.local, r)
		}
	}
	if len(a.local) < 2 {
		return nil, nil
	}
	a.li = a.localOf[me]
	p := params{
		nlocal: len(a.local), nctx: opts.Contexts, slots: opts.slots(len(a.local)),
		mirror: opts.Mirror, allocs: opts.Allocs, chunk: opts.Chunk, chunks: opts.Chunks, rings: opts.ChunkRings,
		localIndex: a.li, rank: me, pid: os.Getpid(), token: token(a.secret, me),
	}
	l, err := newLayout(p)
	if err != nil {
		return nil, fmt.Errorf("shm: %w", err)
	}
	fd, mem, err := newMemfd(fmt.Sprintf("amigo-shm-r%d-p%d", me, p.pid), l.size)
	if err != nil {
		return nil, fmt.Errorf("shm: rank %d: %w", me, err)
	}
	populate(mem, l)
	l.putHeader(mem)
	a.fd = fd
	a.self = &segment{mem: mem, l: l}
	a.probe = append([]byte(nil), p.token[:]...)
	a.peers = make([]*peer, len(a.local))
	a.lost = make([]error, len(a.local))
	a.bells = make([]*transport.Doorbell, opts.Contexts)
	a.ports = make([]*port, opts.Contexts)
	a.srv.init(a)
	empty := []allocated{}
	a.allocs.Store(&empty)
	pub := published{pid: p.pid, fd: fd, size: l.size, probe: addrOf(a.probe)}
	if err := job.Put(kvsKey, pub.encode()); err != nil {
		a.unmap()
		return nil, fmt.Errorf("shm: publish segment: %w", err)
	}
	if err := transport.PublishAffinity(job, transport.CPUsKey("shm")); err != nil {
		a.unmap()
		return nil, fmt.Errorf("shm: publish processors: %w", err)
	}
	regions.AddMirror(a)
	return a, nil
}

// Start maps the segments of the other ranks on the host, which they
// published before the fence that preceded it, checks them, and probes
// whether cross-memory attach works toward each.
func (a *Adapter) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started {
		return nil
	}
	a.hostCPUs.Store(int32(transport.HostProcessors(ctx, a.job, transport.CPUsKey("shm"))))
	// Both decisions below count the processors of every rank of the
	// host together (their affinity masks, published in New), not this
	// rank's own: a launcher that binds each rank to a core of its own
	// (amirun, mpiexec -bind-to core) leaves each rank one processor, and
	// counting that one would take every bound job for oversubscribed.
	a.escalate = escalateAfter
	if len(a.local) >= a.processors() {
		a.escalate = escalateFull
	}
	if a.Oversubscribed() {
		// Consumers here go to sleep all the time, and each arming then
		// pays for a barrier across processors (package order): fenced
		// stores are the cheaper side of that trade. Every rank of the
		// host counts alike and decides alike, before this rank uses a
		// ring (a peer's stores into the rings this rank reads follow
		// the peer's own decision).
		order.Fenced()
	}
	for li, r := range a.local {
		if li == a.li {
			continue
		}
		pr, gone, err := a.attach(ctx, li, r)
		if gone {
			a.lost[li] = err
			continue
		}
		if err != nil {
			return fmt.Errorf("shm: rank %d: attach rank %d: %w", a.rank, r, err)
		}
		a.peers[li] = pr
	}
	if a.opts.Way == WayCMA {
		for _, pr := range a.peers {
			if pr != nil && !pr.cma {
				return fmt.Errorf("shm: way cma forced, but the kernel refuses cross-memory attach to rank %d (pid %d)", pr.rank, pr.pub.pid)
			}
		}
	}
	if err := a.startWatch(); err != nil {
		return err
	}
	a.stop = make(chan struct{})
	a.wg.Add(2)
	go a.watch()
	go a.engine()
	a.started = true
	return nil
}

// attach maps and checks the segment of rank r, local index li. gone
// reports that r had closed it first; err then says so.
func (a *Adapter) attach(ctx context.Context, li, r int) (pr *peer, gone bool, err error) {
	v, err := a.job.Get(ctx, r, kvsKey)
	if err != nil {
		return nil, false, err
	}
	pub, err := parsePublished(v)
	if err != nil {
		return nil, false, err
	}
	if attachHook != nil {
		attachHook(r, pub.pid)
	}
	mem, err := mapPeer(pub.pid, pub.fd, pub.size)
	if errors.Is(err, unix.ENOENT) {
		// The owner published its segment before the fence and has closed
		// it since (or exited): Open does not wait for every rank to have
		// started, and a rank with nothing to do may be gone already.
		return nil, true, fmt.Errorf("%w: rank %d (pid %d) had closed before this rank attached to it (%v)", transport.ErrClosed, r, pub.pid, err)
	}
	if err != nil {
		return nil, false, err
	}
	l, err := parseHeader(mem)
	if err == nil {
		switch {
		case l.rank != r || l.localIndex != li || l.pid != pub.pid:
			err = fmt.Errorf("%w: segment of rank %d (local %d, pid %d), want rank %d (local %d, pid %d)", errHeader, l.rank, l.localIndex, l.pid, r, li, pub.pid)
		case l.token != token(a.secret, r):
			err = fmt.Errorf("%w: segment does not belong to this job", errHeader)
		case l.nlocal != len(a.local) || l.nctx != a.self.l.nctx:
			err = fmt.Errorf("rank %d counts %d ranks on the host and %d contexts, this rank %d and %d", r, l.nlocal, l.nctx, len(a.local), a.self.l.nctx)
		}
	}
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, false, err
	}
	populate(mem, l)
	pr = &peer{li: li, rank: r, pub: pub, seg: &segment{mem: mem, l: l}}
	pr.maps = make([]atomic.Pointer[[]byte], l.allocs)
	if a.opts.CMA != "off" {
		pr.cma = probeCMA(pub.pid, pub.probe, l.token) == nil
	}
	return pr, false, nil
}

// Stats counts the bytes the adapter moved for GET and PUT, by way.
type Stats struct {
	// Segment, CMA and Pipe are bytes this rank moved as initiator by
	// each way (Pipe counts the initiator's side of the pipelined copy).
	Segment, CMA, Pipe uint64
	// Helped are bytes this rank moved as owner, helping a peer's
	// cooperative copy.
	Helped uint64
	// HugeAsked counts the 2 MiB blocks of Go memory the adapter asked the
	// kernel to back with huge pages before cross-memory attach touched
	// them; HugeCollapsed those it did (see huge.go).
	HugeAsked, HugeCollapsed uint64
	// CMABatches counts the calls that moved several small descriptors
	// by cross-memory attach at once (batch.go).
	CMABatches uint64
	// CoopBatches counts those batches the owner was offered half of
	// (coop.go); CMABatches counts them too.
	CoopBatches uint64
	// AtomicsDirect counts the remote atomics this rank performed as
	// initiator on a peer's shared segment; Atomics those it performed as
	// owner for a peer, on its own memory.
	AtomicsDirect, Atomics uint64
	// Barriers counts the processor-wide memory barriers (membarrier)
	// this rank issued to withdraw a registration that a peer had
	// claimed in place (see mirrorEntry): one per such deregistration.
	Barriers uint64
}

// Stats returns the adapter's counters.
func (a *Adapter) Stats() Stats {
	return Stats{
		Segment: a.stats.segment.Load(), CMA: a.stats.cma.Load(), Pipe: a.stats.pipe.Load(), Helped: a.stats.helped.Load(),
		HugeAsked: a.stats.hugeAsked.Load(), HugeCollapsed: a.stats.hugeCollapsed.Load(),
		CMABatches: a.stats.cmaBatches.Load(), CoopBatches: a.stats.coopBatches.Load(),
		AtomicsDirect: a.stats.atomicsDirect.Load(), Atomics: a.stats.atomics.Load(),
		Barriers: a.stats.barriers.Load(),
	}
}

// Name returns "shm".
func (a *Adapter) Name() string { return "shm" }

// RingSlots returns the slots of the adapter's descriptor buffers.
func (a *Adapter) RingSlots() int { return a.self.l.slots }

// Reaches reports whether rank runs on this host (and is not this rank).
// A rank that closed before Start could attach to it counts: links to it
// fail with the reason.
func (a *Adapter) Reaches(rank int) bool {
	li, ok := a.localOf[rank]
	return ok && li != a.li && (a.peers[li] != nil || a.lost[li] != nil)
}

// Local returns the ranks that share this host, this one included.
func (a *Adapter) Local() []int { return append([]int(nil), a.local...) }

// Oversubscribed reports whether more ranks run on this host than they have
// processors: waiting contexts should then give the processor to their
// peers rather than spin. The processors are those the ranks of the host
// may run on together (transport.HostProcessors), once Start learnt them;
// before, or if a rank published none, this process's own. Two ranks bound
// to a core each are not oversubscribed.
func (a *Adapter) Oversubscribed() bool { return len(a.local) > a.processors() }

// processors returns how many processors the ranks of this host may run
// on together, as counted by Start; before Start, or when a rank's mask
// was not found, how many this process may run on.
func (a *Adapter) processors() int {
	if n := int(a.hostCPUs.Load()); n > 0 {
		return n
	}
	return transport.Processors()
}

// CMA reports whether cross-memory attach works toward rank.
func (a *Adapter) CMA(rank int) bool {
	li, ok := a.localOf[rank]
	return ok && a.peers[li] != nil && a.peers[li].cma
}

// Doorbell returns the doorbell of context ctx, whose word lives in this
// rank's segment so that peers can ring it (transport.DoorbellProvider).
// The context must sleep on it: peers ring nothing else.
func (a *Adapter) Doorbell(ctx int) (*transport.Doorbell, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ctx < 0 || ctx >= a.self.l.nctx {
		return nil, fmt.Errorf("shm: context %d of %d", ctx, a.self.l.nctx)
	}
	if a.bells[ctx] == nil {
		a.bells[ctx] = transport.NewSharedDoorbell(a.self.portBell(ctx))
	}
	return a.bells[ctx], nil
}

// Open opens the port of local context ctx.
func (a *Adapter) Open(ctx int, bell *transport.Doorbell) (transport.Port, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, transport.ErrClosed
	}
	if ctx < 0 || ctx >= a.self.l.nctx {
		return nil, fmt.Errorf("shm: context %d of %d", ctx, a.self.l.nctx)
	}
	if a.ports[ctx] != nil {
		return nil, fmt.Errorf("shm: rank %d context %d opened twice", a.rank, ctx)
	}
	p := newPort(a, ctx, bell)
	a.ports[ctx] = p
	return p, nil
}

// Alloc returns n bytes of a new shared segment that peers map on first
// access, so that their GETs and PUTs of regions registered in it are one
// memcpy by the initiator. The memory stays valid until the adapter closes.
func (a *Adapter) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("shm: Alloc(%d)", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, transport.ErrClosed
	}
	if a.nalloc >= a.self.l.allocs {
		return nil, fmt.Errorf("shm: more than %d shared allocations", a.self.l.allocs)
	}
	size := roundUp(n, pageSz)
	fd, mem, err := newMemfd(fmt.Sprintf("amigo-shm-r%d-p%d-a%d", a.rank, os.Getpid(), a.nalloc), size)
	if err != nil {
		return nil, fmt.Errorf("shm: Alloc(%d): %w", n, err)
	}
	idx := a.nalloc
	a.nalloc++
	e := a.self.allocEntry(idx)
	e.fd.Store(uint64(fd))
	e.size.Store(uint64(size))
	e.gen.Store(uint64(idx) + 1)
	old := *a.allocs.Load()
	grown := append(old[:len(old):len(old)], allocated{mem: mem, fd: fd, idx: idx})
	a.allocs.Store(&grown)
	return mem[:n:n], nil
}

// allocOf returns the alloc index + 1 of the segment holding b, and b's
// offset in it; 0 when b is not in one.
func (a *Adapter) allocOf(b []byte) (int, uint64) {
	if len(b) == 0 {
		return 0, 0
	}
	p := addrOf(b)
	for _, m := range *a.allocs.Load() {
		base := addrOf(m.mem)
		if p >= base && p+uint64(len(b)) <= base+uint64(len(m.mem)) {
			return m.idx + 1, p - base
		}
	}
	return 0, 0
}

// allocMem returns the peer's alloc segment idx (0-based), mapping it on
// first use. It validates the peer's alloc table entry.
func (pr *peer) allocMem(idx int) ([]byte, error) {
	if idx < 0 || idx >= len(pr.maps) {
		return nil, fmt.Errorf("%w: alloc index %d", transport.ErrCorrupt, idx)
	}
	if m := pr.maps[idx].Load(); m != nil {
		return *m, nil
	}
	pr.mapMu.Lock()
	defer pr.mapMu.Unlock()
	if m := pr.maps[idx].Load(); m != nil {
		return *m, nil
	}
	e := pr.seg.allocEntry(idx)
	g := e.gen.Load()
	fd, size := e.fd.Load(), e.size.Load()
	if g != uint64(idx)+1 || e.gen.Load() != g || fd > 1<<30 || size == 0 || size > maxSegment {
		return nil, fmt.Errorf("%w: alloc entry %d of rank %d", transport.ErrCorrupt, idx, pr.rank)
	}
	mem, err := mapPeer(pr.pub.pid, int(fd), int(size))
	if err != nil {
		return nil, err
	}
	pr.maps[idx].Store(&mem)
	return mem, nil
}

// Close closes every port, withdraws the mirror and unmaps the segments.
// Memory from Alloc is unmapped too: it must not be used afterwards.
func (a *Adapter) Close() error {
	if !a.closed.CompareAndSwap(false, true) {
		return nil
	}
	a.mu.Lock()
	ports := append([]*port(nil), a.ports...)
	started := a.started
	a.mu.Unlock()
	for _, p := range ports {
		if p != nil {
			_ = p.Close()
		}
	}
	if started {
		close(a.stop)
		a.wakeWatch()
		transport.RingShared(a.self.engineBell())
		a.wg.Wait()
	}
	a.regions.RemoveMirror(a)
	a.clearMirror()
	a.unmap()
	return nil
}

func (a *Adapter) unmap() {
	for _, pr := range a.peers {
		if pr == nil {
			continue
		}
		for i := range pr.maps {
			if m := pr.maps[i].Load(); m != nil {
				_ = unix.Munmap(*m)
			}
		}
		_ = unix.Munmap(pr.seg.mem)
	}
	for _, m := range *a.allocs.Load() {
		_ = unix.Munmap(m.mem)
		_ = unix.Close(m.fd)
	}
	for _, fd := range a.pidfd {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	if a.evfd >= 0 {
		_ = unix.Close(a.evfd)
	}
	if a.self != nil {
		_ = unix.Munmap(a.self.mem)
	}
	if a.fd >= 0 {
		_ = unix.Close(a.fd)
	}
}

// peerErr wraps err as the failure of the context at addr.
// attachHook, if set, runs in Start before the segment of each rank of the
// host is mapped, with the rank and its process (tests).
var attachHook func(rank, pid int)

func peerErr(to transport.Addr, err error) error {
	return &transport.PeerError{Addr: to, Err: err}
}
