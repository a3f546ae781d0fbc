package amigo_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/order"
)

// The doorbell handshake loses no wake-up: two ranks ping-pong with a
// waiting policy that sleeps at once (one idle Advance, no yields) and a
// sleep bound of a minute, so every message reaches a consumer that is
// arming or asleep; a producer that missed the armed word would leave the
// consumer asleep to the bound. With release stores (package order) this
// is what order.Barrier in Doorbell.Arm guarantees.
//
// Half the pings go to a consumer known to be asleep (its doorbell armed and
// its sleep entered since the previous such ping), so the ring that wakes it
// is exercised on every machine, however fast; the other half follow a pause
// of 0 to 14 microseconds, their rings racing the consumer's arming.
func TestSleepWakeHandshake(t *testing.T) {
	cfg := amigo.Config{SpinIterations: 1, YieldIterations: 1, SleepMax: time.Minute}
	cl, err := amigo.NewLocal(2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	const rounds = 20000
	got0, got1 := 0, 0
	c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got0++ })
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		got1++
		_ = m.Reply(1, nil, m.Data)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	var err1 error
	go func() {
		defer wg.Done()
		err1 = c1.Wait(ctx, func() bool { return got1 == rounds })
	}()
	start := time.Now()
	ep1 := amigo.EndpointOf(1)
	forced := 0
	var entered uint64 // rank 1's sleeps when the last forced ping went
	for i := 1; i <= rounds; i++ {
		if i%2 == 0 {
			// Wait until rank 1 sleeps again: it slept before the last
			// forced ping, so a sleep entered since is a new one.
			for !amigo.Asleep(c1, entered+1) {
				if ctx.Err() != nil {
					t.Fatalf("round %d: rank 1 never went to sleep", i)
				}
				runtime.Gosched()
			}
			entered, _ = amigo.Slept(c1)
			forced++
		} else {
			for t0 := time.Now(); time.Since(t0) < time.Duration(i%8)*2*time.Microsecond; {
			}
		}
		if err := c0.SendImmediate(ep1, 1, nil, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if err := c0.Wait(ctx, func() bool { return got0 == i }); err != nil {
			t.Fatalf("round %d of %d: %v (a lost wake-up sleeps to the bound)", i, rounds, err)
		}
	}
	wg.Wait()
	if err1 != nil {
		t.Fatal(err1)
	}
	s0, s1 := c0.Stats(), c1.Stats()
	sleeps, rings := amigo.Slept(c1)
	t.Logf("%d round trips in %v, release stores %v; sleeps %d and %d, timed out %d and %d; rank 1 woken by %d rings, %d pings sent to it asleep",
		rounds, time.Since(start).Round(time.Millisecond), order.Relaxed(), s0.Sleeps, s1.Sleeps, s0.SleepTimeouts, s1.SleepTimeouts, rings, forced)
	// Every forced ping found rank 1's doorbell armed and its sleep entered:
	// only that ping's ring could clear the word.
	if rings < uint64(forced) || sleeps < uint64(forced) {
		t.Fatalf("rank 1 slept %d times and was rung %d times for %d pings sent to it asleep", sleeps, rings, forced)
	}
	if s0.SleepTimeouts+s1.SleepTimeouts != 0 {
		t.Fatalf("%d sleeps ran to their bound of a minute", s0.SleepTimeouts+s1.SleepTimeouts)
	}
}
