// Package ring implements amigo's descriptor buffer: a single-producer,
// single-consumer ring of fixed-size slots in which a descriptor and its inline
// message data occupy one or more consecutive slots.
//
// # Layout
//
// The ring lives in one block of memory, either Go memory (in-process links and
// tests) or a shared-memory segment mapped by two processes. The block starts
// with a control area of two cache lines, followed by N slots of SlotSize bytes:
//
//	offset   0: tail   uint64  written by the producer only
//	offset  64: head   uint64  written by the consumer only
//	offset  72: xfer   uint64  written by the consumer only (transfer counter)
//	offset  80: wrap   uint64  written by the consumer only (where laps end,
//	                            and whether it leaves data in place: Wrap)
//	offset 128: slot 0, slot 1, ... slot N-1 (SlotSize bytes each)
//
// head and tail are monotonic slot positions; position p lives in slot p mod N.
// Slots in [head, tail) hold descriptors the consumer has not yet released.
//
// A descriptor starts at a slot boundary with an 8-byte header word, little
// endian:
//
//	bits  0-15  slots   number of slots the descriptor and its data occupy (>= 1)
//	bits 16-31  flags   FlagPad marks filler that carries no message
//	bits 32-63  length  payload bytes following the header
//
// The payload starts at byte 8 of the first slot and runs on through the
// following slots. A descriptor never wraps: when the k slots a message needs
// do not fit before the end of the ring, the producer first writes a pad
// descriptor covering the slots up to the end, and places the message at slot 0.
// The producer advances tail by the slot count it recorded; the consumer reads
// the slot count and advances head by it.
//
// # Memory ordering
//
// The producer writes a descriptor's payload with plain stores, then stores
// its header word with a release store, then stores tail the same way
// (package order: a plain store on amd64 where the doorbell barrier is
// available, else Go's fenced atomic store). A header
// word is never zero, and the consumer zeroes the header word position of
// every slot it releases, so a consumer waiting at head learns that a
// descriptor has arrived by loading the header word at head atomically
// (acquire) and finding it non-zero: one cache line, the one that also holds
// the first bytes of the data. After it has finished with a descriptor, the
// consumer increments xfer (a release store of its own new value: the
// consumer is its only writer), which tells the producer the transfer is
// complete; when it releases the descriptor's slots, at once (Release) or
// later (Consume, then Flush), it zeroes those words and then stores head
// (release), so that a producer that loads head (acquire) and sees the new
// value may overwrite the released slots: release stores order the
// consumer's reads and zeroing before them. Only head gives room; xfer
// may run ahead of it. No store here is a fence; a
// side that sleeps for the other's stores arms its doorbell and calls
// order.Barrier before it looks a last time (package transport).
//
// # Slots given back unzeroed
//
// A consumer may give back the slots of a descriptor's payload after the
// first without zeroing them (Reader.SetKeep): a producer then writes
// lines that never left its core where the consumer did not read them. Such
// a slot may hold any word at its header word position, so the consumer
// marks it stale in a bitmap of its own, and at a stale position it
// believes a non-zero word only once it has loaded the producer's tail
// (acquire) and found it past the position, and loaded the word again
// after it: the producer stores a descriptor's header word before the
// tail that covers it (both release), so a tail past the position means
// the word there is the descriptor's. The producer's side does not change.
// A slot zeroed at its give-back is marked fresh again; a new reader
// believes no slot it has not given back itself (all stale). Such a
// reader may also ask the producer to end its laps early (Wrap, a word
// the consumer alone writes, read by the producer once a lap): only where
// pads go changes.
//
// # Records
//
// A slot can carry several small packets, so that a burst of them moves
// fewer cache lines between the cores. Its header word says one slot,
// FlagRecords and length 0; from byte 8 on it holds records, each 8-byte
// aligned: a record word, whose bits 48-63 hold n, the number of bytes
// that follow it in the record, and whose bits 0-47 are the producer's
// and not all zero, then those n bytes, padded to 8. The consumer is
// handed each record whole, its word included (8+n bytes): the producer
// makes the word the first 8 bytes of its packet (package wire's base
// header of an active message carries the length of the rest of the
// packet in the same bits). An 8-byte message, word and data, takes 16
// bytes: three a slot. The producer opens such a slot with its first
// record, zeroes the rest of the slot and stores the header word
// (release), and publishes tail past it; while it writes nothing else
// into the ring it may append records to the slot, each by writing the
// bytes after the word and then storing the word (release), until the
// slot is full. It leaves the slot for good when it writes the next
// descriptor. The consumer reads records in order; at an offset whose
// word is still zero it looks at the next slot's header word: non-zero
// there means the producer left the slot, and after a last look at the
// offset (the producer's stores are ordered, so a record stored before
// the next descriptor is visible by now) the consumer leaves it too and
// counts it as one descriptor. Only Take reads records; Decode, Next and
// Peek find such a slot corrupt, so only a consumer that reads with Take
// may be given them.
//
// The producer decides whether there is room; package fifo does that for the
// injection FIFOs of amigo. The ring only lays descriptors out and reads them
// back, validating everything it reads, because in shared memory the other side
// is another process.
package ring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/memcopy"
	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/internal/waypick"
)

const (
	// SlotSize is the size of one slot: one cache line.
	SlotSize = 64
	// HeaderSize is the size of the descriptor header at the start of a
	// descriptor's first slot.
	HeaderSize = 8
	// ControlSize is the size of the control area that precedes the slots.
	ControlSize = 128
	// MaxSlots is the largest number of slots a ring may have.
	MaxSlots = 1 << 15
	// FlagPad marks a descriptor that only fills slots up to the end of the ring.
	FlagPad = 1
	// FlagRecords marks a descriptor of one slot that holds records (see
	// the package comment) instead of one payload.
	FlagRecords = 2
	// RecordHeaderSize is the size of the word that starts a record.
	RecordHeaderSize = 8
	// MaxRecord is the largest record a slot holds, its word included.
	MaxRecord = SlotSize - HeaderSize
	// RecordLenShift is the position of a record's length in its word.
	RecordLenShift = 48

	recordsWord = 1 | FlagRecords<<16
)

// ErrCorrupt reports a descriptor that cannot have been written by a correct
// producer. The ring cannot be read past it.
var ErrCorrupt = errors.New("ring: corrupt descriptor")

