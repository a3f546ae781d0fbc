package amigo

import (
	"errors"
	"testing"

	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// waitCounter is a MirrorBatch that counts the calls for several keys,
// those keys, and the keys deregistered one by one.
type waitCounter struct {
	waits, withdrawn, deregistered int
}

func (m *waitCounter) Registered(int, transport.Key, []byte, transport.Perm) {}
func (m *waitCounter) Deregistered(int, transport.Key)                       { m.deregistered++ }
func (m *waitCounter) DeregisteredAll(keys []transport.Key) {
	m.waits++
	for _, k := range keys {
		if k != 0 {
			m.withdrawn++
		}
	}
}

// The streamed sends acknowledged in one pass finish after it, their
// buffers deregistered together with one wait: each completes once, with
// its ACK's status, a send failed between its ACK and the end of the pass
// too (delivered, so without the failure), and every buffer is refused
// afterwards.
func TestAckedSendsFinishTogether(t *testing.T) {
	regions := transport.NewRegions()
	mirror := &waitCounter{}
	regions.AddMirror(mirror)
	c := &Context{peers: make([]*peer, 1), cfg: &Config{}, client: &Client{regions: regions}}
	c.ops.c = c
	c.finishAcked = c.finishAckedNow
	p := &peer{}
	c.peers[0] = p

	const n = 6
	const failed, refused = 2, 4 // failed between its ACK and the end of the pass; ACKed with an error
	var ops [n]*op
	var keys [n]transport.Key
	var calls [n]int
	var errs [n]error
	for i := range ops {
		k, err := regions.Register(make([]byte, 4096))
		if err != nil {
			t.Fatal(err)
		}
		o := c.ops.alloc(opSendStream, p)
		o.region, o.size = k, 4096
		o.done = func(err error) { calls[i]++; errs[i] = err }
		p.sendStreams++
		ops[i], keys[i] = o, k
	}
	for i, o := range ops {
		status := wire.StatusOK
		if i == refused {
			status = wire.StatusRemoteIO
		}
		c.onACK(0, o.id(), status)
	}
	for i := range ops {
		if calls[i] != 0 {
			t.Fatalf("send %d completed inside the pass that took its ACK", i)
		}
	}
	c.failOp(ops[failed], errors.New("the peer failed"))
	if calls[failed] != 1 || errs[failed] != nil {
		t.Fatalf("send failed after its ACK: %d completions, error %v; want 1, nil", calls[failed], errs[failed])
	}
	c.runLater()
	for i := range ops {
		if calls[i] != 1 {
			t.Fatalf("send %d completed %d times", i, calls[i])
		}
		if (errs[i] != nil) != (i == refused) {
			t.Fatalf("send %d completed with %v", i, errs[i])
		}
		if _, _, err := regions.Acquire(keys[i], 0, 1); !errors.Is(err, transport.ErrBadKey) {
			t.Fatalf("send %d's buffer still registered: %v", i, err)
		}
	}
	if mirror.waits != 1 || mirror.withdrawn != n-1 || mirror.deregistered != 1 {
		t.Fatalf("mirror: %d waits, %d withdrawn, %d deregistered one by one; want 1, %d, 1", mirror.waits, mirror.withdrawn, mirror.deregistered, n-1)
	}
	if p.sendStreams != 0 || c.ops.live != 0 || len(c.acked) != 0 {
		t.Fatalf("after the pass: %d streams, %d live ops, %d acked listed", p.sendStreams, c.ops.live, len(c.acked))
	}
}
