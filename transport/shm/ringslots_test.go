package shm

import (
	"testing"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// RingSlotsFor keeps the descriptor buffers into one rank within
// ringBudget, between its least and maxAutoSlots.
func TestRingSlotsFor(t *testing.T) {
	for _, c := range []struct{ nlocal, nctx, least, want int }{
		{2, 1, 1024, 8192},
		{4, 1, 1024, 8192},
		{5, 1, 1024, 4096},
		{8, 1, 1024, 4096},
		{9, 1, 1024, 2048},
		{16, 1, 1024, 2048},
		{17, 1, 1024, 1024},
		{32, 1, 1024, 1024},
		{128, 1, 1024, 1024},
		{2, 2, 1024, 4096},
		{2, 4, 1024, 1024},
		{32, 1, 2048, 2048},
		{2, 1, 8192, 8192},
		{4, 1, 64, 8192},
		{128, 1, 64, 256},
	} {
		got := RingSlotsFor(c.nlocal, c.nctx, c.least)
		if got != c.want {
			t.Errorf("RingSlotsFor(%d, %d, %d) = %d, want %d", c.nlocal, c.nctx, c.least, got, c.want)
		}
		if got > c.least && c.nlocal*c.nctx*c.nctx*got*ring.SlotSize > ringBudget {
			t.Errorf("RingSlotsFor(%d, %d, %d) = %d: over the budget", c.nlocal, c.nctx, c.least, got)
		}
	}
}

// A rank's segment holds descriptor buffers of the size chosen for its
// host's ranks, or of the size the options set.
func TestAdapterRingSlots(t *testing.T) {
	for _, c := range []struct {
		ranks int
		opts  Options
		want  int
	}{
		{2, Options{}, 8192},
		{8, Options{}, 4096},
		{32, Options{}, 1024},
		{2, Options{RingSlots: 128}, 128},
		{2, Options{MinRingSlots: 8192}, 8192},
	} {
		jobs := bootstrap.NewLocal(c.ranks)
		a, err := New(jobs[0], transport.NewRegions(), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.RingSlots(); got != c.want {
			t.Errorf("%d ranks, %+v: %d ring slots, want %d", c.ranks, c.opts, got, c.want)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
