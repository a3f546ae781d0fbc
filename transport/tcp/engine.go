package tcp

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// engine is the adapter's goroutine for the sockets nobody else is
// servicing: it reads those of contexts that stopped polling (serving GET and
// PUT, filling reception rings, ringing doorbells) and writes those whose
// socket was full. It waits in an epoll instance of its own, so the sockets
// stay out of Go's network poller (see conn).
//
// Every socket is registered once, with EPOLLONESHOT: an event disables it
// until rearm asks again, with the interest the connection's state calls for
// (EPOLLIN while its context does not poll, EPOLLOUT while a write is
// blocked, neither otherwise; errors and hang-ups are always reported). A
// socket whose context polls therefore costs the engine nothing, and once
// the context has polled a while it leaves the engine's set altogether
// (port.unwatch, engine.drop) until an interest brings it back. After a burst
// of work the engine polls its epoll for Options.ReadSpin before it blocks.
type engine struct {
	a    *Adapter
	epfd int
	evfd int // eventfd that wakes the engine to stop
	stop atomic.Bool
	done chan struct{}

	mu    sync.Mutex
	conns []*conn // by slot, under mu
	free  []int
	table atomic.Pointer[[]*conn] // a copy of conns, replaced under mu, read without a lock
}

func newEngine(a *Adapter) (*engine, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}); err != nil {
		unix.Close(epfd)
		unix.Close(evfd)
		return nil, err
	}
	e := &engine{a: a, epfd: epfd, evfd: evfd, done: make(chan struct{})}
	go e.run()
	return e, nil
}

// add registers c's socket, with no interest yet. The caller holds c.armMu.
func (e *engine) add(c *conn) error {
	e.mu.Lock()
	var slot int
	if n := len(e.free); n > 0 {
		slot = e.free[n-1]
		e.free = e.free[:n-1]
		e.conns[slot] = c
	} else {
		slot = len(e.conns)
		e.conns = append(e.conns, c)
	}
	e.publish()
	e.mu.Unlock()
	c.slot = slot
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(slot)}
	if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		e.release(slot)
		c.slot = -1
		return err
	}
	c.inEng = true
	return nil
}

// arm sets the interest of c's socket, registering it again if drop took
// it out. The caller holds c.armMu.
func (e *engine) arm(c *conn, events uint32) {
	ev := unix.EpollEvent{Events: events | unix.EPOLLONESHOT, Fd: int32(c.slot)}
	if c.inEng {
		_ = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev)
		return
	}
	if events == 0 {
		// No interest: the socket may stay out (see drop).
		return
	}
	if unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev) == nil {
		c.inEng = true
		c.p.joined.Store(true)
	}
}

// drop takes c's socket out of the engine's epoll set, keeping its slot:
// a socket in no epoll set costs nothing when a segment arrives, where
// each registration adds a callback under the socket's lock that the
// reader spinning on it waits for. The caller holds c.armMu; arm
// registers the socket again when its state calls for an interest.
// Errors and hang-ups of a dropped socket are found by the reads of the
// context that attends it.
func (e *engine) drop(c *conn) {
	if unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, c.fd, nil) == nil {
		c.inEng = false
	}
}

// remove unregisters c's socket. The caller holds c.armMu.
func (e *engine) remove(c *conn) {
	if c.slot < 0 {
		return
	}
	if c.inEng {
		_ = unix.EpollCtl(e.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
		c.inEng = false
	}
	e.release(c.slot)
	c.slot = -1
}

func (e *engine) release(slot int) {
	e.mu.Lock()
	e.conns[slot] = nil
	e.free = append(e.free, slot)
	e.publish()
	e.mu.Unlock()
}

// publish replaces the lock-free copy of the table; the caller holds mu.
func (e *engine) publish() {
	t := append([]*conn(nil), e.conns...)
	e.table.Store(&t)
}

// lookup returns the connection registered at slot, without a lock.
func (e *engine) lookup(slot int32) *conn {
	p := e.table.Load()
	if p == nil || slot < 0 || int(slot) >= len(*p) {
		return nil
	}
	return (*p)[slot]
}

func (e *engine) run() {
	defer close(e.done)
	var events [64]unix.EpollEvent
	var spinUntil time.Time
	for {
		timeout := -1
		if !spinUntil.IsZero() {
			if time.Now().Before(spinUntil) {
				timeout = 0
			} else {
				spinUntil = time.Time{}
			}
		}
		n, err := unix.EpollWait(e.epfd, events[:], timeout)
		if e.stop.Load() {
			return
		}
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			e.a.opts.Logf("rank %d: engine: epoll_wait: %v", e.a.rank, err)
			time.Sleep(time.Millisecond)
			continue
		}
		work := 0
		for i := 0; i < n; i++ {
			ev := events[i]
			if ev.Fd < 0 {
				var b [8]byte
				_, _ = unix.Read(e.evfd, b[:])
				continue
			}
			c := e.lookup(ev.Fd)
			if c == nil {
				continue
			}
			e.a.stats.pollerWakes.Add(1)
			processStats.pollerWakes.Add(1)
			if ev.Events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 && c.wblocked.Load() {
				work += c.writable()
			}
			if ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				work += c.readable()
			}
			c.rearm()
		}
		if work > 0 && e.a.opts.ReadSpin > 0 {
			spinUntil = time.Now().Add(e.a.opts.ReadSpin)
		}
	}
}

// close stops the engine and releases its descriptors.
func (e *engine) close() {
	e.stop.Store(true)
	var one = [8]byte{1}
	_, _ = unix.Write(e.evfd, one[:])
	<-e.done
	unix.Close(e.epfd)
	unix.Close(e.evfd)
}
