package tcp

import (
	"testing"

	"github.com/amigo-hpc/amigo/transport/transporttest"
)

func factory(opts Options) transporttest.Factory {
	return func(t *testing.T, n int) *transporttest.World {
		ads, regs, _ := newWorld(t, n, opts)
		w := &transporttest.World{Regions: regs}
		for _, a := range ads {
			w.Adapters = append(w.Adapters, a)
		}
		return w
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, factory(Options{RingSlots: 64, RDMASlots: 8}))
}

func TestConformanceDefaults(t *testing.T) {
	transporttest.Run(t, factory(Options{}))
}
