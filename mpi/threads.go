package mpi

import (
	"context"
	"runtime"
	"sync/atomic"

	"github.com/amigo-hpc/amigo"
)

// Goroutine safety (MPI_THREAD_MULTIPLE): any goroutine may call any
// function of the package at any time. The engine of a context is guarded
// by one lock (engineLock); every call takes it for as long as it touches
// the engine's queues, and nothing of the layer runs without it — the
// handler and the completion callbacks run inside Advance, and only the
// goroutine that holds the lock advances the context.
//
// The lock is the amigo context's hold (amigo.Context.TryHold): the
// goroutine that locks the engine owns the context until it unlocks it,
// so it sends straight into the peers' descriptor buffers and advances
// the context without taking it again. One word serves both, and a call
// from a single goroutine pays one compare-and-swap to enter and one store
// to leave, what holding the context alone costs.
//
// A call that waits (Recv, Wait, a blocking collective, ...) takes the
// progress role if nobody has it: it advances the context, with the lock
// held, until its own operation completes. Meanwhile, after an Advance, it
// lets in the goroutines that want the lock (to post, or to look at an
// operation of theirs), keeping the role, and wakes the goroutines asleep
// when an operation completed. A goroutine that waits while another has
// the role sleeps on a channel, without the lock, until woken; it then
// finds its operation complete, or sleeps again. When the driver's own
// operation completes it gives the role up and wakes the sleepers, and
// the first to find its operation still pending takes the role on. So
// blocking calls from several goroutines all make progress, one goroutine
// at a time advances the context, and a single goroutine pays one atomic
// load per poll for the others.
//
// Memory ordering of the lock. lock is a compare-and-swap of the
// context's busy word (amigo.Context.TryHold): it sees every write of the
// goroutine that unlocked before. unlock is a release store of that word
// (amigo.Held.Release; a plain store on amd64, package order), followed by
// a load of want, the count of goroutines in lockSlow: if any, it hands a
// token to one of them (park). The store is not a fence, so the load of
// want may be performed before the store is visible to other processors.
// A goroutine in lockSlow therefore counts itself in want (an atomic add,
// a fence), then issues amigo.HoldBarrier, then tries the lock a last time
// before it parks: the unlocking goroutine's store either came before the
// barrier, and that last try sees the word free; or after it, and so did
// its load of want, which sees the waiter and hands it a token. Where
// stores are fenced (package order: under the race detector, off amd64,
// with AMIGO_FENCED_STORES=1) the store is an atomic exchange, the load
// cannot pass it, and the barrier does nothing. A token can outlive its waiter (one that took the lock by its
// own try meanwhile): the next to park finds it, tries the lock and parks
// again, which costs a try, never a lost wake-up.

// engineLock is the engine's lock and its progress role.
type engineLock struct {
	// held is the context's hold, set while the engine is locked (the
	// lock is the hold); it is the same pointer every time.
	held *amigo.Held
	// want counts goroutines that wait to take the lock (lockSlow): the
	// driver gives way to them after its next Advance, and unlock hands
	// one of them a token on park.
	want atomic.Int32
	park chan struct{} // capacity 1: the token of a parked lockSlow
	// parked counts the goroutines parked in lockSlow now (for tests).
	parked atomic.Int32
	// The rest is guarded by the lock.
	driving  bool        // a goroutine advances the context in wait
	driveFor func() bool // the driver's own condition
	// driveDone is the flag driveFor reports, when the driver's wait
	// gave it (waitDone): the condition reads it in place of calling
	// driveFor, one indirect call less a poll.
	driveDone *bool
	// driveMark is events when the driver took the role: if a sleeper's
	// operation may have completed since, the driver wakes the sleepers.
	driveMark uint64
	// events counts what may end a wait: completions, arrivals.
	events   uint64
	sleepers int
	wakeCh   chan struct{} // closed to wake the sleepers
	// inDirect is set while a collective runs without a schedule
	// (holdDirect), or a Recv waits in exp (recvExpected): the scratch
	// (small, partial, exp) is the engine's own, so a concurrent
	// collective takes the schedule path and a concurrent Recv the
	// posted queue.
	inDirect bool
}

// lock takes the engine, and with it the context, for the calling
// goroutine.
func (e *engine) lock() {
	if h := e.ac.TryHold(); h != nil {
		e.held = h
		return
	}
	e.lockSlow()
}

// lockSlowSpins is how many times lockSlow yields the processor and tries
// again before it parks: most holders leave within a few microseconds
// (a post, a look at a request), and parking costs a system call
// (amigo.HoldBarrier) and a trip through the scheduler.
const lockSlowSpins = 16

// lockSlow is lock for a goroutine that found the engine taken. It says so
// (want) and rings the context's doorbell, so that a driver asleep in the
// context's Wait gives way; it tries again, yielding the processor, and
// then parks until an unlock hands it a token (see the memory ordering
// above), and so on.
func (e *engine) lockSlow() {
	e.want.Add(1)
	_ = e.ac.Do(e.nop)
	for i := 0; ; i++ {
		if h := e.ac.TryHold(); h != nil {
			e.held = h
			break
		}
		if i < lockSlowSpins {
			runtime.Gosched()
			continue
		}
		amigo.HoldBarrier()
		if h := e.ac.TryHold(); h != nil {
			e.held = h
			break
		}
		e.parked.Add(1)
		<-e.park
		e.parked.Add(-1)
		// Woken: the unlocking goroutine may take the engine back before
		// this one runs (a driver keeps the role): try and yield again
		// before the next barrier.
		i = -1
	}
	e.want.Add(-1)
}

