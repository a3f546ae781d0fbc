package amigo_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// A held context: its holder's sends go out in the order posted (behind
// what it queued before holding or with the plain API), nobody else may
// advance it meanwhile, and holding, sending, waiting and releasing
// allocate nothing.
func TestHeld(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			var got []byte
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got = append(got, m.Data[0]) })
			ep1 := amigo.EndpointOf(1)
			ctx := context.Background()

			// Queued first (the plain API while holding goes through the
			// queue), then the holder's own: order kept.
			h := c0.Hold()
			if h.Context() != c0 {
				t.Fatal("Held.Context is not the context")
			}
			for i := byte(0); i < 4; i++ {
				if err := c0.SendImmediate(ep1, 1, nil, []byte{i}); err != nil {
					t.Fatal(err)
				}
			}
			if !h.Queued() {
				t.Error("Queued is false with four sends in the queue")
			}
			for i := byte(4); i < 8; i++ {
				if err := h.SendImmediate(ep1, 1, nil, []byte{i}); err != nil {
					t.Fatal(err)
				}
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Error("Advance of a held context did not panic")
					}
				}()
				c0.Advance()
			}()
			if err := h.SendImmediate(ep1, amigo.MaxDispatch, nil, nil); err == nil {
				t.Error("a bad dispatch id was accepted")
			}
			if err := h.SendImmediate(amigo.EndpointOf(7), 1, nil, nil); err == nil {
				t.Error("an endpoint outside the job was accepted")
			}
			h.Advance()
			if h.Queued() {
				t.Error("Queued is true after an Advance injected the queue")
			}
			// With nothing queued the holder's send is written at once.
			if err := h.SendImmediate(ep1, 1, nil, []byte{8}); err != nil {
				t.Fatal(err)
			}
			if h.Queued() {
				t.Error("a send written at once left the queue non-empty")
			}
			h.Release()
			advanceUntil(t, func() bool { return len(got) == 9 }, c0, c1)
			for i, v := range got {
				if v != byte(i) {
					t.Fatalf("messages arrived as %v", got)
				}
			}

			// A request-reply loop on a held context, allocation-free.
			answers := 0
			c0.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { answers++ })
			c1.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { _ = m.Reply(2, nil, m.Data) })
			one := []byte{1}
			want := 0
			answered := func() bool {
				c1.Advance()
				return answers == want
			}
			requireZeroAllocs(t, "Hold, SendImmediate, Wait, Release", func() {
				want++
				h := c0.Hold()
				if err := h.SendImmediate(ep1, 2, nil, one); err != nil {
					t.Fatal(err)
				}
				if err := h.Wait(ctx, answered); err != nil {
					t.Fatal(err)
				}
				h.Release()
			})
		})
	}
}

