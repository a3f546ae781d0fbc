package ring

import "unsafe"

// prefetchw asks for the cache line at p for writing (PREFETCHW,
// prefetch_amd64.s): a hint, which neither faults nor changes memory.
//
//go:noescape
func prefetchw(p unsafe.Pointer)
