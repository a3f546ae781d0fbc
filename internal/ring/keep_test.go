package ring

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/waypick"
)

// fakeHeader is a word a producer's data may hold at a slot's header word
// position: a valid header of a one-slot message of 8 bytes. A reader that
// believed it there would hand out a message no producer sent.
var fakeHeader = header(1, 0, 8)

// keepMsg returns message seq of n bytes: seq in its first 8 bytes (for n
// >= 8), a pattern after, and fakeHeader at every offset that lies at the
// header word position of a slot after the descriptor's first.
func keepMsg(seq uint64, n int) []byte {
	b := pattern(n, byte(seq))
	if n >= 8 {
		binary.LittleEndian.PutUint64(b, seq)
	}
	for off := SlotSize - HeaderSize; off+8 <= n; off += SlotSize {
		binary.LittleEndian.PutUint64(b[off:], fakeHeader)
	}
	return b
}

// keepRing returns a ring of slots slots, its reader giving slots back as
// keep says, and a producer.
func keepRing(slots int, keep Keep) (*Ring, *Reader, *producer) {
	r, _ := NewHeap(slots)
	rd := r.NewReader()
	rd.SetKeep(keep)
	return r, rd, &producer{r: r}
}

// keepSize picks a message size: one slot, a few, keepable ones (keepMin
// slots or more, large ones among them in a ring of 256) or none.
func keepSize(rng *rand.Rand) int {
	switch rng.IntN(4) {
	case 0:
		return 8 + rng.IntN(SlotSize-HeaderSize-7)
	case 1:
		return SlotSize + rng.IntN((keepMin-2)*SlotSize)
	default:
		return (keepMin-1)*SlotSize + rng.IntN(60*SlotSize)
	}
}

// A reader that leaves slots unzeroed (KeepAlways) hands out exactly the
// messages the producer sent, in order, lap after lap, though every slot
// it gave back unzeroed holds a valid-looking header word: it believes a
// word at such a position only once the producer's tail is past it. Some
// messages are copied out (CopyOut: their slots are zeroed), the others
// left; Take finds nothing once everything sent was taken.
func TestKeepNeverFooled(t *testing.T) {
	for _, keep := range []Keep{KeepAlways, KeepNever} {
		_, rd, p := keepRing(256, keep)
		rng := rand.New(rand.NewPCG(7, uint64(keep)))
		check := rand.New(rand.NewPCG(8, uint64(keep)))
		var sent, got uint64
		dst := make([]byte, MaxPayload(256))
		kept := 0
		for round := 0; round < 3000; round++ {
			for n := rng.IntN(6); n > 0; n-- {
				if !p.put(keepMsg(sent, keepSize(rng))) {
					break
				}
				sent++
			}
			for n := rng.IntN(8); n > 0; n-- {
				b, err := rd.Take()
				if err != nil {
					t.Fatalf("keep %d, round %d: %v", keep, round, err)
				}
				if b == nil {
					if got != sent {
						t.Fatalf("keep %d, round %d: nothing taken with %d of %d messages taken", keep, round, got, sent)
					}
					break
				}
				if got == sent {
					t.Fatalf("keep %d, round %d: took %d bytes (%x...) past the %d messages sent", keep, round, len(b), b[:min(8, len(b))], sent)
				}
				want := keepMsg(got, len(b))
				if SlotsFor(len(b)) >= keepMin && check.IntN(2) == 0 {
					n := rd.CopyOut(dst, b)
					b = dst[:n]
				} else if SlotsFor(len(b)) >= keepMin {
					kept++
				}
				if len(b) < 8 || binary.LittleEndian.Uint64(b) != got || !bytes.Equal(b, want) {
					t.Fatalf("keep %d, round %d: message %d of %d bytes differs", keep, round, got, len(b))
				}
				got++
			}
			rd.Count()
			if rng.IntN(3) == 0 {
				rd.Flush()
			}
		}
		if laps := sent * 40 / 256; laps < 100 || kept < 1000 {
			t.Fatalf("keep %d: %d messages (some %d laps), %d left in place: too few to test", keep, sent, laps, kept)
		}
	}
}

