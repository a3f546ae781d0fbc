package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// The optional interfaces of the transport contract this adapter implements.
var (
	_ transport.Starter          = (*Adapter)(nil)
	_ transport.DoorbellProvider = (*Adapter)(nil)
	_ transport.Oversubscriber   = (*Adapter)(nil)
	_ transport.HostMapper       = (*Adapter)(nil)
)

// KVSKey is the key under which each rank publishes its listening address
// through the job's bootstrap.
const KVSKey = "amigo.tcp"

// maxHandshakes bounds the handshakes a target runs at once; connections
// beyond it are refused at once.
const maxHandshakes = 256

// Adapter is the TCP adapter of one rank.
type Adapter struct {
	opts    Options
	job     transport.Bootstrap
	regions *transport.Regions
	rank    int
	size    int
	local   int // ranks of the job on this host, this one included
	// hostCPUs is the number of processors the ranks of this host may run
	// on together (the union of their affinity masks), stored by Start; 0
	// if unknown.
	hostCPUs atomic.Int32
	keys     keys
	ln       *net.TCPListener
	addr     string   // published address
	peers    []string // published addresses by rank, after Start
	seen     nonceCache

	mu         sync.Mutex
	ports      []*port
	sleepers   map[int]*sleeperBell // doorbells made by Doorbell, by context
	pending    []pendingConn        // authenticated, for contexts not yet open
	handshakes map[net.Conn]struct{}
	closed     atomic.Bool
	stop       chan struct{}
	wg         sync.WaitGroup
	inflight   atomic.Int32 // handshakes in progress
	eng        *engine
	rewatch    chan struct{} // a connection was attached: the watcher looks again
	slowWatch  atomic.Bool   // the watcher ticks at its keepalive pace

	stats counters
}

type pendingConn struct {
	h      hello
	nc     *net.TCPConn
	remote string
}

// New makes the adapter of the rank job describes, whose registered memory
// is regions: it listens, and publishes its address with job.Put. Peers
// become reachable once every rank published and Start ran (after the job's
// fence).
func New(job transport.Bootstrap, regions *transport.Regions, opts Options) (*Adapter, error) {
	opts, err := opts.Validate()
	if err != nil {
		return nil, err
	}
	secret := job.Secret()
	if len(secret) < 16 {
		return nil, errors.New("tcp: the job has no secret (at least 16 bytes): connections could not be authenticated")
	}
	a := &Adapter{
		opts:       opts,
		job:        job,
		regions:    regions,
		rank:       job.Rank(),
		local:      localRanks(job),
		size:       job.Size(),
		keys:       deriveKeys(secret),
		handshakes: make(map[net.Conn]struct{}),
		stop:       make(chan struct{}),
		rewatch:    make(chan struct{}, 1),
	}
	listen, publish, err := chooseAddr(opts.Addr, job)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("tcp: listen: %w", err)
	}
	a.ln = l.(*net.TCPListener)
	if a.eng, err = newEngine(a); err != nil {
		a.ln.Close()
		return nil, fmt.Errorf("tcp: engine: %w", err)
	}
	port := a.ln.Addr().(*net.TCPAddr).Port
	a.addr = net.JoinHostPort(publish, strconv.Itoa(port))
	if opts.Advertise != "" {
		// Validate checked it; only the port was missing.
		a.addr, _ = advertised(opts.Advertise, port)
	}
	if err := job.Put(KVSKey, []byte(a.addr)); err != nil {
		a.ln.Close()
		a.eng.close()
		return nil, fmt.Errorf("tcp: publish address: %w", err)
	}
	if err := transport.PublishAffinity(job, transport.CPUsKey("tcp")); err != nil {
		a.ln.Close()
		a.eng.close()
		return nil, fmt.Errorf("tcp: publish processors: %w", err)
	}
	a.wg.Add(2)
	go a.acceptLoop()
	go a.watch()
	return a, nil
}

