package transport

import (
	"testing"

	"github.com/amigo-hpc/amigo/internal/ring"
)

type countingReceiver struct{ n int }

func (c *countingReceiver) Receive(from Addr, pkt []byte) { c.n++ }

// PollRing counts a lone descriptor it took at its next call, unless its
// producer waits for the count (ring.FlagCount): a consumer that takes
// such a descriptor and then stops polling must not leave its producer's
// callback waiting. Several taken in one call are counted at once.
func TestPollRingCounts(t *testing.T) {
	r, err := ring.NewHeap(16)
	if err != nil {
		t.Fatal(err)
	}
	rd := r.NewReader()
	xfer := r.TransferCounter()
	var tail uint64
	put := func(counted bool) {
		copy(r.Payload(tail, 100), "payload")
		if counted {
			r.SealCounted(tail, 100)
		} else {
			r.Seal(tail, 100)
		}
		tail += uint64(ring.SlotsFor(100))
		r.Publish(tail)
	}
	var rcv countingReceiver
	poll := func(want int) {
		t.Helper()
		got, _, err := PollRing(rd, Addr{}, &rcv, 64)
		if err != nil || got != want {
			t.Fatalf("PollRing: %d, %v; want %d", got, err, want)
		}
	}
	put(false)
	poll(1)
	if x := xfer.Load(); x != 0 {
		t.Fatalf("a plain descriptor counted in the poll that took it: %d", x)
	}
	poll(0)
	if x := xfer.Load(); x != 1 {
		t.Fatalf("after the next poll: %d transfers, want 1", x)
	}
	put(true)
	poll(1)
	if x := xfer.Load(); x != 2 {
		t.Fatalf("a lone FlagCount descriptor taken: %d transfers, want 2 at once", x)
	}
	put(false)
	put(false)
	poll(2)
	if x := xfer.Load(); x != 4 {
		t.Fatalf("two descriptors taken in one poll: %d transfers, want 4 at once", x)
	}
	poll(0)
	if x := xfer.Load(); x != 4 {
		t.Fatalf("an idle poll: %d transfers, want 4", x)
	}
}
