package ring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/memcopy"
)

func unsafeBytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), len(w)*8)
}

// producer is a minimal producer for tests: it keeps the free-space
// accounting that package fifo does for amigo.
type producer struct {
	r    *Ring
	tail uint64
}

func (p *producer) free() uint64 { return uint64(p.r.Slots()) - (p.tail - p.r.HeadCounter().Load()) }

// put writes msg, padding to the end of the ring first when needed, and
// reports false when there is no room.
func (p *producer) put(msg []byte) bool {
	k := SlotsFor(len(msg))
	pad := p.r.PadFor(p.tail, k)
	if uint64(pad+k) > p.free() {
		return false
	}
	if pad > 0 {
		p.r.WritePad(p.tail, pad)
		p.tail += uint64(pad)
	}
	copy(p.r.Payload(p.tail, len(msg)), msg)
	p.r.Seal(p.tail, len(msg))
	p.tail += uint64(k)
	p.r.Publish(p.tail)
	return true
}

// produce writes total messages into r from a goroutine of its own,
// message i as msg(i) makes it, each as soon as there is room.
func produce(r *Ring, total uint64, msg func(i uint64) []byte) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := &producer{r: r}
		for i := uint64(0); i < total; i++ {
			m := msg(i)
			for !p.put(m) {
			}
		}
	}()
	return &wg
}

// takeNext takes the next descriptor, counting and giving back slots
// while there is none yet (as PollRing does at every poll); it fails the
// test if none comes within a minute.
func takeNext(t *testing.T, rd *Reader) []byte {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := rd.Take()
		if err != nil {
			t.Fatal(err)
		}
		if b != nil {
			return b
		}
		rd.Count()
		rd.Flush()
		if time.Now().After(deadline) {
			t.Fatal("no descriptor within a minute")
		}
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestSlotsFor(t *testing.T) {
	for _, c := range []struct{ payload, slots int }{
		{0, 1}, {1, 1}, {SlotSize - HeaderSize, 1}, {SlotSize - HeaderSize + 1, 2},
		{2*SlotSize - HeaderSize, 2}, {1000, 16},
	} {
		if got := SlotsFor(c.payload); got != c.slots {
			t.Errorf("SlotsFor(%d) = %d, want %d", c.payload, got, c.slots)
		}
	}
}

// Messages from 0 bytes to half the ring, each written and read back.
func TestSizes(t *testing.T) {
	r, err := NewHeap(64)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{r: r}
	rd := r.NewReader()
	for size := 0; size <= MaxPayload(64); size++ {
		msg := pattern(size, byte(size))
		if !p.put(msg) {
			t.Fatalf("size %d: no room in an empty ring", size)
		}
		got, err := rd.Next()
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("size %d: read back %d different bytes", size, len(got))
		}
		rd.Release()
		if x, _ := rd.Next(); x != nil {
			t.Fatalf("size %d: a second message appeared", size)
		}
	}
	if got, want := r.TransferCounter().Load(), r.HeadCounter().Load(); got == 0 || want != p.tail {
		t.Fatalf("transfer counter %d, head %d, tail %d", got, want, p.tail)
	}
}

// Every message size in slots, placed at every offset of the ring, so that
// wrap-around is exercised at every position.
func TestWrapAtEveryOffset(t *testing.T) {
	const n = 16
	for k := 1; k <= n/2; k++ {
		for start := 0; start < n; start++ {
			r, _ := NewHeap(n)
			p := &producer{r: r}
			rd := r.NewReader()
			// Move head and tail to start with one-slot messages.
			for i := 0; i < start; i++ {
				if !p.put(nil) {
					t.Fatal("no room")
				}
				if b, err := rd.Next(); err != nil || b == nil {
					t.Fatalf("filler: %v", err)
				}
				rd.Release()
			}
			size := k*SlotSize - HeaderSize
			for rep := 0; rep < 3; rep++ {
				msg := pattern(size, byte(k+start+rep))
				if !p.put(msg) {
					t.Fatalf("k=%d start=%d rep=%d: no room in a drained ring", k, start, rep)
				}
				got, err := rd.Next()
				if err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("k=%d start=%d rep=%d: %v, equal=%v", k, start, rep, err, bytes.Equal(got, msg))
				}
				rd.Release()
			}
			if h := r.HeadCounter().Load(); h != p.tail {
				t.Fatalf("k=%d start=%d: head %d, tail %d", k, start, h, p.tail)
			}
		}
	}
}

// A full ring refuses more and accepts again once the consumer released.
func TestFull(t *testing.T) {
	r, _ := NewHeap(8)
	p := &producer{r: r}
	for i := 0; i < 8; i++ {
		if !p.put([]byte{byte(i)}) {
			t.Fatalf("message %d refused", i)
		}
	}
	if p.put(nil) {
		t.Fatal("a full ring took a ninth message")
	}
	rd := r.NewReader()
	b, _ := rd.Next()
	if len(b) != 1 || b[0] != 0 {
		t.Fatalf("first message %v", b)
	}
	rd.Release()
	if !p.put([]byte{8}) {
		t.Fatal("no room after a release")
	}
}

