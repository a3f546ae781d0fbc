//go:build race

package order

import "sync/atomic"

// raceWord gives the race detector the order that atomics outside the Go
// heap give the hardware: see RaceRelease.
var raceWord atomic.Uint64

// RaceRelease and RaceAcquire order, for the race detector, what one
// goroutine wrote before a store into memory outside the Go heap (a
// segment shared between processes, where ranks of the tests are
// goroutines of one process) with what another reads after the load that
// found it: the detector sees no atomic outside the heap. A publisher
// calls RaceRelease before its store (package ring's Publish and
// SealRecord do), a reader RaceAcquire after its load. Both are one
// atomic operation on one word in race builds, and nothing otherwise.
func RaceRelease() { raceWord.Add(1) }

// RaceAcquire: see RaceRelease.
func RaceAcquire() { raceWord.Load() }