// chooseAddr returns the address to listen on and the host to publish.
func chooseAddr(addr string, job transport.Bootstrap) (listen, publish string, err error) {
	host, port := addr, "0"
	if addr != "" {
		if h, p, err := net.SplitHostPort(addr); err == nil {
			host, port = h, p
		}
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return net.JoinHostPort(host, port), host, nil
	}
	ip := transport.LauncherRouteIP()
	if ip == "" {
		same := true
		for r := 0; r < job.Size(); r++ {
			if job.Node(r) != job.Node(job.Rank()) {
				same = false
				break
			}
		}
		if same {
			ip = "127.0.0.1"
		}
	}
	if ip == "" {
		ip = interfaceIP()
	}
	if ip == "" {
		return "", "", errors.New("tcp: no address to publish: set AMIGO_TCP_ADDR")
	}
	if host == "" {
		host = ip
	}
	return net.JoinHostPort(host, port), ip, nil
}

// interfaceIP returns the first IPv4 address of an interface that is up and
// not loopback.
func interfaceIP() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return ""
}

// Addr returns the address the adapter published.
func (a *Adapter) Addr() string { return a.addr }

// Start learns every peer's address. It runs after the fence that follows
// New on every rank.
func (a *Adapter) Start(ctx context.Context) error {
	peers := make([]string, a.size)
	for r := 0; r < a.size; r++ {
		if r == a.rank {
			continue
		}
		v, err := a.job.Get(ctx, r, KVSKey)
		if err != nil {
			return fmt.Errorf("tcp: address of rank %d: %w", r, err)
		}
		if _, _, err := net.SplitHostPort(string(v)); err != nil {
			return fmt.Errorf("tcp: rank %d published %q: %v", r, v, err)
		}
		peers[r] = string(v)
	}
	a.hostCPUs.Store(int32(transport.HostProcessors(ctx, a.job, transport.CPUsKey("tcp"))))
	a.mu.Lock()
	a.peers = peers
	a.mu.Unlock()
	return nil
}

// Name returns "tcp".
func (a *Adapter) Name() string { return "tcp" }

// Reaches reports whether rank published an address.
func (a *Adapter) Reaches(rank int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return rank != a.rank && rank >= 0 && rank < len(a.peers) && a.peers[rank] != ""
}

func (a *Adapter) peerAddr(rank int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rank < 0 || rank >= len(a.peers) {
		return ""
	}
	return a.peers[rank]
}

// Open opens the port of local context ctx.
func (a *Adapter) Open(ctx int, bell *transport.Doorbell) (transport.Port, error) {
	if ctx < 0 || ctx > maxContexts {
		return nil, fmt.Errorf("tcp: context %d", ctx)
	}
	if bell == nil {
		return nil, errors.New("tcp: nil doorbell")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, transport.ErrClosed
	}
	for len(a.ports) <= ctx {
		a.ports = append(a.ports, nil)
	}
	if a.ports[ctx] != nil {
		return nil, fmt.Errorf("tcp: rank %d context %d opened twice", a.rank, ctx)
	}
	var s *sleeper
	if sb := a.sleepers[ctx]; sb != nil && sb.bell == bell {
		s = sb.s
		delete(a.sleepers, ctx)
	}
	p, err := newPort(a, ctx, bell, s)
	if err != nil {
		return nil, err
	}
	a.ports[ctx] = p
	// Adopt the connections that arrived before the context opened.
	kept := a.pending[:0]
	for _, pc := range a.pending {
		if int(pc.h.to.Context) == ctx {
			p.adoptLocked(pc)
			continue
		}
		kept = append(kept, pc)
	}
	a.pending = kept
	return p, nil
}