// One producer and one consumer goroutine, random sizes: every message
// arrives intact and in order, and the transfer counter counts them (pads
// included).
func TestConcurrent(t *testing.T) {
	r, _ := NewHeap(128)
	const total = 20000
	prng := rand.New(rand.NewPCG(1, 2))
	wg := produce(r, total, func(i uint64) []byte {
		size := prng.IntN(MaxPayload(128) + 1)
		msg := pattern(size, byte(i))
		if size >= 4 {
			binary.LittleEndian.PutUint32(msg, uint32(i))
		}
		return msg
	})
	rd := r.NewReader()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < total; {
		b, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			continue
		}
		size := rng.IntN(MaxPayload(128) + 1)
		want := pattern(size, byte(i))
		if size >= 4 {
			binary.LittleEndian.PutUint32(want, uint32(i))
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("message %d: %d bytes, want %d, equal=false", i, len(b), size)
		}
		rd.Release()
		i++
	}
	wg.Wait()
	if x := r.TransferCounter().Load(); x < total {
		t.Fatalf("transfer counter %d < %d messages", x, total)
	}
}

func TestDecodeRejects(t *testing.T) {
	const n = 16
	slots := make([]byte, n*SlotSize)
	for _, c := range []struct {
		name string
		word uint64
		head uint64
	}{
		{"zero slots", header(0, 0, 0), 0},
		{"wraps", header(4, 0, 100), 14},
		{"more than half", header(9, 0, 9*SlotSize-HeaderSize), 0},
		{"length beyond slots", header(1, 0, SlotSize), 0},
		{"length short of slots", header(2, 0, 10), 0},
		{"unknown flag", header(1, 2, 0), 0},
		{"pad not to end", header(2, FlagPad, 0), 3},
		{"pad with length", header(2, FlagPad, 5), 14},
	} {
		if _, _, _, err := Decode(c.word, slots, n, c.head); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err %v", c.name, err)
		}
	}
	if k, pad, _, err := Decode(header(2, FlagPad, 0), slots, n, 14); err != nil || !pad || k != 2 {
		t.Errorf("valid pad: k=%d pad=%v err=%v", k, pad, err)
	}
}

// FuzzDecode feeds arbitrary header words and ring memory to the decoder:
// it must never panic or return bytes outside the ring, and whatever it
// accepts must be consistent.
func FuzzDecode(f *testing.F) {
	f.Add(header(1, 0, 10), uint16(0), uint8(4))
	f.Add(header(3, 0, 150), uint16(5), uint8(4))
	f.Add(header(2, FlagPad, 0), uint16(14), uint8(4))
	f.Add(uint64(0xffffffffffffffff), uint16(7), uint8(3))
	f.Fuzz(func(t *testing.T, word uint64, head uint16, logn uint8) {
		n := uint64(1) << (logn % 10)
		slots := make([]byte, n*SlotSize)
		k, pad, payload, err := Decode(word, slots, n, uint64(head))
		if err != nil {
			return
		}
		off := uint64(head) & (n - 1)
		if k < 1 || off+uint64(k) > n {
			t.Fatalf("accepted k=%d at offset %d of %d", k, off, n)
		}
		if pad {
			if payload != nil || off+uint64(k) != n {
				t.Fatal("accepted a bad pad")
			}
			return
		}
		if HeaderSize+len(payload) > k*SlotSize || SlotsFor(len(payload)) != k {
			t.Fatalf("payload of %d bytes in %d slots", len(payload), k)
		}
		if len(payload) > 0 && &payload[len(payload)-1] != &slots[off*SlotSize+HeaderSize+uint64(len(payload))-1] {
			t.Fatal("payload outside the descriptor")
		}
	})
}

// FuzzReader lets arbitrary bytes stand for ring memory written by a broken
// or hostile producer: the reader returns descriptors inside the ring or
// ErrCorrupt, and never panics.
func FuzzReader(f *testing.F) {
	seed := make([]byte, MemSize(8))
	r, _ := New(seed, 8)
	p := &producer{r: r}
	p.put([]byte("hello"))
	p.put(make([]byte, 150))
	f.Add(seed)
	// A slot of records between two descriptors, read by Take (the
	// length picks the mode).
	rec := make([]byte, MemSize(8)+1)
	r, _ = New(rec[:MemSize(8)], 8)
	p = &producer{r: r}
	p.put([]byte("before"))
	s := r.Small(p.tail)
	copy(RecordBody(s, HeaderSize, 8+5), "first")
	off := OpenRecords(s, recordWord(5))
	copy(RecordBody(s, off, 8+3), "two")
	SealRecord(s, off, recordWord(3))
	p.tail++
	r.Publish(p.tail)
	p.put(make([]byte, 100))
	f.Add(rec)
	f.Fuzz(func(t *testing.T, mem []byte) {
		buf := make([]uint64, MemSize(8)/8)
		raw := unsafeBytes(buf)
		copy(raw, mem)
		r, err := New(raw, 8)
		if err != nil {
			t.Fatal(err)
		}
		rd := r.NewReader()
		mode := len(mem) % 3
		consume := mode == 1 // consume, flush later
		if mode == 2 {       // the shm adapter's way: take, count, flush later
			if len(mem)%2 == 0 {
				rd.SetKeep(KeepAlways)
			}
			dst := make([]byte, MemSize(8))
			for i := 0; i < 20; i++ {
				b, err := rd.Take()
				if err != nil || b == nil {
					rd.Count()
					return
				}
				if i%2 == 1 {
					rd.CopyOut(dst, b)
				}
				if i%3 == 2 {
					rd.Flush()
				}
				if rd.Unreleased() > 8 {
					t.Fatalf("%d slots taken and unreleased in a ring of 8", rd.Unreleased())
				}
			}
			return
		}
		for i := 0; i < 20; i++ {
			b, err := rd.Next()
			if err != nil || b == nil {
				return
			}
			if consume {
				rd.Consume()
				if rd.Unreleased() > 8 {
					t.Fatalf("%d slots consumed and unreleased in a ring of 8", rd.Unreleased())
				}
			} else {
				rd.Release()
			}
		}
	})
}

