package amigo

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/amigo-hpc/amigo/internal/memcopy"
	"github.com/amigo-hpc/amigo/internal/nap"
	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// Context is a progress domain: the unit that owns injection FIFOs toward
// every peer, receives packets, and runs callbacks. All of a context's
// callbacks run inside Advance, on the goroutine that calls it; instructions
// may be posted to it from any goroutine. A program that wants parallelism
// opens several contexts, one per goroutine that advances.
type Context struct {
	// Contexts of different ranks are allocated side by side and written on
	// every Advance by different goroutines: the padding at both ends keeps
	// them off each other's cache lines.
	_      [64]byte
	client *Client
	index  int
	nctx   int
	cfg    *Config

	// busy is busyAdvance while a goroutine is inside Advance or close,
	// busyPoster while a posting goroutine injects directly (direct).
	busy   atomic.Int32
	closed atomic.Bool
	// sentDirect counts the active messages posters injected directly;
	// Stats adds it to SentInline (c.stats belongs to the owner).
	sentDirect atomic.Uint64
	// sentNow counts the messages an adapter sent at once (peer.writeAM,
	// transport.Link.SendNow), by the owner or a poster: Stats.SentAtOnce.
	sentNow atomic.Uint64
	// epoch counts advance calls: small messages to a peer with none
	// between them are a burst (peer.writeAM).
	epoch uint64
	// progressDue is set when a descriptor was written into the buffer of
	// a link whose consumer does not read it in place (no MsgBell: the
	// adapter moves it in its Progress), or handed to the adapter at once
	// (SendNow), since the last pass began: the message may wait in this
	// process until the next Advance (Held.Unsent). A pass clears it right
	// before the ports' Progress.
	progressDue bool

	bell  *transport.Doorbell
	ports []transport.Port
	inq   *instQueue

	peers  []*peer // by peer index rank*nctx+context, made on first use
	active []*peer // peers with queued instructions, listed callbacks or ops

	dispatch [MaxDispatch]atomic.Pointer[handlerEntry]
	rcv      receiver
	msg      Message
	rd       *ring.Reader // while a large descriptor is handed over: the reader it lies in (FromRing), for Message.CopyTo
	pkt      wire.Packet  // the packet receive is decoding (never nested)
	held     Held
	ops      opTable
	later    []laterDone // local completions found inside handlers
	spare    []laterDone
	// holderSend is set while Held.Send injects a message itself: the
	// callbacks due then run in the next Advance or Wait (callNow,
	// failInst).
	holderSend bool
	heldInst   inst // Held.Send's instruction: only its kind, dest, disp, hdr, data and done are set
	// gather is the peer whose RDMA completions service runs: the ACKs
	// sendCtl owes it meanwhile wait in its acks (sendACKs).
	gather *peer
	// acked lists the streamed sends whose ACK came in this Advance;
	// finishAcked finishes them after the Advance polled (stop.go,
	// ackSend), ackKeys holding their registrations meanwhile.
	acked       []ackedSend
	ackKeys     []transport.Key
	finishAcked func(error)
	sendRegs    sendRegs // registrations shared by sends from one buffer (sendreg.go)

	timer *time.Timer
	stats Stats

	sys sysState // Client.Barrier and RegisterAll, on context 0 (collective.go)

	// Ready's channel and the requests to its goroutine (ready.go); made
	// by the first Ready.
	ready, readyReq, readyDone chan struct{}

	// Idle policy, from the adapters (see idle).
	spin    int  // idle Advance calls before yielding
	yields  int  // yielding idle Advance calls before sleeping
	osYield bool // yield the OS thread too: more ranks than processors here

	unexpected  int      // bytes of unexpected eager data held
	chunks      [][]byte // free chunks for unexpected data
	stopVariant uint32
	mcTargets   []*op // multicasts this context is a target of
	mcGone      []mcTombstone

	// Messages held for a handler not registered yet (early.go): their
	// number, their state (nil until the first), and whether SetDispatch
	// registered a handler since the owner last looked.
	earlyN      int
	early       *earlyState
	dispatchSet atomic.Bool

	_ [64]byte // see the padding at the top
}

type laterDone struct {
	fn  func(error)
	err error
}

// receiver adapts a Context to transport.Receiver without exporting the
// method.
type receiver struct{ c *Context }

func (r *receiver) Receive(from transport.Addr, pkt []byte) { r.c.receive(from, pkt) }

// FromRing names the descriptor buffer the packets handed over next lie in
// (transport.RingReceiver), for Message.CopyTo.
func (r *receiver) FromRing(rd *ring.Reader) { r.c.rd = rd }

