package mpi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Header of every message of the layer, in the AMI header:
//
//	bytes 0-3   context id of the communicator (little endian)
//	bytes 4-7   source rank in the communicator
//	bytes 8-11  tag
//	byte  12    kind: kindMsg; kindSync, a message whose receiver
//	            acknowledges its match (Ssend); kindAck, that
//	            acknowledgement; kindHello for the World handshake;
//	            kindRevoke and kindAgree of fault tolerance (ft.go);
//	            kindRMA, kindRMAReply and kindRMACtl for windows, whose
//	            headers are laid out in win_am.go and win_pscw.go;
//	            kindWake, which wakes a rank (coll_shm.go)
//	byte  13    handshake round; of kindSync and kindAck, the generation
//	            of the sender's slot
//	bytes 14-15 zero; of kindSync and kindAck, the sender's slot
const hdrLen = 16

const (
	kindMsg    = 0
	kindHello  = 1
	kindSync   = 2
	kindAck    = 3
	kindRevoke = 4
	kindAgree  = 5
	// kindRMA and kindRMAReply are an accumulate the target's layer
	// applies and its reply, with headers of their own (win_am.go);
	// kindRMACtl a window's synchronisation notice (win_pscw.go).
	kindRMA      = 6
	kindRMAReply = 7
	kindRMACtl   = 8
	// kindWake carries nothing: it rings the doorbell of a rank asleep in
	// a collective through shared memory (coll_shm.go).
	kindWake = 9
)

func putHdr(b *[hdrLen]byte, ctx uint32, src, tag int32) {
	binary.LittleEndian.PutUint64(b[0:], uint64(ctx)|uint64(uint32(src))<<32)
	binary.LittleEndian.PutUint64(b[8:], uint64(uint32(tag))|uint64(kindMsg)<<32)
}

// engine is the mpi layer of one amigo context: the dispatch handler, the
// posted and unexpected queues, the free lists, and the context ids in use.
// It is guarded by its lock (engineLock, threads.go), which is the
// context's hold: the goroutine that holds it is the only one that
// advances the context, so the handler runs under it inside Advance, and
// its small messages are written straight into the peers' descriptor
// buffers.
type engine struct {
	engineLock
	ac   *amigo.Context
	opts Options
	disp amigo.Dispatch
	rank int // world rank
	size int
	cidx int // context index, the same on every rank
	// immMax is the most data a message carries by SendImmediate;
	// inlineMax the most it carries inline (Held.SendInline).
	immMax, inlineMax int
	// oversub: the host runs more ranks than processors
	// (amigo.Context.Oversubscribed). It decides how this rank waits.
	oversub bool
	// oversubJob: some host of the job runs more ranks than processors.
	// World's handshake agrees on it, so that every rank picks the same
	// algorithm where the choice depends on it (flatAllreduce): ranks of
	// hosts that differ would otherwise run different message patterns
	// and wait for each other for ever. helloOver gathers it: the OR of
	// the flags the handshake's messages carried.
	oversubJob bool
	helloOver  bool

	posted  postedQueue
	unexp   unexpQueue
	bufs    pool // unexpected inline data
	scratch pool // collective scratch

	reqFree   *request
	schedFree *sched
	ids       [idWords]uint64 // context ids: a set bit is free
	world     *Comm
	closed    bool
	// unflushed is set when a message copied by SendImmediate was posted
	// outside Advance and no Advance has run since: it waits in the AMI's
	// instruction queue. direct is set while the layer posts outside
	// Advance on behalf of a schedule.
	unflushed bool
	direct    bool
	hello     [64]int32
	stats     Stats
	hdr       [hdrLen]byte // header of SendImmediate, copied at once
	// small receives the messages of the collectives run without a
	// schedule (allreduceSmall, reduceSmall): up to immMax bytes, aligned
	// for every element type; partial holds reduceSmall's partial result
	// away from the root.
	small   [amigo.ImmediateMax / 8]uint64
	partial [amigo.ImmediateMax / 8]uint64
	// shmWaits counts the collectives waiting for arrivals on a shared
	// segment (coll_shm.go).
	shmWaits int
	// exp is the receive recvSmall waits for, and expCond reports it done.
	exp     expected
	expCond func() bool

	// idOwned is set while an agreement on a context id (agreeID) offers
	// this rank's free ids; idNext is the lowest id of a communicator whose
	// agreement found them offered and goes next, or -1.
	idOwned bool
	idNext  int

	// Synchronous sends waiting for their acknowledgement, by slot, with
	// each slot's generation and the free slots (ssend.go).
	syncReqs []*request
	syncGen  []uint8
	syncFree []uint16

	// wins holds the windows of the context by id (their
	// communicator's), for the accumulates their owners apply.
	wins map[uint32]*Win

	nop       func(*amigo.Context) // posted to ring a driver's doorbell
	driveCond func() bool          // driveCondition's, made once

	ft ftState // failures and revocations (ft.go)
}

