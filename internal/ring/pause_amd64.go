package ring

import "time"

// pause executes the PAUSE instruction n times: a wait that touches no
// memory (pause_amd64.s).
//
//go:noescape
func pause(n int)

// recordPause is the number of PAUSE instructions in recordWait, measured
// when the package initialises: a PAUSE takes some 10 ns on some
// processors and 40 on others.
var recordPause = calibratePause(recordWait)

// calibratePause returns how many PAUSE instructions take about d, from
// the fastest of a few timings (a slow one was interrupted).
func calibratePause(d time.Duration) int {
	const n = 128
	best := time.Hour
	for k := 0; k < 3; k++ {
		t := time.Now()
		pause(n)
		best = min(best, time.Since(t))
	}
	per := max(best/n, time.Nanosecond)
	return int(min(max(d/per, 1), 64))
}
