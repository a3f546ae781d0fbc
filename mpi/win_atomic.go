package mpi

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo"
)

// Remote atomics and the accumulates the owner applies plainly. An origin
// that updates a target's window elements with remote atomics says so
// first, once per epoch: it adds one to the users word of the target's
// control region (useAtomics), and takes it off again when the epoch ends
// and its atomics are complete (dropAtomics). While that word is zero, the
// target's layer applies a many-element accumulate with plain loads and
// stores (applyLayout), after claiming the word with bulkBit; an origin
// whose add finds the bit set waits until the owner clears it, which it
// does when that one update is done, without anyone's help. So the plain
// update never meets a remote atomic, and a stream of FetchAndOps pays
// nothing per operation.
const (
	ctlUsersOff = 8
	bulkBit     = 1 << 62
)

// usersWord is this rank's users word.
func (w *Win) usersWord() *uint64 {
	return (*uint64)(unsafe.Pointer(&w.ctl.Bytes()[ctlUsersOff]))
}

// useAtomicsTimeout bounds the wait for an owner's plain update: it needs
// nobody's help, so only a lost peer makes it long.
const useAtomicsTimeout = time.Minute

// userState is whether this rank counts in a target's users word.
type userState uint8

const (
	notUser     userState = iota
	registering           // a goroutine of this rank is adding it
	user
)

// useAtomics registers this rank as a user of remote atomics on target's
// window for this epoch, if it is not yet; the caller holds the engine's
// lock. Another goroutine's registration in progress is waited for: its
// atomics may not start before it is done.
func (w *Win) useAtomics(target int) error {
	if w.atomUsers[target] == user {
		return nil // the common case: no deadline to make
	}
	ctx, cancel := context.WithTimeout(context.Background(), useAtomicsTimeout)
	defer cancel()
	if w.atomUsers[target] == registering {
		if err := w.comm.e.wait(ctx, func() bool { return w.atomUsers[target] != registering }); err != nil {
			return errorf("mpi: accumulate on rank %d: %w", target, err)
		}
	}
	if w.atomUsers[target] == user {
		return nil
	}
	w.atomUsers[target] = registering
	old, err := w.ctlOp(ctx, target, ctlUsersOff, amigo.AtomicAdd, 1, 0)
	for err == nil && old&bulkBit != 0 {
		old, err = w.ctlOp(ctx, target, ctlUsersOff, amigo.AtomicOr, 0, 0)
	}
	w.comm.e.events++ // wakes the goroutines waiting above
	if err != nil {
		// Counted or not, the word cannot be reached: the target
		// failed, and its count no longer matters.
		w.atomUsers[target] = notUser
		return errorf("mpi: accumulate on rank %d: %w", target, err)
	}
	w.atomUsers[target] = user
	return nil
}

// dropAtomics ends this rank's use of remote atomics on target's window,
// once they are complete; the caller holds the engine's lock.
func (w *Win) dropAtomics(ctx context.Context, target int) error {
	w.bypass[target] = false
	rerr := w.dropRescueUser(ctx, target)
	if w.atomUsers[target] != user {
		return rerr
	}
	w.atomUsers[target] = notUser
	if _, err := w.ctlOp(ctx, target, ctlUsersOff, amigo.AtomicAdd, ^uint64(0), 0); err != nil {
		return errorf("mpi: ending atomics on rank %d: %w", target, err)
	}
	return rerr
}

// dropAllAtomics is dropAtomics for every target.
func (w *Win) dropAllAtomics(ctx context.Context) error {
	var err error
	for r := range w.atomUsers {
		if e := w.dropAtomics(ctx, r); err == nil {
			err = e
		}
	}
	return err
}

// Put copies origin into rank target's window at displacement disp of w
// (MPI_Put on elements of T).
func Put[T Numeric](w *Win, origin []T, target, disp int) error {
	return w.Put(Bytes(origin), target, disp)
}

// Get reads len(origin) elements of rank target's window at displacement
// disp into origin (MPI_Get on elements of T).
func Get[T Numeric](w *Win, origin []T, target, disp int) error {
	return w.Get(Bytes(origin), target, disp)
}

