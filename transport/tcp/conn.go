package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// conn is one TCP connection between a context of this rank and one of a
// peer: the path of this context's link to the peer (the initiator role,
// out), of the peer's link to this context (the target role, listedIn), or
// of both. The initiator writes packets (from the link's descriptor buffer)
// and GET and PUT requests (from its RDMA FIFO) and reads acks and replies;
// the target reads packets into a reception ring, serves the requests from
// its rank's registered regions and writes acks and replies. One read side
// and one write side serve both roles.
//
// # The socket
//
// Once authenticated, the socket leaves Go's network poller: the connection
// keeps a duplicate of its descriptor and does non-blocking system calls on
// it directly. A socket that the runtime's poller watches makes the runtime
// wake a thread for every segment that arrives as soon as any goroutine of
// the process waits on the poller or any timer runs (measured here: about
// 2 µs more per hop of a ping-pong); amigo's sockets cause no wake-up the
// program did not ask for. The adapter's engine goroutine watches the
// sockets that need watching with an epoll instance of its own (see
// engine.go).
//
// # Who does the I/O
//
// Each connection has a read side and a write side, each guarded by a
// try-lock (rlock, wlock: 0 free, 1 held; taken with CompareAndSwap, given
// back with Store). Whoever holds a side does only non-blocking system calls,
// so it holds it briefly, and nobody waits for a side while holding the
// other.
//
//   - While the owning context polls (Port.Poll and Port.Progress are called
//     and its doorbell is not armed), its goroutine does the I/O itself: it
//     writes what it injected during Progress, and reads during Poll (target)
//     or Progress (initiator, while acks or replies are due). A ping-pong
//     never hands work to another goroutine.
//   - A write that would block marks the write side blocked (wblocked) and
//     asks the engine to write once the socket takes more; until then the
//     engine owns the write side.
//   - When the context stops polling (its doorbell is armed to sleep, or the
//     adapter's watcher sees no poll for Options.Handoff), the engine reads
//     the socket whenever it is readable: it serves requests, puts packets
//     into the reception ring and rings the context's doorbell.
//
// A party that made work for a side it cannot take leaves it to the holder:
// it stores 1 to the side's pending word and then tries the lock; the holder
// stores 0 to the lock and then loads the pending word, and takes the side
// again if it is set. Go's atomics are sequentially consistent, so either the
// CompareAndSwap succeeds or the holder sees the pending word: no work is left
// behind.
//
// # Failure
//
// fail records the first error and starts finish, which waits for the
// connection's set-up goroutine, takes both locks for good, takes the socket
// out of the engine's epoll and closes it, releases what the sides held
// (region accesses), counts complete what the target acknowledged, fails the
// link with the error and completes its RDMA descriptors with it, fails the
// reverse link of the pair, and rings the context's doorbell. Only then may
// the AMI see the error and give buffers back to the program: nothing
// touches them afterwards.
type conn struct {
	a      *Adapter
	p      *port
	dialed bool           // this side connected (for its link); else it accepted
	peer   transport.Addr // the context at the other end
	remote string         // its network address, for messages
	// handing: handOver waits for the peer's connection to take the link.
	handing atomic.Bool

	// The connection's roles (see frame.go: one connection per pair).
	// out: it carries a link of this side's, written by the write side
	// and answered to the read side (a dialed connection from the start;
	// an accepted one once the port's link to the peer adopted it: link,
	// msg and q are set before out is stored). listedIn: it is among the
	// port's links in, and Poll reads and delivers its packets (an
	// accepted connection from the start; a dialed one once the peer's
	// first packet came on it).
	out      atomic.Bool
	listedIn atomic.Bool

	fd     int         // the socket, once ready
	ready  atomic.Bool // authenticated and attached
	cancel context.CancelFunc

	// Engine registration, guarded by armMu.
	armMu   sync.Mutex
	slot    int  // index in the engine's table, -1 if none
	closed  bool // fd closed
	inEng   bool // fd is in the engine's epoll set
	watchIn bool // fd belongs in the port's epoll set (watchInLocked)
	inEpoll bool // fd is in the port's epoll set (not while the port is unwatched)

	failure  atomic.Pointer[error]
	finished chan struct{} // closed at the end of finish
	wg       sync.WaitGroup

	// Read side, guarded by rlock.
	rlock     atomic.Uint32
	stalled   atomic.Bool   // reading stopped on a full reception ring or reply queue
	rcvd      atomic.Uint64 // bytes received
	rd        readState
	readEmpty bool           // the last read for answers found nothing (Progress's goroutine only)
	pfd       [1]unix.PollFd // its poll(2) argument
	wantKick  bool           // the pump made work for the write side (replies, acks received)
	inReady   bool           // the port's epoll reported the socket readable (Poll's goroutine only)
	// straight lets the pump stop at a packet that arrived whole in the
	// read buffer while the reception ring holds nothing undelivered,
	// leaving it in pkt for pollDeliver to hand to the receiver.
	straight  bool
	pkt       []byte
	straightN uint64 // packets pollDeliver handed over (Poll's goroutine only)

	// Target: the reception ring. Produced by the read side, consumed by
	// Poll on the context's goroutine.
	rx        *ring.Ring
	rxTail    uint64
	rxRead    *ring.Reader
	maxPacket int
	peerSlots int           // accepted: the descriptor buffer slots the peer announced
	rxDone    atomic.Uint64 // packets delivered, stored by Poll
	// ackSent counts the packets acknowledged. The write sides of this
	// connection (ack frames) and of its reverse (acks piggybacked on
	// packets) each claim the packets they acknowledge by CompareAndSwap
	// (claimAcks), so no packet is acknowledged twice.
	ackSent atomic.Uint64
	revKick bool // the read side counted a piggybacked ack on rev: kick it

	// Write side, guarded by wlock.
	wlock     atomic.Uint32
	wpend     atomic.Uint32
	wblocked  atomic.Bool   // the socket took no more: the engine writes once it does
	sent      atomic.Uint64 // bytes written
	ping, bye atomic.Bool   // control frames to send
	byeSent   atomic.Bool   // the goodbye is written (or in the batch being written)
	wr        writeState

	// Initiator: the link.
	link   *transport.Link
	pt     *pushTarget  // the link's Push, which names this connection while it carries the link
	msg    *ring.Reader // consumer of link.Msg, used by the write side
	q      *transport.RDMAQueue
	issued atomic.Uint64 // next RDMA position to send a request for; replies answer positions below it
	wpos   atomic.Uint64 // link.Msg position the write side has peeked up to
	peeked atomic.Uint64 // packets peeked (put in a batch), stored by the write side
	// acked counts the packets the target acknowledged: by ack frames,
	// which this connection's read side reads, and by acks piggybacked on
	// its packets, which the read side of the reverse connection reads.
	// Both add by CompareAndSwap, bounded by peeked (addAcks).
	acked atomic.Uint64
	// piggy is set while the target acknowledges by piggybacking (the
	// reverse read side counted acks for this connection since the last
	// ack frame read here): Progress then reads this socket less often,
	// as acks are not expected on it.
	piggy    atomic.Bool
	rev      atomic.Pointer[conn] // the pair's other connection, once found
	released atomic.Uint64        // packets given back to the context, stored by the write side

	// Target: replies, a single-producer single-consumer queue from the
	// read side (producer) to the write side (consumer). The producer fills
	// replies[repTail mod N] and then stores repTail; the consumer loads
	// repTail before it reads an entry, and stores repHead once the reply is
	// written and its region access released.
	replies [replySlots]reply
	repHead atomic.Uint64
	repTail atomic.Uint64

	// Watcher bookkeeping, used by the watcher goroutine only.
	lastRcvd, lastSent uint64
	silent             time.Duration
}