// Peek gathers several descriptors, pads included, without releasing them;
// one Release gives all their slots back and counts each as a transfer.
func TestPeekBatch(t *testing.T) {
	r, err := NewHeap(16)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{r: r}
	rd := r.NewReader()
	xfer := r.TransferCounter()
	seed := byte(0)
	var want [][]byte
	for round := 0; round < 50; round++ {
		// Up to a full ring of mixed sizes; some rounds wrap with a pad.
		for {
			msg := pattern(int(seed)%200, seed)
			if !p.put(msg) {
				break
			}
			want = append(want, msg)
			seed++
		}
		before := xfer.Load()
		var got [][]byte
		for {
			b, err := rd.Peek()
			if err != nil {
				t.Fatal(err)
			}
			if b == nil {
				break
			}
			got = append(got, append([]byte(nil), b...))
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: peeked %d descriptors, want %d", round, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("round %d: descriptor %d differs", round, i)
			}
		}
		if xfer.Load() != before || r.HeadCounter().Load() == p.tail {
			t.Fatal("Peek released something")
		}
		rd.Release()
		if r.HeadCounter().Load() != p.tail {
			t.Fatalf("head %d after Release, tail %d", r.HeadCounter().Load(), p.tail)
		}
		if n := xfer.Load() - before; n < uint64(len(want)) || n > uint64(len(want))+1 {
			t.Fatalf("Release counted %d transfers for %d descriptors (and at most one pad)", n, len(want))
		}
		if rd.Pending() {
			t.Fatal("reader pending after releasing everything")
		}
		want = want[:0]
	}
}

// ReleaseFirst gives back the oldest peeked descriptors only, in any
// number of steps, while peeking goes on; the transfer counter counts each
// descriptor and pad once.
func TestReleaseFirst(t *testing.T) {
	r, err := NewHeap(32)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{r: r}
	rd := r.NewReader()
	rng := rand.New(rand.NewPCG(1, 2))
	var peeked [][]byte // peeked, not released, oldest first
	sent, got := 0, 0
	for step := 0; step < 20000; step++ {
		switch rng.IntN(3) {
		case 0:
			msg := pattern(rng.IntN(300), byte(sent))
			if p.put(msg) {
				sent++
			}
		case 1:
			b, err := rd.Peek()
			if err != nil {
				t.Fatal(err)
			}
			if b != nil {
				if want := pattern(len(b), byte(got)); !bytes.Equal(b, want) {
					t.Fatalf("descriptor %d differs", got)
				}
				peeked = append(peeked, b)
				got++
			}
		case 2:
			n := rng.IntN(len(peeked) + 2)
			before := r.TransferCounter().Load()
			done := rd.ReleaseFirst(n)
			if want := min(n, len(peeked)); done != want {
				t.Fatalf("ReleaseFirst(%d) with %d peeked released %d", n, len(peeked), done)
			}
			if moved := r.TransferCounter().Load() - before; moved < uint64(done) || moved > uint64(done)+1 {
				t.Fatalf("released %d descriptors, counter moved %d", done, moved)
			}
			peeked = peeked[done:]
			// The ones still peeked are intact.
			for i, b := range peeked {
				if !bytes.Equal(b, pattern(len(b), byte(got-len(peeked)+i))) {
					t.Fatalf("descriptor still peeked changed after a partial release")
				}
			}
			if rd.Position() != r.HeadCounter().Load()+uint64(rd.k) {
				t.Fatal("Position inconsistent")
			}
		}
	}
	rd.Release()
	if r.HeadCounter().Load() != rd.Position() {
		t.Fatal("head behind after Release")
	}
}