// Control is the control area of a ring. Its fields are accessed atomically only.
type Control struct {
	tail atomic.Uint64
	_    [56]byte
	head atomic.Uint64
	xfer atomic.Uint64
	wrap atomic.Uint64
	_    [40]byte
}

// Ring is a descriptor buffer over caller-provided memory.
type Ring struct {
	ctl   *Control
	slots []byte
	n     uint64
	mask  uint64
}

// MemSize returns the bytes of memory a ring of n slots needs.
func MemSize(n int) int { return ControlSize + n*SlotSize }

// New lays a ring of n slots over mem, which must be at least MemSize(n) bytes
// and 8-byte aligned. n must be a power of two between 2 and MaxSlots. New does
// not clear mem: a fresh ring needs zeroed memory, and attaching to an existing
// ring (the other side of a shared segment) keeps its state.
func New(mem []byte, n int) (*Ring, error) {
	if n < 2 || n > MaxSlots || n&(n-1) != 0 {
		return nil, fmt.Errorf("ring: %d slots: want a power of two in [2, %d]", n, MaxSlots)
	}
	if len(mem) < MemSize(n) {
		return nil, fmt.Errorf("ring: %d bytes of memory for %d slots, need %d", len(mem), n, MemSize(n))
	}
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, errors.New("ring: memory is not 8-byte aligned")
	}
	return &Ring{
		ctl:   (*Control)(unsafe.Pointer(&mem[0])),
		slots: mem[ControlSize:MemSize(n):MemSize(n)],
		n:     uint64(n),
		mask:  uint64(n - 1),
	}, nil
}

// NewHeap returns a ring of n slots in fresh Go memory.
func NewHeap(n int) (*Ring, error) {
	if n < 2 || n > MaxSlots {
		return New(nil, n)
	}
	words := make([]uint64, MemSize(n)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	return New(mem, n)
}

// Slots returns the number of slots of the ring.
func (r *Ring) Slots() int { return int(r.n) }

// HeadCounter returns the consumer's head position, for the producer's
// space accounting.
func (r *Ring) HeadCounter() *atomic.Uint64 { return &r.ctl.head }

// TransferCounter returns the monotonic count of descriptors the consumer has
// finished with, pads included.
func (r *Ring) TransferCounter() *atomic.Uint64 { return &r.ctl.xfer }

// Tail returns the published tail position.
func (r *Ring) Tail() uint64 { return r.ctl.tail.Load() }

// SlotsFor returns the number of slots a descriptor with payload bytes of
// payload occupies.
func SlotsFor(payload int) int { return (HeaderSize + payload + SlotSize - 1) / SlotSize }

// MaxPayload returns the largest payload a single descriptor of a ring of n
// slots may carry, so that it always fits after a pad: half the ring.
func MaxPayload(n int) int { return n/2*SlotSize - HeaderSize }

// PadFor returns the number of pad slots the producer must write at position
// tail before it can place a descriptor of k slots without wrapping; 0 when the
// descriptor fits before the end of the ring.
func (r *Ring) PadFor(tail uint64, k int) int {
	off := tail & r.mask
	if off+uint64(k) > r.n {
		return int(r.n - off)
	}
	return 0
}

// Wrap returns the position in each lap at or before which the consumer
// asks descriptors to end (see Reader.setWrap): the producer wraps to slot
// 0 with a pad at the first descriptor that would end past it. It returns
// the ring's slots where the consumer asks nothing. inPlace says that the
// consumer's handlers left most of the data of large descriptors where it
// lay, without copying it out, the last time it gave their slots back
// unzeroed (a producer may then send larger messages inline). Any value
// the consumer stored is safe: it only moves pads and sizes.
func (r *Ring) Wrap() (wrap uint64, inPlace bool) {
	w := r.ctl.wrap.Load()
	inPlace = w&wrapInPlace != 0
	if w &^= wrapInPlace; w > 0 && w < r.n {
		return w, inPlace
	}
	return r.n, inPlace
}

// wrapInPlace is the bit of the control area's wrap word that says the
// consumer leaves data in place (Wrap).
const wrapInPlace = 1 << 63

// wrapSlots is the most slots of a descriptor that Wrap moves.
const wrapSlots = 160

// PadAt is PadFor with wrap (from Wrap) in place of the ring's end: a
// descriptor that would end past wrap, and does not start the lap, is
// placed at slot 0 after a pad to the end of the ring.
func (r *Ring) PadAt(tail uint64, k int, wrap uint64) int {
	off := tail & r.mask
	if off != 0 && k <= wrapSlots && off+uint64(k) > wrap || off+uint64(k) > r.n {
		return int(r.n - off)
	}
	return 0
}

func header(k, flags, length int) uint64 {
	return uint64(uint16(k)) | uint64(uint16(flags))<<16 | uint64(uint32(length))<<32
}

func (r *Ring) word(pos uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&r.slots[(pos&r.mask)*SlotSize]))
}

// WritePad writes a pad descriptor of pad slots at position tail.
func (r *Ring) WritePad(tail uint64, pad int) {
	order.Store64(r.word(tail), header(pad, FlagPad, 0))
}

// Payload returns the payload area of a descriptor carrying payload bytes at
// position tail, for the caller to fill before Seal. The descriptor must not
// wrap (see PadFor).
func (r *Ring) Payload(tail uint64, payload int) []byte {
	off := (tail&r.mask)*SlotSize + HeaderSize
	return r.slots[off : off+uint64(payload) : off+uint64(payload)]
}

// Seal stores the header of the descriptor at position tail, whose payload
// the caller has written: from now on the consumer may read it.
func (r *Ring) Seal(tail uint64, payload int) {
	order.Store64(r.word(tail), header(SlotsFor(payload), 0, payload))
}

// Small returns the slot at position pos, for a descriptor of one slot
// (payload up to SlotSize-HeaderSize bytes, which never needs a pad): the
// caller writes the payload from byte HeaderSize on, then calls SealSmall.
func (r *Ring) Small(pos uint64) *[SlotSize]byte {
	return (*[SlotSize]byte)(unsafe.Pointer(&r.slots[(pos&r.mask)*SlotSize]))
}

