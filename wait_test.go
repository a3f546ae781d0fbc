package amigo_test

import (
	"context"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// TestWaitEndsAtItsPacket checks that a Wait returns as soon as a port's
// Poll made its condition true: with a packet waiting on each of two
// ports (one from the peer over shared memory, one from the rank itself
// in process), a Wait for one packet delivers exactly one, and the next
// Wait the other.
func TestWaitEndsAtItsPacket(t *testing.T) {
	cl := openOver(t, 2, amigo.Config{}, "shm")
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := 0
	c1.SetDispatch(5, func(*amigo.Context, *amigo.Message) { got++ })
	// send writes a packet into c's descriptor buffer to rank 1 (the
	// Advance injects it if the Send was queued).
	send := func(c *amigo.Context) {
		t.Helper()
		if err := c.SendImmediate(amigo.EndpointOf(1), 5, nil, []byte("12345678")); err != nil {
			t.Fatal(err)
		}
		c.Advance()
	}
	// Both links connected first.
	send(c0)
	send(c1)
	for got < 2 {
		if ctx.Err() != nil {
			t.Fatal("the first packets never arrived")
		}
		c0.Advance()
		c1.Advance()
	}
	for round := range 20 {
		got = 0
		send(c0)
		if got != 0 {
			t.Fatalf("round %d: rank 0's Advance delivered to rank 1", round)
		}
		// Rank 1's own packet goes into its buffer to itself without an
		// Advance of rank 1, which would deliver the other.
		if err := c1.SendImmediate(amigo.EndpointOf(1), 5, nil, []byte("12345678")); err != nil {
			t.Fatal(err)
		}
		if err := c1.Wait(ctx, func() bool { return got >= 1 }); err != nil {
			t.Fatal(err)
		}
		if got != 1 {
			t.Fatalf("round %d: a Wait for one packet returned with %d delivered", round, got)
		}
		if err := c1.Wait(ctx, func() bool { return got == 2 }); err != nil {
			t.Fatal(err)
		}
	}
}
