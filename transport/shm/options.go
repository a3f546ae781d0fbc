package shm

import (
	"fmt"
	"time"

	"github.com/amigo-hpc/amigo/internal/ring"
)

// Way is how GET and PUT descriptors move their bytes.
type Way string

// The ways of a large transfer. WayAuto picks, per descriptor: the segment if
// the region lives in one; else, when the kernel allows cross-memory attach,
// for transfers under 128 KiB cross-memory attach, and for larger ones
// whichever of cross-memory attach and the pipelined copy measured faster
// toward that owner (see wayChooser); else the pipelined copy. The others
// force one way; a transfer it cannot serve fails, which is how each is
// tested.
const (
	WayAuto = Way("auto")
	// WaySegment copies straight from or to a region that its owner
	// allocated in a shared segment (Alloc): one memcpy by the initiator,
	// no owner CPU involved.
	WaySegment = Way("segment")
	// WayCMA has the kernel copy between the initiator's buffer and the
	// owner's memory (process_vm_readv/writev): one copy, no owner CPU,
	// any Go memory; needs the same user and ptrace permission.
	WayCMA = Way("cma")
	// WayCopy pipelines the bytes through a ring of chunks in the owner's
	// segment, the owner copying on its side while the initiator copies on
	// its own: two copies in parallel; needs the owner's engine.
	WayCopy = Way("copy")
)

// Options configure the adapter of one rank. Zero values select defaults.
type Options struct {
	// Contexts is the number of contexts of every rank (default 1).
	Contexts int
	// RingSlots is the number of 64-byte slots of each descriptor buffer
	// (default 0: chosen by the number of ranks on the host, RingSlotsFor).
	RingSlots int
	// MinRingSlots is the fewest slots RingSlotsFor chooses (default
	// 1024).
	MinRingSlots int
	// RDMASlots is the number of descriptors of each RDMA FIFO (default 256).
	RDMASlots int
	// Way forces how GET and PUT move bytes (default WayAuto).
	Way Way
	// CMA is "auto" (probe cross-memory attach at start and use it where
	// the kernel allows) or "off" (default "auto").
	CMA string
	// Help lets an owner that is advancing copy part of a large segment or
	// CMA transfer, or of a batch of smaller CMA transfers (coop.go), on
	// its side while the initiator copies the rest, both cores at once
	// (default true; HelpOff disables it).
	HelpOff bool
	// HelpMin is the smallest transfer split with the owner (default
	// 128 KiB).
	HelpMin int
	// HugeOff stops the adapter from asking the kernel to back Go memory
	// that large cross-memory attach transfers touch with huge pages
	// (huge.go; default: it asks).
	HugeOff bool
	// Keep is how each descriptor buffer's reader gives back the slots of
	// a descriptor of 2 KiB or more whose data was not copied out
	// (ring.Reader.SetKeep): "auto" (default) as measured faster, "on"
	// unzeroed, "off" zeroed.
	Keep string
	// Chunk and Chunks size a ring of the pipelined copy: Chunks chunks of
	// Chunk bytes (defaults 64 KiB and 16).
	Chunk, Chunks int
	// ChunkRings is how many such rings a rank's segment holds for the
	// pipelined copies of its memory in flight at once, a pool shared by
	// every peer context (default 2; pool.go). A pipelined copy that finds
	// them all in use moves by cross-memory attach, or waits without it.
	ChunkRings int
	// Mirror is the number of regions whose keys peers resolve without the
	// owner (default 16384); regions registered beyond it move by the
	// pipelined copy.
	Mirror int
	// Allocs bounds the number of Alloc calls (default 4096).
	Allocs int
	// Piece is the most bytes one Progress call moves for one transfer, so
	// that a large transfer does not hold up message polling (default
	// 256 KiB).
	Piece int
}

// Defaults.
const (
	DefaultRingSlots = 1024
	DefaultRDMASlots = 256
	DefaultHelpMin   = 128 << 10
	DefaultChunk     = 64 << 10
	DefaultChunks    = 16
	DefaultRings     = 2
	DefaultMirror    = 16384
	DefaultAllocs    = 4096
	DefaultPiece     = 256 << 10
)

// ringBudget is the most memory the descriptor buffers into one rank's
// contexts take when RingSlotsFor chooses their size, and maxAutoSlots the
// largest size it chooses.
//
// # Why
//
// A window of 8 or 16 KiB messages fills a buffer of 1024 slots (64 KiB)
// with seven or three of them, and the sender waits for the receiver to
// give slots back before it can write the next: amibench -b bw (two
// ranks, two cores, medians of 4 interleaved rounds) moved 16 KiB 1.21x
// and 8 KiB 1.11x as fast with 2048 slots, and 16 KiB 1.29x with 4096
// (4 KiB 1.06-1.08x, 8-byte message rate 1.06x). But a rank holds a
// buffer for every context of every other rank of its host, so a fixed
// size grows the segment with the ranks: 2 MiB bounds the buffers, 4096
// slots up to 8 ranks on a host (one context each), 2048 at 16, 1024 from
// 32 on, as before. Up to 4 ranks they take 8192 slots (512 KiB): against
// 4096, 16 KiB moved 1.17x, 0.96x, 1.16x and 1.40x as fast in four series
// of 5-8 interleaved rounds (OSU's counts), 32 KiB inline 1.01-1.19x, 4
// and 8 KiB 0.97-1.07x.
const (
	ringBudget   = 2 << 20
	maxAutoSlots = 8192
)

