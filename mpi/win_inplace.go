package mpi

import (
	"context"
	"errors"

	"github.com/amigo-hpc/amigo"
)

// Accumulates applied in place. Over shared memory, a window of
// WinAllocate lies in segments every rank of the host maps, and the AMI
// reads and writes a peer's part at once on the calling goroutine
// (GetNow, PutNow, AtomicNow): an origin can then apply a contiguous
// accumulate itself, as the owner would (applyLayout), with no message
// and no help from the owner. It claims the owner's users word with the
// bulk bit (a compare-and-swap from zero, or from this rank's own count:
// no other origin uses remote atomics on the window, and no plain update
// is under way), copies the elements out,
// combines them, copies them back and clears the bit: four operations on
// the mapped memory, each a few tens of nanoseconds, against a round trip
// through the owner's progress. The bit holds off every other update of
// the window meanwhile (the owner's plain ones spin in applyLayout,
// origins' atomics in useAtomics, rescues in their claim), so each
// element's update is atomic with respect to every other accumulate; the
// hold needs nobody's help to end, like the owner's own.
//
// When the word is not zero (remote atomics in use, or another plain
// update), the accumulate goes to the owner as a message, as it would
// have. The origin learns that a target is near (the AMI performs atomics
// on its control region at once) from the atomics of Lock and LockAll,
// whose lock word lies in the same kind of memory as the window's.

// accInPlaceMax is the largest span an accumulate applies in place: the
// bulk bit is held for a few microseconds at most.
const accInPlaceMax = 16 << 10

// inPlace is the window's state for the operations of accInPlace: one
// atomic's parameters and result, and the completion of an operation the
// AMI could not perform at once and posted.
type inPlace struct {
	p    amigo.AtomicParams
	old  uint64
	left int
	err  error
	fn   func(error) // done, made once
	idle func() bool // left is zero, made once
}

func (d *inPlace) done(err error) {
	d.left--
	if err != nil && d.err == nil {
		d.err = err
	}
}

// finish completes an operation of accInPlace: performed at once (now),
// refused (err), or posted, which it waits for.
func (w *Win) finishInPlace(now bool, err error) error {
	d := &w.inPlace
	if now || err != nil {
		return err
	}
	d.left++
	ctx, cancel := context.WithTimeout(context.Background(), rescueTimeout)
	defer cancel()
	if werr := w.comm.e.wait(ctx, d.idle); werr != nil {
		return werr
	}
	err, d.err = d.err, nil
	return err
}

// accInPlace applies an accumulate of one block to target's window in
// place, holding the owner's bulk bit, and reports whether it did; it does
// nothing and reports false when the users word counts others or holds
// the bulk bit. The caller
// holds the engine's lock and checked the access.
func (w *Win) accInPlace(k kind, op Op, origin, result []byte, target int, pl place, lay layout) (bool, error) {
	d := &w.inPlace
	if d.fn == nil {
		d.fn = d.done
		d.idle = func() bool { return d.left == 0 }
	}
	ep := w.eps[target]
	// This rank's own counts in the word (its remote atomics of this
	// epoch, a rescue's) hold off no plain update of its own: none of its
	// atomics is in flight while it holds the engine.
	var mine uint64
	if w.atomUsers[target] == user {
		mine++
	}
	if w.rescueUser[target] {
		mine++
	}
	d.p = amigo.AtomicParams{Dest: ep, Remote: w.ctlKeys[target], Offset: ctlUsersOff, Op: amigo.AtomicCAS, Type: amigo.Uint64,
		Operand: mine | bulkBit, Compare: mine, Result: &d.old, Done: d.fn}
	if err := w.finishInPlace(w.comm.e.held.AtomicNow(&d.p)); err != nil {
		return false, errorf("mpi: accumulate on rank %d: %w", target, w.comm.e.peerFailure(err))
	}
	if d.old != mine {
		return false, nil
	}
	e := w.comm.e
	span := lay.span()
	buf := e.scratch.get(int(span))
	err := w.finishInPlace(w.comm.e.held.GetNow(ep, buf, pl.key, pl.off, d.fn))
	if err == nil {
		w.eachBlock(buf, lay, origin, result, func(dst, s, o []byte) { w.applyPlain(k, op, dst, s, o) })
		if op.code != opNoOp {
			err = w.finishInPlace(w.comm.e.held.PutNow(ep, buf, pl.key, pl.off, d.fn))
		}
	}
	e.scratch.put(buf)
	d.p = amigo.AtomicParams{Dest: ep, Remote: w.ctlKeys[target], Offset: ctlUsersOff, Op: amigo.AtomicAdd, Type: amigo.Uint64,
		Operand: ^uint64(bulkBit - 1), Done: d.fn}
	rerr := w.finishInPlace(w.comm.e.held.AtomicNow(&d.p))
	if err = errors.Join(err, rerr); err != nil {
		return true, errorf("mpi: accumulate on rank %d: %w", target, e.peerFailure(err))
	}
	w.inPlaceUpdates++
	return true, nil
}
