// Package procfs reads what the tests and the runtime-monitor tuning need
// of Linux's /proc: the system call a thread waits in and a process's
// state letter.
package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Syscall returns the number of the system call thread tid of this process
// is in, and its arguments (/proc/self/task/TID/syscall); nr is -1 when
// the thread is running, not in a call.
func Syscall(tid int) (nr int, args []uint64, err error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return 0, nil, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, nil, fmt.Errorf("syscall of thread %d: empty", tid)
	}
	if f[0] == "running" {
		return -1, nil, nil
	}
	if nr, err = strconv.Atoi(f[0]); err != nil {
		return 0, nil, fmt.Errorf("syscall of thread %d: %v", tid, err)
	}
	// Six arguments, then the stack and instruction pointers.
	for _, a := range f[1:min(len(f), 7)] {
		v, err := strconv.ParseUint(strings.TrimPrefix(a, "0x"), 16, 64)
		if err != nil {
			return 0, nil, fmt.Errorf("syscall of thread %d: %v", tid, err)
		}
		args = append(args, v)
	}
	return nr, args, nil
}

// State returns the state letter of process pid (/proc/PID/stat: R, S,
// T when stopped, Z a zombie...).
func State(pid int) (byte, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("stat of process %d: %q", pid, b)
	}
	return b[i+2], nil
}
