package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/ring"
)

// A rank's control segment, from offset 0. Every section starts on a page
// boundary; every word that one process writes and another reads has a cache
// line to itself unless said otherwise. The numbers are byte offsets.
//
//	header                          written once by the owner before it
//	                                publishes the segment; read-only after
//	  0 magic u64, 8 version u32, 12 header size u32
//	 16 nlocal, 20 nctx, 24 ring slots, 28 mirror entries, 32 alloc entries,
//	 36 chunk bytes, 40 chunks, 44 local index, 48 rank, 52 pid   (u32 each)
//	 56 segment size u64, 64 token [16]byte, 80 chunk rings u32
//	ports[nctx] (256 bytes each)    one per context of the owner
//	  +0   bell u32      futex word: 1 while the context sleeps or is about
//	                     to; producers load it after publishing and wake
//	                     the context only then (transport.Doorbell)
//	  +64  closed u32    1 once the context's port closed
//	  +128 linkgen u64   bumped by a producer that connected a ring
//	  +192 events u64    bumped by a consumer that closed or refused a ring
//	                     this context produces into
//	engine (128 bytes)
//	  +0  bell u32       futex word of the owner's engine goroutine
//	  +64 work u32       set by an initiator that posted a request
//	mirror[entries] (64 bytes each) the owner's registered regions
//	access[nlocal*nctx] (64 each)   key a peer context is accessing; at
//	                                +8 how many of its claims of every
//	                                key (accessAll) ended (mirror.go)
//	allocs[entries] (64 bytes each) shared segments made by Alloc
//	rings[nctx][nlocal][nctx]       descriptor buffers into the owner's
//	                                contexts: a 64-byte link header, then
//	                                a ring (package ring)
//	chans[nlocal][nctx]             one per initiating peer context: its
//	                                request and answer words (512 bytes),
//	                                then the table of a batched
//	                                cooperative copy (batchMax × 32 bytes)
//	pool[chunk rings] (64 each)     who holds each chunk ring (pool.go)
//	chunk rings[chunk rings]        the rings of the pipelined copy, each
//	                                chunks × chunk bytes, held by one
//	                                transfer at a time
//
// Memory that grows with the square of the ranks on a host is only what
// every pair needs at once: a descriptor buffer into each context and a
// channel header. The chunk rings, a mebibyte each, are a pool of the
// owner's, as many as Options.ChunkRings, drawn by transfers in flight.
//
// The layout is computed from the header alone, so a peer validates the
// header and knows where everything is; nothing it computes can point
// outside the mapping.

const (
	segMagic = 0x316d6873_6f67696d // "migoshm1"
	// segVersion 4: the rings carry slots of records (ring.FlagRecords),
	// which a build speaking 3 would refuse as corrupt. 5: a record's
	// word is its packet's first 8 bytes, with the length in bits 48-63
	// (a build speaking 4 reads records by a word in front of them).
	// 6: a channel carries the table of a batched cooperative copy.
	// 7: a mirror entry's word inPlace says which key was claimed in
	// place (the owner's barrier at deregistration depends on it).
	segVersion = 7

	lineSize   = 64
	pageSize   = 4096
	headerSize = 256

	portBlockSize   = 256
	engineBlockSize = 128
	mirrorEntrySize = 64
	accessSlotSize  = 64
	allocEntrySize  = 64
	linkHeaderSize  = 64
	chanHeaderSize  = 512 + batchMax*32
	poolEntrySize   = 64

	tokenSize = 16

	// Limits a header must respect, so that a hostile one cannot make a
	// peer map or compute absurd sizes.
	maxLocal   = 1 << 12
	maxCtx     = 1 << 10
	maxMirror  = 1 << 20
	maxAllocs  = 1 << 16
	maxChunk   = 4 << 20
	maxChunks  = 64
	maxRings   = 64
	maxSegment = 1 << 40
	// MaxPieces bounds the pieces of one cooperative transfer (one bit
	// each in a word).
	maxPieces = 64
)

