package amigo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// A rank that closes the moment its handler has run still sends the
// acknowledgement it owes for that message: the sender's remote
// completion reports success, not the receiver's goodbye. In the queued
// case the closing rank first fills its descriptor buffer toward the
// sender with messages of its own, so that the acknowledgement waits
// behind a full FIFO when Close comes; those messages arrive too. Each
// case runs several jobs: every one must come out clean.
func TestCloseSendsOwedAck(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, queued := range []bool{false, true} {
			name := over + "/direct"
			if queued {
				name = over + "/queued"
			}
			t.Run(name, func(t *testing.T) {
				for round := 0; round < 20; round++ {
					if err := closeAfterHandler(t, over, queued); err != nil {
						t.Fatalf("round %d: %v", round, err)
					}
				}
			})
		}
	}
}

// closeAfterHandler runs one job of closeAfterHandler's case: rank 1 sends
// rank 0 a message with remote completion, rank 0 closes right after the
// Advance that ran its handler.
func closeAfterHandler(t *testing.T, over string, queued bool) error {
	const slots = 64 // the descriptor buffer's, for the queued case
	cl := openOver(t, 2, amigo.Config{RingSlots: slots}, over)
	a, b := cl[0].Context(0), cl[1].Context(0)
	got := false
	a.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got = true })
	fill := 0
	if queued {
		// Two FIFOs' worth of descriptors of a few slots each: the
		// acknowledgement cannot be injected when it is due.
		fill = 2 * slots
	}
	arrived := 0
	b.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { arrived++ })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rerr error
	rdone := false
	if err := b.SendWith(&amigo.SendParams{Dest: amigo.EndpointOf(0), Dispatch: 1, Data: []byte("last"),
		RemoteDone: func(err error) { rerr, rdone = err, true }}); err != nil {
		return err
	}
	for i := 0; i < fill; i++ {
		if err := a.SendImmediate(amigo.EndpointOf(1), 2, nil, make([]byte, 100)); err != nil {
			return err
		}
	}
	waited := make(chan error, 1)
	go func() {
		waited <- b.Wait(ctx, func() bool { return rdone && arrived == fill })
	}()
	if err := a.Wait(ctx, func() bool { return got }); err != nil {
		return fmt.Errorf("rank 0: the message did not come: %w", err)
	}
	if err := cl[0].Close(); err != nil {
		return fmt.Errorf("rank 0: close: %w", err)
	}
	if err := <-waited; err != nil {
		return fmt.Errorf("rank 1: remote completion %v (done %v), %d of %d messages of the closing rank: %w", rerr, rdone, arrived, fill, err)
	}
	if rerr != nil {
		return fmt.Errorf("rank 1: a message the closing rank's handler ran for: remote completion %v", rerr)
	}
	return cl[1].Close()
}