// Consume goes on reading past descriptors and counts them as transferred
// at once, but gives no slots back: the producer gets no room until Flush,
// which releases them all.
func TestConsumeFlush(t *testing.T) {
	r, err := NewHeap(8)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{r: r}
	c := r.NewReader()
	for i := 0; i < 3; i++ {
		if !p.put(pattern(10, byte(i))) {
			t.Fatal("no room")
		}
	}
	for i := 0; i < 3; i++ {
		got, err := c.Next()
		if err != nil || !bytes.Equal(got, pattern(10, byte(i))) {
			t.Fatalf("message %d: %v %v", i, got, err)
		}
		c.Consume()
	}
	if got, err := c.Next(); got != nil || err != nil {
		t.Fatalf("empty ring read %v %v", got, err)
	}
	if c.Unreleased() != 3 || r.HeadCounter().Load() != 0 || r.TransferCounter().Load() != 3 || p.free() != 5 {
		t.Fatalf("before Flush: unreleased %d, head %d, xfer %d, free %d", c.Unreleased(), r.HeadCounter().Load(), r.TransferCounter().Load(), p.free())
	}
	// The consumed slots still hold their header words: the producer
	// cannot have reused them.
	for pos := uint64(0); pos < 3; pos++ {
		if r.word(pos).Load() == 0 {
			t.Fatalf("slot %d zeroed before Flush", pos)
		}
	}
	if !c.Flush() {
		t.Fatal("Flush released nothing")
	}
	if c.Flush() {
		t.Fatal("second Flush released again")
	}
	if c.Unreleased() != 0 || r.HeadCounter().Load() != 3 || r.TransferCounter().Load() != 3 || p.free() != 8 {
		t.Fatalf("after Flush: unreleased %d, head %d, xfer %d, free %d", c.Unreleased(), r.HeadCounter().Load(), r.TransferCounter().Load(), p.free())
	}
	for pos := uint64(0); pos < 3; pos++ {
		if r.word(pos).Load() != 0 {
			t.Fatalf("slot %d not zeroed by Flush", pos)
		}
	}
	// Release releases what Consume left as well as its own.
	p.put(pattern(70, 9)) // 2 slots
	p.put(pattern(1, 10))
	if _, err := c.Next(); err != nil {
		t.Fatal(err)
	}
	c.Consume()
	if _, err := c.Next(); err != nil {
		t.Fatal(err)
	}
	c.Release()
	if c.Unreleased() != 0 || r.HeadCounter().Load() != 6 || r.TransferCounter().Load() != 5 {
		t.Fatalf("after Release: unreleased %d, head %d, xfer %d", c.Unreleased(), r.HeadCounter().Load(), r.TransferCounter().Load())
	}
}

// A consumer that only ever consumes (the producer filling the ring again
// and again) reads every message once, in order: Next gives slots back
// past half a ring, so it never reads a lap of consumed slots again and
// the producer always gets room.
func TestConsumeLaps(t *testing.T) {
	for _, slots := range []int{2, 4, 16} {
		r, err := NewHeap(slots)
		if err != nil {
			t.Fatal(err)
		}
		p := &producer{r: r}
		c := r.NewReader()
		rng := rand.New(rand.NewPCG(uint64(slots), 1))
		sent, read := 0, 0
		for sent < 2000 {
			for k := rng.IntN(4); k >= 0; k-- {
				n := rng.IntN(MaxPayload(slots) + 1)
				if !p.put(pattern(n, byte(sent))) {
					break
				}
				sent++
			}
			for {
				got, err := c.Next()
				if err != nil {
					t.Fatal(err)
				}
				if got == nil {
					break
				}
				if len(got) > 0 && got[0] != byte(read) {
					t.Fatalf("%d slots: message %d read as %d", slots, read, got[0])
				}
				read++
				c.Consume()
				if read > sent {
					t.Fatalf("%d slots: read %d of %d sent", slots, read, sent)
				}
			}
			if c.Unreleased() > slots/2+MaxPayload(slots)/SlotSize+1 {
				t.Fatalf("%d slots: %d unreleased", slots, c.Unreleased())
			}
		}
		if read != sent {
			t.Fatalf("%d slots: read %d of %d", slots, read, sent)
		}
	}
}

// Take reads what Next reads, small descriptors (written with Small and
// SealSmall), larger ones and pads alike, consuming each; the transfer
// counter moves only at Count, by every descriptor taken, pads included;
// Flush gives the slots back.
func TestTakeCount(t *testing.T) {
	r, err := NewHeap(16)
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{r: r}
	putSmall := func(msg []byte) bool {
		if p.free() < 1 {
			return false
		}
		s := r.Small(p.tail)
		copy(s[HeaderSize:], msg)
		SealSmall(s, len(msg))
		p.tail++
		r.Publish(p.tail)
		return true
	}
	rd := r.NewReader()
	xfer := r.TransferCounter()
	seed := byte(0)
	pads := 0
	for round := 0; round < 200; round++ {
		var want [][]byte
		written := uint64(0) // descriptors, pads included
		for len(want) < 5 {
			n := int(seed) % 100
			msg := pattern(n, seed)
			before := p.tail
			var ok bool
			if n <= SlotSize-HeaderSize && seed%3 != 0 {
				ok = putSmall(msg)
			} else {
				ok = p.put(msg)
			}
			if !ok {
				break
			}
			if pad := r.PadFor(before, SlotsFor(n)); pad > 0 && p.tail-before > uint64(SlotsFor(n)) {
				written++
				pads++
			}
			written++
			want = append(want, msg)
			seed++
		}
		x0 := xfer.Load()
		for i, w := range want {
			b, err := rd.Take()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, w) {
				t.Fatalf("round %d message %d: took %d bytes, want %d", round, i, len(b), len(w))
			}
		}
		if b, err := rd.Take(); b != nil || err != nil {
			t.Fatalf("round %d: Take on an empty ring: %d bytes, %v", round, len(b), err)
		}
		// Pads Next skips on the way are counted at once; the rest wait.
		if got := xfer.Load() - x0; got > written-uint64(len(want)) {
			t.Fatalf("round %d: %d transfers counted before Count", round, got)
		}
		if !rd.Count() {
			t.Fatalf("round %d: Count found nothing to count", round)
		}
		if got := xfer.Load() - x0; got != written {
			t.Fatalf("round %d: %d transfers counted, want %d", round, got, written)
		}
		if rd.Count() {
			t.Fatal("a second Count counted again")
		}
		rd.Flush()
		if r.HeadCounter().Load() != p.tail {
			t.Fatalf("round %d: head %d after Flush, tail %d", round, r.HeadCounter().Load(), p.tail)
		}
	}
	if pads == 0 {
		t.Fatal("no round wrapped with a pad")
	}
}

