package shm

import (
	"testing"
	"time"
)

// The port's chooser maps waypick's ways onto its modes: cross-memory
// attach first, then the pipelined copy, then the faster of the two.
func TestWayChooserModes(t *testing.T) {
	var w wayChooser
	for i, want := range []int{modeCMA, modeCMA, modePipe, modePipe} {
		m := w.pick()
		if m != want {
			t.Fatalf("pick %d: %d, want %d", i, m, want)
		}
		d := 40 * time.Microsecond
		if m == modePipe {
			d = 20 * time.Microsecond
		}
		w.record(m, 1<<20, d)
	}
	if w.Rate(wayIndex(modePipe)) <= w.Rate(wayIndex(modeCMA)) {
		t.Fatalf("rates: CMA %v, pipe %v", w.Rate(0), w.Rate(1))
	}
	if m := w.pick(); m != modePipe {
		t.Fatalf("pick after the pipe measured faster: %d", m)
	}
}
