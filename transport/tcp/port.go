package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// port is a local context's attachment to the adapter: the connections of
// its links to peers (outs, as initiator) and of its peers' links to it
// (ins, as target). A connection that carries both is in both lists.
type port struct {
	a    *Adapter
	ctx  int
	addr transport.Addr
	bell *transport.Doorbell

	// attended is true while the context polls: its goroutine does the
	// socket I/O. The context stores it in Poll and Progress; the watcher
	// stores false when the context stopped polling.
	attended  atomic.Bool
	polls     atomic.Uint64 // Poll and Progress calls
	lastPolls uint64        // the watcher's last look at polls
	pollsSeen time.Time     // when the watcher last saw polls change

	mu     sync.Mutex // guards changes to ins and outs, and failed
	ins    atomic.Pointer[[]*conn]
	outs   atomic.Pointer[[]*conn]
	failed map[transport.Addr]error // pairs that failed: no new link to or from them

	links  map[transport.Addr]*transport.Link // owner goroutine only
	rr     int
	calls  uint64
	pollN  uint64 // Poll calls (see readUnlisted)
	extra  int    // work done in Poll beyond the packets it returned, reported by Progress
	ackDue bool   // Poll delivered packets: Progress acknowledges them

	// epfd is an epoll instance watching, level-triggered, the sockets of
	// the port's links in: with more than directPoll of them, Poll asks it
	// which are readable (one system call) rather than reading each.
	epfd   int
	events [64]unix.EpollEvent
	// sleeper, if the context sleeps on the port's sockets (sleep.go):
	// epfd is then the sleeper's, and holds the links out too. woke: its
	// Wait saw a socket event; Progress reads the links out.
	sleeper *sleeper
	woke    atomic.Bool

	// oversub: more ranks on this host than processors (Adapter.
	// Oversubscribed). The context then asks the kernel about its sockets
	// at most once every oversubPollGap while it polls (lastAsk), one epoll
	// call for all of them: see pollSockets.
	oversub bool
	lastAsk time.Time

	// unwatched: sockets of the port may be out of its epoll set (unwatch
	// set it; only rewatch, which puts them all back, clears it). joined:
	// a socket joined an epoll set since the last unwatch (a new
	// connection, or the engine's interest). quiet counts the direct polls
	// toward the next unwatch.
	unwatched atomic.Bool
	joined    atomic.Bool
	quiet     int

	closed atomic.Bool
}

// oversubPollGap is the least time between two looks at the sockets of a
// context that polls on an oversubscribed host.
//
// # Why
//
// Such a context spins only briefly, and then yields its processor, before
// it sleeps (amigo's idle policy), as the peer it waits for may be waiting
// for the processor. On shared memory a look for work is a load; on TCP it
// is a system call per socket, and a spin of read calls takes a good part of
// the time slice the peer needs: 4 ranks on 2 processors exchanging halos
// made 65 reads a rank an iteration, most of them finding nothing. Looking
// once every few microseconds, one epoll call for all the sockets, leaves a
// spin with no system call but its last, and a look after every yield that
// gave the processor away.
const oversubPollGap = 5 * time.Microsecond

// directPoll is the most links in a Poll reads without asking epoll first.
const directPoll = 4

// unwatchAfter is the number of direct polls after which a context that
// keeps polling takes its sockets out of the epoll sets (port.unwatch).
const unwatchAfter = 256

func newPort(a *Adapter, ctx int, bell *transport.Doorbell, s *sleeper) (*port, error) {
	var epfd int
	if s != nil {
		epfd = s.epfd
	} else {
		var err error
		if epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
			return nil, err
		}
	}
	p := &port{
		sleeper: s,
		a:       a,
		ctx:     ctx,
		addr:    transport.Addr{Rank: int32(a.rank), Context: int32(ctx)},
		bell:    bell,
		links:   make(map[transport.Addr]*transport.Link),
		epfd:    epfd,
		oversub: a.Oversubscribed(),
	}
	if s != nil {
		s.p = p
	}
	empty := []*conn{}
	p.ins.Store(&empty)
	p.outs.Store(&empty)
	return p, nil
}