// The holder's Send: inline messages with done callbacks are written at
// once (records, on shared memory) and their callbacks run in the
// holder's next Wait, in order; a message too large to travel inline, a
// bad argument and a Send posted before holding keep their places; a
// window of small Sends and its WaitCounter allocate nothing.
func TestHeldSend(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			var got []int
			big := make([]byte, 1<<20)
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				if m.Inline() {
					got = append(got, int(m.Data[0]))
					return
				}
				if err := m.Receive(big, nil); err != nil {
					t.Error(err)
				}
				got = append(got, -m.Size())
			})
			ep1 := amigo.EndpointOf(1)
			ctx := context.Background()
			var order []int
			doneOf := func(i int) func(error) {
				return func(err error) {
					if err != nil {
						t.Errorf("send %d: %v", i, err)
					}
					order = append(order, i)
				}
			}
			if err := c0.Send(ep1, 1, nil, []byte{0}, doneOf(0)); err != nil {
				t.Fatal(err)
			}
			h := c0.Hold()
			for i := 1; i < 40; i++ {
				data := []byte{byte(i)}
				if i == 20 {
					data = make([]byte, 256<<10) // announced, fetched by the receiver
				}
				if err := h.Send(ep1, 1, nil, data, doneOf(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Send(ep1, amigo.MaxDispatch, nil, nil, nil); err == nil {
				t.Error("a bad dispatch id was accepted")
			}
			if err := h.Send(amigo.EndpointOf(7), 1, nil, nil, nil); err == nil {
				t.Error("an endpoint outside the job was accepted")
			}
			arrived := func() bool {
				c1.Advance()
				return len(got) == 40 && len(order) == 40
			}
			if err := h.Wait(ctx, arrived); err != nil {
				t.Fatal(err)
			}
			h.Release()
			for i := range 40 {
				want := i
				if i == 20 {
					want = -(256 << 10)
				}
				if got[i] != want {
					t.Fatalf("arrived %v", got)
				}
			}
			// The inline messages are done in order; the announced one
			// when the receiver has fetched it.
			prev := -1
			for _, i := range order {
				if i != 20 && i <= prev {
					t.Fatalf("done in the order %v", order)
				}
				if i != 20 {
					prev = i
				}
			}

			// A window of 64 small Sends and their WaitCounter, allocation-free.
			c1.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) {})
			k := amigo.NewCounter()
			kd := k.Done()
			eight := make([]byte, 8)
			requireZeroAllocs(t, "holder's window of 64 Sends", func() {
				h := c0.Hold()
				for j := 0; j < 64; j++ {
					k.Add(1)
					if err := h.Send(ep1, 2, nil, eight, kd); err != nil {
						t.Fatal(err)
					}
				}
				if err := h.WaitCounter(ctx, k); err != nil {
					t.Fatal(err)
				}
				h.Release()
				// Let the receiver keep up, so that the ring never fills.
				for c1.Advance() > 0 {
				}
			})

			// A message too large to travel inline, with nothing queued
			// before it, is announced before the holder's Send returns;
			// a window of them and its WaitCounter allocate nothing.
			rbuf := make([]byte, 64<<10)
			c1.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) {
				if err := m.Receive(rbuf, nil); err != nil {
					t.Error(err)
				}
			})
			large := make([]byte, 64<<10)
			taken := func() bool {
				c1.Advance()
				return k.Pending() == 0
			}
			h = c0.Hold()
			before := c0.Stats().SentEager
			k.Add(1)
			if err := h.Send(ep1, 3, nil, large, kd); err != nil {
				t.Fatal(err)
			}
			if got := c0.Stats().SentEager - before; got != 1 || h.Queued() {
				t.Errorf("a large Send with nothing before it: %d announced, queued %v; want 1, false", got, h.Queued())
			}
			if err := h.Wait(ctx, taken); err != nil {
				t.Fatal(err)
			}
			h.Release()
			requireZeroAllocs(t, "holder's window of 8 large Sends", func() {
				h := c0.Hold()
				for j := 0; j < 8; j++ {
					k.Add(1)
					if err := h.Send(ep1, 3, nil, large, kd); err != nil {
						t.Fatal(err)
					}
				}
				if err := h.Wait(ctx, taken); err != nil {
					t.Fatal(err)
				}
				h.Release()
			})
		})
	}
}

// A burst of Sends whose header and data sizes cross the largest record,
// a slot (and the inline limit, set below both) arrives whole and in
// order, each with its own header and data, inline exactly when it fits
// the limit, and every done callback runs: from the holder (records by
// Context.sendSmall) and by Context.Send (one slot by Context.sendSlot).
func TestHeldSendRecordSizes(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		for _, held := range []bool{true, false} {
			// An inline limit below a record's room, and one above a
			// slot's.
			for _, inlineMax := range []int{40, 100} {
				testSendSizes(t, over, held, inlineMax)
			}
		}
	}
}

