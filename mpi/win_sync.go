package mpi

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/amigo-hpc/amigo"
)

// Synchronisation of windows: completion (FlushLocal, Flush and their
// All forms), Sync, active target by Fence (Post, Start, Complete and Wait
// are in win_pscw.go), and passive target by Lock, Unlock, LockAll and
// UnlockAll.

// waitPending advances the context until every operation this rank issued
// on the window is complete at the origin, and returns their first error.
// The caller holds the engine's lock.
func (w *Win) waitPending(ctx context.Context) error {
	if err := w.comm.e.wait(ctx, w.settled); err != nil {
		return w.comm.e.waitErr(err, "window operations of this rank", noArg, noArg)
	}
	err := w.err
	w.err = nil
	return err
}

// FlushLocal completes at the origin every operation this rank issued on
// the window: their origin buffers may be reused, and Gets' data is there.
// (It completes those to every target, not only to target.)
func (w *Win) FlushLocal(ctx context.Context, target int) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if err := w.rank(target); err != nil {
		return err
	}
	return w.waitPending(ctx)
}

// FlushLocalAll is FlushLocal for every target.
func (w *Win) FlushLocalAll(ctx context.Context) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	return w.waitPending(ctx)
}

// Flush completes every operation this rank issued to target at the
// target: its Puts and accumulates are visible there.
func (w *Win) Flush(ctx context.Context, target int) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if err := w.rank(target); err != nil {
		return err
	}
	return w.flushRank(ctx, target)
}

// flushRank is Flush with the engine's lock held.
func (w *Win) flushRank(ctx context.Context, target int) error {
	err := w.waitPending(ctx)
	if w.put[target] {
		w.put[target] = false
		if ferr := w.flushAMI(ctx, w.eps[target]); err == nil {
			err = ferr
		}
	}
	return err
}

// FlushAll is Flush for every target.
func (w *Win) FlushAll(ctx context.Context) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	return w.flushAll(ctx)
}

// flushAll is FlushAll with the engine's lock held. Only the targets of
// Puts take an AMI flush: the other operations are complete where they
// act once waitPending returns, and a flush would wait for the AMI's
// delivery of every message sent to the target, accumulates answered or
// taken back included, which a target that computes outside mpi does not
// acknowledge until it calls in (over TCP).
func (w *Win) flushAll(ctx context.Context) error {
	err := w.waitPending(ctx)
	left := 0
	var ferrs []error
	for r, p := range w.put {
		if !p {
			continue
		}
		w.put[r] = false
		left++
		if e := w.ac.Flush(w.eps[r], func(e error) {
			if e != nil {
				ferrs = append(ferrs, e)
			}
			left--
			w.comm.e.events++
		}); e != nil {
			left--
			ferrs = append(ferrs, e)
		}
	}
	if left > 0 {
		if e := w.comm.e.wait(ctx, func() bool { return left == 0 }); e != nil {
			// The callbacks still to come own ferrs and left.
			return errors.Join(err, w.comm.e.waitErr(e, "window FlushAll", noArg, noArg))
		}
	}
	return errors.Join(append([]error{err}, ferrs...)...)
}

func (w *Win) flushAMI(ctx context.Context, ep amigo.Endpoint) error {
	var ferr error
	flushed := false
	if err := w.ac.Flush(ep, func(e error) { ferr, flushed = e, true; w.comm.e.events++ }); err != nil {
		return err
	}
	if err := w.comm.e.wait(ctx, func() bool { return flushed }); err != nil {
		return w.comm.e.waitErr(err, "window Flush of world", ep.Rank, noArg)
	}
	return ferr
}

// Sync makes this rank's loads and stores to its window memory and the
// peers' operations that were synchronised with it (by a barrier, a
// message, a lock) visible to each other (MPI_Win_sync): a full memory
// barrier.
func (w *Win) Sync() error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	var x atomic.Uint64
	x.Add(1) // a locked instruction: a full barrier on every processor Go runs on
	return nil
}

