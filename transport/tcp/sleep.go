package tcp

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/transport"
)

// A context whose only adapter between processes is this one sleeps in the
// kernel on its own sockets: its doorbell (Adapter.Doorbell) is a
// transport.Waiter over the port's epoll set, which holds every socket of
// the port, in and out, level-triggered, and an eventfd that in-process
// rings write. A packet, a request or an answer that arrives wakes the
// sleeping context's thread directly, and the context reads it itself: no
// goroutine of the adapter takes its sockets over when it sleeps (only when
// it stops polling altogether, Options.Handoff), and no timer ends a sleep
// that a socket should have ended. With the engine in between, a wake-up
// was two hand-overs, epoll to the engine goroutine and the engine to the
// context; with more ranks than processors the engine's turn could wait a
// time slice, and most sleeps ran to their bound.
//
// When another adapter provides the doorbell (shared memory, whose peers
// wake the context with a futex), the engine reads the sockets of a
// sleeping context and rings it, as before.
type sleeper struct {
	epfd, evfd int
	p          *port // set by Open; before, only rings wake a Wait
}

func newSleeper() (*sleeper, error) {
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
	return &sleeper{epfd: epfd, evfd: evfd}, nil
}

// Wait sleeps until a socket of the port is readable (or failed), Wake is
// called, or timeout elapses. It runs on the context's goroutine, or on the
// goroutine behind amigo's Context.Ready while the context's owner waits
// for it, so it writes nothing but atomics, and the epoll registrations
// under each connection's lock (the sockets a polling context took out of
// the set go back first, port.rewatch): a socket event sets the port's
// woke, and the next Progress reads the links out (Poll reads the links in
// anyway). A sleep counts as a poll at both ends. One longer than
// Options.Handoff lets the adapter's watcher hand the sockets to the engine,
// which reads what arrives and wakes the sleep through the eventfd: an idle
// context costs a wake-up per message, no more.
func (s *sleeper) Wait(timeout time.Duration) bool {
	p := s.p // nil until the context's port is open: then only rings wake
	if p != nil {
		p.polls.Add(1)
		if p.unwatched.Load() {
			// The sockets left the set while the context polled them:
			// back before the sleep (a socket readable already makes
			// the epoll_wait below return at once).
			p.rewatch()
		}
	}
	var events [16]unix.EpollEvent
	n, err := 0, error(nil)
	for deadline := time.Now().Add(timeout); ; {
		ms := int((time.Until(deadline) + time.Millisecond - 1) / time.Millisecond)
		n, err = unix.EpollWait(s.epfd, events[:], max(ms, 1))
		// A signal to the thread (the runtime preempts goroutines with
		// one) ends epoll_wait early whatever SA_RESTART says: sleep out
		// the rest, or the caller takes the early return for a bound
		// that ran out with no wake-up.
		if err != unix.EINTR || !time.Now().Before(deadline) {
			break
		}
	}
	if p != nil {
		p.polls.Add(1)
	}
	if err != nil || n <= 0 {
		return false
	}
	for _, ev := range events[:n] {
		if ev.Fd < 0 {
			var b [8]byte
			_, _ = unix.Read(s.evfd, b[:])
			continue
		}
		if p != nil {
			p.woke.Store(true)
		}

	}
	return true
}

// Wake makes the current or next Wait return.
func (s *sleeper) Wake() {
	one := [8]byte{1}
	_, _ = unix.Write(s.evfd, one[:])
}

func (s *sleeper) close() {
	unix.Close(s.epfd)
	unix.Close(s.evfd)
}

// Doorbell returns the doorbell of local context ctx: it sleeps on the
// context's sockets (sleeper). transport.DoorbellProvider.
func (a *Adapter) Doorbell(ctx int) (*transport.Doorbell, error) {
	if ctx < 0 {
		return nil, fmt.Errorf("tcp: context %d", ctx)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, transport.ErrClosed
	}
	if a.sleepers == nil {
		a.sleepers = map[int]*sleeperBell{}
	}
	if sb, ok := a.sleepers[ctx]; ok {
		return sb.bell, nil
	}
	s, err := newSleeper()
	if err != nil {
		return nil, fmt.Errorf("tcp: doorbell of context %d: %w", ctx, err)
	}
	sb := &sleeperBell{s: s, bell: transport.NewWaitingDoorbell(s)}
	a.sleepers[ctx] = sb
	return sb.bell, nil
}

type sleeperBell struct {
	s    *sleeper
	bell *transport.Doorbell
}
