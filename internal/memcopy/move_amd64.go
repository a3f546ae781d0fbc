package memcopy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// HaveMovsb reports whether the string move has its fast form here
// (ERMS, amd64).
var HaveMovsb = cpu.X86.HasERMS

// Move copies min(len(dst), len(src)) bytes of src into dst, with the
// string move if movsb is set. They must not overlap.
func Move(dst, src []byte, movsb bool) {
	n := min(len(dst), len(src))
	if !movsb || n == 0 {
		copy(dst, src)
		return
	}
	repMovsb(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), uintptr(n))
}

// repMovsb copies n bytes from src to dst with REP MOVSB (move_amd64.s).
//
//go:noescape
func repMovsb(dst, src unsafe.Pointer, n uintptr)
