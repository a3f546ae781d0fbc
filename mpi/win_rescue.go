package mpi

import (
	"context"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo"
)

// Rescue of accumulates whose target does not answer (the protocol is in
// win_am.go). A timer of the window's, armed while accumulate messages are
// in flight, looks at every target with messages out each
// Options.AccumulateRescue (20 ms by default: long beside a round trip and
// beside the time slices a loaded host takes a rank's processor away for,
// so that a target inside mpi answers first; short beside a computation):
// a target that sent no reply over a whole period is taken to be busy
// outside mpi, and the origin takes its messages back and applies them
// itself by GET and PUT under the target's bulk bit, or by remote atomics,
// which the target's adapter serves without the target's program: shared
// memory by the initiator's own instructions or the owner's adapter
// engine, TCP by the owner's engine goroutine.

// rescueTimeout bounds the swap that takes the messages back: the
// target's adapter serves it without the program, so only a lost peer
// makes it long.
const rescueTimeout = 10 * time.Second

// claimBase is the offset of the claim words in a window's control region:
// one per origin rank, after the lock and users words (and a dynamic
// window's table).
func (w *Win) claimBase() int {
	if w.dyn != nil {
		return dynCtlSize
	}
	return ctlClaimOff
}

// ctlClaimOff is where the claim words start in the control region of a
// window that is not dynamic.
const ctlClaimOff = 64

// claim claims the message seq from origin for this rank to apply, and
// reports whether it may: the origin's claim word moves from seq-1 to seq.
// It fails when the origin took the message back (the word is at seq or
// beyond), or when an earlier message is not claimed yet.
func (w *Win) claim(origin int, seq uint32) bool {
	p := (*uint64)(unsafe.Pointer(&w.ctl.Bytes()[w.claimBase()+8*origin]))
	return atomic.CompareAndSwapUint64(p, uint64(seq-1), uint64(seq))
}

// seqAfter reports whether sequence number a comes after b, as numbers
// that wrap: those in flight at a time are far fewer than 1<<31.
func seqAfter(a, b uint32) bool { return int32(a-b) > 0 }

// armRescue starts the rescue timer if it is not running; the caller
// holds the engine's lock.
func (w *Win) armRescue() {
	if !w.rescueArmed {
		w.rescueArmed = true
		w.rescueTimer.Reset(w.rescueAfter)
	}
}

// rescueTick is the rescue timer's function: it starts taking back the
// messages of every target that did not answer for a whole period, fails
// those of a target whose rescue itself got no answer for rescueTimeout,
// and rearms the timer while messages are out. It only posts: the rescue
// goes on in the callbacks of its atomics, inside the Advance of whoever
// drives the context.
func (w *Win) rescueTick() {
	e := w.comm.e
	e.lock()
	defer e.unlock()
	w.rescueArmed = false
	if w.freed {
		return
	}
	for t, out := range w.msgOut {
		switch {
		case out == 0:
			w.rescueMark[t] = 0
		case w.rescuing[t] != nil:
			if r := w.rescuing[t]; time.Since(r.start) > rescueTimeout {
				r.fail(errorf("mpi: accumulate on rank %d: rank %d does not answer (%v): %w", t, t, rescueTimeout, context.DeadlineExceeded))
			}
		case w.rescueMark[t] != w.replies[t]+1:
			// Look again in a period: the replies counted now are the
			// mark.
			w.rescueMark[t] = w.replies[t] + 1
		default:
			w.rescueMark[t] = 0
			w.rescue(t)
		}
	}
	for _, out := range w.msgOut {
		if out > 0 {
			w.armRescue()
			break
		}
	}
}

// rescueOp is the rescue of the messages to one target, from the swap of
// its claim word to the posting of their element updates.
type rescueOp struct {
	w      *Win
	target int
	last   uint32 // the last sequence number sent to the target
	start  time.Time
	p      amigo.AtomicParams
	old    uint64
	taken  []*rmaMsg // the messages to apply, in order
	next   int       // the next of them to apply
	buf    []byte    // a copy of the target's memory a message spans
	bulk   bool      // this rank holds the target's bulk bit
	over   bool      // failed, or its updates posted
}

// rescue starts taking back the messages to target that it has not
// claimed; the caller holds the engine's lock.
func (w *Win) rescue(target int) {
	live := false
	for _, m := range w.msgs {
		if !m.inUse || m.target != target || m.settled || m.cancelled {
			continue
		}
		if m.k.size() > 8 {
			// Wider than any remote atomic: only the owner applies it.
			return
		}
		live = true
	}
	if !live {
		return
	}
	r := &rescueOp{w: w, target: target, last: w.seq[target], start: time.Now()}
	w.rescuing[target] = r
	w.rescues++
	r.p = amigo.AtomicParams{Dest: w.eps[target], Remote: w.ctlKeys[target], Offset: uint64(w.claimBase() + 8*w.comm.rank),
		Op: amigo.AtomicSwap, Type: amigo.Uint64, Operand: uint64(r.last), Result: &r.old, Done: r.swapped}
	if err := w.comm.e.held.Atomic(&r.p); err != nil {
		r.fail(errorf("mpi: accumulate on rank %d: %w", target, err))
	}
}