const (
	replySlots  = 64
	rbufSize    = 64 << 10
	directMin   = 16 << 10 // data at least this long is read straight to its destination
	maxIov      = 256
	scratchSize = 16 << 10
	copyMax     = 256 // packets up to this long are copied next to their header
)

type reply struct {
	hdr  [frameRep]byte
	data []byte
	acc  transport.Access
}

func newConn(a *Adapter, p *port, dialed bool, peer transport.Addr) *conn {
	c := &conn{
		a:        a,
		p:        p,
		dialed:   dialed,
		peer:     peer,
		fd:       -1,
		slot:     -1,
		finished: make(chan struct{}),
	}
	c.rd.buf = make([]byte, rbufSize)
	return c
}

// err returns the error that failed the connection, or nil.
func (c *conn) err() error {
	if p := c.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// attach takes an authenticated socket over: it keeps a duplicate of its
// descriptor, outside Go's network poller, and closes the original.
func (c *conn) attach(nc *net.TCPConn) error {
	defer nc.Close()
	if err := setSockopts(nc, c.a.opts); err != nil {
		return err
	}
	rc, err := nc.SyscallConn()
	if err != nil {
		return err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return err
	}
	if derr != nil {
		return derr
	}
	// The duplicate shares the socket's file status flags: it is
	// non-blocking, as Go made it.
	c.armMu.Lock()
	if c.failure.Load() != nil {
		c.armMu.Unlock()
		unix.Close(fd)
		if c.p.closed.Load() {
			// The port closed during the handshake, which the peer may
			// have finished: say goodbye rather than vanish.
			var bye [frameBase]byte
			putBase(bye[:], fBye, 0)
			_ = nc.SetWriteDeadline(time.Now().Add(closeFlush))
			_, _ = nc.Write(bye[:])
		}
		return nil
	}
	c.fd = fd
	err = c.a.eng.add(c)
	if err == nil && (!c.dialed || c.p.sleeper != nil) {
		err = c.watchInLocked()
	}
	c.armMu.Unlock()
	if err != nil {
		return err
	}
	c.ready.Store(true)
	select {
	case c.a.rewatch <- struct{}{}:
	default:
	}
	c.a.stats.connected.Add(1)
	processStats.connected.Add(1)
	c.rearm()
	// The context may have injected before the connection was up: what
	// the kick completes of it, the context learns of by a ring. An
	// accepted connection carries none of its context's descriptors (its
	// kick writes at most the ack of what the context read since the
	// socket joined its epoll set), and ringing for that would wake a
	// context for nothing.
	if c.kick() > 0 && c.dialed {
		c.p.bell.Ring()
	}
	return nil
}

// watchInLocked adds the socket to the port's epoll set, once. The caller
// holds armMu.
func (c *conn) watchInLocked() error {
	if c.inEpoll || c.closed || c.slot < 0 {
		return nil
	}
	c.watchIn = true
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(c.slot)}
	if err := unix.EpollCtl(c.p.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		return err
	}
	c.inEpoll = true
	c.p.joined.Store(true)
	return nil
}

// unwatchLocked takes the socket out of the port's epoll set and, while
// its context attends and no write waits for room, out of the engine's
// (port.unwatch). The caller holds armMu.
func (c *conn) unwatchLocked() {
	if c.closed || c.slot < 0 {
		return
	}
	if c.inEpoll && unix.EpollCtl(c.p.epfd, unix.EPOLL_CTL_DEL, c.fd, nil) == nil {
		c.inEpoll = false
	}
	if c.inEng && c.p.attended.Load() && !c.wblocked.Load() {
		c.a.eng.drop(c)
	}
}

// adoptOut makes an accepted connection carry the port's link to its peer
// as well, once the caller set link, msg and q (Port.Link, or handOver for
// a link whose own connection lost to the peer's): it reports false, and
// changes nothing, if the connection failed or was never attached.
func (c *conn) adoptOut() bool {
	c.armMu.Lock()
	defer c.armMu.Unlock()
	if c.closed || c.slot < 0 || c.failure.Load() != nil {
		return false
	}
	c.out.Store(true)
	return true
}

// listIn makes a dialed connection one of the port's links in: the peer
// sent its first packet on it (the read side calls it, once).
func (c *conn) listIn() {
	p := c.p
	p.mu.Lock()
	if !c.listedIn.Load() {
		add(&p.ins, c)
		c.listedIn.Store(true)
	}
	p.mu.Unlock()
	c.armMu.Lock()
	if err := c.watchInLocked(); err != nil {
		c.armMu.Unlock()
		c.failPeer(fmt.Errorf("%w: epoll: %v", ErrConnLost, err))
		return
	}
	c.armMu.Unlock()
}

