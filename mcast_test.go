package amigo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
)

var ways = []amigo.MulticastWay{amigo.MulticastForward, amigo.MulticastStoreForward}

func wayName(w amigo.MulticastWay) string {
	if w == amigo.MulticastForward {
		return "forward"
	}
	return "store-forward"
}

// Both ways, 1 to 16 targets, sizes across piece boundaries: every target
// gets every byte, and the origin sends the data once.
func TestMulticast(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) { testMulticast(t, over) })
	}
}

func testMulticast(t *testing.T, over string) {
	const chunk = 64 << 10
	sizes := []int{0, 1, chunk, 3*chunk + 17, 2 << 20}
	counts := []int{1, 2, 3, 5, 8, 16}
	if over != "loop" {
		counts = []int{1, 3, 7} // ranks with segments of their own: keep it short
	}
	for _, way := range ways {
		for _, targets := range counts {
			t.Run(fmt.Sprintf("%s/%d", wayName(way), targets), func(t *testing.T) {
				amigotest.Run(t, targets+1, amigotest.Options{Over: over, Config: amigo.Config{McastChunk: chunk}}, func(r *amigotest.Rank) error {
					c := r.Ctx
					got, errs := 0, 0
					var buf []byte
					var recvErr error
					c.SetDispatch(7, func(c *amigo.Context, m *amigo.Message) {
						if !m.Multicast() || string(m.Header) != "hdr" {
							panic("not a multicast announcement")
						}
						buf = make([]byte, m.Size())
						m.Receive(buf, func(err error) {
							got++
							if err != nil {
								errs++
								recvErr = err
							}
						})
					})
					if err := r.Barrier(); err != nil {
						return err
					}
					for round, size := range sizes {
						if r.Rank() == 0 {
							data := fill(make([]byte, size), round+7)
							eps := make([]amigo.Endpoint, targets)
							for i := range eps {
								eps[i] = amigo.EndpointOf(i + 1)
							}
							var sent error
							done := false
							before := c.Stats().MulticastBytesPut
							if err := c.MulticastWith(&amigo.MulticastParams{Targets: eps, Dispatch: 7, Header: []byte("hdr"), Data: data, Way: way,
								Sent: func(err error) { sent, done = err, true }}); err != nil {
								return err
							}
							if err := c.Wait(r.Deadline, func() bool { return done }); err != nil {
								return err
							}
							if sent != nil {
								return fmt.Errorf("size %d: %w", size, sent)
							}
							if put := c.Stats().MulticastBytesPut - before; put != uint64(size) {
								return fmt.Errorf("size %d: origin put %d bytes, want the data once", size, put)
							}
						} else {
							want := round + 1
							if err := c.Wait(r.Deadline, func() bool { return got == want }); err != nil {
								return fmt.Errorf("size %d: %w", size, err)
							}
							if errs > 0 {
								return recvErr
							}
							if !bytes.Equal(buf, fill(make([]byte, size), round+7)) {
								return fmt.Errorf("size %d: data differs", size)
							}
						}
						if err := r.Barrier(); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}

// A target that declines fails the multicast at the origin and at the
// targets that took part, with an error naming it.
func TestMulticastDecline(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		for _, way := range ways {
			t.Run(over+"/"+wayName(way), func(t *testing.T) { testMulticastDecline(t, over, way) })
		}
	}
}

func testMulticastDecline(t *testing.T, over string, way amigo.MulticastWay) {
	{
		{
			const targets, decliner = 5, 3
			amigotest.Run(t, targets+1, amigotest.Options{Over: over}, func(r *amigotest.Rank) error {
				c := r.Ctx
				var recvErr error
				got := false
				c.SetDispatch(7, func(c *amigo.Context, m *amigo.Message) {
					if r.Rank() == decliner {
						return // names no buffer
					}
					m.Receive(make([]byte, m.Size()), func(err error) { recvErr, got = err, true })
				})
				if err := r.Barrier(); err != nil {
					return err
				}
				if r.Rank() == 0 {
					eps := make([]amigo.Endpoint, targets)
					for i := range eps {
						eps[i] = amigo.EndpointOf(i + 1)
					}
					var sent error
					done := false
					c.Multicast(eps, 7, nil, make([]byte, 1<<20), func(err error) { sent, done = err, true })
					if err := c.Wait(r.Deadline, func() bool { return done }); err != nil {
						return err
					}
					if err := namesRank(sent, decliner); err != nil {
						return fmt.Errorf("origin: %w", err)
					}
					if !errors.Is(sent, amigo.ErrDeclined) {
						return fmt.Errorf("origin: %v does not say the target declined", sent)
					}
				} else if r.Rank() != decliner && (way == amigo.MulticastForward || r.Rank() < decliner) {
					// Targets that named a buffer learn that the multicast failed.
					if err := c.Wait(r.Deadline, func() bool { return got }); err != nil {
						return err
					}
					if !errors.Is(recvErr, amigo.ErrMulticast) || !bytes.Contains([]byte(recvErr.Error()), []byte(fmt.Sprintf("rank %d", decliner))) {
						return fmt.Errorf("target %d: %v, want a multicast failure naming rank %d", r.Rank(), recvErr, decliner)
					}
				}
				return r.Barrier()
			})
		}
	}
}

// A target that dies in the middle of the transfer fails the multicast
// within a bounded time: the origin's error names it, and every other target
// either has all the data or an error.
func TestMulticastTargetDies(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		for _, way := range ways {
			t.Run(over+"/"+wayName(way), func(t *testing.T) { testMulticastTargetDies(t, over, way) })
		}
	}
}

func testMulticastTargetDies(t *testing.T, over string, way amigo.MulticastWay) {
	{
		{
			const targets, victim, size = 6, 3, 16 << 20
			cfg := amigo.Config{McastChunk: 64 << 10}
			amigotest.Run(t, targets+1, amigotest.Options{Config: cfg, Over: over}, func(r *amigotest.Rank) error {
				c := r.Ctx
				var recvErr error
				got := false
				var buf []byte
				c.SetDispatch(7, func(c *amigo.Context, m *amigo.Message) {
					buf = make([]byte, m.Size())
					m.Receive(buf, func(err error) { recvErr, got = err, true })
				})
				if err := r.Barrier(); err != nil {
					return err
				}
				switch {
				case r.Rank() == 0:
					eps := make([]amigo.Endpoint, targets)
					for i := range eps {
						eps[i] = amigo.EndpointOf(i + 1)
					}
					var sent error
					done := false
					data := make([]byte, size)
					fastFill(data, 5)
					c.Multicast(eps, 7, nil, data, func(err error) { sent, done = err, true })
					if err := c.Wait(r.Deadline, func() bool { return done }); err != nil {
						return err
					}
					if err := namesRank(sent, victim); err != nil {
						return fmt.Errorf("origin: %w", err)
					}
				case r.Rank() == victim:
					// Die once some data went through.
					if err := c.Wait(r.Deadline, func() bool { return c.Stats().MulticastBytesPut > 0 }); err != nil {
						return err
					}
					return r.Client.Close()
				default:
					if err := c.Wait(r.Deadline, func() bool { return got }); err != nil {
						return err
					}
					want := make([]byte, size)
					fastFill(want, 5)
					if recvErr == nil && !bytes.Equal(buf, want) {
						return fmt.Errorf("target %d: completed with wrong data", r.Rank())
					}
					if r.Rank() > victim && recvErr == nil {
						return fmt.Errorf("target %d after the dead one completed", r.Rank())
					}
				}
				return nil
			})
		}
	}
}

func namesRank(err error, rank int) error {
	var pe *amigo.PeerError
	if err == nil {
		return errors.New("no error")
	}
	if !errors.As(err, &pe) || int(pe.Addr.Rank) != rank {
		return fmt.Errorf("%v does not name rank %d", err, rank)
	}
	return nil
}

// A multicast posted after a Fence toward its first target starts once the
// Fence is over, and does not hold the Fence up: every rank sends its next
// neighbour a large message, fences toward it and multicasts to the others
// starting with it, while the others do the same. All complete, and every
// target gets every multicast.
func TestMulticastAfterFence(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const n, size = 3, 1<<20 + 3
			cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				x, me := c.Context(0), c.Rank()
				next := amigo.EndpointOf((me + 1) % n)
				data := make([]byte, size)
				for i := range data {
					data[i] = byte(i + me)
				}
				got, received := 0, 0
				var bad error
				x.SetDispatch(1, func(_ *amigo.Context, m *amigo.Message) {
					buf := make([]byte, m.Size())
					from := m.Source.Rank
					mc := m.Multicast()
					if err := m.Receive(buf, func(err error) {
						received++
						if err != nil {
							bad = err
						} else if mc && buf[size-1] != byte(size-1+from) {
							bad = fmt.Errorf("rank %d: multicast from %d: wrong data", me, from)
						}
						if mc {
							got++
						}
					}); err != nil {
						bad = err
					}
				})
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				var targets []amigo.Endpoint
				for i := 1; i < n; i++ {
					targets = append(targets, amigo.EndpointOf((me+i)%n))
				}
				k := amigo.NewCounter()
				k.Add(3)
				if err := x.Send(next, 1, nil, data, k.Done()); err != nil {
					return err
				}
				if err := x.Fence(next, k.Done()); err != nil {
					return err
				}
				if err := x.Multicast(targets, 1, nil, data, k.Done()); err != nil {
					return err
				}
				if err := x.WaitCounter(ctx, k); err != nil {
					return fmt.Errorf("rank %d: send, fence, multicast: %w", me, err)
				}
				if err := x.Wait(ctx, func() bool { return got == n-1 && received == n || bad != nil }); err != nil {
					return fmt.Errorf("rank %d: %d multicasts, %d messages received: %w", me, got, received, err)
				}
				if bad != nil {
					return bad
				}
				return c.Barrier(ctx)
			})
		})
	}
}