// Accumulate combines origin into rank target's window at displacement
// disp, element by element, with op (MPI_Accumulate): target[i] = origin[i]
// op target[i], or origin[i] with Replace. Each element's update is atomic
// with every other accumulate and atomic on it, from any rank.
func Accumulate[T Numeric](w *Win, origin []T, target, disp int, op Op) error {
	return accumulate(w, kindOf[T](), Bytes(origin), nil, nil, target, disp, op)
}

// GetAccumulate is Accumulate that also fetches each element's value
// before the update into result (MPI_Get_accumulate); with NoOp it only
// fetches, atomically.
func GetAccumulate[T Numeric](w *Win, origin, result []T, target, disp int, op Op) error {
	if len(result) != len(origin) && op.code != opNoOp {
		return fmt.Errorf("%w: GetAccumulate of %d elements into a result of %d", ErrCount, len(origin), len(result))
	}
	if op.code == opNoOp && len(origin) == 0 {
		origin = result
	}
	return accumulate(w, kindOf[T](), Bytes(origin), Bytes(result), nil, target, disp, op)
}

// FetchAndOp is GetAccumulate on one element (MPI_Fetch_and_op): *result
// receives the element's value before target[disp] = origin op target[disp].
func FetchAndOp[T Numeric](w *Win, origin T, result *T, target, disp int, op Op) error {
	if result == nil {
		return fmt.Errorf("%w: FetchAndOp without a result", ErrCount)
	}
	return accumulateOne(w, kindOf[T](), elemBytes(origin), [16]byte{}, Bytes(unsafe.Slice(result, 1)), target, disp, op)
}

// CompareAndSwap stores origin into target[disp] if it equals compare, and
// fetches its previous value into *result (MPI_Compare_and_swap), atomically.
func CompareAndSwap[T Numeric](w *Win, origin, compare T, result *T, target, disp int) error {
	if result == nil {
		return fmt.Errorf("%w: CompareAndSwap without a result", ErrCount)
	}
	return accumulateOne(w, kindOf[T](), elemBytes(origin), elemBytes(compare), Bytes(unsafe.Slice(result, 1)), target, disp, Op{code: opCAS, name: "CompareAndSwap"})
}

// elemBytes returns the bytes of one element.
func elemBytes[T Numeric](v T) (b [16]byte) {
	copy(b[:], Bytes(unsafe.Slice(&v, 1)))
	return b
}

// accumulateOne is accumulate of the one element whose bytes are origin
// (and cmp, for CompareAndSwap), taken by value so that the caller's
// element needs no memory of its own: the window's scratch holds them
// while the call issues the update (a message that carries it copies
// them, accMsg).
func accumulateOne(w *Win, k kind, origin, cmp [16]byte, result []byte, target, disp int, op Op) error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	w.comm.e.lock()
	defer w.comm.e.unlock()
	es := k.size()
	if es == 0 {
		es = 1 // refused by accumulateLayout, as an invalid kind
	}
	w.one[0], w.one[1] = origin, cmp
	var c []byte
	if op.code == opCAS {
		c = w.one[1][:es]
	}
	_, err := w.accumulate(k, w.one[0][:es], result, c, target, disp, op, nil)
	return err
}

// opCAS is CompareAndSwap's operation inside accumulate.
const opCAS opCode = opNoOp + 1

// accumulate updates the elements at displacement disp of target's
// window with origin's by op. cmp is CompareAndSwap's comparand (one
// element), result (if not nil) receives the old elements. One element
// (and every element of a user op, which only this process can compute)
// is one remote atomic, or a loop of them; more than one travel as one
// message the owner applies (win_am.go), or are applied at once when the
// target is this rank and nothing else is in flight.
func accumulate(w *Win, k kind, origin, result, cmp []byte, target, disp int, op Op) error {
	return accumulateReq(w, k, origin, result, cmp, target, disp, op, nil)
}

// accumulateReq is accumulate whose completion also completes rq, if not
// nil; when it returns an error, rq is given up.
func accumulateReq(w *Win, k kind, origin, result, cmp []byte, target, disp int, op Op, rq *rmaReq) error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	w.comm.e.lock()
	defer w.comm.e.unlock()
	issued, err := w.accumulate(k, origin, result, cmp, target, disp, op, rq)
	if rq != nil {
		if err != nil {
			rq.fail(rq.left - issued)
		} else if issued == 0 {
			rq.left = 1
			rq.finish(nil) // nothing to wait for
		}
	}
	return err
}

