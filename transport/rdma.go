package transport

import (
	"fmt"
	"sync/atomic"
)

// RDMAKind is the operation of an RDMA descriptor.
type RDMAKind uint8

// RDMA operations.
const (
	// Get copies Len(Local) bytes at (Key, Off) of the remote context's
	// memory into Local.
	Get RDMAKind = 1
	// Put copies Local into the remote memory at (Key, Off).
	Put RDMAKind = 2
	// Atomic performs AOp on the Width-byte word at (Key, Off) and, if
	// Local is not nil (8 bytes, 8-aligned), stores the word's old value
	// there, zero-extended, in the host's byte order (SetResult).
	Atomic RDMAKind = 3
)

func (k RDMAKind) String() string {
	switch k {
	case Get:
		return "get"
	case Put:
		return "put"
	case Atomic:
		return "atomic"
	}
	return fmt.Sprintf("RDMAKind(%d)", uint8(k))
}

// RDMAOp is one descriptor of an RDMA FIFO.
type RDMAOp struct {
	Kind  RDMAKind
	Local []byte // the local buffer; the engine owns it until completion
	Key   Key    // region key at the remote context's rank
	Off   uint64 // offset in the remote region
	// Remote asks the engine to count a Put complete only once its data is
	// visible at the target, not as soon as Local may be reused.
	Remote bool
	// Atomic descriptors: the operation, the word's width (4 or 8), the
	// operand and, for AtomicCAS, the value compared with.
	AOp     AtomicOp
	Width   uint8
	Operand uint64
	Compare uint64

	err error // outcome, written by the engine before it counts the transfer
}

// RDMAQueue is an injection FIFO of RDMA descriptors: the AMI produces at the
// tail, the adapter's engine consumes from the head and increments the
// transfer counter after each descriptor, having recorded its outcome.
//
// Memory ordering: the producer fills ops[tail mod N] with plain stores and
// publishes it with an atomic store of tail; the engine loads tail before it
// reads a descriptor, records the outcome with a plain store, then stores head
// and increments xfer atomically. The producer reads the outcome only after it
// loaded an xfer value that counts the descriptor.
type RDMAQueue struct {
	tail atomic.Uint64
	_    [56]byte
	head atomic.Uint64
	xfer atomic.Uint64
	_    [48]byte

	ops  []RDMAOp
	mask uint64
	// Bell, if not nil, is the engine's doorbell: the AMI rings it after it
	// published descriptors.
	Bell *Doorbell
	// Work, if not nil, is set to 1 by every Publish, so that an engine that
	// serves many queues can tell at a glance whether any has work: it stores
	// 0 and then looks at every queue.
	Work *atomic.Uint32
}

// NewRDMAQueue returns an RDMA FIFO of n descriptors (a power of two).
func NewRDMAQueue(n int) *RDMAQueue {
	if n < 1 || n&(n-1) != 0 {
		panic("transport: RDMA queue size must be a power of two")
	}
	return &RDMAQueue{ops: make([]RDMAOp, n), mask: uint64(n - 1)}
}

// Slots returns the number of descriptors the FIFO holds.
func (q *RDMAQueue) Slots() int { return len(q.ops) }

// HeadCounter returns the engine's head position.
func (q *RDMAQueue) HeadCounter() *atomic.Uint64 { return &q.head }

// TransferCounter returns the engine's count of completed descriptors.
func (q *RDMAQueue) TransferCounter() *atomic.Uint64 { return &q.xfer }

// Slot returns the descriptor at position pos, for the producer to fill.
func (q *RDMAQueue) Slot(pos uint64) *RDMAOp {
	op := &q.ops[pos&q.mask]
	op.err = nil
	return op
}

// Publish makes every descriptor below tail visible to the engine.
func (q *RDMAQueue) Publish(tail uint64) {
	q.tail.Store(tail)
	if q.Work != nil {
		q.Work.Store(1)
	}
}

// Status returns the outcome the engine recorded for the descriptor at slot
// index i, and drops the descriptor's reference to its local buffer. The
// producer calls it once per completed descriptor.
func (q *RDMAQueue) Status(i uint64) error {
	op := &q.ops[i&q.mask]
	op.Local = nil
	return op.err
}

// Tail returns the producer's tail: the descriptors below it are
// published.
func (q *RDMAQueue) Tail() uint64 { return q.tail.Load() }

// Pending reports whether descriptors wait for the engine.
func (q *RDMAQueue) Pending() bool { return q.head.Load() != q.tail.Load() }

// Next returns the descriptor at the head for the engine, or nil if there is
// none. Only one goroutine may consume a queue.
func (q *RDMAQueue) Next() *RDMAOp {
	h := q.head.Load()
	if h == q.tail.Load() {
		return nil
	}
	return &q.ops[h&q.mask]
}

// At returns the descriptor at position pos, or nil when pos is not below the
// published tail. It is for an engine that keeps several descriptors in flight
// (a request sent for each, answers awaited): pos must not be below the head,
// and the descriptors still complete in order, through Done.
func (q *RDMAQueue) At(pos uint64) *RDMAOp {
	if pos >= q.tail.Load() {
		return nil
	}
	return &q.ops[pos&q.mask]
}

// Done records the outcome of the descriptor returned by Next, moves the head
// past it and counts the transfer complete.
func (q *RDMAQueue) Done(err error) {
	h := q.head.Load()
	q.ops[h&q.mask].err = err
	q.head.Store(h + 1)
	q.xfer.Add(1)
}
