package memcopy

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// HaveMovsb reports whether the string move is one of the ways: amd64
// with its fast form (ERMS).
var HaveMovsb = cpu.X86.HasERMS

// Move copies min(len(dst), len(src)) bytes of src into dst the way w.
// They must not overlap unless they are the same.
func Move(dst, src []byte, w Way) {
	n := min(len(dst), len(src))
	if w != Movsb || n == 0 {
		copy(dst, src)
		return
	}
	movsb(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), uintptr(n))
}

// movsb copies n bytes from src to dst with REP MOVSB (move_amd64.s).
//
//go:noescape
func movsb(dst, src unsafe.Pointer, n uintptr)

// now reads the processor's time-stamp counter (move_amd64.s), after the
// instructions before it have completed (LFENCE): a copy is timed in
// cycles.
func now() uint64
