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

// An atomic performed in place (Link.Atomic) follows the owner's
// registrations: a link keeps the region of its last key, and uses it only
// while the owner's mirror still holds that key. Deregistered, the key is
// refused in place; a new registration over other bytes of the same
// allocation, or one without PermAtomic, or a word beyond its region, is
// looked up afresh and never served from the region kept.
func TestAtomicInPlaceFollowsRegistrations(t *testing.T) {
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
	if l.Atomic == nil {
		t.Fatal("a link over shared memory performs no atomic in place")
	}
	shared, err := ads[1].Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	word := func(off int) uint64 { return atomic.LoadUint64((*uint64)(unsafe.Pointer(&shared[off]))) }
	add := func(key transport.Key, off uint64, v uint64) (uint64, bool, error) {
		return l.Atomic(transport.AtomicArgs{Key: key, Off: off, Op: transport.AtomicAdd, Width: 8, Operand: v})
	}
	k1, err := regs[1].Register(shared[:32])
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(0); i < 3; i++ {
		old, ok, err := add(k1, 8, 2)
		if !ok || err != nil || old != 2*i {
			t.Fatalf("add %d on the first region: old %d ok %v err %v", i, old, ok, err)
		}
	}
	if _, ok, _ := add(k1, 32, 1); ok {
		t.Fatal("a word beyond the region kept was served in place")
	}
	if err := regs[1].Deregister(k1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := add(k1, 8, 100); ok {
		t.Fatal("a deregistered key was served in place from the region kept")
	}
	if w := word(8); w != 6 {
		t.Fatalf("first word %d, want 6", w)
	}
	// The table slot is reused by the next registration: another key over
	// other bytes.
	k2, err := regs[1].Register(shared[32:48])
	if err != nil {
		t.Fatal(err)
	}
	if old, ok, err := add(k2, 8, 7); !ok || err != nil || old != 0 {
		t.Fatalf("add on the second region: old %d ok %v err %v", old, ok, err)
	}
	if w, w1 := word(40), word(8); w != 7 || w1 != 6 {
		t.Fatalf("words %d at 40 and %d at 8, want 7 and 6", w, w1)
	}
	if err := regs[1].Deregister(k2); err != nil {
		t.Fatal(err)
	}
	k3, err := regs[1].RegisterPerm(shared[32:48], transport.PermGet|transport.PermPut)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := add(k3, 8, 1); ok {
		t.Fatal("a region registered without PermAtomic was served in place")
	}
	if w := word(40); w != 7 {
		t.Fatalf("word at 40 is %d after a refused add, want 7", w)
	}
}

// The owner withdraws a registration in a shared allocation with a
// processor-wide barrier only when a peer claimed it in place (an atomic
// or a copy on its mapping, whose claim is a release store): a region
// only sent from, or fetched the usual way, is withdrawn without one. A
// stale claim, of a key withdrawn before, on the table entry a new key
// reuses does not make the new key's withdrawal pay for it.
func TestBarrierOnlyAfterClaimInPlace(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{})
	defer ads[0].Close()
	defer ads[1].Close()
	p0, _ := ports(t, ads)
	l, err := p0.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	shared, err := ads[1].Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	barriers := func() uint64 { return ads[1].Stats().Barriers }
	reg := func() transport.Key {
		k, err := regs[1].Register(shared)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	dereg := func(k transport.Key) {
		if err := regs[1].Deregister(k); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10; i++ {
		dereg(reg())
	}
	if b := barriers(); b != 0 {
		t.Fatalf("%d barriers for registrations no peer used", b)
	}
	// A GET through the RDMA FIFO claims with a sequentially consistent
	// store: no barrier.
	k := reg()
	local := make([]byte, 1024)
	q := l.RDMA
	op := q.Slot(0)
	op.Kind, op.Local, op.Key, op.Off = transport.Get, local, k, 0
	q.Publish(1)
	deadline := time.Now().Add(30 * time.Second)
	for q.TransferCounter().Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("GET did not complete")
		}
		p0.Progress()
	}
	if err := q.Status(0); err != nil {
		t.Fatal(err)
	}
	dereg(k)
	if b := barriers(); b != 0 {
		t.Fatalf("%d barriers after a GET through the FIFO", b)
	}
	// An atomic in place: its withdrawal waits behind a barrier.
	k = reg()
	if _, ok, err := l.Atomic(transport.AtomicArgs{Key: k, Off: 8, Op: transport.AtomicAdd, Width: 8, Operand: 1}); !ok || err != nil {
		t.Fatalf("atomic in place: ok %v err %v", ok, err)
	}
	dereg(k)
	if b := barriers(); b != 1 {
		t.Fatalf("%d barriers after an atomic in place, want 1", b)
	}
	// The next key reuses the entry; the link still keeps the old key's
	// region, and its claim fails without marking the entry.
	k2 := reg()
	if _, ok, _ := l.Atomic(transport.AtomicArgs{Key: k, Off: 8, Op: transport.AtomicAdd, Width: 8, Operand: 1}); ok {
		t.Fatal("a withdrawn key was served in place")
	}
	dereg(k2)
	if b := barriers(); b != 1 {
		t.Fatalf("%d barriers after a stale claim, want 1", b)
	}
	if w := atomic.LoadUint64((*uint64)(unsafe.Pointer(&shared[8]))); w != 1 {
		t.Fatalf("word %d, want 1", w)
	}
}
