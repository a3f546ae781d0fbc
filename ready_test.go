package amigo_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Ready's channel fires for a packet that arrives while the owner waits on
// it and for an instruction another goroutine posts, within half a second
// (its bound is a second); every event happens once the context is known to
// be asleep, so the wake-up is the one under test, on each adapter.
func TestReady(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			got := 0
			c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got++ })
			// Connect first: links come up on first use.
			if err := c1.SendImmediate(amigo.EndpointOf(0), 1, nil, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c0.Wait(ctx, func() bool { c1.Advance(); return got == 1 }); err != nil {
				t.Fatal(err)
			}
			// wait advances c0 until it has nothing to do, then waits on
			// Ready until the channel fires after act started; act runs
			// once c0 is known to be asleep. A receive before that is
			// spurious (allowed): c0 waits on Ready again, which advances.
			wait := func(what string, act func()) {
				t.Helper()
				for c0.Advance() > 0 {
				}
				slept, _ := amigo.Slept(c0)
				var actedAt atomic.Int64
				done := make(chan struct{})
				go func() {
					defer close(done)
					for !amigo.Asleep(c0, slept+1) {
						if ctx.Err() != nil {
							return
						}
						time.Sleep(20 * time.Microsecond)
					}
					actedAt.Store(time.Now().UnixNano())
					act()
				}()
				for {
					select {
					case <-c0.Ready():
					case <-ctx.Done():
						t.Fatalf("%s: Ready never fired", what)
					}
					if at := actedAt.Load(); at != 0 {
						if d := time.Since(time.Unix(0, at)); d > 500*time.Millisecond {
							t.Errorf("%s: Ready fired %v after the event: by its bound, not by the event", what, d)
						}
						break
					}
					// Spurious: Ready advances once and waits again.
				}
				<-done
			}
			for i := 0; i < 20; i++ {
				wait("packet", func() {
					c1.Do(func(c *amigo.Context) { _ = c.SendImmediate(amigo.EndpointOf(0), 1, nil, []byte("x")) })
					for k := 0; k < 1000; k++ {
						c1.Advance()
					}
				})
				for d := time.Now().Add(10 * time.Second); got < i+2 && time.Now().Before(d); {
					c0.Advance()
					c1.Advance()
				}
				if got != i+2 {
					t.Fatalf("round %d: %d packets delivered, want %d", i, got, i+2)
				}
			}
			ran := false
			wait("Do", func() { _ = c0.Do(func(*amigo.Context) { ran = true }) })
			for c0.Advance() > 0 {
			}
			if !ran {
				t.Fatal("the instruction that fired Ready did not run")
			}
			sleeps, _ := amigo.Slept(c0)
			if sleeps < 21 {
				t.Fatalf("the context slept %d times for 21 waits", sleeps)
			}
		})
	}
}

// AdvanceWait returns 0 after its timeout when nothing happens, and the
// events handled when a packet arrives while it sleeps.
func TestAdvanceWait(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			got := 0
			c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got++ })
			if err := c1.SendImmediate(amigo.EndpointOf(0), 1, nil, nil); err != nil {
				t.Fatal(err)
			}
			for d := time.Now().Add(10 * time.Second); got == 0 && time.Now().Before(d); {
				c0.Advance()
				c1.Advance()
			}
			for c0.Advance() > 0 {
			}
			start := time.Now()
			if n := c0.AdvanceWait(20 * time.Millisecond); n != 0 {
				t.Fatalf("AdvanceWait with nothing to do handled %d events", n)
			}
			if d := time.Since(start); d < 20*time.Millisecond {
				t.Fatalf("AdvanceWait returned after %v, before its timeout", d)
			}
			slept, _ := amigo.Slept(c0)
			helped := make(chan struct{})
			defer func() { <-helped }() // it advances c1: done before c1 closes
			go func() {
				defer close(helped)
				for deadline := time.Now().Add(30 * time.Second); !amigo.Asleep(c0, slept+1); {
					if time.Now().After(deadline) {
						return // the test fails: the packet never comes
					}
					time.Sleep(20 * time.Microsecond)
				}
				c1.Do(func(c *amigo.Context) { _ = c.SendImmediate(amigo.EndpointOf(0), 1, nil, nil) })
				for k := 0; k < 1000; k++ {
					c1.Advance()
				}
			}()
			start = time.Now()
			for got < 2 {
				c0.AdvanceWait(time.Minute)
				if time.Since(start) > 30*time.Second {
					t.Fatal("the packet never arrived")
				}
			}
		})
	}
}
