package shm

import "time"

// The automatic way for Go memory (a region outside the shared segments)
// is chosen by measurement. Both cross-memory attach (one copy by the
// kernel, the owner helping with large ones) and the pipelined copy (two
// copies, each side doing one at the same time) reach any Go memory, and
// which is faster depends on the host: the page pinning of
// process_vm_readv, the size of the caches, and whether the owner advances
// often enough to keep a pipeline fed. On one 2-core machine, in one
// afternoon, the pipelined copy moved 31-37 GB/s at 1-4 MiB and cross-memory
// attach 17-20 GB/s; on an earlier day cross-memory attach had moved up to
// 45 GB/s. So each port times its large transfers by way, per owner, and
// keeps a moving average of each way's rate.

// measureMin is the smallest transfer the choice is made for and timed:
// below it the cost of a pipelined copy's handshake with the owner is not
// amortised, and cross-memory attach, which needs no one, is used (from
// 256 KiB split in halves with the owner, see helpPieceCMAMid). Windows of
// 256 KiB messages, each timed and one in exploreEvery copied by the
// pipeline, moved 21.8 GB/s against 25.1 GB/s untimed (medians of 6
// interleaved rounds, 2 ranks on a loaded 2-core machine).
const measureMin = 512 << 10

// exploreEvery is how often the way that measured slower is tried again, so
// that a change (an owner that stopped advancing, or resumed) is noticed;
// one in exploreEarly until it has been counted twice (its first counted
// transfer may still be a cold one). An explored
// way's rate is replaced by what it measured, not averaged with it: its
// average is that many transfers old, and may be a cold start's (the first
// counted pipelined copies of a bandwidth run measured under 2 GB/s, a
// tenth of their rate, and at one trial in 32 with a quarter of weight
// each the average took some 200 transfers to catch up).
// A way that measured under two thirds of the other's rate is tried only
// one transfer in exploreRare: each trial costs a transfer at its rate, and
// the way in use, measured on every transfer, is left as soon as it slows.
const (
	exploreEvery = 32
	exploreEarly = 4
	exploreRare  = 128
)

// warmTransfers is how many of each way's first transfers are not counted:
// the first pays for cold pages (the pipelined copy's chunk ring is touched
// for the first time by both processes) and caches, and measured a fraction
// of the way's rate.
const warmTransfers = 1

// wayChooser picks between cross-memory attach and the pipelined copy for
// transfers to or from one owner. It belongs to a port: owner goroutine
// only.
type wayChooser struct {
	rate [2]float64 // bytes per second of modeCMA and modePipe; 0 until measured
	seen [2]uint8   // warm-up transfers not counted, by way, up to warmTransfers
	cnt  [2]uint8   // counted transfers by way, up to 2
	n    uint64     // transfers recorded
}

func wayIndex(mode int) int {
	if mode == modePipe {
		return 1
	}
	return 0
}

// fast returns the way that measured faster, and the other.
func (w *wayChooser) fast() (fast, slow int) {
	if w.rate[1] > w.rate[0] {
		return modePipe, modeCMA
	}
	return modeCMA, modePipe
}

// pick returns modeCMA or modePipe: first each until it is measured, then
// the faster, for one transfer in exploreEvery (exploreEarly until it was
// counted twice, exploreRare when it is far slower) the slower. The count is of transfers recorded, not of picks: a transfer
// that waits for its owner's channel picks again, the same way.
func (w *wayChooser) pick() int {
	switch {
	case w.rate[0] == 0:
		return modeCMA
	case w.rate[1] == 0:
		return modePipe
	}
	fast, slow := w.fast()
	every := uint64(exploreEvery)
	if 3*w.rate[wayIndex(slow)] < 2*w.rate[wayIndex(fast)] {
		every = exploreRare
	}
	if w.n%every == every-1 || w.cnt[wayIndex(slow)] < 2 && w.n%exploreEarly == exploreEarly-1 {
		return slow
	}
	return fast
}

// record counts a transfer of n bytes that took d by mode: the way in use
// keeps a moving average (a quarter of weight for the newest), an explored
// way takes the new rate.
func (w *wayChooser) record(mode int, n uint64, d time.Duration) {
	w.n++
	if d <= 0 {
		d = time.Nanosecond
	}
	r := float64(n) / d.Seconds()
	i := wayIndex(mode)
	if w.seen[i] < warmTransfers {
		w.seen[i]++
		return
	}
	if w.cnt[i] < 2 {
		w.cnt[i]++
	}
	if fast, _ := w.fast(); w.rate[i] == 0 || mode != fast {
		w.rate[i] = r
		return
	}
	w.rate[i] += (r - w.rate[i]) / 4
}