func setSockopts(nc *net.TCPConn, o Options) error {
	if err := nc.SetNoDelay(true); err != nil {
		return err
	}
	ka := net.KeepAliveConfig{Enable: true, Idle: o.Timeout / 2, Interval: o.Timeout / 8, Count: 4}
	if ka.Idle < time.Second {
		ka.Idle = time.Second
	}
	if ka.Interval < time.Second {
		ka.Interval = time.Second
	}
	if err := nc.SetKeepAliveConfig(ka); err != nil {
		return err
	}
	if o.SocketBuffer > 0 {
		if err := nc.SetReadBuffer(o.SocketBuffer); err != nil {
			return err
		}
		if err := nc.SetWriteBuffer(o.SocketBuffer); err != nil {
			return err
		}
	}
	return nil
}

// rearm tells the engine what to watch the socket for: readable while the
// context does not poll (unless the reception ring is full), writable while
// a write is blocked.
//
// The state is read under armMu, so that of two rearms the later one sees
// the later state: whoever changes the state changes it first and rearms
// after.
func (c *conn) rearm() {
	c.armMu.Lock()
	defer c.armMu.Unlock()
	if c.closed || c.slot < 0 {
		return
	}
	var ev uint32
	if !c.p.attended.Load() && !c.stalled.Load() {
		ev |= unix.EPOLLIN | unix.EPOLLRDHUP
	}
	if c.wblocked.Load() {
		ev |= unix.EPOLLOUT
	}
	c.a.eng.arm(c, ev)
}

// ---- failure

// fail records err as the reason the connection ended, once, and finishes
// the connection in the background. It may be called from anywhere.
func (c *conn) fail(err error) {
	// The reason is published in a cell of its own, written before the
	// CompareAndSwap and never after: the address of the parameter would
	// also be the variable the go statement below passes on, which the
	// goroutine it starts writes while readers of failure read it.
	cell := new(error)
	*cell = err
	if !c.failure.CompareAndSwap(nil, cell) {
		return
	}
	if c.cancel != nil {
		c.cancel()
	}
	go c.finish(err)
}

// failPeer fails the connection with an error naming the peer.
func (c *conn) failPeer(err error) {
	c.fail(&transport.PeerError{Addr: c.peer, Err: err})
}

func (c *conn) finish(err error) {
	c.wg.Wait()
	for !c.rlock.CompareAndSwap(0, 1) {
		time.Sleep(10 * time.Microsecond)
	}
	for !c.wlock.CompareAndSwap(0, 1) {
		time.Sleep(10 * time.Microsecond)
	}
	// Both sides are ours for good.
	c.armMu.Lock()
	if c.fd >= 0 {
		if c.inEpoll {
			_ = unix.EpollCtl(c.p.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
			c.inEpoll = false
		}
		c.a.eng.remove(c)
		if errors.Is(err, transport.ErrClosed) {
			closeInOrder(c.fd)
		} else {
			unix.Close(c.fd)
		}
	}
	c.closed = true
	c.armMu.Unlock()
	for i := c.repHead.Load(); i != c.repTail.Load(); i++ {
		r := &c.replies[i%replySlots]
		r.acc.Release()
		r.acc, r.data = transport.Access{}, nil
	}
	c.repHead.Store(c.repTail.Load())
	c.rd.acc.Release()
	c.rd.acc = transport.Access{}
	c.rd.dst = nil
	for i := range c.wr.iov {
		c.wr.iov[i] = unix.Iovec{}
	}
	if c.out.Load() {
		if errors.Is(err, errBye) && !c.p.closed.Load() && !c.a.closed.Load() {
			c.awaitReverse()
		}
		// Count complete what the target acknowledged before the failure,
		// before the link reports it.
		if n := c.acked.Load() - c.released.Load(); n > 0 {
			c.released.Add(uint64(c.msg.ReleaseFirst(int(n))))
		}
		c.link.Fail(err)
		for op := c.q.Next(); op != nil; op = c.q.Next() {
			c.q.Done(err)
		}
	}
	c.a.stats.failed.Add(1)
	processStats.failed.Add(1)
	if !c.p.closed.Load() && !c.a.closed.Load() && !errors.Is(err, transport.ErrClosed) {
		side := "from"
		if c.dialed {
			side = "to"
		}
		c.a.opts.Logf("rank %d context %d: connection %s %v (%s) failed: %v", c.a.rank, c.p.ctx, side, c.peer, c.remote, err)
	}
	c.p.failPair(c.peer, err)
	c.p.bell.Ring()
	close(c.finished)
}

// ---- write side

type flushStatus uint8

const (
	flushIdle    flushStatus = iota // everything written
	flushBlocked                    // the socket takes no more for now
	flushFailed
)

type writeState struct {
	iov     [maxIov]unix.Iovec
	cur, n  int // iov[cur:n] remain to be written
	scratch [scratchSize]byte
	sn      int
	reps    int // replies in the batch

	// Packets and requests leave in the order the AMI injected them
	// (Link.Ordered), also while requests wait for the target's reply
	// queue (buildBatch): a packet leaves once every request injected
	// before it has. Every packet below freeTo was injected before every
	// request not yet written; snapM and snapR (if snap) are the link's
	// descriptor buffer and RDMA FIFO tails, loaded in that order, so
	// that every packet below snapM was injected before the requests
	// from snapR on: they may leave once the requests below snapR have.
	freeTo       uint64
	snapM, snapR uint64
	snap         bool
}

// heldTail returns how far packets may leave while the requests from pos
// wait, given the tails m and r just loaded (m first).
func (w *writeState) heldTail(m, r, pos uint64) uint64 {
	if w.snap && pos >= w.snapR {
		w.freeTo, w.snap = w.snapM, false
	}
	if !w.snap {
		w.snapM, w.snapR, w.snap = m, r, true
	}
	return w.freeTo
}

// hasOutgoing reports whether the initiator side has something to write or
// descriptors to give back.
func (c *conn) hasOutgoing() bool {
	return c.link.Msg.Tail() != c.wpos.Load() || c.q.At(c.issued.Load()) != nil || c.acked.Load() != c.released.Load() || c.ping.Load() || c.bye.Load()
}

// maybeReadable reports whether an initiator's read for answers may find
// bytes. After a read that found none, it asks poll(2) first: a read of an
// empty socket takes the socket's lock, which the kernel's delivery of
// arriving data on the other processor then waits for, and a context spins
// on it while a GET is due (measured: 4 MiB streams 6% faster with the
// check). It runs on the context's goroutine.
func (c *conn) maybeReadable() bool {
	if !c.readEmpty {
		return true
	}
	c.pfd[0] = unix.PollFd{Fd: int32(c.fd), Events: unix.POLLIN}
	k, _, e := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&c.pfd[0])), 1, uintptr(unsafe.Pointer(&zeroTimeout)), 0, 0, 0)
	return k != 0 || e != 0
}

