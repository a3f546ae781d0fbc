//go:build !amd64

package ring

import "unsafe"

// zeroWords stores a zero word at p and at every SlotSize bytes after it,
// n words in all (zero_amd64.s on amd64).
func zeroWords(p unsafe.Pointer, n uintptr) {
	for ; n > 0; n-- {
		*(*uint64)(p) = 0
		p = unsafe.Add(p, SlotSize)
	}
}
