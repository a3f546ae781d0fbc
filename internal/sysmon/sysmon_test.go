package sysmon

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func policyOf(t *testing.T, tid int) uint32 {
	t.Helper()
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		t.Fatalf("sched_getattr(%d): %v", tid, err)
	}
	return a.Policy
}

// policies returns the policy of every thread of the process but the main
// thread.
func policies(t *testing.T) map[int]uint32 {
	t.Helper()
	ts, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[int]uint32)
	for _, th := range ts {
		if a, err := unix.SchedGetAttr(th.tid, 0); err == nil {
			m[th.tid] = a.Policy
		}
	}
	return m
}

func TestHold(t *testing.T) {
	before := policies(t)
	release, err := Hold(Batch)
	if err != nil {
		t.Fatal(err)
	}
	tid := Thread()
	if tid == 0 || tid == os.Getpid() {
		t.Fatalf("Thread() = %d (pid %d)", tid, os.Getpid())
	}
	if p := policyOf(t, tid); p != unix.SCHED_BATCH {
		t.Fatalf("thread %d: policy %d, want SCHED_BATCH", tid, p)
	}
	// The thread is the one that sleeps in nanosleep, and no other thread
	// changed.
	slept := 0
	for range 200 {
		if nr, err := syscallOf(tid); err == nil && nr == unix.SYS_NANOSLEEP {
			slept++
		}
		// Held, the monitor waits for this thread's processor until a
		// tick: leave it (a raw system call, as find's pause).
		ts := unix.NsecToTimespec(pause.Nanoseconds())
		_, _, _ = unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
	}
	if slept == 0 {
		t.Errorf("thread %d was not in nanosleep in 200 looks", tid)
	}
	for th, p := range policies(t) {
		if was, ok := before[th]; ok && th != tid && p != was {
			t.Errorf("thread %d: policy %d, was %d", th, p, was)
		}
	}

	// A second hold keeps the first one's policy; only the last release
	// restores, and a release called twice counts once.
	release2, err := Hold(Idle)
	if err != nil {
		t.Fatal(err)
	}
	if p := policyOf(t, tid); p != unix.SCHED_BATCH {
		t.Errorf("after a second hold: policy %d, want SCHED_BATCH", p)
	}
	release2()
	release2()
	if p := policyOf(t, tid); p != unix.SCHED_BATCH {
		t.Errorf("after the second release: policy %d, want SCHED_BATCH still", p)
	}
	release()
	if p := policyOf(t, tid); p != before[tid] {
		t.Errorf("after the last release: policy %d, want %d", p, before[tid])
	}
	if Thread() != 0 {
		t.Errorf("Thread() = %d with no hold", Thread())
	}

	// Idle, then back.
	release, err = Hold(Idle)
	if err != nil {
		t.Fatal(err)
	}
	if p := policyOf(t, Thread()); p != unix.SCHED_IDLE {
		t.Errorf("Hold(Idle): policy %d, want SCHED_IDLE", p)
	}
	release()
	if p := policyOf(t, tid); p != before[tid] {
		t.Errorf("after release: policy %d, want %d", p, before[tid])
	}
}

func TestHoldBadPolicy(t *testing.T) {
	if _, err := Hold("fifo"); err == nil {
		t.Fatal("Hold(fifo) accepted")
	}
	if Thread() != 0 {
		t.Fatalf("Thread() = %d after a refused hold", Thread())
	}
}

