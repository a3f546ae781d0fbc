package shm_test

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/shm"
)

// A remote atomic on a shared allocation is the initiator's own atomic
// instruction on its mapping of the owner's segment; on Go memory the
// owner performs it, by its engine when its contexts do not advance. Both
// ways act on the same word atomically with each other.
func TestAtomicWays(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{})
	defer ads[0].Close()
	defer ads[1].Close()
	p0, err := ads[0].Open(0, transport.NewDoorbell())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ads[1].Open(0, transport.NewDoorbell()); err != nil {
		t.Fatal(err)
	}
	l, err := p0.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	shared, err := ads[1].Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	goMem := make([]byte, 64)
	kShared, err := regs[1].Register(shared)
	if err != nil {
		t.Fatal(err)
	}
	kGo, err := regs[1].Register(goMem)
	if err != nil {
		t.Fatal(err)
	}
	q := l.RDMA
	var tail uint64
	var old uint64
	add := func(key transport.Key, v uint64) {
		op := q.Slot(tail)
		op.Kind, op.Local, op.Key, op.Off = transport.Atomic, unsafe.Slice((*byte)(unsafe.Pointer(&old)), 8), key, 8
		op.AOp, op.Width, op.Operand = transport.AtomicAdd, 8, v
		tail++
		q.Publish(tail)
		deadline := time.Now().Add(30 * time.Second)
		for q.TransferCounter().Load() != tail {
			if time.Now().After(deadline) {
				t.Fatal("atomic did not complete")
			}
			p0.Progress()
		}
		if err := q.Status(tail - 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := uint64(0); i < 100; i++ {
		add(kShared, 3)
		if old != 3*i {
			t.Fatalf("shared word: fetched %d, want %d", old, 3*i)
		}
		add(kGo, 5)
		if old != 5*i {
			t.Fatalf("Go word: fetched %d, want %d", old, 5*i)
		}
	}
	if w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&shared[8]))); w != 300 {
		t.Fatalf("shared word %d, want 300", w)
	}
	if w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&goMem[8]))); w != 500 {
		t.Fatalf("Go word %d, want 500", w)
	}
	s0, s1 := ads[0].Stats(), ads[1].Stats()
	if s0.AtomicsDirect != 100 || s1.Atomics != 100 || s0.Atomics != 0 || s1.AtomicsDirect != 0 {
		t.Fatalf("rank 0 %+v, rank 1 %+v: want 100 direct by rank 0 and 100 served by rank 1", s0, s1)
	}
}
