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
// The main loop stores eight words a pass: the zeroing of a 129-slot
// descriptor (8 KiB inline) took 556 instructions a message with one word
// a pass, a fifth of the receiver's (callgrind), and where the cores hand
// lines over quickly the receiver of a window of inline messages is bound
// by its instructions. On a 2-core AMD host whose cores were 0.05-0.09 us
// apart (amibench -b bw, 5 runs of 2 interleaved rounds), windows of 8 KiB
// moved 1.07-1.15x as much, 16 KiB 1.06-1.19x; with the cores 0.3-0.4 us
// apart, where the lines' crossing is the pace, within the spread.
//
//go:noescape
func zeroWords(p unsafe.Pointer, n uintptr)
