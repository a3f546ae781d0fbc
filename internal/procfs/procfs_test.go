package procfs

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A thread asleep in clock_nanosleep reads as that call with its clock as
// the first argument; this process is running or sleeping.
func TestSyscallAndState(t *testing.T) {
	tids := make(chan int)
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		ts := unix.Timespec{Nsec: 20e6}
		for !stop.Load() {
			_ = unix.ClockNanosleep(unix.CLOCK_BOOTTIME, 0, &ts, nil)
		}
	}()
	tid := <-tids
	for deadline := time.Now().Add(10 * time.Second); ; {
		nr, args, err := Syscall(tid)
		if err != nil {
			t.Fatal(err)
		}
		if nr == unix.SYS_CLOCK_NANOSLEEP {
			if len(args) != 6 || args[0] != unix.CLOCK_BOOTTIME {
				t.Fatalf("clock_nanosleep's arguments read as %#x", args)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d never seen in clock_nanosleep (last %d)", tid, nr)
		}
		time.Sleep(time.Millisecond)
	}
	st, err := State(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if st != 'R' && st != 'S' {
		t.Fatalf("this process's state is %q", st)
	}
	if _, err := State(-1); err == nil {
		t.Fatal("the state of process -1 read without an error")
	}
}