func testSendSizes(t *testing.T, over string, held bool, inlineMax int) {
	name := fmt.Sprintf("%s/context/%d", over, inlineMax)
	if held {
		name = fmt.Sprintf("%s/held/%d", over, inlineMax)
	}
	t.Run(name, func(t *testing.T) {
		cl := openOver(t, 2, amigo.Config{InlineMax: inlineMax}, over)
		c0, c1 := cl[0].Context(0), cl[1].Context(0)
		type msg struct {
			hdr, data string
			inline    bool
		}
		var got []msg
		var bufs [][]byte // the data of each, received into it
		landed := 0
		c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			got = append(got, msg{hdr: string(m.Header), inline: m.Inline()})
			if m.Inline() {
				bufs = append(bufs, append([]byte(nil), m.Data...))
				landed++
				return
			}
			data := make([]byte, m.Size())
			bufs = append(bufs, data)
			if err := m.Receive(data, func(err error) {
				if err != nil {
					t.Error(err)
				}
				landed++
			}); err != nil {
				t.Error(err)
			}
		})
		// A first message connects the pair, so that the burst below
		// is written at once and not queued behind the connection.
		warm := false
		c1.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { warm = true })
		if err := c0.SendImmediate(amigo.EndpointOf(1), 2, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := c0.Wait(context.Background(), func() bool { c1.Advance(); return warm }); err != nil {
			t.Fatal(err)
		}
		var sent []msg
		k := amigo.NewCounter()
		send, wait := c0.Send, c0.Wait
		var h *amigo.Held
		if held {
			h = c0.Hold()
			send, wait = h.Send, h.Wait
		}
		for i := 0; i < 64; i++ {
			hl, dl := i%9, (i*7)%61
			hdr, data := make([]byte, hl), make([]byte, dl)
			for j := range hdr {
				hdr[j] = byte('a' + i%26)
			}
			for j := range data {
				data[j] = byte(i + j)
			}
			k.Add(1)
			if err := send(amigo.EndpointOf(1), 1, hdr, data, k.Done()); err != nil {
				t.Fatalf("send %d (%d+%d bytes): %v", i, hl, dl, err)
			}
			sent = append(sent, msg{string(hdr), string(data), hl+dl <= inlineMax})
		}
		if err := wait(context.Background(), func() bool {
			c1.Advance()
			return landed == len(sent) && k.Pending() == 0
		}); err != nil {
			t.Fatal(err)
		}
		if h != nil {
			h.Release()
		}
		for i := range sent {
			got[i].data = string(bufs[i])
			if got[i] != sent[i] {
				t.Fatalf("message %d arrived as %+v, sent %+v", i, got[i], sent[i])
			}
		}
	})
}

// TryHold takes a free context and declines one another goroutine holds,
// without panicking; Held.Send of a small message with a done callback and
// Held.Atomic complete, their callbacks running in the holder's Advance,
// and the messages keep their order behind the holder's immediate ones.
func TestTryHold(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			var got []byte
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got = append(got, m.Data[0]) })
			ep1 := amigo.EndpointOf(1)

			h := c0.TryHold()
			if h == nil || h.Context() != c0 {
				t.Fatal("TryHold of a free context declined")
			}
			if c0.TryHold() != nil {
				t.Fatal("TryHold of a held context took it")
			}
			sent := 0
			done := func(err error) {
				if err != nil {
					t.Error(err)
				}
				sent++
			}
			if err := h.SendImmediate(ep1, 1, nil, []byte{0}); err != nil {
				t.Fatal(err)
			}
			if err := h.Send(ep1, 1, nil, []byte{1}, done); err != nil {
				t.Fatal(err)
			}
			if err := h.Send(ep1, amigo.MaxDispatch, nil, []byte{2}, done); err == nil {
				t.Error("Held.Send with a bad dispatch id was accepted")
			}
			h.Release()
			if h = c0.TryHold(); h == nil {
				t.Fatal("TryHold after Release declined")
			}
			advanceUntil(t, func() bool { h.Advance(); return sent == 1 && len(got) == 2 }, c1)
			if got[0] != 0 || got[1] != 1 {
				t.Fatalf("messages arrived as %v", got)
			}

			region, err := cl[1].AllocMemory(64)
			if err != nil {
				t.Fatal(err)
			}
			var old uint64
			added := 0
			p := &amigo.AtomicParams{Dest: ep1, Remote: region.Key(), Offset: 8, Op: amigo.AtomicAdd, Type: amigo.Int64, Operand: 5, Result: &old,
				Done: func(err error) {
					if err != nil {
						t.Error(err)
					}
					added++
				}}
			for i := 0; i < 2; i++ {
				if err := h.Atomic(p); err != nil {
					t.Fatal(err)
				}
				advanceUntil(t, func() bool { h.Advance(); return added == i+1 }, c1)
			}
			if old != 5 {
				t.Fatalf("the second add found %d, want 5", old)
			}
			h.Release()
		})
	}
}