func (p *port) list(which *atomic.Pointer[[]*conn]) []*conn { return *which.Load() }

// all returns the port's connections, each once: a connection that carries
// links both ways is in both lists, and is taken from ins. (One that prune
// took out of ins already has failed and finished. Without p.mu, one that
// joins ins meanwhile may be missed.)
func (p *port) all() []*conn {
	ins, outs := p.list(&p.ins), p.list(&p.outs)
	cs := append(make([]*conn, 0, len(ins)+len(outs)), ins...)
	for _, c := range outs {
		if !c.listedIn.Load() {
			cs = append(cs, c)
		}
	}
	return cs
}

// add appends c to a connection list; the caller holds p.mu.
func add(which *atomic.Pointer[[]*conn], c *conn) {
	old := *which.Load()
	grown := append(old[:len(old):len(old)], c)
	which.Store(&grown)
}

// Link returns the link to the context to, creating it on first use; the
// connection is made and authenticated in the background, and packets
// injected meanwhile leave once it is up.
func (p *port) Link(to transport.Addr) (*transport.Link, error) {
	if l, ok := p.links[to]; ok {
		return l, nil
	}
	if p.closed.Load() {
		return nil, transport.ErrClosed
	}
	a := p.a
	addr := a.peerAddr(int(to.Rank))
	if addr == "" || to.Context < 0 || to.Context > maxContexts {
		return nil, &transport.PeerError{Addr: to, Err: transport.ErrUnreachable}
	}
	r, err := ring.NewHeap(a.opts.RingSlots)
	if err != nil {
		return nil, err
	}
	l := &transport.Link{To: to, Msg: r, RDMA: transport.NewRDMAQueue(a.opts.RDMASlots), MaxRDMA: a.opts.RDMAPiece, Ordered: true}
	pt := &pushTarget{}
	l.Push = pt.push
	if c := p.reusable(to); c != nil {
		c.link, c.msg, c.q = l, r.NewReader(), l.RDMA
		c.pt = pt
		if c.adoptOut() {
			pt.c.Store(c)
			p.mu.Lock()
			add(&p.outs, c)
			p.mu.Unlock()
			p.links[to] = l
			// Packets injected before the link existed: none. The
			// first Progress writes what comes.
			return l, nil
		}
		c.link, c.msg, c.q, c.pt = nil, nil, nil, nil
	}
	c := newConn(a, p, true, to)
	c.link, c.msg, c.q, c.pt = l, r.NewReader(), l.RDMA, pt
	pt.c.Store(c)
	c.out.Store(true)
	// The peer's link to this context may come back on this connection
	// (reusable, on its side): a reception ring for it, sized as the
	// peer sizes its own (it reuses only if its descriptor buffer is as
	// large as this side's).
	rx, err := ring.NewHeap(min(2*a.opts.RingSlots, ring.MaxSlots))
	if err != nil {
		return nil, err
	}
	c.rx, c.rxRead, c.maxPacket = rx, rx.NewReader(), ring.MaxPayload(a.opts.RingSlots)
	c.remote = addr
	ctx, cancel := context.WithTimeout(context.Background(), a.opts.Timeout)
	c.cancel = cancel
	p.mu.Lock()
	if err := p.failed[to]; err != nil {
		p.mu.Unlock()
		cancel()
		return nil, err
	}
	// Counted before the connection is listed: failPair may fail it as
	// soon as it is, and finish waits for connect.
	c.wg.Add(1)
	add(&p.outs, c)
	p.mu.Unlock()
	p.links[to] = l
	go c.connect(ctx, addr)
	return l, nil
}

// connectHook, when set (by tests only), runs before a link of the port
// dials.
var connectHook func(*port)