// RingSlotsFor returns the slots of each descriptor buffer of a host of
// nlocal ranks with nctx contexts each when the options leave it to the
// adapter: the largest power of two up to 8192 whose buffers into one
// rank (nlocal × nctx × nctx of them, their slots counted) take at most
// 2 MiB, and at least least.
func RingSlotsFor(nlocal, nctx, least int) int {
	n := maxAutoSlots
	for n > least && nlocal*nctx*nctx*n*ring.SlotSize > ringBudget {
		n /= 2
	}
	return max(n, least)
}

// slots returns the slots of each descriptor buffer of a host of nlocal
// ranks.
func (o Options) slots(nlocal int) int {
	if o.RingSlots != 0 {
		return o.RingSlots
	}
	return RingSlotsFor(nlocal, o.Contexts, o.MinRingSlots)
}

// escalateAfter is how long an initiator waits for the owner's contexts to
// take a pipelined copy request before it wakes the owner's engine, on a
// host with a processor to spare; escalateFull where every processor runs
// a rank of the host. There the engine runs only by taking a processor
// from a rank, often the owner itself, busy a little longer (copying its
// own block of an all-to-all, say): three threads on two processors. On a
// 2-core host, 2-rank all-to-all of 1 MiB took 136 us with escalateFull
// against 167 with escalateAfter (medians of six), allgather of 1 MiB 160
// against 196, allreduce of 8 MiB 1562 against 1670 (five).
const (
	escalateAfter = 20 * time.Microsecond
	escalateFull  = time.Millisecond
)

// keep returns how readers give back the slots of data not copied out.
func (o Options) keep() ring.Keep {
	switch o.Keep {
	case "on":
		return ring.KeepAlways
	case "off":
		return ring.KeepNever
	}
	return ring.KeepMeasured
}

// Validate returns o with its defaults applied, or the reason it is not
// usable.
func (o Options) Validate() (Options, error) {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Contexts, 1)
	def(&o.MinRingSlots, DefaultRingSlots)
	def(&o.RDMASlots, DefaultRDMASlots)
	def(&o.HelpMin, DefaultHelpMin)
	def(&o.Chunk, DefaultChunk)
	def(&o.Chunks, DefaultChunks)
	def(&o.ChunkRings, DefaultRings)
	def(&o.Mirror, DefaultMirror)
	def(&o.Allocs, DefaultAllocs)
	def(&o.Piece, DefaultPiece)
	if o.Way == "" {
		o.Way = WayAuto
	}
	if o.CMA == "" {
		o.CMA = "auto"
	}
	if o.Keep == "" {
		o.Keep = "auto"
	}
	switch {
	case o.Keep != "auto" && o.Keep != "on" && o.Keep != "off":
		return o, fmt.Errorf("shm: keep %q: want auto, on or off", o.Keep)
	case o.Way != WayAuto && o.Way != WaySegment && o.Way != WayCMA && o.Way != WayCopy:
		return o, fmt.Errorf("shm: way %q: want auto, segment, cma or copy", o.Way)
	case o.CMA != "auto" && o.CMA != "off":
		return o, fmt.Errorf("shm: CMA %q: want auto or off", o.CMA)
	case o.Way == WayCMA && o.CMA == "off":
		return o, fmt.Errorf("shm: way cma with CMA off")
	case !pow2(o.RDMASlots) || o.RDMASlots > 1<<16:
		return o, fmt.Errorf("shm: %d RDMA slots: want a power of two up to 65536", o.RDMASlots)
	case o.HelpMin < 0 || o.Piece < pageSize:
		return o, fmt.Errorf("shm: help minimum %d, piece %d: want at least 0 and %d", o.HelpMin, o.Piece, pageSize)
	}
	if !pow2(o.MinRingSlots) || o.MinRingSlots > ring.MaxSlots {
		return o, fmt.Errorf("shm: at least %d ring slots: want a power of two up to %d", o.MinRingSlots, ring.MaxSlots)
	}
	// The segment's limits, for a host of two ranks.
	_, err := newLayout(params{nlocal: 2, nctx: o.Contexts, slots: o.slots(2), mirror: o.Mirror, allocs: o.Allocs, chunk: o.Chunk, chunks: o.Chunks, rings: o.ChunkRings, pid: 1})
	if err != nil {
		return o, fmt.Errorf("shm: %w", err)
	}
	return o, nil
}