// Slots are given back as the mode says: a KeepAlways reader leaves the
// payload slots of a keepable message it did not copy out as they were
// and zeroes its first slot and those of a message copied out; a smaller
// message's slots are zeroed; a KeepNever reader zeroes all.
func TestKeepGivesBack(t *testing.T) {
	for _, keep := range []Keep{KeepAlways, KeepNever} {
		r, rd, p := keepRing(512, keep)
		sizes := []int{40 * SlotSize, 40 * SlotSize, 10 * SlotSize, 40 * SlotSize}
		for i, n := range sizes {
			if !p.put(keepMsg(uint64(i), n)) {
				t.Fatal("no room")
			}
		}
		dst := make([]byte, 40*SlotSize)
		for i := range sizes {
			b, err := rd.Take()
			if err != nil || b == nil {
				t.Fatalf("message %d: %v", i, err)
			}
			if i == 1 {
				rd.CopyOut(dst, b)
			}
		}
		rd.Count()
		rd.Flush()
		pos := uint64(0)
		for i, n := range sizes {
			k := uint64(SlotsFor(n))
			if w := r.word(pos).Load(); w != 0 {
				t.Fatalf("keep %d: message %d's first slot holds %#x after the give-back", keep, i, w)
			}
			left := keep == KeepAlways && k >= keepMin && i != 1
			for j := pos + 1; j < pos+k; j++ {
				w := r.word(j).Load()
				if left && w != fakeHeader || !left && w != 0 {
					t.Fatalf("keep %d: message %d (copied out %v), slot %d holds %#x after the give-back", keep, i, i == 1, j-pos, w)
				}
			}
			pos += k
		}
		if b, err := rd.Take(); b != nil || err != nil {
			t.Fatalf("keep %d: Take after the give-back: %d bytes, %v", keep, len(b), err)
		}
	}
}

// A KeepAlways reader and a producer on two goroutines: every message
// arrives whole and in order, none that was not sent (each data slot
// holds a valid-looking header word), and the race detector sees the
// tail's ordering of the producer's stores.
func TestKeepConcurrent(t *testing.T) {
	const slots = 512
	r, rd, _ := keepRing(slots, KeepAlways)
	const total = 20000
	prng := rand.New(rand.NewPCG(3, 4))
	wg := produce(r, total, func(i uint64) []byte { return keepMsg(i, keepSize(prng)) })
	rng := rand.New(rand.NewPCG(3, 4))
	for i := uint64(0); i < total; {
		b := takeNext(t, rd)
		want := keepMsg(i, keepSize(rng))
		if !bytes.Equal(b, want) {
			t.Fatalf("message %d: %d bytes, want %d", i, len(b), len(want))
		}
		i++
	}
	rd.Count()
	rd.Flush()
	wg.Wait()
}

// A KeepMeasured reader tries both ways, kept first, and keeps the one
// whose epochs took less time; zeroing takes over only once it measured
// more than zeroMargin faster; the reader turns when the ways change
// places, and its epochs, counted by way, add up. Its payload slots are
// left in the epochs it keeps and zeroed in the others.
func TestKeepMeasured(t *testing.T) {
	r, _ := NewHeap(1024)
	rd := r.NewReader()
	rd.SetKeep(KeepMeasured)
	now := time.Duration(1)
	rd.ep.Clock = func() time.Duration { return now }
	rd.ep.Size = keepEpoch / 16 // 64 messages an epoch
	p := &producer{r: r}
	const n = 64*SlotSize - HeaderSize // 64 slots
	perEpoch := (int(rd.ep.Size) + n - 1) / n
	seq := uint64(0)
	// epochs sends k epochs; a byte costs cost(kept) of the clock. It
	// returns how many epochs went each way, and checks on the way that
	// a message's slots are given back as its epoch's way says.
	epochs := func(k int, cost func(kept bool) time.Duration) (zeroed, kept int) {
		for range k {
			way := rd.keep
			if way {
				kept++
			} else {
				zeroed++
			}
			for range perEpoch {
				at := p.tail + uint64(p.r.PadFor(p.tail, SlotsFor(n)))
				if !p.put(keepMsg(seq, n)) {
					t.Fatal("no room")
				}
				seq++
				b, err := rd.Take()
				if err != nil || len(b) != n {
					t.Fatalf("took %d bytes, %v", len(b), err)
				}
				rd.Count()
				rd.Flush()
				if w := r.word(at + 1).Load(); way && w != fakeHeader || !way && w != 0 {
					t.Fatalf("an epoch kept %v: the second slot holds %#x after the give-back", way, w)
				}
				now += time.Duration(n) * cost(way)
			}
			// No message is copied out: once a kept epoch is over the
			// producer is told so, through the trials of zeroing too.
			if _, in := r.Wrap(); in != (rd.kept > 0) {
				t.Fatalf("after %d kept and %d zeroed epochs the producer reads data left in place %v", rd.kept, rd.zeroed, in)
			}
		}
		return zeroed, kept
	}
	ratio := func(zeroed float64) func(kept bool) time.Duration {
		return func(kept bool) time.Duration {
			if kept {
				return 12
			}
			return time.Duration(12 / zeroed) // 24, 10, 6
		}
	}
	// Kept first (its first epoch, and its first recorded one, not
	// counted), then zeroed.
	z, k := epochs(6, ratio(0.5))
	if z != 3 || k != 3 {
		t.Fatalf("first six epochs: %d zeroed, %d kept; want 3 and 3", z, k)
	}
	// Kept twice as fast: zeroed tried now and then.
	z, k = epochs(64, ratio(0.5))
	if z < 1 || z > 4 || k < 60 {
		t.Fatalf("with kept twice as fast: %d zeroed, %d kept", z, k)
	}
	// Zeroed a fifth faster: within the margin, kept stays, through a
	// trial of zeroed (within waypick.Rare epochs: zeroed had measured
	// half kept's rate).
	z, k = epochs(waypick.Rare+8, ratio(1.2))
	if z < 2 || z > 6 {
		t.Fatalf("with zeroed 1.2 times as fast: %d zeroed, %d kept", z, k)
	}
	// Zeroed twice as fast: it takes over at its next trial, within
	// waypick.Every epochs, and keeps the stream.
	z, _ = epochs(waypick.Every+4, ratio(2))
	if z < 2 {
		t.Fatalf("with zeroed twice as fast: %d of %d epochs zeroed", z, waypick.Every+4)
	}
	z, _ = epochs(16, ratio(2))
	if z != 16 {
		t.Fatalf("with zeroed twice as fast, after its trial: %d of 16 epochs zeroed", z)
	}
	if zs, ks := rd.KeepEpochs(); zs+ks != 6+64+waypick.Rare+8+waypick.Every+4+16 {
		t.Fatalf("epochs counted %d zeroed + %d kept, want %d", zs, ks, 6+64+waypick.Rare+8+waypick.Every+4+16)
	}
	// A smaller descriptor is not counted.
	before := rd.ep.Bytes()
	if !p.put(keepMsg(seq, (keepMin-1)*SlotSize-HeaderSize)) {
		t.Fatal("no room")
	}
	if b, _ := rd.Take(); b == nil || rd.ep.Bytes() != before {
		t.Fatalf("a descriptor of %d slots counted: %d bytes in the epoch, %d before", keepMin-1, rd.ep.Bytes(), before)
	}
}

