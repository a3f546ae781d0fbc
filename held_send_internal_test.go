package amigo

import "testing"

// Held.Send injects a message itself when the peer has not taken what was
// sent before it (a window); by the time the message is written the peer
// may have, and it goes inline, complete at once. Its done callback then
// runs in the next Advance, as every callback does, not inside Send: the
// mpi layer names a send's owner once Send returns, and a collective
// whose send completed inside it waited for ever. Here the peer has taken
// everything when sendHeld injects a message that fits inline.
func TestSendHeldCallsBackInAdvance(t *testing.T) {
	j := newCalloffJob(t, 2)
	c0, c1 := j.ctx(0), j.ctx(1)
	got := 0
	c1.SetDispatch(1, func(c *Context, m *Message) {
		if !m.Inline() || len(m.Data) != 4096 {
			t.Errorf("inline %v, %d bytes: want 4096 inline", m.Inline(), len(m.Data))
		}
		got++
	})
	// A first message makes the link.
	if err := c0.Send(EndpointOf(1), 1, nil, make([]byte, 4096), nil); err != nil {
		t.Fatal(err)
	}
	j.until("rank 1 has the first message", func() bool { return got == 1 }, 0, 1)
	h := c0.Hold()
	idx, err := c0.peerIndex(EndpointOf(1))
	if err != nil {
		t.Fatal(err)
	}
	if c0.owned(idx) == nil {
		t.Fatal("no link to rank 1 after Hold")
	}
	sentInline := c0.stats.SentInline
	calls := 0
	c0.sendHeld(idx, 1, nil, make([]byte, 4096), func(err error) {
		if err != nil {
			t.Error(err)
		}
		calls++
	})
	if c0.stats.SentInline != sentInline+1 {
		t.Fatalf("SentInline %d, want %d: the message did not go inline", c0.stats.SentInline, sentInline+1)
	}
	if calls != 0 {
		t.Fatal("done called inside the holder's Send")
	}
	h.Advance()
	if calls != 1 {
		t.Fatalf("done called %d times by the next Advance, want once", calls)
	}
	h.Release()
	j.until("rank 1 has the message", func() bool { return got == 2 }, 1)
}