// accumulate issues the update with the engine's lock held and returns
// the number of operations issued that complete rq (which it set in
// rq.left before issuing them).
func (w *Win) accumulate(k kind, origin, result, cmp []byte, target, disp int, op Op, rq *rmaReq) (int, error) {
	n := len(origin)
	if op.code == opNoOp {
		n = len(result)
	}
	return w.accumulateLayout(k, origin, result, cmp, target, disp, op, layout{blocks: 1, blockLen: uint64(n), stride: uint64(n)}, rq)
}

// accumulateLayout is accumulate into a target layout: origin's (and
// result's) elements fill lay's blocks one after the other.
func (w *Win) accumulateLayout(k kind, origin, result, cmp []byte, target, disp int, op Op, lay layout, rq *rmaReq) (int, error) {
	es := k.size()
	switch {
	case k == kInvalid:
		return 0, fmt.Errorf("%w: unsupported element type", ErrOp)
	case !op.valid():
		return 0, fmt.Errorf("%w: the zero Op", ErrOp)
	case op.code == opMinLoc || op.code == opMaxLoc:
		return 0, fmt.Errorf("%w: %v in a one-sided accumulate", ErrOp, op)
	}
	if op.code < opReplace {
		if err := op.check(k); err != nil {
			return 0, err
		}
	}
	if op.code == opNoOp {
		origin = nil
	}
	n := int(uint64(lay.blocks) * lay.blockLen)
	if n == 0 {
		_, err := w.target(target, disp, 0)
		return 0, err
	}
	span := lay.span()
	pl, err := w.target(target, disp, int(span))
	if err != nil {
		return 0, err
	}
	off := pl.off
	if w.rescuing[target] != nil {
		// Earlier accumulates to target are being taken back: later ones
		// follow them (win_rescue.go).
		if err := w.awaitRescue(target); err != nil {
			return 0, err
		}
	}
	byMsg := op.code != opUser && op.code != opCAS && (n > es || es > 8 || w.msgOut[target] > 0)
	if es > 8 && !byMsg {
		return 0, fmt.Errorf("%w: %v of %v, wider than a remote atomic", ErrOp, op, k)
	}
	if es <= 8 && (uint64(pl.skew)+off)%uint64(es) != 0 {
		return 0, fmt.Errorf("%w: displacement %d in rank %d's unit of %d bytes puts %d-byte elements at byte %d of its memory, out of their alignment", ErrRMARange, disp, target, w.units[target], es, off)
	}
	// The first and the last element's words must be aligned in the
	// target's memory; the others lie between, at the same alignment.
	if es <= 8 {
		if _, _, _, err := w.word(target, pl, off, es); err != nil {
			return 0, err
		}
		if _, _, _, err := w.word(target, pl, off+span-uint64(es), es); err != nil {
			return 0, err
		}
	}
	if byMsg {
		if target == w.comm.rank && w.pending == 0 {
			if mem, at, ok := w.local(pl.at, span); ok {
				if !w.applyLayout(k, op, mem[at:at+span], lay, origin, result) {
					return 0, fmt.Errorf("%w: accumulate on this rank: %s", ErrRMASync, rmaStatusText(rmaHeld))
				}
				return 0, nil
			}
		}
		if w.near[target] && lay.blocks == 1 && span <= accInPlaceMax && w.msgOut[target] == 0 && w.rescuing[target] == nil {
			if applied, err := w.accInPlace(k, op, origin, result, target, pl, lay); applied || err != nil {
				return 0, err
			}
		}
		return w.accMsgs(k, op, origin, result, target, pl, lay, rq)
	}
	if err := w.useAtomics(target); err != nil {
		return 0, err
	}
	if rq != nil {
		rq.left = n / es
	}
	return w.updates(k, op, origin, result, cmp, target, pl, lay, rq, nil)
}

