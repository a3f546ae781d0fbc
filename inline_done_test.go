package amigo_test

import (
	"errors"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// On a link whose descriptor buffer the receiver reads in place (loop,
// shm), an inline Send's done callback runs in the Advance that wrote it,
// without waiting for the receiver to take it: a root that sends to many
// ranks is free at once, however late they are scheduled. A send listed
// behind an earlier pending callback of the same FIFO keeps its turn.
func TestInlineSendDoneAtInjection(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			got := 0
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				if m.Inline() {
					got++
				} else {
					m.Defer() // the large send stays pending
				}
			})
			ep1 := amigo.EndpointOf(1)
			var order []int
			const n = 20
			for i := 0; i < n; i++ {
				if err := c0.Send(ep1, 1, []byte{byte(i)}, make([]byte, 1000), func(err error) {
					if err != nil {
						t.Errorf("send %d: %v", i, err)
					}
					order = append(order, i)
				}); err != nil {
					t.Fatal(err)
				}
			}
			// Callbacks run inside Advance, never inside Send.
			if len(order) != 0 {
				t.Fatalf("%d done callbacks ran inside Send", len(order))
			}
			// Rank 1 never advances here: the callbacks must not wait for it.
			for k := 0; k < 100 && len(order) < n; k++ {
				c0.Advance()
			}
			if len(order) != n || got != 0 {
				t.Fatalf("%d of %d done callbacks ran before the receiver advanced (it got %d)", len(order), n, got)
			}
			for i, v := range order {
				if v != i {
					t.Fatalf("done callbacks in order %v", order)
				}
			}
			// Behind a pending callback (the eager packet of a send just
			// above the inline limit, streamed at once, which the receiver
			// has not taken), an inline send's callback waits its turn.
			order = order[:0]
			q := cl[0].Limits()
			if q.InlineMax >= 64<<10 {
				t.Fatalf("InlineMax %d: want a send above it streamed at once (below the stop threshold)", q.InlineMax)
			}
			big := make([]byte, q.InlineMax+1)
			if err := c0.Send(ep1, 1, nil, big, func(err error) { order = append(order, -1) }); err != nil {
				t.Fatal(err)
			}
			if err := c0.Send(ep1, 1, []byte{1}, nil, func(err error) { order = append(order, 1) }); err != nil {
				t.Fatal(err)
			}
			for k := 0; k < 100; k++ {
				c0.Advance()
			}
			if len(order) != 0 {
				t.Fatalf("callbacks %v ran before the large send's, which the receiver never took", order)
			}
			advanceUntil(t, func() bool { return got == n+1 }, c0, c1)
		})
	}
}

// A peer that sends a last message and closes once its done callback ran
// is heard out: the receiver handles that message before the operations
// it had with the peer fail for the closure.
func TestLastMessageBeforeClose(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			bye := false
			c0.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { bye = true })
			announced := false
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				announced = true
				m.Defer() // never accepted: rank 0's send waits for rank 1
			})
			var sendErr error
			sendDone, byeAtFailure := false, false
			if err := c0.Send(amigo.EndpointOf(1), 1, nil, make([]byte, 1<<20), func(err error) {
				sendErr, sendDone, byeAtFailure = err, true, bye
			}); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return announced }, c0, c1)
			sent := false
			if err := c1.Send(amigo.EndpointOf(0), 2, []byte("bye"), nil, func(err error) {
				if err != nil {
					t.Errorf("bye: %v", err)
				}
				sent = true
			}); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return sent }, c1)
			if err := cl[1].Close(); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return sendDone }, c0)
			var pe *amigo.PeerError
			if !errors.As(sendErr, &pe) || pe.Addr.Rank != 1 {
				t.Fatalf("the pending send completed with %v, want an error naming rank 1", sendErr)
			}
			if !byeAtFailure {
				t.Fatalf("the send to rank 1 failed (%v) before rank 1's last message was handled (handled since: %v)", sendErr, bye)
			}
		})
	}
}