// zeroTimeout is the timeout of a look that must not wait.
var zeroTimeout unix.Timespec

// epollNow is epoll_wait(2) with a zero timeout, as a raw system call (see
// readFD): it never blocks. It returns the number of events, 0 on an error.
func epollNow(epfd int, events []unix.EpollEvent) int {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0
	}
	return int(n)
}

// readAnswers is pollInline for the initiator's Progress, remembering
// whether the read found anything.
func (c *conn) readAnswers() int {
	n := c.pollInline()
	c.readEmpty = n == 0
	return n
}

// ackDue reports whether the target side owes the initiator an ack.
func (c *conn) ackDue() bool { return c.rxDone.Load() != c.ackSent.Load() }

// kick makes the write side send what waits for it, without blocking: it
// writes itself if it can take the write side, and otherwise leaves the work
// to whoever holds it (or to the engine, if the socket is full). It returns
// the number of descriptors and replies it completed.
func (c *conn) kick() int {
	work := 0
	c.wpend.Store(1)
	for c.wpend.Load() != 0 {
		if !c.ready.Load() || c.wblocked.Load() || !c.wlock.CompareAndSwap(0, 1) {
			return work
		}
		c.wpend.Store(0)
		n, st := 0, flushFailed
		if c.failure.Load() == nil {
			n, st = c.flush(c.fd)
		}
		work += n
		if st == flushBlocked {
			c.wblocked.Store(true)
			c.wlock.Store(0)
			c.a.stats.writerWakes.Add(1)
			processStats.writerWakes.Add(1)
			c.rearm()
			return work
		}
		c.wlock.Store(0)
	}
	return work
}

// writable is the engine's turn at a blocked write side.
func (c *conn) writable() int {
	if !c.wlock.CompareAndSwap(0, 1) {
		return 0
	}
	n, st := 0, flushFailed
	if c.failure.Load() == nil {
		n, st = c.flush(c.fd)
	}
	if st != flushBlocked {
		c.wblocked.Store(false)
	}
	c.wlock.Store(0)
	if st != flushBlocked && c.wpend.Load() != 0 {
		n += c.kick()
	}
	return n
}

// flush writes batches until there is nothing left or the socket takes no
// more. The caller holds the write side.
func (c *conn) flush(fd int) (int, flushStatus) {
	w := &c.wr
	work := 0
	for {
		if w.cur == w.n {
			work += c.completeBatch()
			if !c.buildBatch() {
				return work, flushIdle
			}
		}
		raceReleaseMerge()
		r1, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&w.iov[w.cur])), uintptr(w.n-w.cur))
		if e != 0 {
			if e == unix.EINTR {
				continue
			}
			if e == unix.EAGAIN {
				return work, flushBlocked
			}
			c.failPeer(fmt.Errorf("%w: write: %v", ErrConnLost, e))
			return work, flushFailed
		}
		c.sent.Add(uint64(r1))
		c.a.stats.sent.Add(uint64(r1))
		processStats.sent.Add(uint64(r1))
		n := uint64(r1)
		for n > 0 {
			v := &w.iov[w.cur]
			if n < v.Len {
				v.Base = (*byte)(unsafe.Add(unsafe.Pointer(v.Base), n))
				v.Len -= n
				break
			}
			n -= v.Len
			w.cur++
		}
	}
}

// completeBatch completes what the batch just written carried.
func (c *conn) completeBatch() int {
	w := &c.wr
	work := 0
	if w.n > 0 {
		for i := 0; i < w.n; i++ {
			w.iov[i].Base = nil
		}
		w.n, w.cur, w.sn = 0, 0, 0
	}
	if c.out.Load() {
		// Give back the descriptors the target acknowledged.
		if n := c.acked.Load() - c.released.Load(); n > 0 {
			done := c.msg.ReleaseFirst(int(n))
			c.released.Add(uint64(done))
			work += done
		}
	}
	if w.reps > 0 {
		h := c.repHead.Load()
		for i := 0; i < w.reps; i++ {
			r := &c.replies[(h+uint64(i))%replySlots]
			r.acc.Release()
			r.acc, r.data = transport.Access{}, nil
		}
		c.repHead.Store(h + uint64(w.reps))
		work += w.reps
		w.reps = 0
		c.unstall()
	}
	return work
}

// unstall lets a read side that stopped on a full reception ring or reply
// queue go on, once there is room.
func (c *conn) unstall() {
	if c.stalled.Load() {
		c.stalled.Store(false)
		c.rearm()
	}
}

// addScratch appends b to the batch through the scratch buffer, which must
// have room.
func (w *writeState) addScratch(b []byte) {
	dst := w.scratch[w.sn : w.sn+len(b)]
	copy(dst, b)
	w.addScratchLen(len(b))
}

// scratchTail returns the unused part of the scratch buffer, for the caller
// to fill n bytes of and then call addScratchLen(n).
func (w *writeState) scratchTail() []byte { return w.scratch[w.sn:] }

func (w *writeState) addScratchLen(n int) {
	start := &w.scratch[w.sn]
	if w.n > 0 {
		last := &w.iov[w.n-1]
		if uintptr(unsafe.Pointer(last.Base))+uintptr(last.Len) == uintptr(unsafe.Pointer(start)) {
			last.Len += uint64(n)
			w.sn += n
			return
		}
	}
	w.iov[w.n] = unix.Iovec{Base: start, Len: uint64(n)}
	w.n++
	w.sn += n
}

func (w *writeState) addData(b []byte) {
	if len(b) == 0 {
		return
	}
	w.iov[w.n] = unix.Iovec{Base: &b[0], Len: uint64(len(b))}
	w.n++
}