// Prepare asks for the cache line of slot pos for writing, ahead of the
// producer's writing it: a hint, with no effect on what the ring holds
// and no order with any store (PREFETCHW on amd64, nothing elsewhere).
//
// # Why
//
// The slots a producer writes were last written by the consumer, which
// zeroed them when it gave them back, so the producer's first store into
// a slot waits for its line to come from the other core. A producer that
// fills a slot of records (writeRecord in package amigo) asks for the
// next slot's line when it opens one, and the line travels while it
// appends the records. On a 2-core AMD host whose cores were 0.35 us
// apart, windows of 8-byte messages moved 1.28x as many (osu_bw and
// osu_mbw_mr, 6-8 interleaved runs), 32-byte ones 1.21-1.39x, package
// mpi's 1.6x, with 8-byte latency within its spread (1.00-1.03x the
// time); with its cores 0.08 us apart, 0.95-1.02x (bench/SMALL_PATH.md).
// A producer of one-slot descriptors does the same after each (package
// amigo's peer.commit): the SEND, STOP and ACK of a window of fetched
// messages are one slot each, and each store into a slot the consumer had
// zeroed held up the next fence (in the receiver, the publication of the
// fetch that follows a STOP) for the line's trip. On the AMD host in the
// slow state, windows of 32 KiB moved 1.09-1.14x as much (3 runs of 5 to
// 8 interleaved rounds), 64-256 KiB 1.02-1.09x, 4-16 KiB within the spread.
func (r *Ring) Prepare(pos uint64) {
	prefetchw(unsafe.Pointer(&r.slots[(pos&r.mask)*SlotSize]))
}

// SealSmall stores the header of the descriptor of one slot s (from
// Small) carrying payload bytes, as Seal does.
func SealSmall(s *[SlotSize]byte, payload int) {
	order.Store64((*atomic.Uint64)(unsafe.Pointer(s)), 1|uint64(uint32(payload))<<32) // header(1, 0, payload)
}

// RecordSize returns the bytes a record of rec bytes (its word included)
// occupies in a slot.
func RecordSize(rec int) int { return (rec + 7) &^ 7 }

// RecordBody returns the bytes after the word of a record of rec bytes at
// byte off of slot s (from Small), for the caller to fill before
// SealRecord or OpenRecords.
func RecordBody(s *[SlotSize]byte, off, rec int) []byte {
	return s[off+RecordHeaderSize : off+rec : off+rec]
}

// SealRecord stores word, the word of the record at byte off of slot s
// whose body the caller has written: non-zero, with the body's length at
// RecordLenShift.
func SealRecord(s *[SlotSize]byte, off int, word uint64) {
	order.RaceRelease()
	order.Store64((*atomic.Uint64)(unsafe.Pointer(&s[off])), word)
}

// OpenRecords makes slot s (from Small) a slot of records whose first
// record, of word word, the caller has written from byte HeaderSize on
// (the body, at RecordBody(s, HeaderSize, ...)): it stores the word,
// zeroes the rest of the slot and stores the slot's header word. It
// returns the offset of the next record. The caller publishes tail past
// the slot.
func OpenRecords(s *[SlotSize]byte, word uint64) int {
	off := HeaderSize + RecordSize(RecordHeaderSize+int(word>>RecordLenShift))
	for i := off; i < SlotSize; i += 8 {
		*(*uint64)(unsafe.Pointer(&s[i])) = 0
	}
	*(*uint64)(unsafe.Pointer(&s[HeaderSize])) = word
	order.Store64((*atomic.Uint64)(unsafe.Pointer(s)), recordsWord)
	return off
}

// Publish stores the producer's tail. In race builds it first releases
// order's race word, so that a consumer that acquires it after taking a
// descriptor is ordered after what the producer wrote before it, in a
// ring over memory outside the Go heap too (order.RaceRelease).
func (r *Ring) Publish(tail uint64) {
	order.RaceRelease()
	order.Store64(&r.ctl.tail, tail)
}

// Decode validates the descriptor whose header word is word at slot position
// head of a ring of n slots held in slots. It returns the descriptor's slot
// count, whether it is a pad, and its payload. Decode never reads outside
// slots, whatever word and the memory hold.
func Decode(word uint64, slots []byte, n, head uint64) (k int, pad bool, payload []byte, err error) {
	if n == 0 || n&(n-1) != 0 || uint64(len(slots)) < n*SlotSize {
		return 0, false, nil, ErrCorrupt
	}
	off := head & (n - 1)
	k = int(uint16(word))
	flags := uint16(word >> 16)
	length := word >> 32
	if k < 1 || off+uint64(k) > n || uint64(k) > n/2 && flags&FlagPad == 0 || flags&^FlagPad != 0 {
		return 0, false, nil, ErrCorrupt
	}
	if flags&FlagPad != 0 {
		if length != 0 || off+uint64(k) != n {
			return 0, false, nil, ErrCorrupt
		}
		return k, true, nil, nil
	}
	if SlotsFor(int(length)) != k {
		return 0, false, nil, ErrCorrupt
	}
	s := slots[off*SlotSize+HeaderSize:]
	return k, false, s[:length:length], nil
}

