package amigo_test

import (
	"testing"

	"github.com/amigo-hpc/amigo"
)

// Sends by announcement from one buffer share its registration while any
// of them is in flight, and the last to complete withdraws it. A window
// cycles over six buffers (five of 96 KiB, and the first 48 KiB of the
// first, another buffer for a peer that reads it): each of the first four
// is registered once, the two that find no free entry once per send.
// The receiver defers the first buffer's last message: when every other
// message has landed and been acknowledged, that buffer's key is still
// live, and the deferred message, accepted then, lands whole. Once the
// window is over no registration of a send remains.
func TestSendKeysShared(t *testing.T) {
	const size, rounds = 96 << 10, 4
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			if q := cl[0].Limits(); q.InlineMax >= size/2 {
				t.Fatalf("InlineMax %d: want sends of 48 KiB announced", q.InlineMax)
			}
			var bufs [][]byte
			for i := range 5 {
				bufs = append(bufs, fill(make([]byte, size), i))
			}
			bufs = append(bufs, bufs[0][:size/2])
			var datas [][]byte
			for range rounds {
				datas = append(datas, bufs...)
			}
			hold := (rounds - 1) * len(bufs) // the first buffer's last send
			got := make([][]byte, len(datas))
			landed, sent := 0, 0
			var held amigo.Deferred
			onLanded := func(err error) {
				if err != nil {
					t.Error(err)
				}
				landed++
			}
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				i := int(m.Header[0])
				got[i] = make([]byte, m.Size())
				if i == hold {
					d, err := m.Defer()
					if err != nil {
						t.Error(err)
					}
					held = d
					return
				}
				if err := m.Receive(got[i], onLanded); err != nil {
					t.Error(err)
				}
			})
			s0 := c0.Stats()
			sendAll(t, c0, datas, &sent)
			c0.Advance() // injects the window: the receiver has not advanced
			keys := amigo.SendRegKeys(c0)
			if len(keys) != 4 {
				t.Fatalf("%d shared registrations while the window is in flight, want 4", len(keys))
			}
			n := len(datas)
			advanceUntil(t, func() bool { return landed == n-1 && sent == n-1 }, c0, c1)
			if left := amigo.SendRegKeys(c0); len(left) != 1 || left[0] != keys[0] || !amigo.KeyLive(c0, keys[0]) {
				t.Fatalf("with the first buffer's last send deferred: shared %x, want %x, live", left, keys[:1])
			}
			if err := c1.Accept(held, got[hold], onLanded); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return landed == n && sent == n }, c0, c1)
			for i, d := range datas {
				if string(got[i]) != string(d) {
					t.Fatalf("message %d: the %d bytes landed are not those sent", i, len(got[i]))
				}
			}
			if shared := c0.Stats().SendKeysShared - s0.SendKeysShared; shared != 4*(rounds-1) {
				t.Fatalf("%d sends shared a registration, want %d", shared, 4*(rounds-1))
			}
			if left := amigo.SendRegKeys(c0); len(left) != 0 {
				t.Fatalf("registrations %x still shared after the window", left)
			}
			for _, k := range keys {
				if amigo.KeyLive(c0, k) {
					t.Fatalf("key %#x still registered after its sends completed", k)
				}
			}
		})
	}
}
