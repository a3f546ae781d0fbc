package order

import "testing"

func BenchmarkBarrier(b *testing.B) {
	if !Relaxed() {
		b.Skip("no barrier here")
	}
	for i := 0; i < b.N; i++ {
		Barrier()
	}
}
