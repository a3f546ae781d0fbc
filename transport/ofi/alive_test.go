//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// A receiver whose context does not poll for three timeouts (it computes)
// while a sender waits on it with a full ring is not taken for dead: its
// adapter says it lives. Once it polls, every packet arrives.
func TestIdleReceiverLives(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			const timeout = 400 * time.Millisecond
			ads, _ := newWorld(t, 2, Options{Provider: prov, Timeout: timeout, RingSlots: 64})
			defer ads[0].Close()
			defer ads[1].Close()
			dst, _ := ads[1].Open(0, transport.NewDoorbell())
			src, _ := ads[0].Open(0, transport.NewDoorbell())
			l, err := src.Link(transport.Addr{Rank: 1})
			if err != nil {
				t.Fatal(err)
			}
			tr := fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil)
			const size = 200
			k := ring.SlotsFor(size)
			sent := 0
			var c cnt
			// The receiver polls once, so that the sender is known to it.
			for tail := tr.Tail(); tr.Space(l.Msg.PadFor(tail, k) + k); tail = tr.Tail() {
				if pad := l.Msg.PadFor(tail, k); pad > 0 {
					l.Msg.WritePad(tail, pad)
					tr.Inject(pad, nil)
					tail += uint64(pad)
				}
				l.Msg.Seal(tail, size)
				tr.Inject(k, nil)
				l.Msg.Publish(tr.Tail())
				sent++
			}
			deadline := time.Now().Add(time.Minute)
			for c.n == 0 {
				src.Progress()
				dst.Poll(&c, 1)
				if time.Now().After(deadline) {
					t.Fatal("the first packet did not arrive in a minute")
				}
			}
			// Now the receiver computes for three timeouts; the sender,
			// its ring full, waits and polls.
			end := time.Now().Add(3 * timeout)
			for time.Now().Before(end) {
				src.Progress()
				src.Poll(&cnt{}, 64)
				tr.Complete()
				if err := l.Err(); err != nil {
					t.Fatalf("the sender took the idle receiver for dead: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
			for c.n < sent || tr.Outstanding() > 0 {
				src.Progress()
				dst.Poll(&c, 64)
				tr.Complete()
				if err := l.Err(); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("delivered %d of %d packets", c.n, sent)
				}
			}
		})
	}
}
