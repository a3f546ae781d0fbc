package amigo

import (
	"errors"
	"testing"

	"github.com/amigo-hpc/amigo/transport"
)

// An instruction the holder's Send carries out itself (Held.Send: a large
// message with nothing queued before it) that fails has its callback run
// in the next Advance, as every callback does, not inside the Send; one
// carried out in an Advance has it run there and then.
func TestHolderSendFailureCallsLater(t *testing.T) {
	for _, holder := range []bool{true, false} {
		regions := transport.NewRegions()
		regions.Close() // every registration fails
		c := &Context{peers: make([]*peer, 1), cfg: &Config{InlineMax: 64}, client: &Client{regions: regions}}
		c.ops.c = c
		c.peers[0] = &peer{}
		var got []error
		in := inst{kind: instSend, data: make([]byte, 4096), done: func(err error) { got = append(got, err) }}
		c.holderSend = holder
		c.execute(&in)
		c.holderSend = false
		if holder && len(got) != 0 {
			t.Fatal("the callback ran inside the holder's Send")
		}
		c.runLater()
		if len(got) != 1 || !errors.Is(got[0], transport.ErrClosed) {
			t.Fatalf("holder %v: callbacks %v, want one with ErrClosed", holder, got)
		}
	}
}
