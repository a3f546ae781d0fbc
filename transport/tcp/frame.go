package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/amigo-hpc/amigo/transport"
)

// Frames are what a connection carries once the handshake is done. Every
// frame starts with an 8-byte header, little endian:
//
//	[0]   type
//	[1:4] u24: in a packet, packets of the reverse link delivered since its
//	      last ack (a piggybacked ack, below); in an atomic, [1] the
//	      operation and [2] the word's width; zero in other frames
//	[4:8] u32: payload length (packet) or status (replies, bye), else zero
//
// followed by the fields of its type, then its data:
//
//	packet   (initiator → target)  payload                       len bytes
//	get      (initiator → target)  key u64, off u64, n u64
//	put      (initiator → target)  key u64, off u64, n u64, data n bytes
//	get-rep  (target → initiator)  aux u64, data aux bytes if status is 0
//	put-rep  (target → initiator)  aux u64
//	atomic   (initiator → target)  key u64, off u64, operand u64, compare u64
//	atomic-rep (target → initiator) aux u64: the word's old value
//	ack      (target → initiator)  u32: packets delivered since the last ack
//	ping     (either way)
//	bye      (either way)
//
// The initiator gives a packet's descriptor back to its context (counts the
// transfer complete) only when the target acknowledged it, which the target
// does once its context took the packet from the reception ring. A send's
// done callback therefore means delivered, as on the other adapters, and an
// initiator never has more packets in flight than its descriptor buffer
// holds: a target's reception ring, twice that size, never overflows, and
// GET and PUT requests never wait behind packets.
//
// A pair of contexts that both send has one connection, which carries both
// links (see port.reusable): each side is the initiator of its own link and
// the target of the peer's, and sends and accepts the frames of both roles.
// (If both sides connected at once and the lower address's connection did
// not win, the pair keeps two connections, one per direction.) A target
// that sends a packet on its own link to the initiator carries the ack of
// that initiator's packets in the packet's header instead of an ack frame:
// a ping-pong then costs one write and one read per message, not two. The
// side that reads the packet counts it as it counts an ack frame.
//
// The target answers get and put requests in the order it received them, so
// a reply needs no identifier: it answers the oldest request not yet answered.
// aux of a successful get-rep is the byte count, which must equal the request's;
// of a refused access with status statusBounds, the region's length. The
// target performs an atomic with the processor's atomics on its own memory
// (transport.ApplyAtomic) when it reads the request, on the goroutine that
// reads the connection: its context's, or the adapter's engine.
const (
	frameBase   = 8
	frameRDMA   = frameBase + 24 // get, put
	frameRep    = frameBase + 8  // get-rep, put-rep, atomic-rep
	frameAtomic = frameBase + 32 // atomic

	// maxWireRDMA bounds the byte count of one get or put: a larger count
	// is corrupt, whatever the regions hold.
	maxWireRDMA = 1 << 40
)

// Frame types.
const (
	fPacket    uint8 = 1
	fGet       uint8 = 2
	fPut       uint8 = 3
	fGetRep    uint8 = 4
	fPutRep    uint8 = 5
	fPing      uint8 = 6
	fBye       uint8 = 7
	fAck       uint8 = 8
	fAtomic    uint8 = 9
	fAtomicRep uint8 = 10
)

// Reply status codes.
const (
	statusOK     uint32 = 0
	statusBadKey uint32 = 1
	statusBounds uint32 = 2
	statusClosed uint32 = 3
	statusPerm   uint32 = 4
	statusAlign  uint32 = 5
	statusMax           = statusAlign
)

// frame is a decoded frame header.
type frame struct {
	typ          uint8
	u32          uint32 // packet length or status
	key, off, n  uint64 // get, put, atomic (key, off)
	aop          transport.AtomicOp
	width        uint8
	arg, cmp     uint64 // atomic
	aux          uint64 // replies
	ack          uint32 // packet: piggybacked ack of the reverse link
	headerLength int
}

