package ring

import "unsafe"

// zeroWords stores a zero word at p and at every SlotSize bytes after it,
// n words in all: the give-back's zeroing (zero_amd64.s).
//
// # Why in assembly
//
// The loop is a few instructions that store into lines the consumer's
// core must first own, hundreds of times for a large descriptor. Written
// in Go, its speed depended on where the linker happened to place it:
// the same code, shifted by padding elsewhere in the package, moved 8 KiB
// windows 0.93x or 1.09x as fast as the tree before it (amibench -b bw,
// interleaved rounds), the slow placements being those where the loop
// crossed a 64-byte boundary. The assembly aligns it.
//
//go:noescape
func zeroWords(p unsafe.Pointer, n uintptr)
