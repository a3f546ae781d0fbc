package ring

import (
	"testing"

	"github.com/amigo-hpc/amigo/internal/order"
	"golang.org/x/sys/unix"
)

// A ring over memory outside the Go heap (a shared mapping, as between
// processes) orders what its producer wrote into Go memory before a
// descriptor with what its consumer reads there after taking it, for the
// race detector too, which sees no atomic outside the heap: the producer's
// publish (a descriptor's, and a record's) releases order's race word, and
// a consumer that acquires it (order.RaceAcquire, as package shm's poll
// does) reads without a report. Under -race, a publish that released
// nothing fails this test.
func TestRaceOrderOutsideHeap(t *testing.T) {
	const n = 64
	mem, err := unix.Mmap(-1, 0, MemSize(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	r, err := New(mem, n)
	if err != nil {
		t.Fatal(err)
	}
	rd := r.NewReader()
	var note [2]int // Go memory, written before each message, read after
	go func() {
		tail := uint64(0)
		// A descriptor of its own slot.
		note[0] = 1
		s := r.Small(tail)
		SealSmall(s, 8)
		tail++
		r.Publish(tail)
		// A slot of records: the first opens it, the second is appended.
		s = r.Small(tail)
		OpenRecords(s, 8<<RecordLenShift|1)
		tail++
		r.Publish(tail)
		note[1] = 2
		SealRecord(s, HeaderSize+RecordSize(8+RecordHeaderSize), 8<<RecordLenShift|1)
	}()
	for i := range note {
		var got []byte
		for got == nil {
			if got, err = rd.Take(); err != nil {
				t.Fatal(err)
			}
		}
		order.RaceAcquire()
		if note[i] != i+1 {
			t.Fatalf("message %d: the note reads %d, want %d", i, note[i], i+1)
		}
	}
}
