package shm_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/shm"
)

// rdmaRun posts ops on a link's RDMA FIFO and returns the position after
// them; done reports whether they all completed.
type rdmaRun struct {
	q    *transport.RDMAQueue
	tail uint64
}

func (r *rdmaRun) post(kind transport.RDMAKind, local []byte, key transport.Key, off uint64) {
	op := r.q.Slot(r.tail)
	op.Kind, op.Local, op.Key, op.Off = kind, local, key, off
	r.tail++
	r.q.Publish(r.tail)
}

func (r *rdmaRun) done() bool { return r.q.TransferCounter().Load() == r.tail }

func (r *rdmaRun) check(t *testing.T, what string) {
	t.Helper()
	for i := uint64(0); i < r.tail; i++ {
		if err := r.q.Status(i); err != nil {
			t.Fatalf("%s, transfer %d: %v", what, i, err)
		}
	}
}

// The pipelined copies into one owner share the owner's pool of chunk
// rings: with a pool of one, a second initiator's copy waits until the
// first gives the ring back, both move the right bytes, and the pool is
// empty again when they are over.
func TestChunkRingPool(t *testing.T) {
	opts := shm.Options{RingSlots: 64, RDMASlots: 8, Way: shm.WayCopy, Chunk: 4096, Chunks: 4, ChunkRings: 1}
	ads, regs := world(t, 3, opts)
	for _, a := range ads {
		defer a.Close()
	}
	ports := make([]transport.Port, 3)
	for r, a := range ads {
		p, err := a.Open(0, transport.NewDoorbell())
		if err != nil {
			t.Fatal(err)
		}
		ports[r] = p
	}
	const size = 256 << 10 // 16 laps of the ring
	src := make([]byte, 2*size)
	for i := range src {
		src[i] = byte(i*13 + i>>9)
	}
	key, err := regs[0].Register(src)
	if err != nil {
		t.Fatal(err)
	}
	runs := make([]*rdmaRun, 3)
	for r := 1; r < 3; r++ {
		l, err := ports[r].Link(transport.Addr{Rank: 0})
		if err != nil {
			t.Fatal(err)
		}
		runs[r] = &rdmaRun{q: l.RDMA}
	}
	got1, got2 := make([]byte, size), make([]byte, size)
	runs[1].post(transport.Get, got1, key, 0)
	ports[1].Progress() // rank 1 draws the ring and posts its request
	if h := shm.RingHolders(ads[0]); h[0] == 0 {
		t.Fatalf("rank 1's pipelined copy started without holding a chunk ring: holders %#x", h)
	}
	holder := shm.RingHolders(ads[0])[0]
	runs[2].post(transport.Get, got2, key, size)
	for range 100 {
		ports[2].Progress() // the ring is rank 1's: rank 2 waits
	}
	// The ring is still rank 1's (the owner's engine may have taken its
	// request meanwhile: the word's low bits, not its tag, change).
	if h := shm.RingHolders(ads[0])[0]; runs[2].done() || h>>2 != holder>>2 || ads[2].Stats().Pipe != 0 {
		t.Fatalf("rank 2 moved %d bytes while rank 1 held the only chunk ring (done %v, holder word %#x, was %#x)", ads[2].Stats().Pipe, runs[2].done(), h, holder)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !runs[1].done() || !runs[2].done() {
		if time.Now().After(deadline) {
			t.Fatalf("copies not over: holders %#x", shm.RingHolders(ads[0]))
		}
		for _, p := range ports {
			p.Progress()
		}
	}
	runs[1].check(t, "rank 1")
	runs[2].check(t, "rank 2")
	if !bytes.Equal(got1, src[:size]) || !bytes.Equal(got2, src[size:]) {
		t.Fatal("pipelined copies through a shared chunk ring moved the wrong bytes")
	}
	if p1, p2 := ads[1].Stats().Pipe, ads[2].Stats().Pipe; p1 != size || p2 != size {
		t.Fatalf("pipelined bytes %d and %d, want %d each", p1, p2, size)
	}
	// The owner gives back its hold when its side ends, which may be a
	// step after the initiator's.
	for deadline := time.Now().Add(10 * time.Second); shm.RingHolders(ads[0])[0] != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("chunk ring still held (%#x) after both copies", shm.RingHolders(ads[0])[0])
		}
		ports[0].Progress()
	}
}

// A pipelined copy chosen by measurement that finds the owner's chunk rings
// all in flight moves by cross-memory attach instead of waiting.
func TestChunkRingPoolFull(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{RDMASlots: 8, ChunkRings: 1, HelpOff: true})
	for _, a := range ads {
		defer a.Close()
	}
	p0, p1 := ports(t, ads)
	const size = 512 << 10 // measureMin: the way is chosen by measurement
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	key, err := regs[1].Register(src)
	if err != nil {
		t.Fatal(err)
	}
	l, err := p0.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	run := &rdmaRun{q: l.RDMA}
	get := func(n int) {
		t.Helper()
		for range n {
			dst := make([]byte, size)
			run.post(transport.Get, dst, key, 0)
			for deadline := time.Now().Add(30 * time.Second); !run.done(); {
				if time.Now().After(deadline) {
					t.Fatal("GET did not complete")
				}
				p0.Progress()
				p1.Progress()
			}
			run.check(t, "GET")
			if !bytes.Equal(dst, src) {
				t.Fatal("GET moved the wrong bytes")
			}
		}
	}
	free := shm.HoldRing(ads[0], 1, 0)
	get(6) // the ways are measured: cross-memory attach, then the pipelined copy
	s := ads[0].Stats()
	if s.CMA == 0 {
		t.Skip("cross-memory attach is not available here")
	}
	if s.Pipe != 0 || s.CMA < 6*size {
		t.Fatalf("with the owner's only chunk ring held: %d bytes pipelined, %d by cross-memory attach (want 0 and %d)", s.Pipe, s.CMA, 6*size)
	}
	free()
	get(6)
	if ads[0].Stats().Pipe == 0 {
		t.Fatal("the pipelined copy was never tried once a chunk ring was free: the test proved nothing")
	}
}
