package mpi

import (
	"context"
	"fmt"
	"strconv"
)

type reqKind uint8

const (
	reqSend reqKind = iota + 1
	reqRecv
	reqColl
	reqWaiter // carries the condition of a Waitany or Probe: never a handle
	reqRMA    // a request-based one-sided operation (win_req.go)
	reqInter  // a nonblocking collective on an intercommunicator (intercomm_nb.go)
)

// request is the state of one send, receive or nonblocking collective. The
// engine keeps a free list of them, so a steady stream of operations
// allocates nothing; a handle (Request) names one by pointer and generation,
// and the generation changes when the request is released.
type request struct {
	// Set when the request is made and never changed: a handle's engine
	// can be read before the engine is locked.
	e        *engine
	onAMI    func(error) // the AMI's done callback
	cond     func() bool // reports done
	waitCond func() bool // reports a reqWaiter's condition
	reqState
}

// reqState is the part of a request that freeReq clears.
type reqState struct {
	gen    uint32
	kind   reqKind
	done   bool
	posted bool // listed in the posted queue
	inAMI  bool // the AMI holds the buffer: a send in flight or a fetch
	orphan bool // nobody waits: release on completion
	err    error
	status Status

	// Target match data of a receive, its posting order and its buffer;
	// the buffer of a send.
	ctx        uint32
	src, tag   int32
	seq        uint64
	buf        []byte
	prev, next *request

	hdr [hdrLen]byte // a send's header, owned by the AMI until onAMI

	// A collective's internal operation reports to its schedule, if the
	// schedule is still the one that posted it.
	owner    *sched
	ownerGen uint32

	sched *sched // reqColl: the schedule the handle waits on

	// reqWaiter: the requests a Waitany waits for, or none for a Probe,
	// whose match data are ctx, src and tag.
	reqs []Request

	// A synchronous send waits for the acknowledgement of its match:
	// syncSlot is its slot plus one while it waits; sentDone is set when
	// the AMI completed it first.
	syncSlot int32
	sentDone bool
	// ftErr fails a synchronous send whose receiver failed before its
	// acknowledgement, when the AMI is done with it (ft.go).
	ftErr error

	// counted is the communicator whose in-flight operations count r
	// (Comm.track).
	counted *Comm

	// trunc takes an announced message longer than buf whole (complete
	// copies its first bytes into buf).
	trunc []byte

	// A persistent request (persistent.go) stays allocated between its
	// starts; active while started and not yet waited for. A persistent
	// send's message in flight is an inner request whose completion
	// completes its parent.
	persistent bool
	active     bool
	comm       *Comm
	build      func() (*sched, error) // a persistent collective's schedule
	peer       int
	parent     *request
	parentGen  uint32

	nextFree *request
}

func (e *engine) allocReq(k reqKind) *request {
	r := e.reqFree
	if r == nil {
		r = &request{e: e}
		r.onAMI = func(err error) {
			r.inAMI = false
			r.e.complete(r, err)
		}
		r.cond = func() bool { return r.done }
		r.waitCond = r.waiterDone
	} else {
		e.reqFree = r.nextFree
		r.nextFree = nil
	}
	r.kind = k
	return r
}

func (e *engine) freeReq(r *request) {
	if c := r.counted; c != nil {
		c.untrack() // released before it completed: a receive given up
	}
	r.reqState = reqState{gen: r.gen + 1, nextFree: e.reqFree}
	e.reqFree = r
}

// complete finishes r with err. An internal request reports to its
// schedule and is released; a request no one waits for any more is
// released; a user's request waits for Wait or Test.
func (e *engine) complete(r *request, err error) {
	e.events++
	if err == nil && r.trunc == nil && r.owner == nil && r.parent == nil && r.syncSlot == 0 && r.ftErr == nil && !r.orphan {
		// A user's operation done without a word to add: what most
		// completions are, on the path from a message's arrival to the
		// return of the call that waits for it.
		r.done, r.err = true, nil
		if c := r.counted; c != nil {
			r.counted = nil
			c.untrack()
		}
		return
	}
	e.completeSlow(r, err)
}

