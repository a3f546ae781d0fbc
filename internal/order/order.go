// Package order provides the release stores with which amigo publishes
// descriptors, and the barrier that lets those stores go without a fence.
//
// # Why
//
// A producer that writes a descriptor into a consumer's descriptor buffer
// needs its stores to become visible in program order: the payload before
// the header word that announces it. On amd64 every plain store is a
// release store (the hardware keeps stores in order), but Go's atomic
// Store is an XCHG, a full fence that waits until the store has left the
// store buffer: for a cache line the consumer has just read, a round trip
// to the other core. A rank that sends and then at once polls for the
// answer (an exchange, the heart of every small collective) pays that
// round trip on each side on top of the one the data takes. Measured on a
// bare descriptor buffer between two cores: 296 ns per exchange with
// fenced stores, 65 ns with release stores.
//
// # What it costs, and the barrier
//
// The fence also served a second purpose. A consumer that found no work
// arms its doorbell (a store), checks for work once more (a load) and
// sleeps; a producer publishes (a store) and then looks at the doorbell (a
// load). That handshake is correct only if neither side's load can pass
// its own store. The consumer's arming store is an atomic Store (a full
// fence on its side); for the producer's side, instead of a fence on every
// message, the consumer calls Barrier after arming and before its last
// check: membarrier(2) with MEMBARRIER_CMD_GLOBAL_EXPEDITED makes every
// running thread of every process registered for it (every amigo process
// registers when this package initialises) execute a full memory barrier.
// Then either a producer's descriptor store precedes that barrier, and the
// consumer's check sees it; or it follows it, and so does the producer's
// load of the doorbell, which sees the consumer armed. A consumer arms
// only after it has polled idly for a while, so the system call is paid
// rarely, and never on a message's path.
//
// # When
//
// Release stores are used when this process registered for the barrier
// (Linux 4.16 and later, unless seccomp forbids it), on amd64, outside the
// race detector (which sees only Go's atomics as synchronisation), and
// unless AMIGO_FENCED_STORES=1 or Fenced was called (an adapter does that
// where consumers sleep so often, on a host with more ranks than
// processors, that the barrier would cost more than the fences). Every
// other case uses Go's atomic stores, and Barrier does nothing. All ranks
// of a host run the same binary on the same kernel and decide alike; a
// process that decided otherwise than its peers could cost a consumer one
// bounded sleep (amigo's sleeps are capped), never a lost message.
package order

import (
	"os"
	"sync/atomic"
	"syscall"
)

const (
	sysMembarrier                    = 324 // amd64
	membarrierCmdQuery               = 0
	membarrierCmdGlobalExpedited     = 1 << 1
	membarrierCmdRegisterGlobalExped = 1 << 2
)

// relaxed is true while release stores are in use.
var relaxed atomic.Bool

// canBarrier is true when the kernel has the expedited global membarrier,
// which a process may issue whether or not it registered for it.
var canBarrier bool

func init() {
	mask, _, errno := syscall.RawSyscall(sysMembarrier, membarrierCmdQuery, 0, 0)
	if errno != 0 || mask&membarrierCmdGlobalExpedited == 0 || mask&membarrierCmdRegisterGlobalExped == 0 {
		return
	}
	canBarrier = true
	if !releaseStores || os.Getenv("AMIGO_FENCED_STORES") == "1" {
		return
	}
	if _, _, errno := syscall.RawSyscall(sysMembarrier, membarrierCmdRegisterGlobalExped, 0, 0); errno != 0 {
		return
	}
	relaxed.Store(true)
}

// Relaxed reports whether stores are release stores without a fence.
func Relaxed() bool { return relaxed.Load() }

// Fenced makes every later store a fenced atomic store and Barrier a no-op.
// It must be called before the process's descriptor buffers are used.
func Fenced() { relaxed.Store(false) }

// Barrier makes every store that another thread or registered process has
// issued so far visible before any load that follows it; see the package
// comment. It is a no-op while stores are fenced.
func Barrier() {
	if relaxed.Load() {
		syscall.Syscall(sysMembarrier, membarrierCmdGlobalExpedited, 0, 0)
	}
}

// BarrierPeers is Barrier for a slow path that must see the release
// stores of other processes, whatever this process decided for its own
// stores (Fenced, AMIGO_FENCED_STORES): it issues the membarrier whenever
// the kernel has it. A process that registered for it stored relaxed and
// is reached by it; one that did not stored fenced.
func BarrierPeers() {
	if canBarrier {
		syscall.Syscall(sysMembarrier, membarrierCmdGlobalExpedited, 0, 0)
	}
}