func newContext(cl *Client, index int) (*Context, error) {
	c := &Context{
		client: cl,
		index:  index,
		nctx:   cl.cfg.Contexts,
		cfg:    &cl.cfg,
		bell:   transport.NewDoorbell(),
		inq:    newInstQueue(cl.cfg.InstructionSlots),
		peers:  make([]*peer, cl.size*cl.cfg.Contexts),
	}
	c.rcv.c = c
	c.msg.c = c
	c.held.c = c
	for d, fn := range cl.cfg.Handlers {
		c.dispatch[d].Store(&handlerEntry{fn: fn})
	}
	switch cl.cfg.StopVariant {
	case "discard":
		c.stopVariant = wire.StopDiscard
	case "put":
		c.stopVariant = wire.StopPut
	case "keep":
		c.stopVariant = wire.StopKeep
	default:
		c.stopVariant = 0 // auto: chosen per message by stop
	}
	c.ops.c = c
	c.finishAcked = c.finishAckedNow
	c.timer = time.NewTimer(time.Hour)
	c.timer.Stop()
	// A context sleeps on a doorbell every adapter can ring: one in shared
	// memory if an adapter between processes provides it.
	for _, a := range cl.adapters {
		if dp, ok := a.(transport.DoorbellProvider); ok {
			b, err := dp.Doorbell(index)
			if err != nil {
				return nil, fmt.Errorf("amigo: %s: doorbell of context %d: %w", a.Name(), index, err)
			}
			if b != nil {
				c.bell = b
				break
			}
		}
	}
	c.spin, c.osYield = idlePolicy(cl.cfg.SpinIterations, hostReports(cl.adapters))
	c.yields = max(cl.cfg.YieldIterations, 0)
	for _, a := range cl.adapters {
		p, err := a.Open(index, c.bell)
		if err != nil {
			for _, q := range c.ports {
				_ = q.Close()
			}
			return nil, fmt.Errorf("amigo: %s: open context %d: %w", a.Name(), index, err)
		}
		c.ports = append(c.ports, p)
	}
	return c, nil
}

// Oversubscribed reports whether an adapter between processes said that
// this host runs more ranks than it has processors: a rank waiting for a
// message then often waits for its sender to get a processor, and layers
// above (package mpi) prefer algorithms in which each rank waits fewer
// times.
func (c *Context) Oversubscribed() bool { return c.osYield }

// Client returns the client the context belongs to.
func (c *Context) Client() *Client { return c.client }

// Index returns the context's index within its rank.
func (c *Context) Index() int { return c.index }

// Endpoint returns the context's own endpoint.
func (c *Context) Endpoint() Endpoint { return Endpoint{Rank: c.client.rank, Context: c.index} }

// Stats returns the context's counters. Call it from the goroutine that owns
// the context.
func (c *Context) Stats() Stats {
	s := c.stats
	s.SentInline += c.sentDirect.Load()
	s.SentAtOnce = c.sentNow.Load()
	for _, p := range c.ports {
		if kc, ok := p.(transport.KeepCounter); ok {
			z, k := kc.KeepEpochs()
			s.KeepZeroed += z
			s.KeepKept += k
		}
	}
	return s
}

const (
	busyAdvance int32 = 1
	busyPoster  int32 = 2
)

func (c *Context) enter() {
	for spins := 0; !c.busy.CompareAndSwap(0, busyAdvance); spins++ {
		if c.busy.Load() == busyAdvance {
			panic("amigo: Advance called from a callback or from two goroutines at once; a Context has a single owner")
		}
		// A posting goroutine is injecting directly: a few stores.
		if spins > 64 {
			runtime.Gosched()
		}
	}
}

// leave gives the context back with a release store (package order): the
// writes of the Advance or direct injection it ends come before it, and it
// does not wait for them to leave the core.
func (c *Context) leave() { order.Store32(&c.busy, 0) }

// direct takes the context for a posting goroutine that injects an
// active message itself instead of queueing an instruction for Advance:
// only when no goroutine is inside Advance (or injecting), no instruction
// waits in the queue (so a goroutine's own earlier posts cannot be
// overtaken), and the peer is connected, healthy and has nothing queued
// behind a full FIFO. It returns the peer with the context held
// (busyPoster), or nil. The caller injects without blocking and calls
// leave.
//
// Memory ordering: the CompareAndSwap that takes busy and the Store that
// gives it back order the poster's writes to the peer's descriptor buffer
// and tracker before the next Advance's reads, as between two Advance
// calls; the consumer of the buffer sees them through its header word, as
// always. Inside Advance (a callback posting) the CompareAndSwap fails and
// the instruction is queued.
func (c *Context) direct(idx int32) *peer {
	if !c.busy.CompareAndSwap(0, busyPoster) {
		return nil
	}
	p := c.owned(idx)
	if p == nil {
		c.leave()
	}
	return p
}

