//go:build ofi

package ofi

/*
#include "amigo_ofi.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Registration cache. A provider that asks for FI_MR_LOCAL needs the local
// buffer of every fi_read and fi_write registered; registering is a system
// call and, on hardware, a trip to the NIC, so a buffer used again (every
// benchmark loop, every halo exchange) is registered once: the port keeps
// the registrations of recent buffers, each with the buffer pinned
// (runtime.Pinner) for as long as the entry lives.
//
// An entry covers the buffer up to its capacity (where that is at most
// regExtendMax or twice its length), so other slices of one array hit it.
// Why a hit is sound: an entry keeps its object pinned, so the garbage
// collector neither moves nor frees it, and no other object can come to
// occupy its memory. A buffer that lies inside an entry's range is
// therefore memory of that same object, and the registration covers it.
//
// The cache is bounded (regCacheEntries entries, regCacheBytes bytes):
// past either bound the least recently used entry that no operation in
// flight holds is deregistered and unpinned. What it costs a program is
// that up to those bounds of its buffers stay reachable after it dropped
// them, until eviction or the port's Close. Only the goroutine that owns
// the port touches the cache.
const (
	regCacheEntries = 64
	regCacheBytes   = 256 << 20
	// regExtendMax is the capacity up to which a buffer is registered
	// whole, beyond its length.
	regExtendMax = 4 << 20
)

type regEntry struct {
	base, end uintptr // the registered range [base, end)
	mr        *C.struct_fid_mr
	desc      uintptr
	pin       runtime.Pinner
	refs      int    // operations in flight that use it
	used      uint64 // the cache's clock at the last use
}

type regCache struct {
	entries []*regEntry
	bytes   uintptr
	clock   uint64
	// registrations counts fi_mr_reg calls made for the cache.
	registrations uint64
}

// get returns a registration that covers b, with FI_READ and FI_WRITE
// access, held (refs) until put.
func (c *regCache) get(p *port, b []byte) (*regEntry, error) {
	base := addrOf(b)
	end := base + uintptr(len(b))
	c.clock++
	for _, e := range c.entries {
		if e.base <= base && end <= e.end {
			e.refs++
			e.used = c.clock
			return e, nil
		}
	}
	// Register up to the slice's capacity where that is not much more:
	// memory of the same object, so that the other slices of one buffer
	// (the pieces of a halo, a message window) find the entry too.
	if n := cap(b); n <= regExtendMax || n <= 2*len(b) {
		b = b[:n]
		end = base + uintptr(n)
	}
	e := &regEntry{base: base, end: end, used: c.clock, refs: 1}
	e.pin.Pin(unsafe.Pointer(unsafe.SliceData(b)))
	mr, desc, err := p.registerLocal(b, C.FI_READ|C.FI_WRITE)
	if err != nil {
		e.pin.Unpin()
		return nil, err
	}
	c.registrations++
	e.mr, e.desc = mr, desc
	c.entries = append(c.entries, e)
	c.bytes += end - base
	c.trim()
	return e, nil
}

// put ends an operation's use of e.
func (c *regCache) put(e *regEntry) {
	e.refs--
	c.trim()
}

// trim evicts least recently used entries no operation holds while the
// cache is past a bound.
func (c *regCache) trim() {
	for len(c.entries) > regCacheEntries || c.bytes > regCacheBytes {
		victim := -1
		for i, e := range c.entries {
			if e.refs == 0 && (victim < 0 || e.used < c.entries[victim].used) {
				victim = i
			}
		}
		if victim < 0 {
			return // every entry is in use: over the bound until they end
		}
		c.drop(victim)
	}
}

func (c *regCache) drop(i int) {
	e := c.entries[i]
	C.amigo_close(C.amigo_fid_mr(e.mr))
	e.pin.Unpin()
	c.bytes -= e.end - e.base
	c.entries = append(c.entries[:i], c.entries[i+1:]...)
}

// close deregisters every entry; the operations that held them are over
// (the port's endpoint is closed).
func (c *regCache) close() {
	for len(c.entries) > 0 {
		c.drop(len(c.entries) - 1)
	}
}
