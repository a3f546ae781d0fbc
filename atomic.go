package amigo

import (
	"fmt"
	"unsafe"

	"github.com/amigo-hpc/amigo/transport"
)

// AtomicOp is a remote atomic operation (PAMI_Rmw, ucp_atomic_op_nbx,
// gex_AD_Op*). Every operation reads the word's old value; a call with a
// Result gets it back (the fetching form), one without does not wait for
// it to travel.
type AtomicOp = transport.AtomicOp

// Remote atomic operations.
const (
	AtomicAdd  = transport.AtomicAdd  // word += Operand (integers and Float64)
	AtomicAnd  = transport.AtomicAnd  // word &= Operand (integers)
	AtomicOr   = transport.AtomicOr   // word |= Operand (integers)
	AtomicXor  = transport.AtomicXor  // word ^= Operand (integers)
	AtomicSwap = transport.AtomicSwap // word = Operand
	AtomicCAS  = transport.AtomicCAS  // if word == Compare { word = Operand }
)

// AtomicType is the type of the word a remote atomic works on.
type AtomicType uint8

// Word types. Int32 and Uint32 words are 4 bytes, the others 8; a word's
// offset in its region must be a multiple of its size.
const (
	Int32 AtomicType = iota + 1
	Uint32
	Int64
	Uint64
	Float64
)

func (t AtomicType) String() string {
	switch t {
	case Int32:
		return "int32"
	case Uint32:
		return "uint32"
	case Int64:
		return "int64"
	case Uint64:
		return "uint64"
	case Float64:
		return "float64"
	}
	return fmt.Sprintf("AtomicType(%d)", uint8(t))
}