// owned is direct for a goroutine that already owns the context (Held, or
// inside Advance): the peer at idx if an operation may be injected to it
// at once, without overtaking an instruction still queued, or nil.
func (c *Context) owned(idx int32) *peer {
	q := c.inq
	if c.closed.Load() || q.enq.Load() != q.deq || q.overflowing.Load() {
		return nil
	}
	p := c.peers[idx]
	if p == nil || p.failed != nil || p.q.len() > 0 {
		return nil
	}
	return p
}

// injectDirect injects a small active message with no callback from the
// posting goroutine, if direct allows; it reports whether it did.
func (c *Context) injectDirect(idx int32, d Dispatch, header, data []byte) bool {
	p := c.direct(idx)
	if p == nil {
		return false
	}
	ok := p.writeAM(c.epoch, d, header, data)
	if ok {
		// The poster holds the context, so it is the counter's only
		// writer: a load and a release store, not a locked add, whose
		// fence would wait here for the descriptor's cache line to reach
		// this core.
		order.Store64(&c.sentDirect, c.sentDirect.Load()+1)
	}
	c.leave()
	return ok
}

// slotTo checks the arguments of a message for one slot of the descriptor
// buffer (sendSlot, sendSmall): it returns the peer index of ep and the
// packet's size, or false for anything the general path must look at.
func (c *Context) slotTo(ep Endpoint, d Dispatch, header, data []byte) (int32, int, bool) {
	size := wire.AMSize(len(header), len(data), false)
	if size > ring.SlotSize-ring.HeaderSize || size-wire.BaseSize > c.cfg.InlineMax || d >= MaxDispatch ||
		uint(ep.Rank) >= uint(c.client.size) || uint(ep.Context) >= uint(c.nctx) {
		return 0, 0, false
	}
	return int32(ep.Rank*c.nctx + ep.Context), size, true
}

// sendSlot is Send's path for a message that fits one slot of the
// descriptor buffer (an 8-byte ping-pong's, a small request's): it checks
// the arguments and injects the message from the posting goroutine, as
// sendTo and injectDirect or injectDirectDone would in two calls more, or
// reports false, and Send takes the general path, which checks again and
// fails with the error or queues the message.
func (c *Context) sendSlot(ep Endpoint, d Dispatch, header, data []byte, done func(error)) bool {
	idx, _, ok := c.slotTo(ep, d, header, data)
	if !ok {
		return false
	}
	p := c.direct(idx)
	if p == nil {
		return false
	}
	// With a done callback, as injectDirectDone.
	ok = (done == nil || p.link.Shared && p.msg.Pending() == 0) && p.writeAM(c.epoch, d, header, data)
	if ok {
		order.Store64(&c.sentDirect, c.sentDirect.Load()+1)
		if done != nil {
			c.later = append(c.later, laterDone{fn: done})
		}
	}
	c.leave()
	return ok
}

// injectDirectDone is injectDirect for a message with a done callback, on a
// link whose consumer reads the descriptor buffer in place: the message is
// delivered once published, so its done callback is due at once; it runs in
// the next Advance, as every callback does (Context.later, which the
// poster may append to while it holds the context). With a callback of
// the FIFO still pending it declines, so that callbacks keep their order.
//
// # Why
//
// A window of small Sends with done callbacks (a message rate run, MPI's
// Isend) went through the instruction queue one by one: claimed, posted,
// drained, executed and injected, some 300 instructions a message on the
// sender, against some 100 this way.
func (c *Context) injectDirectDone(idx int32, d Dispatch, header, data []byte, done func(error)) bool {
	p := c.direct(idx)
	if p == nil {
		return false
	}
	ok := p.link.Shared && p.msg.Pending() == 0 && p.writeAM(c.epoch, d, header, data)
	if ok {
		order.Store64(&c.sentDirect, c.sentDirect.Load()+1)
		c.later = append(c.later, laterDone{fn: done})
	}
	c.leave()
	return ok
}

