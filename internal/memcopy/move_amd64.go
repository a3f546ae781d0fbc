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

// MoveAhead copies min(len(dst), len(src)) bytes of src into dst, as Go's
// copy does, and asks for the lines AheadDist bytes past what it reads as
// it goes, as far as ahead bytes from the start of src: a copy out of
// lines another core wrote, which the next copy will read too (the next
// descriptor of a ring, already written), finds the first of those lines
// on their way. Nothing past src[:ahead] is asked for; prefetching reads
// nothing a program sees, so ahead may reach past src into memory the
// caller knows is mapped. They must not overlap.
func MoveAhead(dst, src []byte, ahead int) {
	n := min(len(dst), len(src))
	m := n &^ 127
	pf := min(max(ahead-AheadDist-128, 0), m) &^ 127
	if !haveAVX2 || pf == 0 {
		copy(dst, src)
		return
	}
	copyAhead(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), uintptr(m), uintptr(pf))
	copy(dst[m:n], src[m:n])
}

var haveAVX2 = cpu.X86.HasAVX2

// copyAhead copies n bytes (a multiple of 128) from src to dst and, for
// the first pf of them, prefetches AheadDist bytes ahead (move_amd64.s).
//
//go:noescape
func copyAhead(dst, src unsafe.Pointer, n, pf uintptr)

// repMovsb copies n bytes from src to dst with REP MOVSB (move_amd64.s).
//
//go:noescape
func repMovsb(dst, src unsafe.Pointer, n uintptr)