// updates posts one update by remote atomics for each element of the
// layout at pl (pl.off the first block's offset in the target's region),
// and returns how many it posted. Each completes rq, if not nil, or counts
// for the rescued message parent, if not nil (which then counts as one
// pending operation for all of them).
func (w *Win) updates(k kind, op Op, origin, result, cmp []byte, target int, pl place, lay layout, rq *rmaReq, parent *rmaMsg) (int, error) {
	es := k.size()
	n := int(uint64(lay.blocks) * lay.blockLen)
	bl := int(lay.blockLen)
	for i := 0; i < n; i += es {
		u := w.newUpdate()
		*u = rmaUpdate{w: w, k: k, op: op, es: es, req: rq, parent: parent, fn: u.fn}
		at := pl.off + uint64(i/bl)*lay.stride + uint64(i%bl)
		u.wordOff, u.width, u.shift, _ = w.word(target, pl, at, es)
		if op.code != opNoOp {
			copy(u.operand[:es], origin[i:i+es])
		}
		if cmp != nil {
			copy(u.compare[:es], cmp)
		}
		if result != nil {
			u.result = result[i : i+es]
		}
		u.p = amigo.AtomicParams{Dest: w.eps[target], Remote: pl.key, Offset: u.wordOff, Result: &u.old, Done: u.fn}
		if parent == nil {
			w.pending++
		}
		now, err := u.start()
		if now {
			// Performed at once (AtomicNow): complete here, as its
			// callback would.
			u.done(err)
			continue
		}
		if err != nil {
			if parent == nil {
				w.pending--
			}
			w.freeUpdate(u)
			return i / es, errorf("mpi: accumulate on rank %d: %w", target, err)
		}
	}
	return n / es, nil
}

// newUpdate takes an element update from the window's free list, or makes
// one; the caller holds the engine's lock.
func (w *Win) newUpdate() *rmaUpdate {
	if n := len(w.updFree); n > 0 {
		u := w.updFree[n-1]
		w.updFree = w.updFree[:n-1]
		return u
	}
	u := &rmaUpdate{w: w}
	u.fn = u.done
	return u
}

// freeUpdate puts an update the AMI is done with back on the free list.
func (w *Win) freeUpdate(u *rmaUpdate) {
	u.result, u.req, u.parent = nil, nil, nil
	w.updFree = append(w.updFree, u)
}

// word returns the offset, width and bit shift of the aligned 4- or 8-byte
// word of target's window that holds the es-byte element at byte offset
// off: the element's own word when it is 4 or 8 bytes and aligned.
func (w *Win) word(target int, pl place, off uint64, es int) (wordOff uint64, width int, shift uint, err error) {
	width = 4
	if es == 8 {
		width = 8
	}
	abs := (uint64(pl.skew) + off) // the address modulo 8, plus a multiple of 8
	lead := abs % uint64(width)
	if lead+uint64(es) > uint64(width) || off < lead || off-lead+uint64(width) > pl.size {
		return 0, 0, 0, fmt.Errorf("%w: the %d-byte element at byte %d of rank %d's window is not inside an aligned %d-byte word of the window", ErrRMARange, es, off, target, width)
	}
	return off - lead, width, uint(lead * 8), nil
}

// rmaUpdate is one element's atomic update in flight.
type rmaUpdate struct {
	w                 *Win
	k                 kind
	op                Op
	es, width         int
	shift             uint
	wordOff           uint64
	operand, compare  [8]byte
	result            []byte
	old, guess        uint64
	native, fetchOnly bool
	p                 amigo.AtomicParams
	req               *rmaReq     // the request it completes, if any
	parent            *rmaMsg     // the rescued message it is part of, if any
	fn                func(error) // done, made once
}

