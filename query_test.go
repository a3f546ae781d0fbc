package amigo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Limits follow the effective configuration, and Peer names the adapter
// each rank is reached by, on each adapter.
func TestQuery(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 3, amigo.Config{InlineMax: 4000}, over)
			l := cl[0].Limits()
			want := amigo.Limits{ImmediateMax: amigo.ImmediateMax, InlineMax: 4000, HeaderMax: 4000, Dispatches: amigo.MaxDispatch, Contexts: 1}
			if l != want {
				t.Fatalf("Limits %+v, want %+v", l, want)
			}
			// A send of InlineMax bytes is inline; SendImmediate takes
			// ImmediateMax and refuses one more.
			c := cl[0].Context(0)
			if err := c.SendImmediate(amigo.EndpointOf(1), 1, nil, make([]byte, l.ImmediateMax)); err != nil {
				t.Fatalf("SendImmediate of ImmediateMax bytes: %v", err)
			}
			if err := c.SendImmediate(amigo.EndpointOf(1), 1, nil, make([]byte, l.ImmediateMax+1)); !errors.Is(err, amigo.ErrTooLarge) {
				t.Fatalf("SendImmediate of ImmediateMax+1 bytes: %v, want ErrTooLarge", err)
			}
			for r := 0; r < 3; r++ {
				p, err := cl[0].Peer(r)
				if err != nil {
					t.Fatal(err)
				}
				adapter, sameProc := over, false
				if r == 0 || over == "loop" {
					adapter, sameProc = "loop", true
				}
				if p.Adapter != adapter || p.SameProcess != sameProc || !p.SameHost {
					t.Fatalf("rank %d: %+v, want adapter %s, same process %v, same host", r, p, adapter, sameProc)
				}
				if len(p.Atomics) != 6 || p.AtomicsByInitiator != (adapter != "tcp") {
					t.Fatalf("rank %d over %s: atomics %v, by initiator %v", r, adapter, p.Atomics, p.AtomicsByInitiator)
				}
			}
			if _, err := cl[0].Peer(3); !errors.Is(err, amigo.ErrUnknownEndpoint) {
				t.Fatalf("Peer(3) of 3 ranks: %v", err)
			}
		})
	}
}

// Left to its default, InlineMax is the adapters' choice: shared memory
// carries a 16 KiB message inline (its done callback runs at once, the
// handler sees the data in place), and a 32 KiB one over descriptor
// buffers of 4096 slots (up to 8 ranks on the host); TCP a 16 KiB one; the
// in-process adapter keeps the default, and a value the program sets wins
// over the choice.
func TestInlineByAdapter(t *testing.T) {
	const shmInline, shmInlineLarge, tcpInline = 16<<10 + 512, 32<<10 + 512, 16<<10 + 512
	for _, c := range []struct {
		over      string
		inlineMax int // Config.InlineMax
		ringSlots int // Config.Shm.RingSlots
		want      int // effective
		size      int // of the message sent
	}{
		{"shm", 0, 0, shmInlineLarge, 32 << 10},
		{"shm", 0, 2048, shmInline, 16 << 10},
		{"shm", 0, 2048, shmInline, 32 << 10},
		{"shm", 8192, 0, 8192, 16 << 10},
		{"shm", 20000, 0, 20000, 16 << 10},
		{"tcp", 0, 0, tcpInline, 16 << 10},
		{"tcp", 0, 0, tcpInline, 32 << 10},
		{"tcp", 8192, 0, 8192, 16 << 10},
		{"loop", 0, 0, 8192, 16 << 10},
	} {
		t.Run(fmt.Sprintf("%s/%d/%d/%d", c.over, c.inlineMax, c.ringSlots, c.size), func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{InlineMax: c.inlineMax, Shm: amigo.ShmConfig{RingSlots: c.ringSlots}}, c.over)
			for _, cli := range cl {
				if got := cli.Limits().InlineMax; got != c.want {
					t.Fatalf("InlineMax %d, want %d", got, c.want)
				}
			}
			inline, landed := -1, false
			cl[1].Context(0).SetDispatch(1, func(_ *amigo.Context, m *amigo.Message) {
				if m.Inline() {
					inline, landed = len(m.Data), true
					return
				}
				inline = 0
				if err := m.Receive(make([]byte, m.Size()), func(err error) {
					if err != nil {
						t.Error(err)
					}
					landed = true
				}); err != nil {
					t.Error(err)
				}
			})
			done := false
			data := make([]byte, c.size)
			if err := cl[0].Context(0).Send(amigo.EndpointOf(1), 1, nil, data, func(err error) {
				if err != nil {
					t.Error(err)
				}
				done = true
			}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			received := make(chan error, 1)
			go func() {
				received <- cl[1].Context(0).Wait(ctx, func() bool { return landed })
			}()
			if err := cl[0].Context(0).Wait(ctx, func() bool { return done }); err != nil {
				t.Fatal(err)
			}
			if err := <-received; err != nil {
				t.Fatal(err)
			}
			if want := len(data) <= c.want; (inline == len(data)) != want {
				t.Fatalf("%d bytes arrived inline: %v, want %v", len(data), inline == len(data), want)
			}
		})
	}
}

// A rank whose adapters chose to carry 32 KiB inline sends that much to
// itself inline too: the in-process adapter's buffers are sized to hold it.
func TestInlineToSelf(t *testing.T) {
	cl := openOver(t, 2, amigo.Config{}, "shm")
	max := cl[0].Limits().InlineMax
	if max < 32<<10 {
		t.Fatalf("InlineMax %d over shm with two ranks, want 32 KiB or more", max)
	}
	c := cl[0].Context(0)
	var got []byte
	c.SetDispatch(2, func(_ *amigo.Context, m *amigo.Message) {
		if !m.Inline() {
			t.Errorf("a message of %d bytes to self did not arrive inline", m.Size())
		}
		got = append([]byte(nil), m.Data...)
	})
	data := make([]byte, max)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for round := 0; round < 3; round++ {
		got = nil
		if err := c.Send(amigo.EndpointOf(0), 2, nil, data, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.Wait(ctx, func() bool { return got != nil })
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("round %d: %d bytes back, not those sent", round, len(got))
		}
	}
}