// writeAM writes an inline active message with no callback into p's
// descriptor buffer, if it has room and the message is to go inline now
// (busyFor); the caller holds the context, whose epoch it passes, and
// queues the message otherwise. Messages to p with no Advance between
// them (a window of sends, the replies of one poll) go as records
// (writeRecord); any other takes a slot of its own, which its consumer,
// waiting for it, reads in fewer steps.
func (p *peer) writeAM(epoch uint64, d Dispatch, header, data []byte) bool {
	size := wire.AMSize(len(header), len(data), false)
	if p.records && size <= ring.MaxRecord {
		burst := p.epoch == epoch
		p.epoch = epoch
		if burst {
			return p.writeRecord(d, header, data, size)
		}
	}
	p.roff = 0 // records may not follow another descriptor
	if size <= ring.SlotSize-ring.HeaderSize {
		if p.sendNow != nil && p.sendAtOnce(uint16(d), header, data, size) {
			return true
		}
		// One slot: no pad, no callback; the position computed once.
		pos, ok := p.msg.InjectOne()
		if !ok {
			return false
		}
		// The packet's base header carries its length, as a record's
		// does (wire.PutAMRecord): one word, written whole.
		s := p.ring.Small(pos)
		w := wire.PutAMRecord(s[ring.HeaderSize+wire.BaseSize:ring.HeaderSize+size], uint16(d), header, data)
		binary.LittleEndian.PutUint64(s[ring.HeaderSize:], w)
		ring.SealSmall(s, size)
		p.ring.Publish(pos + 1)
		if p.bell != nil {
			p.bell.Ring()
		} else {
			if p.push != nil {
				p.push()
			}
			*p.due = true
		}
		return true
	}
	n := len(header) + len(data)
	if p.busyFor(n, len(data) > 0) {
		return false // a large message (peer.inject)
	}
	b := p.reserve(size)
	if b == nil {
		return false
	}
	memcopy.Copy(b[wire.PutAMHead(b, uint16(d), header, false, 0):], data)
	p.commit(nil)
	p.sentMid(n)
	return true
}

// sendAtOnce offers an active message with no callback (size bytes,
// header and packet) that fits one slot to the link's SendNow, built in
// the peer's scratch as the slot's payload would be, and reports whether
// the adapter sent it: then it counts as injected outside the descriptor
// buffer. Every way a small message without a callback is injected
// (writeAM, a queued SendImmediate or Send) offers it first, where the
// link has SendNow.
func (p *peer) sendAtOnce(d uint16, header, data []byte, size int) bool {
	if size > len(p.pkt) {
		return false
	}
	b := p.pkt[:size]
	binary.LittleEndian.PutUint64(b, wire.PutAMRecord(b[wire.BaseSize:], d, header, data))
	if !p.sendNow(b) {
		return false
	}
	p.msg.InjectOutside()
	order.Store64(p.sentNow, p.sentNow.Load()+1)
	// The provider may hold it until its progress (a socket that was
	// full, under tcp;ofi_rxm): the next Advance runs that.
	*p.due = true
	return true
}

// writeRecord writes an active message of size bytes as a record (package
// ring): appended to the slot of records this peer's last message opened,
// if it has room and nothing else was written into the ring since, else
// opening a new one.
//
// # Why
//
// One message a slot moves one cache line to the consumer's core and
// back (the consumer zeroes the slot) for every 8-byte message: a window
// of them was bound by those moves on the sender, which waited for each
// line to come back before it could write it. The packet's base header
// is the record's word (wire.PutAMRecord), so that an 8-byte message
// takes 16 bytes: three a slot, where a record word in front of the
// packet made it 24, two a slot.
func (p *peer) writeRecord(d Dispatch, header, data []byte, size int) bool {
	if p.roff != 0 && p.roff+ring.RecordSize(size) <= ring.SlotSize {
		s := p.ring.Small(p.rpos)
		w := wire.PutAMRecord(ring.RecordBody(s, p.roff, size), uint16(d), header, data)
		ring.SealRecord(s, p.roff, w)
		p.roff += ring.RecordSize(size)
	} else {
		pos, ok := p.msg.InjectOne()
		if !ok {
			return false
		}
		s := p.ring.Small(pos)
		w := wire.PutAMRecord(ring.RecordBody(s, ring.HeaderSize, size), uint16(d), header, data)
		p.roff = ring.OpenRecords(s, w)
		p.rpos = pos
		p.ring.Publish(pos + 1)
		p.ring.Prepare(pos + 1) // the line the next slot's first store needs
	}
	if p.bell != nil {
		p.bell.Ring()
	} else {
		*p.due = true
	}
	return true
}

// injectOwned is injectDirect for the goroutine that owns the context,
// inside Advance (a handler's Reply): the same conditions without taking
// busy, which the owner holds.
func (c *Context) injectOwned(idx int32, d Dispatch, header, data []byte) bool {
	p := c.owned(idx)
	if p == nil || !p.writeAM(c.epoch, d, header, data) {
		return false
	}
	c.stats.SentInline++
	return true
}