// swapped is the callback of the swap: the messages after the last one
// the target claimed are this rank's to apply.
func (r *rescueOp) swapped(err error) {
	w := r.w
	w.comm.e.events++
	if r.over {
		return
	}
	if err != nil {
		r.fail(errorf("mpi: accumulate on rank %d, which does not answer: %w", r.target, w.comm.e.peerFailure(err)))
		return
	}
	claimed := uint32(r.old)
	for _, m := range w.msgs {
		if m.inUse && m.target == r.target && !m.settled && !m.cancelled && seqAfter(m.seq, claimed) && !seqAfter(m.seq, r.last) {
			m.cancelled = true
			r.taken = append(r.taken, m)
		}
	}
	if len(r.taken) == 0 {
		r.end()
		return
	}
	w.bypass[r.target] = true
	// In the order they were sent: accumulates from one origin keep
	// their order at the target.
	slices.SortFunc(r.taken, func(a, b *rmaMsg) int { return int(int32(a.seq - b.seq)) })
	r.apply()
}

// apply applies the messages taken: as the owner would, by plain loads
// and stores under the users word's bulk bit (claimed here with a remote
// compare-and-swap), on a copy this rank GETs and PUTs back, a few round
// trips whatever the number of elements; or, while origins use remote
// atomics on the window (the word is not zero), with remote atomics
// element by element.
func (r *rescueOp) apply() {
	w := r.w
	r.p = amigo.AtomicParams{Dest: w.eps[r.target], Remote: w.ctlKeys[r.target], Offset: ctlUsersOff,
		Op: amigo.AtomicCAS, Type: amigo.Uint64, Operand: bulkBit, Compare: 0, Result: &r.old, Done: r.claimed}
	if w.rescueUser[r.target] {
		// This rank counts as a user of atomics already.
		r.post()
		return
	}
	r.atomic()
}

// atomic posts r.p, or fails the rescue.
func (r *rescueOp) atomic() {
	if err := r.w.comm.e.held.Atomic(&r.p); err != nil {
		r.fail(errorf("mpi: accumulate on rank %d: %w", r.target, err))
	}
}

// claimed is the callback of the bulk bit's compare-and-swap.
func (r *rescueOp) claimed(err error) {
	w := r.w
	w.comm.e.events++
	switch {
	case r.over:
	case err != nil:
		r.fail(errorf("mpi: accumulate on rank %d: %w", r.target, w.comm.e.peerFailure(err)))
	case r.old == 0:
		r.bulk = true
		r.get()
	case r.old&bulkBit != 0:
		// Another plain update (the owner's, or a rescue's) holds it: it
		// needs nobody to end.
		r.atomic()
	default:
		// Remote atomics in use: count in the word, as useAtomics
		// does, and update element by element.
		r.p.Op, r.p.Operand, r.p.Done = amigo.AtomicAdd, 1, r.counted
		r.atomic()
	}
}

// get reads the span of the next message taken into r.buf.
func (r *rescueOp) get() {
	w := r.w
	if r.next == len(r.taken) {
		r.release()
		return
	}
	m := r.taken[r.next]
	span := int(m.lay.span())
	if cap(r.buf) < span {
		r.buf = make([]byte, span)
	}
	r.buf = r.buf[:span]
	if err := w.ac.Get(w.eps[r.target], r.buf, m.pl.key, m.pl.off, r.got); err != nil {
		r.fail(errorf("mpi: accumulate on rank %d: %w", r.target, err))
	}
}

// step is the start of a rescue's callbacks: it counts the event for the
// waiters and reports whether the rescue goes on (not over, and err nil;
// an error fails it).
func (r *rescueOp) step(err error) bool {
	r.w.comm.e.events++
	if r.over {
		return false
	}
	if err != nil {
		r.fail(errorf("mpi: accumulate on rank %d: %w", r.target, r.w.comm.e.peerFailure(err)))
		return false
	}
	return true
}

// got applies the next message to the copy and puts it back.
func (r *rescueOp) got(err error) {
	w := r.w
	if !r.step(err) {
		return
	}
	m := r.taken[r.next]
	origin := m.origin
	if m.op.code == opNoOp {
		origin = nil
	}
	w.eachBlock(r.buf, m.lay, origin, m.result, func(dst, s, o []byte) { w.applyPlain(m.k, m.op, dst, s, o) })
	if m.op.code == opNoOp {
		r.put(nil) // nothing changed
		return
	}
	if rescueHook != nil {
		rescueHook()
	}
	// Only the blocks go back: the gaps between them may have changed
	// since the Get (a Put of another origin's), and are not this
	// message's to write.
	if lay := m.lay; lay.blocks > 1 && lay.stride != lay.blockLen {
		st := amigo.Strided{Count: lay.blocks, Block: int(lay.blockLen), LocalStride: int(lay.stride), RemoteStride: int(lay.stride)}
		err = w.ac.PutStrided(w.eps[r.target], r.buf, st, m.pl.key, m.pl.off, r.put)
	} else {
		err = w.ac.Put(w.eps[r.target], r.buf, m.pl.key, m.pl.off, r.put)
	}
	if err != nil {
		r.fail(errorf("mpi: accumulate on rank %d: %w", r.target, err))
	}
}

