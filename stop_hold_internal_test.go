package amigo

import (
	"bytes"
	"testing"
)

// holdJob is two ranks in one process: rank 1 defers every announced
// message, or names a buffer for it (receive), and each message's bytes
// are checked once it lands. The in-process link stops at one threshold;
// the two ranks' peers get shared memory's two (a window's messages
// above 8 KiB are stopped, a lone one up to 64 KiB streams), and the
// messages are of 32 KiB, above the inline limit.
type holdJob struct {
	*calloffJob
	size   int
	defd   []Deferred
	got    [][]byte
	landed int
	sent   int
}

// How rank 1 takes the announced messages of a holdJob.
const (
	holdDefer = iota
	holdReceive
	holdReceiveV // into two halves
)

func newHoldJob(t *testing.T, how int) *holdJob {
	j := &holdJob{calloffJob: newCalloffJob(t, 2)}
	c0, c1 := j.ctx(0), j.ctx(1)
	j.size = 32 << 10
	if q := j.cl[0].Limits(); q.InlineMax >= j.size {
		t.Fatalf("InlineMax %d: want sends of %d bytes announced", q.InlineMax, j.size)
	}
	warm := false
	c1.SetDispatch(2, func(c *Context, m *Message) { warm = true })
	if err := c0.Send(EndpointOf(1), 2, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	j.until("the links are made", func() bool { return warm }, 0, 1)
	for r, ep := range []Endpoint{EndpointOf(1), EndpointOf(0)} {
		c := j.ctx(r)
		idx, err := c.peerIndex(ep)
		if err != nil {
			t.Fatal(err)
		}
		p := c.peer(idx)
		p.stopAbove, p.stopBusy = 64<<10, 8<<10
	}
	c1.SetDispatch(1, func(c *Context, m *Message) {
		i := int(m.Header[0])
		if m.Inline() {
			t.Errorf("message %d inline", i)
			return
		}
		for len(j.got) <= i {
			j.got = append(j.got, nil)
		}
		j.got[i] = make([]byte, m.Size())
		switch how {
		case holdReceive:
			if err := m.Receive(j.got[i], j.onLanded); err != nil {
				t.Error(err)
			}
			return
		case holdReceiveV:
			half := m.Size() / 2
			if err := m.ReceiveV([][]byte{j.got[i][:half], j.got[i][half:]}, j.onLanded); err != nil {
				t.Error(err)
			}
			return
		}
		d, err := m.Defer()
		if err != nil {
			t.Error(err)
		}
		j.defd = append(j.defd, d)
	})
	return j
}

// firstPacket is the size of the first eager packet of a stream from rank
// 0 to rank 1.
func (j *holdJob) firstPacket() uint64 {
	c := j.ctx(0)
	idx, err := c.peerIndex(EndpointOf(1))
	if err != nil {
		j.t.Fatal(err)
	}
	return uint64(min(c.cfg.EagerPacket, c.eagerMax(c.peer(idx))))
}

func (j *holdJob) onLanded(err error) {
	if err != nil {
		j.t.Error(err)
	}
	j.landed++
}

// window sends n messages from rank 0 as the holder of its context does
// (Held.Send, outside Advance): the first alone, with its first packet,
// the others held for the receiver's word.
func (j *holdJob) window(n int) [][]byte {
	datas := make([][]byte, n)
	h := j.ctx(0).Hold()
	for i := range datas {
		datas[i] = bytes.Repeat([]byte{byte(i + 1)}, j.size)
		if err := h.Send(EndpointOf(1), 1, []byte{byte(i)}, datas[i], func(err error) {
			if err != nil {
				j.t.Error(err)
			}
			j.sent++
		}); err != nil {
			j.t.Fatal(err)
		}
	}
	h.Release()
	return datas
}

// finish accepts the deferred messages, if any, and checks every byte.
func (j *holdJob) finish(datas [][]byte) {
	j.t.Helper()
	c1 := j.ctx(1)
	for i, d := range j.defd {
		if err := c1.Accept(d, j.got[i], j.onLanded); err != nil {
			j.t.Fatal(err)
		}
	}
	n := len(datas)
	j.until("every message lands and is sent", func() bool { return j.landed == n && j.sent == n }, 0, 1)
	for i := range datas {
		if !bytes.Equal(j.got[i], datas[i]) {
			j.t.Fatalf("message %d: the bytes landed are not those sent", i)
		}
	}
}

// A window whose receiver names buffers moves no STOP but the first
// message's: the others' senders wait for GO (wire.FlagHold), which a
// receiver that fetches never sends; the first message, streamed alone
// at first, has its rest held once the others are announced (holdRest),
// so that only its first packet streams. The held messages are fetched
// as RTSs are, with no stream state at the receiver: the peer's stream
// list holds the first message alone.
func TestHoldWindowFetched(t *testing.T) {
	for _, how := range []int{holdReceive, holdReceiveV} {
		j := newHoldJob(t, how)
		j.fetched(how)
	}
}

func (j *holdJob) fetched(how int) {
	t := j.t
	c0, c1 := j.ctx(0), j.ctx(1)
	s0, s1 := c0.stats, c1.stats
	datas := j.window(8)
	idx, err := c1.peerIndex(EndpointOf(0))
	if err != nil {
		t.Fatal(err)
	}
	j.until("every message is announced", func() bool { return c1.stats.Announced-s1.Announced == 8 }, 1)
	if n := len(c1.peer(idx).streams); n != 1 {
		t.Fatalf("%d streams at the receiver with the window announced, want the first message's alone", n)
	}
	j.finish(datas)
	e0, e1 := c0.stats, c1.stats
	if e1.ReceivedEager-s1.ReceivedEager != 8 || e1.FetchedBytes-s1.FetchedBytes != uint64(8*j.size) || e1.ReceivedRendezvous != s1.ReceivedRendezvous {
		t.Fatalf("ReceiveV %v: %d received, %d bytes fetched, %d as RTSs: want 8, all, none", how == holdReceiveV,
			e1.ReceivedEager-s1.ReceivedEager, e1.FetchedBytes-s1.FetchedBytes, e1.ReceivedRendezvous-s1.ReceivedRendezvous)
	}
	first := j.firstPacket()
	t.Logf("window of 8 x %d: STOPs read %d, sent or silent %d, GOs %d, streamed %d", j.size, e0.StopsReceived-s0.StopsReceived, e1.Stops-s1.Stops, e1.Gos-s1.Gos, e0.EagerBytesSent-s0.EagerBytesSent)
	if e0.StopsReceived-s0.StopsReceived != 1 || e1.Stops-s1.Stops != 8 || e1.Gos != s1.Gos || e0.EagerBytesSent-s0.EagerBytesSent != first {
		t.Fatalf("STOPs read %d (want the first message's), stopped %d of 8, GOs %d (want none), %d bytes streamed (want the first packet, %d)",
			e0.StopsReceived-s0.StopsReceived, e1.Stops-s1.Stops, e1.Gos-s1.Gos, e0.EagerBytesSent-s0.EagerBytesSent, first)
	}
}

// A window whose receiver defers every message (no buffer yet) lets each
// stream into its unexpected-data budget: a GO for the first message when
// the second is announced (its sender holds the rest from its next
// Advance), a GO for each of the others. Its sender's Advance either
// holds the first message's rest before the GO comes (held) or reads the
// GO first (GO first): a GO that came before the hold must not be lost,
// or the first message waits for ever.
func TestHoldWindowDeferred(t *testing.T) {
	for _, goFirst := range []bool{false, true} {
		name := "held"
		if goFirst {
			name = "GO first"
		}
		t.Run(name, func(t *testing.T) {
			j := newHoldJob(t, holdDefer)
			c0, c1 := j.ctx(0), j.ctx(1)
			s0, s1 := c0.stats, c1.stats
			datas := j.window(4)
			first := j.firstPacket()
			if !goFirst {
				c0.Advance()
				if got := c0.stats.EagerBytesSent - s0.EagerBytesSent; got != first {
					t.Fatalf("%d bytes streamed before the receiver's word, want the first packet (%d)", got, first)
				}
			}
			j.until("every message is deferred", func() bool { return len(j.defd) == 4 }, 1)
			if gos := c1.stats.Gos - s1.Gos; gos != 4 {
				t.Fatalf("%d GOs for 4 deferred messages", gos)
			}
			if goFirst {
				// The GOs read before the sender's Advance takes up the
				// first message's rest.
				c0.enter()
				c0.pollUntil(nil)
				c0.leave()
			}
			// The GOs started the streams: more than each message's first
			// packet went, into the budget (what is still to come when a
			// buffer is named may be fetched).
			j.until("the streams start", func() bool { return c1.stats.EagerBytesKept-s1.EagerBytesKept > 4*first }, 0, 1)
			j.finish(datas)
		})
	}
}