// params are what the header records; the layout follows from them.
type params struct {
	nlocal, nctx int
	slots        int // descriptor buffer slots
	mirror       int // mirror entries
	allocs       int // alloc table entries
	chunk        int // bytes per chunk of the pipelined copy
	chunks       int // chunks per chunk ring
	rings        int // chunk rings in the pool
	localIndex   int
	rank         int
	pid          int
	token        [tokenSize]byte
}

type layout struct {
	params
	ports      int
	engine     int
	mirrorOff  int
	accessOff  int
	allocOff   int
	ringsOff   int
	ringStride int
	chansOff   int
	chanStride int
	poolOff    int
	chunksOff  int
	size       int
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func pow2(n int) bool { return n > 0 && n&(n-1) == 0 }

// newLayout validates p and computes where each section lives.
func newLayout(p params) (layout, error) {
	switch {
	case p.nlocal < 2 || p.nlocal > maxLocal:
		return layout{}, fmt.Errorf("%d ranks on the host: want 2 to %d", p.nlocal, maxLocal)
	case p.nctx < 1 || p.nctx > maxCtx:
		return layout{}, fmt.Errorf("%d contexts: want 1 to %d", p.nctx, maxCtx)
	case !pow2(p.slots) || p.slots < 16 || p.slots > ring.MaxSlots:
		return layout{}, fmt.Errorf("%d ring slots: want a power of two in [16, %d]", p.slots, ring.MaxSlots)
	case p.mirror < 1 || p.mirror > maxMirror:
		return layout{}, fmt.Errorf("%d mirror entries: want 1 to %d", p.mirror, maxMirror)
	case p.allocs < 1 || p.allocs > maxAllocs:
		return layout{}, fmt.Errorf("%d alloc entries: want 1 to %d", p.allocs, maxAllocs)
	case !pow2(p.chunk) || p.chunk < pageSize || p.chunk > maxChunk:
		return layout{}, fmt.Errorf("chunk of %d bytes: want a power of two in [%d, %d]", p.chunk, pageSize, maxChunk)
	case !pow2(p.chunks) || p.chunks < 2 || p.chunks > maxChunks:
		return layout{}, fmt.Errorf("%d chunks: want a power of two in [2, %d]", p.chunks, maxChunks)
	case p.rings < 1 || p.rings > maxRings:
		return layout{}, fmt.Errorf("%d chunk rings: want 1 to %d", p.rings, maxRings)
	case p.localIndex < 0 || p.localIndex >= p.nlocal:
		return layout{}, fmt.Errorf("local index %d of %d", p.localIndex, p.nlocal)
	case p.rank < 0 || p.pid <= 0:
		return layout{}, fmt.Errorf("rank %d, pid %d", p.rank, p.pid)
	}
	l := layout{params: p}
	// All products below are of bounded factors; int is 64 bits here, and
	// the total is checked against maxSegment.
	off := roundUp(headerSize, pageSize)
	l.ports = off
	off = roundUp(off+p.nctx*portBlockSize, pageSize)
	l.engine = off
	off = roundUp(off+engineBlockSize, pageSize)
	l.mirrorOff = off
	off = roundUp(off+p.mirror*mirrorEntrySize, pageSize)
	l.accessOff = off
	off = roundUp(off+p.nlocal*p.nctx*accessSlotSize, pageSize)
	l.allocOff = off
	off = roundUp(off+p.allocs*allocEntrySize, pageSize)
	l.ringsOff = off
	l.ringStride = roundUp(linkHeaderSize+ring.MemSize(p.slots), lineSize)
	off = roundUp(off+p.nctx*p.nlocal*p.nctx*l.ringStride, pageSize)
	l.chansOff = off
	l.chanStride = chanHeaderSize
	off = roundUp(off+p.nlocal*p.nctx*l.chanStride, pageSize)
	l.poolOff = off
	off = roundUp(off+p.rings*poolEntrySize, pageSize)
	l.chunksOff = off
	off += p.rings * p.chunk * p.chunks
	if off > maxSegment {
		return layout{}, fmt.Errorf("segment of %d bytes: more than %d", off, maxSegment)
	}
	l.size = off
	return l, nil
}

// putHeader writes the header of a fresh segment.
func (l *layout) putHeader(mem []byte) {
	le := binary.LittleEndian
	le.PutUint64(mem[0:], segMagic)
	le.PutUint32(mem[8:], segVersion)
	le.PutUint32(mem[12:], headerSize)
	for i, v := range []int{l.nlocal, l.nctx, l.slots, l.mirror, l.allocs, l.chunk, l.chunks, l.localIndex, l.rank, l.pid} {
		le.PutUint32(mem[16+4*i:], uint32(v))
	}
	le.PutUint64(mem[56:], uint64(l.size))
	copy(mem[64:64+tokenSize], l.token[:])
	le.PutUint32(mem[80:], uint32(l.rings))
}

var errHeader = errors.New("not an amigo shared-memory segment")

// parseHeader validates the header at the start of mem, a peer's segment of
// len(mem) bytes, and returns its layout. Nothing in mem is trusted: the
// layout it returns lies within mem.
func parseHeader(mem []byte) (layout, error) {
	if len(mem) < headerSize {
		return layout{}, fmt.Errorf("%w: %d bytes", errHeader, len(mem))
	}
	le := binary.LittleEndian
	if le.Uint64(mem[0:]) != segMagic {
		return layout{}, fmt.Errorf("%w: bad magic", errHeader)
	}
	if v := le.Uint32(mem[8:]); v != segVersion {
		return layout{}, fmt.Errorf("segment version %d, this build speaks %d", v, segVersion)
	}
	if h := le.Uint32(mem[12:]); h != headerSize {
		return layout{}, fmt.Errorf("%w: header of %d bytes", errHeader, h)
	}
	var v [10]int
	for i := range v {
		v[i] = int(le.Uint32(mem[16+4*i:]))
	}
	p := params{nlocal: v[0], nctx: v[1], slots: v[2], mirror: v[3], allocs: v[4], chunk: v[5], chunks: v[6], localIndex: v[7], rank: v[8], pid: v[9]}
	p.rings = int(le.Uint32(mem[80:]))
	copy(p.token[:], mem[64:64+tokenSize])
	l, err := newLayout(p)
	if err != nil {
		return layout{}, fmt.Errorf("%w: %v", errHeader, err)
	}
	if size := le.Uint64(mem[56:]); size != uint64(l.size) || l.size > len(mem) {
		return layout{}, fmt.Errorf("%w: segment of %d bytes records %d and needs %d", errHeader, len(mem), size, l.size)
	}
	return l, nil
}

// segment is a mapped control segment, its own rank's or a peer's.
type segment struct {
	mem []byte
	l   layout
}

// word helpers: off is always 8-aligned and inside mem (the layout
// guarantees it), so the conversions are sound.
func (s *segment) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[off : off+4][0]))
}