// Unsent: a holder's message written into a shared-memory descriptor
// buffer is in the peer's memory at once; one written for a TCP link waits
// for the context's next Advance, and one queued behind the instruction
// queue waits on any link. Each reported so, and each arrives.
func TestHeldUnsent(t *testing.T) {
	for _, tc := range []struct {
		over   string
		unsent bool // after a SendImmediate written at once
	}{{"loop", false}, {"shm", false}, {"tcp", true}} {
		t.Run(tc.over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, tc.over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			got := 0
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got++ })
			ep1 := amigo.EndpointOf(1)
			h := c0.Hold()
			// The first message to a peer may queue while its link is
			// made; the next are written at once.
			if err := h.SendImmediate(ep1, 1, nil, []byte{0}); err != nil {
				t.Fatal(err)
			}
			h.Advance()
			if h.Unsent() {
				t.Fatal("Unsent right after an Advance")
			}
			if err := h.SendImmediate(ep1, 1, nil, []byte{1}); err != nil {
				t.Fatal(err)
			}
			if h.Queued() {
				t.Fatal("a message to a connected peer was queued")
			}
			if h.Unsent() != tc.unsent {
				t.Errorf("after a SendImmediate written at once: Unsent %v, want %v", h.Unsent(), tc.unsent)
			}
			h.Advance()
			if h.Unsent() {
				t.Error("Unsent after an Advance")
			}
			// The plain API while holding queues: unsent on every link.
			if err := c0.SendImmediate(ep1, 1, nil, []byte{2}); err != nil {
				t.Fatal(err)
			}
			if !h.Unsent() {
				t.Error("Unsent is false with a message in the queue")
			}
			h.Advance()
			if h.Unsent() {
				t.Error("Unsent after the Advance that injected the queue")
			}
			if err := h.SendImmediate(ep1, 1, nil, []byte{3}); err != nil {
				t.Fatal(err)
			}
			if !tc.unsent {
				// In the peer's memory: it arrives with this context
				// never advancing again until it did.
				advanceUntil(t, func() bool { return got == 4 }, c1)
			}
			h.Release()
			advanceUntil(t, func() bool { return got == 4 }, c0, c1)
		})
	}
}

