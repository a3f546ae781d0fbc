// Package waypick chooses between two ways of moving data by measuring
// both: the way that measured faster is used, the other tried now and then
// so that a change of the host's or the peer's pace is noticed.
//
// A Chooser belongs to one goroutine (it is not safe for concurrent use).
// Its users: package shm, between cross-memory attach and the pipelined
// copy for a large transfer (transport/shm/choose.go), and package amigo,
// between inline and announced for a window's mid-size messages
// (mid.go).
package waypick

import "time"

// Every is how often the way that measured slower is tried again, so that
// a change (an owner that stopped advancing, or resumed) is noticed; one in
// Early until it has been counted twice (its first counted transfer may
// still be a cold one). An explored way's rate is replaced by what it
// measured, not averaged with it: its average is that many transfers old,
// and may be a cold start's (the first counted pipelined copies of a
// bandwidth run measured under 2 GB/s, a tenth of their rate, and at one
// trial in 32 with a quarter of weight each the average took some 200
// transfers to catch up). A way that measured under two thirds of the
// other's rate is tried only one transfer in Rare: each trial costs a
// transfer at its rate, and the way in use, measured on every transfer, is
// left as soon as it slows.
const (
	Every = 32
	Early = 4
	Rare  = 128
)

// Warm is how many of each way's first transfers are not counted: the first
// pays for cold pages and caches, and measured a fraction of the way's rate.
const Warm = 1

// Chooser picks between way 0 and way 1. The zero value is ready: it tries
// way 0 first.
type Chooser struct {
	// Cadence, if set, replaces Every, Rare and Warm (a field left zero
	// keeps its constant).
	Cadence Cadence

	rate [2]float64 // bytes per second by way; 0 until measured
	fast int        // the way that measured faster (see Cadence.Margin)
	seen [2]uint8   // warm-up transfers not counted, by way, up to Warm
	cnt  [2]uint8   // counted transfers by way, up to 2
	n    uint64     // transfers recorded
}

// Cadence is how often a Chooser tries the slower way and how many of each
// way's first transfers it leaves uncounted.
type Cadence struct {
	Every, Rare uint64
	Warm        uint8
	// Margin, by way: that way becomes the faster only once it measured
	// faster than the other by more than this fraction (0: by any).
	Margin [2]float64
}

func (w *Chooser) every() (every, rare uint64) {
	every, rare = Every, Rare
	if w.Cadence.Every > 0 {
		every = w.Cadence.Every
	}
	if w.Cadence.Rare > 0 {
		rare = w.Cadence.Rare
	}
	return every, rare
}

func (w *Chooser) warm() uint8 {
	if w.Cadence.Warm > 0 {
		return w.Cadence.Warm
	}
	return Warm
}

// Rate returns the rate way last measured at, in bytes per second (0 before
// it was counted).
func (w *Chooser) Rate(way int) float64 { return w.rate[way&1] }

// Fast returns the way that measured faster, and the other.
func (w *Chooser) Fast() (fast, slow int) { return w.fast, 1 - w.fast }

// judge takes the way that measured faster: the other once its rate
// passes the faster's by more than the margin.
func (w *Chooser) judge() {
	if o := 1 - w.fast; w.rate[o] > w.rate[w.fast]*(1+w.Cadence.Margin[o]) {
		w.fast = o
	}
}

// Pick returns 0 or 1: first each until it is measured, then the faster,
// for one transfer in Every (Early until it was counted twice, Rare when it
// is far slower) the slower. The count is of transfers recorded, not of
// picks: a transfer that picks again before one is recorded gets the same
// way.
func (w *Chooser) Pick() int {
	switch {
	case w.rate[0] == 0:
		return 0
	case w.rate[1] == 0:
		return 1
	}
	fast, slow := w.Fast()
	every, rare := w.every()
	if 3*w.rate[slow] < 2*w.rate[fast] {
		every = rare
	}
	if w.n%every == every-1 || w.cnt[slow] < 2 && w.n%Early == Early-1 {
		return slow
	}
	return fast
}

// Record counts a transfer of n bytes that took d by way: the way in use
// keeps a moving average (a quarter of weight for the newest), an explored
// way takes the new rate.
func (w *Chooser) Record(way int, n uint64, d time.Duration) {
	way &= 1
	w.n++
	if d <= 0 {
		d = time.Nanosecond
	}
	r := float64(n) / d.Seconds()
	if w.seen[way] < w.warm() {
		w.seen[way]++
		return
	}
	if w.cnt[way] < 2 {
		w.cnt[way]++
	}
	if fast, _ := w.Fast(); w.rate[way] == 0 || way != fast {
		w.rate[way] = r
	} else {
		w.rate[way] += (r - w.rate[way]) / 4
	}
	w.judge()
}

// Epochs measures two ways of moving a stream of bytes by epochs: it counts
// the bytes moved, either way, in epochs of Size bytes, times each from
// the count that opened it to the one that closed it, records the rate of
// each with Pick and gives the next epoch the way Pick returns. An epoch
// is not recorded when it is the first (its start is not known), when it
// follows a change of way (it pays for the other way's tail), or when it
// took Max or longer (a program that paused: its time is not its way's).
// The clock is read once an epoch.
type Epochs struct {
	Pick  Chooser
	Size  uint64
	Max   time.Duration
	Clock func() time.Duration // nil: Since
	way   int                  // of the current epoch
	prev  int                  // of the epoch before it
	bytes uint64
	start time.Duration // of the current epoch by clock; 0 before the first
}

var base = time.Now()

// Since is the time since the process loaded the package, by the monotonic
// clock (time.Since reads no wall clock), never 0.
func Since() time.Duration { return time.Since(base) + 1 }

// Way returns the way of the current epoch.
func (e *Epochs) Way() int { return e.way }

// Prev returns the way of the epoch before it.
func (e *Epochs) Prev() int { return e.prev }

// Bytes returns the bytes counted in the current epoch.
func (e *Epochs) Bytes() uint64 { return e.bytes }

// Count adds n bytes to the epoch. It reports whether they closed it:
// then the closed epoch's way is Prev and the next one's Way.
func (e *Epochs) Count(n uint64) bool {
	e.bytes += n
	return e.bytes >= e.Size && e.next()
}

// next closes the current epoch; it returns true.
func (e *Epochs) next() bool {
	clock := e.Clock
	if clock == nil {
		clock = Since
	}
	now := clock()
	if d := now - e.start; e.start != 0 && d < e.Max && e.way == e.prev {
		e.Pick.Record(e.way, e.bytes, d)
	}
	e.bytes, e.start, e.prev = 0, now, e.way
	e.way = e.Pick.Pick()
	return true
}