// connect dials the target, runs the handshake and attaches the socket.
func (c *conn) connect(ctx context.Context, addr string) {
	defer c.wg.Done()
	if connectHook != nil {
		connectHook(c.p)
	}
	a := c.a
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		c.failPeer(fmt.Errorf("%w: connect to %s: %v", transport.ErrUnreachable, addr, err))
		return
	}
	tc := nc.(*net.TCPConn)
	if dl, ok := ctx.Deadline(); ok {
		_ = tc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = tc.SetDeadline(time.Unix(1, 0)) })
	err = initiate(tc, &a.keys, hello{ringSlots: uint32(a.opts.RingSlots), from: c.p.addr, to: c.peer}, addr)
	stop()
	c.cancel()
	if err == errReverse {
		tc.Close()
		c.handOver()
		return
	}
	if err == nil {
		err = tc.SetDeadline(time.Time{})
	}
	if err != nil {
		tc.Close()
		c.failPeer(err)
		return
	}
	c.attachOrClose(tc)
}

// reusable returns the connection the peer dialed to this port, if it
// can carry this port's link to the peer too: one connection per pair of
// contexts, so that each side's TCP acknowledgements travel on its own
// packets. Two connections, one per direction, cost each side a TCP
// acknowledgement segment of its own for every other packet it receives,
// sent from its read call before it can answer: measured on loopback, a
// ping-pong of two plain Go processes took 8.7 us a hop over two
// connections against 5.7 us over one. The peer must have announced a
// descriptor buffer as large as this side's (the reception ring it made
// for this direction is sized by its own).
func (p *port) reusable(to transport.Addr) *conn {
	for _, c := range p.list(&p.ins) {
		if c.peer == to && !c.dialed && c.ready.Load() && c.failure.Load() == nil && c.peerSlots == p.a.opts.RingSlots {
			return c
		}
	}
	return nil
}

// handOver gives c's link to the connection the peer is making to this
// context (the peer answered verdictReverse: its connection wins), once it
// is up, bounded by the timeout. c never had a socket, so nothing was
// written from the link: the other connection starts it from the
// beginning. c then ends without failing the link.
func (c *conn) handOver() {
	p := c.p
	c.handing.Store(true)
	defer c.handing.Store(false)
	if handOverHook != nil {
		handOverHook(p)
	}
	deadline := time.Now().Add(c.a.opts.Timeout)
	wait := 20 * time.Microsecond
	var closedAt time.Time
	for {
		if c.failure.Load() != nil {
			return
		}
		if r := p.reusable(c.peer); r != nil {
			r.link, r.msg, r.q, r.pt = c.link, c.msg, c.q, c.pt
			if !c.failure.CompareAndSwap(nil, &errHandedOver) {
				r.link, r.msg, r.q, r.pt = nil, nil, nil, nil
				return
			}
			if handedHook != nil {
				handedHook(p, r)
			}
			if !r.adoptOut() {
				// It failed meanwhile: the link goes with it.
				r.link, r.msg, r.q, r.pt = nil, nil, nil, nil
				err := r.err()
				if err == nil {
					err = &transport.PeerError{Addr: c.peer, Err: ErrConnLost}
				}
				c.link.Fail(err)
				close(c.finished)
				return
			}
			c.out.Store(false)
			if r.pt != nil {
				r.pt.c.Store(r)
			}
			p.mu.Lock()
			outs := p.list(&p.outs)
			kept := make([]*conn, 0, len(outs))
			for _, x := range outs {
				if x != c {
					kept = append(kept, x)
				}
			}
			kept = append(kept, r)
			p.outs.Store(&kept)
			p.mu.Unlock()
			close(c.finished)
			// What the context injected meanwhile leaves now.
			if r.kick() > 0 {
				p.bell.Ring()
			}
			return
		}
		// A closing port waits too, for closeFlush (Close waits for the
		// hand-over): the link may hold packets queued before the close.
		if p.closed.Load() && closedAt.IsZero() {
			closedAt = time.Now()
		}
		if time.Now().After(deadline) || !closedAt.IsZero() && time.Since(closedAt) > closeFlush {
			c.failPeer(fmt.Errorf("%w: the peer's connection to this context did not come", transport.ErrUnreachable))
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Millisecond)
	}
}

