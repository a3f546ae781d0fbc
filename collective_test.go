package amigo_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// everyRank runs fn on each client's goroutine, which owns its context 0.
func everyRank(t *testing.T, cl []*amigo.Client, fn func(ctx context.Context, cl *amigo.Client) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(cl))
	var wg sync.WaitGroup
	for r := range cl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(ctx, cl[r])
		}()
	}
	wg.Wait()
	failed := false
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
			failed = true
		}
	}
	if failed {
		t.FailNow()
	}
}

// No rank leaves a Barrier before every rank entered it: each rank records
// the phase it reached, some late, and after the barrier finds every rank
// at least there; on 5 ranks (not a power of two) over each adapter.
func TestClientBarrier(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const n, phases = 5, 30
			cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			var reached [n]atomic.Int64
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				r := c.Rank()
				for ph := int64(1); ph <= phases; ph++ {
					if (int(ph)+r)%n == 0 {
						time.Sleep(time.Millisecond) // a late rank
					}
					reached[r].Store(ph)
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					for q := range reached {
						if got := reached[q].Load(); got < ph {
							return fmt.Errorf("phase %d: left the barrier while rank %d was at phase %d", ph, q, got)
						}
					}
				}
				return nil
			})
		})
	}
}

// RegisterAll hands every rank every rank's key and length; with them each
// rank Puts its rank into its slot of every other rank's region (a
// histogram by Put), a Barrier separates the phases, and every region holds
// every rank's mark.
func TestRegisterAll(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const n = 4
			cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				r := c.Rank()
				mem := make([]byte, 8*n+r) // lengths differ by rank
				for round := 0; round < 2; round++ {
					g, err := c.RegisterAll(ctx, mem)
					if err != nil {
						return err
					}
					for q := 0; q < n; q++ {
						if g.Len(q) != 8*n+q {
							return fmt.Errorf("rank %d's region: %d bytes, want %d", q, g.Len(q), 8*n+q)
						}
					}
					if err := c.Barrier(ctx); err != nil { // every region registered and zero
						return err
					}
					x := c.Context(0)
					pending := 0
					for q := 0; q < n; q++ {
						if q == r {
							continue
						}
						var mark [8]byte
						binary.LittleEndian.PutUint64(mark[:], uint64(100*round+r+1))
						pending++
						if err := x.Put(amigo.EndpointOf(q), mark[:], g.Key(q), uint64(8*r), func(err error) {
							if err != nil {
								t.Error(err)
							}
							pending--
						}); err != nil {
							return err
						}
					}
					if err := x.Wait(ctx, func() bool { return pending == 0 }); err != nil {
						return err
					}
					if err := c.Barrier(ctx); err != nil { // every Put landed
						return err
					}
					for q := 0; q < n; q++ {
						if q == r {
							continue
						}
						if got := binary.LittleEndian.Uint64(mem[8*q:]); got != uint64(100*round+q+1) {
							return fmt.Errorf("round %d: slot of rank %d holds %d", round, q, got)
						}
					}
					if err := c.Barrier(ctx); err != nil { // every rank checked
						return err
					}
					if err := g.Local.Deregister(); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
