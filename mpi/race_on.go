//go:build race

package mpi

import (
	"runtime"
	"sync"
	"unsafe"
)

// The race detector sees no synchronisation through a collectives'
// segment (it does not watch memory mapped outside the Go heap, and each
// rank maps the segment at an address of its own), so ranks that are
// goroutines of one process tell it: a rank releases the segment's key
// when it arrives and acquires it once every rank has, which orders what
// each rank did before a collective before what every rank does after it.

var raceKeys sync.Map // [2]int64 (maker's pid and descriptor) → *uint64

// raceKey returns the key of the segment its maker knew as (pid, fd).
func raceKey(id [2]int64) unsafe.Pointer {
	k, _ := raceKeys.LoadOrStore(id, new(uint64))
	return unsafe.Pointer(k.(*uint64))
}

func raceRelease(key unsafe.Pointer) { runtime.RaceReleaseMerge(key) }

func raceAcquire(key unsafe.Pointer) { runtime.RaceAcquire(key) }