// handOverHook, when set (by tests only), runs as a hand-over starts;
// handedHook once the link's own connection ended, before r takes the
// link.
var (
	handOverHook func(*port)
	handedHook   func(p *port, r *conn)
)

// errHandedOver ends a connection whose link another connection took.
var errHandedOver = errors.New("tcp: link handed over")

// attachOrClose attaches nc unless the connection failed meanwhile.
func (c *conn) attachOrClose(nc *net.TCPConn) {
	if err := c.attach(nc); err != nil {
		c.failPeer(fmt.Errorf("%w: %v", ErrConnLost, err))
	}
}

// admitLocked decides whether a link from h.from may connect to this port.
// The caller holds a.mu.
//
// When this port is connecting to h.from itself (both sides made their
// links at once), one connection must win, for one connection per pair:
// that of the side with the lower address. If that is this side, the
// initiator is told to take this side's connection (verdictReverse), as
// long as the reception ring made for it fits (the descriptor buffers are
// alike); otherwise both connections stay, one per direction.
func (p *port) admitLocked(h hello) uint8 {
	from := h.from
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.Load() && !p.handingTo(from) {
		// A closing port takes only the connection a link of its own
		// is being handed over to (handOver), so that what the link
		// queued before the close still leaves.
		return verdictClosed
	}
	// A peer that said goodbye on one connection (a failure of
	// transport.ErrClosed) may still be bringing up its own link to this
	// port, with packets queued on it before it began to close: it says
	// goodbye there too once they are written, and they must not be
	// refused. A peer lost otherwise is refused.
	if err := p.failed[from]; err != nil && !errors.Is(err, transport.ErrClosed) {
		return verdictClosed
	}
	for _, c := range p.list(&p.ins) {
		if c.peer == from && !c.dialed && c.failure.Load() == nil {
			return verdictDuplicate
		}
	}
	if lower(p.addr, from) && int(h.ringSlots) == p.a.opts.RingSlots {
		for _, c := range p.list(&p.outs) {
			if c.peer == from && c.dialed && c.failure.Load() == nil {
				return verdictReverse
			}
		}
	}
	return verdictOK
}

// handingTo reports whether a link of this port to peer waits in handOver
// for the peer's connection. The caller holds p.mu.
func (p *port) handingTo(peer transport.Addr) bool {
	for _, c := range p.list(&p.outs) {
		if c.peer == peer && c.handing.Load() {
			return true
		}
	}
	return false
}

// lower orders context addresses, by rank and then context.
func lower(a, b transport.Addr) bool {
	return a.Rank < b.Rank || a.Rank == b.Rank && a.Context < b.Context
}

// adoptLocked makes an authenticated connection one of the port's links
// in. The caller holds a.mu.
func (p *port) adoptLocked(pc pendingConn) {
	// The initiator was told verdictOK and counts the connection up: if
	// this port has made a link of its own to it since, both connections
	// stay (one per direction), as when the higher side wins the race.
	if v := p.admitLocked(pc.h); v != verdictOK && v != verdictReverse {
		pc.nc.Close()
		return
	}
	c := newConn(p.a, p, false, pc.h.from)
	c.remote = pc.remote
	c.peerSlots = int(pc.h.ringSlots)
	c.listedIn.Store(true)
	// Twice the initiator's descriptor buffer: what it has in flight always
	// fits, whatever padding each side needs at the end of its ring.
	rx, err := ring.NewHeap(min(2*int(pc.h.ringSlots), ring.MaxSlots))
	if err != nil {
		pc.nc.Close()
		return
	}
	c.rx, c.rxRead, c.maxPacket = rx, rx.NewReader(), ring.MaxPayload(int(pc.h.ringSlots))
	p.mu.Lock()
	add(&p.ins, c)
	p.mu.Unlock()
	c.attachOrClose(pc.nc)
}