// Close closes every port, the listener and the connections not yet
// adopted.
func (a *Adapter) Close() error {
	if a.closed.Swap(true) {
		return nil
	}
	close(a.stop)
	a.ln.Close()
	a.mu.Lock()
	ports := append([]*port(nil), a.ports...)
	for _, pc := range a.pending {
		pc.nc.Close()
	}
	a.pending = nil
	for nc := range a.handshakes {
		nc.Close()
	}
	for _, sb := range a.sleepers { // doorbells no port took
		sb.s.close()
	}
	a.sleepers = nil
	a.mu.Unlock()
	for _, p := range ports {
		if p != nil {
			p.Close()
		}
	}
	a.wg.Wait()
	a.eng.close()
	if os.Getenv("AMIGO_TCP_STATS") != "" {
		a.opts.Logf("rank %d: %+v", a.rank, a.Stats())
	}
	return nil
}

func (a *Adapter) acceptLoop() {
	defer a.wg.Done()
	for {
		nc, err := a.ln.AcceptTCP()
		if err != nil {
			if a.closed.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and the like: back off.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if a.inflight.Add(1) > maxHandshakes {
			a.inflight.Add(-1)
			a.refuse(nc.RemoteAddr().String(), errors.New("too many handshakes in progress"))
			nc.Close()
			continue
		}
		a.mu.Lock()
		if a.closed.Load() {
			a.mu.Unlock()
			nc.Close()
			a.inflight.Add(-1)
			return
		}
		a.handshakes[nc] = struct{}{}
		a.wg.Add(1)
		a.mu.Unlock()
		go a.serve(nc)
	}
}

func (a *Adapter) refuse(remote string, err error) {
	a.stats.refused.Add(1)
	processStats.refused.Add(1)
	a.opts.Logf("rank %d: refused connection from %s: %v", a.rank, remote, err)
}

// serve authenticates an accepted connection and hands it to its port.
func (a *Adapter) serve(nc *net.TCPConn) {
	defer a.wg.Done()
	defer a.inflight.Add(-1)
	remote := nc.RemoteAddr().String()
	done := func() {
		a.mu.Lock()
		delete(a.handshakes, nc)
		a.mu.Unlock()
	}
	_ = nc.SetDeadline(time.Now().Add(a.opts.Timeout))
	h, err := respond(nc, &a.keys, a.rank, &a.seen, remote, a.admit)
	if err != nil {
		done()
		if err == errReverse {
			// Not a refusal: the initiator takes this side's
			// connection instead.
			nc.Close()
			return
		}
		nc.Close()
		if !a.closed.Load() {
			a.refuse(remote, err)
		}
		return
	}
	_ = nc.SetDeadline(time.Time{})
	if acceptedHook != nil {
		acceptedHook(a)
	}
	a.stats.accepted.Add(1)
	processStats.accepted.Add(1)
	a.mu.Lock()
	delete(a.handshakes, nc)
	pc := pendingConn{h: h, nc: nc, remote: remote}
	switch {
	case a.closed.Load():
		nc.Close()
	case int(h.to.Context) < len(a.ports) && a.ports[h.to.Context] != nil:
		a.ports[h.to.Context].adoptLocked(pc)
	default:
		a.pending = append(a.pending, pc)
	}
	a.mu.Unlock()
}

// acceptedHook, when set (by tests only), runs once a connection was
// admitted, before its port takes it.
var acceptedHook func(*Adapter)

// admit decides, once an initiator proved itself, whether its link is
// taken.
func (a *Adapter) admit(h hello) uint8 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return verdictClosed
	}
	if int(h.from.Rank) >= a.size || h.from.Rank == int32(a.rank) {
		return verdictNoContext
	}
	ctx := int(h.to.Context)
	if ctx < len(a.ports) && a.ports[ctx] != nil {
		return a.ports[ctx].admitLocked(h)
	}
	for _, pc := range a.pending {
		if pc.h.from == h.from && pc.h.to == h.to {
			return verdictDuplicate
		}
	}
	return verdictOK
}

