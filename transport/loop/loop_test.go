package loop_test

import (
	"testing"

	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/loop"
	"github.com/amigo-hpc/amigo/transport/transporttest"
)

func factory(opts loop.Options) transporttest.Factory {
	return func(t *testing.T, n int) *transporttest.World {
		f, err := loop.NewFabric(n, opts)
		if err != nil {
			t.Fatal(err)
		}
		w := &transporttest.World{}
		for r := 0; r < n; r++ {
			reg := transport.NewRegions()
			a, err := f.Attach(r, reg)
			if err != nil {
				t.Fatal(err)
			}
			w.Adapters = append(w.Adapters, a)
			w.Regions = append(w.Regions, reg)
		}
		return w
	}
}

func TestConformanceInline(t *testing.T) {
	transporttest.Run(t, factory(loop.Options{RingSlots: 64, RDMASlots: 8}))
}

func TestConformanceAsync(t *testing.T) {
	transporttest.Run(t, factory(loop.Options{RingSlots: 64, RDMASlots: 8, Engine: loop.EngineAsync}))
}
