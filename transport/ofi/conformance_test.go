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
			// One receive buffer per message, as on providers without
			// multi-receive buffers (the small buffers above are
			// multi-receive ones two messages large, given back and
			// reposted all the time).
			t.Run("single-recv", func(t *testing.T) {
				transporttest.Run(t, factory(Options{Provider: prov, SingleRecv: true, RingSlots: 64, RecvBuffers: 8, Timeout: 4 * time.Second}))
			})
		})
	}
}

// The providers tested here have multi-receive buffers, and the adapter
// uses them unless told not to.
func TestMultiRecvChosen(t *testing.T) {
	for _, prov := range providers() {
		for _, single := range []bool{false, true} {
			ads, _ := newWorld(t, 2, Options{Provider: prov, SingleRecv: single})
			got := ads[0].multi
			ads[0].Close()
			ads[1].Close()
			if got == single {
				t.Errorf("%s, SingleRecv %v: multi-receive buffers %v", prov, single, got)
			}
		}
	}
}