// unlock gives the engine, and the context, back, and hands a token to a
// goroutine that waits for them, if any.
func (e *engine) unlock() {
	e.held.Release()
	if e.want.Load() > 0 {
		e.handOff()
	}
}

// handOff gives a goroutine parked in lockSlow a token, unless one waits
// already.
func (e *engine) handOff() {
	select {
	case e.park <- struct{}{}:
	default:
	}
}

// driveCondition returns the condition the driver waits on: its own, or
// another goroutine that wants the engine, or sleepers that may have been
// completed. The context's wait calls it once a poll: the test is written
// out in the closure, where a method value would cost every poll a call or
// two more.
func (e *engine) driveCondition() func() bool {
	return func() bool {
		if d := e.driveDone; d != nil {
			if *d {
				return true
			}
		} else if e.driveFor() {
			return true
		}
		return e.want.Load() > 0 || e.sleepers > 0 && e.events != e.driveMark || e.pollFailures()
	}
}

// wait advances the context until cond holds or ctx ends, sharing the
// progress role with the other goroutines that wait (see above). It is
// called and returns with the engine locked. Messages posted before it are
// injected by its first Advance.
func (e *engine) wait(ctx context.Context, cond func() bool) error {
	return e.waitDone(ctx, nil, cond)
}

// waitDone is wait for a condition that is a flag, done, which cond
// reports: a request's, a schedule's, recvSmall's. (done nil: cond only.)
// The driver's condition reads the flag itself every poll. What the
// caller's last steps or the handlers of the last pass sent leaves before
// it returns (flush): a Recv that matched a synchronous send returns with
// the acknowledgement on its way, which over TCP may wait for the link's
// Progress (the link writes at once only when nothing it wrote before is
// in flight), and the caller may make no further call.
func (e *engine) waitDone(ctx context.Context, done *bool, cond func() bool) error {
	err := e.awaitDone(ctx, done, cond)
	e.flush()
	return err
}

// awaitDone is waitDone without its flush.
func (e *engine) awaitDone(ctx context.Context, done *bool, cond func() bool) error {
	if len(e.ft.fresh) > 0 {
		e.applyFailures()
	}
	if cond() {
		return nil
	}
	e.unflushed = false
	for e.driving {
		// Another goroutine advances the context: sleep until it wakes
		// us, with our operation complete or the role free.
		if err := e.sleep(ctx); err != nil {
			return err
		}
		if cond() {
			return nil
		}
	}
	e.driving = true
	err := e.drive(ctx, done, cond)
	for err == nil {
		if len(e.ft.fresh) > 0 {
			// A peer failed: fail what waits for it (ft.go).
			e.applyFailures()
		}
		if cond() {
			break
		}
		// Another goroutine wants the engine, or operations of sleepers
		// completed: wake them, let them in, and go on with the role.
		e.wakeSleepers()
		e.yield()
		err = e.drive(ctx, done, cond)
	}
	e.driving = false
	e.wakeSleepers() // one of them takes the role on
	return err
}

// drive advances the context until cond holds, ctx ends, another
// goroutine wants the engine, or an operation completed while goroutines
// sleep.
func (e *engine) drive(ctx context.Context, done *bool, cond func() bool) error {
	e.driveFor, e.driveDone, e.driveMark = cond, done, e.events
	if e.want.Load() > 0 {
		// Advance at least once before giving way again, or the
		// driver could give way without progress.
		e.advanceOnce()
	}
	err := e.held.Wait(ctx, e.driveCond)
	e.driveFor, e.driveDone = nil, nil
	return err
}

// yield lets the goroutines that wait for the engine in: it releases it,
// gives them the processor, and takes it again. The driver keeps its role
// meanwhile: a goroutine that comes in to wait sleeps.
func (e *engine) yield() {
	e.unlock()
	for i := 0; i < 4 && e.want.Load() > 0; i++ {
		runtime.Gosched()
	}
	e.lock()
}

// sleep waits, with the engine released, until the driver wakes the
// sleepers or ctx ends.
func (e *engine) sleep(ctx context.Context) error {
	if e.wakeCh == nil {
		e.wakeCh = make(chan struct{})
	}
	ch := e.wakeCh
	e.sleepers++
	e.unlock()
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	var err error
	select {
	case <-ch:
	case <-done:
		err = ctx.Err()
	}
	e.lock()
	e.sleepers--
	return err
}

// wakeSleepers wakes every goroutine asleep in wait: each finds its
// operation complete or takes the progress role.
func (e *engine) wakeSleepers() {
	if e.sleepers > 0 && e.wakeCh != nil {
		close(e.wakeCh)
		e.wakeCh = nil
	}
}