// Size is the size of a word of type t in bytes, or 0.
func (t AtomicType) Size() int {
	switch t {
	case Int32, Uint32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// AtomicParams describes a remote atomic operation.
type AtomicParams struct {
	Dest Endpoint
	// Remote and Offset address the word: a region the peer registered
	// with PermAtomic (RegisterMemory and AllocMemory grant it), and a
	// byte offset in it, a multiple of the word's size.
	Remote Key
	Offset uint64
	Op     AtomicOp
	Type   AtomicType
	// Operand and Compare are the bits of the operation's values: uint64(v)
	// of an integer (only the low 32 bits count for Int32 and Uint32),
	// math.Float64bits(v) of a Float64. Compare is for AtomicCAS only.
	Operand, Compare uint64
	// Result, if not nil, receives the word's old value, zero-extended
	// (uint64(uint32(old)) for a 4-byte word), before Done is called. It
	// belongs to amigo until then.
	Result *uint64
	// Done, if not nil, is called once the operation was performed at the
	// target (and Result holds the old value), or with the reason it was
	// not.
	Done func(error)
}

// Atomic posts the remote atomic operation p describes. It is atomic with
// respect to every other amigo atomic on the same word, from any rank and
// over any adapter: all of them end as the processor's atomic instruction on
// the word's memory (the owner's, or a shared segment's mapping of it). It is
// not atomic with respect to a Put that covers the word, nor to the owner's
// own plain loads and stores: the owner reads such a word with sync/atomic,
// or after a barrier that follows the atomics' completion.
//
// How it travels: over shared memory to a region of AllocMemory, the
// initiator performs it on its mapping of the owner's segment, at once, with
// no message; to Go memory (RegisterMemory), the owner's engine or progress
// performs it on request. Over TCP the owner performs it when it reads the
// request, without the program's help, as it serves Get and Put. In one
// process, the initiator performs it.
//
// Atomics to one peer complete in the order they were posted, and in order
// with Puts and Gets to that peer as Fence orders them. An unknown
// operation or type, an operation the type does not have (And, Or, Xor on
// Float64), or a misaligned offset is refused here, before anything is
// sent; an unknown key, a word outside the region, or a region registered
// without PermAtomic is refused by the owner (or by its mirror, over shared
// memory) with an *AccessError to Done, and nothing is touched.
func (c *Context) Atomic(p *AtomicParams) error {
	_, err := c.atomic(p, false, false)
	return err
}

// AtomicNow is Atomic for a caller that waits for the result at once: when
// the operation can be performed right away (over shared memory, a word of
// a peer's shared allocation, with nothing posted earlier to that peer
// still in flight) it performs it on the calling goroutine and returns done
// true, with the operation's outcome as err, and p.Done is not called;
// otherwise it posts p as Atomic does and returns false. It is the
// immediate completion of ucp_atomic_op_nbx (UCS_OK) and gex_AD_OpNB (no
// event).
func (c *Context) AtomicNow(p *AtomicParams) (done bool, err error) {
	return c.atomic(p, true, false)
}

// atomic posts p, or performs it at once where atomicDirect can; held
// says the calling goroutine owns the context (Held).
func (c *Context) atomic(p *AtomicParams, now, held bool) (bool, error) {
	idx, err := c.peerIndex(p.Dest)
	if err != nil {
		return false, err
	}
	op, width, err := atomicOf(p.Op, p.Type)
	if err != nil {
		return false, err
	}
	if p.Offset&uint64(width-1) != 0 {
		return false, &AccessError{Key: transport.Key(p.Remote), Off: p.Offset, Len: uint64(width), Err: ErrMisaligned}
	}
	if ok, err := c.atomicDirect(idx, op, width, p, now, held); ok {
		return now, err
	}
	var res []byte
	if p.Result != nil {
		res = unsafe.Slice((*byte)(unsafe.Pointer(p.Result)), 8)
	}
	in, pos, err := c.claim()
	if err != nil {
		return false, err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instRDMA
	in.rdma = transport.Atomic
	in.vec, in.lay = nil, Strided{} // a reused slot's may be a strided Put's
	in.dest = idx
	in.data = res
	in.key = p.Remote
	in.off = p.Offset
	in.aop, in.width = op, uint8(width)
	in.arg, in.cmp = p.Operand, p.Compare
	in.done = p.Done
	c.post(in, pos)
	return false, nil
}

// atomicDirect performs an atomic on the posting goroutine when the
// adapter can at once (Link.Atomic: over shared memory, a word of a shared
// allocation) and nothing posted earlier to the peer is still in flight, so
// that it overtakes nothing; its done callback runs in the next Advance, as
// every callback does (Atomic), or not at all (AtomicNow). It reports
// whether it did, and the outcome. A holder (held) owns the context
// already; any other goroutine takes it for the operation (direct).
func (c *Context) atomicDirect(idx int32, op transport.AtomicOp, width int, p *AtomicParams, now, held bool) (ok bool, err error) {
	var pr *peer
	if held {
		pr = c.owned(idx)
	} else {
		pr = c.direct(idx)
	}
	if pr == nil {
		return false, nil
	}
	if pr.link.Atomic != nil && pr.rdma.Outstanding() == 0 && pr.rdma.Pending() == 0 && pr.issued == 0 {
		var old uint64
		old, ok, err = pr.link.Atomic(transport.AtomicArgs{Key: transport.Key(p.Remote), Off: p.Offset, Op: op, Width: uint8(width), Operand: p.Operand, Compare: p.Compare})
		if ok {
			if err == nil && p.Result != nil {
				*p.Result = old
			}
			c.stats.Atomics++
			if !now {
				// Appended while the context is held: the list is the
				// owner's.
				if p.Done != nil {
					c.later = append(c.later, laterDone{fn: p.Done, err: err})
				}
				err = nil
			}
		}
	}
	if !held {
		c.leave()
	}
	return ok, err
}

// atomicOf maps an operation on a type to the transport's operation and
// the word's width.
func atomicOf(op AtomicOp, t AtomicType) (transport.AtomicOp, int, error) {
	if int(op) < len(atomicTable) && int(t) < len(atomicTable[0]) {
		if w := atomicTable[op][t]; w != 0 {
			if t == Float64 && op == AtomicAdd {
				return transport.AtomicFAdd, 8, nil
			}
			return op, int(w), nil
		}
	}
	if t.Size() == 0 {
		return 0, 0, fmt.Errorf("amigo: atomic on %v: %w", t, ErrBadAtomic)
	}
	return 0, 0, fmt.Errorf("amigo: atomic %v on %v: %w", op, t, ErrBadAtomic)
}

// atomicTable holds, by operation and type, the width of the word when the
// type has the operation, or 0.
var atomicTable = func() (tab [AtomicCAS + 1][Float64 + 1]uint8) {
	for op := AtomicAdd; op <= AtomicCAS; op++ {
		for t := Int32; t <= Float64; t++ {
			if t == Float64 && op != AtomicAdd && op != AtomicSwap && op != AtomicCAS {
				continue
			}
			if transport.CheckAtomic(op, t.Size()) == nil {
				tab[op][t] = uint8(t.Size())
			}
		}
	}
	return tab
}()

// FetchAdd adds delta to the int64 word at (remote, off) of ep's memory and
// stores the word's old value in *old (if old is not nil) before done.
func (c *Context) FetchAdd(ep Endpoint, remote Key, off uint64, delta int64, old *int64, done func(error)) error {
	return c.Atomic(&AtomicParams{Dest: ep, Remote: remote, Offset: off, Op: AtomicAdd, Type: Int64,
		Operand: uint64(delta), Result: (*uint64)(unsafe.Pointer(old)), Done: done})
}

// CompareAndSwap stores swap into the uint64 word at (remote, off) of ep's
// memory if it holds compare, and stores the word's old value in *old (if
// old is not nil) before done: the swap happened if *old == compare.
func (c *Context) CompareAndSwap(ep Endpoint, remote Key, off uint64, compare, swap uint64, old *uint64, done func(error)) error {
	return c.Atomic(&AtomicParams{Dest: ep, Remote: remote, Offset: off, Op: AtomicCAS, Type: Uint64,
		Operand: swap, Compare: compare, Result: old, Done: done})
}