// completeSlow is complete for the rest: errors, truncations, schedules'
// and parents' operations, synchronous sends, counted and orphaned ones.
func (e *engine) completeSlow(r *request, err error) {
	if err != nil {
		err = e.peerFailure(err)
	}
	if r.trunc != nil {
		// A truncated announced message, taken whole: the receive gets
		// its first bytes and the error.
		if err == nil {
			r.status.Count = copy(r.buf, r.trunc)
			err = &TruncateError{Source: r.status.Source, Tag: r.status.Tag, Size: len(r.trunc), Cap: len(r.buf)}
		}
		e.scratch.put(r.trunc)
		r.trunc = nil
	} else if r.owner != nil && r.kind == reqRecv && err == nil && r.status.Count != len(r.buf) {
		// A collective's receive expects its exact length: ranks that
		// disagree on a count get an error, not a buffer half old.
		e.stats.Truncated++
		err = fmt.Errorf("%w: a collective's message of %d bytes where %d were due", ErrCount, r.status.Count, len(r.buf))
	}
	if r.syncSlot != 0 {
		if err == nil {
			r.sentDone = true // the acknowledgement completes it
			return
		}
		e.dropSync(r)
	} else if r.ftErr != nil && err == nil {
		err = r.ftErr
	}
	r.done = true
	r.err = err
	if c := r.counted; c != nil {
		r.counted = nil
		c.untrack()
	}
	switch {
	case r.parent != nil:
		p, gen := r.parent, r.parentGen
		e.freeReq(r)
		if p.gen == gen {
			e.complete(p, err)
		}
	case r.owner != nil:
		s, gen := r.owner, r.ownerGen
		e.freeReq(r)
		if s.gen == gen {
			s.commDone(err)
		}
	case r.orphan:
		e.freeReq(r)
	}
}

// Status describes a received message: its source rank in the
// communicator, its tag, and its length in bytes (see Elements for a count
// of elements).
type Status struct {
	Source int
	Tag    int
	Count  int
}

// Request is the handle of a nonblocking operation (Isend, Irecv, Ibcast,
// ...). The zero Request is the null request: waiting on it returns at once.
// Wait and a successful Test release the operation and set the handle to
// null; a copy of the handle made before then reports ErrRequest if used
// afterwards. Any goroutine may wait on or test a request, one at a time.
// A persistent request (SendInit, RecvInit) is not set to null: it becomes
// inactive, to be started again.
type Request struct {
	r   *request
	gen uint32
}

// Null reports whether q is the null request.
func (q Request) Null() bool { return q.r == nil }

func (q Request) live() (*request, error) {
	if q.r.gen != q.gen {
		return nil, ErrRequest
	}
	return q.r, nil
}

// Wait advances the context until the operation completes or ctx ends, and
// returns its status (for a receive) and error. The handle becomes null,
// unless ctx ended first: then the operation is still pending and the
// handle still names it.
func (q *Request) Wait(ctx context.Context) (Status, error) {
	if q.r == nil {
		return Status{}, nil
	}
	e := q.r.e
	e.lock()
	defer e.unlock()
	return q.wait(ctx)
}

// wait is Wait with the engine locked.
func (q *Request) wait(ctx context.Context) (Status, error) {
	if q.r == nil {
		return Status{}, nil
	}
	r, err := q.live()
	if err != nil {
		return Status{}, err
	}
	if r.persistent && !r.active {
		return Status{}, nil
	}
	e := r.e
	if !r.done {
		if err := e.waitDone(ctx, &r.done, r.cond); err != nil {
			return Status{}, r.waitErr(err)
		}
	} else {
		e.flush() // waitDone flushes
	}
	st, err := r.status, r.err
	e.finish(q, r)
	return st, err
}

// finish ends a completed request whose result was read: a persistent one
// becomes inactive, any other is released and its handle becomes null.
func (e *engine) finish(q *Request, r *request) {
	if r.persistent {
		r.active = false
		if r.sched != nil {
			e.freeSched(r.sched)
			r.sched = nil
		}
		return
	}
	e.release(r)
	*q = Request{}
}

// Test advances the context once and reports whether the operation
// completed; if it did, it returns its status and error and the handle
// becomes null.
func (q *Request) Test() (bool, Status, error) {
	if q.r == nil {
		return true, Status{}, nil
	}
	e := q.r.e
	e.lock()
	defer e.unlock()
	return q.test(true)
}

// test is Test with the engine locked; it advances the context only if
// advance is set or messages wait to be pushed out (flush), and pushes out
// what the pass sent.
func (q *Request) test(advance bool) (bool, Status, error) {
	if q.r == nil {
		return true, Status{}, nil
	}
	r, err := q.live()
	if err != nil {
		return true, Status{}, err
	}
	if r.persistent && !r.active {
		return true, Status{}, nil
	}
	e := r.e
	if unsent := e.unsent(); !r.done || unsent {
		if advance || unsent {
			e.advanceOnce()
			e.flush()
		}
		if !r.done {
			return false, Status{}, nil
		}
	}
	st, err := r.status, r.err
	e.finish(q, r)
	return true, st, err
}

