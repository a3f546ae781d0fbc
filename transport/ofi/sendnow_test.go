//go:build ofi

package ofi

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// tags records the first 8 bytes of every packet it receives, in order.
type tags struct{ got []uint64 }

func (tg *tags) Receive(from transport.Addr, pkt []byte) {
	tg.got = append(tg.got, binary.LittleEndian.Uint64(pkt))
}

// TestSendNowQuietLink checks the link's SendNow: a packet offered on a
// link with nothing in flight is sent at once, outside the ring, and
// counted in the ring's transfer counter once the target took it; one
// offered while an earlier packet is not yet taken, or while the ring
// holds a packet not yet posted, is refused (the caller writes it into the
// ring) and so cannot overtake it. The target receives every packet once,
// in the order the sender gave them.
func TestSendNowQuietLink(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			bp := newBenchPair(t, prov)
			p0 := bp.ports[0].(*port)
			out := p0.outs[p0.index(transport.Addr{Rank: 1})]
			l, tr := bp.links[0], bp.trs[0]
			if l.SendNow == nil {
				t.Fatal("an ofi link has no SendNow")
			}
			var rx tags
			next := uint64(1)
			var pkt [8]byte
			// now offers packet next to SendNow and reports whether it took it.
			now := func() bool {
				binary.LittleEndian.PutUint64(pkt[:], next)
				if !l.SendNow(pkt[:]) {
					return false
				}
				tr.InjectOutside()
				next++
				return true
			}
			// ring writes packet next into the ring and publishes it.
			inRing := func() {
				tail := tr.Tail()
				if !tr.Space(1) {
					t.Fatal("no room in the ring")
				}
				s := l.Msg.Small(tail)
				binary.LittleEndian.PutUint64(s[ring.HeaderSize:], next)
				ring.SealSmall(s, 8)
				tr.Inject(1, nil)
				l.Msg.Publish(tr.Tail())
				next++
			}
			deadline := time.Now().Add(time.Minute)
			// settle advances both ranks until rank 1 received every packet
			// and rank 0 counts every one transferred.
			settle := func(step string) {
				t.Helper()
				for uint64(len(rx.got)) < next-1 || tr.Transferred() != tr.Injected() {
					bp.ports[0].Progress()
					bp.ports[0].Poll(&bp.got[0], 64)
					tr.Complete()
					bp.ports[1].Progress()
					bp.ports[1].Poll(&rx, 64)
					if time.Now().After(deadline) {
						t.Fatalf("%s: %d of %d packets received, %d of %d transferred", step, len(rx.got), next-1, tr.Transferred(), tr.Injected())
					}
				}
			}

			// A first packet through the ring: the provider may not take
			// an inject before it reached the peer once (ofi_rxm connects).
			inRing()
			settle("the first packet")
			if !now() {
				t.Fatal("SendNow refused a packet on a link with nothing in flight")
			}
			if out.outside != out.posted || out.posted != 2 {
				t.Fatalf("after SendNow: posted %d, outside %d", out.posted, out.outside)
			}
			if now() {
				t.Fatal("SendNow took a packet while the one before was not yet taken")
			}
			inRing()
			inRing()
			settle("sent at once, then two in the ring")

			// A packet in the ring, not yet posted: one offered after it
			// is refused and goes behind it.
			inRing()
			if now() {
				t.Fatal("SendNow took a packet while the ring held one not yet posted")
			}
			inRing()
			settle("two in the ring, the second refused by SendNow")

			// Quiet links again: rounds of packets sent at once, each
			// taken before the next.
			for i := 0; i < 5; i++ {
				if !now() {
					t.Fatalf("round %d: SendNow refused a packet on a quiet link (posted %d, acked %d, released %d)", i, out.posted, out.acked, out.released)
				}
				settle(fmt.Sprintf("round %d", i))
			}
			// The ring's slots all went back: it holds nothing.
			if out.rd.Pending() || out.released != out.posted {
				t.Fatalf("released %d of %d packets", out.released, out.posted)
			}
			want := make([]uint64, next-1)
			for i := range want {
				want[i] = uint64(i + 1)
			}
			if !slices.Equal(rx.got, want) {
				t.Fatalf("received %v, want %v", rx.got, want)
			}
		})
	}
}
