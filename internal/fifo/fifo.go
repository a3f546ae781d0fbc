// Package fifo is amigo's completion engine: the producer-side bookkeeping of
// an injection FIFO, after the method of completion processing with a pending
// callback list and a transfer counter.
//
// An injection FIFO has N slots. The producer (the AMI, on the goroutine that
// owns a Context) injects descriptors at the tail; an engine (a DMA engine, a
// peer process reading shared memory, a socket writer) consumes them from the
// head, asynchronously, and increments a monotonic transfer counter each time it
// has finished with a descriptor. A descriptor may span several slots.
//
// The Tracker keeps, for the producer:
//
//   - the pending callback list: N entries, one per FIFO slot. Injecting a
//     descriptor that carries a done callback lists the callback in the entry of
//     the descriptor's first slot and increments the pending callback counter.
//   - the pending callback counter: how many callbacks are listed.
//   - the transfer counter value seen at the previous completion check.
//
// Complete is the completion check. It stores a snapshot of the transfer counter
// before it looks at anything else. If the pending counter is zero, or the
// snapshot equals the value of the previous check, no transfer has completed for
// a listed callback and it returns at once. Otherwise it calls, in injection
// order, every listed callback whose descriptor is among the first snapshot
// descriptors injected, nulls its entry and decrements the pending counter. A
// callback is therefore never called before the engine counted its transfer
// complete, and callbacks are called in the order their instructions were
// injected. No sequence number travels with a descriptor and the engine writes
// no completion descriptor.
//
// A slot is free for injection only when the indices say so (the engine's head
// has passed it) and its entry in the pending callback list is null. An engine
// may have finished with a slot whose callback has not been called yet; that
// slot stays busy until the next completion check. When there is no room,
// Space says so and the caller keeps its instruction queued: nothing in this
// package ever waits.
//
// A Tracker belongs to one goroutine. The counters it reads are written by the
// engine with atomic operations; see package ring for their memory ordering.
package fifo

import (
	"sync/atomic"
)

// Done is a callback listed in the pending callback list. err is nil when the
// transfer completed, or the reason it did not.
type Done interface {
	Done(err error)
}

// Func adapts a function to Done. The conversion does not allocate.
type Func func(err error)

// Done calls f(err).
func (f Func) Done(err error) { f(err) }

type entry struct {
	cb  Done
	ord uint64 // ordinal of the descriptor among all injected descriptors
}

// Tracker is the completion engine of one injection FIFO. It is padded to
// whole cache lines at both ends, because its owner writes it on every
// injection and another goroutine's hot object may be allocated next to it.
type Tracker struct {
	_ [64]byte

	n    uint64
	mask uint64

	head *atomic.Uint64 // engine: next slot position it will read
	xfer *atomic.Uint64 // engine: descriptors completed

	tail      uint64 // next slot position to inject at
	headCache uint64 // last value loaded from head

	list    []entry  // pending callback list, parallel to the FIFO slots
	order   []uint64 // slot positions of listed callbacks, in injection order
	ohead   uint64
	otail   uint64
	pending int

	injected uint64 // descriptors injected
	last     uint64 // transfer counter at the previous completion check

	status func(slot uint64) error

	_ [64]byte
}

// New returns the tracker of an injection FIFO of n slots (a power of two)
// whose engine publishes its head position and transfer counter in head and
// xfer. tail is the position of the first injection (the FIFO's current tail
// when the producer attaches). status, if not nil, returns the outcome the
// engine recorded for the descriptor at a slot position; it is called only for
// completed descriptors that have a listed callback.
func New(n int, head, xfer *atomic.Uint64, status func(slot uint64) error) *Tracker {
	if n < 1 || n&(n-1) != 0 {
		panic("fifo: slot count must be a power of two")
	}
	t := &Tracker{
		n:      uint64(n),
		mask:   uint64(n - 1),
		head:   head,
		xfer:   xfer,
		list:   make([]entry, n),
		order:  make([]uint64, n),
		status: status,
	}
	// Every page of the lists is written now, not on the first lap of
	// the FIFO: a large allocation's fresh pages are mapped at their
	// first access, and InjectOne reads the entry of every slot it
	// takes. Untouched, the first lap of 8-byte messages of a 2-rank
	// ping-pong over shared memory took 48 page faults on each rank.
	clear(t.list)
	clear(t.order)
	t.tail = head.Load()
	t.headCache = t.tail
	t.injected = xfer.Load()
	t.last = t.injected
	return t
}