// Fence ends the current active-target epoch and opens the next, unless
// assert has ModeNoSucceed (MPI_Win_fence): collective over the window's
// ranks; every operation any rank issued before it is complete at its
// target when it returns, on every rank.
func (w *Win) Fence(ctx context.Context, assert int) error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	e := w.comm.e
	e.lock()
	err := w.check()
	if err == nil && w.lockAll {
		err = fmt.Errorf("%w: Fence inside LockAll", ErrRMASync)
	}
	if err == nil && (w.started != nil || w.posted != nil) {
		err = fmt.Errorf("%w: Fence inside a Start or Post epoch", ErrRMASync)
	}
	for r, l := range w.locks {
		if l != 0 && err == nil {
			err = fmt.Errorf("%w: Fence while rank %d is locked", ErrRMASync, r)
		}
	}
	if err != nil {
		e.unlock()
		return err
	}
	if assert&ModeNoPrecede == 0 || w.pending > 0 {
		err = w.flushAll(ctx)
	}
	if derr := w.dropAllAtomics(ctx); err == nil {
		err = derr
	}
	e.unlock()
	if berr := w.comm.Barrier(ctx); err == nil {
		err = berr
	}
	e.lock()
	w.fenceOpen = assert&ModeNoSucceed == 0
	w.forget()
	e.unlock()
	return err
}

// Lock opens a passive-target access epoch to rank target (MPI_Win_lock):
// it returns once this rank holds the target's lock, exclusive or shared.
// The lock is a word of the target's window that this rank takes with
// remote atomics: the target need not call into mpi for it. A lock that is
// held elsewhere is retried until ctx ends.
func (w *Win) Lock(ctx context.Context, lt LockType, target int) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	return w.lockRank(ctx, lt, target)
}

// lockRank is Lock with the engine's lock held.
func (w *Win) lockRank(ctx context.Context, lt LockType, target int) error {
	if err := w.rank(target); err != nil {
		return err
	}
	if lt != LockExclusive && lt != LockShared {
		return fmt.Errorf("%w: lock type %d", ErrWin, lt)
	}
	if w.locks[target] != 0 || w.lockAll {
		return fmt.Errorf("%w: Lock of rank %d, which this rank has locked already", ErrRMASync, target)
	}
	if w.fenceOpen {
		return fmt.Errorf("%w: Lock inside a Fence epoch (Fence with ModeNoSucceed first)", ErrRMASync)
	}
	if w.started != nil {
		return fmt.Errorf("%w: Lock inside a Start epoch (Complete first)", ErrRMASync)
	}
	for spins := 0; ; spins++ {
		var ok bool
		var err error
		if lt == LockExclusive {
			var old uint64
			old, err = w.lockOp(ctx, target, amigo.AtomicCAS, lockExcl, 0)
			ok = err == nil && old == 0
		} else {
			var old uint64
			old, err = w.lockOp(ctx, target, amigo.AtomicAdd, 1, 0)
			ok = err == nil && old < lockExcl
			if err == nil && !ok {
				_, err = w.lockOp(ctx, target, amigo.AtomicAdd, ^uint64(0), 0)
			}
		}
		if err != nil {
			return errorf("mpi: Lock of rank %d: %w", target, err)
		}
		if ok {
			w.locks[target] = lt
			w.forget()
			return nil
		}
		// Held elsewhere: let this rank's context serve what it must,
		// and the holder run, before the next try.
		w.comm.e.advanceOnce()
		if spins%16 == 15 {
			// Let the other goroutines of this rank have the engine.
			w.comm.e.unlock()
			runtime.Gosched()
			w.comm.e.lock()
		}
		if err := ctx.Err(); err != nil {
			return errorf("mpi: Lock of rank %d: %w", target, err)
		}
	}
}