// injectOwnedDone is injectOwned for a message that may have a done
// callback, as injectDirectDone is injectDirect's: with one, only on a
// link whose consumer reads the descriptor buffer in place and with no
// callback of the FIFO pending, and the callback is listed for the next
// Advance.
func (c *Context) injectOwnedDone(idx int32, d Dispatch, header, data []byte, done func(error)) bool {
	p := c.owned(idx)
	if p == nil || done != nil && (!p.link.Shared || p.msg.Pending() != 0) || !p.writeAM(c.epoch, d, header, data) {
		return false
	}
	c.stats.SentInline++
	if done != nil {
		c.later = append(c.later, laterDone{fn: done})
	}
	return true
}

// sendSmall is the holder's Send of a message that fits a slot: it checks
// the arguments and writes the message in one call, as a record when it
// follows another to the same peer with no Advance between them (the
// second and later of a window, MPI_Isend's of small messages), else in a
// slot of its own, where injectOwnedDone and writeAM would take four; or it
// reports false, and Send takes the general path, which checks again and
// fails with the error or queues the message.
//
// # Why
//
// When the two cores hand cache lines over quickly, a window of 8-byte
// sends is bound by the instructions each side spends a message
// (bench/SMALL_PATH.md); the calls of the general path, each passing the
// message's slices on, were some 40 of the sender's 370 (callgrind).
func (c *Context) sendSmall(ep Endpoint, d Dispatch, header, data []byte, done func(error)) bool {
	idx, size, ok := c.slotTo(ep, d, header, data)
	if !ok {
		return false
	}
	p := c.owned(idx)
	// With a done callback, as injectOwnedDone.
	if p == nil || done != nil && (!p.link.Shared || p.msg.Pending() != 0) {
		return false
	}
	if p.records && p.epoch == c.epoch {
		if !p.writeRecord(d, header, data, size) {
			return false
		}
	} else if !p.writeAM(c.epoch, d, header, data) {
		return false
	}
	c.stats.SentInline++
	if done != nil {
		c.later = append(c.later, laterDone{fn: done})
	}
	return true
}

// Advance makes progress on the context once and returns the number of
// events it handled: instructions injected, completions, packets received.
// Every callback of the context runs inside Advance, on the calling goroutine.
// Advance never blocks; the doc of package amigo gives the steps it takes.
func (c *Context) Advance() int {
	c.enter()
	n := c.advance()
	c.leave()
	return n
}

func (c *Context) advance() int { return c.advanceUntil(nil) }

// advanceUntil is advance for a Wait on cond: a pass that delivered
// packets ends as soon as cond holds after a port's Poll, leaving the
// rest of the pass (the other ports' polls, the callbacks due, the
// instructions posted meanwhile) to the next Advance.
//
// # Why
//
// A ping-pong's answer ends the Wait of the rank that pinged, which then
// sends the next ping: what the pass does after the handler that made
// cond true lies between the answer's arrival and the next ping. amibench's
// 8-byte latency over libfabric's shm provider took 0.96-0.97x the time in
// the host's fast state (three runs of 6-12 interleaved rounds; 1.02x in
// the slow one), over the shared-memory adapter 1.00x (bench/ofi/LATENCY.md).
func (c *Context) advanceUntil(cond func() bool) int {
	if c.closed.Load() {
		return 0
	}
	c.epoch++
	n := 0
	if c.inq.nonEmpty() {
		n = c.drain()
	}
	if c.earlyN != 0 {
		n += c.serviceEarly()
	}
	n += c.progress()
	n += c.service()
	for _, p := range c.ports {
		k := p.Poll(&c.rcv, c.cfg.PollBudget)
		if n += k; k > 0 && cond != nil && cond() {
			return n
		}
	}
	n += c.runLater()
	if c.inq.nonEmpty() {
		n += c.drain()
	}
	return n
}

// quiet reports whether only an arrival can give a waiting context work:
// no peer has anything outstanding, nothing waits for a port's Progress,
// no instruction was posted and no callback is due.
func (c *Context) quiet() bool {
	return len(c.active) == 0 && !c.progressDue && c.earlyN == 0 && len(c.later) == 0 && !c.inq.nonEmpty()
}

// pollUntil is advanceUntil's polls alone, for a wait whose context is
// quiet: three idle passes of four.
func (c *Context) pollUntil(cond func() bool) int {
	if c.closed.Load() {
		return 0
	}
	c.epoch++
	n := 0
	for _, p := range c.ports {
		k := p.Poll(&c.rcv, c.cfg.PollBudget)
		if n += k; k > 0 && cond != nil && cond() {
			return n
		}
	}
	return n
}

// push is Held.Push: advanceUntil without the polls, the service of the
// peers and the callbacks.
func (c *Context) push() int {
	if c.closed.Load() {
		return 0
	}
	n := 0
	if c.inq.nonEmpty() {
		n = c.drain()
	}
	return n + c.progress()
}

