package tcp

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/procfs"
	"github.com/amigo-hpc/amigo/transport"
)

// epollHolds reports whether epoll instance epfd of this process has fd
// registered, from the kernel's own account (/proc/self/fdinfo).
func epollHolds(t *testing.T, epfd, fd int) bool {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", epfd))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "tfd:" {
			if n, err := strconv.Atoi(fields[1]); err == nil && n == fd {
				return true
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return false
}

// asleepIn reports whether a thread of this process waits in epoll_wait or
// epoll_pwait on epoll instance epfd (package procfs).
func asleepIn(t *testing.T, epfd int) bool {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		nr, args, err := procfs.Syscall(tid)
		if err == nil && (nr == unix.SYS_EPOLL_PWAIT || nr == unix.SYS_EPOLL_WAIT) && len(args) > 0 && args[0] == uint64(epfd) {
			return true
		}
	}
	return false
}

// socketOf returns the connection that carries the only link into p.
func socketOf(t *testing.T, p *port) *conn {
	t.Helper()
	ins := p.list(&p.ins)
	if len(ins) != 1 {
		t.Fatalf("%d connections in, want 1", len(ins))
	}
	return ins[0]
}

// unwatchPair opens context 0 of two adapters, the second's on bell (its
// own adapter's doorbell, or another's), and sends packets from the first
// to the second until the connection carries them.
func unwatchPair(t *testing.T, bell func(*Adapter) *transport.Doorbell) (ads []*Adapter, src transport.Port, dst *port) {
	t.Helper()
	// A Handoff of a minute: the watcher does not hand the socket to
	// the engine while the test looks.
	ads, _, _ = newWorld(t, 2, Options{Handoff: time.Minute, Timeout: 10 * time.Minute})
	t.Cleanup(func() {
		for _, a := range ads {
			a.Close()
		}
	})
	dstPort, err := ads[1].Open(0, bell(ads[1]))
	if err != nil {
		t.Fatal(err)
	}
	if src, err = ads[0].Open(0, transport.NewDoorbell()); err != nil {
		t.Fatal(err)
	}
	dst = dstPort.(*port)
	exchange(t, src, dst, addr(0, 0), addr(1, 0), 10)
	return ads, src, dst
}

// ownDoorbell gives unwatchPair the doorbell of the context's own adapter,
// which sleeps on the context's sockets, and keeps it in *bell.
func ownDoorbell(t *testing.T, bell **transport.Doorbell) func(*Adapter) *transport.Doorbell {
	return func(a *Adapter) *transport.Doorbell {
		b, err := a.Doorbell(0)
		if err != nil {
			t.Fatal(err)
		}
		*bell = b
		return b
	}
}

// sendOne writes one packet from src to context 0 of rank 1 and makes
// src write it.
func sendOne(t *testing.T, src transport.Port, payload string) {
	t.Helper()
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	producersMu.Lock()
	p := producers[l]
	producersMu.Unlock()
	for !p.send([]byte(payload)) {
		src.Progress()
	}
	src.Progress()
}

// A context that keeps polling takes its socket out of every epoll set
// (the port's, which it sleeps on, and the engine's); packets still
// arrive; before it sleeps the socket is back in the port's set, and a
// packet sent while it sleeps wakes it; polling again takes it out again.
// Checked against the kernel's list of each set's registrations.
func TestPollingSocketInNoEpollSet(t *testing.T) {
	var bell *transport.Doorbell
	ads, src, dst := unwatchPair(t, ownDoorbell(t, &bell))
	c := socketOf(t, dst)
	inPort := func() bool { return epollHolds(t, dst.epfd, c.fd) }
	inEngine := func() bool { return epollHolds(t, ads[1].eng.epfd, c.fd) }

	var sink countingReceiver
	for i := 0; i < unwatchAfter+1; i++ {
		dst.Poll(&sink, 64)
	}
	if inPort() || inEngine() {
		t.Fatalf("after %d polls the socket is in the port's set %v, in the engine's %v; want neither", unwatchAfter+1, inPort(), inEngine())
	}
	// Packets go on arriving while the socket is in no set.
	exchange(t, src, dst, addr(0, 0), addr(1, 0), 100)

	for round := 0; round < 3; round++ {
		for i := 0; i < unwatchAfter+1; i++ {
			dst.Poll(&sink, 64)
		}
		if inPort() {
			t.Fatalf("round %d: the socket is in the port's set while the context polls", round)
		}
		before := sink.n
		type result struct {
			timedOut bool
			took     time.Duration
		}
		done := make(chan result, 1)
		go func() {
			timer := time.NewTimer(time.Hour)
			timer.Stop()
			bell.Arm()
			t0 := time.Now()
			timedOut := bell.Sleep(nil, timer, time.Minute)
			done <- result{timedOut, time.Since(t0)}
		}()
		// Sleeping counts the sleep from its start, before the sleeper puts
		// the sockets back: the check waits for a thread waiting in the
		// port's set.
		for deadline := time.Now().Add(20 * time.Second); bell.Sleeping() <= uint64(round) || !asleepIn(t, dst.epfd); {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the consumer never went to sleep in its port's epoll set", round)
			}
			time.Sleep(50 * time.Microsecond)
		}
		if !inPort() {
			t.Fatalf("round %d: the context sleeps with its socket out of the set it sleeps on", round)
		}
		sendOne(t, src, "wake")
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the sleep did not end", round)
		}
		if r.timedOut || r.took > 10*time.Second {
			t.Fatalf("round %d: the sleep timed out %v after %v", round, r.timedOut, r.took)
		}
		bell.Disarm()
		for deadline := time.Now().Add(10 * time.Second); sink.n == before; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the packet that woke the context was not delivered", round)
			}
			dst.Poll(&sink, 64)
			dst.Progress()
		}
	}
}

