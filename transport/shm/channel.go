package shm

import (
	"sync/atomic"
	"unsafe"
)

// channel is how one peer context (the initiator) asks the owner of some
// memory to take part in a transfer: a pipelined copy, which needs the
// owner, or a cooperative copy, in which the owner may help. It lives in the
// owner's segment, one per initiating context; the initiator has at most one
// request on it at a time.
//
// Memory ordering:
//   - Request. The initiator writes every request word, then stores seq (a
//     new id) last. The owner loads seq, reads the words, and loads seq
//     again; it acts only if both loads agree. The initiator writes the
//     words of a new request only once the previous one is over on its side,
//     which for a cooperative copy means every piece either side claimed is
//     done, so the owner never acts on a mix of two requests.
//   - Response. The owner stores ack = id once it took a pipelined request.
//     status holds id<<8 | code when the owner refused or abandoned request
//     id (code != 0); a status with another id is stale.
//   - Cooperative copy. claim holds id<<16 | front<<8 | back: the pieces in
//     [front, back) are unclaimed. The initiator claims from the front, the
//     owner from the back, each by compare-and-swap, which fails once the id
//     changed, so a late owner never claims a piece of a newer request. Each
//     side thus copies the same end of a buffer that is sent again and
//     again, and keeps its lines in its cache.
//     Whoever finished a piece (its bytes written) sets its bit in done;
//     the owner also sets it in redo if it could not move the piece, which
//     the initiator then moves itself. The request is complete when done
//     has every bit; only then does the initiator reuse the channel.
//   - Atomic. The owner performs the operation on the word with the
//     processor's atomics when it takes the request, stores the old value
//     in result, then ack = id; the initiator loads ack, then result.
//   - Pipelined copy. The initiator first takes a chunk ring of the owner's
//     pool (pool.go) and names it in ring. wr and rd are monotonic byte
//     positions in that chunk ring: the side that produces copies bytes into the ring and then
//     stores wr; the side that consumes loads wr, copies bytes out, then
//     stores rd; the producer loads rd before it overwrites a chunk. At the
//     start of a request both sides set their own counter to base.
//   - Batched cooperative copy (reqBatch, batch.go). The initiator fills
//     the first piece entries of tab (plain stores) before seq, as the
//     other request words. The batch has two pieces under claim: 0, the
//     front halves of its descriptors, which the initiator claimed in the
//     request, and 1, their back halves, which tab describes. Whoever
//     claims piece 1 moves every back half in one call; the owner reads tab
//     only after its claim succeeded, and the initiator rewrites it only
//     once done has both bits, so the owner reads one batch's entries.
type channel struct {
	seq   atomic.Uint64 // request id, stored last
	mode  atomic.Uint64 // reqPipe or reqHelp, | kind<<8
	key   atomic.Uint64 // region key at the owner
	off   atomic.Uint64 // offset in the region
	n     atomic.Uint64 // bytes
	base  atomic.Uint64 // pipelined: ring position of the first byte
	piece atomic.Uint64 // cooperative: bytes per piece
	lseg  atomic.Uint64 // cooperative: initiator's alloc index + 1 holding its buffer, or 0
	loff  atomic.Uint64 // cooperative: offset of the buffer in that segment
	laddr atomic.Uint64 // cooperative: address of the buffer in the initiator
	ring  atomic.Uint64 // pipelined: the chunk ring of the owner's pool it holds
	aop   atomic.Uint64 // atomic: operation | width<<8
	arg   atomic.Uint64 // atomic: operand
	cmp   atomic.Uint64 // atomic: compared value of a compare-and-swap
	_     [16]byte

	ack    atomic.Uint64 // owner: id of the pipelined or atomic request it took
	status atomic.Uint64 // owner: id<<8 | code of a refused request
	rlen   atomic.Uint64 // owner: region length, with a bounds refusal
	result atomic.Uint64 // owner: the old value of an atomic, stored before ack
	_      [32]byte

	claim atomic.Uint64
	_     [56]byte
	done  atomic.Uint64
	_     [56]byte
	redo  atomic.Uint64
	_     [56]byte
	wr    atomic.Uint64
	_     [56]byte
	rd    atomic.Uint64
	_     [56]byte

	tab [batchMax]batchEntry // batched: the back halves of the batch
}

// batchEntry names the back half of one descriptor of a batched
// cooperative copy: bytes [off, off+n) of the owner's region key, to or
// from the initiator's address laddr. The owner checks it as any request
// (regions.AcquireFor) before it moves a byte.
type batchEntry struct {
	key, off, n, laddr uint64
}

// Request modes.
const (
	reqPipe   = 1
	reqHelp   = 2
	reqAtomic = 3
	reqBatch  = 4
)

// Status codes of a refused request.
const (
	stOK = iota
	stBadKey
	stBounds
	stClosed
	stBadRequest
	stIO
	stPerm
	stMisaligned
)

const idMask = 1<<48 - 1

// A channel fits its slot of the layout.
var _ [chanHeaderSize - unsafe.Sizeof(channel{})]byte

// claimWord packs the claim word of a cooperative copy.
func claimWord(id, front, back uint64) uint64 { return id<<16 | front<<8 | back }

// claimParts unpacks it.
func claimParts(w uint64) (id, front, back uint64) { return w >> 16, w >> 8 & 0xff, w & 0xff }