// Records: Take returns them in order, waits at an empty offset while the
// producer may still append (the next slot empty), takes appended records,
// and leaves the slot once the producer wrote the next descriptor,
// counting it as one descriptor. Stale bytes a previous lap left in the
// slot are never read as records.
func TestRecords(t *testing.T) {
	r, err := NewHeap(4)
	if err != nil {
		t.Fatal(err)
	}
	// Stale bytes in every slot, as a previous lap of data would leave them.
	for pos := uint64(0); pos < 4; pos++ {
		s := r.Small(pos)
		for i := HeaderSize; i < SlotSize; i++ {
			s[i] = 0xff
		}
	}
	p := &producer{r: r}
	rd := r.NewReader()
	xfer := r.TransferCounter()
	take := func(want string) {
		t.Helper()
		b, err := rd.Take()
		if err == nil && b == nil && want == "" {
			return
		}
		if err != nil || len(b) != RecordHeaderSize+len(want) || string(b[RecordHeaderSize:]) != want ||
			binary.LittleEndian.Uint64(b) != recordWord(len(want)) {
			t.Fatalf("Take: %q, %v; want the record of %q", b, err, want)
		}
	}
	takeDesc := func(want string) {
		t.Helper()
		b, err := rd.Take()
		if err != nil || string(b) != want {
			t.Fatalf("Take: %q, %v; want %q", b, err, want)
		}
	}
	for lap := 0; lap < 6; lap++ {
		s := r.Small(p.tail)
		copy(RecordBody(s, HeaderSize, 8+2), "r0")
		off := OpenRecords(s, recordWord(2))
		p.tail++
		r.Publish(p.tail)
		r.Prepare(p.tail) // as the producer of package amigo does
		take("r0")
		take("") // nothing yet, and the producer may append
		if rd.Pending() != true || rd.Count() != false {
			t.Fatal("the reader left the slot of records early")
		}
		for i := 1; off+RecordSize(8+i+1) <= SlotSize; i++ {
			msg := fmt.Sprintf("r%d%s", i, bytes.Repeat([]byte{'.'}, i-1))
			copy(RecordBody(s, off, 8+len(msg)), msg)
			SealRecord(s, off, recordWord(len(msg)))
			off += RecordSize(8 + len(msg))
			take(msg)
		}
		x0 := xfer.Load()
		p.put([]byte("next"))
		takeDesc("next")
		rd.Count()
		if got := xfer.Load() - x0; got != 2 {
			t.Fatalf("lap %d: %d descriptors counted, want 2 (the slot of records and the next)", lap, got)
		}
		rd.Flush()
	}
}

// Prepare is a hint: at any position, over laps of the ring, it leaves
// every byte of every slot as it was.
func TestPrepare(t *testing.T) {
	r, err := NewHeap(8)
	if err != nil {
		t.Fatal(err)
	}
	for pos := uint64(0); pos < 8; pos++ {
		s := r.Small(pos)
		for i := range s {
			s[i] = byte(pos*SlotSize) + byte(i)
		}
	}
	for pos := uint64(0); pos < 3*8; pos++ {
		r.Prepare(pos)
		r.Prepare(^uint64(0) - pos)
	}
	for pos := uint64(0); pos < 8; pos++ {
		s := r.Small(pos)
		for i := range s {
			if s[i] != byte(pos*SlotSize)+byte(i) {
				t.Fatalf("slot %d byte %d changed to %#x", pos, i, s[i])
			}
		}
	}
}

// recordWord is the word of a record whose body has n bytes: non-zero
// in the producer's bits, the length at RecordLenShift.
func recordWord(n int) uint64 { return 0x5a | uint64(n)<<RecordLenShift }

// Three 8-byte records fill a slot (a 16-byte record each, word and
// data), and Take hands each back whole, word included.
func TestRecordsOfEight(t *testing.T) {
	r, err := NewHeap(4)
	if err != nil {
		t.Fatal(err)
	}
	rd := r.NewReader()
	s := r.Small(0)
	binary.LittleEndian.PutUint64(RecordBody(s, HeaderSize, 16), 100)
	off := OpenRecords(s, recordWord(8))
	n := 1
	for ; off+RecordSize(16) <= SlotSize; n++ {
		binary.LittleEndian.PutUint64(RecordBody(s, off, 16), uint64(100+n))
		SealRecord(s, off, recordWord(8))
		off += RecordSize(16)
	}
	if n != 3 {
		t.Fatalf("%d records of 8 bytes in a slot, want 3", n)
	}
	r.Publish(1)
	for i := 0; i < n; i++ {
		b, err := rd.Take()
		if err != nil || len(b) != 16 || binary.LittleEndian.Uint64(b) != recordWord(8) || binary.LittleEndian.Uint64(b[8:]) != uint64(100+i) {
			t.Fatalf("record %d: %x, %v", i, b, err)
		}
	}
	// Eight bytes are left, room for a record of a word alone: the
	// reader waits at them until the producer writes the next descriptor.
	if b, err := rd.Take(); b != nil || err != nil || rd.Count() {
		t.Fatalf("at the last 8 bytes: %x, %v, or counted", b, err)
	}
	s = r.Small(1)
	binary.LittleEndian.PutUint64(RecordBody(s, HeaderSize, 16), 200)
	OpenRecords(s, recordWord(8))
	r.Publish(2)
	b, err := rd.Take()
	if err != nil || len(b) != 16 || binary.LittleEndian.Uint64(b[8:]) != 200 {
		t.Fatalf("the next slot's record: %x, %v", b, err)
	}
	if !rd.Count() || r.TransferCounter().Load() != 1 {
		t.Fatalf("transfer counter %d, want 1 (the first slot)", r.TransferCounter().Load())
	}
}

