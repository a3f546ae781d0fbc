//go:build ofi

package ofi

/*
#include "amigo_ofi.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/transport"
)

// ErrSilent reports a peer that left a link waiting longer than
// Options.Timeout: an acknowledgement, an RDMA completion or an answer
// that did not come.
var ErrSilent = errors.New("peer silent")

// opKind is what an operation context stands for.
type opKind uint8

const (
	opFree opKind = iota
	opRecv        // a posted receive buffer (seq: its index)
	opSend        // a packet (seq: its number on the link)
	opRMA         // a GET or PUT (seq: its RDMA FIFO position)
	opCtrl        // a control message sent from a scratch slot (seq: the slot)
)

type opInfo struct {
	kind opKind
	l    *olink
	seq  uint64
}

// ctxStride is the room of one operation context: a struct fi_context2,
// which providers in FI_CONTEXT mode use as scratch.
const ctxStride = 64

// sendOps is the number of operation contexts a port has for transmits.
const sendOps = 4096

// ctrlSlots is the number of scratch slots for control messages too large
// to inject.
const ctrlSlots = 256

// port is a local context's endpoint and the links it initiates (outs)
// and takes (ins).
type port struct {
	a    *Adapter
	ctx  int
	addr transport.Addr
	bell *transport.Doorbell
	e    *endpoint
	pins runtime.Pinner // the port's memory the provider touches
	regs regCache       // local registrations of GET and PUT buffers

	ctxMem  []byte // operation contexts, ctxStride each
	ctxBase uintptr
	ops     []opInfo
	free    []int32

	rxMem   []byte // receive buffers, rxSize each
	bufSize int    // the largest message
	rxSize  int    // a posted receive buffer: bufSize, or several with multi
	nrx     int    // receive buffers posted (operations 0 to nrx-1)
	// With multi-receive buffers, a buffer goes back to the provider once
	// it said it is done with it (released) and no message in it waits in
	// pending (refs).
	multi    bool
	released []bool
	refs     []int
	rxDesc   uintptr
	rxMR     *C.struct_fid_mr

	ctrlMem  []byte // scratch for control messages: slot 0 for injects
	ctrlDesc uintptr
	ctrlMR   *C.struct_fid_mr
	ctrlFree []int32
	ctrlq    []ctrlMsg // control messages waiting for room

	outs    []*olink // by rank*contexts+context
	outList []*olink
	ins     []*inlink
	dirty   []*inlink // links in whose taken packets are not acknowledged

	// entries receives the receive queue's completions, txEntries the
	// transmit queue's: pinned, so that the calls that fill them pass
	// their addresses as numbers and cgo has no pointer to check (a check
	// that allocated on every call).
	entries       *[32]C.struct_fi_cq_data_entry
	entriesAddr   C.uintptr_t
	txEntries     *[32]C.struct_fi_cq_data_entry
	txEntriesAddr C.uintptr_t
	// direct calls the message path's C functions without cgo.
	direct directCalls
	// spin is how many more times progress reads the completion queues,
	// in the same call to C, when it found them empty while a link waits
	// for its peer (calibrateSpin).
	spin C.int
	// rxDry says that progress found the receive queue empty: the Poll
	// that follows it in the same Advance does not read it again.
	rxDry bool
	// pollRead says that a Poll read the receive queue since the last
	// Progress: the next Progress leaves it to the Poll that follows.
	pollRead bool
	// rxLeft says that a Progress left the receive queue to the Poll that
	// follows it, to spin there, and no Poll read it since.
	rxLeft bool
	// pending holds packets Progress found in the receive queue, for the
	// next Poll: their buffers stay taken until then.
	pending            []pendingMsg
	pendHead, pendTail uint64
	calls              uint64
	closed             atomic.Bool
	// yielded is when progress last gave the processor to the Go
	// scheduler (yieldEvery).
	yielded time.Time

	// state says who works on the port, in its low two bits: 0 nobody,
	// 1 its context (Poll, Progress: depth counts nested calls), 2 the
	// adapter's watcher in its place; it orders each side's work after
	// the other's. The bits above count the context's turns, which tell
	// the watcher whether the context polls. turn is state while the
	// context holds the port.
	state     atomic.Uint64
	turn      uint64
	depth     int
	ownBell   bool      // the doorbell is the adapter's (Doorbell)
	lastPolls uint64    // the watcher's: the turns it saw last
	pollCount uint64    // Poll calls (flushAcks)
	idleSince time.Time // the watcher saw no Poll or Progress since
	lastAlive time.Time // the watcher's last heartbeat
}

type ctrlMsg struct {
	dest C.fi_addr_t
	n    int
	b    [ctrlMax]byte
}

// inlink is what a port knows of a peer context that sends to it.
type inlink struct {
	from    transport.Addr
	dest    C.fi_addr_t
	taken   uint64 // packets handed to the receiver
	acked   uint64 // packets acknowledged
	dirty   bool
	takenAt uint64 // the last Poll that took packets of the peer
	before  uint64 // packets taken before that Poll
	closed  bool   // the peer's goodbye was handled: nothing more is delivered
	gone    bool   // the peer's goodbye was read: nothing more is sent to it
}

// pinnedBytes returns n bytes of zeroed, 64-byte aligned Go memory pinned
// by pin: the provider may keep its address until pin is unpinned. Every
// page of it is mapped (touchPages).
func pinnedBytes(pin *runtime.Pinner, n int) []byte {
	words := make([]uint64, (n+127)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	off := (64 - int(uintptr(unsafe.Pointer(&b[0]))&63)) & 63
	b = b[off : off+n : off+n]
	pin.Pin(unsafe.Pointer(&words[0]))
	touchPages(b)
	return b
}

// touchPages writes every page of b once, so that its pages are mapped
// before messages pass through them.
//
// # Why
//
// A large Go allocation takes fresh pages from the system, mapped at
// their first write. The multi-receive buffers (2 MiB a port by default
// over shm) fill one small message after the other: untouched, the first
// pass through them took a page fault every few dozen messages, each as
// long as a few of them, on the message path of both ranks (8-byte
// latency runs of 10,000 round trips, as osu_latency runs them, read up
// to 7% longer; bench/ofi/LATENCY.md).
//
// The steps go from page boundary to page boundary, not by 4096 from
// b[0]: a buffer that starts partway into a page can end in a page that
// such steps pass over.
func touchPages(b []byte) {
	if len(b) == 0 {
		return
	}
	const page = 4096
	for i := 0; i < len(b); i += page - int((addrOf(b)+uintptr(i))%page) {
		b[i] = 0
	}
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

func newPort(a *Adapter, ctx int, bell *transport.Doorbell) (*port, error) {
	nctx := a.opts.Contexts
	p := &port{
		a:       a,
		ctx:     ctx,
		addr:    transport.Addr{Rank: int32(a.rank), Context: int32(ctx)},
		bell:    bell,
		e:       a.eps[ctx],
		bufSize: hdrSize + a.maxPacket,
		outs:    make([]*olink, a.size*nctx),
		ins:     make([]*inlink, a.size*nctx),
		pending: make([]pendingMsg, a.opts.RecvBuffers),
	}
	nbuf := a.opts.RecvBuffers
	p.rxSize, p.multi = p.bufSize, a.multi
	if p.multi {
		// The same memory as RecvBuffers single buffers, in a few large
		// ones that take messages one after the other.
		per := max(nbuf/multiBuffers, 2)
		nbuf = max(nbuf/per, 2)
		p.rxSize = per * p.bufSize
		p.released, p.refs = make([]bool, nbuf), make([]int, nbuf)
	}
	p.nrx = nbuf
	nops := nbuf + sendOps
	em := pinnedBytes(&p.pins, int(unsafe.Sizeof(*p.entries)))
	p.entries = (*[32]C.struct_fi_cq_data_entry)(unsafe.Pointer(&em[0]))
	p.entriesAddr = C.uintptr_t(addrOf(em))
	tm := pinnedBytes(&p.pins, int(unsafe.Sizeof(*p.txEntries)))
	p.txEntries = (*[32]C.struct_fi_cq_data_entry)(unsafe.Pointer(&tm[0]))
	p.txEntriesAddr = C.uintptr_t(addrOf(tm))
	p.ctxMem = pinnedBytes(&p.pins, nops*ctxStride)
	p.ctxBase = addrOf(p.ctxMem)
	p.ops = make([]opInfo, nops)
	p.free = make([]int32, 0, sendOps)
	for i := nops - 1; i >= nbuf; i-- {
		p.free = append(p.free, int32(i))
	}
	p.rxMem = pinnedBytes(&p.pins, nbuf*p.rxSize)
	p.ctrlMem = pinnedBytes(&p.pins, ctrlSlots*ctrlMax)
	for i := ctrlSlots - 1; i >= 1; i-- {
		p.ctrlFree = append(p.ctrlFree, int32(i))
	}
	if a.mrMode&C.FI_MR_LOCAL != 0 {
		var err error
		if p.rxMR, p.rxDesc, err = p.registerLocal(p.rxMem, C.FI_RECV); err != nil {
			p.release()
			return nil, err
		}
		if p.ctrlMR, p.ctrlDesc, err = p.registerLocal(p.ctrlMem, C.FI_SEND); err != nil {
			p.release()
			return nil, err
		}
	}
	p.calibrateSpin()
	if !a.opts.CgoCalls && p.spin > 0 {
		// Where a look at the queues reads memory (the port spins):
		// over a provider whose progress makes system calls and moves
		// data in the call (tcp), a call is long enough for cgo's cost
		// not to matter, and should let the scheduler have the thread.
		p.direct.open(&p.pins)
	}
	for i := 0; i < nbuf; i++ {
		p.ops[i] = opInfo{kind: opRecv, seq: uint64(i)}
		if err := p.postRecv(i); err != nil {
			p.release()
			return nil, fmt.Errorf("ofi: post receive buffer: %w", err)
		}
	}
	return p, nil
}

// spinBudget bounds the time progress spends in one call reading the
// completion queues of a port that waits for its peer (port.spin): other
// ports of the context, and instructions posted to it, wait that long at
// most.
const spinBudget = 500 * time.Nanosecond

// maxSpin bounds port.spin.
const maxSpin = 64

// calibrateSpin sets how many reads of the completion queues fit in
// spinBudget: dozens where a read looks at memory (shm), none where it is
// a system call (tcp), which the progress loop makes as often anyway. The
// fastest of a few timings counts: a slow one was interrupted.
func (p *port) calibrateSpin() {
	const reads = 64
	best := time.Hour
	for k := 0; k < 4; k++ {
		t := time.Now()
		C.amigo_cq_cost(p.e.rxh, reads)
		best = min(best, time.Since(t))
	}
	per := max(best/reads, time.Nanosecond)
	p.spin = C.int(min(int(spinBudget/per)-1, maxSpin))
	if p.spin < 0 {
		p.spin = 0
	}
}

// registerLocal registers memory the port hands the provider, for
// providers that ask it (FI_MR_LOCAL).
func (p *port) registerLocal(b []byte, access uint64) (*C.struct_fid_mr, uintptr, error) {
	var mr *C.struct_fid_mr
	var key C.uint64_t
	var desc C.uintptr_t
	a := p.a
	k := a.nextKey.Add(1)
	rc := C.amigo_mr_reg(a.dom, p.e.ep, C.uintptr_t(addrOf(b)), C.size_t(len(b)), C.uint64_t(access), C.uint64_t(k),
		boolInt(a.mrMode&C.FI_MR_ENDPOINT != 0), &mr, &key, &desc)
	if rc != 0 {
		return nil, 0, fiErr("fi_mr_reg", C.ssize_t(rc))
	}
	return mr, uintptr(desc), nil
}

func (p *port) opCtx(i int32) C.uintptr_t { return C.uintptr_t(p.ctxBase + uintptr(i)*ctxStride) }

// opIndex returns the operation whose context a completion names, or -1.
func (p *port) opIndex(ctx uintptr) int {
	off := ctx - p.ctxBase
	if ctx < p.ctxBase || off%ctxStride != 0 || off/ctxStride >= uintptr(len(p.ops)) {
		return -1
	}
	return int(off / ctxStride)
}

func (p *port) allocOp(kind opKind, l *olink, seq uint64) int32 {
	n := len(p.free)
	if n == 0 {
		return -1
	}
	i := p.free[n-1]
	p.free = p.free[:n-1]
	p.ops[i] = opInfo{kind: kind, l: l, seq: seq}
	return i
}

func (p *port) freeOp(i int) {
	p.ops[i] = opInfo{}
	p.free = append(p.free, int32(i))
}

func (p *port) postRecv(i int) error {
	for {
		buf := C.uintptr_t(addrOf(p.rxMem) + uintptr(i*p.rxSize))
		var rc C.ssize_t
		if p.multi {
			rc = C.amigo_recv_multi(p.e.ep, buf, C.size_t(p.rxSize), C.uintptr_t(p.rxDesc), p.opCtx(int32(i)))
		} else {
			rc = C.amigo_recv(p.e.ep, buf, C.size_t(p.rxSize), C.uintptr_t(p.rxDesc), p.opCtx(int32(i)))
		}
		if rc == errAgain {
			// The receive queue is full only while completions wait to
			// be read; reading them makes room.
			p.readTx()
			runtime.Gosched()
			continue
		}
		return fiErr("fi_recv", rc)
	}
}

func (p *port) index(a transport.Addr) int { return int(a.Rank)*p.a.opts.Contexts + int(a.Context) }

// Link returns the link to the context to, creating it on first use.
func (p *port) Link(to transport.Addr) (*transport.Link, error) {
	p.enter()
	defer p.leave()
	if to.Rank >= 0 && int(to.Rank) < p.a.size && to.Context >= 0 && int(to.Context) < p.a.opts.Contexts {
		if l := p.outs[p.index(to)]; l != nil {
			return l.l, nil
		}
	}
	if p.closed.Load() {
		return nil, transport.ErrClosed
	}
	if int(to.Rank) == p.a.rank || !p.a.Reaches(int(to.Rank)) {
		return nil, &transport.PeerError{Addr: to, Err: transport.ErrUnreachable}
	}
	dest, err := p.a.fiAddr(to)
	if err != nil {
		return nil, err
	}
	l, err := newOlink(p, to, dest)
	if err != nil {
		return nil, err
	}
	p.outs[p.index(to)] = l
	p.outList = append(p.outList, l)
	return l.l, nil
}

// inlink returns the record of the peer context that sent h, making it
// on the first message; nil for a sender that is no rank of the job.
func (p *port) inlink(h header) *inlink {
	if int(h.rank) >= p.a.size || int(h.ctx) >= p.a.opts.Contexts || int(h.rank) == p.a.rank {
		return nil
	}
	from := transport.Addr{Rank: int32(h.rank), Context: int32(h.ctx)}
	i := p.index(from)
	if in := p.ins[i]; in != nil {
		return in
	}
	dest, err := p.a.fiAddr(from)
	if err != nil {
		return nil
	}
	in := &inlink{from: from, dest: dest}
	p.ins[i] = in
	return in
}

// Poll hands up to budget arrived packets to r, serves the requests of
// peers that arrived with them, and acknowledges what it delivered.
// Packets that Progress found come first.
//
// Where the port spins on its queues (port.spin), Poll reads the receive
// queue itself (Progress leaves it to Poll, see progress) and hands what
// it finds to r at once; a port that delivered nothing and waits for its
// peer spins on the queue in the same call to C, so that a packet that
// arrives during the spin reaches its handler without a pass of the
// AMI's progress loop in between.
func (p *port) Poll(r transport.Receiver, budget int) int {
	if p.closed.Load() {
		return 0
	}
	p.enter()
	defer p.leave()
	p.kickIfSlow()
	p.pollCount++
	dry := p.rxDry
	p.rxDry = false
	got := 0
	for got < budget && p.pendHead != p.pendTail {
		pm := p.pending[p.pendHead%uint64(len(p.pending))]
		p.pendHead++
		if p.multi {
			p.refs[pm.i]--
		}
		got += p.deliver(r, pm)
	}
	if p.pendHead == p.pendTail && !dry && got < budget {
		spin := C.int(0)
		if got == 0 && p.spin > 0 && p.expecting() {
			spin = p.spin
		}
		p.rxLeft = false
		g, _ := p.readRx(r, budget-got, spin)
		got += g
		// Where the port spins (a read of its queues looks at memory),
		// the next Progress leaves the receive queue to the next Poll.
		// Where a read is a system call (tcp;ofi_rxm), Progress keeps
		// reading both queues in one call, right after what it posted,
		// and this Poll is skipped when that found nothing.
		p.pollRead = p.spin > 0
	}
	if got > 0 {
		// A handler's reply leaves now, carrying the acknowledgement of
		// what this Poll took, instead of at the next Progress, after the
		// rest of the AMI's pass.
		for _, l := range p.outList {
			l.postPackets()
		}
	}
	p.flushAcks(false)
	p.flushCtrl()
	return got
}

// readRx reads the receive queue: up to budget packets go to r (or, with
// r nil, wait in pending for Poll); control messages are handled at once.
// The first read spins up to spin more times while the queue is empty
// (amigo_cq_read2). It reports whether it found the queue empty.
func (p *port) readRx(r transport.Receiver, budget int, spin C.int) (int, bool) {
	got := 0
	for got < budget {
		want := min(budget-got, len(p.entries))
		v := p.cqRead2(0, 0, 0, p.e.rxh, p.entriesAddr, C.size_t(want), spin)
		n := int(int32(uint64(v) >> 32))
		spin = 0
		if n <= 0 {
			if n == -C.FI_EAVAIL {
				p.readErr(p.e.rxcq)
				continue
			}
			return got, n == errAgain
		}
		got += p.takeRx(r, n)
		if n < want {
			// The queue held fewer than asked: it was empty after them.
			// Reading it again would cost a call (a system call where
			// the provider's progress is one) on the way of a reply.
			return got, true
		}
	}
	return got, false
}

// takeRx handles the first n entries of the receive queue's completions:
// packets go to r (or, with r nil, wait in pending for Poll), control
// messages are handled at once. It returns the packets taken.
func (p *port) takeRx(r transport.Receiver, n int) int {
	got := 0
	for k := 0; k < n; k++ {
		e := &p.entries[k]
		i := p.opIndex(uintptr(e.op_context))
		if i < 0 || p.ops[i].kind != opRecv {
			p.a.opts.Logf("rank %d: receive completion of no posted buffer", p.a.rank)
			continue
		}
		m := p.rxMsg(i, e)
		if r == nil && m.n > 0 {
			msg := m.bytes(p)
			// Packets wait for Poll; so does a goodbye behind them,
			// which must not close the peer's link before its last
			// packets are delivered.
			if msg[0] == kindPacket || msg[0] == kindBye && p.pendTail != p.pendHead {
				if msg[0] == kindBye {
					if h, err := parseHeader(msg); err == nil {
						if in := p.inlink(h); in != nil {
							p.leaving(in)
						}
					}
				}
				p.pending[p.pendTail%uint64(len(p.pending))] = m
				p.pendTail++
				if p.multi {
					p.refs[i]++
				}
				got++
				continue
			}
		}
		got += p.deliver(r, m)
	}
	return got
}

// pendingMsg is a message in receive buffer i, at off in rxMem, n bytes.
type pendingMsg struct{ i, off, n int }

func (m pendingMsg) bytes(p *port) []byte { return p.rxMem[m.off : m.off+m.n] }

// multiBuffers is the number of multi-receive buffers a port posts (of
// RecvBuffers messages' room in all), where the provider has them.
const multiBuffers = 4

// rxMsg locates the message of receive completion e in buffer i: at the
// start of a single buffer, where the provider says within a multi-receive
// one. A completion that only gives a multi-receive buffer back (no
// message) marks it released and has n 0; so does one whose place is not
// inside its buffer (then refused).
func (p *port) rxMsg(i int, e *C.struct_fi_cq_data_entry) pendingMsg {
	n := min(int(e.len), p.bufSize)
	if !p.multi {
		return pendingMsg{i, i * p.rxSize, n}
	}
	if e.flags&C.FI_MULTI_RECV != 0 {
		p.released[i] = true
	}
	if n == 0 || e.buf == nil {
		return pendingMsg{i, 0, 0}
	}
	off := int(uintptr(e.buf) - addrOf(p.rxMem))
	if off < i*p.rxSize || off+n > (i+1)*p.rxSize {
		p.a.opts.Logf("rank %d context %d: a receive completion outside its buffer", p.a.rank, p.ctx)
		return pendingMsg{i, 0, 0}
	}
	return pendingMsg{i, off, n}
}

// rxDone gives receive buffer i back to the provider once the message
// handled was the last that held it.
func (p *port) rxDone(i int) {
	if p.multi {
		if !p.released[i] || p.refs[i] > 0 {
			return
		}
		p.released[i] = false
	}
	if err := p.postRecv(i); err != nil {
		p.a.opts.Logf("rank %d: %v", p.a.rank, err)
	}
}

// deliver handles message m and gives its buffer back if that is due.
func (p *port) deliver(r transport.Receiver, m pendingMsg) int {
	got := 0
	if m.n > 0 {
		got = p.handle(r, m.bytes(p))
	}
	p.rxDone(m.i)
	return got
}

func (p *port) handle(r transport.Receiver, msg []byte) int {
	h, err := parseHeader(msg)
	if err == nil && h.kind != kindPacket && (int(h.kind) >= len(bodyLen) || len(msg) < hdrSize+bodyLen[h.kind]) {
		err = fmt.Errorf("message of kind %d and %d bytes", h.kind, len(msg))
	}
	var in *inlink
	if err == nil {
		if in = p.inlink(h); in == nil {
			err = fmt.Errorf("sender rank %d context %d", h.rank, h.ctx)
		}
	}
	if err != nil {
		p.a.opts.Logf("rank %d context %d: refused a message: %v", p.a.rank, p.ctx, err)
		return 0
	}
	body := msg[hdrSize:]
	switch h.kind {
	case kindPacket:
		if in.closed {
			return 0
		}
		if h.arg != 0 {
			// The acknowledgement it carries (post).
			if l := p.outs[p.index(in.from)]; l != nil {
				l.ack(h.arg)
			}
		}
		// Counted taken before its handler runs: a reply the handler
		// sends, which the link's Push may post at once, carries its
		// acknowledgement.
		if in.takenAt != p.pollCount {
			in.takenAt, in.before = p.pollCount, in.taken
		}
		in.taken++
		if !in.dirty {
			in.dirty = true
			p.dirty = append(p.dirty, in)
		}
		r.Receive(in.from, body)
		return 1
	case kindKeyReq:
		base, length, mrkey, perm, st := p.a.resolve(transport.Key(h.arg), p.ctx)
		var b [32]byte
		putKeyBody(b[:], base, length, mrkey, uint8(perm))
		if !in.gone {
			p.queueCtrl(in.dest, header{kind: kindKeyRep, status: st, arg: h.arg}, b[:])
		}
	case kindAtomReq:
		old, st := p.atomic(body)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], old)
		if !in.gone {
			p.queueCtrl(in.dest, header{kind: kindAtomRep, status: st, arg: h.arg}, b[:])
		}
	}
	if l := p.outs[p.index(in.from)]; l != nil {
		switch h.kind {
		case kindAck:
			l.ack(h.arg)
		case kindKeyRep:
			l.keyAnswer(h, body)
		case kindAtomRep:
			l.atomAnswer(h, body)
		case kindAlive:
			l.moves++ // heard from: not silent
		}
	}
	if h.kind == kindBye {
		p.leaving(in)
		in.closed = true
	}
	return 0
}

// leaving takes note of the goodbye of the peer of in, read from the
// queue (it may wait in pending behind the peer's last packets, which are
// still delivered): nothing is written to the peer again — its endpoint
// may be gone, and with it, for a provider in one process, the memory a
// message to it would be written into — and the link to it fails. What the
// peer acknowledged before it went was delivered, whether or not the
// provider reported the send complete yet: it counts transferred (the link
// writes nothing more, and its memory stays pinned until the port closes).
func (p *port) leaving(in *inlink) {
	if in.gone {
		return
	}
	in.gone = true
	if l := p.outs[p.index(in.from)]; l != nil {
		if k := l.acked; k > l.released {
			l.released += uint64(l.rd.ReleaseFirst(int(k - l.released)))
		}
		l.fail(&transport.PeerError{Addr: l.to, Err: transport.ErrClosed})
	}
}

// atomic performs a peer's atomic on this rank's registered memory.
func (p *port) atomic(body []byte) (uint64, uint8) {
	key := transport.Key(binary.LittleEndian.Uint64(body[0:]))
	off := binary.LittleEndian.Uint64(body[8:])
	operand := binary.LittleEndian.Uint64(body[16:])
	compare := binary.LittleEndian.Uint64(body[24:])
	op, width := transport.AtomicOp(body[32]), int(body[33])
	if transport.CheckAtomic(op, width) != nil {
		return 0, stBadAtomic
	}
	mem, acc, err := p.a.regions.AcquireFor(key, off, uint64(width), transport.PermAtomic)
	if err != nil {
		return 0, status(err)
	}
	old, err := transport.ApplyChecked(mem, op, width, operand, compare)
	acc.Release()
	if err != nil {
		return 0, status(err)
	}
	return old, stOK
}

func status(err error) uint8 {
	switch {
	case errors.Is(err, transport.ErrBounds):
		return stBounds
	case errors.Is(err, transport.ErrPermission):
		return stPerm
	case errors.Is(err, transport.ErrMisaligned):
		return stMisaligned
	case errors.Is(err, transport.ErrBadAtomic):
		return stBadAtomic
	case errors.Is(err, transport.ErrClosed):
		return stClosed
	}
	return stBadKey
}

var statusErr = [...]error{stBadKey: transport.ErrBadKey, stBounds: transport.ErrBounds, stPerm: transport.ErrPermission,
	stMisaligned: transport.ErrMisaligned, stBadAtomic: transport.ErrBadAtomic, stClosed: transport.ErrClosed}

func statusError(st uint8) error {
	if st == stOK || int(st) >= len(statusErr) {
		return transport.ErrCorrupt
	}
	return statusErr[st]
}

// flushAcks tells each peer how many of its packets the context took.
//
// Unless force is set, it leaves for one Poll the acknowledgements of
// packets this Poll took: a reply the context sends in between (the
// next Advance injects it before it polls again) carries them (post),
// which spares a request–reply exchange two messages. Packets taken
// earlier are acknowledged now, without those of this Poll: an
// acknowledgement must not overtake the reply a handler caused (a
// sender that learns its announcement was taken before the receiver's
// STOP arrives starts streaming data the receiver then drops). A backlog
// of ackBatch packets is acknowledged at once, and the watcher forces
// what is left when the context stops polling.
func (p *port) flushAcks(force bool) {
	kept := p.dirty[:0]
	for _, in := range p.dirty {
		if in.acked == in.taken && !in.gone {
			in.dirty = false
			continue
		}
		if !force && !in.gone && in.takenAt == p.pollCount && in.taken-in.acked < ackBatch {
			if in.before > in.acked && p.sendCtrl(in.dest, header{kind: kindAck, arg: in.before}, nil) {
				in.acked = in.before
			}
			kept = append(kept, in)
			continue
		}
		if in.gone || p.sendCtrl(in.dest, header{kind: kindAck, arg: in.taken}, nil) {
			in.acked = in.taken
			in.dirty = false
			continue
		}
		kept = append(kept, in)
	}
	p.dirty = kept
}

// queueCtrl sends a control message now, or once the provider has room.
func (p *port) queueCtrl(dest C.fi_addr_t, h header, body []byte) {
	if len(p.ctrlq) == 0 && p.sendCtrl(dest, h, body) {
		return
	}
	m := ctrlMsg{dest: dest, n: hdrSize + len(body)}
	h.rank, h.ctx = uint32(p.a.rank), uint16(p.ctx)
	putHeader(m.b[:], h)
	copy(m.b[hdrSize:], body)
	p.ctrlq = append(p.ctrlq, m)
}

func (p *port) flushCtrl() {
	sent := 0
	for sent < len(p.ctrlq) {
		m := &p.ctrlq[sent]
		if !p.sendRaw(m.dest, m.b[:m.n]) {
			break
		}
		sent++
	}
	if sent > 0 {
		n := copy(p.ctrlq, p.ctrlq[sent:])
		p.ctrlq = p.ctrlq[:n]
	}
}

// sendCtrl sends a control message and reports whether the provider took
// it.
func (p *port) sendCtrl(dest C.fi_addr_t, h header, body []byte) bool {
	var b [ctrlMax]byte
	h.rank, h.ctx = uint32(p.a.rank), uint16(p.ctx)
	putHeader(b[:], h)
	n := copy(b[hdrSize:], body)
	return p.sendRaw(dest, b[:hdrSize+n])
}

func (p *port) sendRaw(dest C.fi_addr_t, msg []byte) bool {
	if len(msg) <= p.a.injectSize {
		copy(p.ctrlMem, msg)
		rc := C.amigo_inject(p.e.ep, C.uintptr_t(addrOf(p.ctrlMem)), C.size_t(len(msg)), 0, 0, dest)
		if rc == errAgain {
			return false
		}
		if rc < 0 {
			p.a.opts.Logf("rank %d context %d: control message: %v", p.a.rank, p.ctx, fiErr("fi_inject", rc))
		}
		return true
	}
	n := len(p.ctrlFree)
	if n == 0 {
		return false
	}
	slot := p.ctrlFree[n-1]
	op := p.allocOp(opCtrl, nil, uint64(slot))
	if op < 0 {
		return false
	}
	p.ctrlFree = p.ctrlFree[:n-1]
	buf := p.ctrlMem[int(slot)*ctrlMax : int(slot+1)*ctrlMax]
	copy(buf, msg)
	rc := C.amigo_send(p.e.ep, C.uintptr_t(addrOf(buf)), C.size_t(len(msg)), C.uintptr_t(p.ctrlDesc), 0, 0, 0, dest, p.opCtx(op))
	if rc == errAgain {
		p.freeOp(int(op))
		p.ctrlFree = append(p.ctrlFree, slot)
		return false
	}
	if rc < 0 {
		p.freeOp(int(op))
		p.ctrlFree = append(p.ctrlFree, slot)
		p.a.opts.Logf("rank %d context %d: control message: %v", p.a.rank, p.ctx, fiErr("fi_send", rc))
	}
	return true
}

// Progress posts what the context injected, reads the completions of its
// transmits and completes its RDMA descriptors in order.
func (p *port) Progress() int {
	if p.closed.Load() {
		return 0
	}
	p.enter()
	defer p.leave()
	return p.progress()
}

// Owners of a port (port.state).
const (
	ownerMask    = 3
	ownerContext = 1
	ownerWatcher = 2
	turnOne      = 4 // one turn of the context, above the owner's bits
)

// enter takes the port for its context, waiting for the watcher to finish
// a turn if it has one. Taking it is one compare-and-swap, and giving it
// back (leave) one release store: the context takes its port twice in
// every Advance, the watcher once a tick.
func (p *port) enter() {
	if p.depth++; p.depth == 1 {
		for {
			s := p.state.Load()
			if s&ownerMask == 0 && p.state.CompareAndSwap(s, s+turnOne+ownerContext) {
				p.turn = s + turnOne + ownerContext
				return
			}
			runtime.Gosched()
		}
	}
}

func (p *port) leave() {
	if p.depth--; p.depth == 0 {
		order.Store64(&p.state, p.turn-ownerContext)
	}
}

// watcherTake takes the port for the adapter's watcher if nobody has it,
// and returns the state to give back (watcherGive) and the context's
// turns so far.
func (p *port) watcherTake() (s uint64, ok bool) {
	s = p.state.Load()
	return s, s&ownerMask == 0 && p.state.CompareAndSwap(s, s+ownerWatcher)
}

func (p *port) watcherGive(s uint64) { p.state.Store(s) }

// progress is Progress, on the port taken.
//
// It posts the packets the AMI wrote and the RDMA descriptors it
// published first, before it looks at the completion queues: a reply
// leaves without waiting for a read of the queues, and a GET or PUT the
// provider performed inside its call completes in this pass. Then it
// reads both queues in one call to C (each call costs more than reading
// an empty queue): the transmit queue only while an
// operation that completes there is outstanding (an injected message has
// no completion; a read of either queue makes the provider progress the
// endpoint), the receive queue while pending has room: acknowledgements
// and answers are handled at once, packets wait for Poll. Last, the links
// give back what was acknowledged, post the RDMA descriptors the answers
// just read let through, and complete their RDMA descriptors.
func (p *port) progress() int {
	n := 0
	for _, l := range p.outList {
		n += l.postPackets()
		// RDMA goes to the provider before the queues are read: a
		// provider that performs a GET or PUT inside the call (shm copies
		// by cross-memory attach in fi_read and fi_write) has its
		// completion in the queue for this very read, not the next pass's.
		if !l.failed {
			n += l.issueRDMA()
		}
	}
	room := len(p.pending) - int(p.pendTail-p.pendHead)
	ntx, nrx := 0, min(room, len(p.entries))
	if len(p.free) < sendOps {
		ntx = len(p.txEntries)
	}
	if p.pollRead {
		// A Poll read the receive queue since the last Progress, and the
		// AMI's next Poll follows this Progress: the receive queue is
		// left to it, which hands the packets it finds to their handlers
		// at once instead of through pending.
		nrx = 0
		p.pollRead = false
	}
	if nrx > 0 && n == 0 && p.spin > 0 && !p.rxLeft && p.expecting() {
		// A port that waits for its peer spins on the receive queue in
		// the Poll that follows, which hands a packet it finds to its
		// handler at once; read here, it would wait in pending for that
		// Poll, through the rest of this pass. A Progress that finds the
		// queue still left to a Poll (none read it since) reads it: a
		// caller that only calls Progress (a flush) still gets its
		// acknowledgements.
		nrx = 0
		p.rxLeft, p.rxDry = true, false
	}
	if ntx > 0 || nrx > 0 {
		// A port that posted nothing and waits for its peer (an answer,
		// an acknowledgement, a completion) spins on its queues in C,
		// unless a Poll reads them next (it spins there).
		spin := C.int(0)
		if n == 0 && nrx > 0 && p.spin > 0 && p.expecting() {
			spin = p.spin
		}
		if nrx > 0 {
			p.rxLeft = false
		}
		v := p.cqRead2(p.e.txh, p.txEntriesAddr, C.size_t(ntx), p.e.rxh, p.entriesAddr, C.size_t(nrx), spin)
		tx, rx := int(int32(uint32(v))), int(int32(uint64(v)>>32))
		if tx > 0 {
			n += p.takeTx(tx)
		}
		if ntx > 0 && (tx == ntx || tx == -C.FI_EAVAIL) {
			n += p.readTx()
		}
		switch {
		case nrx == 0:
		case rx > 0:
			got := p.takeRx(nil, rx)
			n += got
			p.rxDry = rx < nrx
			if rx == nrx && got < room {
				g, dry := p.readRx(nil, room-got, 0)
				n += g
				p.rxDry = dry
			}
		case rx == -C.FI_EAVAIL:
			p.readErr(p.e.rxcq)
			g, dry := p.readRx(nil, room, 0)
			n += g
			p.rxDry = dry
		case rx == errAgain:
			p.rxDry = true
		}
	}
	if len(p.ctrlq) > 0 {
		p.flushCtrl()
	}
	for _, l := range p.outList {
		n += l.settle()
	}
	p.calls++
	if p.calls&15 == 0 {
		now := time.Now()
		p.checkSilence(now)
		if now.Sub(p.yielded) >= yieldEvery {
			p.yielded = now
			runtime.Gosched()
		}
	}
	return n
}

// yieldEvery is how often a context that keeps progressing the port goes
// through the Go scheduler (runtime.Gosched). A goroutine that runs for
// 10 ms without doing so is preempted by the runtime's monitor (sysmon);
// caught in a call to C, as a polling port mostly is, it loses its P to
// another thread and, on its return, waits for a P again, which may be on
// another thread; and the monitor, having taken a P, goes back to waking
// every 20 us for a millisecond and more, on processors the ranks' polling
// keeps busy. Yielding first keeps the monitor asleep (its wake-ups fell
// from some 2,300 a second a rank).
const yieldEvery = 2 * time.Millisecond

// expecting reports whether a link of the port waits for its peer.
func (p *port) expecting() bool {
	for _, l := range p.outList {
		if !l.failed && l.waiting() {
			return true
		}
	}
	return false
}

// readTx reads the transmit completion queue.
func (p *port) readTx() int {
	done := 0
	for {
		n := C.amigo_cq_read(p.e.txh, p.txEntriesAddr, C.size_t(len(p.txEntries)))
		if n <= 0 {
			if n == -C.FI_EAVAIL {
				p.readErr(p.e.txcq)
				continue
			}
			return done
		}
		done += p.takeTx(int(n))
	}
}

// takeTx ends the operations of the first n entries of the transmit
// queue's completions.
func (p *port) takeTx(n int) int {
	for i := 0; i < n; i++ {
		p.completed(p.opIndex(uintptr(p.txEntries[i].op_context)), nil)
	}
	return n
}

// readErr reads one error completion and fails what it names.
func (p *port) readErr(cq *C.struct_fid_cq) {
	var ctx C.uintptr_t
	var code, perr C.int
	if rc := C.amigo_cq_readerr(cq, &ctx, &code, &perr); rc < 0 {
		return
	}
	i := p.opIndex(uintptr(ctx))
	err := &fiError{call: "completion", code: int(code)}
	if i >= 0 && p.ops[i].kind == opRecv {
		if code != C.FI_ECANCELED && !p.closed.Load() {
			p.a.opts.Logf("rank %d context %d: receive: %v", p.a.rank, p.ctx, err)
			_ = p.postRecv(i)
		}
		return
	}
	p.completed(i, err)
}

// completed ends transmit operation i.
func (p *port) completed(i int, err error) {
	if i < 0 || i >= len(p.ops) {
		return
	}
	op := p.ops[i]
	switch op.kind {
	case opSend:
		op.l.sent(op.seq, err)
	case opRMA:
		op.l.rmaDone(op.seq, err)
	case opCtrl:
		p.ctrlFree = append(p.ctrlFree, int32(op.seq))
	default:
		return
	}
	p.freeOp(i)
}

// heartbeat tells every peer that sent to this port that the rank lives,
// when the port's owner has not polled for a quarter of Options.Timeout
// (it computes, or sleeps in something else): their links wait for
// acknowledgements only Poll sends, and would otherwise take the silence
// for death. It runs on the watcher, the port taken, at most once per
// quarter timeout.
func (p *port) heartbeat(now time.Time) {
	q := p.a.opts.Timeout / 4
	if now.Sub(p.idleSince) < q || now.Sub(p.lastAlive) < q {
		return
	}
	p.lastAlive = now
	for _, in := range p.ins {
		if in != nil && !in.gone {
			p.queueCtrl(in.dest, header{kind: kindAlive}, nil)
		}
	}
	p.flushCtrl()
}

// checkSilence fails the links whose peer kept them waiting longer than
// Options.Timeout.
func (p *port) checkSilence(now time.Time) {
	for _, l := range p.outList {
		l.checkSilence(now)
	}
}

// learn records the sender of a message that arrived before Close, and
// its goodbye: a peer that said goodbye is not written to again (its
// endpoint may be gone, and with it, for a provider in one process, the
// memory a message to it would be written into).
func (p *port) learn(msg []byte) {
	h, err := parseHeader(msg)
	if err != nil {
		return
	}
	in := p.inlink(h)
	if in == nil || h.kind != kindBye {
		return
	}
	p.leaving(in)
	in.closed = true
}

// ackBatch is the backlog of packets taken from a peer that Poll
// acknowledges at once, without waiting for a reply to carry it.
const ackBatch = 16

// byeWait bounds how long Close tries to tell peers that the context
// closed.
const byeWait = 100 * time.Millisecond

// Close detaches the context: it tells every peer it knows of (those it
// sent to, and those whose messages arrived, read or not), closes its
// endpoint, and fails its links with transport.ErrClosed.
func (p *port) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	p.enter()
	defer p.leave()
	// Learn the senders of what arrived and was not polled.
	for ; p.pendHead != p.pendTail; p.pendHead++ {
		pm := p.pending[p.pendHead%uint64(len(p.pending))]
		p.learn(pm.bytes(p))
	}
	for k := 0; k < 1<<16; k++ {
		n := C.amigo_cq_read(p.e.rxh, p.entriesAddr, C.size_t(len(p.entries)))
		if n == -C.FI_EAVAIL {
			p.readErr(p.e.rxcq)
			continue
		}
		if n <= 0 {
			break
		}
		for i := 0; i < int(n); i++ {
			j := p.opIndex(uintptr(p.entries[i].op_context))
			if j >= 0 && p.ops[j].kind == opRecv {
				p.learn(p.rxMsg(j, &p.entries[i]).bytes(p))
			}
		}
	}
	// What the context injected leaves first: its goodbye follows it
	// (sends stay in order).
	deadline := time.Now().Add(byeWait)
	for time.Now().Before(deadline) {
		busy := false
		for _, l := range p.outList {
			l.progress()
			busy = busy || !l.failed && (l.stalled != nil || l.doneUpTo < l.posted)
		}
		p.readTx()
		if !busy {
			break
		}
		runtime.Gosched()
	}
	// Then the acknowledgements and answers the context owes: a peer told
	// goodbye before it heard that its last packets were taken would
	// count them lost.
	for time.Now().Before(deadline) {
		p.flushAcks(true)
		p.flushCtrl()
		if len(p.dirty) == 0 && len(p.ctrlq) == 0 {
			break
		}
		p.readTx()
		runtime.Gosched()
	}
	seen := make(map[transport.Addr]C.fi_addr_t)
	for _, in := range p.ins {
		if in != nil && !in.gone {
			seen[in.from] = in.dest
		}
		if in != nil {
			in.closed = true
		}
	}
	for _, l := range p.outList {
		if l.l.Err() == nil {
			seen[l.to] = l.dest
		}
	}
	deadline = time.Now().Add(byeWait)
	for _, dest := range seen {
		for !p.sendCtrl(dest, header{kind: kindBye}, nil) && time.Now().Before(deadline) {
			p.readTx()
			runtime.Gosched()
		}
	}
	// Let the goodbyes leave before the endpoint goes.
	for time.Now().Before(deadline) && p.readTx() > 0 {
	}
	for _, l := range p.outList {
		l.l.Fail(transport.ErrClosed)
	}
	// The endpoint stays open until the adapter closes: the adapter's
	// goroutine answers what still arrives with a goodbye (drainClosed).
	// Closing it now would leave senders that did not hear of the close
	// writing to an endpoint that is gone, and a provider in one process
	// (shm) writes straight into its memory.
	return nil
}

// drainClosed reads what arrived at a closed port and says goodbye to
// each sender once. It runs on the adapter's goroutine, the port taken.
func (p *port) drainClosed() {
	for k := 0; k < 64; k++ {
		n := C.amigo_cq_read(p.e.rxh, p.entriesAddr, C.size_t(len(p.entries)))
		if n == -C.FI_EAVAIL {
			p.readErr(p.e.rxcq)
			continue
		}
		if n <= 0 {
			break
		}
		for i := 0; i < int(n); i++ {
			j := p.opIndex(uintptr(p.entries[i].op_context))
			if j < 0 || p.ops[j].kind != opRecv {
				continue
			}
			m := p.rxMsg(j, &p.entries[i])
			if h, err := parseHeader(m.bytes(p)); err == nil && h.kind != kindBye {
				if in := p.inlink(h); in != nil && !in.gone && !in.closed && p.sendCtrl(in.dest, header{kind: kindBye}, nil) {
					in.closed = true
				}
			}
			p.rxDone(j)
		}
	}
	p.readTx()
}

// release closes the endpoint, which ends every operation of the
// provider on the port's memory, and unpins that memory.
func (p *port) release() {
	p.a.mu.Lock()
	p.e.close()
	p.a.mu.Unlock()
	for _, mr := range []*C.struct_fid_mr{p.rxMR, p.ctrlMR} {
		if mr != nil {
			C.amigo_close(C.amigo_fid_mr(mr))
		}
	}
	for _, l := range p.outList {
		l.releaseAll()
	}
	p.regs.close()
	p.direct.close()
	p.pins.Unpin()
}

// keyHash spreads keys over a link's key cache.
func keyHash(k transport.Key) int {
	return int(bits.RotateLeft64(uint64(k)*0x9E3779B97F4A7C15, 17) & (keyCache - 1))
}
