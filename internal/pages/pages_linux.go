// Package pages tells which pages of a piece of memory are mapped, for
// tests that check that memory on a message path was mapped before its
// first message (a page mapped at its first access costs a page fault
// there).
package pages

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mapped reports how many of the pages under the n bytes at p are resident
// in this process (mincore(2)), and how many pages that is.
func Mapped(p unsafe.Pointer, n uintptr) (in, all int, err error) {
	page := uintptr(unix.Getpagesize())
	start := uintptr(p) &^ (page - 1)
	end := uintptr(p) + n
	vec := make([]byte, (end-start+page-1)/page)
	if len(vec) == 0 {
		return 0, 0, nil
	}
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, start, end-start, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		return 0, 0, e
	}
	for _, v := range vec {
		if v&1 != 0 {
			in++
		}
	}
	return in, len(vec), nil
}