// touch records a poll by the context and reports whether the context is
// attending: polling, its doorbell not armed for a sleep.
func (p *port) touch() bool {
	p.polls.Add(1)
	if p.bell.Armed() && p.sleeper == nil {
		if p.attended.Load() {
			p.setAttended(false)
		}
		return false
	}
	if !p.attended.Load() {
		p.setAttended(true)
		// The watcher may have slowed to its keepalive pace while no
		// context polled: have it look often again, so that what this
		// context leaves in its FIFOs when it stops polling leaves within
		// Options.Handoff. Only then: a nudge at every return to polling
		// had the watcher hand the sockets to the engine in every pause
		// of a stream (1-4 MiB windows lost a fifth).
		if p.a.slowWatch.Load() && p.a.slowWatch.Swap(false) {
			select {
			case p.a.rewatch <- struct{}{}:
			default:
			}
		}
	}
	return true
}

// setAttended records whether the context polls, and hands the read sides
// over accordingly.
func (p *port) setAttended(v bool) {
	p.attended.Store(v)
	if v {
		// The engine's interest lapses at its next event.
		return
	}
	p.a.stats.handoffs.Add(1)
	processStats.handoffs.Add(1)
	for _, c := range p.all() {
		if c.ready.Load() && c.failure.Load() == nil {
			c.rearm()
		}
	}
}

// Poll delivers arrived packets to r: first those the reception rings hold,
// then, while the context attends, those it reads from the sockets itself.
func (p *port) Poll(r transport.Receiver, budget int) int {
	attended := p.touch()
	got := 0
	if p.pollN++; attended && p.pollN&(unlistedEvery-1) == 0 {
		got = p.readUnlisted(r, budget)
	}
	ins := p.list(&p.ins)
	if p.ackDue {
		// Acknowledge what the previous Poll delivered. This Poll's
		// context ran Progress since, so a reply written there leaves
		// before the ack of the packet that caused it.
		p.ackDue = false
		for _, c := range ins {
			if c.ready.Load() && c.failure.Load() == nil && c.ackDue() {
				c.kick()
			}
		}
	}
	n := len(ins)
	if n == 0 || budget <= got {
		if got > 0 {
			p.ackDue = true
		}
		return got
	}
	dead := false
	if p.rr >= n {
		p.rr = 0
	}
	// direct: read each socket, without asking epoll first.
	direct := attended && n <= directPoll && !p.oversub
	switch {
	case direct && !p.bell.Armed():
		// Polls in a row without a sleep: the count starts again at
		// every sleep the context is about to take (its doorbell armed).
		if !p.unwatched.Load() || p.joined.Load() {
			if p.quiet++; p.quiet >= unwatchAfter {
				p.quiet = 0
				p.unwatch()
			}
		}
	case attended && !direct:
		p.quiet = 0
		if p.unwatched.Load() {
			p.rewatch()
		}
		p.pollSockets()
	default:
		p.quiet = 0
	}
	for i := 0; i < n && got < budget; i++ {
		c := ins[(p.rr+i)%n]
		got += c.deliver(r, budget-got)
		if !attended && c.ackDue() {
			// The context is about to sleep: acknowledge now.
			c.kick()
		}
		if c.failure.Load() != nil {
			if !c.rxRead.Pending() {
				dead = true
			}
			continue
		}
		if attended && got < budget && c.ready.Load() && (direct || c.inReady) {
			c.inReady = false
			if w, d := c.pollDeliver(r, budget-got); w > 0 {
				p.extra += w
				got += d
				got += c.deliver(r, budget-got)
			}
		}
	}
	p.rr++
	if got > 0 {
		p.ackDue = true
	}
	if dead {
		p.prune()
	}
	return got
}

// unlistedEvery: Poll reads the connections of its links out that are not
// among its links in once every unlistedEvery calls (a power of two).
const unlistedEvery = 64