func (s *segment) u64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off : off+8][0]))
}

func (s *segment) portBell(c int) *atomic.Uint32   { return s.u32(s.l.ports + c*portBlockSize) }
func (s *segment) portClosed(c int) *atomic.Uint32 { return s.u32(s.l.ports + c*portBlockSize + 64) }
func (s *segment) linkGen(c int) *atomic.Uint64    { return s.u64(s.l.ports + c*portBlockSize + 128) }
func (s *segment) events(c int) *atomic.Uint64     { return s.u64(s.l.ports + c*portBlockSize + 192) }
func (s *segment) engineBell() *atomic.Uint32      { return s.u32(s.l.engine) }
func (s *segment) engineWork() *atomic.Uint32      { return s.u32(s.l.engine + 64) }

// mirrorEntry returns entry i of the region mirror (see mirror.go).
func (s *segment) mirrorEntry(i int) *mirrorEntry {
	off := s.l.mirrorOff + i*mirrorEntrySize
	return (*mirrorEntry)(unsafe.Pointer(&s.mem[off : off+mirrorEntrySize][0]))
}

// access returns the access slot of peer context (li, d).
func (s *segment) access(li, d int) *atomic.Uint64 {
	return s.u64(s.l.accessOff + (li*s.l.nctx+d)*accessSlotSize)
}

