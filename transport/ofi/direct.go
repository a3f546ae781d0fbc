//go:build ofi

package ofi

/*
#include "amigo_ofi.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/cstack"
)

// The two calls of the message path, a look at the completion queues and
// the injection of a packet, are made on a stack of the port's own
// (package cstack) instead of through cgo, on a port whose looks at its
// queues read memory (it spins on them: shm): there they return within
// spinBudget, call nothing in Go, and take their arguments from a block
// of pinned memory, which is what such a call asks. A cgo call costs some
// 20 ns of the scheduler's hand-over on each side of it; a ping-pong
// makes two a message on its critical path (the return of the look that
// found the message, the entry of the injection of the answer). Where a
// look is a system call and the provider's progress moves data in it
// (tcp;ofi_rxm), the calls stay on cgo. Options.CgoCalls keeps them all
// on cgo.

var (
	fnCQRead2 = uintptr(C.amigo_args_fn(0))
	fnInject  = uintptr(C.amigo_args_fn(1))
)

// directCalls is a port's means of calling C on its own stack: the stack
// and the argument block. The port's exclusion (enter, watcherTake) makes
// one caller at a time.
type directCalls struct {
	st   *cstack.Stack
	args *C.struct_amigo_args
	addr uintptr
}

// stacks keeps the stacks of released ports for new ones, instead of a
// mapping and an unmapping for each port. A port gives its stack back at
// release, after its Close, when none of its calls runs.
var stacks struct {
	sync.Mutex
	free []*cstack.Stack
}

// open gives d a stack and an argument block pinned by pin, unless the
// platform has no direct calls (then every call goes through cgo).
func (d *directCalls) open(pin *runtime.Pinner) {
	stacks.Lock()
	if n := len(stacks.free); n > 0 {
		d.st = stacks.free[n-1]
		stacks.free = stacks.free[:n-1]
	}
	stacks.Unlock()
	if d.st == nil {
		st, err := cstack.New()
		if err != nil {
			return
		}
		d.st = st
	}
	b := pinnedBytes(pin, int(unsafe.Sizeof(C.struct_amigo_args{})))
	d.args = (*C.struct_amigo_args)(unsafe.Pointer(&b[0]))
	d.addr = addrOf(b)
}

// close gives d's stack back for another port.
func (d *directCalls) close() {
	if d.st == nil {
		return
	}
	stacks.Lock()
	stacks.free = append(stacks.free, d.st)
	stacks.Unlock()
	d.st = nil
}

// cqRead2 is amigo_cq_read2.
func (p *port) cqRead2(tx, te C.uintptr_t, ntx C.size_t, rx, re C.uintptr_t, nrx C.size_t, spin C.int) int64 {
	d := &p.direct
	if d.st == nil {
		return int64(C.amigo_cq_read2(tx, te, ntx, rx, re, nrx, spin))
	}
	a := &d.args.a
	a[0], a[1], a[2], a[3] = C.uint64_t(tx), C.uint64_t(te), C.uint64_t(ntx), C.uint64_t(rx)
	a[4], a[5], a[6] = C.uint64_t(re), C.uint64_t(nrx), C.uint64_t(spin)
	return int64(d.st.Call(fnCQRead2, d.addr))
}

// injectPacket is amigo_inject_packet.
func (p *port) injectPacket(ep, hdr, data C.uintptr_t, dlen C.size_t, ack C.uint64_t, dest C.fi_addr_t) C.ssize_t {
	d := &p.direct
	if d.st == nil {
		return C.amigo_inject_packet(ep, hdr, data, dlen, ack, dest)
	}
	a := &d.args.a
	a[0], a[1], a[2], a[3] = C.uint64_t(ep), C.uint64_t(hdr), C.uint64_t(data), C.uint64_t(dlen)
	a[4], a[5] = ack, C.uint64_t(dest)
	return C.ssize_t(int64(d.st.Call(fnInject, d.addr)))
}
