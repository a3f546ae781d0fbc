package fifo

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/pages"
)

// A new tracker's lists are mapped before the first descriptor, so that
// the first lap of the FIFO takes no page fault.
func TestTrackerListsMapped(t *testing.T) {
	// 1<<20 slots: lists of 24 MiB, more than any earlier test of the
	// package left mapped in the heap.
	var head, xfer atomic.Uint64
	tr := New(1<<20, &head, &xfer, nil)
	for _, l := range []struct {
		name string
		p    unsafe.Pointer
		n    uintptr
	}{
		{"entries", unsafe.Pointer(&tr.list[0]), uintptr(len(tr.list)) * unsafe.Sizeof(tr.list[0])},
		{"order", unsafe.Pointer(&tr.order[0]), uintptr(len(tr.order)) * unsafe.Sizeof(tr.order[0])},
	} {
		in, all, err := pages.Mapped(l.p, l.n)
		if err != nil {
			t.Fatal(err)
		}
		if in != all {
			t.Errorf("%s: %d of %d pages mapped", l.name, in, all)
		}
	}
}