// A context whose doorbell another adapter provides (no sleeper of this
// adapter's) hands its socket to the engine when it stops polling: after
// the socket left the engine's set, arming the doorbell brings it back,
// and a packet that arrives then rings the doorbell.
func TestUnwatchedSocketBackToEngine(t *testing.T) {
	bell := transport.NewDoorbell()
	ads, src, dst := unwatchPair(t, func(*Adapter) *transport.Doorbell { return bell })
	c := socketOf(t, dst)
	var sink countingReceiver
	for i := 0; i < unwatchAfter+1; i++ {
		dst.Poll(&sink, 64)
	}
	if epollHolds(t, ads[1].eng.epfd, c.fd) {
		t.Fatal("the socket of a context that polls stays in the engine's set")
	}
	for round := 0; round < 3; round++ {
		bell.Arm()
		// The poll that finds the doorbell armed hands the socket over.
		dst.Poll(&sink, 64)
		if !epollHolds(t, ads[1].eng.epfd, c.fd) {
			t.Fatalf("round %d: a context about to sleep left its socket out of the engine's set", round)
		}
		rings := bell.Rings()
		sendOne(t, src, "ring")
		for deadline := time.Now().Add(20 * time.Second); bell.Rings() == rings; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no ring for a packet that arrived while the context slept", round)
			}
			time.Sleep(50 * time.Microsecond)
		}
		bell.Disarm()
		before := sink.n
		for deadline := time.Now().Add(10 * time.Second); sink.n == before; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the packet was not delivered", round)
			}
			dst.Poll(&sink, 64)
		}
		for i := 0; i < unwatchAfter+1; i++ {
			dst.Poll(&sink, 64)
		}
		if epollHolds(t, ads[1].eng.epfd, c.fd) {
			t.Fatalf("round %d: polling again left the socket in the engine's set", round)
		}
	}
}

// The engine taking a socket back for an interest of its own (a write
// that waits for room) while the socket is out of the port's set does not
// make the port forget that the socket is out: the next sleep puts it back
// in the set it sleeps on, and the port takes it out of both again after
// its next run of polls.
func TestEngineInterestWhileUnwatched(t *testing.T) {
	var bell *transport.Doorbell
	ads, src, dst := unwatchPair(t, ownDoorbell(t, &bell))
	c := socketOf(t, dst)
	var sink countingReceiver
	for i := 0; i < unwatchAfter+1; i++ {
		dst.Poll(&sink, 64)
	}
	if epollHolds(t, dst.epfd, c.fd) || epollHolds(t, ads[1].eng.epfd, c.fd) {
		t.Fatal("after a run of polls the socket is still in an epoll set")
	}
	// The engine's interest in a blocked write comes and goes.
	c.wblocked.Store(true)
	c.rearm()
	if !epollHolds(t, ads[1].eng.epfd, c.fd) {
		t.Fatal("a blocked write did not bring the socket back into the engine's set")
	}
	c.wblocked.Store(false)
	c.rearm()
	done := make(chan bool, 1)
	go func() {
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		bell.Arm()
		done <- bell.Sleep(nil, timer, time.Minute)
	}()
	for deadline := time.Now().Add(20 * time.Second); bell.Sleeping() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the consumer never went to sleep")
		}
		time.Sleep(50 * time.Microsecond)
	}
	before := sink.n
	sendOne(t, src, "wake")
	select {
	case timedOut := <-done:
		if timedOut {
			t.Fatal("the sleep ran out without the socket waking it")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the sleep was not woken by the socket: the port slept with it out of its set")
	}
	bell.Disarm()
	for deadline := time.Now().Add(10 * time.Second); sink.n == before; {
		if time.Now().After(deadline) {
			t.Fatal("the packet that woke the context was not delivered")
		}
		dst.Poll(&sink, 64)
	}
	for i := 0; i < unwatchAfter+1; i++ {
		dst.Poll(&sink, 64)
	}
	if epollHolds(t, dst.epfd, c.fd) || epollHolds(t, ads[1].eng.epfd, c.fd) {
		t.Fatal("after the sleep and a run of polls the socket is still in an epoll set")
	}
}