// BenchmarkTakeRecords is the consumer's side of a window of 8-byte
// messages: slots of three records each, taken one by one and given back
// as the shm adapter does (Take, Count, Flush). One op is one record.
func BenchmarkTakeRecords(b *testing.B) {
	const slots = 64
	r, err := NewHeap(2 * slots)
	if err != nil {
		b.Fatal(err)
	}
	rd := r.NewReader()
	var tail uint64
	fill := func() {
		for k := 0; k < slots; k++ {
			s := r.Small(tail)
			binary.LittleEndian.PutUint64(RecordBody(s, HeaderSize, 16), 1)
			off := OpenRecords(s, recordWord(8))
			for off+16 <= SlotSize {
				binary.LittleEndian.PutUint64(RecordBody(s, off, 16), 1)
				SealRecord(s, off, recordWord(8))
				off += 16
			}
			tail++
		}
		r.Publish(tail)
	}
	b.ReportAllocs()
	n := 0
	for i := 0; i < b.N; i++ {
		if n == 0 {
			rd.Flush()
			fill()
			n = 3 * slots
		}
		rec, err := rd.Take()
		if err != nil || len(rec) != 16 {
			b.Fatalf("record %d: %d bytes, %v", i, len(rec), err)
		}
		n--
		if n%3 == 0 {
			rd.Count()
		}
	}
}

// A reader that catches up with a producer appending records twice in a
// row, having handed records out each time, waits before its next look
// (a stream); one that catches up once (a lone burst) or finds nothing new
// does not. The records all come out, in order, whether it waits or not.
func TestRecordCatchUp(t *testing.T) {
	r, err := NewHeap(8)
	if err != nil {
		t.Fatal(err)
	}
	rd := r.NewReader()
	s := r.Small(0)
	next := uint64(1)
	body := func(off int) []byte { return RecordBody(s, off, 16) }
	binary.LittleEndian.PutUint64(body(HeaderSize), next)
	off := OpenRecords(s, recordWord(8))
	r.Publish(1)
	appendRecord := func() {
		next++
		binary.LittleEndian.PutUint64(body(off), next)
		SealRecord(s, off, recordWord(8))
		off += RecordSize(16)
	}
	want := uint64(1)
	take := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			b, err := rd.Take()
			if err != nil || len(b) != 16 || binary.LittleEndian.Uint64(b[8:]) != want {
				t.Fatalf("record %d: %x, %v", want, b, err)
			}
			want++
		}
		if b, err := rd.Take(); b != nil || err != nil {
			t.Fatalf("after record %d: %x, %v", want-1, b, err)
		}
	}
	take(1) // a burst of one: caught up once
	if rd.caught {
		t.Fatal("waits after catching up once")
	}
	appendRecord()
	take(1) // again, after a record: a stream
	if !rd.caught {
		t.Fatal("does not wait after catching up twice in a row")
	}
	take(0) // nothing new: the wait is taken, and not again
	if rd.caught || rd.streak != 0 {
		t.Fatalf("after a look that found nothing: caught %v, streak %d", rd.caught, rd.streak)
	}
	appendRecord()
	take(1)
	if rd.caught {
		t.Fatal("waits after a burst that followed an idle look")
	}
	if recordPause < 0 || recordPause > 64 {
		t.Fatalf("recordPause %d", recordPause)
	}
}

// Take gives the slots of a descriptor of largeSlots slots or more (an
// eighth of a smaller ring) back before it looks at the next one, and
// leaves smaller ones to Flush.
func TestTakeGivesLargeBack(t *testing.T) {
	for _, c := range []struct{ slots, large int }{{64, 8}, {1024, largeSlots}, {4096, largeSlots}} {
		r, err := NewHeap(c.slots)
		if err != nil {
			t.Fatal(err)
		}
		p := &producer{r: r}
		large := pattern(c.large*SlotSize-HeaderSize, 1)
		small := pattern(10, 2)
		medium := pattern((c.large-1)*SlotSize-HeaderSize, 3)
		for _, m := range [][]byte{large, small, medium} {
			if !p.put(m) {
				t.Fatal("no room")
			}
		}
		rd := r.NewReader()
		head := r.HeadCounter()
		l := uint64(c.large)
		steps := []struct {
			want []byte
			head uint64 // published after the Take
		}{
			{large, 0},  // in use until the next Take
			{small, l},  // the large one given back first
			{medium, l}, // the small one held
			{nil, l},    // and the medium one
		}
		for i, s := range steps {
			b, err := rd.Take()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, s.want) {
				t.Fatalf("%d slots, Take %d: %d bytes, want %d", c.slots, i, len(b), len(s.want))
			}
			if got := head.Load(); got != s.head {
				t.Fatalf("%d slots, Take %d: head %d published, want %d", c.slots, i, got, s.head)
			}
		}
		for pos := uint64(0); pos < l; pos++ {
			if w := r.word(pos).Load(); w != 0 {
				t.Fatalf("%d slots: slot %d given back with header word %#x", c.slots, pos, w)
			}
		}
		if !rd.Flush() || head.Load() != p.tail {
			t.Fatalf("%d slots: head %d after Flush, tail %d", c.slots, head.Load(), p.tail)
		}
	}
}

