//go:build amd64 && !race

package order

import "sync/atomic"

const releaseStores = true

// Store64 stores v at p: a release store when Relaxed, else a fenced atomic
// store. Loads of *p must be atomic loads.
//
// It is one assembly function (rel_amd64.s) that looks at relaxed and
// stores with a plain MOVQ (on amd64 a release store) or an XCHGQ (Go's
// atomic store, a full fence): the callers that publish descriptors (the
// ring's header words, tail, head and transfer counter) stay small enough
// for the compiler to inline them, where a Go function checking relaxed
// and calling a store in assembly was not, and a store cost some 24
// instructions instead of some 10.
//
//go:noescape
func Store64(p *atomic.Uint64, v uint64)

// Store32 is Store64 for 32-bit words.
//
//go:noescape
func Store32(p *atomic.Int32, v int32)