// readUnlisted reads the connections this port dialed for its links out
// that carry no link of the peer's yet, and delivers the packets of those
// that now do. It runs on the context's goroutine, from Poll.
//
// # Why
//
// The peer takes such a connection for its own link to this context when
// it makes that link (port.reusable), and this side learns of it only by
// reading the peer's first packet, after which the connection is among
// the links in that Poll reads. Until then, while the context polls,
// Progress reads the connection only when answers are due, and the engine
// not at all: a context that only polled (waiting for a message, say)
// left the peer's packets unread in the socket, until a pause of its
// polls handed the socket to the engine, or until the peer, hearing
// nothing, was counted silent and the connection failed. Reading each
// such connection every unlistedEvery polls bounds the wait at little
// cost: a connection leaves the set at the peer's first packet.
func (p *port) readUnlisted(r transport.Receiver, budget int) int {
	got := 0
	for _, c := range p.list(&p.outs) {
		if c.listedIn.Load() || !c.ready.Load() || c.failure.Load() != nil {
			continue
		}
		p.extra += c.pollInline()
		if c.listedIn.Load() && got < budget {
			got += c.deliver(r, budget-got)
		}
	}
	return got
}

// unwatch takes the port's sockets out of every epoll set that nothing
// needs them in while the context polls them directly: the port's own
// (asked only when Poll does not read each socket, and slept on only after
// rewatch) and the engine's, while their interest there is none.
//
// # Why
//
// Each epoll registration of a socket adds a callback to every segment
// that arrives on it, run under the socket's lock, which the context
// spinning on read(2) then waits for. A socket in no set skips the
// wake-up path altogether. amibench's 8-byte latency over TCP: 0.965x the
// time with the socket in neither set, 0.99x with it out of one only
// (10 interleaved rounds).
//
// The context puts them back before it sleeps (sleeper.Wait) or when it
// asks the set (Poll with many links); the engine's registration comes
// back with the first interest it needs (engine.arm). A context that
// sleeps often never gets unwatchAfter polls in a row, and pays no
// system call for this.
func (p *port) unwatch() {
	p.unwatched.Store(true)
	p.joined.Store(false)
	for _, c := range p.all() {
		c.armMu.Lock()
		c.unwatchLocked()
		c.armMu.Unlock()
	}
}

// rewatch puts the port's sockets back in its epoll set (the engine's come
// back with their interest). It may run on the goroutine behind
// Context.Ready, beside the owner's Poll, whose unwatch waits while the
// doorbell is armed.
func (p *port) rewatch() {
	p.unwatched.Store(false)
	for _, c := range p.all() {
		c.armMu.Lock()
		if c.watchIn && !c.inEpoll {
			if err := c.watchInLocked(); err != nil {
				p.a.opts.Logf("rank %d: epoll: %v", p.a.rank, err)
			}
		}
		c.armMu.Unlock()
	}
}

// pollSockets asks the port's epoll set which sockets are readable, for
// Poll to read only those (inReady): with more than directPoll links in, one
// system call rather than a read of each, and on an oversubscribed host at
// most one every oversubPollGap, from Poll or Progress. A socket of a link
// out, which the sleeper's set holds, is read by Progress (woke).
func (p *port) pollSockets() {
	if p.oversub {
		now := time.Now()
		if now.Sub(p.lastAsk) < oversubPollGap {
			return
		}
		p.lastAsk = now
	}
	k := epollNow(p.epfd, p.events[:])
	for _, ev := range p.events[:k] {
		c := p.a.eng.lookup(ev.Fd)
		if ev.Fd < 0 || c == nil || c.p != p {
			continue
		}
		if c.out.Load() {
			c.readEmpty = false // it is not: no need to ask poll(2) again
			p.woke.Store(true)
		}
		if c.listedIn.Load() {
			c.inReady = true
		}
	}
}