// GetStatus advances the context once and reports whether the operation
// completed, with its status and error, without releasing it
// (MPI_Request_get_status): the handle still names it, to be waited on or
// tested. The null request, and an inactive persistent one, report
// complete with an empty status.
func (q Request) GetStatus() (bool, Status, error) {
	if q.r == nil {
		return true, Status{}, nil
	}
	e := q.r.e
	e.lock()
	defer e.unlock()
	r, err := q.live()
	if err != nil {
		return true, Status{}, err
	}
	if r.persistent && !r.active {
		return true, Status{}, nil
	}
	if !r.done {
		e.advanceOnce()
		if !r.done {
			return false, Status{}, nil
		}
	}
	return true, r.status, r.err
}

// advanceOnce advances the context once, with the engine locked.
func (e *engine) advanceOnce() {
	e.unflushed = false
	e.held.Advance()
}

// Cancel cancels a receive that has not matched a message yet: it leaves the
// posted queue and completes with ErrCanceled. A send, a collective, or a
// receive that already matched completes as usual; Cancel reports whether
// it canceled. The handle must still be waited on or tested.
func (q *Request) Cancel() bool {
	if q.r == nil {
		return false
	}
	e := q.r.e
	e.lock()
	defer e.unlock()
	r, err := q.live()
	if err != nil || !r.posted {
		return false
	}
	e.posted.remove(r)
	e.complete(r, ErrCanceled)
	return true
}

// release frees a completed request whose result was read.
func (e *engine) release(r *request) {
	if r.kind == reqColl && r.sched != nil {
		e.freeSched(r.sched)
	}
	e.freeReq(r)
}

// engineOf returns the engine of the first non-null request of reqs, or
// nil; it reads only what never changes, before the engine is locked. The
// requests of one call must belong to one context.
func engineOf(reqs []Request) *engine {
	for i := range reqs {
		if reqs[i].r != nil {
			return reqs[i].r.e
		}
	}
	return nil
}

// Waitall waits for every request in reqs and sets each to null. If
// statuses is not nil it receives each request's status. It returns the
// first error of a request, naming its index, or ctx's error as soon as ctx
// ends (the requests not yet completed then stay pending).
func Waitall(ctx context.Context, reqs []Request, statuses []Status) error {
	if statuses != nil && len(statuses) < len(reqs) {
		return fmt.Errorf("%w: %d statuses for %d requests", ErrCount, len(statuses), len(reqs))
	}
	e := engineOf(reqs)
	if e == nil {
		clear(statuses)
		return nil
	}
	e.lock()
	defer e.unlock()
	var first error
	for i := range reqs {
		// A request done already (the common case after the first of a
		// window) skips the wait: two calls of waitDone a request were
		// some 90 instructions of a window of small Isends.
		if r := reqs[i].r; r != nil && r.gen == reqs[i].gen && !r.done {
			if err := r.e.wait(ctx, r.cond); err != nil {
				return fmt.Errorf("request %d: %w", i, reqs[i].r.waitErr(err))
			}
		}
		st, err := reqs[i].wait(ctx)
		if statuses != nil {
			statuses[i] = st
		}
		if err != nil && first == nil {
			first = fmt.Errorf("request %d: %w", i, err)
		}
	}
	return first
}

// Waitany waits until one of reqs completes, sets it to null and returns
// its index, status and error. If every request is null it returns
// Undefined at once.
func Waitany(ctx context.Context, reqs []Request) (int, Status, error) {
	e := engineOf(reqs)
	if e == nil {
		return Undefined, Status{}, nil
	}
	e.lock()
	defer e.unlock()
	if allInactive(reqs) {
		return Undefined, Status{}, nil
	}
	if i := firstReady(reqs); i >= 0 {
		st, err := reqs[i].wait(ctx)
		return i, st, err
	}
	if err := e.waitAny(ctx, reqs); err != nil {
		return Undefined, Status{}, err
	}
	i := firstReady(reqs)
	st, err := reqs[i].wait(ctx)
	return i, st, err
}

// Waitsome waits until at least one of reqs completes, then, for every
// request of reqs that has completed, sets it to null and appends its
// index to indices, its status to statuses (if not nil) and its error to
// errs (if not nil); it returns the three slices. If every request is
// null it returns indices nil. The first error of a request is also
// returned as the error, naming its index.
func Waitsome(ctx context.Context, reqs []Request, indices []int, statuses []Status, errs []error) ([]int, []Status, []error, error) {
	e := engineOf(reqs)
	if e == nil {
		return nil, statuses, errs, nil
	}
	e.lock()
	defer e.unlock()
	if allInactive(reqs) {
		return nil, statuses, errs, nil
	}
	if firstReady(reqs) < 0 {
		if err := e.waitAny(ctx, reqs); err != nil {
			return indices, statuses, errs, err
		}
	}
	return e.collect(reqs, indices, statuses, errs)
}

