package sysmon

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/procfs"
)

// looks bounds how many times find reads the candidate's system call: the
// monitor spends all but a few microseconds of each round asleep, so one
// look nearly always finds it there. Between two looks find sleeps for
// pause: a monitor that woke on this thread's processor shows as running
// until it gets the processor, and gets it sooner with the processor idle.
const (
	looks = 200
	pause = 50 * time.Microsecond
)

// find returns the id of the runtime's monitor thread.
func find() (int, error) {
	ts, err := threads()
	if err != nil {
		return 0, err
	}
	if len(ts) == 0 {
		return 0, fmt.Errorf("%w: the process has one thread", ErrNotFound)
	}
	t := ts[0].tid
	for range looks {
		nr, err := syscallOf(t)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrNotFound, err)
		}
		if nr == unix.SYS_NANOSLEEP || nr == unix.SYS_CLOCK_NANOSLEEP {
			return t, nil
		}
		// A raw system call: the P stays with this thread. Through the
		// runtime's path the monitor would take it back, find every P
		// idle and sleep in a futex wait instead, where find cannot tell
		// it from the runtime's other idle threads.
		ts := unix.NsecToTimespec(pause.Nanoseconds())
		_, _, _ = unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
	}
	return 0, fmt.Errorf("%w: thread %d, the first after the main thread, was never in nanosleep", ErrNotFound, t)
}

type thread struct {
	tid   int
	start uint64 // clock ticks after boot
}

// threads lists the threads of the process other than the main thread, the
// first created first.
func threads() ([]thread, error) {
	pid := os.Getpid()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	var ts []thread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil || tid == pid {
			continue
		}
		start, err := startTime(tid)
		if err != nil {
			continue // the thread exited
		}
		ts = append(ts, thread{tid, start})
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].start != ts[j].start {
			return ts[i].start < ts[j].start
		}
		return ts[i].tid < ts[j].tid
	})
	return ts, nil
}

// startTime reads field 22 of /proc/self/task/tid/stat.
func startTime(tid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// the fields after it start at field 3.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat of thread %d: %q", tid, s)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("stat of thread %d: %d fields after the name", tid, len(f))
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// syscallOf returns the number of the system call thread tid is blocked
// in, or -1 when it is running.
func syscallOf(tid int) (int, error) {
	nr, _, err := procfs.Syscall(tid)
	return nr, err
}

// set gives thread tid policy p, keeping its nice value, and returns the
// function that puts back what it had.
func set(tid int, p Policy) (func() error, error) {
	old, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return nil, err
	}
	attr := *old
	attr.Policy = unix.SCHED_BATCH
	if p == Idle {
		attr.Policy = unix.SCHED_IDLE
	}
	attr.Priority = 0
	if err := unix.SchedSetAttr(tid, &attr, 0); err != nil {
		return nil, err
	}
	return func() error { return unix.SchedSetAttr(tid, old, 0) }, nil
}
