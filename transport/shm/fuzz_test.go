package shm

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/transport"
)

// Everything an adapter reads from a peer's segment or from the job's KVS
// was written by another process: it is parsed by functions that validate
// it, fuzzed here, and the adapter is fed a hostile peer's writes below.

func validParams() params {
	return params{nlocal: 3, nctx: 2, slots: 64, mirror: 100, allocs: 10, chunk: 4096, chunks: 4, rings: 2, localIndex: 1, rank: 7, pid: 1234, token: [tokenSize]byte{1, 2, 3}}
}

func FuzzParseHeader(f *testing.F) {
	l, err := newLayout(validParams())
	if err != nil {
		f.Fatal(err)
	}
	mem := make([]byte, l.size)
	l.putHeader(mem)
	f.Add(mem[:headerSize], l.size)
	f.Add(mem[:headerSize], 10)
	f.Add([]byte("migoshm1"), 300)
	f.Fuzz(func(t *testing.T, hdr []byte, size int) {
		if size < 0 || size > 1<<26 {
			return
		}
		seg := make([]byte, max(size, len(hdr)))
		copy(seg, hdr)
		got, err := parseHeader(seg)
		if err != nil {
			return
		}
		// A header that parses describes a layout inside the segment.
		if got.size > len(seg) || got.chansOff+got.nlocal*got.nctx*got.chanStride > len(seg) {
			t.Fatalf("layout of %d bytes in a segment of %d", got.size, len(seg))
		}
		s := &segment{mem: seg, l: got}
		_ = s.channel(got.nlocal-1, got.nctx-1)
		_ = s.ringMem(got.nctx-1, got.nlocal-1, got.nctx-1)
		_ = s.mirrorEntry(got.mirror - 1)
		_ = s.allocEntry(got.allocs - 1)
		_ = s.chunkRing(got.rings - 1)
		_ = s.ringHolder(got.rings - 1)
	})
}

func FuzzParsePublished(f *testing.F) {
	f.Add(published{pid: 42, fd: 7, size: 1 << 20, probe: 0xc000012345}.encode())
	f.Add([]byte("v1 pid=1 fd=0 size=256 probe=0"))
	f.Add([]byte("v1 pid=-1 fd=x size= probe="))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := parsePublished(b)
		if err != nil {
			return
		}
		if p.pid <= 0 || p.fd < 0 || p.size < headerSize || p.size > maxSegment {
			t.Fatalf("accepted %+v from %q", p, b)
		}
		q, err := parsePublished(p.encode())
		if err != nil || q != p {
			t.Fatalf("%+v does not round-trip: %+v, %v", p, q, err)
		}
	})
}

func TestLayoutLimits(t *testing.T) {
	for _, mod := range []func(*params){
		func(p *params) { p.nlocal = 1 },
		func(p *params) { p.nlocal = maxLocal + 1 },
		func(p *params) { p.nctx = 0 },
		func(p *params) { p.slots = 100 },
		func(p *params) { p.chunk = 1000 },
		func(p *params) { p.chunks = 128 },
		func(p *params) { p.rings = 0 },
		func(p *params) { p.rings = maxRings + 1 },
		func(p *params) { p.mirror = maxMirror + 1 },
		func(p *params) { p.localIndex = 3 },
		func(p *params) { p.nlocal, p.nctx, p.chunk, p.chunks = maxLocal, maxCtx, maxChunk, maxChunks },
	} {
		p := validParams()
		mod(&p)
		if _, err := newLayout(p); err == nil {
			t.Errorf("layout of %+v accepted", p)
		}
	}
}

// hostile opens a job of two adapters in this process and returns them
// with their ports; the test then plays rank 1 going wrong by writing into
// the shared memory directly.
func hostile(t *testing.T) (a0, a1 *Adapter, p0, p1 transport.Port) {
	t.Helper()
	jobs := bootstrap.NewLocal(2)
	ads := make([]*Adapter, 2)
	errs := make([]error, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := New(jobs[r], transport.NewRegions(), Options{RingSlots: 64, Way: WayCopy})
			if err == nil {
				ads[r] = a
				if err = jobs[r].Fence(ctx); err == nil {
					err = a.Start(ctx)
				}
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ads[0].Close(); ads[1].Close() })
	var err error
	if p0, err = ads[0].Open(0, transport.NewDoorbell()); err != nil {
		t.Fatal(err)
	}
	if p1, err = ads[1].Open(0, transport.NewDoorbell()); err != nil {
		t.Fatal(err)
	}
	return ads[0], ads[1], p0, p1
}

