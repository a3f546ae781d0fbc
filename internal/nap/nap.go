// Package nap sleeps the calling thread for a short while, outside the Go
// scheduler's timers.
//
// # Why
//
// A goroutine in time.Sleep is parked and woken by the runtime's timers.
// When nothing else runs, the processor that holds the timer waits in
// epoll_pwait, whose timeout counts whole milliseconds: time.Sleep of 20
// us lasted 1.15 ms on a 2-core host (median of 200), clock_nanosleep of
// 20 us 0.12 ms (the kernel's timer slack). The waits that use Nap are
// the last resort of a spin-then-yield loop for a peer or an engine that
// is about to finish (package shm's deregistration under a peer's
// cross-memory attach, a region's in-process accesses, a closing
// context's drain): there a sleep of a millisecond is a millisecond the
// waiter lies idle after the wait ended.
//
// The thread stays in the system call for the nap; the runtime hands its
// processor to another goroutine if the nap outlasts its monitor's look.
package nap

import "time"

// Nap sleeps the calling thread for at least d.
func Nap(d time.Duration) {
	if d <= 0 {
		return
	}
	nap(d)
}