// progress runs every port's Progress, the step of a pass that moves what
// the links hold (progressDue is cleared first: a descriptor written from
// here on waits for the next).
func (c *Context) progress() int {
	c.progressDue = false
	n := 0
	for _, p := range c.ports {
		n += p.Progress()
	}
	return n
}

// drain injects the instructions posted since the last Advance.
func (c *Context) drain() int {
	n := 0
	limit := len(c.inq.slots)
	for n < limit {
		in := c.inq.peek()
		if in == nil {
			break
		}
		c.execute(in)
		c.inq.pop()
		n++
	}
	// The overflow list holds instructions posted after the slots filled up;
	// takeOverflow gives it only once every claimed slot was read, to keep
	// each goroutine's instructions in order.
	if list := c.inq.takeOverflow(); list != nil {
		for i := range list {
			c.execute(&list[i])
			n++
		}
		c.inq.returnOverflow(list)
	}
	return n
}

// service runs the completion check of every active peer and retries the
// instructions queued behind a full FIFO.
func (c *Context) service() int {
	n := 0
	for i := 0; i < len(c.active); {
		p := c.active[i]
		if err := p.link.Err(); err != nil && p.failed == nil {
			// Complete what the peer took before its link failed: a peer
			// that closes right after taking our last descriptors must
			// not see them reported lost. The adapter counted them before
			// it failed the link, so this snapshot sees them.
			n += p.msg.Complete()
			n += p.rdma.Complete()
			// Take first what the peer sent before it went: a peer that
			// posts a last message and closes once it is delivered (in
			// the consumer's memory, on a shared link) is heard out
			// before its operations fail. Bounded: a ring holds a
			// bounded number of descriptors.
			for k := 0; k < 64; k++ {
				got := 0
				for _, pt := range c.ports {
					got += pt.Poll(&c.rcv, c.cfg.PollBudget)
				}
				if n += got; got == 0 {
					break
				}
			}
			if p.failed == nil {
				n += c.failPeer(p, err)
			}
		}
		if p.failed == nil {
			n += p.msg.Complete()
			c.gather = p
			n += p.rdma.Complete()
			c.gather = nil
			if len(p.acks) > 0 {
				c.sendACKs(p)
			}
			n += c.flush(p)
		}
		if p.idle() {
			p.isActive = false
			last := len(c.active) - 1
			c.active[i] = c.active[last]
			c.active[last] = nil
			c.active = c.active[:last]
			continue
		}
		i++
	}
	return n
}

func (c *Context) activate(p *peer) {
	if !p.isActive {
		p.isActive = true
		c.active = append(c.active, p)
	}
}

func (c *Context) runLater() int {
	if len(c.later) == 0 {
		return 0
	}
	n := 0
	for len(c.later) > 0 {
		list := c.later
		c.later = c.spare[:0]
		for i := range list {
			list[i].fn(list[i].err)
			list[i] = laterDone{}
			n++
		}
		c.spare = list[:0]
	}
	return n
}

func (c *Context) doLater(fn func(error), err error) {
	if fn != nil {
		c.later = append(c.later, laterDone{fn, err})
	}
}

// asyncError reports an error that belongs to no operation.
func (c *Context) asyncError(err error) {
	c.stats.Errors++
	if c.cfg.OnError != nil {
		c.cfg.OnError(err)
	}
}

// Wait advances the context until cond returns true, ctx is done, or the
// context is closed. cond is evaluated on the calling goroutine between
// Advance calls. While nothing happens, Wait spins, then yields the
// processor, then sleeps until a peer or another goroutine rings the
// context's doorbell (Config.SpinIterations, YieldIterations, SleepMax).
func (c *Context) Wait(ctx context.Context, cond func() bool) error {
	// cond is the owner's, read on the owner's goroutine: when it already
	// holds, there is nothing to take the context for.
	if cond() && !c.closed.Load() {
		return nil
	}
	c.enter()
	defer c.leave()
	return c.wait(ctx, cond)
}

// wait is Wait for a goroutine that holds the context.
func (c *Context) wait(ctx context.Context, cond func() bool) error {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	idle := 0
	for i := 0; ; i++ {
		if cond() {
			return nil
		}
		if c.closed.Load() {
			return ErrClosed
		}
		if done != nil && i&63 == 63 {
			select {
			case <-done:
				return ctx.Err()
			default:
			}
		}
		// Completions due at once (a Send copied into a peer's buffer, an
		// atomic its poster performed) first: cond may be waiting for
		// nothing else, and a whole pass of the ports costs more.
		if len(c.later) > 0 && !c.closed.Load() {
			c.runLater()
			idle = 0
			continue
		}
		// While it spins with nothing but an arrival to wait for, three
		// idle passes of four only poll: the answer is seen within a
		// poll's length rather than a whole pass's (the ports' Progress,
		// the peers' service, the callbacks). amibench's 8-byte latency
		// over shared memory 0.89-0.92x the time in the host's fast
		// state (16 interleaved runs a build), package mpi's 0.90x; the
		// slow state, TCP and libfabric 0.98-1.02x (bench/SMALL_PATH.md).
		n := 0
		if idle&3 != 0 && idle <= c.spin && c.quiet() {
			n = c.pollUntil(cond)
		} else {
			n = c.advanceUntil(cond)
		}
		if n > 0 {
			idle = 0
			continue
		}
		idle = c.idle(idle, done)
	}
}