// rescueHook, when set (by tests only), runs after a rescue applied a
// message to its copy of the target's memory and before it puts the copy
// back.
var rescueHook func()

// put is the callback of a message's Put: the message is complete at the
// target (a Put over the adapters amigo has completes where it lands).
func (r *rescueOp) put(err error) {
	if !r.step(err) {
		return
	}
	m := r.taken[r.next]
	r.next++
	m.settle(nil)
	r.get()
}

// release clears the bulk bit and ends the rescue.
func (r *rescueOp) release() {
	w := r.w
	r.bulk = false
	r.p = amigo.AtomicParams{Dest: w.eps[r.target], Remote: w.ctlKeys[r.target], Offset: ctlUsersOff,
		Op: amigo.AtomicAdd, Type: amigo.Uint64, Operand: ^uint64(bulkBit - 1), Done: r.released}
	if err := w.comm.e.held.Atomic(&r.p); err != nil {
		r.end() // the word cannot be reached: the target failed
		return
	}
}

func (r *rescueOp) released(error) {
	r.w.comm.e.events++
	if !r.over {
		r.end()
	}
}

// counted is the callback of the users word's add, and of the looks that
// follow it while a plain update holds the word.
func (r *rescueOp) counted(err error) {
	w := r.w
	if !r.step(err) {
		return
	}
	w.rescueUser[r.target] = true
	if r.old&bulkBit != 0 {
		r.p.Op, r.p.Operand = amigo.AtomicOr, 0
		r.atomic()
		return
	}
	r.post()
}

// post posts the element updates of the messages taken, and ends the
// rescue.
func (r *rescueOp) post() {
	w := r.w
	for _, m := range r.taken[r.next:] {
		es := m.k.size()
		n := int(uint64(m.lay.blocks)*m.lay.blockLen) / es
		m.left = n
		origin := m.origin
		if m.op.code == opNoOp {
			origin = nil
		}
		issued, err := w.updates(m.k, m.op, origin, m.result, nil, r.target, m.pl, m.lay, nil, m)
		if err != nil {
			if m.err == nil {
				m.err = err
			}
			m.left -= n - issued
			if m.left == 0 {
				m.settle(nil)
			}
		}
	}
	r.next = len(r.taken)
	r.end()
}

// fail settles every message to the target still waiting with err, and
// ends the rescue.
func (r *rescueOp) fail(err error) {
	w := r.w
	rest := r.taken[r.next:]
	for _, m := range w.msgs {
		if m.inUse && m.target == r.target && !m.settled && (!m.cancelled && !seqAfter(m.seq, r.last) || slices.Contains(rest, m)) {
			m.cancelled = true
			m.settle(err)
		}
	}
	r.next = len(r.taken)
	if r.bulk {
		// Another look at the target would fail too, most likely; if it
		// does not, the bit must not stay.
		r.release()
		return
	}
	r.end()
}

func (r *rescueOp) end() {
	r.over = true
	if r.w.rescuing[r.target] == r {
		r.w.rescuing[r.target] = nil
	}
	r.w.comm.e.events++ // wakes accumulates waiting in awaitRescue
}

// updated counts one element update of a rescued message done, and
// settles the message after the last.
func (m *rmaMsg) updated(err error) {
	if err != nil && m.err == nil {
		m.err = err
	}
	m.left--
	if m.left == 0 {
		m.settle(nil)
	}
}

// awaitRescue waits until the rescue of target's messages is over; the
// caller holds the engine's lock.
func (w *Win) awaitRescue(target int) error {
	ctx, cancel := context.WithTimeout(context.Background(), rescueTimeout)
	defer cancel()
	if err := w.comm.e.wait(ctx, func() bool { return w.rescuing[target] == nil }); err != nil {
		return errorf("mpi: accumulate on rank %d: %w", target, err)
	}
	return nil
}

// dropRescueUser takes back the count a rescue added to target's users
// word, at the end of the epoch; the caller holds the engine's lock.
func (w *Win) dropRescueUser(ctx context.Context, target int) error {
	if !w.rescueUser[target] {
		return nil
	}
	w.rescueUser[target] = false
	if _, err := w.ctlOp(ctx, target, ctlUsersOff, amigo.AtomicAdd, ^uint64(0), 0); err != nil {
		return errorf("mpi: ending atomics on rank %d: %w", target, err)
	}
	return nil
}
