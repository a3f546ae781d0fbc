package nap

import (
	"time"

	"golang.org/x/sys/unix"
)

// nap sleeps with clock_nanosleep on the monotonic clock until an absolute
// deadline, so that a signal (the runtime preempts goroutines with
// SIGURG) that interrupts it leaves the rest to sleep, neither shortening
// the nap nor lengthening it by the time spent in the handler.
func nap(d time.Duration) {
	var now unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) != nil {
		time.Sleep(d)
		return
	}
	end := unix.NsecToTimespec(now.Nano() + int64(d))
	for {
		err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &end, nil)
		if err != unix.EINTR {
			return
		}
	}
}
