//go:build race

package shm

import "sync/atomic"

// The race detector does not see atomic operations on memory outside the Go
// heap, so it cannot see that a counter in a shared segment orders the
// copies before it with the copies after it. When ranks are goroutines of
// one process (the tests), each side of such an exchange also touches this
// word: raceRelease after its copies, raceAcquire before it trusts the
// other's, which gives the detector the edge the segment's atomics give the
// hardware.
var raceWord atomic.Uint64

func raceRelease() { raceWord.Add(1) }
func raceAcquire() { raceWord.Load() }