// start posts the update's first atomic: the AMI's own operation when it
// has one for the element, else the first compare-and-swap of a loop. It
// reports now when the AMI performed it at once (AtomicNow), with the
// atomic's outcome as err; its callback then does not come.
func (u *rmaUpdate) start() (now bool, err error) {
	typ := amigo.Uint32
	if u.width == 8 {
		typ = amigo.Uint64
	}
	u.p.Type = typ
	whole := u.es == u.width
	if whole {
		v := u.operandWord()
		switch {
		case u.op.code == opReplace:
			u.native, u.p.Op, u.p.Operand = true, amigo.AtomicSwap, v
		case u.op.code == opCAS:
			var c [8]byte
			copy(c[:], u.compare[:u.es])
			cw := binary.LittleEndian.Uint64(c[:])
			u.native, u.p.Op, u.p.Operand, u.p.Compare = true, amigo.AtomicCAS, v, cw
		case u.op.code == opNoOp:
			u.native, u.p.Op, u.p.Operand = true, amigo.AtomicOr, 0
		case u.op.code == opSum && u.k.integer():
			u.native, u.p.Op, u.p.Operand = true, amigo.AtomicAdd, v
		case u.op.code == opSum && u.k == kFloat64:
			u.native, u.p.Op, u.p.Type, u.p.Operand = true, amigo.AtomicAdd, amigo.Float64, v
		case u.op.code == opBand && u.k.integer():
			u.native, u.p.Op, u.p.Operand = true, amigo.AtomicAnd, v
		case u.op.code == opBor && u.k.integer():
			u.native, u.p.Op, u.p.Operand = true, amigo.AtomicOr, v
		case u.op.code == opBxor && u.k.integer():
			u.native, u.p.Op, u.p.Operand = true, amigo.AtomicXor, v
		}
	}
	if u.native {
		return u.w.comm.e.held.AtomicNow(&u.p)
	}
	// A compare-and-swap loop, whose first guess is a zero word: the
	// swap's fetched value corrects it.
	u.guess = 0
	return u.cas()
}

func (u *rmaUpdate) operandWord() uint64 {
	var b [8]byte
	copy(b[:], u.operand[:u.es])
	if u.width == 4 {
		return uint64(binary.LittleEndian.Uint32(b[:4]))
	}
	return binary.LittleEndian.Uint64(b[:])
}

// cas posts a swap of the word from u.guess to the guess with the
// element updated, or performs it at once (start).
func (u *rmaUpdate) cas() (now bool, err error) {
	u.p.Op, u.p.Compare, u.p.Operand = amigo.AtomicCAS, u.guess, u.apply(u.guess)
	return u.w.comm.e.held.AtomicNow(&u.p)
}

// element extracts the element from a word's value, as bytes.
func (u *rmaUpdate) element(word uint64) (b [8]byte) {
	binary.LittleEndian.PutUint64(b[:], word>>u.shift)
	return b
}

// apply returns word with the element updated by the operation.
func (u *rmaUpdate) apply(word uint64) uint64 {
	cur := u.element(word)
	for i := u.es; i < len(cur); i++ {
		cur[i] = 0
	}
	nb := cur
	switch u.op.code {
	case opReplace:
		nb = u.operand
	case opNoOp:
	case opCAS:
		if cur == u.compareBytes() {
			nb = u.operand
		}
	default:
		combine(u.k, u.op, u.operand[:u.es], nb[:u.es])
	}
	var v uint64
	for i := u.es - 1; i >= 0; i-- {
		v = v<<8 | uint64(nb[i])
	}
	mask := uint64(1)<<(8*uint(u.es)) - 1
	if u.es == 8 {
		mask = ^uint64(0)
	}
	return word&^(mask<<u.shift) | v<<u.shift
}

// compareBytes is the comparand, with the bytes above the element zero
// as apply's copy of the element has them.
func (u *rmaUpdate) compareBytes() (b [8]byte) {
	copy(b[:u.es], u.compare[:u.es])
	return b
}

// done is the callback of each atomic of the update, and completes it
// when one was performed at once.
func (u *rmaUpdate) done(err error) {
	w := u.w
	for err == nil && !u.native && u.old != u.guess {
		// The word changed since the guess: try again from its value.
		u.guess = u.old
		var now bool
		if now, err = u.cas(); err == nil && !now {
			return // its callback comes
		}
	}
	if err == nil && u.result != nil {
		b := u.element(u.old)
		copy(u.result, b[:u.es])
	}
	parent, rq := u.parent, u.req
	w.freeUpdate(u)
	if parent != nil {
		parent.updated(err)
		return
	}
	w.opDone(err)
	if rq != nil {
		rq.finish(err)
	}
}