// accessEnds returns the word of peer context (li, d)'s access slot that
// counts its claims of every key that ended (see waitAccess).
func (s *segment) accessEnds(li, d int) *atomic.Uint64 {
	return s.u64(s.l.accessOff + (li*s.l.nctx+d)*accessSlotSize + 8)
}

// allocEntry returns entry i of the alloc table.
func (s *segment) allocEntry(i int) *allocEntry {
	off := s.l.allocOff + i*allocEntrySize
	return (*allocEntry)(unsafe.Pointer(&s.mem[off : off+allocEntrySize][0]))
}

func (s *segment) ringBase(c, li, d int) int {
	return s.l.ringsOff + ((c*s.l.nlocal+li)*s.l.nctx+d)*s.l.ringStride
}

// linkHeader returns the header of the ring from peer context (li, d) into
// the owner's context c.
func (s *segment) linkHeader(c, li, d int) *linkHeader {
	off := s.ringBase(c, li, d)
	return (*linkHeader)(unsafe.Pointer(&s.mem[off : off+linkHeaderSize][0]))
}

// ringMem returns the memory of that ring.
func (s *segment) ringMem(c, li, d int) []byte {
	off := s.ringBase(c, li, d) + linkHeaderSize
	n := ring.MemSize(s.l.slots)
	return s.mem[off : off+n : off+n]
}

// channel returns the channel through which peer context (li, d) asks the
// owner for transfers.
func (s *segment) channel(li, d int) *channel {
	off := s.l.chansOff + (li*s.l.nctx+d)*s.l.chanStride
	ch := (*channel)(unsafe.Pointer(&s.mem[off : off+chanHeaderSize][0]))
	return ch
}

// chunkRing returns chunk ring i of the pool; 0 <= i < l.rings.
func (s *segment) chunkRing(i int) []byte {
	n := s.l.chunk * s.l.chunks
	off := s.l.chunksOff + i*n
	return s.mem[off : off+n : off+n]
}

// ringHolder returns the word that says who holds chunk ring i.
func (s *segment) ringHolder(i int) *atomic.Uint64 {
	return s.u64(s.l.poolOff + i*poolEntrySize)
}

// linkHeader sits before each ring.
//
// Memory ordering: the producer stores connected = 1 and then bumps the
// consumer context's linkgen; a consumer that loads a new linkgen rescans the
// headers and starts reading every connected ring. A consumer that closes
// stores consClosed, then bumps the producer context's events word; a
// producer that loads a new events value rescans its links. Both sides check
// the other's flag after storing their own (Dekker, with Go's sequentially
// consistent atomics), so a ring connected while its consumer closes is
// always noticed by one of them.
type linkHeader struct {
	connected  atomic.Uint32 // producer: 1 once the ring is in use
	prodClosed atomic.Uint32 // producer: 1 once its port closed
	consClosed atomic.Uint32 // consumer: closeClosed or closeCorrupt
	_          [52]byte
}

const (
	closeClosed  = 1
	closeCorrupt = 2
)

// allocEntry describes a segment made by Alloc.
//
// Memory ordering: the owner fills fd and size, then stores gen (non-zero)
// last; a peer loads gen, then fd and size, then gen again, and uses the
// entry only if both loads of gen agree and are non-zero. Entries are never
// reused while the adapter lives.
type allocEntry struct {
	gen  atomic.Uint64
	fd   atomic.Uint64
	size atomic.Uint64
	_    [40]byte
}
