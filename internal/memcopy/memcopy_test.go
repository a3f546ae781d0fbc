package memcopy

import (
	"bytes"
	"fmt"
	"testing"
)

// checkMove copies n bytes at offset off of src with mv into a
// destination at the same offset, and checks the bytes copied and that
// nothing around the destination changed.
func checkMove(t *testing.T, what string, src []byte, n, off int, mv func(dst, src []byte)) {
	t.Helper()
	dst := make([]byte, n+off+64)
	for i := range dst {
		dst[i] = 0xee
	}
	mv(dst[off:off+n], src[off:off+n])
	if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
		t.Fatalf("%s, %d bytes at %d: wrong bytes", what, n, off)
	}
	for i, b := range dst {
		if (i < off || i >= off+n) && b != 0xee {
			t.Fatalf("%s, %d bytes at %d: byte %d outside the destination changed", what, n, off, i)
		}
	}
}

// TestMove copies with and without the string move, between buffers at
// every alignment (checkMove).
func TestMove(t *testing.T) {
	src := make([]byte, 70000)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	for _, w := range []bool{false, true} {
		for _, n := range []int{0, 1, 7, 63, 64, 4095, 16384, 16385, 40000, 65536} {
			for _, off := range []int{0, 1, 5, 33, 64} {
				checkMove(t, fmt.Sprintf("string move %v", w), src, n, off, func(d, s []byte) { Move(d, s, w) })
			}
		}
	}
}

// TestModes checks which copies use the string move in each Mode, and
// that it is never used where it has no fast form.
func TestModes(t *testing.T) {
	had := HaveMovsb
	t.Cleanup(func() { HaveMovsb = had; SetMode(Auto) })
	for _, c := range []struct {
		have bool
		mode Mode
		n    int
		want bool
	}{
		{true, Auto, 8 << 10, false},
		{true, Auto, 16 << 10, false},
		{true, Auto, MovsbFrom - 1, false},
		{true, Auto, MovsbFrom, true},
		{true, Auto, 1 << 20, true},
		{false, Auto, MovsbFrom, false},
		{true, AlwaysGo, MovsbFrom, false},
		{true, AlwaysMovsb, 100, true},
		{true, AlwaysMovsb, 0, false},
		{false, AlwaysMovsb, 100, false},
	} {
		HaveMovsb = c.have
		SetMode(c.mode)
		if got := Movsb(c.n); got != c.want {
			t.Errorf("fast string move %v, mode %d, %d bytes: string move %v, want %v", c.have, c.mode, c.n, got, c.want)
		}
	}
	for _, c := range []struct {
		have bool
		mode Mode
		n    int
		want bool
	}{
		{true, Auto, 64, false},
		{true, Auto, SendMovsbFrom - 1, false},
		{true, Auto, SendMovsbFrom, true},
		{true, Auto, 4 << 10, true},
		{true, Auto, SendMovsbBelow - 1, true},
		{true, Auto, SendMovsbBelow, false},
		{true, Auto, 16 << 10, false},
		{true, Auto, MovsbFrom, true},
		{false, Auto, 4 << 10, false},
		{true, AlwaysGo, 4 << 10, false},
		{true, AlwaysGo, MovsbFrom, false},
		{true, AlwaysMovsb, 100, true},
		{true, AlwaysMovsb, 16 << 10, true},
		{true, AlwaysMovsb, 0, false},
	} {
		HaveMovsb = c.have
		SetMode(c.mode)
		if got := SendMovsb(c.n); got != c.want {
			t.Errorf("fast string move %v, mode %d, the sender's %d bytes: string move %v, want %v", c.have, c.mode, c.n, got, c.want)
		}
	}
	for _, s := range []string{"auto", "go", "movsb"} {
		if _, ok := ParseMode(s); !ok {
			t.Fatalf("ParseMode(%q) refused", s)
		}
	}
	if _, ok := ParseMode("fast"); ok {
		t.Fatal("ParseMode accepted an unknown mode")
	}
}

// TestCopy checks Copy's bytes and count in each mode, for sizes around
// MovsbFrom and destinations shorter and longer than the source.
func TestCopy(t *testing.T) {
	t.Cleanup(func() { SetMode(Auto) })
	src := make([]byte, 2*MovsbFrom)
	for i := range src {
		src[i] = byte(i*13 + i>>8)
	}
	for _, m := range []Mode{Auto, AlwaysGo, AlwaysMovsb} {
		SetMode(m)
		for _, c := range []struct{ d, s int }{{MovsbFrom, MovsbFrom}, {MovsbFrom + 3, MovsbFrom + 3}, {MovsbFrom - 1, MovsbFrom - 1}, {40000, MovsbFrom + 100}, {MovsbFrom + 100, 40000}, {10, 5},
			{SendMovsbFrom, SendMovsbFrom}, {SendMovsbFrom + 5, SendMovsbFrom + 5}, {SendMovsbBelow - 1, SendMovsbBelow - 1}, {3000, 5000}, {5000, 3000}} {
			dst := make([]byte, c.d)
			n := Copy(dst, src[:c.s])
			if want := min(c.d, c.s); n != want || !bytes.Equal(dst[:n], src[:n]) {
				t.Fatalf("mode %d, %d bytes into %d: copied %d, equal %v", m, c.s, c.d, n, bytes.Equal(dst[:n], src[:n]))
			}
		}
	}
}

// TestCopyAllocatesNothing checks that a large copy allocates nothing.
func TestCopyAllocatesNothing(t *testing.T) {
	src, dst := make([]byte, 40<<10), make([]byte, 40<<10)
	if a := testing.AllocsPerRun(100, func() { Copy(dst, src) }); a != 0 {
		t.Fatalf("%v allocations a copy", a)
	}
}

// TestMoveAhead copies with MoveAhead at sizes around its 128-byte step,
// at every alignment, with prefetching bounds before, inside and past the
// copy (checkMove).
func TestMoveAhead(t *testing.T) {
	src := make([]byte, 70000+2*AheadDist)
	for i := range src {
		src[i] = byte(i*13 + i>>8)
	}
	for _, n := range []int{0, 1, 127, 128, 129, 4095, 8192, 8300, 16384, 16417, 40000} {
		for _, ahead := range []int{0, n / 2, n, n + AheadDist, n + 2*AheadDist} {
			for _, off := range []int{0, 1, 5, 33, 64} {
				checkMove(t, fmt.Sprintf("ahead %d", ahead), src, n, off, func(d, s []byte) { MoveAhead(d, s, ahead) })
			}
		}
	}
	// A shorter destination takes what fits.
	dst := make([]byte, 5000)
	MoveAhead(dst, src[:9000], 9000+AheadDist)
	if !bytes.Equal(dst, src[:5000]) {
		t.Fatal("shorter destination: wrong bytes")
	}
}

func TestMoveAheadAllocatesNothing(t *testing.T) {
	src := make([]byte, 16<<10)
	dst := make([]byte, len(src))
	if a := testing.AllocsPerRun(100, func() { MoveAhead(dst, src, 2*len(src)) }); a != 0 {
		t.Fatalf("%v allocations a copy", a)
	}
}
