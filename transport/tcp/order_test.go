package tcp

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// checker is a receiver that, as each packet arrives, checks that the
// Puts injected before it have landed (Link.Ordered).
type checker struct {
	mu     sync.Mutex
	mem    []byte
	want   []byte
	got    int
	broken string
}

func (c *checker) Receive(from transport.Addr, pkt []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got++
	if !bytes.Equal(c.mem, c.want) && c.broken == "" {
		for i := range c.mem {
			if c.mem[i] != c.want[i] {
				c.broken = fmt.Sprintf("the packet injected after the Puts arrived before their data (first wrong byte at %d of %d)", i, len(c.mem))
				break
			}
		}
	}
}

func (c *checker) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got
}

// A packet injected after more Puts than the target queues replies for is
// handled after every one of those Puts landed (Link.Ordered: PutNotify
// relies on it), although the initiator writes at most replySlots
// requests ahead of their answers. The initiator injects the Puts and the
// packet and writes once; the target then reads all that was written
// before the initiator writes again, so a packet written ahead of held
// requests is caught every run. Over a link's own connection, and over the
// one connection of a pair that carries links both ways.
func TestPutsBeforePacketPastReplyQueue(t *testing.T) {
	for _, pair := range []bool{false, true} {
		name := "link"
		if pair {
			name = "pair"
		}
		t.Run(name, func(t *testing.T) {
			const puts, size = 3 * replySlots, 64
			// Handoff far above the test: no engine takes the
			// initiator's sockets while it does not progress.
			ads, regs, _ := newWorld(t, 2, Options{RingSlots: 64, RDMASlots: 256, Timeout: 4 * time.Minute, Handoff: time.Minute})
			ports := openAll(t, ads)
			a0, a1 := addr(0, 0), addr(1, 0)
			exchange(t, ports[0], ports[1], a0, a1, 10)
			if pair {
				// The reverse link's first packets come on the
				// connection rank 0 dialed, which its Progress reads
				// (no engine takes over within Handoff).
				back := mustLink(t, ports[1], a0)
				bp := &producer{l: back}
				var got collector
				for i := 0; i < 10; i++ {
					if !bp.send([]byte("back")) {
						t.Fatal("no room")
					}
				}
				deadline := time.Now().Add(20 * time.Second)
				for got.count(a1) < 10 {
					if time.Now().After(deadline) {
						t.Fatalf("%d of 10 packets back in 20s (link error %v)", got.count(a1), back.Err())
					}
					ports[1].Progress()
					ports[0].Progress()
					ports[0].Poll(&got, 64)
				}
				if got := connected(ads); got[0] != 1 || got[1] != 1 {
					t.Fatalf("connections attached per rank: %v, want one each", got)
				}
			}
			mem := make([]byte, puts*size)
			key, err := regs[1].Register(mem)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, len(mem))
			for i := range want {
				want[i] = byte(i*13 + 1)
			}
			l := mustLink(t, ports[0], a1)
			q := l.RDMA
			tail := q.HeadCounter().Load()
			first := tail
			for i := range puts {
				*q.Slot(tail) = transport.RDMAOp{Kind: transport.Put, Local: want[i*size : (i+1)*size], Key: key, Off: uint64(i * size)}
				tail++
				q.Publish(tail)
			}
			producersMu.Lock()
			p := producers[l]
			producersMu.Unlock()
			if !p.send([]byte("after the puts")) {
				t.Fatal("no room for the packet")
			}
			col := &checker{mem: mem, want: want}
			var others collector
			ports[0].Progress()
			// The target reads everything the initiator wrote, while the
			// initiator does nothing.
			sent := ads[0].Stats().BytesSent
			deadline := time.Now().Add(20 * time.Second)
			for ads[1].Stats().BytesReceived < sent {
				if time.Now().After(deadline) {
					t.Fatalf("the target received %d of %d bytes in 20s", ads[1].Stats().BytesReceived, sent)
				}
				ports[1].Poll(col, 64)
				ports[1].Progress()
			}
			ports[1].Poll(col, 64)
			for col.count() == 0 || q.TransferCounter().Load() < first+puts {
				if time.Now().After(deadline) {
					t.Fatalf("after 20s: %d packets, %d of %d Puts complete (link error %v)", col.count(), q.TransferCounter().Load()-first, puts, l.Err())
				}
				ports[0].Progress()
				ports[0].Poll(&others, 64)
				ports[1].Progress()
				ports[1].Poll(col, 64)
			}
			if col.broken != "" {
				t.Fatal(col.broken)
			}
			for i := first; i < first+puts; i++ {
				if err := q.Status(i); err != nil {
					t.Fatalf("Put %d: %v", i-first, err)
				}
			}
			if !bytes.Equal(mem, want) {
				t.Fatal("the Puts' data is wrong")
			}
		})
	}
}
