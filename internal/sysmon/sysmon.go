// Package sysmon changes the scheduling policy of the Go runtime's monitor
// thread (sysmon) for as long as a rank polls for messages.
//
// # Why
//
// The runtime's monitor is an OS thread of its own that wakes every 20 us
// for some 50 rounds, then ever less often up to every 10 ms; it starts
// over at 20 us each time it takes a P back from a goroutine blocked in a
// system call (a rank that sleeps in a futex wait is one) and after every
// moment when all Ps were idle. With the kernel's default timer slack of 50
// us a 20 us sleep lasts some 85 us. A rank bound to one processor, as
// launchers bind MPI ranks, shares that processor with its monitor: each
// wake-up of the monitor preempts the thread that polls, for 8-10 us here
// (a context switch each way and the monitor's round), some 12 000 times a
// second for 4 ms after each such event. Two ranks that stream to each
// other lose about a fifth of their time that way, in two different
// moments, and a window of 4 KiB messages that takes 8 us takes 30 when it
// falls on one (sched_switch traces of amibench -b bw).
//
// A thread of policy SCHED_BATCH does not preempt the running thread when
// it wakes; it runs at the next scheduler tick, when its share is due.
// The monitor's work (taking back Ps from system calls, preempting a
// goroutine that ran for 10 ms, polling the network when no one did for 10
// ms) is on a scale of milliseconds, and it keeps its full share of the
// processor: it only waits for a tick instead of cutting into the thread
// that polls. Hold sets the monitor's policy, and the last release puts
// back the policy it had.
//
// # Which thread
//
// The runtime starts the monitor before any other thread, as the first
// thing runtime.main does, and the monitor sleeps in nanosleep between its
// rounds, a system call no other thread of the runtime waits in. Hold takes
// the thread of the process created first after the main thread (by start
// time, then thread id) and changes it only if it finds it in nanosleep
// (/proc/self/task/T/syscall) within a bounded number of looks. Otherwise
// it changes nothing and says why.
package sysmon

import (
	"errors"
	"fmt"
	"sync"
)

// Policy is a scheduling policy for the monitor thread.
type Policy string

const (
	// Batch is SCHED_BATCH: a full share of the processor, no preemption
	// of the running thread at wake-up.
	Batch Policy = "batch"
	// Idle is SCHED_IDLE: the smallest share of the processor there is.
	Idle Policy = "idle"
)

// ErrNotFound is returned when the monitor thread could not be told apart.
var ErrNotFound = errors.New("sysmon: runtime monitor thread not found")

var (
	mu    sync.Mutex
	holds int
	tid   int
	undo  func() error
)

// Hold sets the monitor thread's policy to p and returns a function that
// releases the hold; the last release restores the policy the thread had.
// Holds nest: while one is kept, later ones do not change the policy again
// (the first policy stays). Hold returns an error, and changes nothing,
// when the thread cannot be found or its policy cannot be set.
func Hold(p Policy) (release func(), err error) {
	if p != Batch && p != Idle {
		return nil, fmt.Errorf("sysmon: policy %q: want %q or %q", p, Batch, Idle)
	}
	mu.Lock()
	defer mu.Unlock()
	if holds == 0 {
		t, err := find()
		if err != nil {
			return nil, err
		}
		u, err := set(t, p)
		if err != nil {
			return nil, fmt.Errorf("sysmon: thread %d: %w", t, err)
		}
		tid, undo = t, u
	}
	holds++
	var once sync.Once
	return func() { once.Do(release1) }, nil
}

func release1() {
	mu.Lock()
	defer mu.Unlock()
	if holds--; holds == 0 && undo != nil {
		_ = undo()
		tid, undo = 0, nil
	}
}

// Thread returns the id of the thread whose policy a kept hold changed, or 0.
func Thread() int {
	mu.Lock()
	defer mu.Unlock()
	return tid
}