// Reader is the consumer side of a ring. A Reader is used by one goroutine at
// a time. It is padded to whole cache lines at both ends: its consumer writes
// it on every message, and a small object allocated next to it (the Reader
// of the opposite direction, say) must not share its lines.
type Reader struct {
	_ [64]byte
	r *Ring
	// hd and xf point at the ring's head and transfer counter: stores
	// through them check only their own pointer for nil. A store through
	// &r.ctl.head checks r.ctl by loading its first word, tail, in the
	// line the producer writes on every publish, and so took that line
	// from the producer's core at every give-back (a fifth of Reader.flush's
	// samples at 8 KiB).
	hd, xf *atomic.Uint64
	head   uint64 // next position to read, past the consumed descriptors
	k      uint64 // slots of the descriptors returned by Next or Peek and not yet released
	nd     uint64 // how many descriptors those slots hold, pads included
	rel    uint64 // position up to which slots are released (<= head)
	owed   uint64 // descriptors taken and not yet counted (Take, Count)
	moff   uint64 // in a slot of records at head: offset of the next record
	// Catching up with a producer that appends records (see Take): took,
	// a record was handed out since the reader last found the next one not
	// yet written; streak, how many times in a row it found so after
	// handing records out; caught, Take waits before it looks again.
	took, caught bool
	streak       int
	// large: the last descriptor Take returned holds largeAt slots or
	// more (largeSlots); the next Take gives its slots back first.
	large   bool
	largeAt uint64
	// lpos and lk: the first position and the slots of the large
	// descriptor Take returned last, while CopyOut may take its data out
	// (lk zero otherwise); zlo and zhi: positions whose header word
	// positions CopyOut zeroed, which the next give-back skips.
	lpos, lk uint64
	zlo, zhi uint64
	// stale: bit s set, slot s was given back without its header word
	// position zeroed, or its state is not known (see at); seen, the
	// producer's tail as last loaded; keep, give the payload slots of
	// descriptors of keepMin slots or more back without zeroing them,
	// spans holding those slots until the give-back (ns of them; CopyOut
	// takes its descriptor's off).
	stale []uint64
	seen  uint64
	keep  bool
	ns    int
	spans [maxSpans]span
	// mode: as SetKeep set it; ep chooses keep by epochs (KeepMeasured);
	// kept and zeroed count the epochs by way.
	mode         Keep
	ep           waypick.Epochs
	kept, zeroed uint64
	kbytes       uint64 // of a KeepAlways reader, counted into epochs
	staleEnd     uint64 // the end of the last positions marked stale (see mark)
	left         uint64 // bytes of the epoch's descriptors left unzeroed
	inPlace      bool   // the last epoch kept left most of its data unzeroed
	lastK        uint64 // the slots of the last descriptor counted (count)
	_            [64]byte
}

// span is the slots [lo, hi) of a descriptor's payload left unzeroed.
type span struct{ lo, hi uint64 }

// keepMin is the fewest slots of a descriptor whose payload slots are
// left unzeroed.
const keepMin = 32

// A KeepMeasured reader counts the bytes of descriptors of keepMin slots
// or more in epochs of keepEpoch bytes, each kept or zeroed (keepWay and
// zeroWay of a waypick.Chooser, kept tried first), and gives the next
// epoch the way that measured faster; an epoch that took keepEpochMax or
// longer is not recorded. Zeroing takes over only once it measured
// zeroMargin faster than keeping.
//
// # Why
//
// Which is faster depends on whether the handler reads the data where it
// lies, which the reader cannot see: on a 2-core AMD host, a handler that
// did not (amibench -b am_bw) moved 4 KiB 1.3-1.7x, 8 KiB 1.2x and 16 KiB
// 1.4x as fast with slots kept (and laps of keepWrap), one that read the
// data in place (bytes.Count over it) 0.76x, 0.88x, 0.23x and 0.72x as
// fast: the producer's stores into lines the consumer's core holds shared
// wait far longer than into lines it holds modified or none holds. Single
// epochs of 4 MiB spread by a third either side from one to the next on
// that host, so a trial of zeroing that happened on a fast spell would
// hand it a stream that keeping moves faster: the margin keeps it from
// taking over on one such epoch, where the loss of a handler that reads
// in place is far larger than the spread.
const (
	keepWay      = 0
	zeroWay      = 1
	keepEpoch    = 4 << 20
	keepEpochMax = 200 * time.Millisecond
	zeroMargin   = 0.25
)

// maxSpans is how many descriptors' payload slots a Reader leaves
// unzeroed between two give-backs; those of later ones are zeroed.
const maxSpans = 64

// NewReader returns a reader that starts at the ring's published head.
func (r *Ring) NewReader() *Reader {
	h := r.ctl.head.Load()
	c := &Reader{r: r, hd: &r.ctl.head, xf: &r.ctl.xfer, head: h, rel: h, largeAt: min(largeSlots, r.n/8)}
	// A reader does not know how an earlier reader of the ring left its
	// slots: each is believed only once the tail is past it, until it is
	// given back.
	c.stale = make([]uint64, (r.n+63)/64)
	for i := range c.stale {
		c.stale[i] = ^uint64(0)
	}
	c.staleEnd = h // as if the lap before h had been given back unzeroed
	return c
}

// Keep is how a Reader gives back the payload slots of a descriptor of
// keepMin slots or more whose data was not copied out with CopyOut.
type Keep int

const (
	// KeepNever zeroes their header word positions, as those of every
	// other slot.
	KeepNever Keep = iota
	// KeepAlways leaves them as they are.
	KeepAlways
	// KeepMeasured does what measured faster (see keepEpoch).
	KeepMeasured
)

// SetKeep sets how the reader gives back the payload slots of descriptors
// of keepMin slots or more whose data was not copied out.
func (c *Reader) SetKeep(k Keep) {
	c.mode, c.keep = k, k != KeepNever
	if k == KeepMeasured {
		c.ep = waypick.Epochs{Size: keepEpoch, Max: keepEpochMax}
		c.ep.Pick.Cadence.Margin[zeroWay] = zeroMargin
	}
	c.setWrap()
}

// KeepEpochs returns the epochs of keepEpoch bytes of descriptors of
// keepMin slots or more that a KeepMeasured or KeepAlways reader took, by
// how it gave back the slots of those not copied out: zeroed or left as
// they were.
func (c *Reader) KeepEpochs() (zeroed, kept uint64) { return c.zeroed, c.kept }

// at returns the header word at position pos, or 0 where no descriptor
// the producer published starts there yet. A slot given back unzeroed
// (stale) may hold any word: it is believed only once the producer's tail
// is past pos.
func (c *Reader) at(pos uint64) uint64 {
	w := c.r.word(pos).Load()
	if w != 0 && c.isStale(pos) {
		return c.atStale(pos, w)
	}
	return w
}

// isStale reports whether position pos is marked stale.
func (c *Reader) isStale(pos uint64) bool {
	i := pos & c.r.mask
	return c.stale[i>>6]&(1<<(i&63)) != 0
}

// atStale is at for a stale position whose word w is not zero, apart so
// that at inlines.
//
//go:noinline
func (c *Reader) atStale(pos, w uint64) uint64 {
	if pos >= c.seen {
		// The header word is stored before the tail (release), so a
		// word loaded after a tail past pos is the descriptor's.
		c.seen = c.r.ctl.tail.Load()
		if pos >= c.seen {
			return 0
		}
		w = c.r.word(pos).Load()
	}
	return w
}