var errShort = errors.New("tcp: frame incomplete")

// corruptf returns an error wrapping transport.ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{transport.ErrCorrupt}, args...)...)
}

// parseFrame decodes the frame header at the start of b, as received by the
// initiator side of a link (initiator true) or by the target side. It returns
// errShort when b holds only part of the header, and an error wrapping
// transport.ErrCorrupt for anything a correct peer never sends. maxPacket is
// the largest packet payload the receiver takes. It reads nothing outside b.
func parseFrame(b []byte, initiator bool, maxPacket int) (frame, error) {
	return parseFrameFor(b, !initiator, initiator, maxPacket)
}

// parseFrameFor is parseFrame for a connection that carries the peer's
// link to the receiver (in: packets and requests may come) or the
// receiver's link to the peer (out: acks and replies may come), or both.
func parseFrameFor(b []byte, in, out bool, maxPacket int) (frame, error) {
	var f frame
	if len(b) < frameBase {
		return f, errShort
	}
	f.typ = b[0]
	f.u32 = binary.LittleEndian.Uint32(b[4:8])
	if f.typ == 0 || f.typ > fAtomicRep {
		return f, corruptf("unknown frame type %d", f.typ)
	}
	if f.typ == fPacket {
		f.ack = uint32(b[1]) | uint32(b[2])<<8 | uint32(b[3])<<16
	} else if f.typ == fAtomic {
		f.aop, f.width = transport.AtomicOp(b[1]), b[2]
		if b[3] != 0 {
			return f, corruptf("atomic header with reserved byte set")
		}
		if err := transport.CheckAtomic(f.aop, int(f.width)); err != nil {
			return f, corruptf("%v", err)
		}
	} else if b[1]|b[2]|b[3] != 0 {
		return f, corruptf("frame header with reserved bytes set")
	}
	switch f.typ {
	case fPacket, fGet, fPut, fAtomic:
		if !in {
			return f, corruptf("frame type %d sent to the initiator of a link", f.typ)
		}
	case fGetRep, fPutRep, fAtomicRep, fAck:
		if !out {
			return f, corruptf("reply frame type %d sent to the target of a link", f.typ)
		}
	case fPing, fBye:
	default:
		return f, corruptf("unknown frame type %d", f.typ)
	}
	switch f.typ {
	case fPacket:
		if int64(f.u32) > int64(maxPacket) {
			return f, corruptf("oversized packet of %d bytes (limit %d)", f.u32, maxPacket)
		}
		f.headerLength = frameBase
	case fGet, fPut:
		if f.u32 != 0 {
			return f, corruptf("RDMA request with a non-zero length field")
		}
		if len(b) < frameRDMA {
			return f, errShort
		}
		f.key = binary.LittleEndian.Uint64(b[8:])
		f.off = binary.LittleEndian.Uint64(b[16:])
		f.n = binary.LittleEndian.Uint64(b[24:])
		if f.n > maxWireRDMA {
			return f, corruptf("RDMA request of %d bytes", f.n)
		}
		f.headerLength = frameRDMA
	case fAtomic:
		if f.u32 != 0 {
			return f, corruptf("atomic request with a non-zero length field")
		}
		if len(b) < frameAtomic {
			return f, errShort
		}
		f.key = binary.LittleEndian.Uint64(b[8:])
		f.off = binary.LittleEndian.Uint64(b[16:])
		f.arg = binary.LittleEndian.Uint64(b[24:])
		f.cmp = binary.LittleEndian.Uint64(b[32:])
		f.n = uint64(f.width)
		f.headerLength = frameAtomic
	case fGetRep, fPutRep, fAtomicRep:
		if f.u32 > statusMax {
			return f, corruptf("reply with unknown status %d", f.u32)
		}
		if len(b) < frameRep {
			return f, errShort
		}
		f.aux = binary.LittleEndian.Uint64(b[8:])
		f.headerLength = frameRep
	case fAck:
		if f.u32 == 0 {
			return f, corruptf("ack of no packet")
		}
		f.headerLength = frameBase
	case fPing:
		if f.u32 != 0 {
			return f, corruptf("ping with a non-zero field")
		}
		f.headerLength = frameBase
	case fBye:
		f.headerLength = frameBase
	}
	return f, nil
}

