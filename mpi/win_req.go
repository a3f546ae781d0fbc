package mpi

import "fmt"

// Request-based one-sided operations (MPI_Rput, MPI_Rget, MPI_Raccumulate,
// MPI_Rget_accumulate): each returns a Request that completes when the
// operation completes at the origin (the origin buffer may be reused, a
// Get's or a fetch's data is there), so that a program waits for one
// operation instead of flushing them all. They take a passive-target
// epoch (Lock or LockAll; outside one they are refused with ErrRMASync
// and touch nothing); the window's Flush and Unlock complete them too, and
// their requests then report complete.

// rmaReq ties a Request to the window operation (or the several remote
// atomics of one accumulate) it completes with. The window keeps them on a
// free list.
type rmaReq struct {
	w    *Win
	r    *request
	gen  uint32
	left int // operations still to complete
	err  error
	fn   func(error) // done, made once
	next *rmaReq
}

// newReq takes a request and its tie; the caller holds the engine's lock.
func (w *Win) newReq() *rmaReq {
	rq := w.reqFree
	if rq == nil {
		rq = &rmaReq{w: w}
		rq.fn = rq.done
	} else {
		w.reqFree = rq.next
		rq.next = nil
	}
	rq.r = w.comm.e.allocReq(reqRMA)
	rq.gen, rq.left, rq.err = rq.r.gen, 0, nil
	return rq
}

// start sets the number of operations the request waits for and returns
// the done callback of one.
func (rq *rmaReq) start(n int) func(error) {
	rq.left = n
	return rq.fn
}

// done is the AMI's callback of one of the request's operations.
func (rq *rmaReq) done(err error) {
	rq.w.opDone(err)
	rq.finish(err)
}

// finish counts one operation complete, and completes the request after
// the last.
func (rq *rmaReq) finish(err error) {
	if err != nil && rq.err == nil {
		rq.err = err
	}
	rq.left--
	if rq.left > 0 {
		return
	}
	w, r := rq.w, rq.r
	if r.gen == rq.gen {
		w.comm.e.complete(r, rq.err)
	}
	rq.r = nil
	rq.next = w.reqFree
	w.reqFree = rq
}

// handle returns the request's handle.
func (rq *rmaReq) handle() Request { return Request{r: rq.r, gen: rq.gen} }

// fail gives the request up after its operation could not be issued:
// unissued of the operations it counts never will be. The ones issued
// complete it, and nobody waits for it.
func (rq *rmaReq) fail(unissued int) {
	w := rq.w
	rq.left -= unissued
	if rq.left > 0 {
		rq.r.orphan = true
		return
	}
	w.comm.e.freeReq(rq.r)
	rq.r = nil
	rq.next = w.reqFree
	w.reqFree = rq
}

// passive checks that target is inside a passive-target epoch of this
// rank's (Lock or LockAll), the only epochs request-based operations may
// take (MPI 3.1, 11.3.5); the caller holds the engine's lock.
func (w *Win) passive(target int) error {
	if err := w.rank(target); err != nil {
		return err
	}
	if !w.lockAll && w.locks[target] == 0 {
		return fmt.Errorf("%w: request-based operation on rank %d outside a passive-target epoch (Lock or LockAll first)", ErrRMASync, target)
	}
	return nil
}

// Rput is Put that returns a request, complete when origin may be reused
// (MPI_Rput).
func (w *Win) Rput(origin []byte, target, disp int) (Request, error) {
	return w.rreq(true, origin, target, disp)
}

// Rget is Get that returns a request, complete when origin holds the data
// (MPI_Rget).
func (w *Win) Rget(origin []byte, target, disp int) (Request, error) {
	return w.rreq(false, origin, target, disp)
}

func (w *Win) rreq(put bool, origin []byte, target, disp int) (Request, error) {
	if err := w.enter(); err != nil {
		return Request{}, err
	}
	if err := w.passive(target); err != nil {
		w.leave()
		return Request{}, err
	}
	rq := w.newReq()
	q := rq.handle()
	w.leave()
	if err := w.rma(put, origin, target, disp, rq); err != nil {
		w.comm.e.lock()
		rq.fail(1)
		w.comm.e.unlock()
		return Request{}, err
	}
	return q, nil
}

// Rput is Put of elements of T that returns a request (MPI_Rput).
func Rput[T Numeric](w *Win, origin []T, target, disp int) (Request, error) {
	return w.Rput(Bytes(origin), target, disp)
}

// Rget is Get of elements of T that returns a request (MPI_Rget).
func Rget[T Numeric](w *Win, origin []T, target, disp int) (Request, error) {
	return w.Rget(Bytes(origin), target, disp)
}

// Raccumulate is Accumulate that returns a request, complete when origin
// may be reused (MPI_Raccumulate); it completes when the update is done at
// the target.
func Raccumulate[T Numeric](w *Win, origin []T, target, disp int, op Op) (Request, error) {
	return raccumulate(w, kindOf[T](), Bytes(origin), nil, target, disp, op)
}

// RgetAccumulate is GetAccumulate that returns a request, complete when
// result holds the old elements (MPI_Rget_accumulate).
func RgetAccumulate[T Numeric](w *Win, origin, result []T, target, disp int, op Op) (Request, error) {
	if len(result) != len(origin) && op.code != opNoOp {
		return Request{}, fmt.Errorf("%w: RgetAccumulate of %d elements into a result of %d", ErrCount, len(origin), len(result))
	}
	if result == nil {
		result = []T{}
	}
	return raccumulate(w, kindOf[T](), Bytes(origin), Bytes(result), target, disp, op)
}

func raccumulate(w *Win, k kind, origin, result []byte, target, disp int, op Op) (Request, error) {
	if err := w.enter(); err != nil {
		return Request{}, err
	}
	if err := w.passive(target); err != nil {
		w.leave()
		return Request{}, err
	}
	rq := w.newReq()
	q := rq.handle()
	w.leave()
	if err := accumulateReq(w, k, origin, result, nil, target, disp, op, rq); err != nil {
		return Request{}, err
	}
	return q, nil
}