func (w *writeState) room(scratch int) bool {
	return w.n+2 <= maxIov && w.sn+scratch <= scratchSize
}

// buildBatch gathers the next batch to write and reports whether there is
// one.
func (c *conn) buildBatch() bool {
	w := &c.wr
	if c.ping.Load() {
		c.ping.Store(false)
		putBase(w.scratchTail(), fPing, 0)
		w.addScratchLen(frameBase)
	}
	if c.out.Load() {
		// Packets published before this load were published after every
		// RDMA descriptor the AMI published before them (it publishes in
		// program order). Taking descriptors after the load, and packets
		// only up to it, writes a Put before a packet posted after it,
		// even when another goroutine builds this batch while the AMI
		// injects (Link.Ordered).
		msgTail := c.link.Msg.Tail()
		rdmaTail := c.q.Tail()
		pos := c.issued.Load()
		// At most replySlots requests unanswered: the target then
		// always has room to queue a reply, so its reading of this
		// connection, which carries this side's answers too when it
		// carries the peer's link as well, never waits for this side.
		for w.room(frameAtomic) && pos-c.q.HeadCounter().Load() < replySlots {
			op := c.q.At(pos)
			if op == nil {
				break
			}
			if op.Kind == transport.Atomic {
				putAtomic(w.scratchTail(), op)
				w.addScratchLen(frameAtomic)
				pos++
				continue
			}
			typ := fGet
			if op.Kind == transport.Put {
				typ = fPut
			}
			putRDMA(w.scratchTail(), typ, uint64(op.Key), op.Off, uint64(len(op.Local)))
			w.addScratchLen(frameRDMA)
			if typ == fPut {
				w.addData(op.Local)
			}
			pos++
		}
		c.issued.Store(pos)
		if pos < rdmaTail {
			msgTail = w.heldTail(msgTail, rdmaTail, pos)
		} else {
			w.freeTo, w.snap = msgTail, false
		}
		peeked := c.peeked.Load()
		first := true
		for w.room(frameBase+copyMax) && c.msg.Position() < msgTail {
			b, err := c.msg.Peek()
			if err != nil {
				// Only this process writes the descriptor buffer.
				c.fail(fmt.Errorf("tcp: own descriptor buffer: %w", err))
				return false
			}
			if b == nil {
				break
			}
			peeked++
			var ack uint64
			if first {
				// The first packet of the batch carries what we owe the
				// peer for its packets to us.
				first = false
				if r := c.reverse(); r != nil {
					if ack = r.claimAcks(maxPiggyback); ack > 0 {
						c.a.stats.piggybacked.Add(ack)
					}
				}
			}
			if len(b) <= copyMax {
				t := w.scratchTail()
				putPacket(t, len(b), ack)
				copy(t[frameBase:], b)
				w.addScratchLen(frameBase + len(b))
				continue
			}
			putPacket(w.scratchTail(), len(b), ack)
			w.addScratchLen(frameBase)
			w.addData(b)
		}
		c.peeked.Store(peeked)
		c.wpos.Store(c.msg.Position())
	}
	// The peer's links on this connection: acks (those the packets above
	// did not carry) and replies.
	if w.room(frameBase) {
		if d := c.claimAcks(1 << 31); d > 0 {
			putBase(w.scratchTail(), fAck, uint32(d))
			w.addScratchLen(frameBase)
			c.a.stats.ackFrames.Add(1)
		}
	}
	h, t := c.repHead.Load(), c.repTail.Load()
	for i := h; i != t && w.room(frameRep); i++ {
		r := &c.replies[i%replySlots]
		w.addScratch(r.hdr[:])
		w.addData(r.data)
		w.reps++
	}
	if w.n == 0 && c.bye.Load() {
		c.bye.Store(false)
		c.byeSent.Store(true)
		putBase(w.scratchTail(), fBye, 0)
		w.addScratchLen(frameBase)
	}
	return w.n > 0
}

// ---- read side

type pumpStatus uint8

const (
	pumpIdle    pumpStatus = iota // the socket has nothing more for now
	pumpMore                      // stopped for the budget; more may be waiting
	pumpFull                      // stopped on a full reception ring or reply queue
	pumpDeliver                   // stopped at a packet for pollDeliver (c.pkt)
	pumpFailed                    // the connection failed
)

// Read states.
const (
	stFrame   uint8 = iota // expecting a frame header
	stData                 // filling dst
	stDiscard              // skipping the data of a refused put
)

// What dst is.
const (
	dstPacket uint8 = iota + 1
	dstPut
	dstGet
)

type readState struct {
	buf   []byte
	r, w  int // buf[r:w] is received and not yet consumed
	st    uint8
	dst   []byte
	kind  uint8
	acc   transport.Access // held while a put fills a region
	skip  uint64
	stat  uint32 // reply status of a put whose data is skipped
	aux   uint64
	pktN  int    // length of the packet being received
	pktAt uint64 // its position in the reception ring
	// drained is the pump's drained, kept while it stops at a packet for
	// pollDeliver.
	drained bool
}

// pollInline reads on the calling (context's) goroutine, if the read side
// is free. It returns the number of frames completed.
func (c *conn) pollInline() int {
	work, _ := c.pollDeliver(nil, 0)
	return work
}

// pollDeliver is pollInline for Poll, on the context's goroutine: up to
// budget packets that arrive whole in the read buffer while the reception
// ring holds nothing undelivered go to r straight from the buffer, in
// order, and count delivered before their handler runs, as deliver
// counts; the rest wait in the ring for deliver. Each handler runs after
// the kicks its packet's reading asked for, as it would from the ring. It
// returns the work done and the packets delivered.
//
// # Why
//
// An 8-byte message's frame went from the read buffer into the ring
// (pad, copy, seal, publish) and out of it (read, hand over, zero and
// give back) before its handler saw it: some 150 ns of a loopback
// ping-pong's 3.8 us on the way from the read to the handler.
//
// A handler runs with the read side held (its packet is in the read
// buffer): a Poll it causes (an Advance in a handler) finds the socket
// taken and reads nothing from it.
func (c *conn) pollDeliver(r transport.Receiver, budget int) (work, got int) {
	if !c.rlock.CompareAndSwap(0, 1) {
		return 0, 0
	}
	for {
		kick, revKick := false, false
		if c.failure.Load() == nil {
			c.wantKick, c.revKick = false, false
			c.straight = r != nil && got < budget
			w, _ := c.pump(c.fd, 4)
			work += w
			c.straight = false
			kick, revKick = c.wantKick, c.revKick
		}
		pkt := c.pkt
		c.pkt = nil
		if pkt == nil {
			c.rlock.Store(0)
		}
		if kick {
			c.kick()
		}
		c.kickReverse(revKick)
		if pkt == nil {
			return work, got
		}
		got++
		c.straightN++
		c.rxDone.Store(c.rxDone.Load() + 1)
		r.Receive(c.peer, pkt)
	}
}