// count adds n bytes of a descriptor of k slots, keepMin or more, to the
// epoch, and once it holds keepEpoch counts it and takes the next one's
// way (a KeepMeasured reader) and laps (setWrap).
func (c *Reader) count(n, k uint64) {
	c.lastK = k
	size, kept := uint64(keepEpoch), true
	if c.mode == KeepMeasured {
		if !c.ep.Count(n) {
			return
		}
		size, kept = c.ep.Size, c.ep.Prev() == keepWay
		c.keep = c.ep.Way() == keepWay
	} else {
		if c.kbytes += n; c.kbytes < keepEpoch {
			return
		}
		c.kbytes = 0
	}
	if kept {
		c.kept++
		c.inPlace = c.left > size/2
	} else {
		c.zeroed++
	}
	c.setWrap()
	c.left = 0
}

// keepWrap is the slots of a lap a reader that keeps slots unzeroed asks
// the producer to keep descriptors of up to wrapSlots within.
//
// # Why
//
// A producer whose lines stay in its core (slots kept) still cycles
// through the whole ring, 512 KiB at 8192 slots, more than the AMD host's
// level-2 cache holds: its stores then wait for lines to come back from
// further out. amibench -b am_bw with slots kept, laps of 2048 slots
// against the whole ring of 8192: 4 KiB 1.2-1.6x, 8 KiB 1.15-1.26x, 16
// KiB (257 slots, above wrapSlots) 0.81x when its laps were cut too; laps
// of 1024 slots 0.6-0.8x (the producer waits for room), 4096 1.0-1.1x.
// With slots zeroed the short laps were slower (a ring of 2048: 0.77x), so
// the reader asks for them only while most of an epoch's data was left
// unzeroed.
//
// A lap holds keepLap descriptors at least, of the size of the last one
// the reader took: 8 KiB (129 slots) moved 1.16-1.28x as much in laps of
// 3072 slots as of 2048, and 1.22x in laps of 3584, where 4 KiB moved
// 0.94-1.05x and 1.12x (two runs of 4-5 interleaved rounds, the slow
// state), and laps of 1536 slots 0.84 / 0.88x.
const (
	keepWrap = 2048
	keepLap  = 28
)

// setWrap tells the producer whether the last epoch the reader kept left
// most of its data unzeroed (not copied out), and if so asks it to wrap
// its laps at keepWrap, or keepLap descriptors of the last one's size,
// while the reader keeps slots; at the ring's end otherwise. A trial of
// zeroing, which leaves nothing unzeroed, does not change what the
// producer is told of the data: the handlers are the same.
func (c *Reader) setWrap() {
	w := uint64(0)
	if c.inPlace {
		w = wrapInPlace
		if c.keep {
			w |= max(keepWrap, keepLap*c.lastK)
		}
	}
	c.r.ctl.wrap.Store(w)
}

// mark sets (set) or clears the stale bits of positions [from, to).
// Clearing is skipped where no bit can be set: a bit set for a position
// below staleEnd is cleared or set again when its slot is given back a
// lap later, so past staleEnd plus a lap every bit is clear.
func (c *Reader) mark(from, to uint64, set bool) {
	if set {
		c.staleEnd = max(c.staleEnd, to)
	} else if c.staleEnd+c.r.n <= from {
		return
	}
	if from == to {
		return
	}
	i, n := from&c.r.mask, to-from
	if first := c.r.n - i; n > first {
		c.markSlots(i, c.r.n, set)
		i, n = 0, n-first
	}
	c.markSlots(i, i+n, set)
}

// markSlots sets or clears the stale bits of slots [lo, hi), hi <= n.
func (c *Reader) markSlots(lo, hi uint64, set bool) {
	for lo < hi {
		w := lo >> 6
		e := min(hi, (w+1)<<6)
		m := ^uint64(0) >> (64 - (e - lo)) << (lo & 63)
		if set {
			c.stale[w] |= m
		} else {
			c.stale[w] &^= m
		}
		lo = e
	}
}

// Pending reports whether a descriptor waits at the head.
func (c *Reader) Pending() bool {
	if c.k != 0 || c.moff != 0 {
		return true
	}
	w := c.r.word(c.head).Load()
	if w != 0 && c.isStale(c.head) {
		w = c.atStale(c.head, w)
	}
	return w != 0
}

// Next returns the payload of the next descriptor, or nil when the ring is
// empty. Pads are released on the way. The payload stays valid until Release.
// A corrupt descriptor returns ErrCorrupt, and the reader must not be used
// again.
func (c *Reader) Next() ([]byte, error) {
	if c.k != 0 {
		return nil, errors.New("ring: Next before Release")
	}
	for {
		// Past half a ring of consumed slots, give them back first: the
		// producer needs room, and a lap of consumed slots would be read
		// again.
		if c.head-c.rel >= c.r.n/2 {
			c.Flush()
		}
		w := c.at(c.head)
		if w == 0 {
			return nil, nil
		}
		if b := c.r.small(c.head, w); b != nil {
			c.k, c.nd = 1, 1
			return b, nil
		}
		k, pad, payload, err := Decode(w, c.r.slots, c.r.n, c.head)
		if err != nil {
			return nil, err
		}
		c.k = uint64(k)
		c.nd = 1
		if !pad {
			return payload, nil
		}
		c.Consume()
	}
}

// small returns the payload of the descriptor at pos whose header word is
// w if it is one of one slot with no flags (every small message), else
// nil: the common case of Decode, which accepts every such word in a ring
// of at least 2 slots, in one comparison.
func (r *Ring) small(pos, w uint64) []byte {
	if w&0xffffffff != 1 || w>>32 > SlotSize-HeaderSize {
		return nil
	}
	s := (*[SlotSize]byte)(unsafe.Pointer(&r.slots[(pos&r.mask)*SlotSize]))
	return s[HeaderSize : HeaderSize+w>>32 : HeaderSize+w>>32]
}

