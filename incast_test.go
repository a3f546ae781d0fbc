package amigo_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
)

// fastFill fills b with a pattern that depends on seed, by doubling copies.
func fastFill(b []byte, seed int) {
	const block = 4096
	n := min(block, len(b))
	for i := 0; i < n; i++ {
		b[i] = byte(seed*97 + i*13 + i>>7)
	}
	for done := n; done < len(b); done *= 2 {
		copy(b[done:], b[:done])
	}
	// Make every block differ so that a misplaced block shows.
	for off := block; off+8 <= len(b); off += block {
		b[off] = byte(off >> 12)
		b[off+1] = byte(off >> 20)
		b[off+2] = byte(seed)
	}
}

// Incast: 15 senders each send 64 MiB to one receiver that posts its
// receives only once every sender has been stopped. The receiver holds no
// more unexpected data than its budget, and every byte arrives.
//
// Under the default policy a receiver stops a large deferred message at
// once; with StopAbove out of reach only the budget stops the streams, and
// must still bound the memory held.
func TestIncast(t *testing.T) {
	for _, policy := range []string{"default", "budget-only"} {
		for _, v := range variants {
			t.Run(policy+"/"+v, func(t *testing.T) { incast(t, policy, v) })
		}
	}
}

func incast(t *testing.T, policy, v string) {
	{
		{
			const senders, size = 15, 64 << 20
			const budget = 8 << 20
			cfg := amigo.Config{StopVariant: v, UnexpectedBudget: budget}
			if policy == "budget-only" {
				cfg.StopAbove = 1 << 30
			}
			var peak int
			amigotest.Run(t, senders+1, amigotest.Options{Config: cfg}, func(r *amigotest.Rank) error {
				c := r.Ctx
				if r.Rank() > 0 {
					data := make([]byte, size)
					fastFill(data, r.Rank())
					var sent error
					done := false
					if err := c.Send(amigo.EndpointOf(0), 1, nil, data, func(err error) { sent, done = err, true }); err != nil {
						return err
					}
					if err := c.Wait(r.Deadline, func() bool { return done }); err != nil {
						return err
					}
					return sent
				}
				var defd []amigo.Deferred
				var from []int
				c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					d, err := m.Defer()
					if err != nil {
						panic(err)
					}
					defd = append(defd, d)
					from = append(from, m.Source.Rank)
				})
				// Wait for every announcement and every STOP the budget forces.
				if err := c.Wait(r.Deadline, func() bool { return len(defd) == senders && c.Stats().Stops >= senders-budget/size }); err != nil {
					return fmt.Errorf("announcements %d, stops %d: %w", len(defd), c.Stats().Stops, err)
				}
				for i := 0; i < 20000; i++ { // let streams that were not stopped run dry
					c.Advance()
				}
				held := c.Stats().UnexpectedPeak
				// Now the receives, one at a time.
				want := make([]byte, size)
				buf := make([]byte, size)
				for i, d := range defd {
					var got error
					done := false
					if err := c.Accept(d, buf, func(err error) { got, done = err, true }); err != nil {
						return err
					}
					if err := c.Wait(r.Deadline, func() bool { return done }); err != nil {
						return err
					}
					if got != nil {
						return got
					}
					fastFill(want, from[i])
					if !bytes.Equal(buf, want) {
						return fmt.Errorf("message from rank %d corrupt", from[i])
					}
					clear(buf)
				}
				s := c.Stats()
				peak = s.UnexpectedPeak
				if s.UnexpectedPeak > budget {
					return fmt.Errorf("unexpected data peaked at %d bytes, budget %d", s.UnexpectedPeak, budget)
				}
				t.Logf("%s %s: unexpected data peak %d bytes before the receives, %d overall (budget %d); STOPs %d; eager kept %d, dropped %d; fetched %d",
					policy, v, held, s.UnexpectedPeak, budget, s.Stops, s.EagerBytesKept, s.EagerBytesDropped, s.FetchedBytes)
				return nil
			})
			if policy == "budget-only" && peak == 0 {
				t.Fatal("the receiver held no unexpected data at all")
			}
		}
	}
}
