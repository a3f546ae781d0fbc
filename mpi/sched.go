package mpi

import (
	"context"
	"strconv"
)

// A collective is a schedule: a list of steps in rounds. A round starts its
// steps in order — sends and receives are posted, local copies and
// reductions run on the spot — and ends when every send and receive it
// posted has completed; then the next round starts. Completions arrive in
// callbacks inside Advance, so a schedule makes progress whenever its
// context is advanced: a blocking collective waits for its schedule, a
// nonblocking one returns a Request that names it.
//
// A collective's messages travel in its communicator's collective context,
// tagged with the number of collectives the communicator started before it,
// which every rank counts alike (collectives are called in the same order on
// every rank). So no collective's message matches another's receive, even
// when several nonblocking collectives are in flight.

type stepKind uint8

const (
	stSend      stepKind = iota
	stRecv               // receive into a
	stCopy               // copy(a, b)
	stReduce             // a = b ∘ a
	stReduceRev          // a = a ∘ b; b is clobbered
	stCall               // start fn, which completes through its callback
	stEnd                // end of a round
)

type step struct {
	kind stepKind
	peer int32
	a, b []byte
	fn   func(done func(error)) error
}

type sched struct {
	e   *engine
	c   *Comm
	gen uint32
	tag int32
	k   kind
	op  Op

	steps   []step
	pos     int
	pending int
	running bool
	done    bool
	sync    bool // every send waits for the AMI's completion, even small ones
	dirty   bool // failed with operations in flight: scratch is not reused
	err     error
	scr     [][]byte   // scratch taken from the pool
	recvs   []*request // receives posted, for cancellation
	req     *request   // the handle of a nonblocking collective
	cond    func() bool
	next    *sched
}

func (e *engine) newSched(c *Comm) *sched {
	s := e.schedFree
	if s == nil {
		s = &sched{e: e}
		s.cond = func() bool { return s.done }
	} else {
		e.schedFree = s.next
		s.next = nil
	}
	s.c = c
	c.inflight++
	s.tag = int32(c.seq & TagUB)
	c.seq++
	e.stats.Collectives++
	return s
}

func (e *engine) freeSched(s *sched) {
	if !s.dirty {
		for _, b := range s.scr {
			e.scratch.put(b)
		}
	}
	clear(s.scr)
	clear(s.steps)
	clear(s.recvs)
	s.scr, s.steps, s.recvs = s.scr[:0], s.steps[:0], s.recvs[:0]
	s.gen++
	s.c, s.req, s.err, s.op = nil, nil, nil, Op{}
	s.pos, s.pending, s.k = 0, 0, kInvalid
	s.running, s.done, s.dirty, s.sync = false, false, false, false
	s.next = e.schedFree
	e.schedFree = s
}

func (s *sched) send(buf []byte, peer int) {
	s.steps = append(s.steps, step{kind: stSend, peer: int32(peer), a: buf})
}

func (s *sched) recv(buf []byte, peer int) {
	s.steps = append(s.steps, step{kind: stRecv, peer: int32(peer), a: buf})
}

func (s *sched) copy(dst, src []byte) {
	if len(src) == 0 || len(dst) > 0 && &dst[0] == &src[0] {
		return
	}
	s.steps = append(s.steps, step{kind: stCopy, a: dst, b: src})
}

// accLeft makes acc = in ∘ acc: in holds the contribution of lower ranks.
func (s *sched) accLeft(acc, in []byte) {
	s.steps = append(s.steps, step{kind: stReduce, a: acc, b: in})
}

// accRight makes acc = acc ∘ in: in holds the contribution of higher
// ranks. For a non-commutative op it clobbers in.
func (s *sched) accRight(acc, in []byte) {
	k := stReduce
	if !s.op.commute {
		k = stReduceRev
	}
	s.steps = append(s.steps, step{kind: k, a: acc, b: in})
}

// call adds a step that starts an operation of the AMI's and counts it
// complete when the operation calls done.
func (s *sched) call(fn func(done func(error)) error) {
	s.steps = append(s.steps, step{kind: stCall, fn: fn})
}

