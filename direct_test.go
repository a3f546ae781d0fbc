package amigo_test

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// A goroutine that posts while another owns and advances the context: its
// small messages with no callback are injected directly whenever the
// context is free and nothing of its own waits in the queue, the others are
// queued; the receiver still gets every message in the order posted.
func TestDirectInjectionKeepsOrder(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) {
			const n = 20000
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			next, bad := uint64(0), 0
			var received atomic.Uint64
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				if binary.LittleEndian.Uint64(m.Data) != next {
					bad++
				}
				next++
				received.Store(next)
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var stop atomic.Bool
			var done atomic.Int64
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { // the owner of c0
				defer wg.Done()
				_ = c0.Wait(ctx, stop.Load)
			}()
			go func() { // the receiver
				defer wg.Done()
				_ = c1.Wait(ctx, func() bool { return next == n })
			}()
			var b [8]byte
			peer := amigo.EndpointOf(1)
			for i := uint64(0); i < n; i++ {
				binary.LittleEndian.PutUint64(b[:], i)
				var err error
				switch i % 3 {
				case 0:
					err = c0.SendImmediate(peer, 1, nil, b[:])
				case 1:
					// No callback: the data must stay as it is until the
					// message left, which a direct injection does at once.
					err = c0.Send(peer, 1, nil, append([]byte(nil), b[:]...), nil)
				default:
					// A callback: always through the queue.
					buf := append([]byte(nil), b[:]...)
					err = c0.Send(peer, 1, nil, buf, func(error) { done.Add(1) })
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			// The owner of c0 stops only once everything arrived: a Wait
			// whose condition holds returns without draining what was
			// posted since, and the last messages may still be queued.
			for (done.Load() < n/3 || received.Load() < n) && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			stop.Store(true)
			_ = c0.Do(func(*amigo.Context) {})
			wg.Wait()
			if next != n || bad != 0 {
				t.Fatalf("received %d of %d messages, %d out of order", next, n, bad)
			}
			if s := c0.Stats(); s.SentInline != n {
				t.Fatalf("SentInline %d, want %d", s.SentInline, n)
			}
		})
	}
}
