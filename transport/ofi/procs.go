//go:build ofi

package ofi

import (
	"os"
	"runtime"
	"sync"
)

// A call into the provider holds its goroutine's P in the state of a
// system call for as long as it lasts. When the process has no other P
// (GOMAXPROCS 1: a rank bound to one core, as launchers bind them), the
// runtime's monitor thread (sysmon) takes that P away from a call that
// lasts longer than one of its ticks (20 us) and starts another thread to
// hold it; the call then returns to a P it must get back, and every such
// hand-off keeps the monitor waking each 20 us, on the rank's own core,
// instead of backing off to 10 ms. Provider calls of that length are
// ordinary: shm copies a large GET by cross-memory attach inside fi_read
// (85 us for 1 MiB), tcp;ofi_rxm's sends and reads are system calls that
// a busy loopback stretches. With a second P, idle, the monitor leaves a
// P in a call alone (for up to 10 ms).
//
// Measured with amibench on a 2-core host, two ranks bound to a core each
// (medians of 7 interleaved runs): the ping-pong of 1 MiB over shm took
// 157 us a message with GOMAXPROCS 1 and 114 with 2 (fi_pingpong: 114);
// over tcp;ofi_rxm, 200,000 messages of 8 bytes made 10,174 hand-offs and
// 95,428 of the monitor's wake-ups with 1, 4 and 29,213 with 2.
//
// So an adapter that is started on a host that is not oversubscribed
// raises GOMAXPROCS from 1 to raisedProcs, unless the environment set
// GOMAXPROCS, and the last such adapter to close gives the 1 back unless
// the program changed it since. The second P runs nothing of amigo's but
// the adapter's watcher, once a millisecond to once every watchSlowest
// (sleep.go).
const raisedProcs = 2

var procs struct {
	mu      sync.Mutex
	holders int // adapters that keep GOMAXPROCS raised
}

// raiseProcs raises GOMAXPROCS from 1 to raisedProcs, or joins a raise in
// place, and reports whether the caller holds it (then it must call
// releaseProcs).
func raiseProcs() bool {
	procs.mu.Lock()
	defer procs.mu.Unlock()
	if procs.holders == 0 {
		if os.Getenv("GOMAXPROCS") != "" || runtime.GOMAXPROCS(0) != 1 {
			return false
		}
		runtime.GOMAXPROCS(raisedProcs)
	}
	procs.holders++
	return true
}

// releaseProcs gives back the 1 that the first raiseProcs found, when the
// last holder releases it and GOMAXPROCS is still what it set.
func releaseProcs() {
	procs.mu.Lock()
	defer procs.mu.Unlock()
	if procs.holders--; procs.holders == 0 && runtime.GOMAXPROCS(0) == raisedProcs {
		runtime.GOMAXPROCS(1)
	}
}
