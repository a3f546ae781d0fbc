package memcopy

import (
	"bytes"
	"testing"
)

// TestMove copies with both ways, between buffers at every alignment,
// and checks the bytes copied and that nothing around the destination
// changed.
func TestMove(t *testing.T) {
	src := make([]byte, 70000)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	for _, w := range []Way{Go, Movsb} {
		for _, n := range []int{0, 1, 7, 63, 64, 4095, 16384, 16385, 40000, 65536} {
			for _, off := range []int{0, 1, 5, 33, 64} {
				dst := make([]byte, n+off+64)
				for i := range dst {
					dst[i] = 0xee
				}
				Move(dst[off:off+n], src[off:off+n], w)
				if !bytes.Equal(dst[off:off+n], src[off:off+n]) {
					t.Fatalf("way %d, %d bytes at %d: wrong bytes", w, n, off)
				}
				for i, b := range dst {
					if (i < off || i >= off+n) && b != 0xee {
						t.Fatalf("way %d, %d bytes at %d: byte %d outside the destination changed", w, n, off, i)
					}
				}
			}
		}
	}
}

// fakeClock makes copies take cost[way] cycles a KiB, for the Chooser's
// decisions to be checked without timing anything.
type fakeClock struct {
	t    uint64
	cost [2]uint64
}

// copyN runs k copies of n bytes through c, advancing the fake clock by
// what each way costs, and counts the copies done each way.
func (f *fakeClock) copyN(c *Chooser, n, k int) (ways [2]int) {
	for range k {
		w, t0 := c.Begin(n)
		f.t += f.cost[w] * uint64(n) / 1024
		c.End(n, w, t0)
		ways[w]++
	}
	return ways
}

func withFakeClock(t *testing.T) *fakeClock {
	f := &fakeClock{t: 1}
	was, had := clock, HaveMovsb
	clock, HaveMovsb = func() uint64 { return f.t }, true
	t.Cleanup(func() { clock, HaveMovsb = was, had; SetMode(Auto) })
	SetMode(Auto)
	return f
}

// TestChooserPicksFaster checks that a class's first copies are a trial of
// both ways and that the class then uses the faster, that it stays with
// its way when the other is faster by less than a sixteenth, that it
// changes back once a later trial finds the other way faster, and that
// classes decide apart.
func TestChooserPicksFaster(t *testing.T) {
	f := withFakeClock(t)
	var c Chooser
	const small, large = 20 << 10, 48 << 10
	f.cost = [2]uint64{1000, 800}
	if ways := f.copyN(&c, small, 2*trialSamples); ways != [2]int{trialSamples, trialSamples} {
		t.Fatalf("the first %d copies went %v ways, want a trial of both", 2*trialSamples, ways)
	}
	if c.Using(small) != Movsb {
		t.Fatalf("after a trial where the string move took 0.8 of the time, the class uses way %d", c.Using(small))
	}
	if c.Using(large) != Go {
		t.Fatal("another class changed with the first's trial")
	}
	// Until the next trial every copy goes the chosen way.
	if ways := f.copyN(&c, small, trialEvery); ways != [2]int{0, trialEvery} {
		t.Fatalf("between trials: %v copies by each way, want all by the string move", ways)
	}
	// Go's copy faster by less than a sixteenth: no change.
	f.cost = [2]uint64{1000, 1050}
	f.copyN(&c, small, 2*trialSamples+trialEvery)
	if c.Using(small) != Movsb {
		t.Fatal("the class changed way for a difference of 5%")
	}
	// Go's copy clearly faster: the next trial goes back to it.
	f.cost = [2]uint64{700, 1000}
	f.copyN(&c, small, 2*trialSamples)
	if c.Using(small) != Go {
		t.Fatal("a trial where Go's copy took 0.7 of the time left the class on the string move")
	}
	// Below MinSize nothing is timed or chosen.
	if w, t0 := c.Begin(MinSize - 1); w != Go || t0 != 0 {
		t.Fatalf("a copy below MinSize: way %d, timed %v", w, t0 != 0)
	}
}

// TestChooserMiddleSamples checks that one slow sample in a trial (the
// copy that was interrupted) does not decide it.
func TestChooserMiddleSamples(t *testing.T) {
	f := withFakeClock(t)
	var c Chooser
	const n = 20 << 10
	for i := range 2 * trialSamples {
		w, t0 := c.Begin(n)
		cost := [2]uint64{1000, 900}[w]
		if i == 0 {
			cost = 100000 // the first Go sample: a copy that lost its processor
		}
		if i == 1 {
			cost = 1 // and a string move that raced ahead
		}
		f.t += cost * n / 1024
		c.End(n, w, t0)
	}
	if c.Using(n) != Movsb {
		t.Fatal("two outlying samples decided the trial")
	}
}

// TestModes checks that a fixed Mode overrides the Chooser and times
// nothing, and that the string move is never forced where it is missing.
func TestModes(t *testing.T) {
	f := withFakeClock(t)
	var c Chooser
	f.cost = [2]uint64{1000, 500}
	SetMode(AlwaysGo)
	if ways := f.copyN(&c, 20<<10, 50); ways != [2]int{50, 0} {
		t.Fatalf("AlwaysGo: %v", ways)
	}
	SetMode(AlwaysMovsb)
	if ways := f.copyN(&c, 20<<10, 50); ways != [2]int{0, 50} {
		t.Fatalf("AlwaysMovsb: %v", ways)
	}
	HaveMovsb = false
	SetMode(AlwaysMovsb)
	if ways := f.copyN(&c, 20<<10, 50); ways != [2]int{50, 0} {
		t.Fatalf("AlwaysMovsb without the string move: %v", ways)
	}
	SetMode(Auto)
	if ways := f.copyN(&c, 20<<10, 50); ways != [2]int{50, 0} {
		t.Fatalf("Auto without the string move: %v", ways)
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

// TestCopyAllocatesNothing checks that a large copy, timed or not,
// allocates nothing.
func TestCopyAllocatesNothing(t *testing.T) {
	var c Chooser
	src, dst := make([]byte, 40<<10), make([]byte, 40<<10)
	if a := testing.AllocsPerRun(100, func() { c.Copy(dst, src) }); a != 0 {
		t.Fatalf("%v allocations a copy", a)
	}
}