// recordWait is how long Take waits before it looks again at a slot of
// records whose producer it keeps catching up with.
//
// # Why
//
// A consumer that reads each record as soon as it is written takes the
// slot's cache line from the producer, which is writing the next record
// into it, once a record: the producer then waits for the line to come
// back before it can append. Two cores exchanging a window of 8-byte
// messages were bound by that exchange of the line, so much that making
// either side's instructions fewer made the window slower (see
// bench/SMALL_PATH.md). Waiting a little after catching up lets the
// producer fill the line first. The wait is taken only when the consumer
// caught up twice in a row after handing records out (a stream), never
// for the records of a lone burst, and never instead of a look: a
// consumer about to sleep still looks first.
const recordWait = 200 * time.Nanosecond

// largeSlots: a descriptor of largeSlots slots (8 KiB) or more, or of an
// eighth of a smaller ring, is given back by the Take that follows it,
// before that Take looks at the next descriptor, instead of at the next
// poll or once half the ring is held.
//
// # Why
//
// The consumer gives slots back by zeroing the header word position of
// each (package comment): a store into every line of the descriptor,
// which the producer's core wrote and the consumer's core has just read.
// A receiver that took a window of 8 KiB messages one after the other
// and zeroed them a poll later, up to 15 at a time from a ring of 4096
// slots, spent nearly as long on the zeroing (Reader.flush, 20% of its
// samples) as on copying the data out (memmove, 24%): by then the first
// lines had left its level-1 cache, and thousands of stores waited for
// their lines at once. Zeroing each one as soon as the consumer is done
// with it moved amibench -b bw 1.05-1.11x at 8 KiB (4 interleaved rounds
// each, three runs) and 1.01-1.05x at 16 KiB from a ring of 4096 slots,
// and 1.18x at 8 and 16 KiB from a ring of 1024, where the producer, with
// three messages' room, also waited for the slots. Smaller descriptors
// keep being given back a poll at a time: at 4 KiB the prompt zeroing
// measured 0.97-0.98x, at 1-2 KiB 0.78-0.90x, for slots of records
// (8-byte messages) 0.62x.
const largeSlots = 128

// Take returns the payload of the next descriptor, or of the next record
// (see the package comment), or nil when there is none yet, and consumes
// it at once, as Next and Consume do, except that it counts descriptors
// (pads included) as completed transfers only at the next Count: a
// consumer that reads several in a row stores the transfer counter once
// for them all. The payload stays valid until the next Flush, Release or
// Take. A corrupt descriptor returns ErrCorrupt, and the reader must not
// be used again. Take must not be mixed with Next and Peek. The slots of a
// descriptor of 8 KiB or more are given back by the next Take
// (largeSlots).
func (c *Reader) Take() ([]byte, error) {
	for {
		if c.moff != 0 {
			if c.caught {
				c.caught = false
				pause(recordPause)
			}
			b, err := c.record()
			if b != nil || err != nil || c.moff != 0 {
				return b, err
			}
		}
		if c.k != 0 {
			return nil, errors.New("ring: Take after Next or Peek")
		}
		if c.large || c.head-c.rel >= c.r.n/2 {
			c.Flush()
		}
		// at, written out: the call would cost every message.
		w := c.r.word(c.head).Load()
		if w != 0 && c.isStale(c.head) {
			w = c.atStale(c.head, w)
		}
		if b := c.r.small(c.head, w); b != nil {
			c.head++
			c.owed++
			return b, nil
		}
		if w == 0 {
			return nil, nil
		}
		if w == recordsWord {
			c.moff = HeaderSize
			continue
		}
		k, pad, payload, err := Decode(w, c.r.slots, c.r.n, c.head)
		if err != nil {
			return nil, err
		}
		pos := c.head
		c.head += uint64(k)
		c.owed++
		c.large = uint64(k) >= c.largeAt
		if !pad {
			if c.large {
				c.lpos, c.lk = pos, uint64(k)
			}
			if k >= keepMin {
				if c.keep && c.ns < maxSpans {
					c.spans[c.ns] = span{pos + 1, pos + uint64(k)}
					c.ns++
					c.left += uint64(len(payload))
				}
				if c.mode != KeepNever {
					c.count(uint64(len(payload)), uint64(k))
				}
			}
			return payload, nil
		}
	}
}

// record returns the next record of the slot of records at head, or nil
// when none has come yet. When the producer has left the slot (it is
// full, or the next slot holds a descriptor and no record came before it)
// it leaves it too: the slot is consumed and moff is zero.
func (c *Reader) record() ([]byte, error) {
	// s is the slot: off is checked against SlotSize, so its bytes are
	// reached without a bounds check each.
	s := unsafe.Pointer(c.r.Small(c.head))
	if off := c.moff; off <= SlotSize-RecordHeaderSize {
		w := (*atomic.Uint64)(unsafe.Add(s, off)).Load()
		if w == 0 {
			if c.at(c.head+1) == 0 {
				// The producer may still append.
				if c.took {
					c.streak++
				} else {
					c.streak = 0
				}
				c.caught, c.took = c.streak >= 2, false
				return nil, nil
			}
			w = (*atomic.Uint64)(unsafe.Add(s, off)).Load()
		}
		if w != 0 {
			n := w >> RecordLenShift
			if n > SlotSize-RecordHeaderSize-off {
				return nil, ErrCorrupt
			}
			c.moff = off + RecordHeaderSize + (n+7)&^7
			c.took = true
			return unsafe.Slice((*byte)(unsafe.Add(s, off)), RecordHeaderSize+n), nil
		}
	}
	c.moff = 0
	c.head++
	c.owed++
	return nil, nil
}

// Count adds the descriptors taken since the last Count to the transfer
// counter. It reports whether there were any.
func (c *Reader) Count() bool {
	if c.owed == 0 {
		return false
	}
	order.Store64(c.xf, c.xf.Load()+c.owed)
	c.owed = 0
	return true
}

// Peek returns the payload of the descriptor that follows those returned by
// Next or Peek since the last Release, without releasing any of them, or nil
// when there is none. Pads are skipped but stay unreleased too. Every payload
// returned stays valid until Release, which releases them all at once. It
// lets an engine gather several descriptors into one vectored write and give
// their slots back only once the write is done. A corrupt descriptor returns
// ErrCorrupt, and the reader must not be used again.
func (c *Reader) Peek() ([]byte, error) {
	for {
		pos := c.head + c.k
		held := c.head - c.rel + c.k // slots not released
		if held >= c.r.n {
			return nil, nil
		}
		w := c.at(pos)
		if w == 0 {
			return nil, nil
		}
		k, pad, payload, err := Decode(w, c.r.slots, c.r.n, pos)
		if err != nil {
			return nil, err
		}
		if held+uint64(k) > c.r.n {
			return nil, ErrCorrupt
		}
		c.k += uint64(k)
		c.nd++
		if !pad {
			return payload, nil
		}
	}
}