// TestCopyOut streams descriptors of every size through a ring, the
// consumer taking each out with CopyOut (from a random offset, into a
// destination sometimes shorter), and checks the data, and that every
// slot's header word position is zero once the ring is empty again: the
// slots CopyOut zeroed and the give-back skipped are free like the others.
// It does so with each way of copying (package memcopy): timed and chosen,
// Go's copy, the string move.
func TestCopyOut(t *testing.T) {
	for _, m := range []memcopy.Mode{memcopy.Auto, memcopy.AlwaysGo, memcopy.AlwaysMovsb} {
		t.Run(fmt.Sprint("mode", m), func(t *testing.T) {
			memcopy.SetMode(m)
			t.Cleanup(func() { memcopy.SetMode(memcopy.Auto) })
			testCopyOut(t)
		})
	}
}

func testCopyOut(t *testing.T) {
	// Descriptors up to 32 KiB: past memcopy.MinSize.
	const slots = 1024
	r, _ := NewHeap(slots)
	const total = 20000
	sizes := func(seed uint64) func() int {
		rng := rand.New(rand.NewPCG(seed, 3))
		return func() int {
			if rng.IntN(2) == 0 {
				return rng.IntN(4 * SlotSize)
			}
			return rng.IntN(MaxPayload(slots) + 1)
		}
	}
	pnext := sizes(7)
	wg := produce(r, total, func(i uint64) []byte { return pattern(pnext(), byte(i)) })
	rd := r.NewReader()
	next := sizes(7)
	rng := rand.New(rand.NewPCG(9, 9))
	dst := make([]byte, MaxPayload(slots))
	zeroed := 0
	for i := 0; i < total; {
		b := takeNext(t, rd)
		want := pattern(next(), byte(i))
		if len(b) != len(want) {
			t.Fatalf("message %d: %d bytes, want %d", i, len(b), len(want))
		}
		off := 0
		if len(b) > 0 {
			off = rng.IntN(min(len(b), 100))
		}
		d := dst[:rng.IntN(len(b)-off+1)]
		if rng.IntN(2) == 0 {
			d = dst[:len(b)-off]
		}
		large := rd.lk != 0
		if n := rd.CopyOut(d, b[off:]); n != len(d) || !bytes.Equal(d, want[off:off+n]) {
			t.Fatalf("message %d (%d bytes from %d into %d): copied %d, equal %v", i, len(b), off, len(d), n, bytes.Equal(d[:n], want[off:off+n]))
		}
		if large {
			zeroed++
		}
		i++
	}
	wg.Wait()
	rd.Count()
	rd.Flush()
	if h, tl := r.HeadCounter().Load(), r.Tail(); h != tl {
		t.Fatalf("head %d after the last Flush, tail %d", h, tl)
	}
	for pos := uint64(0); pos < slots; pos++ {
		if w := r.word(pos).Load(); w != 0 {
			t.Fatalf("slot %d free with header word %#x", pos, w)
		}
	}
	if zeroed < total/10 {
		t.Fatalf("only %d of %d descriptors were large: the zeroing path was not exercised", zeroed, total)
	}
}

// TestCopyOutOnlyLarge checks that CopyOut zeroes nothing but the slots of
// the large descriptor the last Take returned: after a small one, for data
// outside the descriptor, and for a second call, it is copy.
func TestCopyOutOnlyLarge(t *testing.T) {
	r, _ := NewHeap(1024)
	p := &producer{r: r}
	large := pattern(largeSlots*SlotSize-HeaderSize, 1)
	small := pattern(200, 2)
	for _, m := range [][]byte{small, large, small} {
		if !p.put(m) {
			t.Fatal("no room")
		}
	}
	rd := r.NewReader()
	dst := make([]byte, len(large))
	b, _ := rd.Take()
	if n := rd.CopyOut(dst, b); n != len(small) || !bytes.Equal(dst[:n], small) || !bytes.Equal(b, small) {
		t.Fatalf("small descriptor: copied %d, or its data changed", n)
	}
	b, _ = rd.Take()
	heap := pattern(len(large), 5)
	if n := rd.CopyOut(dst, heap); n != len(heap) || !bytes.Equal(dst, heap) || !bytes.Equal(b, large) {
		t.Fatalf("data outside the descriptor: copied %d, or the descriptor's data changed", n)
	}
	if n := rd.CopyOut(dst, b); n != len(large) || !bytes.Equal(dst, large) {
		t.Fatalf("large descriptor: copied %d, data equal %v", n, bytes.Equal(dst, large))
	}
	start := uint64(SlotsFor(len(small)))
	for j := uint64(1); j < largeSlots; j++ {
		if w := r.word(start + j).Load(); w != 0 {
			t.Fatalf("slot %d of the large descriptor: header word position %#x after CopyOut", j, w)
		}
	}
	if w := r.word(start).Load(); w == 0 {
		t.Fatal("CopyOut zeroed the large descriptor's own header")
	}
	before := append([]byte(nil), b...)
	if n := rd.CopyOut(dst, b); n != len(b) || !bytes.Equal(dst, before) {
		t.Fatalf("second CopyOut: copied %d, equal %v", n, bytes.Equal(dst, before))
	}
	if h := r.HeadCounter().Load(); h != 0 {
		t.Fatalf("head %d before the give-back, want 0 (small descriptors wait for a Flush)", h)
	}
	if b, _ = rd.Take(); !bytes.Equal(b, small) {
		t.Fatalf("third Take: %d bytes", len(b))
	}
	if h := r.HeadCounter().Load(); h != start+largeSlots {
		t.Fatalf("head %d after the large descriptor's give-back, want %d", h, start+largeSlots)
	}
	for pos := uint64(0); pos < start+largeSlots; pos++ {
		if w := r.word(pos).Load(); w != 0 {
			t.Fatalf("slot %d given back with header word %#x", pos, w)
		}
	}
}