// Stats counts what the mpi layer of a context did.
type Stats struct {
	Sent          uint64 // messages sent
	SentImmediate uint64 // of which copied at once (SendImmediate, SendInline)
	Received      uint64 // messages delivered to receives
	Unexpected    uint64 // messages that arrived before their receive
	Deferred      uint64 // of which announcements kept for a later fetch
	Truncated     uint64 // messages longer than their receive buffer
	// UnexpectedBytes is the inline data held now for messages that wait
	// for their receive; UnexpectedPeak the most it has been. Announced
	// messages hold no data here: theirs stays at the sender, within the
	// AMI's unexpected-data budget.
	UnexpectedBytes int
	UnexpectedPeak  int
	Malformed       uint64 // packets with a header the layer does not know
	Dropped         uint64 // messages that arrived after the world was freed
	Collectives     uint64 // collective operations started
}

var (
	registryMu sync.Mutex
	registry   = map[*amigo.Context]*engine{}
)

// World returns the communicator of all ranks of ac's job, ranked as the
// job ranks them, with the mpi layer on context ac: every rank must call
// World on the context of the same index, with the same Options, and all of
// them before any of them communicates. World is collective: it returns
// once every rank has registered the layer's dispatch handler, so that no
// message can find a rank unprepared; ctx bounds the wait. Calling World
// again on the same context returns the same communicator, and opts is
// ignored.
//
// The layer owns ac from then on: its operations, from any goroutine,
// advance ac while they wait, and the program must not advance it itself.
func World(ctx context.Context, ac *amigo.Context, opts *Options) (*Comm, error) {
	if ac == nil {
		return nil, fmt.Errorf("%w: nil amigo context", ErrComm)
	}
	registryMu.Lock()
	e := registry[ac]
	registryMu.Unlock()
	if e != nil {
		return e.world, nil
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o, err := o.resolve(lookupEnv)
	if err != nil {
		return nil, err
	}
	cl := ac.Client()
	inline := cl.Config().InlineMax
	if inline < hdrLen {
		return nil, errorf("mpi: amigo InlineMax %d is below the layer's %d-byte header", inline, hdrLen)
	}
	e = &engine{
		ac:        ac,
		opts:      o,
		disp:      o.Dispatch,
		rank:      cl.Rank(),
		size:      cl.Size(),
		cidx:      ac.Index(),
		immMax:    min(amigo.ImmediateMax, inline) - hdrLen,
		inlineMax: inline - hdrLen,
		oversub:   ac.Oversubscribed(),
	}
	e.helloOver = e.oversub
	e.posted.init(o.MatchBuckets)
	e.unexp.init(o.MatchBuckets)
	e.bufs.limit = o.UnexpectedRetain
	e.scratch.limit = o.ScratchRetain
	e.idNext = -1
	e.expCond = func() bool { return e.exp.done }
	e.nop = func(*amigo.Context) {}
	e.park = make(chan struct{}, 1)
	e.driveCond = e.driveCondition()
	for i := range e.ids {
		e.ids[i] = ^uint64(0)
	}
	e.ids[0] &^= 1 // id 0: the world
	w := &Comm{e: e, rank: e.rank, size: e.size}
	w.eps = make([]amigo.Endpoint, e.size)
	for r := range w.eps {
		w.eps[r] = amigo.Endpoint{Rank: r, Context: e.cidx}
	}
	w.setID(0)
	e.world = w

	// The engine stays locked until the handshake is done: a goroutine
	// that calls World on ac meanwhile gets w, and waits in its first
	// call for the handshake, which advances ac.
	// The registry is looked at before the engine is locked: the lock is
	// the context's hold, which a second engine of the context would
	// wait for without being told of its release.
	registryMu.Lock()
	if other := registry[ac]; other != nil {
		registryMu.Unlock()
		return other.world, nil
	}
	e.lock()
	registry[ac] = e
	registryMu.Unlock()
	defer e.unlock()
	if err := ac.SetDispatch(e.disp, e.handle); err != nil {
		e.unregister()
		return nil, err
	}
	if err := e.handshake(ctx); err != nil {
		_ = ac.SetDispatch(e.disp, nil)
		e.unregister()
		e.closed = true
		return nil, errorf("mpi: World: %w", err)
	}
	e.oversubJob = e.helloOver
	return w, nil
}

func (e *engine) unregister() {
	registryMu.Lock()
	if registry[e.ac] == e {
		delete(registry, e.ac)
	}
	registryMu.Unlock()
}

// handshake is a dissemination barrier over the world whose messages ask
// for an acknowledgement: one that finds no handler at its destination (a
// rank that has not called World yet) is sent again, with back-off. When it
// completes on any rank, every rank has entered it, and so has registered
// its handler. Each message carries what its sender knows of the job's
// oversubscription (helloOver): what a rank has heard by round k it passes
// on in round k+1, so that when the handshake completes every rank has
// heard, directly or not, from every other.
func (e *engine) handshake(ctx context.Context) error {
	round := 0
	for k := 1; k < e.size; k <<= 1 {
		dest := amigo.Endpoint{Rank: (e.rank + k) % e.size, Context: e.cidx}
		backoff := 20 * time.Microsecond
		for {
			hdr := make([]byte, hdrLen)
			hdr[12], hdr[13] = kindHello, byte(round)
			if e.helloOver {
				hdr[14] = 1 // all this rank knows of so far
			}
			state := 0
			var ackErr error
			err := e.ac.SendWith(&amigo.SendParams{
				Dest: dest, Dispatch: e.disp, Header: hdr,
				RemoteDone: func(err error) {
					switch {
					case err == nil:
						state = 1
					case errors.Is(err, amigo.ErrNoDispatch):
						state = 2
					default:
						ackErr, state = err, 3
					}
				},
			})
			if err != nil {
				return err
			}
			if err := e.held.Wait(ctx, func() bool { return state != 0 }); err != nil {
				return err
			}
			if state == 1 {
				break
			}
			if state == 3 {
				return ackErr
			}
			until := time.Now().Add(backoff)
			backoff = min(2*backoff, 10*time.Millisecond)
			if err := e.held.Wait(ctx, func() bool { return time.Now().After(until) }); err != nil {
				return err
			}
		}
		// The rank that greets this one in the round may have died
		// (a job that goes on when ranks fail): asked now and then.
		r, polls := round, 0
		from := amigo.Endpoint{Rank: (e.rank - k + e.size) % e.size, Context: e.cidx}
		var gone error
		if err := e.held.Wait(ctx, func() bool {
			if polls++; e.hello[r] > 0 || polls&1023 != 0 {
				return e.hello[r] > 0
			}
			gone = e.ac.PeerErr(from)
			return gone != nil
		}); err != nil {
			return err
		}
		if e.hello[r] == 0 && gone != nil {
			return gone
		}
		round++
	}
	return nil
}

// handle is the layer's active-message handler: it matches an arriving
// message against the posted queue, or keeps it in the unexpected queue.
func (e *engine) handle(_ *amigo.Context, m *amigo.Message) {
	h := m.Header
	if len(h) != hdrLen || h[12] != kindMsg && h[12] != kindSync {
		e.handleOther(m)
		return
	}
	ctx := binary.LittleEndian.Uint32(h[0:])
	src := int32(binary.LittleEndian.Uint32(h[4:]))
	tag := int32(binary.LittleEndian.Uint32(h[8:]))
	sync := h[12] == kindSync
	if src < 0 || tag < 0 {
		e.stats.Malformed++
		return
	}
	e.events++
	if e.closed {
		e.stats.Dropped++
		return
	}
	if e.exp.on && ctx == e.exp.ctx && src == e.exp.src && tag == e.exp.tag {
		e.takeExpected(m, sync)
		return
	}
	if r := e.posted.match(ctx, src, tag); r != nil {
		if sync {
			e.sendAck(m.Source, h)
		}
		e.deliver(r, m, src, tag)
		return
	}
	u := e.unexp.alloc()
	u.ctx, u.src, u.tag = ctx, src, tag
	if sync {
		u.sync, u.from = true, m.Source
		copy(u.ack[:], h[13:16])
	}
	u.size = m.Size()
	if m.Inline() {
		u.inline = true
		u.data = e.bufs.get(len(m.Data))
		m.CopyTo(u.data)
		e.stats.UnexpectedBytes += len(u.data)
		e.stats.UnexpectedPeak = max(e.stats.UnexpectedPeak, e.stats.UnexpectedBytes)
	} else {
		d, err := m.Defer()
		if err != nil {
			e.unexp.release(u)
			e.stats.Malformed++
			return
		}
		u.deferred = d
		e.stats.Deferred++
	}
	e.unexp.add(u)
	e.stats.Unexpected++
}

// handleOther is handle for every packet but a message (kindMsg,
// kindSync): the layer's control messages, windows' accumulates and
// notices, and what it does not know.
func (e *engine) handleOther(m *amigo.Message) {
	h := m.Header
	if len(h) >= hdrLen && h[12] >= kindRMA && h[12] <= kindRMACtl {
		e.onRMA(m)
		return
	}
	if len(h) != hdrLen {
		e.stats.Malformed++
		return // an announcement left unclaimed is declined
	}
	switch h[12] {
	case kindAck:
		e.onAck(h)
	case kindHello:
		if r := int(h[13]); r < len(e.hello) {
			e.hello[r]++
		}
		e.helloOver = e.helloOver || h[14] != 0
	case kindRevoke:
		e.onRevoke(binary.LittleEndian.Uint32(h[0:]))
	case kindAgree:
		e.agreeMsg(m)
	case kindWake:
		e.events++ // goroutines asleep in wait look again
	default:
		e.stats.Malformed++
	}
}

// deliver hands message m to the posted receive r it matched.
func (e *engine) deliver(r *request, m *amigo.Message, src, tag int32) {
	size := m.Size()
	r.status = Status{Source: int(src), Tag: int(tag), Count: size}
	if size > len(r.buf) {
		e.stats.Truncated++
		if m.Inline() {
			// It leaves its first bytes.
			r.status.Count = m.CopyTo(r.buf)
			e.complete(r, &TruncateError{Source: int(src), Tag: int(tag), Size: size, Cap: len(r.buf)})
			return
		}
		// An announced one is taken whole, so that the send completes
		// (the truncation is the receiver's error only), into scratch
		// whose first bytes complete copies into the buffer.
		r.trunc = e.scratch.get(size)
		r.inAMI = true
		if err := m.Receive(r.trunc, r.onAMI); err != nil {
			r.inAMI = false
			e.complete(r, err)
		}
		return
	}
	e.stats.Received++
	if m.Inline() {
		m.CopyTo(r.buf)
		e.complete(r, nil)
		return
	}
	r.inAMI = true
	if err := m.Receive(r.buf[:size], r.onAMI); err != nil {
		r.inAMI = false
		e.complete(r, err)
	}
}

// recvSmall receives the message (cid, src, tag), which must carry exactly
// len(buf) bytes inline, into buf, waiting for it if it has not arrived;
// for collectives that run without a schedule. It needs no request: the
// message is taken from the unexpected queue, or the handler matches it
// against e.exp before the posted queue, which cannot hold another receive
// it fits (collective tags are unique within a communicator's collective
// context, and wildcard receives are for point-to-point traffic only).
func (e *engine) recvSmall(ctx context.Context, cid uint32, src, tag int32, buf []byte) error {
	if u := e.unexp.find(cid, src, tag); u != nil {
		e.unexp.remove(u)
		var err error
		if u.inline {
			if u.size == len(buf) {
				copy(buf, u.data)
				e.stats.Received++
			} else {
				err = e.smallErr(u.size, len(buf))
			}
			e.stats.UnexpectedBytes -= len(u.data)
			e.bufs.put(u.data)
		} else {
			_ = e.ac.Reject(u.deferred)
			err = e.smallErr(u.size, len(buf))
		}
		e.unexp.release(u)
		return err
	}
	if e.ft.on {
		if err := e.ftRecv(cid, src); err != nil {
			return err
		}
	}
	e.exp = expected{on: true, ctx: cid, src: src, tag: tag, buf: buf}
	if err := e.waitDone(ctx, &e.exp.done, e.expCond); err != nil {
		e.exp = expected{}
		return e.waitErr(err, "collective waiting for", int(src), noArg)
	}
	err := e.exp.err
	e.exp = expected{}
	return err
}

// expected is the receive of recvSmall, or of Recv's way without a
// request (recvExpected), while it waits.
type expected struct {
	on       bool // waiting
	done     bool
	ctx      uint32
	src, tag int32
	buf      []byte
	err      error
	// comm is Recv's communicator (nil for recvSmall); count is the
	// length of the message it took, or r the request it was handed to.
	comm  *Comm
	count int
	r     *request
}

// canExpect reports whether a blocking receive of (ctx, src, tag), with
// neither a wildcard, may wait in e.exp instead of the posted queue: the
// slot is free (no collective runs without a schedule and no other such
// receive waits, on this goroutine or one asleep in a wait: inDirect) and
// no posted receive could match the messages it matches. The handler
// looks at e.exp before the posted queue, so a receive posted while it
// waits, which is later, cannot take its message.
func (e *engine) canExpect(ctx uint32, src, tag int32) bool {
	return !e.inDirect && (e.posted.n == 0 || e.posted.wild.head == nil && !e.posted.has(ctx, src, tag))
}

// recvExpected is Comm.Recv of a message from src with tag, neither a
// wildcard, when canExpect allows it: the receive waits in e.exp, and the
// handler copies an inline message that fits into buf with no request,
// no posted queue and no completion (a tenth of the instructions of a
// ping-pong's Recv went to those). A larger message, one that does not
// fit, and one announced for a fetch are handed to a request, as a posted
// receive would be, which Recv then waits for.
func (c *Comm) recvExpected(ctx context.Context, buf []byte, src, tag int32) (Status, error) {
	e := c.e
	if e.unexp.n > 0 {
		if u := e.unexp.find(c.p2p, src, tag); u != nil {
			r := c.newRecv(c.p2p, buf, int(src), int(tag))
			e.unexp.remove(u)
			e.recvUnexpected(r, u)
			return c.recvWait(ctx, r)
		}
	}
	if e.ft.on {
		if err := e.ftRecv(c.p2p, src); err != nil {
			return Status{}, err
		}
	}
	c.inflight++ // as track: the handler moves it to a request it makes
	// inDirect keeps a collective of another goroutine, which would use
	// e.exp too, on its schedule while this receive waits.
	e.inDirect = true
	e.exp = expected{on: true, ctx: c.p2p, src: src, tag: tag, buf: buf, comm: c}
	err := e.waitDone(ctx, &e.exp.done, e.expCond)
	x := e.exp
	e.exp = expected{}
	e.inDirect = false
	switch {
	case x.r != nil:
		// Handed to a request: wait for it (if the wait above ended
		// with an error, the request is given up there).
		return c.recvWait(ctx, x.r)
	case x.done:
		// Taken (or failed, x.err), whatever the wait returned.
		c.untrack()
		if x.err != nil {
			return Status{}, x.err
		}
		return Status{Source: int(src), Tag: int(tag), Count: x.count}, nil
	}
	c.untrack()
	return Status{}, e.waitErr(err, "Recv from", int(src), int(tag))
}

// takeExpected hands message m to the waiting recvSmall or recvExpected.
// For recvSmall, a message of another length, or not inline, is refused
// with an error (an announced one is left unclaimed, which fails the
// sender's send).
func (e *engine) takeExpected(m *amigo.Message, sync bool) {
	x := &e.exp
	x.on, x.done = false, true
	if c := x.comm; c != nil {
		if sync {
			e.sendAck(m.Source, m.Header)
		}
		if size := m.Size(); m.Inline() && size <= len(x.buf) {
			x.count = m.CopyTo(x.buf)
			e.stats.Received++
			return
		}
		r := e.allocReq(reqRecv)
		r.ctx, r.src, r.tag, r.buf = x.ctx, x.src, x.tag, x.buf
		r.counted = c // the count recvExpected took
		x.r = r
		e.deliver(r, m, x.src, x.tag)
		return
	}
	if size := m.Size(); !m.Inline() || size != len(x.buf) {
		x.err = e.smallErr(size, len(x.buf))
		return
	}
	m.CopyTo(x.buf)
	e.stats.Received++
}

func (e *engine) smallErr(got, want int) error {
	e.stats.Truncated++
	return fmt.Errorf("%w: a collective's message of %d bytes where %d were due", ErrCount, got, want)
}

// postRecv matches receive r against the unexpected queue, or posts it.
func (e *engine) postRecv(r *request) {
	u := e.unexp.find(r.ctx, r.src, r.tag)
	if u == nil {
		if e.ft.on {
			if err := e.ftRecv(r.ctx, r.src); err != nil {
				e.complete(r, err)
				return
			}
		}
		e.posted.add(r)
		return
	}
	e.unexp.remove(u)
	e.recvUnexpected(r, u)
}

// recvUnexpected hands the message u, taken from the unexpected queue, to
// receive r.
func (e *engine) recvUnexpected(r *request, u *unexpected) {
	if u.sync {
		var h [hdrLen]byte
		copy(h[13:16], u.ack[:])
		e.sendAck(u.from, h[:])
		e.unflushed = true
	}
	r.status = Status{Source: int(u.src), Tag: int(u.tag), Count: u.size}
	switch {
	case u.size > len(r.buf):
		e.stats.Truncated++
		if u.inline {
			r.status.Count = copy(r.buf, u.data)
			e.stats.UnexpectedBytes -= len(u.data)
			e.bufs.put(u.data)
			e.complete(r, &TruncateError{Source: int(u.src), Tag: int(u.tag), Size: u.size, Cap: len(r.buf)})
			break
		}
		// Taken whole, as in deliver.
		r.trunc = e.scratch.get(u.size)
		r.inAMI = true
		if err := e.ac.Accept(u.deferred, r.trunc, r.onAMI); err != nil {
			r.inAMI = false
			e.complete(r, err)
		}
	case u.inline:
		copy(r.buf, u.data)
		e.stats.UnexpectedBytes -= len(u.data)
		e.bufs.put(u.data)
		e.stats.Received++
		e.complete(r, nil)
	default:
		e.stats.Received++
		r.inAMI = true
		if err := e.ac.Accept(u.deferred, r.buf[:u.size], r.onAMI); err != nil {
			r.inAMI = false
			e.complete(r, err)
		}
	}
	e.unexp.release(u)
}

// sendMsg sends buf with match data (ctx, src, tag) to dest. A message
// small enough is copied at once and needs no request, unless sync is set:
// sendMsg returns nil.
// Otherwise it takes a request from newReq, which completes when buf may be
// reused, and returns it.
func (e *engine) sendMsg(dest amigo.Endpoint, ctx uint32, src, tag int32, buf []byte, sync bool) (*request, error) {
	if e.ft.on {
		if err := e.ftSend(dest, ctx); err != nil {
			return nil, err
		}
	}
	e.stats.Sent++
	if len(buf) <= e.immMax && !sync {
		putHdr(&e.hdr, ctx, src, tag)
		e.stats.SentImmediate++
		// The holder's message is in the peer's descriptor buffer unless
		// it had to queue.
		err := e.held.SendImmediate(dest, e.disp, e.hdr[:], buf)
		if e.direct && e.held.Queued() {
			e.unflushed = true
		}
		if err != nil {
			err = e.peerFailure(err)
		}
		return nil, err
	}
	if len(buf) <= e.inlineMax && !sync {
		// Copied into the peer's descriptor buffer at once if it can be:
		// the Send is complete then, on every adapter, where the AMI's
		// done callback waits for the peer to take it over TCP.
		putHdr(&e.hdr, ctx, src, tag)
		ok, err := e.held.SendInline(dest, e.disp, e.hdr[:], buf)
		if err != nil {
			return nil, e.peerFailure(err)
		}
		if ok {
			e.stats.SentImmediate++
			return nil, nil
		}
	}
	r := e.allocReq(reqSend)
	putHdr(&r.hdr, ctx, src, tag)
	r.buf = buf
	r.inAMI = true
	if err := e.held.Send(dest, e.disp, r.hdr[:], buf, r.onAMI); err != nil {
		e.freeReq(r)
		return nil, e.peerFailure(err)
	}
	return r, nil
}

// unsent reports whether a message this rank sent may still wait in this
// process for an Advance (see flush).
func (e *engine) unsent() bool { return e.unflushed || e.held.Unsent() }

// flush makes sure the messages this rank sent have left it, by pushing
// once (Held.Push) when some may still wait for an Advance: copied
// outside Advance and queued (unflushed), or written for a link whose
// adapter moves them in its Progress (Held.Unsent: TCP, libfabric), by a
// call's last steps or by the handlers of its last pass (a schedule's
// next step). A rank that
// completed an operation and then computes would otherwise leave them
// there until its next call, or, over TCP, until the adapter's own
// hand-off takes its sockets (Config.TCP.Handoff). Over shared memory a
// message is in the peer's memory once written, and nothing is due.
func (e *engine) flush() {
	if e.unsent() {
		e.unflushed = false
		e.held.Push()
	}
}
