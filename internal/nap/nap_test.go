package nap

import (
	"testing"
	"time"
)

// Nap lasts at least what it was asked, short and long.
func TestNapAtLeast(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, 20 * time.Microsecond, 200 * time.Microsecond, 2 * time.Millisecond} {
		for i := 0; i < 20; i++ {
			start := time.Now()
			Nap(d)
			if el := time.Since(start); el < d {
				t.Fatalf("Nap(%v) returned after %v", d, el)
			}
		}
	}
}

// BenchmarkNap and BenchmarkSleep: how long a 20 us wait lasts, by Nap
// and by time.Sleep, as ns/op.
func BenchmarkNap(b *testing.B) {
	for b.Loop() {
		Nap(20 * time.Microsecond)
	}
}

func BenchmarkSleep(b *testing.B) {
	for b.Loop() {
		time.Sleep(20 * time.Microsecond)
	}
}
