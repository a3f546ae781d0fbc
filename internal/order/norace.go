//go:build !race

package order

// RaceRelease does nothing outside race builds (see race.go).
func RaceRelease() {}

// RaceAcquire does nothing outside race builds (see race.go).
func RaceAcquire() {}