// oversubscribedSpin is the spin of a context whose host runs more ranks
// than it has processors (Config.SpinIterations 0): none. The message it
// waits for comes from a rank that may be waiting for this very processor,
// and a pass that found nothing is followed by a yield at once, as Open
// MPI's progress loop does when it knows it is oversubscribed; an idle
// pass of the ports costs more than the hand-over when the peer is on the
// other processor.
const oversubscribedSpin = 0

// oversubscribedSpinMax bounds the spin a program sets (SpinIterations) on
// such a host.
const oversubscribedSpinMax = 20

// defaultSpin is the spin of a context that knows nothing of its host's
// processors (ranks that are goroutines of one process).
const defaultSpin = 1000

// idlePolicy returns the spin of a context and whether its yields give the
// OS thread away, from Config.SpinIterations and what the adapters between
// processes say of this host (true: more ranks than processors).
func idlePolicy(spin int, oversubscribed []bool) (int, bool) {
	over, dedicated := hostShare(oversubscribed)
	switch {
	case over && spin == 0:
		spin = oversubscribedSpin
	case over:
		spin = min(spin, oversubscribedSpinMax)
	case spin == 0 && dedicated:
		spin = DedicatedSpin
	case spin == 0:
		spin = defaultSpin
	}
	return spin, over
}

// DedicatedSpin is the spin of a context on a host with a processor for
// each of its ranks (Config.SpinIterations 0): several milliseconds of idle
// Advance calls before the first yield. A rank that sleeps sooner is woken
// by a futex from its peer, and Linux tends to place a woken task on the
// processor of the task that woke it: the two ranks then share one
// processor, a time slice each, and, as each keeps sleeping and waking
// the other, stay there. Measured with amibench (8-64 B latency, two
// processes, ten alternating runs): with a spin of 1000, runs slept 60 to
// 1000 times and their slowest size took 0.3-2.9 us; with 200000, no run
// slept and the slowest size took 0.16-0.55 us. (A second series of eight:
// 50-750 sleeps against 0-8, and slow sizes in both, from other causes.)
// 1-4 MiB bandwidth measured the same either way.
const DedicatedSpin = 200000

// idle is one step of the spin, yield, sleep policy of a goroutine that found
// no work; it returns the new idle count.
//
// When the ranks of this host outnumber its processors (an adapter between
// processes says so with an Oversubscribed method), the peer this context
// waits for may be waiting for a processor: spinning only keeps it from
// running, so the context does not spin (oversubscribedSpin), and each
// yield gives the OS thread away with sched_yield, which runtime.Gosched
// alone never does to another process. Such a yield lets the goroutines of
// this process run only every osGoschedEvery yields: with one processor
// for the rank's Go code (Config.OversubscribedProcs) runtime.Gosched goes
// through the Go scheduler for nothing when no other goroutine is
// runnable, the common case. Measured on a 2-core host under other load
// (amibench, 64 B Allreduce and Barrier on 4 and 8 ranks, medians of four
// interleaved rounds), yielding without the spin and without Gosched took
// 10-31 us where the same with a Gosched on every yield took 13-66 and
// the spin of 20 then yields 19-61. With a processor per rank, a yield stays
// within the process: handing the processor to an unrelated process would
// cost a rank its next message by a time slice.
func (c *Context) idle(idle int, done <-chan struct{}) int {
	idle++
	switch {
	case idle <= c.spin:
	case idle <= c.spin+c.yields:
		if !c.osYield {
			runtime.Gosched()
			break
		}
		if idle%osGoschedEvery == 0 {
			runtime.Gosched()
		}
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	default:
		c.bell.Arm()
		if c.advance() > 0 {
			c.bell.Disarm()
			return 0
		}
		if c.sleep(done) {
			c.stats.SleepTimeouts++
		}
		c.stats.Sleeps++
		// Stay in the sleeping phase: the next idle round sleeps again at
		// once unless work turns up.
		return c.spin + c.yields
	}
	return idle
}

