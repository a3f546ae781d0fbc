package shm

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Huge pages under cross-memory attach.
//
// process_vm_readv and process_vm_writev pin the other process's pages for
// the time of the copy and copy one page at a time. Go's heap is backed by
// 4 KiB pages unless the host's transparent huge pages are "always" (Debian
// and Ubuntu default to "madvise", and Go does not ask for them), and there
// pinning costs more than copying: on a 2-core machine, process_vm_readv of
// 1-4 MiB from another process's small pages moved 15 GB/s, from a huge page
// 44-60 GB/s. So before the adapter moves a large transfer by cross-memory
// attach, it asks the kernel to back the 2 MiB blocks under the memory
// involved with huge pages (MADV_COLLAPSE, Linux 6.1 and later): the owner
// for a region it registers, the initiator for its own buffer (which the
// owner's help reaches by cross-memory attach too). A collapse copies the
// block into a huge page in place: same addresses, same contents, done by
// the same kernel code that collapses pages of any process in the
// background; the kernel honours it whatever the host's huge page mode
// ("never" included). It is made once per block; it may populate the rest
// of that block (up to 2 MiB per block, never more than hugeTableSize
// blocks). The initiator asks only for a block its buffer covers at least
// hugeMinOverlap of, unless the owner writes into it: for a transfer the
// owner helps with (asked before the owner is), and for the parts of a
// batched cooperative copy the owner moves (coop.go), every block the
// buffer covers a page of (the owner's process_vm_writev pins those
// pages as a peer's reads pin the owner's). The owner asks for every block under a region it
// registers (hugeRegionOverlap): the pages a peer pins are the owner's, and
// a window of mid-size messages, each registered by its sender and fetched
// by its receiver, pins them once per message (see hugeRegionOverlap). Where
// the kernel refuses (before Linux 6.1, or with no huge page free), nothing
// changes but the speed. Options.HugeOff (AMIGO_SHM_HUGE=off)
// disables it.

const (
	hugeSize = 2 << 20
	// hugeMinOverlap is the least of a block that memory must cover for
	// the block to be collapsed: a 1 MiB buffer covers at least half of
	// one of the blocks it lies across.
	hugeMinOverlap = 256 << 10
	// hugeRegionOverlap is hugeMinOverlap for a region smaller than
	// hugeMinOverlap that the owner registers: a page (regionOverlap).
	// process_vm_readv pins the owner's pages of each
	// piece it reads, page by page on small pages and at once on a huge
	// one, and the receiver of a window of messages of 16 to 128 KiB
	// fetches each by one such piece: with the blocks under the
	// senders' regions collapsed, osu_bw's windows of 16 to 256 KiB moved
	// 1.3 to 2.2 times more than with a 256 KiB least (2 ranks on a
	// loaded 2-core machine, medians of 7 interleaved runs), 1 and 4 MiB
	// as much. A larger region keeps hugeMinOverlap: with a page for
	// those too, windows of 512 KiB (each fetched alone, helped by the
	// owner) moved a quarter less. The memory it may add is bounded by
	// the blocks holding registered memory: what a host whose huge pages
	// are "always" spends on all memory.
	hugeRegionOverlap = pageSize
	// hugeTableSize bounds the blocks collapsed in a process.
	hugeTableSize = 4096
	hugeProbes    = 16
	madvCollapse  = 25 // MADV_COLLAPSE
)

// hugeBlocks holds the blocks this process asked to collapse, by address,
// in open addressing. A block's address has hugeStateBits low zero bits;
// its slot holds the address with the block's state in them: hugeBusy
// while one goroutine asks the kernel, hugeOver once the kernel collapsed
// it or refused for good, else the number of failed tries. A slot goes from 0 to a block by
// CompareAndSwap and then holds that block for good; each change of state is
// a CompareAndSwap (or, from busy, a store by the goroutine that made it
// busy), so one goroutine at a time asks for a block. The kernel fails a
// collapse for the moment (EAGAIN) when pages of the block are pinned, as
// while a peer's cross-memory attach reads them: a block is tried again on a
// later transfer, up to hugeTries times. No other memory is published
// through the table.
var hugeBlocks [hugeTableSize]atomic.Uintptr

const (
	hugeStateBits = 8
	hugeStateMask = 1<<hugeStateBits - 1
	hugeBusy      = 1 << 7
	hugeOver      = 1 << 6
	hugeTries     = 4
)

// hugeLast is the block claimHuge last found settled for good (collapsed,
// or refused for good or too often): a hint, so that the transfers of a
// window, whose buffers lie in one block, skip the table after the first.
// A block's state never leaves settled, so the skip is what claimHuge
// would answer.
var hugeLast atomic.Uintptr

