// Package wire encodes and decodes the packets amigo contexts exchange. A packet
// is the payload of one descriptor in a descriptor buffer (package ring) or one
// frame on a stream; its length is known from the container.
//
// Every packet starts with an 8-byte base header, little endian:
//
//	[0]   kind      Kind
//	[1]   flags     Flag bits
//	[2:4] dispatch  uint16  dispatch id (AM, RTS)
//	[4:6] hlen      uint16  bytes of application header
//	[6:8] length    uint16  zero, or (AM without FlagAck only) the bytes of
//	                        the packet past the base header
//
// The length of a packet is known from its container; an AM's base header
// may carry it too, for a container that frames packets by it: package
// ring's records, whose record word is the packet's first 8 bytes
// (PutAMRecord). A length that is there must be the packet's.
//
// then the fields of its kind, then hlen bytes of application header, then,
// for an AM, the inline data up to the end of the packet:
//
//	AM    [FlagAck: op uint64]                      header data...
//	RTS   op uint64, size uint64, key uint64        header
//	ACK   op uint64, status uint32, reserved uint32
//	SEND  op uint64, size uint64, key uint64        header  [FlagBusy]
//	EAGER op uint64, offset uint64                  data...
//	STOP  op uint64, variant uint32, reserved uint32, key uint64, from uint64
//	CTS   op uint64, sent uint64
//	FIN   op uint64, status uint32, reserved uint32
//
// op names an operation of the sender of the AM, RTS or SEND, which every
// packet about that message carries in both directions; key is the region key
// of the send buffer the receiver may GET from, or (STOP) of the receive
// buffer the sender may PUT into. A SEND announces a message whose data
// follows as EAGER packets; the receiver may answer STOP, the sender then CTS
// (how many bytes it sent eagerly) or, having PUT the rest, FIN.
//
// Encoders write into a buffer the caller sized with the matching Size
// function; Parse validates everything and never reads outside its input.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind is a packet type.
type Kind uint8

// Packet kinds.
const (
	KindAM    Kind = 1 // active message with inline data
	KindRTS   Kind = 2 // request to send: the receiver GETs the data
	KindACK   Kind = 3 // completion of an AM, RTS or SEND at the receiver
	KindSEND  Kind = 4 // announcement of a message streamed as EAGER packets
	KindEAGER Kind = 5 // a piece of a SEND's data
	KindSTOP  Kind = 6 // the receiver orders the sender to stop streaming
	KindCTS   Kind = 7 // the sender's answer to STOP: bytes it streamed
	KindFIN   Kind = 8 // the sender PUT the rest of the data

	// Multicast (see MC).
	KindMCRTS   Kind = 9  // request to send, travelling along the targets
	KindMCCTS   Kind = 10 // a target checks in with the origin
	KindMCGO    Kind = 11 // the last target returns every target's storage
	KindMCDATA  Kind = 12 // a piece of data was deposited; forward it
	KindMCDONE  Kind = 13 // the last target has everything
	KindMCABORT Kind = 14 // the origin calls the multicast off
	KindMCFAIL  Kind = 15 // a target reports a failure to the origin

	// KindACKS carries the ACKs of several operations to one peer, which
	// a receiver finished together (a batch of GETs).
	KindACKS Kind = 16
	// KindGO is the receiver's word to the sender of a SEND with FlagHold:
	// stream it after all (it has no buffer for it yet, or would not fetch
	// it).
	KindGO Kind = 17

	kindMax = KindGO
)

