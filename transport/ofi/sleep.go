//go:build ofi

package ofi

/*
#include "amigo_ofi.h"
*/
import "C"

import (
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/transport"
)

// A context whose doorbell is the adapter's (Doorbell) sleeps on the wait
// objects of its endpoint's completion queues: a waiter epolls their file
// descriptors (in its epoll set only while it sleeps, watchQueues) and an
// eventfd that in-process rings write, after fi_trywait said that nothing
// is pending, so that a message arriving wakes the sleeping thread itself. A provider without file descriptors
// (FI_WAIT_NONE) gets sleeps of at most noFDSlice, after which the
// context polls again.
//
// A context whose doorbell belongs to another adapter (shared memory) is
// watched by the adapter's goroutine instead: while the doorbell is armed,
// it asks fi_trywait every watchTick and rings the doorbell when the
// endpoint has something.
//
// While every context polls, the watcher has nothing to do, and each of its
// ticks costs a polling rank its processor for a while: the timer wakes a
// thread of the Go runtime, which runs the watcher and spins looking for
// more work before it sleeps again, on a host whose processors the ranks'
// own polling keeps busy (tcp;ofi_rxm, 8-byte ping-pong on two cores:
// 0.93x the latency without the watcher). So its tick doubles, up to
// watchSlowest (and a sixteenth of Options.Timeout), for as long as it
// finds every context polling, and drops back to watchTick as soon as one
// does not, or one arms another adapter's doorbell to sleep (kick). The
// price: a context that stops polling (its program computes) is first
// progressed by the watcher up to watchSlowest later, not up to watchTick,
// so what it injected just before leaves that much later.
const (
	noFDSlice    = 200 * time.Microsecond
	watchTick    = time.Millisecond
	watchSlowest = 8 * time.Millisecond
)

type waiter struct {
	a          *Adapter
	e          *endpoint
	epfd, evfd int
	fds        bool
	p          atomic.Pointer[port]
}

type sleepBell struct {
	w    *waiter
	bell *transport.Doorbell
}

// Doorbell returns the doorbell of local context ctx: it sleeps on the
// context's completion queues (transport.DoorbellProvider).
func (a *Adapter) Doorbell(ctx int) (*transport.Doorbell, error) {
	if ctx < 0 || ctx >= len(a.eps) {
		return nil, fmt.Errorf("ofi: context %d", ctx)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, transport.ErrClosed
	}
	if sb, ok := a.bells[ctx]; ok {
		return sb.bell, nil
	}
	w, err := newWaiter(a, a.eps[ctx])
	if err != nil {
		return nil, fmt.Errorf("ofi: doorbell of context %d: %w", ctx, err)
	}
	sb := &sleepBell{w: w, bell: transport.NewWaitingDoorbell(w)}
	a.bells[ctx] = sb
	return sb.bell, nil
}

