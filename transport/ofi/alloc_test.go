//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// A small packet sent, delivered and acknowledged allocates nothing on
// the Go side: not in Progress, not in Poll, not in the completions.
func TestSmallPacketAllocs(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			ads, _ := newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			defer ads[0].Close()
			defer ads[1].Close()
			dst, _ := ads[1].Open(0, transport.NewDoorbell())
			src, _ := ads[0].Open(0, transport.NewDoorbell())
			l, err := src.Link(transport.Addr{Rank: 1})
			if err != nil {
				t.Fatal(err)
			}
			tr := fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil)
			var c cnt
			// delivered advances both until the packet just written
			// arrived and counts transferred.
			delivered := func(size int) {
				want := c.n + 1
				deadline := time.Now().Add(time.Minute)
				for c.n < want || tr.Outstanding() > 0 {
					src.Progress()
					dst.Poll(&c, 64)
					tr.Complete()
					if time.Now().After(deadline) {
						t.Fatalf("packet of %d bytes: delivered %d of %d, %d outstanding", size, c.n, want, tr.Outstanding())
					}
				}
			}
			round := func(size int) {
				k := ring.SlotsFor(size)
				tail := tr.Tail()
				for !tr.Space(l.Msg.PadFor(tail, k) + k) {
					src.Progress()
					dst.Poll(&c, 64)
					tr.Complete()
				}
				if pad := l.Msg.PadFor(tail, k); pad > 0 {
					l.Msg.WritePad(tail, pad)
					tr.Inject(pad, nil)
					tail += uint64(pad)
				}
				l.Msg.Seal(tail, size)
				tr.Inject(k, nil)
				l.Msg.Publish(tr.Tail())
				delivered(size)
			}
			for _, size := range []int{8, 200} { // injected; sent from the ring
				for i := 0; i < 50; i++ {
					round(size) // the queues and buffers reach their sizes
				}
				if a := testing.AllocsPerRun(200, func() { round(size) }); a != 0 {
					t.Errorf("%d-byte packet: %v allocations per round trip", size, a)
				}
			}
			// Sent at once, outside the ring (the link is quiet after each).
			pkt := make([]byte, 8)
			now := func() {
				if !l.SendNow(pkt) {
					t.Fatal("SendNow refused a packet on a quiet link")
				}
				tr.InjectOutside()
				delivered(len(pkt))
			}
			for i := 0; i < 50; i++ {
				now()
			}
			if a := testing.AllocsPerRun(200, now); a != 0 {
				t.Errorf("packet sent at once: %v allocations per round trip", a)
			}
		})
	}
}

// A region registered, made known to the provider for a peer and
// deregistered, as a large send's buffer is, allocates nothing once the
// adapter has a closed record to reuse.
func TestRegionAllocs(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			ads, regs := newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			defer ads[0].Close()
			defer ads[1].Close()
			mem := make([]byte, 1<<20)
			round := func() {
				key, err := regs[0].Register(mem)
				if err != nil {
					t.Fatal(err)
				}
				if _, length, _, _, st := ads[0].resolve(key, 0); st != stOK || length != uint64(len(mem)) {
					t.Fatalf("resolve: status %d, length %d", st, length)
				}
				if err := regs[0].Deregister(key); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 10; i++ {
				round()
			}
			if a := testing.AllocsPerRun(100, round); a != 0 {
				t.Errorf("%v allocations per region", a)
			}
		})
	}
}