func (s *sched) end() {
	if n := len(s.steps); n > 0 && s.steps[n-1].kind != stEnd {
		s.steps = append(s.steps, step{kind: stEnd})
	}
}

// tmp returns a scratch buffer of n bytes, given back when the schedule is
// freed.
func (s *sched) tmp(n int) []byte {
	b := s.e.scratch.get(n)
	s.scr = append(s.scr, b)
	return b
}

// progress runs rounds while nothing is pending.
func (s *sched) progress() {
	if s.running || s.done {
		return
	}
	s.running = true
	for s.pending == 0 && !s.done {
		if s.err != nil || s.pos >= len(s.steps) {
			s.finish()
			break
		}
		s.round()
	}
	s.running = false
}

func (s *sched) round() {
	e, c := s.e, s.c
	for s.pos < len(s.steps) && s.err == nil {
		st := &s.steps[s.pos]
		s.pos++
		switch st.kind {
		case stEnd:
			return
		case stSend:
			r, err := e.sendMsg(c.eps[st.peer], c.coll, int32(c.rank), s.tag, st.a, s.sync)
			if err != nil {
				s.fail(err)
				return
			}
			if r != nil {
				r.owner, r.ownerGen = s, s.gen
				s.pending++
			}
		case stRecv:
			r := e.allocReq(reqRecv)
			r.ctx, r.src, r.tag, r.buf = c.coll, st.peer, s.tag, st.a
			r.owner, r.ownerGen = s, s.gen
			s.pending++
			s.recvs = append(s.recvs, r)
			e.postRecv(r) // may complete at once
		case stCopy:
			copy(st.a, st.b)
		case stReduce:
			combine(s.k, s.op, st.b, st.a)
		case stReduceRev:
			combine(s.k, s.op, st.a, st.b)
			copy(st.a, st.b)
		case stCall:
			s.pending++
			gen := s.gen
			if err := st.fn(func(err error) {
				if s.gen == gen {
					s.commDone(err)
				}
			}); err != nil {
				s.pending--
				s.fail(err)
				return
			}
		}
	}
}

// commDone counts one send, receive or call of the current round complete.
func (s *sched) commDone(err error) {
	s.pending--
	if err != nil && s.err == nil {
		s.fail(err)
	}
	s.progress()
}

// fail ends the schedule with err: receives still posted are canceled;
// operations in flight are left to complete into a schedule that no longer
// listens, and its scratch is not reused.
func (s *sched) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	for _, r := range s.recvs {
		if r.posted && r.owner == s && r.ownerGen == s.gen {
			s.e.posted.remove(r)
			s.e.freeReq(r)
			s.pending--
		}
	}
	if s.pending > 0 {
		s.dirty = true
	}
	s.finish()
}

func (s *sched) finish() {
	if s.done {
		return
	}
	s.done = true
	s.e.events++
	s.c.untrack()
	if s.req != nil {
		s.e.complete(s.req, s.err)
	}
}

// run runs s to completion on the calling goroutine, which owns the
// context, and frees it.
//
// The context is held for the whole call, as for every call of the layer
// (the engine's lock is the context's hold, threads.go): it is taken once,
// before the first message leaves, rather than after each send and again to
// wait, where each taking is a fence that waits for the message's cache
// line to reach the peer.
func (c *Comm) run(ctx context.Context, s *sched) error {
	e := c.e
	e.pollStart()
	e.direct = true
	s.progress()
	e.direct = false
	if !s.done {
		if err := e.waitDone(ctx, &s.done, s.cond); err != nil {
			err = e.waitErr(err, "collective on a communicator of "+strconv.Itoa(c.size)+" ranks", noArg, noArg)
			s.fail(err)
			e.freeSched(s)
			return err
		}
	}
	e.flush()
	err := s.err
	e.freeSched(s)
	return err
}

// start starts s and returns a Request that completes with it.
func (c *Comm) start(s *sched) Request {
	c.e.pollStart()
	r := c.e.allocReq(reqColl)
	r.sched = s
	s.req = r
	c.e.direct = true
	s.progress()
	c.e.direct = false
	return Request{r: r, gen: r.gen}
}
