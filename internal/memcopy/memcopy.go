// Package memcopy copies a large message with whichever of two ways of
// copying is faster on this host at the moment, found by timing both now
// and then: Go's copy (memmove: 32-byte vector loads and stores) or the
// processor's string move (REP MOVSB).
//
// # Why
//
// A message of 16 to 32 KiB that travels inline is copied twice between
// two cores: the sender writes it into lines of the descriptor buffer that
// the receiver's core holds (it zeroed them when it gave the slots back),
// and the receiver reads it out of lines the sender's core holds. How much
// the lines' trips between the cores cost depends on the host, and on
// this kind of host on the minute: the virtual machines we measure on
// alternate between a state in which an atomic flag crosses between two
// processes in 0.035 us and one in which it takes 0.19. In the slow state
// the string move (which on these processors writes large copies without
// first fetching the destination's lines) moved amibench's 32 KiB windows
// 1.3-1.4 times as fast as memmove, 16 KiB 1.12 times; in the fast state
// memmove was the faster at 16 KiB (bench/MID_PATH.md). Neither way wins
// everywhere, so a Chooser measures.
//
// A Chooser keeps one decision per size class (16-32, 32-64 KiB and
// larger). With the first copy of a class, and after every trialEvery
// copies of it since, it runs a trial: the next
// 2*trialSamples copies of the class alternate the two ways, each timed,
// and the class then uses the way whose middle samples took less time per
// byte, changing only when the other is better by more than a sixteenth.
// A trial costs some trialSamples copies done the slower way in
// trialEvery, a few tenths of a percent. Copies below MinSize are Go's
// copy, untimed.
package memcopy

import "sync/atomic"

// Way is a way of copying.
type Way uint8

const (
	Go    Way = iota // Go's copy (memmove)
	Movsb            // the string move, REP MOVSB (amd64 only)
)

// MinSize is the least copy a Chooser decides for: below it, Go's copy.
const MinSize = 16 << 10

const (
	classes      = 3
	trialEvery   = 1024
	trialSamples = 6
)

// Mode says how Choosers copy: Auto (measure), or always one way.
type Mode int32

const (
	Auto Mode = iota
	AlwaysGo
	AlwaysMovsb
)

// clock reads the time copies are timed with: now, or a test's.
var clock = now

// mode is the process's Mode (SetMode). A Chooser reads it on each large
// copy; it is a setting made at start-up, so a relaxed load suffices.
var mode atomic.Int32

// SetMode sets how every Chooser of the process copies from now on.
// AlwaysMovsb on a processor without the string move's fast form (or not
// amd64) is AlwaysGo.
func SetMode(m Mode) {
	if m == AlwaysMovsb && !HaveMovsb {
		m = AlwaysGo
	}
	mode.Store(int32(m))
}

// ParseMode reads a Mode from its name: auto, go or movsb.
func ParseMode(s string) (Mode, bool) {
	switch s {
	case "auto", "":
		return Auto, true
	case "go":
		return AlwaysGo, true
	case "movsb":
		return AlwaysMovsb, true
	}
	return Auto, false
}

// A Chooser copies large messages the faster way. Its zero value is ready;
// it is used by one goroutine at a time (the owner of the ring or context
// it belongs to).
type Chooser struct {
	cls [classes]class
}

type class struct {
	n     uint32 // copies left before the next trial (0: the next copy starts one)
	use   Way    // the way in use outside trials
	trial uint8  // samples taken in the running trial; 0: none running
	t     [2 * trialSamples]uint32
}

// classOf returns the size class of a copy of n >= MinSize bytes.
func classOf(n int) int {
	switch {
	case n < 32<<10:
		return 0
	case n < 64<<10:
		return 1
	}
	return 2
}

// Begin returns the way to copy n bytes and, when this copy is timed for
// a trial, its start time (otherwise 0). The caller copies with Move, and
// then calls End with what Begin returned.
func (c *Chooser) Begin(n int) (Way, uint64) {
	if n < MinSize {
		return Go, 0
	}
	switch Mode(mode.Load()) {
	case AlwaysGo:
		return Go, 0
	case AlwaysMovsb:
		return Movsb, 0
	}
	if !HaveMovsb {
		return Go, 0
	}
	k := &c.cls[classOf(n)]
	if k.trial == 0 {
		if k.n > 0 {
			k.n--
			return k.use, 0
		}
		k.trial = 1
	}
	return Way((k.trial - 1) & 1), clock()
}

// End records the time of a copy Begin started with t0 > 0.
func (c *Chooser) End(n int, w Way, t0 uint64) {
	if t0 == 0 {
		return
	}
	d := clock() - t0
	k := &c.cls[classOf(n)]
	// Cycles per KiB, so that the sizes within a class compare.
	per := d * 1024 / uint64(n)
	if per > 1<<31 {
		per = 1 << 31
	}
	k.t[k.trial-1] = uint32(per)
	if k.trial++; int(k.trial) <= len(k.t) {
		return
	}
	g, m := middle(k.t[:], Go), middle(k.t[:], Movsb)
	switch {
	case k.use == Go && m+m/16 < g:
		k.use = Movsb
	case k.use == Movsb && g+g/16 < m:
		k.use = Go
	}
	k.trial, k.n = 0, trialEvery
}

// middle returns the sum of the two middle samples of way w (the samples
// of a trial alternate, Go first).
func middle(t []uint32, w Way) uint64 {
	var s [trialSamples]uint32
	for i := range s {
		s[i] = t[2*i+int(w)]
	}
	// Insertion sort: six values.
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return uint64(s[trialSamples/2-1]) + uint64(s[trialSamples/2])
}

// Using reports the way the class of an n-byte copy uses outside trials.
func (c *Chooser) Using(n int) Way {
	if n < MinSize {
		return Go
	}
	return c.cls[classOf(n)].use
}

// Copy copies src into dst as copy does, the faster way when it is
// large, and returns the number of bytes copied. dst and src must not
// overlap unless they are the same.
func (c *Chooser) Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < MinSize {
		return copy(dst, src)
	}
	w, t0 := c.Begin(n)
	Move(dst[:n], src[:n], w)
	c.End(n, w, t0)
	return n
}
