//go:build ofi

package ofi

import (
	"encoding/binary"
	"errors"
)

// Every message between endpoints starts with a 16-byte header, little
// endian:
//
//	byte  0     kind
//	byte  1     status (answers)
//	bytes 2-3   the sender's context
//	bytes 4-7   the sender's rank
//	bytes 8-15  arg: a packet's nothing, an ack's count of packets taken,
//	            a request's key or RDMA position
//
// A packet's payload follows its header; the bodies of the control
// messages are laid out by their encoders below. The sender is named in
// the header because a reliable-datagram endpoint does not say (FI_SOURCE
// is optional).
const hdrSize = 16

// Message kinds.
const (
	kindPacket  = 1 // an active-message packet of a link
	kindAck     = 2 // arg: packets of the link the target took so far
	kindKeyReq  = 3 // arg: a key whose region the initiator asks about
	kindKeyRep  = 4 // arg: the key; body: base, length, provider key, perm
	kindAtomReq = 5 // arg: RDMA position; body: key, off, operand, compare, op, width
	kindAtomRep = 6 // arg: RDMA position; body: old value
	kindBye     = 7 // the sender's context closed
	kindAlive   = 8 // the sender lives, though its context does not poll
)

// Answer statuses.
const (
	stOK = iota
	stBadKey
	stBounds
	stPerm
	stMisaligned
	stBadAtomic
	stClosed
)

// ctrlMax is the largest control message.
const ctrlMax = 64

type header struct {
	kind, status uint8
	ctx          uint16
	rank         uint32
	arg          uint64
}

func putHeader(b []byte, h header) {
	b[0], b[1] = h.kind, h.status
	binary.LittleEndian.PutUint16(b[2:], h.ctx)
	binary.LittleEndian.PutUint32(b[4:], h.rank)
	binary.LittleEndian.PutUint64(b[8:], h.arg)
}

var errShort = errors.New("message shorter than its header")

// parseHeader decodes the header of msg.
func parseHeader(msg []byte) (header, error) {
	if len(msg) < hdrSize {
		return header{}, errShort
	}
	return header{
		kind:   msg[0],
		status: msg[1],
		ctx:    binary.LittleEndian.Uint16(msg[2:]),
		rank:   binary.LittleEndian.Uint32(msg[4:]),
		arg:    binary.LittleEndian.Uint64(msg[8:]),
	}, nil
}

// putKeyBody encodes the body of a kindKeyRep into b (32 bytes): the
// region's base address (0 without FI_MR_VIRT_ADDR), its length, the
// provider's key and the owner's permissions.
func putKeyBody(b []byte, base, length, mrkey uint64, perm uint8) {
	binary.LittleEndian.PutUint64(b[0:], base)
	binary.LittleEndian.PutUint64(b[8:], length)
	binary.LittleEndian.PutUint64(b[16:], mrkey)
	b[24] = perm
	clear(b[25:32])
}

// bodyLen is the length of each control message's body.
var bodyLen = [...]int{kindAck: 0, kindKeyReq: 0, kindKeyRep: 32, kindAtomReq: 34, kindAtomRep: 8, kindBye: 0, kindAlive: 0}
