// Package memcopy copies the data of large inline messages into and out of
// descriptor buffers: with Go's copy (memmove: 32-byte vector loads and
// stores) below MovsbFrom bytes, and with the processor's string move
// (REP MOVSB) from MovsbFrom on, where the processor has its fast form.
// The sender (Copy) also moves strings for data of SendMovsbFrom up to
// SendMovsbBelow bytes. MoveAhead is Go's copy's loop that also asks for
// lines ahead of what it reads, for a receiver whose next message lies
// just past the one it copies out (package ring's CopyOut).
//
// # Why
//
// A message of 16 to 32 KiB that travels inline is copied twice between
// two cores: the sender writes it into lines of the descriptor buffer that
// the receiver's core holds (it zeroed them when it gave the slots back),
// and the receiver reads it out of lines the sender's core holds. At
// 32 KiB each side's buffer and its part of the descriptor buffer no
// longer fit its level-1 cache together, and Go's copy, the fastest at 16
// KiB, moved 32 KiB slower than 16 (bench/MID_PATH.md). The string move
// reverses that: amibench -b bw with each side's way set apart, on a host
// that alternates between a state in which an atomic flag crosses between
// two processes in 0.035 us and one in which it takes 0.19, moved 32 KiB
// 1.11x (fast state) and 1.43x (slow state) as fast with both sides
// moving strings, and 16 KiB 0.94x and 1.17x: a gain in both states from
// 32 KiB, a loss in the usual one at 16 KiB, so MovsbFrom is 32 KiB.
// Timing both ways on each side now and then and keeping the faster (per
// side, per size) was tried: it picked the string move at 16 KiB, where a
// window with it is slower in the fast state and, with a handler that
// leaves the data in place, in the slow state too (0.83x). Each side's own
// copy is faster with it; the other side's work after it is slower, and a
// side's own time does not see that.
//
// Below 8 KiB the sender's copy is the one that changes with the host's
// state. amibench -b bw with the sender moving strings, against Go's copy,
// runs counted in the state the floor probe read before and after them:
// in the slow state 1.45-1.7x as fast from 2 to 4 KiB (2, 2.5, 3, 3.5 and
// 4 KiB; 7-16 runs each), 1.18x at 5 KiB, but 0.87x at 1 KiB and 0.75-0.78x
// at 8 KiB (16 runs); in the fast state 0.97-1.05x at 2, 4 and 5 KiB (3
// KiB 0.87x). The 2-4 KiB ping-pong's latency: 0.81-0.96x the time in the
// fast state, 0.71-0.78x in the slow one. What loses is am_bw, whose
// handler leaves the data unread: 0.89-0.94x in the fast state, 0.82x (2
// KiB) and 0.63x (4 KiB) in the slow one. A receiver that reads what it
// is sent (MPI_Recv's copy, a handler that uses its data) is the case
// served. Hence the window from 2 KiB up to 8 KiB. What makes 8 KiB
// differ was not found (it is the least size the receiver zeroes as it
// copies, package ring's large descriptors, but 8 KiB given back a poll
// later lost as much with the string move).
package memcopy

import (
	"math"
	"sync/atomic"
)

// MovsbFrom is the least copy that Auto makes with the string move.
const MovsbFrom = 32 << 10

// SendMovsbFrom and SendMovsbBelow bound the sender's copies (Copy) that
// Auto also makes with the string move: data of 2 KiB up to 8 KiB, which
// the receiver copies out with Go's copy.
const (
	SendMovsbFrom  = 2 << 10
	SendMovsbBelow = 8 << 10
)

// AheadDist is how far ahead of its reads MoveAhead asks for lines.
const AheadDist = 4096

// Mode says how copies of inline data are made: Auto (the string move from
// MovsbFrom on), or always one way.
type Mode int32

const (
	Auto Mode = iota
	AlwaysGo
	AlwaysMovsb
)

// movsbAt is the least copy made with the string move under the
// process's Mode (SetMode): MovsbFrom (Auto with the string move's fast
// form), 1 (AlwaysMovsb), or more than any copy (AlwaysGo, or no fast
// form). A setting made at start-up, read with a relaxed load on each copy.
var movsbAt atomic.Int64

// sendAt is the least copy Copy may make with the string move:
// SendMovsbFrom (Auto), 1 (AlwaysMovsb), or more than any copy.
var sendAt atomic.Int64

func init() { SetMode(Auto) }

// SetMode sets how copies are made from now on, in the whole process.
// AlwaysMovsb where the string move has no fast form (or off amd64) is
// AlwaysGo.
func SetMode(m Mode) {
	at, send := int64(math.MaxInt64), int64(math.MaxInt64)
	switch {
	case !HaveMovsb || m == AlwaysGo:
	case m == AlwaysMovsb:
		at, send = 1, 1
	default:
		at, send = MovsbFrom, SendMovsbFrom
	}
	movsbAt.Store(at)
	sendAt.Store(send)
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

// Movsb reports whether a copy of n bytes uses the string move.
func Movsb(n int) bool { return n > 0 && int64(n) >= movsbAt.Load() }

// SendMovsb reports whether the sender's copy (Copy) of n bytes uses the
// string move: where Movsb says so, and from sendAt up to SendMovsbBelow
// (under AlwaysMovsb, Movsb already says so for every size).
func SendMovsb(n int) bool {
	return Movsb(n) || int64(n) >= sendAt.Load() && n < SendMovsbBelow
}

// Copy copies src into dst as copy does, with the string move when
// SendMovsb says so, and returns the number of bytes copied: the sender's
// copy of inline data into a descriptor buffer. dst and src must not
// overlap. A copy the string move is not for is Go's copy in place: most
// messages a sender writes are small, and Copy inlines.
func Copy(dst, src []byte) int {
	if int64(len(src)) < sendAt.Load() {
		return copy(dst, src)
	}
	return copyChosen(dst, src)
}

func copyChosen(dst, src []byte) int {
	n := min(len(dst), len(src))
	Move(dst[:n], src[:n], SendMovsb(n))
	return n
}
