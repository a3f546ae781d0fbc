//go:build !amd64 || race

package order

import "sync/atomic"

const releaseStores = false

// Store64 stores v at p: a release store when Relaxed, else a fenced atomic
// store. Loads of *p must be atomic loads. Here stores are never relaxed
// (releaseStores): it is Go's atomic store.
func Store64(p *atomic.Uint64, v uint64) { p.Store(v) }

// Store32 is Store64 for 32-bit words.
func Store32(p *atomic.Int32, v int32) { p.Store(v) }