// putBase writes a frame's 8-byte base header into b.
func putBase(b []byte, typ uint8, u32 uint32) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = typ, 0, 0, 0
	binary.LittleEndian.PutUint32(b[4:8], u32)
}

// maxPiggyback is the most packets one piggybacked ack acknowledges.
const maxPiggyback = 1<<24 - 1

// putPacket writes a packet's header into b: payload length n, and ack
// packets of the reverse link acknowledged (at most maxPiggyback).
func putPacket(b []byte, n int, ack uint64) {
	_ = b[7]
	b[0], b[1], b[2], b[3] = fPacket, byte(ack), byte(ack>>8), byte(ack>>16)
	binary.LittleEndian.PutUint32(b[4:8], uint32(n))
}

// putRDMA writes a get or put header into b (frameRDMA bytes).
func putRDMA(b []byte, typ uint8, key, off, n uint64) {
	_ = b[frameRDMA-1]
	putBase(b, typ, 0)
	binary.LittleEndian.PutUint64(b[8:], key)
	binary.LittleEndian.PutUint64(b[16:], off)
	binary.LittleEndian.PutUint64(b[24:], n)
}

// putAtomic writes an atomic request into b (frameAtomic bytes).
func putAtomic(b []byte, op *transport.RDMAOp) {
	_ = b[frameAtomic-1]
	putBase(b, fAtomic, 0)
	b[1], b[2] = byte(op.AOp), op.Width
	binary.LittleEndian.PutUint64(b[8:], uint64(op.Key))
	binary.LittleEndian.PutUint64(b[16:], op.Off)
	binary.LittleEndian.PutUint64(b[24:], op.Operand)
	binary.LittleEndian.PutUint64(b[32:], op.Compare)
}

// repFor is the reply type that answers a request of kind k.
func repFor(k transport.RDMAKind) uint8 {
	switch k {
	case transport.Get:
		return fGetRep
	case transport.Put:
		return fPutRep
	}
	return fAtomicRep
}

// putRep writes a reply header into b (frameRep bytes).
func putRep(b []byte, typ uint8, status uint32, aux uint64) {
	_ = b[frameRep-1]
	putBase(b, typ, status)
	binary.LittleEndian.PutUint64(b[8:], aux)
}

// accessStatus is the reply status for an error of Regions.Acquire, and the
// aux value that goes with it.
func accessStatus(err error) (uint32, uint64) {
	var ae *transport.AccessError
	switch {
	case errors.As(err, &ae) && errors.Is(ae.Err, transport.ErrBounds):
		return statusBounds, ae.RegionLen
	case errors.Is(err, transport.ErrPermission):
		return statusPerm, 0
	case errors.Is(err, transport.ErrMisaligned):
		return statusAlign, 0
	case errors.Is(err, transport.ErrBadKey):
		return statusBadKey, 0
	default:
		return statusClosed, 0
	}
}

// statusError is the error an initiator reports for a refused access.
func statusError(status uint32, aux uint64, op *transport.RDMAOp) error {
	ae := &transport.AccessError{Key: op.Key, Off: op.Off, Len: uint64(len(op.Local))}
	if op.Kind == transport.Atomic {
		ae.Len = uint64(op.Width)
	}
	switch status {
	case statusPerm:
		ae.Err = transport.ErrPermission
	case statusAlign:
		ae.Err = transport.ErrMisaligned
	case statusBounds:
		ae.Err, ae.RegionLen = transport.ErrBounds, aux
	case statusBadKey:
		ae.Err = transport.ErrBadKey
	default:
		ae.Err = transport.ErrClosed
	}
	return ae
}