// claimHuge reports whether the caller is to ask for block b (a non-zero
// multiple of hugeSize) now, and if so the slot to report the outcome to
// (finishHuge). A block that finds its probe sequence full is never asked
// for.
func claimHuge(b uintptr) (*atomic.Uintptr, bool) {
	h := uint64(b/hugeSize) * 0x9e3779b97f4a7c15 >> 52 // 12 bits
	for i := uint64(0); i < hugeProbes; i++ {
		s := &hugeBlocks[(h+i)%hugeTableSize]
		v := s.Load()
		if v == 0 {
			if s.CompareAndSwap(0, b|hugeBusy) {
				return s, true
			}
			v = s.Load()
		}
		if v&^hugeStateMask != b {
			continue
		}
		if v&hugeOver != 0 || v&hugeBusy == 0 && v&hugeStateMask >= hugeTries {
			hugeLast.Store(b) // settled for good
			return nil, false
		}
		if v&hugeBusy != 0 {
			return nil, false
		}
		return s, s.CompareAndSwap(v, v|hugeBusy)
	}
	return nil, false
}

// finishHuge records the outcome of the ask claimHuge allowed: over (the
// block collapsed, or the kernel refused for good), or one more failed try.
func finishHuge(s *atomic.Uintptr, over bool) {
	v := s.Load() &^ hugeBusy
	if over {
		v = v&^hugeStateMask | hugeOver
	} else {
		v++
	}
	s.Store(v)
}

// regionOverlap is the least of a block that a registered region of n
// bytes must cover for the owner to ask for a huge page under it.
func regionOverlap(n int) int {
	if n < hugeMinOverlap {
		return hugeRegionOverlap
	}
	return hugeMinOverlap
}

// hugeBlocksOf calls f for each 2 MiB block that mem covers at least
// least bytes of.
func hugeBlocksOf(mem []byte, least int, f func(b uintptr)) {
	if len(mem) < least {
		return
	}
	hugeBlocksOfRange(uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)), uintptr(least), f)
}

// hugeBlocksOfRange is hugeBlocksOf for the n bytes at address a. Block 0
// is never named.
func hugeBlocksOfRange(a, n, least uintptr, f func(b uintptr)) {
	e := a + n
	for b := a &^ (hugeSize - 1); b < e; b += hugeSize {
		if b != 0 && min(e, b+hugeSize)-max(a, b) >= least {
			f(b)
		}
	}
}

// collapseHuge asks for the blocks that mem covers at least least bytes of
// to be backed by huge pages, each the first time it is seen; it returns
// how many blocks it asked for and how many the kernel collapsed.
func collapseHuge(mem []byte, least int) (asked, collapsed int) {
	if n := len(mem); n > 0 {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
		if b := a &^ (hugeSize - 1); (a+uintptr(n)-1)&^(hugeSize-1) == b && hugeLast.Load() == b {
			return 0, 0
		}
	}
	hugeBlocksOf(mem, least, func(b uintptr) {
		slot, ok := claimHuge(b)
		if !ok {
			return
		}
		asked++
		// The block's address goes to the kernel as a number: it may
		// extend past mem, over memory Go holds for other objects, which
		// the collapse leaves as it was but for the page size.
		errno := collapseBlock(b)
		if errno == 0 {
			collapsed++
		}
		// Only a refusal for the moment is worth another try.
		finishHuge(slot, errno == 0 || errno != unix.EAGAIN && errno != unix.EBUSY)
	})
	return asked, collapsed
}

// collapseBlock asks the kernel to back the block at b with a huge page
// (MADV_COLLAPSE). A variable, so that a test of the bookkeeping around it
// can answer for the kernel, whose answer under load (EAGAIN) is not the
// test's to choose.
var collapseBlock = func(b uintptr) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, b, hugeSize, madvCollapse)
	return errno
}

// prepareHuge collapses the blocks that mem covers at least least bytes
// of, unless the adapter's options say not to.
func (a *Adapter) prepareHuge(mem []byte, least int) {
	if a.opts.HugeOff || len(mem) < least {
		return
	}
	asked, collapsed := collapseHuge(mem, least)
	if asked > 0 {
		a.stats.hugeAsked.Add(uint64(asked))
		a.stats.hugeCollapsed.Add(uint64(collapsed))
	}
}

// peerCMA reports whether peers may reach this rank's registered memory by
// cross-memory attach, as far as the options tell: whether collapsing a
// registered region can pay.
func (a *Adapter) peerCMA() bool {
	return a.opts.CMA != "off" && (a.opts.Way == WayAuto || a.opts.Way == WayCMA)
}

// ProbeHuge reports whether the kernel backs Go memory with a huge page
// when asked (MADV_COLLAPSE on a 2 MiB block of a fresh buffer); nil means
// it does, and AMIGO_SHM_HUGE can pay here.
func ProbeHuge() error {
	buf := make([]byte, 2*hugeSize)
	a := uintptr(unsafe.Pointer(&buf[0]))
	b := (a + hugeSize - 1) &^ (hugeSize - 1)
	for i := b - a; i < b-a+hugeSize; i += pageSize {
		buf[i] = 1
	}
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, b, hugeSize, madvCollapse)
	runtime.KeepAlive(buf)
	if errno != 0 {
		return fmt.Errorf("madvise(MADV_COLLAPSE): %w", errno)
	}
	return nil
}