// kickReverse lets the reverse connection's write side give back the
// descriptors a piggybacked ack acknowledged, if the read side counted one.
func (c *conn) kickReverse(counted bool) {
	if counted {
		if r := c.reverse(); r != nil {
			r.kick()
		}
	}
}

// readable is the engine's turn at the read side of a socket that became
// readable (or failed) while the context does not poll. It reports whether
// it did any work.
func (c *conn) readable() int {
	if !c.rlock.CompareAndSwap(0, 1) {
		return 0
	}
	work, kick, revKick := 0, false, false
	if c.failure.Load() == nil {
		c.wantKick, c.revKick = false, false
		work, _ = c.pump(c.fd, 64)
		kick, revKick = c.wantKick, c.revKick
	}
	c.rlock.Store(0)
	if kick {
		c.kick()
	}
	c.kickReverse(revKick)
	if work > 0 {
		c.p.bell.Ring()
	}
	return work
}

// pump consumes buffered bytes and reads more from fd, at most budget
// reads. The caller holds the read side.
func (c *conn) pump(fd int, budget int) (int, pumpStatus) {
	rd := &c.rd
	work := 0
	// The last read took less than it had room for (kept across a stop
	// at a packet pollDeliver hands over: no read since).
	drained := rd.drained
	rd.drained = false
	for reads := 0; ; {
		for {
			n, need, err := c.step()
			work += n
			if err != nil {
				c.failPeer(err)
				return work, pumpFailed
			}
			if need == needFull {
				if !c.stalled.Load() {
					// Publish the stall, then look once more: whoever
					// makes room either sees it or is seen.
					c.stalled.Store(true)
					continue
				}
				return work, pumpFull
			}
			if need == needBytes {
				break
			}
			if need == needDeliver {
				rd.drained = drained
				return work, pumpDeliver
			}
		}
		if c.stalled.Load() {
			c.stalled.Store(false)
		}
		if drained && rd.st == stFrame && rd.r == rd.w {
			// The socket had no more than the last read took, and it
			// ended at a frame's end: another read would almost always
			// find nothing, and it would delay the answer to what just
			// came by a system call. The next poll reads again.
			return work, pumpIdle
		}
		if reads >= budget {
			return work, pumpMore
		}
		direct := rd.st == stData && rd.r == rd.w && len(rd.dst) >= directMin
		var p []byte
		if direct {
			p = rd.dst
		} else {
			if rd.r == rd.w {
				rd.r, rd.w = 0, 0
			} else if rd.w == len(rd.buf) || rd.r > len(rd.buf)/2 {
				rd.w = copy(rd.buf, rd.buf[rd.r:rd.w])
				rd.r = 0
			}
			p = rd.buf[rd.w:]
		}
		n, err := readFD(fd, p)
		reads++
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return work, pumpIdle
			}
			c.failPeer(fmt.Errorf("%w: read: %v", ErrConnLost, err))
			return work, pumpFailed
		}
		if n == 0 {
			switch {
			case rd.st != stFrame || rd.r != rd.w:
				c.failPeer(fmt.Errorf("%w: closed by the peer in the middle of a frame (truncated)", ErrConnLost))
			case c.byeSent.Load():
				// This side said goodbye and the peer closed in
				// answer: the end of an orderly close.
				c.failPeer(transport.ErrClosed)
			default:
				c.failPeer(fmt.Errorf("%w: closed by the peer without notice", ErrConnLost))
			}
			return work, pumpFailed
		}
		raceAcquire()
		// Bytes read count as work even before a frame completes, so that a
		// context receiving a long reply does not count itself idle and
		// sleep.
		work++
		c.rcvd.Add(uint64(n))
		c.a.stats.rcvd.Add(uint64(n))
		processStats.rcvd.Add(uint64(n))
		drained = n < len(p)
		if direct {
			rd.dst = rd.dst[n:]
			if len(rd.dst) == 0 {
				work += c.dataDone()
			}
		} else {
			rd.w += n
		}
	}
}

type need uint8

const (
	needNothing need = iota // progress made; call again
	needBytes               // more bytes must be read
	needFull                // no room to go on
	needDeliver             // a packet waits in c.pkt for pollDeliver
)

// step consumes one frame, or part of one's data, from the buffer.
func (c *conn) step() (int, need, error) {
	rd := &c.rd
	switch rd.st {
	case stData:
		if rd.r == rd.w {
			return 0, needBytes, nil
		}
		m := copy(rd.dst, rd.buf[rd.r:rd.w])
		rd.r += m
		rd.dst = rd.dst[m:]
		if len(rd.dst) > 0 {
			return 0, needBytes, nil
		}
		return c.dataDone(), needNothing, nil
	case stDiscard:
		m := uint64(rd.w - rd.r)
		if m > rd.skip {
			m = rd.skip
		}
		rd.r += int(m)
		rd.skip -= m
		if rd.skip > 0 {
			return 0, needBytes, nil
		}
		c.pushReply(fPutRep, rd.stat, rd.aux, nil, transport.Access{})
		rd.st = stFrame
		return 1, needNothing, nil
	}
	f, err := parseFrameFor(rd.buf[rd.r:rd.w], c.rx != nil, c.out.Load(), c.maxPacket)
	if err == errShort {
		return 0, needBytes, nil
	}
	if err != nil {
		return 0, needBytes, err
	}
	return c.handle(f)
}

