package transport

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"unsafe"
)

// AtomicOp is the operation of an Atomic RDMA descriptor. Every operation
// returns the word's old value; an initiator that did not ask for it (a
// descriptor with no Local) drops it.
type AtomicOp uint8

// Atomic operations. The integer operations work on 4- or 8-byte words
// and do not depend on signedness (two's complement); AtomicFAdd adds
// float64 values and works on 8-byte words only.
const (
	AtomicAdd  AtomicOp = iota + 1 // word += Operand
	AtomicAnd                      // word &= Operand
	AtomicOr                       // word |= Operand
	AtomicXor                      // word ^= Operand
	AtomicSwap                     // word = Operand
	AtomicCAS                      // if word == Compare { word = Operand }
	AtomicFAdd                     // float64: word += Operand
	atomicOps                      // the first value that is no operation
)

var atomicNames = [...]string{"", "add", "and", "or", "xor", "swap", "cas", "fadd"}

func (o AtomicOp) String() string {
	if o > 0 && o < atomicOps {
		return atomicNames[o]
	}
	return fmt.Sprintf("AtomicOp(%d)", uint8(o))
}

// Errors of an atomic operation's arguments.
var (
	// ErrMisaligned reports an atomic operation on a word that is not
	// aligned to its width, in the region or in memory.
	ErrMisaligned = errors.New("atomic operation on a misaligned word")
	// ErrBadAtomic reports an atomic operation or width that does not
	// exist (width 4 or 8; AtomicFAdd is 8 bytes only).
	ErrBadAtomic = errors.New("no such atomic operation")
)

// CheckAtomic reports whether op on a word of width bytes exists.
func CheckAtomic(op AtomicOp, width int) error {
	if op == 0 || op >= atomicOps || (width != 4 && width != 8) || (op == AtomicFAdd && width != 8) {
		return fmt.Errorf("%w: %v on %d bytes", ErrBadAtomic, op, width)
	}
	return nil
}

// ApplyAtomic performs op on the word at the start of mem (width bytes),
// with the processor's atomic instructions, and returns the word's old
// value, zero-extended. Every amigo adapter executes remote atomics through
// it on the word's real memory (the owner's, or a shared segment's mapping
// of it), so that atomics of any origin on one word are atomic with respect
// to each other. They are not atomic with respect to plain stores into the
// word: a Put over it, or the owner's own writes.
func ApplyAtomic(mem []byte, op AtomicOp, width int, operand, compare uint64) (uint64, error) {
	if err := CheckAtomic(op, width); err != nil {
		return 0, err
	}
	return ApplyChecked(mem, op, width, operand, compare)
}

// ApplyChecked is ApplyAtomic for an operation and width CheckAtomic
// accepted.
func ApplyChecked(mem []byte, op AtomicOp, width int, operand, compare uint64) (uint64, error) {
	if len(mem) < width {
		return 0, ErrBounds
	}
	p := unsafe.Pointer(unsafe.SliceData(mem))
	if uintptr(p)&uintptr(width-1) != 0 {
		return 0, ErrMisaligned
	}
	if width == 4 {
		w := (*uint32)(p)
		v := uint32(operand)
		switch op {
		case AtomicAdd:
			return uint64(atomic.AddUint32(w, v) - v), nil
		case AtomicAnd:
			return uint64(atomic.AndUint32(w, v)), nil
		case AtomicOr:
			return uint64(atomic.OrUint32(w, v)), nil
		case AtomicXor:
			for {
				old := atomic.LoadUint32(w)
				if atomic.CompareAndSwapUint32(w, old, old^v) {
					return uint64(old), nil
				}
			}
		case AtomicSwap:
			return uint64(atomic.SwapUint32(w, v)), nil
		case AtomicCAS:
			c := uint32(compare)
			for {
				old := atomic.LoadUint32(w)
				if old != c {
					return uint64(old), nil
				}
				if atomic.CompareAndSwapUint32(w, c, v) {
					return uint64(c), nil
				}
			}
		}
		return 0, ErrBadAtomic
	}
	w := (*uint64)(p)
	switch op {
	case AtomicAdd:
		return atomic.AddUint64(w, operand) - operand, nil
	case AtomicAnd:
		return atomic.AndUint64(w, operand), nil
	case AtomicOr:
		return atomic.OrUint64(w, operand), nil
	case AtomicXor:
		for {
			old := atomic.LoadUint64(w)
			if atomic.CompareAndSwapUint64(w, old, old^operand) {
				return old, nil
			}
		}
	case AtomicSwap:
		return atomic.SwapUint64(w, operand), nil
	case AtomicCAS:
		for {
			old := atomic.LoadUint64(w)
			if old != compare {
				return old, nil
			}
			if atomic.CompareAndSwapUint64(w, compare, operand) {
				return compare, nil
			}
		}
	case AtomicFAdd:
		d := math.Float64frombits(operand)
		for {
			old := atomic.LoadUint64(w)
			if atomic.CompareAndSwapUint64(w, old, math.Float64bits(math.Float64frombits(old)+d)) {
				return old, nil
			}
		}
	}
	return 0, ErrBadAtomic
}

// AtomicArgs are an atomic operation's arguments (Link.Atomic).
type AtomicArgs struct {
	Key              Key
	Off              uint64
	Op               AtomicOp
	Width            uint8
	Operand, Compare uint64
}

// SetResult stores the old value an engine read for an Atomic descriptor
// into its result word (Local), if the initiator asked for it.
func (op *RDMAOp) SetResult(old uint64) {
	if len(op.Local) == 8 {
		*(*uint64)(unsafe.Pointer(unsafe.SliceData(op.Local))) = old
	}
}