// Progress writes what the context injected, and reads the answers to its
// GET and PUT requests while it attends.
func (p *port) Progress() int {
	attended := p.touch()
	n := p.extra
	p.extra = 0
	p.calls++
	asks := attended && p.oversub && p.sleeper != nil
	if asks {
		p.pollSockets()
	}
	woke := p.sleeper != nil && p.woke.Load() && p.woke.Swap(false)
	dead := false
	for _, c := range p.list(&p.outs) {
		if !c.ready.Load() {
			continue
		}
		if c.failure.Load() != nil {
			dead = true
			continue
		}
		if c.hasOutgoing() {
			n += c.kick()
		}
		// Read while answers are due: at once for GET and PUT, and for
		// acks once the descriptor buffer is half full (before, every
		// eighth call, to keep an idle poll to one system call; every
		// 64th while the target piggybacks its acks on its own packets,
		// which arrive on another socket). On an oversubscribed host,
		// acks wait for Poll's look at the sleeper's set, which holds
		// this socket (see oversubPollGap), or the context's sleep.
		var due bool
		switch {
		case woke:
			// The context's sleep, or Poll's look, saw a socket readable.
			due = true
		case !attended:
		case c.issued.Load() != c.q.HeadCounter().Load():
			due = true
		case asks:
		default:
			due = c.acked.Load() != c.peeked.Load() && (p.calls&7 == 0 && !c.piggy.Load() || c.link.Msg.Tail()-c.link.Msg.HeadCounter().Load() >= uint64(c.link.Msg.Slots()/2)) ||
				p.calls&63 == 0
		}
		if due && c.maybeReadable() {
			n += c.readAnswers()
		}
	}

	if dead {
		p.prune()
	}
	return n
}

// prune drops finished connections, and those in with nothing left to
// deliver.
func (p *port) prune() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range []*atomic.Pointer[[]*conn]{&p.ins, &p.outs} {
		old := p.list(l)
		kept := make([]*conn, 0, len(old))
		for _, c := range old {
			gone := false
			if c.failure.Load() != nil {
				select {
				case <-c.finished:
					gone = l == &p.outs || !c.rxRead.Pending()
				default:
				}
			}
			if !gone {
				kept = append(kept, c)
			}
		}
		l.Store(&kept)
	}
}