// watch is the adapter's watcher goroutine: it hands the sockets of
// contexts that stopped polling to the connections' goroutines, writes what
// such contexts left in their descriptor buffers, sends pings on idle
// connections and fails connections whose peer went silent.
func (a *Adapter) watch() {
	defer a.wg.Done()
	keepEvery := a.opts.Timeout / 4
	t := time.NewTimer(a.opts.Handoff)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		case <-a.rewatch:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		a.mu.Lock()
		ports := append([]*port(nil), a.ports...)
		a.mu.Unlock()
		fast := false
		for _, p := range ports {
			if p != nil && !p.closed.Load() && p.watch() {
				fast = true
			}
		}
		if now := time.Now(); now.Sub(last) >= keepEvery {
			for _, p := range ports {
				if p != nil && !p.closed.Load() {
					p.keepalive(now.Sub(last))
				}
			}
			last = now
		}
		next := keepEvery
		if fast {
			next = a.opts.Handoff
		}
		a.slowWatch.Store(!fast)
		t.Reset(next)
	}
}

// Stats are counters of an adapter, or of every adapter of the process.
type Stats struct {
	Accepted      uint64 // connections whose initiator proved itself
	Refused       uint64 // connections refused, each with a logged reason
	Connected     uint64 // connections attached, either role
	Failed        uint64 // connections ended by an error or a close
	BytesSent     uint64
	BytesReceived uint64
	Handoffs      uint64 // times a context stopped polling and goroutines took its sockets
	PollerWakes   uint64 // socket events the engine handled
	WriterWakes   uint64 // writes that would have blocked, left to the engine
	AckFrames     uint64 // ack frames written
	Piggybacked   uint64 // packets acknowledged in the header of a packet going back
	Atomics       uint64 // remote atomics performed as owner, for a peer
}

type counters struct {
	accepted, refused, connected, failed, sent, rcvd atomic.Uint64
	handoffs, pollerWakes, writerWakes               atomic.Uint64
	ackFrames, piggybacked, atomics                  atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Accepted:      c.accepted.Load(),
		Refused:       c.refused.Load(),
		Connected:     c.connected.Load(),
		Failed:        c.failed.Load(),
		BytesSent:     c.sent.Load(),
		BytesReceived: c.rcvd.Load(),
		Handoffs:      c.handoffs.Load(),
		PollerWakes:   c.pollerWakes.Load(),
		WriterWakes:   c.writerWakes.Load(),
		AckFrames:     c.ackFrames.Load(),
		Piggybacked:   c.piggybacked.Load(),
		Atomics:       c.atomics.Load(),
	}
}

var processStats counters

// Stats returns the adapter's counters.
func (a *Adapter) Stats() Stats { return a.stats.snapshot() }

// ProcessStats returns the counters of every adapter of this process.
func ProcessStats() Stats { return processStats.snapshot() }

// localRanks counts the ranks of job on this rank's host.
func localRanks(job transport.Bootstrap) int {
	n := 0
	for r := 0; r < job.Size(); r++ {
		if job.Node(r) == job.Node(job.Rank()) {
			n++
		}
	}
	return n
}

// Oversubscribed reports whether more ranks of the job run on this host than
// they have processors: a context that waits then spins briefly and gives
// its processor away (amigo's idle policy), since the peer it waits for may
// be waiting for one.
//
// The processors are those the ranks of the host may run on together (the
// union of their affinity masks, published through the bootstrap), once
// Start learnt them; before, or if a rank published none, this process's
// own (transport.Processors). Ranks bound one to a processor each, as
// amirun --bind-to core binds them, are not oversubscribed, although each
// may run on one processor only; ranks all bound to the same two
// processors, four of them, are.
func (a *Adapter) Oversubscribed() bool {
	n := int(a.hostCPUs.Load())
	if n == 0 {
		n = transport.Processors()
	}
	return a.local > n
}

// SameHost reports whether rank runs on this rank's host.
func (a *Adapter) SameHost(rank int) bool {
	return rank >= 0 && rank < a.job.Size() && a.job.Node(rank) == a.job.Node(a.rank)
}