// Slots returns N.
func (t *Tracker) Slots() int { return int(t.n) }

// Tail returns the position at which the next descriptor will be injected.
func (t *Tracker) Tail() uint64 { return t.tail }

// Pending returns the pending callback counter.
func (t *Tracker) Pending() int { return t.pending }

// Outstanding returns the number of injected descriptors the engine has not
// yet counted complete.
func (t *Tracker) Outstanding() uint64 { return t.injected - t.xfer.Load() }

// Injected returns the number of descriptors injected so far: the transfer
// counter reaches it once the engine completed them all.
func (t *Tracker) Injected() uint64 { return t.injected }

// Transferred returns the engine's transfer counter: the number of
// descriptors it completed.
func (t *Tracker) Transferred() uint64 { return t.xfer.Load() }

// Space reports whether k slots starting at the tail are free: the engine's
// head has passed them and none of them holds a listed callback.
func (t *Tracker) Space(k int) bool {
	if uint64(k) > t.n {
		return false
	}
	if t.tail+uint64(k)-t.headCache > t.n {
		t.headCache = t.head.Load()
		if t.tail+uint64(k)-t.headCache > t.n {
			return false
		}
	}
	// Listed callbacks lie at positions in [tail-n, tail), in injection
	// order: one of them is in the k slots from the tail (a lap on) when
	// the oldest is.
	return t.pending == 0 || t.order[t.ohead&t.mask]+t.n >= t.tail+uint64(k)
}

// Inject records a descriptor of k slots that the caller wrote at Tail(), and
// lists cb (which may be nil) in the entry of its first slot. The caller must
// have checked Space(k) and publishes the new tail to the engine itself.
func (t *Tracker) Inject(k int, cb Done) {
	if cb != nil {
		i := t.tail & t.mask
		t.list[i] = entry{cb: cb, ord: t.injected}
		t.order[t.otail&t.mask] = t.tail
		t.otail++
		t.pending++
	}
	t.tail += uint64(k)
	t.injected++
}

// InjectOne is Space(1) and Inject(1, nil) in one, for the descriptor of
// one slot with no callback that most small messages are: if the slot at
// the tail is free, it records the descriptor there and returns the
// slot's position, which the caller fills and then publishes (the new
// Tail); else it returns false and records nothing.
func (t *Tracker) InjectOne() (pos uint64, ok bool) {
	pos = t.tail
	if pos+1-t.headCache > t.n {
		t.headCache = t.head.Load()
		if pos+1-t.headCache > t.n {
			return 0, false
		}
	}
	if t.list[pos&t.mask].cb != nil {
		return 0, false
	}
	t.tail = pos + 1
	t.injected++
	return pos, true
}

// InjectOutside counts a descriptor the engine took without a slot of the
// FIFO (a packet an adapter sent at once, transport.Link.SendNow): it has
// no callback, and the engine adds it to the transfer counter once it
// completed, in order with the descriptors of the FIFO.
func (t *Tracker) InjectOutside() { t.injected++ }

// Complete is the completion check described in the package comment. It
// returns the number of callbacks called.
func (t *Tracker) Complete() int {
	snap := t.xfer.Load()
	if t.pending == 0 || snap == t.last {
		t.last = snap
		return 0
	}
	t.last = snap
	called := 0
	for t.pending > 0 {
		i := t.order[t.ohead&t.mask] & t.mask
		e := &t.list[i]
		if e.ord >= snap {
			break
		}
		cb := e.cb
		var err error
		if t.status != nil {
			err = t.status(i)
		}
		e.cb = nil
		t.ohead++
		t.pending--
		called++
		cb.Done(err)
	}
	return called
}

// Fail calls every listed callback with err, in injection order, and empties
// the pending callback list. It is used when the engine can no longer complete
// anything (the peer is gone). The FIFO must not be used afterwards.
func (t *Tracker) Fail(err error) int {
	called := 0
	for t.pending > 0 {
		i := t.order[t.ohead&t.mask] & t.mask
		e := &t.list[i]
		cb := e.cb
		e.cb = nil
		t.ohead++
		t.pending--
		called++
		cb.Done(err)
	}
	return called
}