// TestMonitorWaitsForTick checks what Hold is for: with the whole process
// on one processor and a goroutine polling there, the monitor, set going
// at its 20 us pace by a blocking system call, runs some 50 times in the
// next 10 ms, each time preempting the poller; held, it runs only at the
// scheduler's ticks. The count is the monitor's own sleeps (its voluntary
// context switches), which do not depend on what else the processor runs.
// The measurement runs in a child process, whose threads it may pin.
func TestMonitorWaitsForTick(t *testing.T) {
	if os.Getenv("AMIGO_SYSMON_CHILD") == "1" {
		monitorChild()
		return
	}
	// Under load the free monitor's rounds stretch (it waits for the
	// processor like any thread), and the held one runs whenever another
	// process takes the processor from the poller, not only at ticks: a
	// run where the free monitor did not wake often enough to tell the two
	// apart, or where the held one woke as often as that, is measured
	// again, up to three times. With Hold doing nothing, every run finds
	// the two alike.
	med := func(v []int) int { s := append([]int(nil), v...); sort.Ints(s); return s[len(s)/2] }
	set := false
	var runs []string
	for attempt := 0; attempt < 3; attempt++ {
		free, held := monitorRun(t)
		t.Logf("monitor wake-ups in 10 ms of polling: free %v, held %v", free, held)
		runs = append(runs, fmt.Sprintf("free %v, held %v", free, held))
		if med(free) < 10 {
			continue
		}
		set = true
		if med(held) <= med(free)/2 {
			return
		}
	}
	if !set {
		t.Fatalf("free monitor woke under 10 times in 10 ms in three runs (%s): it was not set going, nothing to compare", strings.Join(runs, "; "))
	}
	t.Errorf("held monitor woke more than half as often as the free one in 10 ms in every run (%s): it still runs at its own pace", strings.Join(runs, "; "))
}

// monitorRun runs monitorChild in a child process and returns the wake-up
// counts it printed, free and held.
func monitorRun(t *testing.T) (free, held []int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMonitorWaitsForTick$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AMIGO_SYSMON_CHILD=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\n%s%s", err, out.String(), errb.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		var kind string
		var n int
		if _, err := fmt.Sscanf(line, "wakeups %s %d", &kind, &n); err != nil {
			continue
		}
		if kind == "free" {
			free = append(free, n)
		} else {
			held = append(held, n)
		}
	}
	if len(free) == 0 || len(held) != len(free) {
		t.Fatalf("child printed %d free and %d held counts:\n%s%s", len(free), len(held), out.String(), errb.String())
	}
	return free, held
}

// monitorRounds is how many times monitorChild measures each way: the
// counts of one round spread from a few to some 55 either way, and the
// medians of 5 let a Hold that did nothing pass now and then.
const monitorRounds = 21

// monitorChild pins the process to one processor and measures the
// monitor's wake-ups in 10 ms of polling after a blocking system call, free
// and held, alternately.
func monitorChild() {
	runtime.GOMAXPROCS(1)
	runtime.LockOSThread()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		fmt.Println("affinity:", err)
		os.Exit(1)
	}
	cpu := -1
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			cpu = i
		}
	}
	var one unix.CPUSet
	one.Set(cpu)
	pin := func() {
		ents, _ := os.ReadDir("/proc/self/task")
		for _, e := range ents {
			tid, _ := strconv.Atoi(e.Name())
			_ = unix.SchedSetaffinity(tid, &one)
		}
	}
	pin()
	mon, err := find()
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	for round := 0; round < 2*monitorRounds; round++ {
		kind := "free"
		var release func()
		if round%2 == 1 {
			kind = "held"
			if release, err = Hold(Batch); err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
			if Thread() != mon {
				fmt.Printf("held thread %d, found %d\n", Thread(), mon)
				os.Exit(1)
			}
		}
		pin() // threads the runtime started since
		// A futex wait of 25 ms through the runtime's system call path:
		// the monitor takes the P back (within two of its rounds, at most
		// 10 ms each) and starts over at 20 us.
		var word uint32
		ts := unix.NsecToTimespec((25 * time.Millisecond).Nanoseconds())
		_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&word)), 0 /* FUTEX_WAIT */, 0, uintptr(unsafe.Pointer(&ts)), 0, 0)
		n0 := switches(mon)
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
		fmt.Printf("wakeups %s %d\n", kind, switches(mon)-n0)
		if release != nil {
			release()
		}
	}
}

// switches returns the voluntary context switches of thread tid.
func switches(tid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/status", tid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
