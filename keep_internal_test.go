package amigo

import (
	"testing"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/ring"
)

// A sender's descriptors keep within the laps its receiver asks for
// (ring.Reader.SetKeep): once the receiver has left an epoch of 4 KiB
// messages where they lay, within its first 2048 slots of 8192, and the
// whole ring again once it copies them out. Its Sends of up to inlineKept
// in a window go the mid-size range's way while the receiver leaves data
// in place, as large messages otherwise.
func TestReserveWraps(t *testing.T) {
	r, _ := ring.NewHeap(8192)
	p := &peer{ring: r, due: new(bool), inlineBusy: 16<<10 + 512, inlineKept: 32<<10 + 512, stats: new(Stats)}
	p.initMid("inline", 8<<10+512)
	p.msg = fifo.New(r.Slots(), r.HeadCounter(), r.TransferCounter(), nil)
	rd := r.NewReader()
	rd.SetKeep(ring.KeepAlways)
	const n = 4096
	k := uint64(ring.SlotsFor(n))
	dst := make([]byte, n)
	// send sends msgs messages, each taken at once, and returns the
	// furthest a descriptor of the later half ended in its lap.
	send := func(msgs int, copyOut bool) (furthest uint64) {
		for i := range msgs {
			if p.reserve(n) == nil {
				t.Fatal("no room")
			}
			start := p.msg.Tail() // past the pad, if any
			p.commit(nil)
			if i >= msgs/2 {
				furthest = max(furthest, start%8192+k)
			}
			pkt, err := rd.Take()
			if err != nil || len(pkt) != n {
				t.Fatalf("took %d bytes, %v", len(pkt), err)
			}
			if copyOut {
				rd.CopyOut(dst, pkt)
			}
			rd.Count()
			rd.Flush()
		}
		return furthest
	}
	// busy reports which of n1 and n2 bytes would go as large messages
	// behind a descriptor not yet taken.
	busy := func(n1, n2 int) [2]bool {
		if p.reserve(64) == nil {
			t.Fatal("no room")
		}
		p.commit(nil)
		b := [2]bool{p.busyFor(n1, true), p.busyFor(n2, true)}
		if pkt, err := rd.Take(); err != nil || len(pkt) != 64 {
			t.Fatalf("took %d bytes, %v", len(pkt), err)
		}
		rd.Count()
		rd.Flush()
		return b
	}
	const mid, above = 24 << 10, 32<<10 + 513
	if end := send(300, false); end <= 2048 {
		t.Fatalf("before a whole epoch: descriptors end by slot %d of the lap", end)
	}
	if b := busy(mid, above); b != [2]bool{true, true} {
		t.Fatalf("before a whole epoch: %d and %d bytes go as large messages: %v, want both", mid, above, b)
	}
	send(1024, false) // an epoch of 4 MiB
	if end := send(400, false); end > 2048 {
		t.Fatalf("an epoch left in place: a descriptor ended at slot %d of the lap, want at most 2048", end)
	}
	if b := busy(mid, above); b != [2]bool{false, true} {
		t.Fatalf("an epoch left in place: %d and %d bytes go as large messages: %v, want the second only", mid, above, b)
	}
	send(1024, true)
	if end := send(400, true); end <= 2048 {
		t.Fatalf("an epoch copied out: descriptors end by slot %d of the lap", end)
	}
	if b := busy(mid, above); b != [2]bool{true, true} {
		t.Fatalf("an epoch copied out: %d and %d bytes go as large messages: %v, want both", mid, above, b)
	}
}
