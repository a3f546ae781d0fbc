package transport

import (
	"testing"

	"github.com/amigo-hpc/amigo/internal/ring"
)

type countingReceiver struct{ n int }

func (c *countingReceiver) Receive(from Addr, pkt []byte) { c.n++ }

// PollRing counts the descriptors it took at its next call, except one
// whose producer waits for the count (ring.FlagCount), which it counts in
// the call that takes it: a consumer that takes such a descriptor and then
// stops polling must not leave its producer's callback waiting.
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
	put(false)
	put(true)
	poll(2)
	if x := xfer.Load(); x != 3 {
		t.Fatalf("a FlagCount descriptor taken: %d transfers, want 3 at once", x)
	}
	poll(0)
	if x := xfer.Load(); x != 3 {
		t.Fatalf("an idle poll: %d transfers, want 3", x)
	}
}
