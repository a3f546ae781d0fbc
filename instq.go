package amigo

import (
	"sync"
	"sync/atomic"

	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// ImmediateMax is the largest header plus data of a SendImmediate.
const ImmediateMax = 192

type instKind uint8

const (
	instSend   instKind = iota + 1 // header and data by reference
	instImm                        // header and data copied into imm
	instRDMA                       // Put, Get, Rput, Rget
	instAccept                     // name a buffer for a deferred message
	instReject                     // decline a deferred message
	instCall                       // run fn on the owner goroutine
	instMcast                      // start a multicast
	instFence                      // hold the peer's later instructions until its earlier ones complete
	instCtl                        // internal: a control packet (ACK, STOP, CTS, FIN)
	instRaw                        // internal: an encoded packet in data
	instMore                       // internal: inject more pieces of op
)

// inst is a posted instruction. Posting copies it into the instruction queue;
// Advance takes it out and injects it, or keeps it queued at its peer.
type inst struct {
	kind   instKind
	ctl    wire.Kind
	rdma   transport.RDMAKind
	disp   uint16
	hlen   uint16 // instImm: header bytes in imm
	dlen   uint16 // instImm: data bytes in imm
	status uint32
	dest   int32 // peer index
	hdr    []byte
	data   []byte
	done   func(error)
	rdone  func(error)
	key    Key
	off    uint64
	op     uint64
	aop    transport.AtomicOp // instRDMA of an atomic: the operation
	width  uint8              // and the word's width
	arg    uint64             // operand
	cmp    uint64             // compared value
	vec    [][]byte           // instRDMA of PutV, GetV: the local buffers
	lay    Strided            // instRDMA of PutStrided, GetStrided (Block > 0)
	fn     func(*Context)
	mc     *mcState
	imm    [ImmediateMax]byte
}

// clear drops the references an instruction holds, so that a reused slot
// does not keep buffers or callbacks alive.
func (in *inst) clear() {
	in.hdr, in.data, in.done, in.rdone, in.fn, in.mc, in.vec = nil, nil, nil, nil, nil, nil, nil
}

// instQueue is a bounded lock-free multi-producer, single-consumer queue of
// instructions, after Vyukov's bounded queue.
//
// Memory ordering: each slot has a sequence number. A producer claims position
// pos by a CAS of enq from pos to pos+1, which it may try only after it loaded
// the slot's seq equal to pos (the slot is free); it then writes the
// instruction with plain stores and publishes it by storing seq = pos+1. The
// consumer reads the slot at deq only after it loaded seq == deq+1, and frees
// it by storing seq = deq+N once it copied or used the instruction.
//
// When the queue is full a producer appends to an overflow list under a
// mutex and raises a flag; while the flag is up every producer appends there,
// so one goroutine's instructions keep their order. The consumer takes the
// overflow list only after it emptied the slots, and lowers the flag under the
// same mutex.
type instQueue struct {
	enq atomic.Uint64
	_   [56]byte
	deq uint64
	_   [56]byte

	slots []instSlot
	mask  uint64

	overflowing atomic.Bool
	mu          sync.Mutex
	overflow    []inst
	spare       []inst
}

type instSlot struct {
	seq atomic.Uint64
	in  inst
}

func newInstQueue(n int) *instQueue {
	q := &instQueue{slots: make([]instSlot, n), mask: uint64(n - 1)}
	for i := range q.slots {
		q.slots[i].seq.Store(uint64(i))
	}
	return q
}

// claim reserves a slot for an instruction and returns it with its position,
// or nil when the queue is full or overflowing.
func (q *instQueue) claim() (*inst, uint64) {
	if q.overflowing.Load() {
		return nil, 0
	}
	pos := q.enq.Load()
	for {
		s := &q.slots[pos&q.mask]
		seq := s.seq.Load()
		switch {
		case seq == pos:
			if q.enq.CompareAndSwap(pos, pos+1) {
				return &s.in, pos
			}
			pos = q.enq.Load()
		case seq < pos:
			return nil, 0
		default:
			pos = q.enq.Load()
		}
	}
}

// commit publishes the instruction claimed at pos.
func (q *instQueue) commit(pos uint64) {
	q.slots[pos&q.mask].seq.Store(pos + 1)
}

// push posts a copy of in on the overflow path.
func (q *instQueue) pushOverflow(in *inst) {
	q.mu.Lock()
	q.overflow = append(q.overflow, *in)
	q.overflowing.Store(true)
	q.mu.Unlock()
}

// peek returns the next instruction, or nil.
func (q *instQueue) peek() *inst {
	s := &q.slots[q.deq&q.mask]
	if s.seq.Load() != q.deq+1 {
		return nil
	}
	return &s.in
}

// pop frees the slot of the instruction returned by peek.
func (q *instQueue) pop() {
	s := &q.slots[q.deq&q.mask]
	s.in.clear()
	// A release store: the slot's reads and clearing come before it, and
	// no fence waits here for a producer's core (package order).
	order.Store64(&s.seq, q.deq+q.mask+1)
	q.deq++
}

// takeOverflow returns the overflow list, if any, and lowers the flag, but
// only once every claimed slot was read: slot instructions are older than
// the overflow list's. The check is made under the mutex, with the flag up,
// when no producer can claim a slot any more: checked before taking the
// mutex, a producer could fill the slots and raise the flag in between, and
// its overflowed instructions would overtake those slots. The caller gives
// the slice back with returnOverflow once done with it.
func (q *instQueue) takeOverflow() []inst {
	if !q.overflowing.Load() {
		return nil
	}
	q.mu.Lock()
	if q.enq.Load() != q.deq {
		q.mu.Unlock()
		return nil
	}
	list := q.overflow
	q.overflow = q.spare[:0]
	q.spare = nil
	q.overflowing.Store(false)
	q.mu.Unlock()
	return list
}

func (q *instQueue) returnOverflow(list []inst) {
	for i := range list {
		list[i].clear()
	}
	q.mu.Lock()
	if q.spare == nil {
		q.spare = list[:0]
	}
	q.mu.Unlock()
}

// nonEmpty reports whether instructions wait.
func (q *instQueue) nonEmpty() bool {
	return q.slots[q.deq&q.mask].seq.Load() == q.deq+1 || q.overflowing.Load()
}

// instRing is a growable FIFO of instructions a peer keeps while its
// injection FIFO is full. It belongs to the owner goroutine.
type instRing struct {
	buf  []inst
	head int
	n    int
}

func (r *instRing) len() int { return r.n }

func (r *instRing) push(in *inst) {
	if r.n == len(r.buf) {
		// A window of 64 messages behind a full FIFO fits the first
		// buffer.
		size := 2 * len(r.buf)
		if size == 0 {
			size = 64
		}
		nb := make([]inst, size)
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = *in
	r.n++
}

func (r *instRing) front() *inst { return &r.buf[r.head] }

func (r *instRing) popFront() {
	r.buf[r.head].clear()
	r.head = (r.head + 1) % len(r.buf)
	r.n--
}
