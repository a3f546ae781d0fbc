package shm

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/transport"
)

// Peers are watched through pidfds: a pidfd polls readable once its process
// has exited, whatever killed it, and names that very process (no pid reuse
// race). When a peer is gone, every link to it fails with an ExitError, the
// contexts are woken, and waits on it (Deregister) stop waiting.

func (a *Adapter) startWatch() error {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return err
	}
	a.evfd = fd
	a.pidfd = make([]int, len(a.local))
	for li := range a.pidfd {
		a.pidfd[li] = -1
	}
	for li, pr := range a.peers {
		if pr == nil {
			continue
		}
		fd, err := unix.PidfdOpen(pr.pub.pid, 0)
		switch {
		case err == nil:
			a.pidfd[li] = fd
		case errors.Is(err, unix.ESRCH):
			a.peerGone(pr)
		default:
			// No pidfd (an old kernel): the watcher polls with kill(pid, 0).
		}
	}
	return nil
}

func (a *Adapter) wakeWatch() {
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(a.evfd, one[:])
}

// watch waits for peers to exit until the adapter closes.
func (a *Adapter) watch() {
	defer a.wg.Done()
	fds := make([]unix.PollFd, 0, len(a.local)+1)
	who := make([]*peer, 0, len(a.local)+1)
	for {
		fds, who = fds[:0], who[:0]
		fds = append(fds, unix.PollFd{Fd: int32(a.evfd), Events: unix.POLLIN})
		who = append(who, nil)
		polling := false
		for li, pr := range a.peers {
			if pr == nil || pr.gone() {
				continue
			}
			if a.pidfd[li] < 0 {
				polling = true
				continue
			}
			fds = append(fds, unix.PollFd{Fd: int32(a.pidfd[li]), Events: unix.POLLIN})
			who = append(who, pr)
		}
		// With a pidfd for every peer the poll needs no timeout: a peer's
		// exit and Close (the eventfd) wake it. A bounded poll would cost
		// more than its own wake-up: a goroutine blocked in a system call
		// holds its P, the runtime's monitor takes the P back when no other
		// is idle, and for the next millisecond it wakes every 20 us, each
		// time taking a core from a rank that polls for messages.
		timeout := -1
		if polling {
			timeout = 50
		}
		_, err := unix.Poll(fds, timeout)
		select {
		case <-a.stop:
			return
		default:
		}
		if err != nil && err != unix.EINTR {
			time.Sleep(10 * time.Millisecond)
		}
		for i, f := range fds {
			if i > 0 && f.Revents != 0 {
				a.peerGone(who[i])
			}
		}
		if polling {
			for li, pr := range a.peers {
				if pr != nil && a.pidfd[li] < 0 && !pr.gone() && !alive(pr.pub.pid) {
					a.peerGone(pr)
				}
			}
		}
	}
}

// peerGone records that pr's process exited and fails everything bound to
// it.
func (a *Adapter) peerGone(pr *peer) {
	err := error(&ExitError{Rank: pr.rank, PID: pr.pub.pid})
	if !pr.dead.CompareAndSwap(nil, &err) {
		return
	}
	a.mu.Lock()
	ports := append([]*port(nil), a.ports...)
	a.mu.Unlock()
	for _, p := range ports {
		if p != nil {
			p.failPeer(pr, err)
		}
	}
	// Chunk rings it drew from our pool and we are not serving; those we
	// serve are freed when the server notices (server.serve).
	sweepRings(a.self, pr.li)
	transport.RingShared(a.self.engineBell())
}

// engineLinger is how long the engine keeps looking for requests after it
// served one, before it sleeps.
const engineLinger = 50 * time.Microsecond

// engine serves peers' requests when this rank's contexts do not: it sleeps
// on the engine doorbell in the segment until an initiator rings it.
func (a *Adapter) engine() {
	defer a.wg.Done()
	bell := a.self.engineBell()
	idle := 0
	var worked time.Time
	for {
		select {
		case <-a.stop:
			return
		default:
		}
		if a.srv.pending() && a.srv.serve() > 0 {
			idle = 0
			worked = time.Time{}
			continue
		}
		idle++
		if idle < 64 {
			runtime.Gosched()
			continue
		}
		// Atomics come in runs (an initiator's, one after the other, each
		// a few microseconds after the last was answered): after one,
		// stay awake for engineLinger rather than be woken, at some
		// microseconds a wake, for each.
		if worked.IsZero() && a.srv.servedAtomic.Swap(false) {
			worked = time.Now()
		}
		if !worked.IsZero() && (idle&63 != 0 || time.Since(worked) < engineLinger) {
			runtime.Gosched()
			continue
		}
		worked = time.Time{}
		// Initiators ring the bell when they need us (and again while
		// they wait), and Close rings it: the long bound only caps the
		// cost of a lost wake-up. A short one would cost a rank that polls
		// for messages a core now and then (see watch).
		timeout := 10 * time.Second
		if a.srv.active.Load() > 0 {
			// A transfer waits for its initiator; it rings us if it finds
			// us not serving.
			timeout = time.Millisecond
		}
		bell.Store(1)
		if a.srv.pending() && a.srv.active.Load() == 0 {
			bell.Store(0)
			continue
		}
		futexWait(bell, 1, timeout)
		bell.Store(0)
		idle = 0
	}
}

// futexWait sleeps while *addr is val, for at most timeout. Without
// FUTEX_PRIVATE_FLAG: the wakers are other processes mapping the word.
func futexWait(addr *atomic.Uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(timeout))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), 0 /* FUTEX_WAIT */, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}
