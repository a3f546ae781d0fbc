package transport

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/order"
)

// Doorbell lets a consumer that found no work sleep until a producer has
// made some, without a producer paying more than one atomic load per
// notification while the consumer is awake.
//
// The consumer arms the doorbell, checks once more for work, and only then
// sleeps; a producer publishes its work and then rings. The store that arms
// is fenced and followed by order.Barrier, which makes every producer's
// earlier stores visible even when they were release stores without a
// fence; so either the consumer's check sees the work or the producer's
// ring (a load that follows its publishing store) sees the armed word.
//
// A doorbell either parks goroutines (in-process consumers) or, when its word
// lives in memory shared between processes, sleeps on a futex in that word and
// is woken by a futex wake from any process.
type Doorbell struct {
	word   *atomic.Uint32 // 1 while the consumer is armed or asleep
	own    atomic.Uint32
	ch     chan struct{}
	shared bool
	waiter Waiter // sleeps in the kernel on the sources of work, if not nil
	rings  atomic.Uint64
	sleeps atomic.Uint64 // calls of Sleep, counted on entry
}

// NewDoorbell returns a doorbell for consumers in this process.
func NewDoorbell() *Doorbell {
	d := &Doorbell{ch: make(chan struct{}, 1)}
	d.word = &d.own
	return d
}

// A Waiter is where a consumer in this process sleeps when the work it waits
// for comes from the kernel (sockets, say): Wait blocks the calling thread
// until one of its sources is ready, Wake is called, or timeout elapses, and
// reports whether it was woken before the timeout; Wake may be called from
// any goroutine, before or during a Wait, and makes that Wait (or the next)
// return at once.
type Waiter interface {
	Wait(timeout time.Duration) (woken bool)
	Wake()
}

// NewWaitingDoorbell returns a doorbell for a consumer in this process whose
// sleep is w.Wait: the consumer is woken by the sources w watches, without a
// goroutine of the adapter's taking them over and ringing; a ring is
// w.Wake.
func NewWaitingDoorbell(w Waiter) *Doorbell {
	d := &Doorbell{waiter: w}
	d.word = &d.own
	return d
}

// Waits reports whether the consumer sleeps in a Waiter (NewWaitingDoorbell)
// rather than waiting to be rung.
func (d *Doorbell) Waits() bool { return d.waiter != nil }

// NewSharedDoorbell returns a doorbell whose word lives at word, typically in
// a shared-memory segment, so that other processes can ring it with
// RingShared.
func NewSharedDoorbell(word *atomic.Uint32) *Doorbell {
	return &Doorbell{word: word, shared: true}
}

// Ring wakes the consumer if it is armed or asleep.
func (d *Doorbell) Ring() {
	if d.word.Load() != 0 {
		d.ring()
	}
}

// ring is Ring for an armed or sleeping consumer, apart so that Ring
// inlines: a producer rings after every message, mostly for a consumer
// that is awake.
func (d *Doorbell) ring() {
	if d.word.CompareAndSwap(1, 0) {
		d.rings.Add(1)
		if d.shared {
			futexWake(d.word)
			return
		}
		if d.waiter != nil {
			d.waiter.Wake()
			return
		}
		select {
		case d.ch <- struct{}{}:
		default:
		}
	}
}

// RingShared wakes a consumer in another process sleeping on word.
func RingShared(word *atomic.Uint32) {
	if word.Load() != 0 && word.CompareAndSwap(1, 0) {
		futexWake(word)
	}
}

// Rings returns how many times a ring woke (or pre-empted the sleep of) the
// consumer.
func (d *Doorbell) Rings() uint64 { return d.rings.Load() }

// Sleeping returns how many times the consumer has entered Sleep: with
// Armed, a test sees that its consumer is asleep (or at the door of its
// sleep, where a ring still wakes it) and rings it then, instead of hoping
// the consumer's timing takes the path.
func (d *Doorbell) Sleeping() uint64 { return d.sleeps.Load() }

// Arm announces that the consumer is about to check for work one last time
// and sleep.
//
// The store is followed by order.Barrier: a producer's descriptor store is
// a release store without a fence (package order), so without the barrier
// its load of this word could pass it, and the consumer's last check miss
// the descriptor while the producer misses the armed word.
func (d *Doorbell) Arm() {
	d.word.Store(1)
	order.Barrier()
}

// Armed reports whether the consumer has armed the doorbell and not yet been
// woken: it is about to sleep or asleep. An adapter whose engine runs partly
// on the consumer's goroutine uses it to hand its work to goroutines of its
// own before the consumer sleeps.
func (d *Doorbell) Armed() bool { return d.word.Load() != 0 }

// Disarm withdraws Arm: the consumer found work.
func (d *Doorbell) Disarm() { d.word.Store(0) }

// Sleep waits until the doorbell is rung, done is closed, or timeout elapses;
// t is a stopped or expired timer the caller owns and reuses. The consumer must
// have armed the doorbell and checked for work since. It reports whether
// the sleep ran out its time without a ring: on a consumer that waits for a
// peer which does send, each such sleep is a wake-up the handshake lost, or
// a peer that took longer than the bound.
func (d *Doorbell) Sleep(done <-chan struct{}, t *time.Timer, timeout time.Duration) (timedOut bool) {
	d.sleeps.Add(1)
	if d.shared {
		// A futex sleep cannot watch done; keep it short so the caller looks
		// at done often. With no done to watch, the caller's bound holds.
		if done != nil && timeout > time.Millisecond {
			timeout = time.Millisecond
		}
		start := time.Now()
		futexWait(d.word, 1, timeout)
		// A ring sets the word to 0; a signal can end the wait early.
		timedOut = d.word.Load() != 0 && time.Since(start) >= timeout
		d.word.Store(0)
		return timedOut
	}
	if d.waiter != nil {
		woken := d.waiter.Wait(timeout)
		// A ring clears the word (and wakes the waiter); a source that
		// became ready wakes it with the word still set.
		timedOut = !woken && d.word.Load() != 0
		d.word.Store(0)
		return timedOut
	}
	t.Reset(timeout)
	select {
	case <-d.ch:
	case <-done:
	case <-t.C:
		timedOut = true
	}
	t.Stop()
	// A ring that raced with the timeout may leave a token in ch; the next
	// Sleep then returns at once and its caller re-checks for work, which is
	// harmless.
	d.word.Store(0)
	return timedOut
}

func futexWait(addr *atomic.Uint32, val uint32, timeout time.Duration) {
	ts := unix.NsecToTimespec(int64(timeout))
	// FUTEX_WAIT without FUTEX_PRIVATE_FLAG, so that wakers in other
	// processes mapping the same memory reach us.
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), 0 /* FUTEX_WAIT */, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(addr *atomic.Uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), 1 /* FUTEX_WAKE */, 1<<30, 0, 0, 0)
}