// Testsome advances the context once and, for every request of reqs that
// has completed, does what Waitsome does; it returns indices empty (not
// nil) if none has, and nil if every request is null.
func Testsome(reqs []Request, indices []int, statuses []Status, errs []error) ([]int, []Status, []error, error) {
	e := engineOf(reqs)
	if e == nil {
		return nil, statuses, errs, nil
	}
	e.lock()
	defer e.unlock()
	if allInactive(reqs) {
		return nil, statuses, errs, nil
	}
	e.advanceOnce()
	if indices == nil {
		indices = []int{}
	}
	return e.collect(reqs, indices, statuses, errs)
}

// collect releases every completed request of reqs, for Waitsome and
// Testsome.
func (e *engine) collect(reqs []Request, indices []int, statuses []Status, errs []error) ([]int, []Status, []error, error) {
	var first error
	for i := range reqs {
		if reqs[i].r == nil || !ready(reqs[i]) {
			continue
		}
		st, err := reqs[i].wait(nil)
		indices = append(indices, i)
		if statuses != nil {
			statuses = append(statuses, st)
		}
		if errs != nil {
			errs = append(errs, err)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("request %d: %w", i, err)
		}
	}
	return indices, statuses, errs, first
}

// Testany advances the context once and, if one of reqs has completed,
// sets it to null and returns its index, true, its status and error. If
// none has it returns Undefined and false; if every request is null,
// Undefined and true.
func Testany(reqs []Request) (int, bool, Status, error) {
	e := engineOf(reqs)
	if e == nil {
		return Undefined, true, Status{}, nil
	}
	e.lock()
	defer e.unlock()
	if allInactive(reqs) {
		return Undefined, true, Status{}, nil
	}
	i := firstReady(reqs)
	if i < 0 {
		e.advanceOnce()
		if i = firstReady(reqs); i < 0 {
			return Undefined, false, Status{}, nil
		}
	}
	st, err := reqs[i].wait(nil)
	return i, true, st, err
}

// Testall advances the context once and reports whether every request of
// reqs has completed; if so it sets each to null, fills statuses (if not
// nil) and returns the first error, naming its index. If not, it leaves
// every request as it was.
func Testall(reqs []Request, statuses []Status) (bool, error) {
	if statuses != nil && len(statuses) < len(reqs) {
		return false, fmt.Errorf("%w: %d statuses for %d requests", ErrCount, len(statuses), len(reqs))
	}
	e := engineOf(reqs)
	if e == nil {
		clear(statuses)
		return true, nil
	}
	e.lock()
	defer e.unlock()
	e.advanceOnce()
	for i := range reqs {
		if !inactive(reqs[i]) && !ready(reqs[i]) {
			return false, nil
		}
	}
	var first error
	for i := range reqs {
		st, err := reqs[i].wait(nil)
		if statuses != nil {
			statuses[i] = st
		}
		if err != nil && first == nil {
			first = fmt.Errorf("request %d: %w", i, err)
		}
	}
	return true, first
}

// waitAny waits until one of reqs is ready, with the engine locked.
func (e *engine) waitAny(ctx context.Context, reqs []Request) error {
	w := e.allocReq(reqWaiter)
	w.reqs = reqs
	err := e.wait(ctx, w.waitCond)
	e.freeReq(w)
	if err != nil {
		return e.waitErr(err, "Wait for one of "+strconv.Itoa(len(reqs))+" requests", noArg, noArg)
	}
	return nil
}

// firstReady returns the index of the first non-null request of reqs that
// Wait would return at once, or -1.
func firstReady(reqs []Request) int {
	for i := range reqs {
		if reqs[i].r != nil && ready(reqs[i]) {
			return i
		}
	}
	return -1
}

// inactive reports whether q is null or a persistent request not started:
// the calls on several requests pass over it.
func inactive(q Request) bool {
	return q.r == nil || q.r.gen == q.gen && q.r.persistent && !q.r.active
}

// allInactive reports whether every request of reqs is inactive.
func allInactive(reqs []Request) bool {
	for i := range reqs {
		if !inactive(reqs[i]) {
			return false
		}
	}
	return true
}

// ready reports whether Wait on a non-null q would return at once with an
// operation's result: an inactive persistent request is as null.
func ready(q Request) bool {
	return q.r.gen != q.gen || q.r.done && (!q.r.persistent || q.r.active)
}

// waiterDone is the condition of a reqWaiter: one of its requests ready
// (Waitany), or a message that fits its match data arrived (Probe).
func (r *request) waiterDone() bool {
	if r.reqs != nil {
		return firstReady(r.reqs) >= 0
	}
	return r.e.unexp.find(r.ctx, r.src, r.tag) != nil || r.e.ft.on && r.e.ftRecv(r.ctx, r.src) != nil
}
