package amigo

import (
	"math/rand/v2"
	"testing"

	"github.com/amigo-hpc/amigo/internal/wire"
)

// A peer's streams stay findable, each at the index it records, however
// they complete: announced in windows and released in random order.
func TestStreamsReleasedInAnyOrder(t *testing.T) {
	c := &Context{peers: make([]*peer, 1), cfg: &Config{}}
	c.ops.c = c
	c.cfg.Protocol = "eager" // no STOP decisions: only the list is under test
	p := &peer{}
	c.peers[0] = p
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint64]*op{}
	next := uint64(1)
	check := func() {
		t.Helper()
		if len(p.streams) != len(live) {
			t.Fatalf("%d streams listed, %d live", len(p.streams), len(live))
		}
		for i, o := range p.streams {
			if o.sidx != i {
				t.Fatalf("stream of op %d at index %d records index %d", o.srcOp, i, o.sidx)
			}
			if live[o.srcOp] != o {
				t.Fatalf("stream of op %d listed but not live", o.srcOp)
			}
		}
		for id, o := range live {
			if c.findStream(0, id) != o {
				t.Fatalf("op %d not found", id)
			}
		}
	}
	for round := 0; round < 200; round++ {
		for n := rng.IntN(70); n > 0; n-- {
			pk := wire.Packet{Kind: wire.KindSEND, Op: next, Size: 1 << 20}
			live[next] = c.announce(0, &pk)
			next++
		}
		check()
		for id, o := range live {
			if rng.IntN(3) == 0 {
				continue
			}
			c.releaseStream(o)
			delete(live, id)
			if c.findStream(0, id) != nil {
				t.Fatalf("op %d found after its release", id)
			}
		}
		check()
	}
}