func (k Kind) String() string {
	switch k {
	case KindAM:
		return "AM"
	case KindRTS:
		return "RTS"
	case KindACK:
		return "ACK"
	case KindSEND:
		return "SEND"
	case KindEAGER:
		return "EAGER"
	case KindSTOP:
		return "STOP"
	case KindCTS:
		return "CTS"
	case KindFIN:
		return "FIN"
	case KindMCRTS:
		return "MCRTS"
	case KindMCCTS:
		return "MCCTS"
	case KindMCGO:
		return "MCGO"
	case KindMCDATA:
		return "MCDATA"
	case KindMCDONE:
		return "MCDONE"
	case KindMCABORT:
		return "MCABORT"
	case KindMCFAIL:
		return "MCFAIL"
	case KindACKS:
		return "ACKS"
	case KindGO:
		return "GO"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Flag bits.
const (
	// FlagAck asks the receiver of an AM to answer with an ACK carrying op.
	FlagAck uint8 = 1 << 0
	// FlagBusy on a SEND says that its sender has other messages to the
	// receiver in progress: a window, whose messages the receiver fetches
	// together rather than let stream (amigo's stopWorth), though the one
	// before may be over by the time this one is announced.
	FlagBusy uint8 = 1 << 1
	// FlagHold on a SEND says that its sender streams nothing until the
	// receiver says GO: a receiver that fetches the data stops the stream
	// without a STOP (amigo's stop.go, injectSend).
	FlagHold uint8 = 1 << 2

	flagsKnown = FlagAck | FlagBusy | FlagHold
)

// Status codes carried by an ACK.
const (
	StatusOK         uint32 = 0
	StatusNoDispatch uint32 = 1 // no handler registered for the dispatch id
	StatusDeclined   uint32 = 2 // the handler named no receive buffer
	StatusTooSmall   uint32 = 3 // the named receive buffer was smaller than the data
	StatusRemoteIO   uint32 = 4 // the receiver's GET of the send buffer failed
	StatusClosed     uint32 = 5 // the receiving context closed before completion
	StatusRemoteIO2  uint32 = 6 // the sender's PUT into the receive buffer failed
	// StatusRefused tells the sender of an AM that asked for no ACK that
	// the receiver refused it for want of a handler; op carries the
	// dispatch id, since such an AM names no operation.
	StatusRefused uint32 = 7
	statusMax            = StatusRefused
)

// STOP variants.
const (
	// StopDiscard: the receiver drops the eager data and GETs everything.
	StopDiscard uint32 = 1
	// StopKeep: the receiver keeps the eager data, GETs from the bottom at
	// once, and the rest once the sender's CTS says what it streamed.
	StopKeep uint32 = 2
	// StopPut: the STOP carries the receive buffer's key (or a later STOP
	// does); the sender PUTs what it did not stream, then sends FIN.
	StopPut uint32 = 3

	// FromSent in a STOP's from field asks the sender to PUT from the end
	// of what it streamed.
	FromSent = ^uint64(0)
)

// BaseSize is the size of the base header.
const BaseSize = 8

// ErrMalformed reports a packet that does not decode.
var ErrMalformed = errors.New("wire: malformed packet")

// Packet is a decoded packet. Header and Data alias the decoded buffer.
type Packet struct {
	Kind     Kind
	Flags    uint8
	Dispatch uint16
	Op       uint64 // AM with FlagAck, RTS, ACK
	Size     uint64 // RTS: bytes of data to GET
	Key      uint64 // RTS: region key of the send buffer
	Status   uint32 // ACK, FIN; STOP: the variant
	Off      uint64 // EAGER: offset; CTS: bytes sent; STOP: from
	Header   []byte
	Data     []byte // AM: inline data
	MC       MC     // multicast packets
}

// MC is the body of every multicast packet:
//
//	op uint64, size uint64, off uint64, len uint64, key uint64,
//	status uint32, pos uint32, origin rank uint32, origin context uint32,
//	way uint32, n uint32, n entries of (rank uint32, context uint32, key uint64),
//	header (MCRTS only)
//
// op is the origin's operation; pos the index of the target the packet is
// for or about; entries the targets in chain order with the keys of the
// buffers they named, where known.
type MC struct {
	Op, Size, Off, Len, Key uint64
	Status, Pos             uint32
	OriginRank, OriginCtx   uint32
	Way                     uint32
	// Entries holds n entries of MCEntrySize bytes; use Entry to read one.
	Entries []byte
}

// MCEntrySize is the size of one multicast target entry.
const MCEntrySize = 16

// MCSize returns the size of a multicast packet with n entries and hlen
// bytes of header.
func MCSize(n, hlen int) int { return BaseSize + 64 + n*MCEntrySize + hlen }

// Entry returns target i of the entries.
func (m *MC) Entry(i int) (rank, ctx uint32, key uint64) {
	e := m.Entries[i*MCEntrySize:]
	return binary.LittleEndian.Uint32(e), binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint64(e[8:])
}

// NumEntries returns the number of entries.
func (m *MC) NumEntries() int { return len(m.Entries) / MCEntrySize }

// PutEntry writes one entry into an entries buffer.
func PutEntry(entries []byte, i int, rank, ctx uint32, key uint64) {
	e := entries[i*MCEntrySize:]
	binary.LittleEndian.PutUint32(e, rank)
	binary.LittleEndian.PutUint32(e[4:], ctx)
	binary.LittleEndian.PutUint64(e[8:], key)
}

// PutMC encodes a multicast packet of kind k into b, which must be
// MCSize(len(m.Entries)/MCEntrySize, len(header)) bytes.
func PutMC(b []byte, k Kind, dispatch uint16, header []byte, m *MC) {
	putBase(b, k, 0, dispatch, len(header))
	le := binary.LittleEndian
	le.PutUint64(b[8:], m.Op)
	le.PutUint64(b[16:], m.Size)
	le.PutUint64(b[24:], m.Off)
	le.PutUint64(b[32:], m.Len)
	le.PutUint64(b[40:], m.Key)
	le.PutUint32(b[48:], m.Status)
	le.PutUint32(b[52:], m.Pos)
	le.PutUint32(b[56:], m.OriginRank)
	le.PutUint32(b[60:], m.OriginCtx)
	le.PutUint32(b[64:], m.Way)
	le.PutUint32(b[68:], uint32(len(m.Entries)/MCEntrySize))
	n := copy(b[72:], m.Entries)
	copy(b[72+n:], header)
}

// AMSize returns the size of an AM packet.
func AMSize(hlen, dlen int, ack bool) int {
	n := BaseSize + hlen + dlen
	if ack {
		n += 8
	}
	return n
}

// RTSSize returns the size of an RTS packet.
func RTSSize(hlen int) int { return BaseSize + 24 + hlen }

// ACKSize is the size of an ACK packet.
const ACKSize = BaseSize + 16

// An ACKS packet is the base header, the number of entries (uint32), a
// zero word (uint32), and that many entries of ACKEntrySize bytes: op
// (uint64) and status (uint32), as an ACK's.
const ACKEntrySize = 12

// MaxACKS is the most entries an ACKS packet carries.
const MaxACKS = 256

// ACKSSize returns the size of an ACKS packet of n entries.
func ACKSSize(n int) int { return BaseSize + 8 + n*ACKEntrySize }

// ACKEntry is one operation's acknowledgement in an ACKS packet.
type ACKEntry struct {
	Op     uint64
	Status uint32
}

// PutACKS encodes an ACKS packet of acks, 1 to MaxACKS of them, into b,
// which must be ACKSSize(len(acks)) bytes.
func PutACKS(b []byte, acks []ACKEntry) {
	putBase(b, KindACKS, 0, 0, 0)
	le := binary.LittleEndian
	le.PutUint32(b[8:], uint32(len(acks)))
	le.PutUint32(b[12:], 0)
	e := b[16:]
	for i := range acks {
		le.PutUint64(e[i*ACKEntrySize:], acks[i].Op)
		le.PutUint32(e[i*ACKEntrySize+8:], acks[i].Status)
	}
}

// ACKAt returns entry i of an ACKS packet's entries (Packet.Data).
func ACKAt(entries []byte, i int) (op uint64, status uint32) {
	e := entries[i*ACKEntrySize : i*ACKEntrySize+ACKEntrySize]
	return binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint32(e[8:])
}

// Sizes of the STOP protocol's control packets.
const (
	STOPSize = BaseSize + 32
	CTSSize  = BaseSize + 16
	FINSize  = BaseSize + 16
)

// EagerSize returns the size of an EAGER packet carrying n bytes.
func EagerSize(n int) int { return BaseSize + 16 + n }

// SENDSize returns the size of a SEND packet.
func SENDSize(hlen int) int { return BaseSize + 24 + hlen }

func putBase(b []byte, k Kind, flags uint8, dispatch uint16, hlen int) {
	b[0] = byte(k)
	b[1] = flags
	binary.LittleEndian.PutUint16(b[2:], dispatch)
	binary.LittleEndian.PutUint16(b[4:], uint16(hlen))
	binary.LittleEndian.PutUint16(b[6:], 0)
}

// PutAM encodes an AM into b, which must be AMSize(len(header), len(data), ack)
// bytes. op is encoded only when ack is set.
func PutAM(b []byte, dispatch uint16, header, data []byte, ack bool, op uint64) {
	n := PutAMHead(b, dispatch, header, ack, op)
	copy(b[n:], data)
}

// PutAMHead is PutAM without the data: it encodes all but the data into
// b, which must be AMSize(len(header), len(data), ack) bytes, and returns
// the offset in b at which the data goes, for the caller to copy it there.
func PutAMHead(b []byte, dispatch uint16, header []byte, ack bool, op uint64) int {
	var flags uint8
	n := BaseSize
	if ack {
		flags = FlagAck
		binary.LittleEndian.PutUint64(b[n:], op)
		n += 8
	}
	putBase(b, KindAM, flags, dispatch, len(header))
	return n + copy(b[n:], header)
}

// PutAMRecord encodes an AM without acknowledgement whose base header
// carries the packet's length: it writes header and data into b, which
// must be len(header)+len(data) bytes (the packet past its base header),
// and returns the base header as a little-endian word, for the caller to
// store in front of b. header and data together must be shorter than
// 64 KiB.
func PutAMRecord(b []byte, dispatch uint16, header, data []byte) uint64 {
	if len(header) == 0 && len(data) >= 8 && len(data) <= 16 && len(b) == len(data) {
		// A message of 8 to 16 bytes with no header (a word, two, a
		// small request): two loads and two stores that overlap where
		// they meet, instead of a call of memmove.
		n := len(data)
		lo, hi := binary.LittleEndian.Uint64(data), binary.LittleEndian.Uint64(data[n-8:])
		binary.LittleEndian.PutUint64(b, lo)
		binary.LittleEndian.PutUint64(b[n-8:], hi)
	} else {
		n := copy(b, header)
		copy(b[n:], data)
	}
	return uint64(KindAM) | uint64(dispatch)<<16 | uint64(uint16(len(header)))<<32 | uint64(uint16(len(b)))<<48
}

// PutRTS encodes an RTS into b, which must be RTSSize(len(header)) bytes.
func PutRTS(b []byte, dispatch uint16, header []byte, op, size, key uint64) {
	putBase(b, KindRTS, 0, dispatch, len(header))
	binary.LittleEndian.PutUint64(b[8:], op)
	binary.LittleEndian.PutUint64(b[16:], size)
	binary.LittleEndian.PutUint64(b[24:], key)
	copy(b[32:], header)
}

// PutACK encodes an ACK into b, which must be ACKSize bytes.
func PutACK(b []byte, op uint64, status uint32) {
	putBase(b, KindACK, 0, 0, 0)
	binary.LittleEndian.PutUint64(b[8:], op)
	binary.LittleEndian.PutUint32(b[16:], status)
	binary.LittleEndian.PutUint32(b[20:], 0)
}

// PutSEND encodes a SEND into b, which must be SENDSize(len(header)) bytes,
// with FlagBusy when busy and FlagHold when hold.
func PutSEND(b []byte, dispatch uint16, header []byte, op, size, key uint64, busy, hold bool) {
	PutRTS(b, dispatch, header, op, size, key)
	b[0] = byte(KindSEND)
	if busy {
		b[1] |= FlagBusy
	}
	if hold {
		b[1] |= FlagHold
	}
}

// PutEager encodes the header of an EAGER packet into b and returns the area
// for its data, which the caller fills.
func PutEager(b []byte, op, off uint64) []byte {
	putBase(b, KindEAGER, 0, 0, 0)
	binary.LittleEndian.PutUint64(b[8:], op)
	binary.LittleEndian.PutUint64(b[16:], off)
	return b[24:]
}

// PutSTOP encodes a STOP into b, which must be STOPSize bytes.
func PutSTOP(b []byte, op uint64, variant uint32, key, from uint64) {
	putBase(b, KindSTOP, 0, 0, 0)
	binary.LittleEndian.PutUint64(b[8:], op)
	binary.LittleEndian.PutUint32(b[16:], variant)
	binary.LittleEndian.PutUint32(b[20:], 0)
	binary.LittleEndian.PutUint64(b[24:], key)
	binary.LittleEndian.PutUint64(b[32:], from)
}

// PutCTS encodes a CTS into b, which must be CTSSize bytes.
func PutCTS(b []byte, op, sent uint64) {
	putBase(b, KindCTS, 0, 0, 0)
	binary.LittleEndian.PutUint64(b[8:], op)
	binary.LittleEndian.PutUint64(b[16:], sent)
}

// PutFIN encodes a FIN into b, which must be FINSize bytes.
func PutFIN(b []byte, op uint64, status uint32) {
	PutACK(b, op, status)
	b[0] = byte(KindFIN)
}

// GOSize is the size of a GO packet.
const GOSize = ACKSize

// PutGO encodes a GO for the sender's op into b, which must be GOSize
// bytes.
func PutGO(b []byte, op uint64) {
	PutACK(b, op, 0)
	b[0] = byte(KindGO)
}

func parseMC(p *Packet, b []byte, hlen int) error {
	if p.Flags != 0 || len(b) < MCSize(0, 0) || (p.Kind != KindMCRTS && (hlen != 0 || p.Dispatch != 0)) {
		return ErrMalformed
	}
	le := binary.LittleEndian
	m := &p.MC
	m.Op = le.Uint64(b[8:])
	m.Size = le.Uint64(b[16:])
	m.Off = le.Uint64(b[24:])
	m.Len = le.Uint64(b[32:])
	m.Key = le.Uint64(b[40:])
	m.Status = le.Uint32(b[48:])
	m.Pos = le.Uint32(b[52:])
	m.OriginRank = le.Uint32(b[56:])
	m.OriginCtx = le.Uint32(b[60:])
	m.Way = le.Uint32(b[64:])
	entries := uint64(le.Uint32(b[68:]))
	if m.Status > statusMax || uint64(len(b)) != uint64(MCSize(0, hlen))+entries*MCEntrySize {
		return ErrMalformed
	}
	end := 72 + int(entries)*MCEntrySize
	m.Entries = b[72:end:end]
	p.Header = b[end:]
	p.Op = m.Op
	return nil
}

// ParseAM decodes an active message that asks for no acknowledgement (the
// packet of nearly every small send) in one step, from the base header
// read as one word: its dispatch id, header and data, aliasing b. For any
// other packet, well-formed or not, it returns ok false, and the caller
// decodes it with ParseInto. What it accepts, Parse accepts alike.
func ParseAM(b []byte) (dispatch uint16, header, data []byte, ok bool) {
	if len(b) < BaseSize {
		return 0, nil, nil, false
	}
	w := binary.LittleEndian.Uint64(b)
	body := uint64(len(b) - BaseSize)
	hlen := uint64(uint16(w >> 32))
	// kind AM, no flags; no length, or the packet's; the header inside.
	if uint16(w) != uint16(KindAM) || w>>48 != 0 && w>>48 != body || hlen > body {
		return 0, nil, nil, false
	}
	b = b[BaseSize:]
	return uint16(w >> 16), b[:hlen:hlen], b[hlen:], true
}

// ParseInto is Parse writing into *p. An active message, the packet of
// every small send, is decoded in place without clearing the rest of the
// Packet: only Kind, Flags, Dispatch, Op, Header and Data are meaningful
// for it, and only those are written. Any other kind clears *p and is
// decoded into it as Parse decodes it.
func ParseInto(p *Packet, b []byte) error {
	if len(b) >= BaseSize && Kind(b[0]) == KindAM && b[1]&^FlagAck == 0 && amLengthOK(b) {
		hlen := int(binary.LittleEndian.Uint16(b[4:]))
		n := BaseSize
		op := uint64(0)
		if b[1]&FlagAck != 0 {
			if len(b) < n+8 {
				return ErrMalformed
			}
			op = binary.LittleEndian.Uint64(b[n:])
			n += 8
		}
		if len(b)-n < hlen {
			return ErrMalformed
		}
		p.Kind, p.Flags, p.Op = KindAM, b[1], op
		p.Dispatch = binary.LittleEndian.Uint16(b[2:])
		p.Header = b[n : n+hlen : n+hlen]
		p.Data = b[n+hlen:]
		return nil
	}
	*p = Packet{}
	return parse(p, b)
}

// amLengthOK reports whether the length field of AM b, at least BaseSize
// bytes, is zero or, with no flags, b's length past the base header.
func amLengthOK(b []byte) bool {
	n := binary.LittleEndian.Uint16(b[6:])
	return n == 0 || b[1] == 0 && int(n) == len(b)-BaseSize
}

// Parse decodes a packet. It returns ErrMalformed for anything a correct
// sender cannot have produced.
func Parse(b []byte) (Packet, error) {
	var p Packet
	err := parse(&p, b)
	return p, err
}

// parse is Parse decoding into *p, which the caller has cleared.
func parse(p *Packet, b []byte) error {
	if len(b) < BaseSize {
		return ErrMalformed
	}
	p.Kind = Kind(b[0])
	p.Flags = b[1]
	p.Dispatch = binary.LittleEndian.Uint16(b[2:])
	hlen := int(binary.LittleEndian.Uint16(b[4:]))
	if p.Kind == 0 || p.Kind > kindMax || p.Flags&^flagsKnown != 0 {
		return ErrMalformed
	}
	if p.Kind == KindAM && !amLengthOK(b) || p.Kind != KindAM && binary.LittleEndian.Uint16(b[6:]) != 0 {
		return ErrMalformed
	}
	n := BaseSize
	if p.Kind >= KindMCRTS && p.Kind <= KindMCFAIL {
		return parseMC(p, b, hlen)
	}
	switch p.Kind {
	case KindAM:
		if p.Flags&^FlagAck != 0 {
			return ErrMalformed
		}
		if p.Flags&FlagAck != 0 {
			if len(b) < n+8 {
				return ErrMalformed
			}
			p.Op = binary.LittleEndian.Uint64(b[n:])
			n += 8
		}
		if len(b)-n < hlen {
			return ErrMalformed
		}
		p.Header = b[n : n+hlen : n+hlen]
		p.Data = b[n+hlen:]
	case KindRTS, KindSEND:
		if p.Kind == KindRTS && p.Flags != 0 || p.Flags&^(FlagBusy|FlagHold) != 0 || len(b) != n+24+hlen {
			return ErrMalformed
		}
		p.Op = binary.LittleEndian.Uint64(b[n:])
		p.Size = binary.LittleEndian.Uint64(b[n+8:])
		p.Key = binary.LittleEndian.Uint64(b[n+16:])
		p.Header = b[n+24:]
	default:
		// Control packets carry no dispatch id, flags or header.
		if p.Flags != 0 || hlen != 0 || p.Dispatch != 0 || len(b) < n+8 {
			return ErrMalformed
		}
		p.Op = binary.LittleEndian.Uint64(b[n:])
		switch p.Kind {
		case KindACK, KindFIN, KindGO:
			if len(b) != ACKSize {
				return ErrMalformed
			}
			p.Status = binary.LittleEndian.Uint32(b[n+8:])
			if p.Status > statusMax || p.Kind == KindGO && p.Status != 0 || binary.LittleEndian.Uint32(b[n+12:]) != 0 {
				return ErrMalformed
			}
		case KindEAGER:
			if len(b) < n+16 {
				return ErrMalformed
			}
			p.Off = binary.LittleEndian.Uint64(b[n+8:])
			p.Data = b[n+16:]
		case KindSTOP:
			if len(b) != STOPSize {
				return ErrMalformed
			}
			p.Status = binary.LittleEndian.Uint32(b[n+8:])
			if p.Status < StopDiscard || p.Status > StopPut || binary.LittleEndian.Uint32(b[n+12:]) != 0 {
				return ErrMalformed
			}
			p.Key = binary.LittleEndian.Uint64(b[n+16:])
			p.Off = binary.LittleEndian.Uint64(b[n+24:])
		case KindCTS:
			if len(b) != CTSSize {
				return ErrMalformed
			}
			p.Off = binary.LittleEndian.Uint64(b[n+8:])
		case KindACKS:
			// Op holds the count and the zero word: cleared once checked.
			count := int(binary.LittleEndian.Uint32(b[n:]))
			p.Op = 0
			if count < 1 || count > MaxACKS || binary.LittleEndian.Uint32(b[n+4:]) != 0 || len(b) != ACKSSize(count) {
				return ErrMalformed
			}
			entries := b[n+8:]
			for i := 0; i < count; i++ {
				if _, status := ACKAt(entries, i); status > statusMax {
					return ErrMalformed
				}
			}
			p.Data = entries
		}
	}
	return nil
}
