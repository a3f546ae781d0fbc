//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport/transporttest"
)

func factory(opts Options) transporttest.Factory {
	return func(t *testing.T, n int) *transporttest.World {
		ads, regs := newWorld(t, n, opts)
		w := &transporttest.World{Regions: regs}
		for _, a := range ads {
			w.Adapters = append(w.Adapters, a)
		}
		return w
	}
}

// TestConformance runs the transport suite over each provider, with
// small rings (the full-FIFO paths) and with the defaults. The timeout is
// shorter than the default: a context that closed before its peer's
// packets reached it cannot say goodbye to that peer, whose link then
// fails by the timeout (Close).
func TestConformance(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			t.Run("small", func(t *testing.T) {
				transporttest.Run(t, factory(Options{Provider: prov, RingSlots: 64, RDMASlots: 8, RecvBuffers: 8, Timeout: 4 * time.Second}))
			})
			// Local buffers registered as FI_MR_LOCAL providers ask.
			t.Run("register-local", func(t *testing.T) {
				transporttest.Run(t, factory(Options{Provider: prov, RegisterLocal: true, Timeout: 4 * time.Second}))
			})
			t.Run("defaults", func(t *testing.T) {
				transporttest.Run(t, factory(Options{Provider: prov, Timeout: 4 * time.Second}))
			})
		})
	}
}
