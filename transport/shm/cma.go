package shm

import (
	"bytes"
	"errors"
	"fmt"

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
		var n int
		var err error
		if write {
			n, err = unix.ProcessVMWritev(pid, c.l[:], c.r[:], 0)
		} else {
			n, err = unix.ProcessVMReadv(pid, c.l[:], c.r[:], 0)
		}
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
