package fifo

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapped returns how many of the pages under the n bytes at p are mapped.
func mapped(t *testing.T, p unsafe.Pointer, n uintptr) (in, all int) {
	t.Helper()
	page := uintptr(unix.Getpagesize())
	start := uintptr(p) &^ (page - 1)
	end := uintptr(p) + n
	vec := make([]byte, (end-start+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, start, end-start, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for _, v := range vec {
		if v&1 != 0 {
			in++
		}
	}
	return in, len(vec)
}

// A new tracker's lists are mapped before the first descriptor, so that
// the first lap of the FIFO takes no page fault.
func TestTrackerListsMapped(t *testing.T) {
	// 1<<20 slots: lists of 24 MiB, more than any earlier test of the
	// package left mapped in the heap.
	var head, xfer atomic.Uint64
	tr := New(1<<20, &head, &xfer, nil)
	if in, all := mapped(t, unsafe.Pointer(&tr.list[0]), uintptr(len(tr.list))*unsafe.Sizeof(tr.list[0])); in != all {
		t.Errorf("entries: %d of %d pages mapped", in, all)
	}
	if in, all := mapped(t, unsafe.Pointer(&tr.order[0]), uintptr(len(tr.order))*unsafe.Sizeof(tr.order[0])); in != all {
		t.Errorf("order: %d of %d pages mapped", in, all)
	}
}
