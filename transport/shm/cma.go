package shm

import (
	"bytes"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cross-memory attach: process_vm_readv and process_vm_writev copy between
// this process's memory and another's, done by the kernel, with no help
// from the other process. The kernel allows it to a process that may ptrace
// the target (same user and, under Yama's ptrace_scope 1, an ancestor, or
// CAP_SYS_PTRACE); seccomp profiles of containers often forbid it. Every
// adapter therefore probes it toward each peer at start-up.

// cmaIO holds the vectors of one goroutine's calls, so that a call
// allocates nothing.
type cmaIO struct {
	l [1]unix.Iovec
	r [1]unix.RemoteIovec
}

var errShortCMA = errors.New("cross-memory attach moved no bytes")

func (c *cmaIO) read(pid int, local []byte, raddr uint64) error {
	return c.do(pid, local, raddr, false)
}
func (c *cmaIO) write(pid int, local []byte, raddr uint64) error {
	return c.do(pid, local, raddr, true)
}

func (c *cmaIO) do(pid int, local []byte, raddr uint64, write bool) error {
	defer func() { c.l[0].Base = nil }()
	for len(local) > 0 {
		c.l[0].Base = &local[0]
		c.l[0].SetLen(len(local))
		c.r[0] = unix.RemoteIovec{Base: uintptr(raddr), Len: len(local)}
		n, err := vmCopy(write, pid, c.l[:], c.r[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			op := "process_vm_readv"
			if write {
				op = "process_vm_writev"
			}
			return fmt.Errorf("%s of pid %d: %w", op, pid, err)
		}
		if n <= 0 {
			return errShortCMA
		}
		local = local[n:]
		raddr += uint64(n)
	}
	return nil
}

// vmCopy is process_vm_readv (process_vm_writev with write) of the
// vectors l and r, which must not be empty, made as a raw system call:
// without the Go scheduler's bookkeeping of a call that may block. Such a
// call that lasts longer than a tick of the runtime's monitor thread
// (sysmon, 20 us) loses its processor (P) to a hand-off when the process
// has no other P to run on, as a rank bound to one core has
// (GOMAXPROCS 1), and every hand-off keeps the monitor waking each 20 us
// instead of backing off to 10 ms. A receiver fetching a window of 32 KiB
// messages, one 1 MiB batched call after another, spent 6% of its core
// in the monitor's wake-ups and 9% more in the switches they forced on the
// copying thread. These calls neither wait for another process nor for a
// device: they copy one batch (batchBytes) or one piece of a transfer
// (Options.Piece, helpPieceCMA) between pages of two processes, tens of
// microseconds, like a memmove of that size, during which nothing else of
// this process needed the P either.
func vmCopy(write bool, pid int, l []unix.Iovec, r []unix.RemoteIovec) (int, error) {
	trap := uintptr(unix.SYS_PROCESS_VM_READV)
	if write {
		trap = unix.SYS_PROCESS_VM_WRITEV
	}
	n, _, e := unix.RawSyscall6(trap, uintptr(pid), uintptr(unsafe.Pointer(&l[0])), uintptr(len(l)), uintptr(unsafe.Pointer(&r[0])), uintptr(len(r)), 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// probeCMA reads the probe bytes a peer published at addr and checks that
// they are want.
func probeCMA(pid int, addr uint64, want [tokenSize]byte) error {
	var got [tokenSize]byte
	var c cmaIO
	if err := c.read(pid, got[:], addr); err != nil {
		return err
	}
	if !bytes.Equal(got[:], want[:]) {
		return fmt.Errorf("cross-memory attach of pid %d read the wrong bytes", pid)
	}
	return nil
}

// ProbeCMA reports whether this process may read the memory of process
// pid by cross-memory attach, reading n bytes at addr; nil means it may.
func ProbeCMA(pid int, addr uintptr, n int) error {
	buf := make([]byte, n)
	var c cmaIO
	return c.read(pid, buf, uint64(addr))
}
