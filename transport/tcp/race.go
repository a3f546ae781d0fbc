//go:build race

package tcp

import "sync/atomic"

// ioSync tells the race detector that what a goroutine wrote before a write
// to a socket happens before what another reads after a read from a socket,
// as package os and internal/poll do for their descriptors. Sockets between
// adapters of one process (tests) carry that order through the kernel,
// where the detector cannot see it.
var ioSync atomic.Uint64

func raceReleaseMerge() { ioSync.Add(1) }
func raceAcquire()      { ioSync.Load() }