// SendInline copies a message that travels inline into the descriptor
// buffer at once, on every adapter, so its buffers may be reused as it
// returns; it declines, sending nothing, what it cannot write now. Push
// moves what Unsent reports without running a handler.
func TestHeldSendInline(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			// The TCP adapter's own hand-off of a context that stopped
			// advancing is held off: what leaves c0 is what Push moved.
			cfg := amigo.Config{}
			cfg.TCP.Timeout, cfg.TCP.Handoff = 2*time.Minute, 30*time.Second
			cl := openOver(t, 2, cfg, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			inline := cl[0].Config().InlineMax
			var got [][]byte
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				got = append(got, append([]byte(nil), m.Data...))
			})
			answered := 0
			c0.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { answered++ })
			ep1 := amigo.EndpointOf(1)
			h := c0.Hold()
			// The first message to a peer may queue while its link is made.
			if err := h.SendImmediate(ep1, 1, nil, []byte{0}); err != nil {
				t.Fatal(err)
			}
			h.Advance()
			data := make([]byte, 1000) // above ImmediateMax, inline
			for i := range data {
				data[i] = 1
			}
			ok, err := h.SendInline(ep1, 1, []byte("hdr"), data)
			if err != nil || !ok {
				t.Fatalf("SendInline of %d bytes: %v, %v; want true", len(data), ok, err)
			}
			for i := range data {
				data[i] = 2 // the message was copied
			}
			// Too large for inline: declined, nothing sent.
			if ok, err := h.SendInline(ep1, 1, nil, make([]byte, inline+1)); ok || err != nil {
				t.Fatalf("SendInline of %d bytes (InlineMax %d): %v, %v; want false, nil", inline+1, inline, ok, err)
			}
			if _, err := h.SendInline(ep1, amigo.MaxDispatch, nil, data); err == nil {
				t.Fatal("SendInline to dispatch MaxDispatch: no error")
			}
			// Behind a queued instruction: declined, so that order holds.
			if err := c0.SendImmediate(ep1, 1, nil, []byte{3}); err != nil {
				t.Fatal(err)
			}
			if ok, err := h.SendInline(ep1, 1, nil, data); ok || err != nil {
				t.Fatalf("SendInline behind a queued message: %v, %v; want false, nil", ok, err)
			}
			// Push injects the queue (and runs the ports' Progress: over
			// TCP mpi's TestCollectiveLeavesWithoutAnotherCall depends on
			// it) and runs no handler: the peer's answer waits for an
			// Advance.
			h.Push()
			if h.Unsent() {
				t.Error("Unsent after Push")
			}
			advanceUntil(t, func() bool { return len(got) == 3 }, c1)
			if err := c1.SendImmediate(amigo.EndpointOf(0), 2, nil, nil); err != nil {
				t.Fatal(err)
			}
			c1.Advance() // the answer leaves c1 (over TCP, its Progress writes it)
			h.Push()
			if answered != 0 {
				t.Error("Push ran a handler")
			}
			h.Release()
			advanceUntil(t, func() bool { return answered == 1 }, c0, c1)
			if len(got[1]) != len(data) || got[1][0] != 1 || got[1][len(data)-1] != 1 {
				t.Errorf("the inline message arrived as %d bytes starting %v; want %d bytes of 1", len(got[1]), got[1][:1], len(data))
			}
			if got[2][0] != 3 {
				t.Errorf("third message %v, want the queued one", got[2])
			}
		})
	}
}

// A Send of a header alone, too large for the limit a busy peer sets on
// inline messages (a window's), still travels inline: announced, it had
// no data to register and failed with "nil or empty buffer".
func TestHeaderOnlySendToBusyPeer(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, "shm")
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			var sizes []int
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { sizes = append(sizes, len(m.Header)) })
			ep1 := amigo.EndpointOf(1)
			var errs []error
			done := func(err error) { errs = append(errs, err) }
			hdr := make([]byte, 20<<10)
			send, advance := c0.Send, c0.Advance
			if held {
				h := c0.Hold()
				defer h.Release()
				send, advance = h.Send, h.Advance
			}
			// The first is not taken before the second is sent: the peer
			// is busy.
			if err := send(ep1, 1, nil, []byte{1}, done); err != nil {
				t.Fatal(err)
			}
			if err := send(ep1, 1, hdr, nil, done); err != nil {
				t.Fatal(err)
			}
			all := func() bool {
				c1.Advance()
				return len(errs) == 2 && len(sizes) == 2
			}
			for i := 0; i < 1_000_000 && !all(); i++ {
				advance()
			}
			if len(errs) != 2 || errs[0] != nil || errs[1] != nil || len(sizes) != 2 || sizes[1] != len(hdr) {
				t.Fatalf("completions %v, headers arrived %v", errs, sizes)
			}
		})
	}
}
