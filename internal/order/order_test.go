package order

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Stores through Store64 and Store32 publish what was written before them
// to a goroutine that loads the word: a message-passing check over many
// rounds, in whichever mode this machine runs (release stores where the
// barrier is available), then again with fenced stores.
func TestStoresPublish(t *testing.T) {
	run := func(t *testing.T) {
		const rounds = 200000
		var flag atomic.Uint64
		var flag32 atomic.Int32
		data := make([]uint64, 8)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); i <= rounds; i++ {
				for flag.Load() != i {
					runtime.Gosched()
				}
				for k, v := range data {
					if v != i {
						t.Errorf("round %d: word %d is %d", i, k, v)
						return
					}
				}
				Store32(&flag32, int32(i))
			}
		}()
		for i := uint64(1); i <= rounds; i++ {
			for k := range data {
				data[k] = i
			}
			Store64(&flag, i)
			for flag32.Load() != int32(i) {
				if t.Failed() {
					return
				}
				runtime.Gosched()
			}
		}
		wg.Wait()
	}
	t.Logf("release stores: %v", Relaxed())
	t.Run("default", run)
	Fenced()
	if Relaxed() {
		t.Fatal("Fenced left release stores on")
	}
	Barrier() // a no-op now
	t.Run("fenced", run)
}