// CountOutside adds n to the transfer counter for descriptors the engine
// completed that never were in the ring (fifo.Tracker.InjectOutside). The
// engine calls it in the order of completion, between releases.
func (c *Reader) CountOutside(n uint64) {
	order.Store64(c.xf, c.xf.Load()+n)
}

// Position returns the slot position that follows the descriptors returned by
// Next or Peek since the last release.
func (c *Reader) Position() uint64 { return c.head + c.k }

// ReleaseFirst releases the first n descriptors returned by Peek since the
// last release, with the pads before and among them, and counts each as a
// completed transfer; the later ones stay unreleased. It returns how many
// descriptors (pads not counted) it released: fewer than n when fewer were
// peeked. It lets an engine give slots back only once the far side
// acknowledged their descriptors, while it goes on peeking at later ones.
func (c *Reader) ReleaseFirst(n int) int {
	c.Flush()
	done := 0
	var slots, count uint64
	pos := c.head
	for slots < c.k {
		w := c.r.word(pos).Load()
		k := uint64(uint16(w))
		pad := uint16(w>>16)&FlagPad != 0
		if !pad {
			if done == n {
				break
			}
			done++
		}
		for i := uint64(0); i < k; i++ {
			*(*uint64)(unsafe.Pointer(&c.r.slots[((pos+i)&c.r.mask)*SlotSize])) = 0
		}
		pos += k
		slots += k
		count++
	}
	if count == 0 {
		return 0
	}
	c.mark(c.head, pos, false)
	c.head = pos
	c.rel = pos
	c.k -= slots
	c.nd -= count
	c.publish(count)
	return done
}

// Release gives the slots of the descriptors returned by Next or Peek back to
// the producer and counts each of them (pads included) as a completed
// transfer; with them it releases those Consume left.
func (c *Reader) Release() {
	c.Consume()
	c.Flush()
}

// Consume ends the use of the descriptors returned by Next or Peek: it
// counts them (pads included) as completed transfers at once, as Release
// does, but leaves giving their slots back to the next Flush (or Release);
// reading goes on past them.
//
// A consumer that answers a message, then flushes, keeps the zeroing of the
// message's slot out of the answer's way. The slot's line was last written
// by the producer's core; zeroing it must take it back from there, and
// stores become visible in program order (amd64), so an answer stored
// after the zeroing waits for that exchange of a line before the producer
// can see it. The transfer counter is in the consumer's own line (the
// producer reads it only while it waits for a callback), so counting at
// once costs the answer nothing, and a producer's completions never wait
// for the consumer's next Flush: a consumer may stop reading for good
// right after Consume.
func (c *Reader) Consume() {
	c.head += c.k
	order.Store64(c.xf, c.xf.Load()+c.nd)
	c.k, c.nd = 0, 0
}

// Flush gives back the slots of the descriptors consumed since the last
// release: it zeroes the header word position of each slot and publishes
// head. It reports whether there were any.
func (c *Reader) Flush() bool {
	if c.rel == c.head {
		return false
	}
	return c.flush()
}

// flush is Flush with slots to give back, apart so that Flush inlines:
// a consumer calls it on every poll, mostly with nothing to give back.
func (c *Reader) flush() bool {
	// The ring's fields in locals: through the stores below the compiler
	// would otherwise load them again for every slot.
	slots, mask, end := c.r.slots, c.r.mask, c.head
	if uint64(len(slots)) < (mask+1)*SlotSize {
		panic("ring: slots shorter than the ring")
	}
	base := unsafe.Pointer(unsafe.SliceData(slots))
	lo := c.rel
	for i := range c.spans[:c.ns] {
		s := c.spans[i]
		c.zeroGap(base, mask, lo, s.lo)
		c.mark(s.lo, s.hi, true)
		lo = s.hi
	}
	c.ns = 0
	c.zeroGap(base, mask, lo, end)
	c.zlo, c.zhi = 0, 0
	c.rel = end
	c.large = false
	c.lk = 0
	order.Store64(c.hd, end)
	return true
}

// zeroGap zeroes the header word positions of [from, to) but those
// CopyOut zeroed, and marks them fresh.
func (c *Reader) zeroGap(base unsafe.Pointer, mask, from, to uint64) {
	if c.zhi != 0 && c.zlo < to && c.zhi > from {
		// CopyOut zeroed [zlo, zhi), which lies in [from, to).
		zeroSlots(base, mask, from, c.zlo)
		zeroSlots(base, mask, c.zhi, to)
	} else {
		zeroSlots(base, mask, from, to)
	}
	c.mark(from, to, false)
}

// LargePayload is the least payload of a descriptor of largeSlots slots:
// a payload shorter than that is never large (a ring of fewer than 1024
// slots calls smaller ones large too; CopiesOut says which).
const LargePayload = (largeSlots-1)*SlotSize - HeaderSize + 1

// Holds reports whether CopyOut may do more than copy: the last
// descriptor Take returned is large, or slots are left unzeroed until the
// give-back (SetKeep), which data copied out takes back.
func (c *Reader) Holds() bool { return c.lk != 0 || c.ns != 0 }

// CopiesOut reports whether CopyOut would zero as it copies: the last
// descriptor Take returned is large and not yet copied out.
func (c *Reader) CopiesOut() bool { return c.lk != 0 }

// copyChunk is how much CopyOut copies before it zeroes the header word
// positions of the slots it copied out of; half of it for a message
// shorter than two chunks (8 KiB and up to 16 KiB), which then gives its
// first half back while the second is copied: amibench -b bw moved 8 KiB
// 1.04-1.05x as fast in chunks of 4 KiB as in one of 8 (two runs of 6 and
// 8 interleaved rounds, one build), 16 KiB 0.98x (so it keeps 8); against
// the tree before, 8 KiB 1.04x in the host's fast state and 1.03x in the
// slow one, the other sizes 0.98-1.02x.
const copyChunk = 8 << 10