type sink struct{ n int }

func (s *sink) Receive(transport.Addr, []byte) { s.n++ }

// A producer that writes a corrupt descriptor into a ring gets its link
// failed with ErrCorrupt; the consumer stops reading that ring and goes on.
func TestHostileRing(t *testing.T) {
	_, _, p0, p1 := hostile(t)
	l, err := p1.Link(transport.Addr{Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	// A pad of one slot at position 0 is corrupt: pads end at the ring's
	// end.
	l.Msg.WritePad(0, 1)
	l.Msg.Publish(1)
	var s sink
	for i := 0; i < 10; i++ {
		p0.Poll(&s, 8)
	}
	if s.n != 0 {
		t.Fatalf("%d packets delivered from a corrupt ring", s.n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Err() == nil && time.Now().Before(deadline) {
		p1.Progress()
	}
	if !errors.Is(l.Err(), transport.ErrCorrupt) {
		t.Fatalf("link error %v, want ErrCorrupt", l.Err())
	}
}

// Requests with absurd fields are refused by the owner, whichever words
// are garbage, and touch no memory.
func TestHostileRequests(t *testing.T) {
	a0, _, _, _ := hostile(t)
	mem := bytes.Repeat([]byte{0xAA}, 8192)
	key, err := a0.regions.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 1's channel into rank 0, written as a hostile rank 1 would.
	ch := a0.self.channel(1, 0)
	for r := 0; r < a0.self.l.rings; r++ {
		chunks := a0.self.chunkRing(r)
		for i := range chunks {
			chunks[i] = 0x55
		}
	}
	// Chunk ring 1 is held by another initiator's channel.
	a0.self.ringHolder(1).Store(77<<2 | holdInit)
	cases := []struct {
		mode, kind, key, off, n, base, piece, lseg uint64
		ring                                       uint64
		claim                                      bool // rank 1 holds the ring
	}{
		{reqPipe, 9, uint64(key), 0, 10, 0, 0, 0, 0, false},                 // bad kind
		{reqPipe, 2, uint64(key), 0, 0, 0, 0, 0, 0, false},                  // empty
		{reqPipe, 2, uint64(key), 8000, 1000, 0, 0, 0, 0, false},            // out of bounds
		{reqPipe, 2, uint64(key) ^ 1<<30, 0, 10, 0, 0, 0, 0, false},         // forged key
		{reqPipe, 2, uint64(key), ^uint64(0) - 3, 10, 0, 0, 0, 0, false},    // offset overflow
		{reqHelp, 1, uint64(key), 0, 8192, 0, 1, 0, 0, false},               // piece too small
		{reqHelp, 1, uint64(key), 0, 8192, 0, 4096, 1 << 40, 0, false},      // no such alloc
		{7, 1, uint64(key), 0, 10, 0, 0, 0, 0, false},                       // bad mode
		{reqPipe, 2, uint64(key), 0, maxSegment + 1, 0, 0, 0, 0, false},     // absurd size
		{reqPipe, 2, uint64(key), 0, 4096, ^uint64(0) - 100, 0, 0, 0, true}, // wrapping positions
		{reqPipe, 2, uint64(key), 0, 4096, 0, 0, 0, 99, false},              // no such chunk ring
		{reqPipe, 2, uint64(key), 0, 4096, 0, 0, 0, 0, false},               // a chunk ring it does not hold
		{reqPipe, 2, uint64(key), 0, 4096, 0, 0, 0, 1, false},               // another's chunk ring
	}
	for i, c := range cases {
		id := uint64(i + 1)
		ch.mode.Store(c.mode | c.kind<<8)
		ch.key.Store(c.key)
		ch.off.Store(c.off)
		ch.n.Store(c.n)
		ch.base.Store(c.base)
		ch.piece.Store(c.piece)
		ch.lseg.Store(c.lseg)
		ch.ring.Store(c.ring)
		tag := ringTag(1, 0, a0.self.l.nctx)
		if c.claim {
			a0.self.ringHolder(int(c.ring)).Store(tag<<2 | holdInit)
		}
		// A PUT that claims bytes it never wrote.
		ch.wr.Store(c.base + 1<<50)
		ch.seq.Store(id)
		a0.self.engineWork().Store(1)
		for j := 0; j < 5; j++ {
			a0.srv.serve()
		}
		if !bytes.Equal(mem, bytes.Repeat([]byte{0xAA}, 8192)) {
			t.Fatalf("case %d: a refused request wrote into the region", i)
		}
		if c.claim {
			// The owner gave back its hold when it gave up.
			if h := a0.self.ringHolder(int(c.ring)).Load(); h != tag<<2|holdInit {
				t.Fatalf("case %d: chunk ring holder %#x, want %#x", i, h, tag<<2|holdInit)
			}
			a0.self.ringHolder(int(c.ring)).Store(0)
		}
	}
	// Batched cooperative copies of PUTs: a table the owner refuses, or an
	// entry of it, leaves the region untouched; a refused entry gives the
	// owner's part back (redo).
	src := bytes.Repeat([]byte{0x55}, 8192)
	laddr := addrOf(src)
	for i, c := range []struct {
		entries uint64
		tab     []batchEntry
		taken   bool // the owner claims the part, then gives it back
	}{
		{0, nil, false},            // no entries
		{batchMax + 1, nil, false}, // more than the table holds
		{1, []batchEntry{{uint64(key), 0, 0, laddr}}, true},                                           // empty entry
		{1, []batchEntry{{uint64(key), 4096, 8192, laddr}}, true},                                     // out of bounds
		{1, []batchEntry{{uint64(key), ^uint64(0) - 3, 4096, laddr}}, true},                           // offset overflow
		{2, []batchEntry{{uint64(key), 0, 4096, laddr}, {uint64(key) ^ 1<<30, 0, 4096, laddr}}, true}, // a forged key after a good entry
	} {
		id := uint64(50 + i)
		for j, e := range c.tab {
			ch.tab[j] = e
		}
		ch.done.Store(0)
		ch.redo.Store(0)
		ch.claim.Store(claimWord(id, 1, 2))
		ch.mode.Store(reqBatch | uint64(transport.Put)<<8)
		ch.key.Store(0)
		ch.off.Store(0)
		ch.n.Store(4096)
		ch.piece.Store(c.entries)
		ch.seq.Store(id)
		a0.self.engineWork().Store(1)
		for j := 0; j < 5; j++ {
			a0.srv.serve()
		}
		if !bytes.Equal(mem, bytes.Repeat([]byte{0xAA}, 8192)) {
			t.Fatalf("batch case %d: a refused batch wrote into the region", i)
		}
		_, front, back := claimParts(ch.claim.Load())
		if c.taken && (back != 1 || ch.redo.Load() != 2 || ch.done.Load() != 2) {
			t.Fatalf("batch case %d: claim %d-%d, redo %#x, done %#x: want the part taken and given back", i, front, back, ch.redo.Load(), ch.done.Load())
		}
		if !c.taken && back != 2 {
			t.Fatalf("batch case %d: a refused batch was claimed", i)
		}
	}
	runtime.KeepAlive(src)

	// Atomic requests: each is refused with a status, and the region is
	// untouched.
	roKey, err := a0.regions.RegisterPerm(mem[:64], transport.PermGet)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		kind, key, off, n, aop, code uint64
	}{
		{2, uint64(key), 0, 8, uint64(transport.AtomicAdd) | 8<<8, stBadRequest},          // a get as an atomic
		{3, uint64(key), 0, 3, uint64(transport.AtomicAdd) | 3<<8, stBadRequest},          // width 3
		{3, uint64(key), 0, 8, 0 | 8<<8, stBadRequest},                                    // no operation
		{3, uint64(key), 0, 8, 99 | 8<<8, stBadRequest},                                   // operation 99
		{3, uint64(key), 0, 4, uint64(transport.AtomicFAdd) | 4<<8, stBadRequest},         // float add on 4 bytes
		{3, uint64(key), 0, 4, uint64(transport.AtomicAdd) | 8<<8, stBadRequest},          // n is not the width
		{3, uint64(key), 8190, 8, uint64(transport.AtomicAdd) | 8<<8, stBounds},           // out of bounds
		{3, uint64(key), ^uint64(0) - 3, 8, uint64(transport.AtomicAdd) | 8<<8, stBounds}, // offset overflow
		{3, uint64(key), 3, 8, uint64(transport.AtomicAdd) | 8<<8, stMisaligned},          // misaligned
		{3, uint64(key) ^ 1<<30, 0, 8, uint64(transport.AtomicAdd) | 8<<8, stBadKey},      // forged key
		{3, uint64(roKey), 0, 8, uint64(transport.AtomicSwap) | 8<<8, stPerm},             // no permission
	} {
		id := uint64(100 + i)
		ch.mode.Store(reqAtomic | c.kind<<8)
		ch.key.Store(c.key)
		ch.off.Store(c.off)
		ch.n.Store(c.n)
		ch.aop.Store(c.aop)
		ch.arg.Store(0x0102030405060708)
		ch.seq.Store(id)
		a0.self.engineWork().Store(1)
		a0.srv.serve()
		if st := ch.status.Load(); st != id<<8|c.code {
			t.Fatalf("atomic case %d: status %#x, want %#x", i, st, id<<8|c.code)
		}
		if ch.ack.Load() == id {
			t.Fatalf("atomic case %d: refused and acknowledged", i)
		}
		if !bytes.Equal(mem, bytes.Repeat([]byte{0xAA}, 8192)) {
			t.Fatalf("atomic case %d: a refused request wrote into the region", i)
		}
	}
	if a0.srv.active.Load() != 0 {
		t.Fatalf("%d requests still in progress", a0.srv.active.Load())
	}
	if h0, h1 := a0.self.ringHolder(0).Load(), a0.self.ringHolder(1).Load(); h0 != 0 || h1 != 77<<2|holdInit {
		t.Fatalf("chunk ring holders %#x and %#x after refused requests, want 0 and %#x", h0, h1, 77<<2|holdInit)
	}
}

// Segments are private to their user, and a producer rings a consumer's
// doorbell (a futex wake system call) only when the consumer said it sleeps.
func TestSegmentModeAndWakes(t *testing.T) {
	a0, a1, p0, p1 := hostile(t)
	for _, a := range []*Adapter{a0, a1} {
		fds := []int{a.fd}
		if b, err := a.Alloc(100); err != nil || len(b) != 100 {
			t.Fatal(err)
		}
		for _, m := range *a.allocs.Load() {
			fds = append(fds, m.fd)
		}
		for _, fd := range fds {
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o777 != 0o600 {
				t.Fatalf("segment of mode %#o, want 0600", st.Mode&0o777)
			}
		}
	}
	l, err := p1.Link(transport.Addr{Rank: 0})
	if err != nil {
		t.Fatal(err)
	}
	send := func() {
		tail := l.Msg.Tail()
		if pad := l.Msg.PadFor(tail, 1); pad > 0 {
			l.Msg.WritePad(tail, pad)
			tail += uint64(pad)
		}
		copy(l.Msg.Payload(tail, 8), "awake!!!")
		l.Msg.Seal(tail, 8)
		l.Msg.Publish(tail + 1)
		l.MsgBell.Ring()
	}
	var s sink
	// The consumer polls: no ring costs a system call.
	for i := 0; i < 20; i++ {
		send()
		for s.n <= i {
			p0.Poll(&s, 8)
		}
	}
	if n := l.MsgBell.Rings(); n != 0 {
		t.Fatalf("%d wakes of a consumer that never slept", n)
	}
	// The consumer sleeps (a shared doorbell sleeps at most a millisecond at
	// a time, so it arms and sleeps again until work comes): a message wakes
	// it with one ring, unless it falls between two of its sleeps.
	bell, _ := a0.Doorbell(0)
	const trials = 5
	for i := 0; i < trials; i++ {
		before := l.MsgBell.Rings()
		slept := make(chan int)
		armed := make(chan struct{})
		go func() {
			timer := time.NewTimer(time.Hour)
			sleeps := 0
			for {
				bell.Arm()
				if p0.Poll(&s, 8) > 0 {
					bell.Disarm()
					break
				}
				if sleeps == 0 {
					close(armed)
				}
				bell.Sleep(nil, timer, time.Second)
				sleeps++
			}
			slept <- sleeps
		}()
		// The message goes once the consumer found nothing with its bell
		// armed (however late a loaded machine schedules it), and a little
		// later, so that it is most likely asleep in the kernel by then.
		<-armed
		time.Sleep(10 * time.Millisecond)
		send()
		if n := <-slept; n == 0 {
			t.Fatal("the consumer never slept")
		}
		if n := l.MsgBell.Rings() - before; n > 1 {
			t.Fatalf("%d wakes for one message to a sleeping consumer", n)
		}
	}
	if n := l.MsgBell.Rings(); n == 0 {
		t.Fatalf("no wake in %d messages to a sleeping consumer", trials)
	}
}