// osGoschedEvery is how many yields of an oversubscribed context (see idle)
// come to one runtime.Gosched: other goroutines of the rank (an adapter's
// engine, goroutines waiting for the mpi layer's lock) wait at most that
// many hand-overs for the processor.
const osGoschedEvery = 4

// Do posts fn to run on the goroutine that owns the context, inside its next
// Advance. It is how code running elsewhere reaches a context driven by a
// Driver.
func (c *Context) Do(fn func(*Context)) error {
	if fn == nil {
		return errors.New("amigo: Do(nil)")
	}
	in, pos, err := c.claim()
	if err != nil {
		return err
	}
	var tmp inst
	if in == nil {
		in = &tmp
	}
	in.kind = instCall
	in.fn = fn
	c.post(in, pos)
	return nil
}

// claim reserves an instruction slot. It returns a nil slot when the caller
// must post through the overflow path.
func (c *Context) claim() (*inst, uint64, error) {
	if c.closed.Load() {
		return nil, 0, ErrClosed
	}
	in, pos := c.inq.claim()
	return in, pos, nil
}

// post publishes an instruction filled in after claim, and wakes the owner.
func (c *Context) post(in *inst, pos uint64) {
	if in == &c.inq.slots[pos&c.inq.mask].in {
		c.inq.commit(pos)
	} else {
		c.inq.pushOverflow(in)
	}
	c.bell.Ring()
}

// close fails everything outstanding and detaches the context's ports.
func (c *Context) close() error {
	for !c.busy.CompareAndSwap(0, busyAdvance) {
		if c.busy.Load() == busyAdvance {
			return fmt.Errorf("amigo: close context %d: %w", c.index, ErrBusy)
		}
		runtime.Gosched()
	}
	defer c.leave()
	c.farewell()
	c.shutdown(ErrClosed)
	return nil
}

// farewellBound bounds how long close waits to send what was posted
// before it and what the context owes its peers.
const farewellBound = time.Second

// farewell sends, before close fails the peers, what was posted before
// Close and still waits in the instruction queue or behind a full FIFO
// (a last SendImmediate, which has no callback to be told it was
// dropped), and the control packets the context owes (the
// acknowledgement of a message it received: a peer must not see its send
// fail because the receiver closed the moment it had the data). On a link
// whose peer does not read the descriptor buffer in place (tcp), a
// control packet injected is not yet delivered: it may still wait for
// its connection to be made, and a goodbye that overtook it would fail
// the operation it completes; farewell waits until the peer took it.
// Bounded by farewellBound: a peer that takes nothing leaves the rest to
// fail with ErrClosed, as Close documents.
func (c *Context) farewell() {
	var deadline time.Time
	for {
		owed := c.inq.nonEmpty()
		for _, p := range c.active {
			if p.failed == nil && (p.ctl.len() > 0 || p.q.len() > 0) {
				owed = true
				break
			}
		}
		if !owed {
			owed = c.owesDelivery()
		}
		if !owed {
			return
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(farewellBound)
		} else if time.Now().After(deadline) {
			return
		}
		n := c.drain()
		for _, pt := range c.ports {
			n += pt.Progress()
		}
		if n+c.service() == 0 {
			nap.Nap(20 * time.Microsecond)
		}
	}
}

// owesDelivery reports whether a live peer on a link that is not shared
// has yet to take a control packet this context injected (peer.owed).
func (c *Context) owesDelivery() bool {
	for _, p := range c.peers {
		if p != nil && p.failed == nil && !p.link.Shared && p.owed > p.msg.Transferred() && p.link.Err() == nil {
			return true
		}
	}
	return false
}

func (c *Context) shutdown(reason error) {
	if c.closed.Swap(true) {
		return
	}
	// Instructions posted but never injected.
	for {
		in := c.inq.peek()
		if in == nil {
			break
		}
		c.failInst(in, reason)
		c.inq.pop()
	}
	if list := c.inq.takeOverflow(); list != nil {
		for i := range list {
			c.failInst(&list[i], reason)
		}
	}
	for _, p := range c.peers {
		if p != nil && p.failed == nil {
			c.failPeer(p, reason)
		}
	}
	c.dropAllEarly()
	c.ops.failAll(reason)
	c.runLater()
	// Wake Ready's goroutine while the doorbell's waiter (an adapter's,
	// which its port's Close releases) still works, and let it end.
	c.bell.Ring()
	if c.readyReq != nil {
		close(c.readyReq)
		// Its sleep may be in the waiter of a port: closing the port
		// first would take the wake-up back from under it.
		select {
		case <-c.readyDone:
		case <-time.After(2 * readyBound):
		}
	}
	for _, p := range c.ports {
		_ = p.Close()
	}
}
