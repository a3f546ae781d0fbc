package launch

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Cores returns the cores this process may run on, each as the processors
// (hardware threads) of that core that its affinity allows, in order of
// their first processor.
func Cores() ([][]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var allowed []int
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			allowed = append(allowed, cpu)
		}
	}
	byCore := map[string][]int{}
	var order []string
	for _, cpu := range allowed {
		// Processors of one core share their thread_siblings_list; where
		// sysfs does not say, each processor is a core.
		key := "cpu" + strconv.Itoa(cpu)
		if b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu)); err == nil {
			key = strings.TrimSpace(string(b))
		}
		if _, ok := byCore[key]; !ok {
			order = append(order, key)
		}
		byCore[key] = append(byCore[key], cpu)
	}
	out := make([][]int, 0, len(order))
	for _, k := range order {
		out = append(out, byCore[k])
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	if len(out) == 0 {
		return nil, fmt.Errorf("no processor in this process's affinity")
	}
	return out, nil
}

// CPUList formats processors as /proc's lists do ("0-3,6").
func CPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// StartBound starts cmd with its affinity set to cpus (none: unchanged).
// The child inherits the affinity of the thread that forks it, so the
// calling goroutine locks its thread, narrows that thread's affinity, starts
// the child and widens it again: the rank is bound before it runs its first
// instruction, and so is every thread it makes. Should the widening fail,
// the calling goroutine keeps the thread locked to itself, so that no other
// goroutine of the caller runs narrowed.
func StartBound(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("sched_getaffinity: %w", err)
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("sched_setaffinity to processors %s: %w", CPUList(cpus), err)
	}
	err := cmd.Start()
	if unix.SchedSetaffinity(0, &old) == nil {
		runtime.UnlockOSThread()
	}
	return err
}