// lockOp performs one atomic on target's lock word and waits for it; the
// caller holds the engine's lock.
func (w *Win) lockOp(ctx context.Context, target int, op amigo.AtomicOp, operand, compare uint64) (uint64, error) {
	return w.ctlOp(ctx, target, 0, op, operand, compare)
}

// ctlOp performs one atomic on the word at off of target's control region
// and waits for it; the caller holds the engine's lock.
func (w *Win) ctlOp(ctx context.Context, target int, off uint64, op amigo.AtomicOp, operand, compare uint64) (uint64, error) {
	// The result is the call's own: the wait lets other goroutines of
	// this rank in, whose calls may issue theirs meanwhile.
	var aerr error
	var result uint64
	done := false
	p := amigo.AtomicParams{Dest: w.eps[target], Remote: w.ctlKeys[target], Offset: off, Op: op, Type: amigo.Uint64,
		Operand: operand, Compare: compare, Result: &result, Done: func(e error) { aerr, done = e, true; w.comm.e.events++ }}
	now, err := w.comm.e.held.AtomicNow(&p)
	if now {
		// Performed at once: the control region, and a window of
		// WinAllocate, lie in memory this rank reaches in place.
		if err == nil {
			w.near[target] = w.alloc
		}
		return result, err
	}
	if err != nil {
		return 0, err
	}
	if err := w.comm.e.wait(ctx, func() bool { return done }); err != nil {
		// Result stays the AMI's until Done: leave it to the closure.
		return 0, w.comm.e.waitErr(err, "window lock word of", target, noArg)
	}
	return result, aerr
}

// Unlock completes every operation this rank issued to target, at the
// target, and releases the lock Lock took (MPI_Win_unlock).
func (w *Win) Unlock(ctx context.Context, target int) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if err := w.rank(target); err != nil {
		return err
	}
	lt := w.locks[target]
	if lt == 0 {
		return fmt.Errorf("%w: Unlock of rank %d, which this rank has not locked", ErrRMASync, target)
	}
	err := w.flushRank(ctx, target)
	if derr := w.dropAtomics(ctx, target); err == nil {
		err = derr
	}
	delta := ^uint64(0) // -1: one shared holder less
	if lt == LockExclusive {
		delta = ^uint64(lockExcl - 1) // -lockExcl
	}
	if _, uerr := w.lockOp(ctx, target, amigo.AtomicAdd, delta, 0); uerr != nil {
		// The lock word could not be reached: the target failed.
		err = errors.Join(err, errorf("mpi: Unlock of rank %d: %w", target, uerr))
	}
	w.locks[target] = 0
	return err
}

// LockAll takes a shared lock on every rank's window (MPI_Win_lock_all).
func (w *Win) LockAll(ctx context.Context) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if w.lockAll {
		return fmt.Errorf("%w: LockAll inside LockAll", ErrRMASync)
	}
	for r := range w.locks {
		if err := w.lockRank(ctx, LockShared, r); err != nil {
			for q := 0; q < r; q++ {
				_, _ = w.lockOp(ctx, q, amigo.AtomicAdd, ^uint64(0), 0)
				w.locks[q] = 0
			}
			return err
		}
	}
	for r := range w.locks {
		w.locks[r] = 0
	}
	w.lockAll = true
	return nil
}

// UnlockAll completes every operation this rank issued on the window at
// its targets and releases LockAll's locks (MPI_Win_unlock_all).
func (w *Win) UnlockAll(ctx context.Context) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if !w.lockAll {
		return fmt.Errorf("%w: UnlockAll without LockAll", ErrRMASync)
	}
	err := w.flushAll(ctx)
	if derr := w.dropAllAtomics(ctx); err == nil {
		err = derr
	}
	for r := range w.locks {
		if _, uerr := w.lockOp(ctx, r, amigo.AtomicAdd, ^uint64(0), 0); uerr != nil {
			err = errors.Join(err, errorf("mpi: UnlockAll, rank %d: %w", r, uerr))
		}
	}
	w.lockAll = false
	return err
}