// TestCopyOutAhead checks how far CopyOut may prefetch past a large
// descriptor: to the end of the next descriptor once the producer sealed
// it, to its own end while the next is not written or when it ends at the
// ring's end, and never past the ring's end, whatever the next header
// word claims.
func TestCopyOutAhead(t *testing.T) {
	const slots = 1024
	large := pattern(largeSlots*SlotSize-HeaderSize, 1)
	k := uint64(largeSlots)
	take := func(t *testing.T, rd *Reader) {
		t.Helper()
		if b, err := rd.Take(); err != nil || len(b) != len(large) || !rd.CopiesOut() {
			t.Fatalf("Take: %d bytes, %v, copies out %v", len(b), err, rd.CopiesOut())
		}
	}
	// oneTaken returns a ring holding one large descriptor, its producer,
	// and a reader that took it.
	oneTaken := func(t *testing.T) (*Ring, *producer, *Reader) {
		t.Helper()
		r, _ := NewHeap(slots)
		p := &producer{r: r}
		p.put(large)
		rd := r.NewReader()
		take(t, rd)
		return r, p, rd
	}
	t.Run("next sealed", func(t *testing.T) {
		_, p, rd := oneTaken(t)
		if got, want := rd.aheadOf(HeaderSize), k*SlotSize-HeaderSize; got != want {
			t.Fatalf("next not written: %d bytes ahead, want %d", got, want)
		}
		next := pattern(3*SlotSize, 2)
		p.put(next)
		if got, want := rd.aheadOf(HeaderSize), (k+uint64(SlotsFor(len(next))))*SlotSize-HeaderSize; got != want {
			t.Fatalf("next sealed: %d bytes ahead, want %d", got, want)
		}
		if got, want := rd.aheadOf(100), (k+uint64(SlotsFor(len(next))))*SlotSize-100; got != want {
			t.Fatalf("from byte 100: %d bytes ahead, want %d", got, want)
		}
	})
	t.Run("at the ring's end", func(t *testing.T) {
		r, _ := NewHeap(slots)
		p := &producer{r: r}
		// Seven large descriptors, then one that ends at the ring's end.
		for i := 0; i < slots/largeSlots; i++ {
			if !p.put(large) {
				t.Fatal("no room")
			}
		}
		rd := r.NewReader()
		for i := 0; i < slots/largeSlots; i++ {
			take(t, rd)
		}
		// The next descriptor, at the ring's start, is not contiguous.
		if !p.put(pattern(3*SlotSize, 2)) {
			t.Fatal("no room at the ring's start")
		}
		if got, want := rd.aheadOf(HeaderSize), k*SlotSize-HeaderSize; got != want {
			t.Fatalf("last descriptor of the ring: %d bytes ahead, want %d", got, want)
		}
	})
	t.Run("next claims too much", func(t *testing.T) {
		r, _, rd := oneTaken(t)
		r.word(k).Store(header(0xffff, 0, 8))
		r.Publish(k + 1)
		if got, want := rd.aheadOf(HeaderSize), uint64(slots)*SlotSize-HeaderSize; got != want {
			t.Fatalf("a header claiming 65535 slots: %d bytes ahead, want %d (the ring's end)", got, want)
		}
	})
}

// zeroWords zeroes the n words at p, p+SlotSize, ... and nothing else, for
// every count around its unrolled loop's step.
func TestZeroWords(t *testing.T) {
	for n := 0; n <= 40; n++ {
		buf := make([]byte, (n+2)*SlotSize)
		for i := range buf {
			buf[i] = 0xff
		}
		zeroWords(unsafe.Pointer(&buf[SlotSize]), uintptr(n))
		for i, b := range buf {
			slot, at := i/SlotSize, i%SlotSize
			want := byte(0xff)
			if slot >= 1 && slot <= n && at < 8 {
				want = 0
			}
			if b != want {
				t.Fatalf("n=%d: byte %d (slot %d, offset %d) is %#x, want %#x", n, i, slot, at, b, want)
			}
		}
	}
}
