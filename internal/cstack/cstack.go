// Package cstack calls short C functions from Go on a stack of their own,
// without cgo's hand-over to the scheduler.
//
// A cgo call tells the scheduler the goroutine left Go (entersyscall),
// switches to the thread's system stack, and on return takes the
// scheduler's processor back (exitsyscall): some 20 ns on a machine where
// the C function under it, a look at a completion queue in memory, costs
// 30. Stack.Call switches the stack pointer to memory this package
// mapped, calls the function and switches back: 3 ns. What it gives up
// is what the hand-over buys, so a function called this way must:
//
//   - return within microseconds: until it returns its goroutine cannot
//     be preempted, and a stop of the world (a garbage collection) waits
//     for it; it must not block (a system call that does not wait, such
//     as a non-blocking send or an epoll_wait with no timeout, is fine);
//   - not call back into Go, nor into anything that may (no cgo exports);
//   - fit its stack (Size less a guard page; a deeper call faults on the
//     guard and the process dies);
//   - take its arguments through one pointer to memory the garbage
//     collector does not move or free while it runs (C memory, or Go
//     memory kept alive and pinned by the caller).
//
// A Stack is for one caller at a time: the caller's own exclusion (a port
// that one goroutine holds at a time) makes it so.
//
// While the function runs, the goroutine's program counter is in C and its
// stack pointer outside its Go stack: a preemption request finds no safe
// point there and waits for the return, and a CPU profile counts the time
// as external code, as the runtime does for any code it does not know.
// Call's entry checks for a pending preemption (the stack check every Go
// function that is not a leaf makes), so a loop of calls stops for the
// scheduler and the collector between two of them.
package cstack

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"
)

// Size is the stack a Stack gives the functions it calls, less the guard.
const Size = 256 << 10

const guard = 4096

// Stack is mapped memory to run C functions on (Call).
type Stack struct {
	mem []byte
	top uintptr
}

// ErrUnsupported is New's error where this package has no way to switch
// stacks (it has one for linux/amd64).
var ErrUnsupported = errors.New("cstack: no direct C calls on this platform")

// New maps a stack of Size bytes below a guard page.
func New() (*Stack, error) {
	if !supported {
		return nil, ErrUnsupported
	}
	mem, err := syscall.Mmap(-1, 0, Size+guard, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("cstack: map a stack: %w", err)
	}
	if err := syscall.Mprotect(mem[:guard], syscall.PROT_NONE); err != nil {
		syscall.Munmap(mem)
		return nil, fmt.Errorf("cstack: guard page: %w", err)
	}
	top := uintptr(unsafe.Pointer(&mem[len(mem)-1])) + 1
	return &Stack{mem: mem, top: top &^ 63}, nil
}

// Call runs the C function at fn with arg as its one argument (a pointer
// or a number in the first integer register) on s, and returns what it
// returned in the first integer register. fn follows the platform's C
// calling convention; see the package comment for what it may do.
func (s *Stack) Call(fn, arg uintptr) uintptr {
	return call(fn, arg, s.top)
}

// Free unmaps s. No Call may run on it then or after.
func (s *Stack) Free() error {
	if s == nil || s.mem == nil {
		return nil
	}
	err := syscall.Munmap(s.mem)
	s.mem, s.top = nil, 0
	return err
}
