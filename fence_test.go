package amigo_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// Put, Fence, then a notification: the target's handler never sees the
// region stale, however large the Put (so that it moves in pieces) and
// whatever adapter carries it; Fence's callback runs after every earlier
// Put's; FenceAll's after those to every peer.
func TestFencePutNotify(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const n, rounds, size = 3, 12, 3<<20 + 17
			cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				r := c.Rank()
				x := c.Context(0)
				mem := make([]byte, size)
				g, err := c.RegisterAll(ctx, mem)
				if err != nil {
					return err
				}
				var bad error
				notified := 0
				x.SetDispatch(7, func(_ *amigo.Context, m *amigo.Message) {
					round := int(m.Data[0])
					// Rank 0 filled the region with round+1 before it notified.
					if mem[0] != byte(round+1) || mem[size-1] != byte(round+1) || !bytes.Equal(mem, bytes.Repeat([]byte{byte(round + 1)}, size)) {
						bad = fmt.Errorf("round %d: the notification saw stale data (first %d, last %d)", round, mem[0], mem[size-1])
					}
					notified++
				})
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if r == 0 {
					src := make([]byte, size)
					for round := 0; round < rounds; round++ {
						for i := range src {
							src[i] = byte(round + 1)
						}
						putsDone, fenced := 0, false
						var putDone [n]bool
						for q := 1; q < n; q++ {
							if err := x.Put(amigo.EndpointOf(q), src, g.Key(q), 0, func(err error) {
								if err != nil {
									bad = err
								}
								putDone[q] = true
								putsDone++
							}); err != nil {
								return err
							}
						}
						if round%2 == 0 {
							for q := 1; q < n; q++ {
								if err := x.Fence(amigo.EndpointOf(q), func(err error) {
									if err != nil || !putDone[q] {
										bad = fmt.Errorf("fence to rank %d done (%v) before the Put to it", q, err)
									}
								}); err != nil {
									return err
								}
							}
						} else {
							if err := x.FenceAll(func(err error) {
								if err != nil || putsDone != n-1 {
									bad = fmt.Errorf("FenceAll done (%v) with %d of %d puts done", err, putsDone, n-1)
								}
								fenced = true
							}); err != nil {
								return err
							}
						}
						for q := 1; q < n; q++ {
							if err := x.SendImmediate(amigo.EndpointOf(q), 7, nil, []byte{byte(round)}); err != nil {
								return err
							}
						}
						if err := x.Wait(ctx, func() bool { return putsDone == n-1 && (round%2 == 0 || fenced) }); err != nil {
							return err
						}
						if bad != nil {
							return bad
						}
						// The targets read src's round before the next round
						// rewrites it: they notify back through a barrier.
						if err := c.Barrier(ctx); err != nil {
							return err
						}
					}
				} else {
					for round := 0; round < rounds; round++ {
						if err := x.Wait(ctx, func() bool { return notified == round+1 || bad != nil }); err != nil {
							return err
						}
						if bad != nil {
							return bad
						}
						if err := c.Barrier(ctx); err != nil {
							return err
						}
					}
				}
				if bad != nil {
					return bad
				}
				return c.Barrier(ctx)
			})
		})
	}
}