// A reader that keeps slots asks for laps of keepWrap slots, or of
// keepLap descriptors of the last size where that is more, once an
// epoch's data was mostly left where it lay, and for the whole ring again
// once an epoch's was copied out; the producer's PadAt wraps a descriptor
// of up to wrapSlots that would end past the wrap (not one that starts a
// lap, not a larger one), and Wrap reads the whole ring for no wish or a
// wish beyond it.
func TestKeepWrap(t *testing.T) {
	r, _ := NewHeap(8192)
	if got, in := r.Wrap(); got != 8192 || in {
		t.Fatalf("a fresh ring wraps at %d, data left in place %v", got, in)
	}
	rd := r.NewReader()
	rd.SetKeep(KeepAlways)
	p := &producer{r: r}
	const n = 64*SlotSize - HeaderSize
	dst := make([]byte, 160*SlotSize)
	epoch := func(copyOut bool, n int) {
		for sent := 0; sent < keepEpoch; sent += n {
			if !p.put(keepMsg(0, n)) {
				t.Fatal("no room")
			}
			b, err := rd.Take()
			if err != nil || len(b) != n {
				t.Fatalf("took %d bytes, %v", len(b), err)
			}
			if copyOut {
				rd.CopyOut(dst, b)
			}
			rd.Count()
			rd.Flush()
		}
	}
	epoch(false, n)
	if got, in := r.Wrap(); got != keepWrap || !in {
		t.Fatalf("after an epoch left in place: wrap at %d, want %d; data left in place %v", got, keepWrap, in)
	}
	// Laps of keepLap descriptors of the last size, where that is more.
	const n129 = 129*SlotSize - HeaderSize
	epoch(false, n129)
	if got, in := r.Wrap(); got != keepLap*129 || !in {
		t.Fatalf("after an epoch of 129-slot descriptors left in place: wrap at %d, want %d; data left in place %v", got, keepLap*129, in)
	}
	epoch(true, n)
	if got, in := r.Wrap(); got != 8192 || in {
		t.Fatalf("after an epoch copied out: wrap at %d, want the ring's 8192; data left in place %v", got, in)
	}
	for _, c := range []struct {
		tail uint64
		k    int
		wrap uint64
		pad  int
		why  string
	}{
		{2000, 64, 2048, 8192 - 2000, "ends past the wrap"},
		{1984, 64, 2048, 0, "ends at the wrap"},
		{8192 * 3, 100, 50, 0, "starts a lap"},
		{2000, wrapSlots + 1, 2048, 0, "larger than wrapSlots"},
		{8150, wrapSlots + 1, 2048, 42, "larger, past the ring's end"},
		{2000, 64, 8192, 0, "no wish"},
	} {
		if got := r.PadAt(c.tail, c.k, c.wrap); got != c.pad {
			t.Fatalf("%s: pad %d, want %d", c.why, got, c.pad)
		}
	}
	for _, c := range []struct {
		w, wrap uint64
		in      bool
	}{
		{0, 8192, false}, {8192, 8192, false}, {1 << 40, 8192, false},
		{wrapInPlace, 8192, true}, {wrapInPlace | 2048, 2048, true}, {wrapInPlace | 1<<40, 8192, true},
	} {
		r.ctl.wrap.Store(c.w)
		if got, in := r.Wrap(); got != c.wrap || in != c.in {
			t.Fatalf("a wish of %#x: wrap at %d, data left in place %v; want %d, %v", c.w, got, in, c.wrap, c.in)
		}
	}
}
