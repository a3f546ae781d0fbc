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

// PutNotify's handler sees the Put's data, however many are in flight
// back to back, whatever their size and adapter; and a Put with no callback
// followed by a Fence and a SendImmediate orders the same way.
func TestPutNotify(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, size := range []int{24, 256<<10 + 17} {
			t.Run(fmt.Sprintf("%s/%d", over, size), func(t *testing.T) {
				const n, rounds = 3, 8
				cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
				everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
					x := c.Context(0)
					mem := make([]byte, 2*rounds*size)
					g, err := c.RegisterAll(ctx, mem)
					if err != nil {
						return err
					}
					var bad error
					notified := 0
					check := func(_ *amigo.Context, m *amigo.Message) {
						r := int(m.Header[0])
						part := mem[r*size : (r+1)*size]
						if !bytes.Equal(part, bytes.Repeat([]byte{byte(r + 1)}, size)) && bad == nil {
							bad = fmt.Errorf("notification %d saw stale data (first %d, last %d)", r, part[0], part[size-1])
						}
						notified++
					}
					x.SetDispatch(7, check)
					x.SetDispatch(8, check)
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 0 {
						srcs := make([][]byte, 2*rounds)
						putsDone := 0
						for r := range srcs {
							srcs[r] = bytes.Repeat([]byte{byte(r + 1)}, size)
						}
						for q := 1; q < n; q++ {
							ep := amigo.EndpointOf(q)
							for r := 0; r < rounds; r++ {
								if err := x.PutNotify(ep, srcs[r], g.Key(q), uint64(r*size), 7, []byte{byte(r)}, func(err error) {
									if err != nil && bad == nil {
										bad = err
									}
									putsDone++
								}); err != nil {
									return err
								}
							}
							for r := rounds; r < 2*rounds; r++ {
								if err := x.Put(ep, srcs[r], g.Key(q), uint64(r*size), nil); err != nil {
									return err
								}
								if err := x.Fence(ep, nil); err != nil {
									return err
								}
								if err := x.SendImmediate(ep, 8, []byte{byte(r)}, nil); err != nil {
									return err
								}
							}
						}
						if err := x.Wait(ctx, func() bool { return putsDone == (n-1)*rounds || bad != nil }); err != nil {
							return err
						}
					} else if err := x.Wait(ctx, func() bool { return notified == 2*rounds || bad != nil }); err != nil {
						return err
					}
					if bad != nil {
						return bad
					}
					// Rank 0's sources stay untouched until every target
					// has checked.
					return c.Barrier(ctx)
				})
			})
		}
	}
}

// A Fence waits for the operations its context started, not for the
// receiving side of the peer's messages: with an announcement from the
// peer kept by Defer (its data still at the peer, waiting for this
// context's Accept), a Put, a Fence and a FenceAll toward that peer
// complete, and the Accept after them receives the message whole.
func TestFenceBesideDeferred(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const size = 1<<20 + 5
			cl := openOver(t, 2, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				x := c.Context(0)
				region := make([]byte, 64)
				g, err := c.RegisterAll(ctx, region)
				if err != nil {
					return err
				}
				var kept amigo.Deferred
				var deferErr error
				got := false
				x.SetDispatch(9, func(_ *amigo.Context, m *amigo.Message) {
					kept, deferErr = m.Defer()
					got = true
				})
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if c.Rank() == 1 {
					msg := bytes.Repeat([]byte{0xa5}, size)
					sent := false
					var sendErr error
					if err := x.Send(amigo.EndpointOf(0), 9, nil, msg, func(err error) { sendErr, sent = err, true }); err != nil {
						return err
					}
					if err := x.Wait(ctx, func() bool { return sent }); err != nil {
						return err
					}
					if sendErr != nil {
						return sendErr
					}
					if region[0] != 7 {
						return fmt.Errorf("rank 0's Put is not in the region after its Fence: %d", region[0])
					}
					return c.Barrier(ctx)
				}
				if err := x.Wait(ctx, func() bool { return got }); err != nil {
					return err
				}
				if deferErr != nil {
					return deferErr
				}
				fenced, all := false, false
				if err := x.Put(amigo.EndpointOf(1), []byte{7}, g.Key(1), 0, nil); err != nil {
					return err
				}
				if err := x.Fence(amigo.EndpointOf(1), func(error) { fenced = true }); err != nil {
					return err
				}
				if err := x.FenceAll(func(error) { all = true }); err != nil {
					return err
				}
				if err := x.Wait(ctx, func() bool { return fenced && all }); err != nil {
					return fmt.Errorf("Fence beside a deferred announcement: %w", err)
				}
				buf := make([]byte, size)
				accepted := false
				var accErr error
				if err := x.Accept(kept, buf, func(err error) { accErr, accepted = err, true }); err != nil {
					return err
				}
				if err := x.Wait(ctx, func() bool { return accepted }); err != nil {
					return err
				}
				if accErr != nil {
					return accErr
				}
				if !bytes.Equal(buf, bytes.Repeat([]byte{0xa5}, size)) {
					return fmt.Errorf("the accepted message differs")
				}
				return c.Barrier(ctx)
			})
		})
	}
}

// Two ranks that each send the other a message large enough to be fetched
// by RDMA and then fence toward it (a PutNotify, a Fence) both complete:
// the fetch of the peer's message, the PUT after a "put" STOP and the rest
// of a stopped stream do not wait behind the receiver's own Fence, which
// waits for its own message, which waits for the peer's fetch.
func TestFenceCrossedLargeSends(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, variant := range []string{"discard", "keep", "put"} {
			t.Run(over+"/"+variant, func(t *testing.T) {
				const size = 3<<20 + 5
				cl := openOver(t, 2, amigo.Config{StopVariant: variant, SpinIterations: 50, YieldIterations: 50}, over)
				everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
					x := c.Context(0)
					peer := amigo.EndpointOf(1 - c.Rank())
					g, err := c.RegisterAll(ctx, make([]byte, 4096))
					if err != nil {
						return err
					}
					data := make([]byte, size)
					for i := range data {
						data[i] = byte(i*7 + c.Rank())
					}
					buf := make([]byte, size)
					got, notified := error(nil), false
					received := false
					x.SetDispatch(1, func(_ *amigo.Context, m *amigo.Message) {
						if err := m.Receive(buf, func(err error) { got, received = err, true }); err != nil {
							got, received = err, true
						}
					})
					x.SetDispatch(2, func(*amigo.Context, *amigo.Message) { notified = true })
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					k := amigo.NewCounter()
					k.Add(3)
					if err := x.Send(peer, 1, nil, data, k.Done()); err != nil {
						return err
					}
					if err := x.PutNotify(peer, data[:4096], g.Key(peer.Rank), 0, 2, nil, k.Done()); err != nil {
						return err
					}
					if err := x.Fence(peer, k.Done()); err != nil {
						return err
					}
					if err := x.WaitCounter(ctx, k); err != nil {
						return fmt.Errorf("rank %d: its send, PutNotify and Fence: %w", c.Rank(), err)
					}
					if err := x.Wait(ctx, func() bool { return received && notified }); err != nil {
						return fmt.Errorf("rank %d: the peer's message and notification: %w", c.Rank(), err)
					}
					if got != nil {
						return got
					}
					for i := range buf {
						if buf[i] != byte(i*7+int(peer.Rank)) {
							return fmt.Errorf("rank %d: byte %d of the peer's message is wrong", c.Rank(), i)
						}
					}
					return c.Barrier(ctx)
				})
			})
		}
	}
}