// failPair fails every connection between this port and peer, and refuses
// new ones: a broken path in either direction is the loss of the peer. A
// goodbye fails only its own connection: the peer says goodbye on each of
// its connections after what it queued there (acks among it), which a
// failure carried over from the other connection could overtake.
func (p *port) failPair(peer transport.Addr, err error) {
	p.mu.Lock()
	if p.failed == nil {
		p.failed = make(map[transport.Addr]error)
	}
	if _, ok := p.failed[peer]; !ok {
		p.failed[peer] = err
	}
	if errors.Is(err, transport.ErrClosed) || p.closed.Load() {
		// A closing port says goodbye on every connection itself,
		// after what it queued there: failing them here would drop it.
		p.mu.Unlock()
		return
	}
	var victims []*conn
	for _, c := range p.all() {
		if c.peer == peer && c.failure.Load() == nil {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.fail(err)
	}
}

// watch is the watcher's look at the port. It reports whether the port
// needs the watcher's fast tick.
func (p *port) watch() bool {
	polls := p.polls.Load()
	// Stale: no poll for Handoff. The watcher also looks at once when a
	// connection is attached, and two such looks microseconds apart must
	// not take a context that polls for one that stopped.
	now := time.Now()
	if polls != p.lastPolls {
		p.lastPolls, p.pollsSeen = polls, now
	}
	stale := now.Sub(p.pollsSeen) >= p.a.opts.Handoff
	if len(p.list(&p.ins))+len(p.list(&p.outs)) == 0 {
		// Nothing to hand over: no need to look often.
		return false
	}
	if p.attended.Load() {
		if !stale {
			return true
		}
		p.setAttended(false)
	}
	// The context stopped polling: write what it left in its FIFOs, and
	// the acks it owes.
	fast := false
	for _, c := range p.list(&p.outs) {
		if c.ready.Load() && c.failure.Load() == nil && c.hasOutgoing() {
			if c.kick() > 0 {
				p.bell.Ring()
			}
			fast = true
		}
	}
	for _, c := range p.list(&p.ins) {
		if c.ready.Load() && c.failure.Load() == nil && c.ackDue() {
			c.kick()
			fast = true
		}
	}
	return fast
}

// keepalive sends pings on connections that wrote nothing since the last
// call, and fails those that received nothing for longer than the timeout
// while they were reading.
func (p *port) keepalive(elapsed time.Duration) {
	for _, c := range p.all() {
		if !c.ready.Load() || c.failure.Load() != nil {
			continue
		}
		if r := c.rcvd.Load(); r != c.lastRcvd || c.stalled.Load() {
			c.lastRcvd, c.silent = r, 0
		} else if c.silent += elapsed; c.silent >= p.a.opts.Timeout {
			c.failPeer(fmt.Errorf("%w (%v without a byte)", ErrSilent, c.silent.Round(time.Millisecond)))
			continue
		}
		if c.sent.Load() == c.lastSent {
			c.ping.Store(true)
			c.kick()
		}
		c.lastSent = c.sent.Load()
	}
}

// settling reports whether a connection is still in its handshake, or
// handing its link over to the peer's connection: the hand-over ends the
// connection (errHandedOver) before the other connection carries the
// link, and a goodbye said on that one in between would go out ahead of
// the link's packets.
func (c *conn) settling() bool {
	return !c.ready.Load() && c.failure.Load() == nil || c.handing.Load()
}

// closeFlush bounds how long Close waits for the last writes of a port.
const closeFlush = 100 * time.Millisecond

// Close detaches the context: it says goodbye on every connection, closes
// them and fails its links with transport.ErrClosed.
func (p *port) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	// A connection still in its handshake, or handing its link over to
	// the peer's connection (both bounded by Options.Timeout), settles
	// first: its peer may count it up already, and would take a silent
	// close for a loss; and a link handed over goes out on the peer's
	// connection, which must say goodbye after it.
	p.mu.Lock()
	conns := p.all()
	p.mu.Unlock()
	for _, c := range conns {
		for c.settling() {
			time.Sleep(50 * time.Microsecond)
		}
	}
	p.mu.Lock()
	conns = p.all()
	p.mu.Unlock()
	// Say goodbye after what is queued (acks of what the context took
	// among it), waiting a little for a writer that holds a socket.
	for _, c := range conns {
		for !c.ready.Load() && c.failure.Load() == nil {
			time.Sleep(50 * time.Microsecond)
		}
		if !c.ready.Load() || c.failure.Load() != nil {
			continue
		}
		deadline := time.Now().Add(closeFlush)
		c.bye.Store(true)
		for c.kick(); c.bye.Load() || c.wblocked.Load(); c.kick() {
			if c.failure.Load() != nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	for _, c := range conns {
		if c.out.Load() {
			c.fail(transport.ErrClosed)
		} else {
			c.fail(&transport.PeerError{Addr: c.peer, Err: transport.ErrClosed})
		}
	}
	for _, c := range conns {
		<-c.finished
	}
	if p.sleeper != nil {
		p.sleeper.close()
	} else {
		unix.Close(p.epfd)
	}
	return nil
}

// pushTarget is the connection that carries a link out, for the link's
// Push (the AMI calls it after a Send of one slot): it follows the link
// when a connection hands it over to another.
type pushTarget struct{ c atomic.Pointer[conn] }

func (t *pushTarget) push() {
	if c := t.c.Load(); c != nil {
		c.push()
	}
}

// push writes what the link holds at once, from the Send that published
// it, if nothing the link wrote before waits for the target's
// acknowledgement and the socket takes writes: a message with nothing of
// its link in flight (a ping-pong's, the first of a window) leaves without
// waiting for the next Progress. Otherwise it leaves the descriptors to
// Progress, which writes a window's messages together.
//
// # Why
//
// An 8-byte ping-pong over loopback spent some 90 ns on each side between
// the Send's return and its write (the rest of the Advance pass up to
// Progress), timed by stamps around the path. Written from the Send (and
// a packet counted delivered before its handler runs, so that a reply
// written from the handler still carries the acknowledgement: one write a
// message, as before), amibench's 8-byte latency over TCP took 0.947x the
// time (8 interleaved rounds, each faster, 0.87-0.98x).
func (c *conn) push() {
	if c.ready.Load() && !c.wblocked.Load() && c.acked.Load() == c.peeked.Load() && c.failure.Load() == nil {
		c.kick()
	}
}
