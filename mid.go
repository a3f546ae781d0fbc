package amigo

import (
	"time"

	"github.com/amigo-hpc/amigo/internal/waypick"
)

// The way of a window's mid-size messages, chosen by measurement.
//
// A Send of a mid-size message (over shared memory with cross-memory
// attach, more than 8.5 KiB of header and data up to 16.5 KiB:
// transport.Link.InlineBusyMin to InlineBusyMax; up to Config.InlineMax
// while the peer leaves inline data where it lay, peer.busyFor) can go
// two ways while the peer has not taken the descriptors sent before it,
// as in a window of sends: inline, the sender copying it into the
// descriptor buffer and the receiver out of it (or leaving it in place),
// or announced, the receiver stopping it at once and fetching it together
// with the window's others (one copy, by the kernel, from the sender's
// buffer). Which moves more depends on the host, and on
// the same host on the hour: on an AMD 2-core virtual machine, windows of
// 64 x 16 KiB moved 44 GB/s inline and 27 announced while its cores passed
// a line in 0.05 us, and 19-21 inline against 21-24 announced while they
// passed one in 0.3 us, states that changed every few minutes. So each
// peer counts the bytes of such Sends, either way, in epochs of midEpoch
// bytes sent one way, times each epoch from its first Send to the first
// of the next (so that an announced window's wait for its fetches counts),
// and gives the next epoch the way that measured faster, the other tried
// now and then (waypick.Chooser: way midInline and midAnnounce). An epoch
// whose way differs from its predecessor's is not recorded, and the
// chooser, which counts recorded epochs, gives the next the same way: the
// first epoch of a way pays for the other's tail (inline messages in the
// descriptor buffer that announcements wait behind, fetches still in
// progress): recorded, trials of inline between announced epochs measured
// 12-16 GB/s in a slow quarter hour when inline alone moved 18-19. A lone
// message (the peer took what came before) goes inline either way: it is
// the one a peer waits for.
//
// The clock is read once an epoch. Every inline or announced Send pays a
// comparison with the range (on links without one, midMin is the largest
// int), and one in the range an addition.

const (
	// The chooser tries its way 0 first: announced, whose first epoch
	// pays once for what the fetches of a buffer need (its huge pages,
	// collapsed by package shm: the first announced epoch of a run moved
	// 0.5-4 GB/s), so that a program's first messages pay it rather than
	// its steady state. Tried second, it fell inside osu_bw's timed
	// windows, and moved the whole size 0.85 times as much as either way
	// alone.
	midAnnounce = 0
	midInline   = 1

	// midEpoch is the bytes of one epoch: four of osu_bw's windows of 64
	// messages of 16 KiB, some 200 us. The host's pauses of tens of
	// microseconds (some 2,000 a second on the AMD host) and its changes
	// of pace spread single epochs of 2 MiB from 6 to 30 GB/s where the
	// way moved 18-22; epochs of 4 and 8 MiB from 10 to 26 and from 14 to
	// 27.
	// A bandwidth run of 1,000 windows of 16 KiB measures each way in its
	// first 24 MiB.
	midEpoch = 4 << 20
	// midEpochMax: an epoch that took longer is not recorded (a program
	// that paused between its sends): its time is not its way's. It is
	// far above what either way takes (4 MiB in 200 ms is 20 MB/s), so
	// that a slow host, or one with more ranks than cores, is still
	// measured.
	midEpochMax = 200 * time.Millisecond
)

// midWay is a peer's measurement of its mid-size Sends, used by the
// goroutine that holds the peer's context.
type midWay struct {
	auto bool // the way is measured (Config.MidWay "auto")
	waypick.Epochs
}

// midCadence tries the slower way one epoch in waypick.Every however far
// slower it measured: single epochs spread widely (above), and a trial
// that met one of the host's pauses would otherwise keep its way out for
// waypick.Rare epochs, 512 MiB.
var midCadence = waypick.Cadence{Rare: waypick.Every}

// initMid opens the range of mid-size Sends of p, from min to inlineBusy,
// as way says: "auto" (measured), "announce" (always, in a window) or
// "inline" (closed: every one inline).
func (p *peer) initMid(way string, min int) {
	p.midMin, p.busyMax = p.inlineBusy, p.inlineBusy
	if min <= 0 || min >= p.inlineBusy || way == "inline" {
		return
	}
	p.midMin = min
	switch way {
	case "announce":
		p.midFetch = true
	case "auto":
		p.mid.auto = true
		p.midFetch = true // way 0 first
		p.mid.Pick.Cadence = midCadence
		p.mid.Size, p.mid.Max = midEpoch, midEpochMax
	}
}

// sentMid counts a Send of n bytes of header and data that p took, inline
// or announced.
func (p *peer) sentMid(n int) {
	if n > p.midMin && n <= p.busyMax && p.mid.auto {
		p.midCount(uint64(n))
	}
}

// midCount adds n bytes to the epoch and, once it holds midEpoch, records
// its rate and picks the next epoch's way.
func (p *peer) midCount(n uint64) {
	if !p.mid.Count(n) {
		return
	}
	if p.mid.Prev() == midAnnounce {
		p.stats.MidAnnounced++
	} else {
		p.stats.MidInline++
	}
	p.midFetch = p.mid.Way() == midAnnounce
}
