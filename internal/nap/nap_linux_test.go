package nap

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/procfs"
)

// A nap interrupted by signals sleeps the rest: the napping thread is sent
// SIGURG (the signal the runtime preempts with, harmless to send) each
// time it is seen waiting in clock_nanosleep, and Nap must still last its
// whole duration.
func TestNapInterrupted(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, tid := unix.Getpid(), unix.Gettid()
	var done atomic.Bool
	var hits atomic.Int64
	go func() {
		for !done.Load() {
			if nr, _, err := procfs.Syscall(tid); err == nil && nr == unix.SYS_CLOCK_NANOSLEEP {
				if unix.Tgkill(pid, tid, unix.SIGURG) == nil {
					hits.Add(1)
				}
			}
			runtime.Gosched()
		}
	}()
	const d = 100 * time.Millisecond
	for i := 0; i < 5 && hits.Load() < 3; i++ {
		start := time.Now()
		Nap(d)
		if el := time.Since(start); el < d {
			t.Errorf("Nap(%v) returned after %v", d, el)
		}
	}
	done.Store(true)
	if hits.Load() == 0 {
		t.Fatal("no signal reached the thread while it napped")
	}
	t.Logf("%d signals sent during the naps", hits.Load())
}