// CopyOut copies src into dst, as copy does (the way package memcopy
// picks for the size; below the string move's, prefetching into the next
// descriptor, see aheadOf), and returns the number of bytes copied. When src lies in the payload of the descriptor the last
// Take returned and that descriptor is large (largeSlots), it also zeroes
// the header word positions of the descriptor's slots after the first as
// it goes, 8 KiB at a time, so that the give-back that follows (the next
// Take or Flush) only publishes head; the bytes of src at those positions
// are then zero, so src must not be read again. Otherwise it is copy.
//
// # Why
//
// The give-back zeroes a word in every line of the descriptor, lines the
// consumer's core has read and must now own. After a copy of 16 KiB or
// more out of the ring (as much again into the destination) the first of
// those lines have left the level-1 cache (48 KiB here) by the time the
// give-back comes, and it fetched them again. Zeroing each 8 KiB as soon
// as it is copied finds them there: amibench -b bw (a handler that copies
// each message out, as MPI_Recv does) moved 16 KiB 1.04-1.08x as fast,
// 8 and 32 KiB as fast as before (interleaved rounds of 3000 windows,
// three builds of each tree laid out differently, see bench/MID_PATH.md).
func (c *Reader) CopyOut(dst, src []byte) int {
	n := min(len(dst), len(src))
	if c.ns != 0 && len(src) != 0 {
		// The data is read: its slots are zeroed at the give-back.
		s := c.spans[c.ns-1]
		first := uintptr(unsafe.Pointer(&c.r.slots[((s.lo-1)&c.r.mask)*SlotSize]))
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(src))); p > first && p < first+uintptr(s.hi-s.lo+1)*SlotSize {
			c.ns--
			c.left -= min(c.left, uint64(len(src)))
		}
	}
	if c.lk == 0 || len(src) == 0 {
		return copy(dst, src)
	}
	mask := c.r.mask
	first := unsafe.Pointer(unsafe.SliceData(c.r.slots[(c.lpos&mask)*SlotSize:]))
	from := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(src))) - uintptr(first))
	k := c.lk
	if from < HeaderSize || from >= k*SlotSize || uint64(len(src)) > k*SlotSize-from {
		return copy(dst, src)
	}
	// The header word position of the descriptor's slot j lies w =
	// j*SlotSize bytes past first, bytes [w-from, w-from+8) of src. w
	// starts at slot 1: the first slot's word is the descriptor's header.
	// Each pass zeroes the words wholly copied, w+8 <= from+end, that is
	// w < lim.
	w, last := uint64(SlotSize), k*SlotSize
	mv := memcopy.Movsb(n)
	chunk := copyChunk
	if n < 2*copyChunk {
		chunk = copyChunk / 2
	}
	ahead := 0
	if !mv {
		ahead = int(c.aheadOf(from))
	}
	for off := 0; off < n; {
		end := min(off+chunk, n)
		if mv {
			memcopy.Move(dst[off:end], src[off:end], true)
		} else {
			memcopy.MoveAhead(dst[off:end], src[off:end], ahead-off)
		}
		off = end
		lim := last
		if top := from + uint64(end); top < last+7 {
			lim = top - 7 // top > 8: src starts past the header
		}
		if w < lim {
			m := (lim - w + SlotSize - 1) / SlotSize
			zeroWords(unsafe.Add(first, w), uintptr(m))
			w += m * SlotSize
		}
	}
	if w < last {
		zeroWords(unsafe.Add(first, w), uintptr((last-w)/SlotSize))
	}
	c.zlo, c.zhi = c.lpos+1, c.lpos+k
	c.lk = 0
	return n
}

// aheadOf returns how many bytes from offset from of the large
// descriptor CopyOut is copying out of may be prefetched: up to the end of
// the descriptor after it when the producer has sealed that one (its
// header word is set), else up to the end of this one; never past the
// ring's end.
//
// # Why
//
// Below the string move's sizes CopyOut copies with memcopy.MoveAhead,
// which asks for the lines 4 KiB ahead of its reads. Within one message
// that gains nothing: what it gains is the first lines of the next
// message, which a copy starting cold waits for one by one. Lines of a
// descriptor not yet sealed are left alone, so that a prefetch never
// takes a line the producer is writing. amibench -b bw against Go's copy,
// interleaved rounds, each run counted in the state the floor probe read
// before and after it: 8 KiB 1.02x and 16 KiB 1.05x in the host's fast
// state (6 runs), 1.11x both in the slow one (4 runs); 4 and 32 KiB
// (not touched) 0.98-1.00x. The C probe (bench/probe/ring.c) showed the
// same: 16 KiB 1.16-1.19x in the slow state prefetching 4 KiB ahead up to
// the next descriptor's end, 0.96-1.04x prefetching only within the
// message, 1.0-1.1x in the fast state.
func (c *Reader) aheadOf(from uint64) uint64 {
	mask := c.r.mask
	end := c.lk * SlotSize
	next := c.lpos + c.lk
	if next&mask == 0 {
		return end - from
	}
	w := c.at(next)
	if w == 0 {
		return end - from
	}
	room := (mask + 1 - next&mask) * SlotSize
	return end + min(uint64(uint16(w))*SlotSize, room) - from
}

// zeroSlots zeroes the header word positions of the slots from position
// from up to to, in the ring of mask+1 slots at base, across its end if
// need be.
func zeroSlots(base unsafe.Pointer, mask, from, to uint64) {
	if from == to {
		return
	}
	i, n := from&mask, to-from
	if first := mask + 1 - i; n > first {
		zeroWords(unsafe.Add(base, i*SlotSize), uintptr(first))
		i, n = 0, n-first
	}
	zeroWords(unsafe.Add(base, i*SlotSize), uintptr(n))
}

// Unreleased returns the slots consumed and not yet released.
func (c *Reader) Unreleased() int { return int(c.head - c.rel) }

// Slots returns the number of slots of the reader's ring.
func (c *Reader) Slots() int { return int(c.r.n) }

// publish stores the new head, then adds n to the transfer counter. The
// consumer is the only writer of both, so the counter is a load and a
// store, not a read-modify-write: with release stores (package order)
// neither waits for the producer's core to give up the line.
func (c *Reader) publish(n uint64) {
	order.Store64(c.hd, c.rel)
	order.Store64(c.xf, c.xf.Load()+n)
}
