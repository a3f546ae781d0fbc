package mpi

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
)

// Goroutine safety (MPI_THREAD_MULTIPLE): any goroutine may call any
// function of the package at any time. The engine of a context is guarded
// by one mutex (engineLock); every call takes it for as long as it touches
// the engine's queues, and nothing of the layer runs without it — the
// handler and the completion callbacks run inside Advance, and only the
// goroutine that holds the mutex advances the context.
//
// A call that waits (Recv, Wait, a blocking collective, ...) takes the
// progress role if nobody has it: it advances the context, with the mutex
// held, until its own operation completes. Meanwhile, after an Advance, it
// lets in the goroutines that want the mutex (to post, or to look at an
// operation of theirs), keeping the role, and wakes the goroutines asleep
// when an operation completed. A goroutine that waits while another has
// the role sleeps on a channel, without the mutex, until woken; it then
// finds its operation complete, or sleeps again. When the driver's own
// operation completes it gives the role up and wakes the sleepers, and
// the first to find its operation still pending takes the role on. So
// blocking calls from several goroutines all make progress, one goroutine
// at a time advances the context, and a single goroutine pays one
// uncontended lock and unlock per call and one atomic load per poll.

// engineLock is the engine's lock and its progress role.
type engineLock struct {
	mu sync.Mutex
	// want counts goroutines that wait to take mu: the driver gives way to
	// them after its next Advance.
	want atomic.Int32
	// The rest is guarded by mu.
	driving  bool        // a goroutine advances the context in wait
	driveFor func() bool // the driver's own condition
	// driveMark is events when the driver took the role: if a sleeper's
	// operation may have completed since, the driver wakes the sleepers.
	driveMark uint64
	// events counts what may end a wait: completions, arrivals.
	events   uint64
	sleepers int
	wakeCh   chan struct{} // closed to wake the sleepers
	// inDirect is set while a collective runs without a schedule
	// (holdDirect): its scratch (small, partial, exp) is the engine's
	// own, so a concurrent collective takes the schedule path.
	inDirect bool
}

// lock takes the engine for the calling goroutine. A goroutine that finds
// it taken says so (want) and rings the context's doorbell, so that a
// driver asleep in the context's Wait gives way.
func (e *engine) lock() {
	if e.mu.TryLock() {
		return
	}
	e.want.Add(1)
	_ = e.ac.Do(e.nop)
	e.mu.Lock()
	e.want.Add(-1)
}

func (e *engine) unlock() { e.mu.Unlock() }

// driveCondition is the condition the driver waits on: its own, or another
// goroutine that wants the engine, or sleepers that may have been
// completed.
func (e *engine) driveCondition() bool {
	return e.driveFor() || e.want.Load() > 0 || e.sleepers > 0 && e.events != e.driveMark || e.pollFailures()
}

// wait advances the context until cond holds or ctx ends, sharing the
// progress role with the other goroutines that wait (see above). It is
// called and returns with the engine locked. Messages posted before it are
// injected by its first Advance.
func (e *engine) wait(ctx context.Context, cond func() bool) error {
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
	err := e.drive(ctx, cond)
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
		err = e.drive(ctx, cond)
	}
	e.driving = false
	e.wakeSleepers() // one of them takes the role on
	return err
}

// drive advances the context until cond holds, ctx ends, another
// goroutine wants the engine, or an operation completed while goroutines
// sleep.
func (e *engine) drive(ctx context.Context, cond func() bool) error {
	e.driveFor, e.driveMark = cond, e.events
	if e.want.Load() > 0 {
		// Advance at least once before giving way again, or the
		// driver could give way without progress.
		e.advanceOnce()
	}
	var err error
	if e.held != nil {
		err = e.held.Wait(ctx, e.driveCond)
	} else {
		err = e.ac.Wait(ctx, e.driveCond)
	}
	e.driveFor = nil
	return err
}

// yield lets the goroutines that wait for the engine in: it releases it,
// gives them the processor, and takes it again. The driver keeps its role
// meanwhile: a goroutine that comes in to wait sleeps.
func (e *engine) yield() {
	held := e.dropHold()
	e.mu.Unlock()
	for i := 0; i < 4 && e.want.Load() > 0; i++ {
		runtime.Gosched()
	}
	e.lock()
	e.retakeHold(held)
}

// sleep waits, with the engine released, until the driver wakes the
// sleepers or ctx ends.
func (e *engine) sleep(ctx context.Context) error {
	if e.wakeCh == nil {
		e.wakeCh = make(chan struct{})
	}
	ch := e.wakeCh
	e.sleepers++
	held := e.dropHold()
	e.mu.Unlock()
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
	e.retakeHold(held)
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

// dropHold gives back the context a blocking collective holds, before the
// engine is released: the next goroutine to lock it may advance it.
func (e *engine) dropHold() bool {
	if e.held == nil {
		return false
	}
	e.held.Release()
	e.held = nil
	return true
}

func (e *engine) retakeHold(held bool) {
	if held {
		e.held = e.ac.Hold()
	}
}