// handle acts on a frame header at the start of the buffer, consuming it
// unless there is no room to act.
func (c *conn) handle(f frame) (int, need, error) {
	rd := &c.rd
	if f.typ <= fPut || f.typ == fAtomic {
		if !c.listedIn.Load() {
			// The peer's link to this context came on this
			// connection, which this side dialed: from now on the
			// context's Poll reads it and delivers its packets.
			c.listIn()
		}
	}
	switch f.typ {
	case fPacket:
		n := int(f.u32)
		k := ring.SlotsFor(n)
		pad := c.rx.PadFor(c.rxTail, k)
		// Straight to the receiver (pollDeliver): the whole packet is in
		// the buffer and nothing before it waits in the ring.
		straight := c.straight && rd.w-rd.r >= f.headerLength+n && !c.rxRead.Pending()
		free := uint64(c.rx.Slots()) - (c.rxTail - c.rx.HeadCounter().Load())
		if !straight && uint64(pad+k) > free {
			return 0, needFull, nil
		}
		if f.ack > 0 {
			// The reverse connection may be failing already (the peer
			// said goodbye on it first): it counts these acks until this
			// connection ended (awaitReverse).
			r := c.reverseAny()
			if r == nil {
				return 0, needBytes, corruptf("ack of %d packets on a link we never sent on", f.ack)
			}
			if err := r.addAcks(f.ack); err != nil {
				return 0, needBytes, err
			}
			if !r.piggy.Load() {
				r.piggy.Store(true)
			}
			c.revKick = true
		}
		rd.r += f.headerLength
		if straight {
			// Its bytes stay in the buffer until the next read, which
			// waits for pollDeliver to hand it over.
			c.pkt = rd.buf[rd.r : rd.r+n : rd.r+n]
			rd.r += n
			return 1, needDeliver, nil
		}
		if pad > 0 {
			c.rx.WritePad(c.rxTail, pad)
			c.rxTail += uint64(pad)
		}
		rd.pktN, rd.pktAt = n, c.rxTail
		rd.dst = c.rx.Payload(c.rxTail, n)
		rd.kind, rd.st = dstPacket, stData
		if n == 0 {
			return c.dataDone(), needNothing, nil
		}
		return 0, needNothing, nil
	case fGet:
		if c.repTail.Load()-c.repHead.Load() == replySlots {
			return 0, needFull, nil
		}
		rd.r += f.headerLength
		mem, acc, err := c.a.regions.AcquireFor(transport.Key(f.key), f.off, f.n, transport.PermGet)
		if err != nil {
			st, aux := accessStatus(err)
			c.pushReply(fGetRep, st, aux, nil, transport.Access{})
		} else {
			c.pushReply(fGetRep, statusOK, f.n, mem, acc)
		}
		return 1, needNothing, nil
	case fPut:
		if c.repTail.Load()-c.repHead.Load() == replySlots {
			return 0, needFull, nil
		}
		rd.r += f.headerLength
		mem, acc, err := c.a.regions.AcquireFor(transport.Key(f.key), f.off, f.n, transport.PermPut)
		if err != nil {
			rd.stat, rd.aux = accessStatus(err)
			rd.skip, rd.st = f.n, stDiscard
			return 0, needNothing, nil
		}
		rd.dst, rd.acc = mem, acc
		rd.kind, rd.st = dstPut, stData
		if f.n == 0 {
			return c.dataDone(), needNothing, nil
		}
		return 0, needNothing, nil
	case fAtomic:
		if c.repTail.Load()-c.repHead.Load() == replySlots {
			return 0, needFull, nil
		}
		rd.r += f.headerLength
		mem, acc, err := c.a.regions.AcquireFor(transport.Key(f.key), f.off, f.n, transport.PermAtomic)
		var old uint64
		if err == nil {
			old, err = transport.ApplyAtomic(mem, f.aop, int(f.width), f.arg, f.cmp)
			acc.Release()
		}
		if err != nil {
			st, aux := accessStatus(err)
			c.pushReply(fAtomicRep, st, aux, nil, transport.Access{})
		} else {
			c.a.stats.atomics.Add(1)
			processStats.atomics.Add(1)
			c.pushReply(fAtomicRep, statusOK, old, nil, transport.Access{})
		}
		return 1, needNothing, nil
	case fGetRep, fPutRep, fAtomicRep:
		head := c.q.HeadCounter().Load()
		if head >= c.issued.Load() {
			return 0, needBytes, corruptf("a reply to no request")
		}
		op := c.q.Next()
		if op == nil || repFor(op.Kind) != f.typ {
			return 0, needBytes, corruptf("a reply of the wrong kind")
		}
		rd.r += f.headerLength
		if f.u32 != statusOK {
			c.q.Done(&transport.PeerError{Addr: c.peer, Err: statusError(f.u32, f.aux, op)})
			c.answered()
			return 1, needNothing, nil
		}
		if f.typ == fPutRep {
			c.q.Done(nil)
			c.answered()
			return 1, needNothing, nil
		}
		if f.typ == fAtomicRep {
			op.SetResult(f.aux)
			c.q.Done(nil)
			c.answered()
			return 1, needNothing, nil
		}
		if f.aux != uint64(len(op.Local)) {
			return 0, needBytes, corruptf("get reply of %d bytes for a request of %d", f.aux, len(op.Local))
		}
		rd.dst, rd.kind, rd.st = op.Local, dstGet, stData
		if f.aux == 0 {
			return c.dataDone(), needNothing, nil
		}
		return 0, needNothing, nil
	case fAck:
		if err := c.addAcks(f.u32); err != nil {
			return 0, needBytes, err
		}
		if c.piggy.Load() {
			c.piggy.Store(false)
		}
		rd.r += f.headerLength
		c.wantKick = true
		return 1, needNothing, nil
	case fPing:
		rd.r += f.headerLength
		return 0, needNothing, nil
	case fBye:
		rd.r += f.headerLength
		return 0, needBytes, errBye
	}
	return 0, needBytes, corruptf("unexpected frame type %d", f.typ)
}

// answered has the write side issue more requests, if some wait for the
// room an answer just made (see buildBatch).
func (c *conn) answered() {
	if c.q.At(c.issued.Load()) != nil {
		c.wantKick = true
	}
}

