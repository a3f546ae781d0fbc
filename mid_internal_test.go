package amigo

import (
	"math"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/waypick"
)

// midPeer returns a peer whose mid-size range is open as on shared memory
// (8.5 to 16.5 KiB) with way, and whose clock is *now.
func midPeer(way string, now *time.Duration) *peer {
	p := &peer{inlineBusy: 16<<10 + 512, stats: new(Stats)}
	p.initMid(way, 8<<10+512)
	p.mid.Clock = func() time.Duration { return *now }
	return p
}

// epochs sends k epochs of 16 KiB messages to p, each taking what took
// says for the way p's range is in, three times as long for the first
// epoch after a change of way (the other way's tail), and counts the
// epochs by way.
func midEpochs(p *peer, now *time.Duration, k int, took func(fetch bool) time.Duration) (inline, announced int) {
	const n = 16 << 10
	for range k {
		fetch := p.midFetch
		if fetch {
			announced++
		} else {
			inline++
		}
		d := took(fetch)
		if p.mid.Way() != p.mid.Prev() {
			d *= 3
		}
		per := d / (midEpoch / n)
		for sent := 0; sent < midEpoch; sent += n {
			*now += per
			p.sentMid(n)
		}
	}
	return
}

// The way of a window's mid-size Sends follows what each way measured:
// both are tried first, then the faster is kept, the other tried now and
// then; when the two change places, so does the choice.
func TestMidWayChoice(t *testing.T) {
	now := time.Second
	p := midPeer("auto", &now)
	if p.midMin != 8<<10+512 || !p.midFetch || !p.mid.auto {
		t.Fatalf("auto: range from %d, fetch %v, measured %v", p.midMin, p.midFetch, p.mid.auto)
	}
	// 640 ns a message announced (26 GB/s), 800 ns inline (20 GB/s).
	annFaster := func(fetch bool) time.Duration {
		if fetch {
			return 640 * time.Nanosecond * (midEpoch >> 14)
		}
		return 800 * time.Nanosecond * (midEpoch >> 14)
	}
	// The first epoch is not timed from a start, and each way's first
	// timed one is a warm-up (waypick.Warm): announced three epochs, then
	// inline three (the first, after a change of way, not recorded),
	// then the faster.
	inline, announced := midEpochs(p, &now, 6, annFaster)
	if inline != 3 || announced != 3 || !p.midFetch {
		t.Fatalf("first six epochs: %d inline, %d announced; now fetch %v (rates %.3g / %.3g)", inline, announced, p.midFetch, p.mid.Pick.Rate(midInline), p.mid.Pick.Rate(midAnnounce))
	}
	inline, announced = midEpochs(p, &now, 256, annFaster)
	if inline < 4 || inline > 24 || !p.midFetch {
		t.Fatalf("announced faster: %d of 256 epochs inline (want a few trials), fetch now %v", inline, p.midFetch)
	}
	if s := p.stats; s.MidInline+s.MidAnnounced != 262 {
		t.Fatalf("stats count %d inline and %d announced epochs, want 262 in all", s.MidInline, s.MidAnnounced)
	}
	// Every trial of inline took two epochs, the first after a change of
	// way three times as long: none of those was recorded.
	want := [2]float64{16 << 10 / 800e-9, 16 << 10 / 640e-9}
	if got := [2]float64{p.mid.Pick.Rate(midInline), p.mid.Pick.Rate(midAnnounce)}; math.Abs(got[0]/want[0]-1) > 1e-9 || math.Abs(got[1]/want[1]-1) > 1e-9 {
		t.Fatalf("rates %.4g, want %.4g: an epoch after a change of way was recorded", got, want)
	}
	// The host changes state: inline moves twice as much as announced. The next trial
	// of inline turns the choice.
	inlFaster := func(fetch bool) time.Duration {
		if fetch {
			return 1600 * time.Nanosecond * (midEpoch >> 14) // 10 GB/s
		}
		return 800 * time.Nanosecond * (midEpoch >> 14) // 20 GB/s
	}
	inline, announced = midEpochs(p, &now, 256, inlFaster)
	t.Logf("inline faster: %d of 256 epochs announced", announced)
	// Announced, at half inline's rate, is still tried every
	// waypick.Every recorded epochs (midCadence), two epochs a trial.
	if announced < 12 || announced > 40 || p.midFetch {
		t.Fatalf("inline faster: %d of 256 epochs announced (want trials every %d), fetch now %v", announced, waypick.Every, p.midFetch)
	}
	// An epoch that took longer than midEpochMax (the program paused) is
	// not recorded.
	before := [2]float64{p.mid.Pick.Rate(midInline), p.mid.Pick.Rate(midAnnounce)}
	midEpochs(p, &now, 1, func(bool) time.Duration { return midEpochMax + time.Millisecond })
	if after := [2]float64{p.mid.Pick.Rate(midInline), p.mid.Pick.Rate(midAnnounce)}; after != before {
		t.Fatalf("a paused epoch was recorded: rates %.3g -> %.3g", before, after)
	}
}

// Only Sends within the range count, and only where the way is measured.
func TestMidWayRange(t *testing.T) {
	now := time.Second
	p := midPeer("auto", &now)
	for _, n := range []int{8 << 10, 8<<10 + 512, 16<<10 + 513, 32 << 10} {
		p.sentMid(n)
	}
	if p.mid.Bytes() != 0 {
		t.Fatalf("sizes outside the range counted: %d bytes", p.mid.Bytes())
	}
	p.sentMid(8<<10 + 513)
	p.sentMid(16<<10 + 512)
	if p.mid.Bytes() != 8<<10+513+16<<10+512 {
		t.Fatalf("sizes inside the range: %d bytes counted", p.mid.Bytes())
	}
	for _, c := range []struct {
		way   string
		min   int
		from  int
		fetch bool
	}{
		{"inline", 8<<10 + 512, 16<<10 + 512, false},
		{"announce", 8<<10 + 512, 8<<10 + 512, true},
		{"auto", 0, 16<<10 + 512, false},            // a link without the range
		{"auto", 16<<10 + 512, 16<<10 + 512, false}, // an empty range
	} {
		p := &peer{inlineBusy: 16<<10 + 512, stats: new(Stats)}
		p.initMid(c.way, c.min)
		p.sentMid(12 << 10)
		if p.midMin != c.from || p.midFetch != c.fetch || p.mid.auto || p.mid.Bytes() != 0 {
			t.Fatalf("%s from %d: range from %d, fetch %v, measured %v, %d bytes counted", c.way, c.min, p.midMin, p.midFetch, p.mid.auto, p.mid.Bytes())
		}
	}
	if p := (&peer{inlineBusy: math.MaxInt, midMin: math.MaxInt}); p.busyFor(1<<20, true) {
		t.Fatal("a link with no busy limit sends 1 MiB as a large message")
	}
}
