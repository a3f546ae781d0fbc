package shm

import (
	"time"

	"github.com/amigo-hpc/amigo/internal/waypick"
)

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
// 256 KiB messages, each timed and one in waypick.Every copied by the
// pipeline, moved 21.8 GB/s against 25.1 GB/s untimed (medians of 6
// interleaved rounds, 2 ranks on a loaded 2-core machine).
const measureMin = 512 << 10

// wayChooser picks between cross-memory attach and the pipelined copy for
// transfers to or from one owner, by the rates each way measured
// (waypick.Chooser: way 0 is cross-memory attach, 1 the pipelined copy).
// It belongs to a port: owner goroutine only.
type wayChooser struct{ waypick.Chooser }

func wayIndex(mode int) int {
	if mode == modePipe {
		return 1
	}
	return 0
}

// pick returns modeCMA or modePipe (waypick.Chooser.Pick).
func (w *wayChooser) pick() int {
	if w.Pick() == 1 {
		return modePipe
	}
	return modeCMA
}

// record counts a transfer of n bytes that took d by mode
// (waypick.Chooser.Record).
func (w *wayChooser) record(mode int, n uint64, d time.Duration) {
	w.Record(wayIndex(mode), n, d)
}