// addAcks counts n more of the initiator's packets acknowledged, by an ack
// frame or piggybacked on a packet of the reverse connection; more than were
// sent and not yet acknowledged is corrupt.
func (c *conn) addAcks(n uint32) error {
	for {
		a := c.acked.Load()
		if p := c.peeked.Load(); a+uint64(n) > p {
			return corruptf("ack of %d packets, %d unacknowledged were sent", n, p-a)
		}
		if c.acked.CompareAndSwap(a, a+uint64(n)) {
			return nil
		}
	}
}

// claimAcks takes up to max of the packets the target side delivered and
// has not acknowledged, for the caller to acknowledge; it returns how many.
func (c *conn) claimAcks(max uint64) uint64 {
	for {
		s := c.ackSent.Load()
		d := c.rxDone.Load() - s
		if d == 0 {
			return 0
		}
		d = min(d, max)
		if c.ackSent.CompareAndSwap(s, s+d) {
			return d
		}
	}
}

// closeInOrder closes a connection that ends in order (this side closed,
// or the peer said goodbye): it shuts the sending side down, so that the
// peer reads everything written and then the end, and reads and drops
// what the peer still sends until it closes too, for at most closeFlush.
// A socket closed with unread data in its receive buffer is reset
// instead, and the reset throws away what it still had to send: the last
// packets and the goodbye, which the peer then missed.
func closeInOrder(fd int) {
	_ = unix.Shutdown(fd, unix.SHUT_WR)
	deadline := time.Now().Add(closeFlush)
	var buf [4096]byte
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Read(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			_, _ = unix.Poll(pfd, int(left/time.Millisecond)+1)
			continue
		}
		if err != nil || n == 0 || time.Now().After(deadline) {
			break
		}
	}
	unix.Close(fd)
}

// errBye is the failure of a connection whose peer said goodbye.
var errBye = fmt.Errorf("%w (it said goodbye)", transport.ErrClosed)

// awaitReverse waits, for an initiator whose peer said goodbye, until the
// peer's connections to this context ended too (the peer says goodbye on
// each after what it queued there), bounded by the timeout: what the peer
// sent on them before it left (an acknowledgement that completes a send
// on this link, say) is then in the reception rings before the link
// reports the peer gone, and the context takes it first.
func (c *conn) awaitReverse() {
	var t *time.Timer
	for _, r := range c.p.list(&c.p.ins) {
		if r.peer != c.peer || r == c {
			continue
		}
		if t == nil {
			t = time.NewTimer(c.a.opts.Timeout)
			defer t.Stop()
		}
		select {
		case <-r.finished:
		case <-t.C:
			return
		}
	}
}

// reverseAny is reverse for a target's read side, failed or not.
func (c *conn) reverseAny() *conn {
	if c.out.Load() {
		return c
	}
	if r := c.reverse(); r != nil {
		return r
	}
	if r := c.rev.Load(); r != nil {
		return r
	}
	for _, r := range c.p.list(&c.p.outs) {
		if r.peer == c.peer && r.ready.Load() {
			return r
		}
	}
	return nil
}

// reverse returns the pair's other connection: for a connection that
// carries a link of this side's, the one that carries the peer's link to
// this context; for one that carries the peer's, the one that carries this
// context's link to the peer. A connection that carries both is its own
// reverse. It is nil if there is none, or it failed.
func (c *conn) reverse() *conn {
	if c.out.Load() && c.listedIn.Load() {
		if c.failure.Load() != nil {
			return nil
		}
		return c
	}
	if r := c.rev.Load(); r != nil {
		if r.failure.Load() != nil {
			return nil
		}
		return r
	}
	which := &c.p.outs
	if c.out.Load() {
		which = &c.p.ins
	}
	for _, r := range c.p.list(which) {
		if r.peer == c.peer && r.ready.Load() && r.failure.Load() == nil {
			c.rev.Store(r)
			return r
		}
	}
	return nil
}

// dataDone completes the frame whose data just filled dst.
func (c *conn) dataDone() int {
	rd := &c.rd
	rd.st, rd.dst = stFrame, nil
	switch rd.kind {
	case dstPacket:
		c.rx.Seal(rd.pktAt, rd.pktN)
		c.rxTail = rd.pktAt + uint64(ring.SlotsFor(rd.pktN))
		c.rx.Publish(c.rxTail)
	case dstPut:
		c.pushReply(fPutRep, statusOK, 0, nil, rd.acc)
		rd.acc = transport.Access{}
	case dstGet:
		c.q.Done(nil)
		c.answered()
	}
	return 1
}

// pushReply queues a reply; the caller checked that there is room. acc, if
// set, is released once the reply is written (a put's is released at once).
func (c *conn) pushReply(typ uint8, status uint32, aux uint64, data []byte, acc transport.Access) {
	if typ == fPutRep {
		acc.Release()
		acc = transport.Access{}
	}
	t := c.repTail.Load()
	r := &c.replies[t%replySlots]
	putRep(r.hdr[:], typ, status, aux)
	r.data, r.acc = data, acc
	c.repTail.Store(t + 1)
	c.wantKick = true
}

// deliver hands up to budget packets of the reception ring to r. It runs on
// the context's goroutine.
func (c *conn) deliver(r transport.Receiver, budget int) int {
	n := 0
	for n < budget {
		pkt, err := c.rxRead.Next()
		if err != nil || pkt == nil {
			break
		}
		// Counted delivered before its handler runs, so that a reply the
		// handler sends, which the link's Push may write at once, carries
		// its acknowledgement. Poll is the only writer.
		c.rxDone.Store(c.rxDone.Load() + 1)
		r.Receive(c.peer, pkt)
		c.rxRead.Release()
		n++
	}
	if n > 0 {
		c.unstall()
	}
	return n
}

// ErrConnLost reports a connection that broke: reset, closed without
// notice, or failing a system call.
var ErrConnLost = errors.New("connection lost")

// ErrSilent reports a peer that sent nothing, not even a ping, for longer
// than Options.Timeout.
var ErrSilent = errors.New("peer silent for longer than the timeout")

// readFD is read(2) on a non-blocking descriptor, as a raw system call:
// the runtime's scheduler is not told of it, since it never blocks. A
// system call the scheduler knows of costs its bookkeeping on each side,
// and, should the thread lose its processor in the call (ranks outnumber
// processors), lets the runtime's monitor take the goroutine's P away and
// keep waking every 20 µs.
func readFD(fd int, p []byte) (int, error) {
	r, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}
