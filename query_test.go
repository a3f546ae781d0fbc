package amigo_test

import (
	"errors"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// Limits follow the effective configuration, and Peer names the adapter
// each rank is reached by, on each adapter.
func TestQuery(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 3, amigo.Config{InlineMax: 4000}, over)
			l := cl[0].Limits()
			want := amigo.Limits{ImmediateMax: amigo.ImmediateMax, InlineMax: 4000, HeaderMax: 4000, Dispatches: amigo.MaxDispatch, Contexts: 1}
			if l != want {
				t.Fatalf("Limits %+v, want %+v", l, want)
			}
			// A send of InlineMax bytes is inline; SendImmediate takes
			// ImmediateMax and refuses one more.
			c := cl[0].Context(0)
			if err := c.SendImmediate(amigo.EndpointOf(1), 1, nil, make([]byte, l.ImmediateMax)); err != nil {
				t.Fatalf("SendImmediate of ImmediateMax bytes: %v", err)
			}
			if err := c.SendImmediate(amigo.EndpointOf(1), 1, nil, make([]byte, l.ImmediateMax+1)); !errors.Is(err, amigo.ErrTooLarge) {
				t.Fatalf("SendImmediate of ImmediateMax+1 bytes: %v, want ErrTooLarge", err)
			}
			for r := 0; r < 3; r++ {
				p, err := cl[0].Peer(r)
				if err != nil {
					t.Fatal(err)
				}
				adapter, sameProc := over, false
				if r == 0 || over == "loop" {
					adapter, sameProc = "loop", true
				}
				if p.Adapter != adapter || p.SameProcess != sameProc || !p.SameHost {
					t.Fatalf("rank %d: %+v, want adapter %s, same process %v, same host", r, p, adapter, sameProc)
				}
				if len(p.Atomics) != 6 || p.AtomicsByInitiator != (adapter != "tcp") {
					t.Fatalf("rank %d over %s: atomics %v, by initiator %v", r, adapter, p.Atomics, p.AtomicsByInitiator)
				}
			}
			if _, err := cl[0].Peer(3); !errors.Is(err, amigo.ErrUnknownEndpoint) {
				t.Fatalf("Peer(3) of 3 ranks: %v", err)
			}
		})
	}
}