func newWaiter(a *Adapter, e *endpoint) (*waiter, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	w := &waiter{a: a, e: e, epfd: epfd, evfd: evfd, fds: e.txfd >= 0 && e.rxfd >= 0}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// watchQueues adds the completion queues' file descriptors to the
// waiter's epoll set (on) or takes them out. They are in it only while
// Wait sleeps: a provider whose queues' descriptors stand for others
// (tcp;ofi_rxm's, its connections' sockets, an epoll set inside an epoll
// set) passes every arriving message up through each set watched, and
// one more, watched by nobody awake, made the 8-byte ping-pong slower.
// A descriptor added while it is ready is reported at once (epoll looks
// at it when it is added), so nothing that arrived before is missed.
// It tries both descriptors whatever the first answers, and returns the
// first error.
func (w *waiter) watchQueues(on bool) error {
	var first error
	for tag, fd := range [2]int{w.e.txfd, w.e.rxfd} {
		var err error
		if on {
			err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(tag)})
		} else {
			err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Wait sleeps until a completion queue of the endpoint has something,
// Wake is called, or timeout elapses. It writes nothing the context's
// goroutine reads.
func (w *waiter) Wait(timeout time.Duration) bool {
	if w.fds && w.p.Load() != nil {
		poll, watching := w.prepare()
		if poll {
			return true // completions wait to be read
		}
		if watching {
			defer w.unwatch()
		}
	}
	slice := timeout
	if !w.fds && w.p.Load() != nil {
		slice = min(timeout, noFDSlice)
	}
	var events [4]unix.EpollEvent
	n, err := 0, error(nil)
	for deadline := time.Now().Add(slice); ; {
		ms := int((time.Until(deadline) + time.Millisecond - 1) / time.Millisecond)
		if slice < time.Millisecond {
			ms = 0
			time.Sleep(slice)
		}
		n, err = unix.EpollWait(w.epfd, events[:], max(ms, 0))
		if err != unix.EINTR || !time.Now().Before(deadline) {
			break
		}
	}
	if err != nil || n <= 0 {
		// Without file descriptors, the end of a slice is a wake-up: the
		// context polls the queues itself.
		return !w.fds && w.p.Load() != nil
	}
	for _, ev := range events[:n] {
		if ev.Fd < 0 {
			var b [8]byte
			_, _ = unix.Read(w.evfd, b[:])
		}
	}
	return true
}

// prepare readies a sleep on the endpoint's queues: poll says that they
// have completions to read or must be progressed first (fi_trywait), else
// watching says that their file descriptors joined the epoll set, for
// unwatch to take out after the sleep. The adapter's mutex keeps the
// endpoint open meanwhile.
func (w *waiter) prepare() (poll, watching bool) {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	if w.e.ep == nil {
		return false, false
	}
	if C.amigo_trywait(w.a.fab, w.e.txcq, w.e.rxcq) != 0 {
		return true, false
	}
	if err := w.watchQueues(true); err != nil {
		_ = w.watchQueues(false)
		return true, false
	}
	return false, true
}

// unwatch takes the queues' file descriptors out of the epoll set (those
// of an endpoint closed meanwhile left it when they were closed).
func (w *waiter) unwatch() {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	if w.e.ep != nil {
		_ = w.watchQueues(false)
	}
}

// Wake makes the current or next Wait return.
func (w *waiter) Wake() {
	one := [8]byte{1}
	_, _ = unix.Write(w.evfd, one[:])
}

func (w *waiter) close() {
	unix.Close(w.epfd)
	unix.Close(w.evfd)
}

// watch is the adapter's goroutine. Every watchTick it runs Progress for
// each context that did not poll since the last tick, ringing its
// doorbell if that did anything: what the context injected leaves, and
// with a manual-progress provider data moves only while someone reads
// the completion queues. Packets it finds wait for the context's Poll. It
// also rings the doorbell of a sleeping context whose endpoint has
// completions to read, for a context that sleeps on another adapter's
// doorbell.
func (a *Adapter) watch() {
	defer a.wg.Done()
	slowest := max(min(watchSlowest, a.opts.Timeout/16), watchTick)
	tick := watchTick
	t := time.NewTimer(tick)
	defer t.Stop()
	var ports []*port
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		case <-a.kick:
			t.Stop() // the timer's channel holds no stale tick after Stop (Go 1.23)
		}
		a.ticks.Add(1)
		a.mu.Lock()
		ports = append(ports[:0], a.ports...)
		a.mu.Unlock()
		busy := true // every context polled since the last tick
		// The port is taken (watcherTake) before anything of it is touched:
		// Close takes it too before it releases the endpoint.
		for _, p := range ports {
			if p == nil {
				continue
			}
			taken, ok := p.watcherTake()
			if !ok {
				continue // its context has it: it polls
			}
			if p.closed.Load() && p.e.ep != nil {
				p.drainClosed()
				busy = false
			} else if p.e.ep != nil {
				polls := taken / turnOne
				now := time.Now()
				if polls != p.lastPolls || p.idleSince.IsZero() {
					p.idleSince = now
				} else {
					busy = false
					// No Poll follows: progress reads the receive queue.
					p.pollRead, p.rxLeft = false, true
					if p.progress() > 0 {
						p.bell.Ring()
					}
					p.flushAcks(true)
					p.flushCtrl()
					p.heartbeat(now)
				}
				p.lastPolls = polls
				if !p.ownBell && p.bell.Armed() && (p.e.txfd < 0 || p.e.rxfd < 0 || C.amigo_trywait(a.fab, p.e.txcq, p.e.rxcq) != 0) {
					p.bell.Ring()
				}
			}
			p.watcherGive(taken)
		}
		if !busy {
			tick = watchTick
			a.slow.Store(false)
		} else {
			// Slow down, unless a context armed another adapter's
			// doorbell meanwhile. slow is stored before the doorbells are
			// read, and a context arms its doorbell before it reads slow
			// (kickIfSlow): one of the two sees the other.
			a.slow.Store(true)
			tick = min(2*tick, slowest)
			for _, p := range ports {
				if p != nil && !p.ownBell && p.bell.Armed() {
					tick = watchTick
				}
			}
			if tick == watchTick {
				a.slow.Store(false)
			}
		}
		a.ticks.Add(1) // before pace: a reader of this pace sees the tick ended
		a.pace.Store(int64(tick))
		t.Reset(tick)
	}
}

// kickIfSlow brings the watcher back to its fastest tick when the port's
// context, whose doorbell belongs to another adapter, armed it to sleep:
// the watcher is what rings it for this endpoint.
func (p *port) kickIfSlow() {
	if !p.ownBell && p.a.slow.Load() && p.bell.Armed() {
		p.a.slow.Store(false)
		p.a.kicks.Add(1)
		select {
		case p.a.kick <- struct{}{}:
		default:
		}
	}
}
