package amigo

import (
	"context"
	"runtime"

	"github.com/amigo-hpc/amigo/internal/order"
)

// Held is a context held by one goroutine across several operations: the
// goroutine that called Hold owns it until Release, as it owns it inside
// Advance, and its sends are written straight into the peers' descriptor
// buffers.
//
// What it saves: taking and giving back a context (Advance, Wait, a
// direct SendImmediate) is an atomic read-modify-write, a full fence that
// waits for the goroutine's earlier stores to leave its core. A goroutine
// that sends and then waits for an answer (every exchange of a small
// collective) pays for it after its send, while the descriptor's cache line
// is on its way to the peer's core: one more trip between cores. Holding
// the context, it takes it once, before it sends, and waits without
// fences.
//
// While a goroutine holds the context, other goroutines still post
// instructions (they are queued, and Advance injects them); nobody else may
// call Advance or Wait, exactly as inside Advance. Callbacks run inside
// Held.Advance and Held.Wait, on the holding goroutine; they must not call
// Hold. The value is the context's own: Hold allocates nothing.
type Held struct {
	c *Context
}

// Hold makes the calling goroutine the context's owner until Release. Like
// Advance, it panics if a goroutine is inside Advance or holds the context.
func (c *Context) Hold() *Held {
	c.enter()
	return &c.held
}

// TryHold is Hold for a goroutine that would rather not wait for another
// owner: it makes the calling goroutine the context's owner and returns
// the Held if no goroutine is inside Advance or holds the context, and
// returns nil otherwise, without panicking. (A goroutine that is injecting
// a message directly leaves within a few stores, and TryHold waits for
// it.) On the way in it costs one compare-and-swap, as Hold does; a layer
// that serialises its goroutines itself may use the hold as its lock, as
// package mpi does.
//
// Memory ordering: a TryHold that succeeds (a compare-and-swap) sees every
// write the previous owner made before its Release. Release is a release
// store (package order), not a read-modify-write: a goroutine that
// Releases and then loads a word of its own (a count of its lock's
// waiters, say) may perform the load before its Release is visible to
// other processors. A layer that parks goroutines which found the context
// held must therefore, after it counts a waiter and before the waiter's
// last TryHold, call HoldBarrier: then the owner's Release either precedes
// the barrier, and the last TryHold sees it, or follows it, and so does
// the owner's load, which sees the waiter.
func (c *Context) TryHold() *Held {
	if c.busy.CompareAndSwap(0, busyAdvance) {
		return &c.held
	}
	return c.tryHoldSlow()
}

// tryHoldSlow is TryHold once the context was found taken: it waits out a
// posting goroutine, not an owner.
func (c *Context) tryHoldSlow() *Held {
	for spins := 0; !c.busy.CompareAndSwap(0, busyAdvance); spins++ {
		if c.busy.Load() == busyAdvance {
			return nil
		}
		if spins > 64 {
			runtime.Gosched()
		}
	}
	return &c.held
}

// HoldBarrier is the barrier TryHold's memory-ordering note asks of a
// layer that parks goroutines waiting for a held context: every store
// another thread issued before it is visible to the loads that follow it.
// It is a system call (membarrier) where stores are release stores without
// a fence (package order), and does nothing where they are fenced.
func HoldBarrier() { order.Barrier() }

// Release gives the context back.
func (h *Held) Release() { h.c.leave() }

// Context returns the held context.
func (h *Held) Context() *Context { return h.c }

// Advance is Context.Advance for the holder.
func (h *Held) Advance() int { return h.c.advance() }

// Wait is Context.Wait for the holder.
func (h *Held) Wait(ctx context.Context, cond func() bool) error { return h.c.wait(ctx, cond) }

// Queued reports whether instructions wait in the context's queue for an
// Advance to inject them: a SendImmediate of the holder that could not be
// written at once, or instructions other goroutines posted. A holder that
// is about to stop advancing for a while advances once if it reports true.
func (h *Held) Queued() bool { return h.c.inq.nonEmpty() }

// Unsent reports whether a message the holder sent since the context last
// advanced may still wait in this process for an Advance to move it:
// instructions in the queue (Queued), or a message for a link whose
// adapter moves it in its Progress (TCP, libfabric: written into the
// link's descriptor buffer, or handed to the provider at once, which may
// keep it until its progress). A message written into a shared-memory
// descriptor buffer is in the peer's memory already. A holder that is
// about to stop advancing for a while advances once if it reports true.
func (h *Held) Unsent() bool { return h.c.progressDue || h.c.inq.nonEmpty() }

// Push moves on what Unsent reports, without looking for arrivals: it
// injects the queued instructions and runs every port's Progress (the TCP
// adapter writes what its links hold to their sockets, the libfabric
// adapter runs the provider's progress), but polls no port, so no handler
// runs. It is the cheaper call for a holder about to stop advancing for a
// while; callbacks that become due run in the next Advance. It returns the
// number of instructions and descriptors processed.
func (h *Held) Push() int { return h.c.push() }

// SendImmediate is Context.SendImmediate for the holder: the message is
// written into ep's descriptor buffer at once unless instructions posted
// earlier still wait in the queue or behind a full FIFO, in which case it
// is queued behind them and the next Advance injects it.
func (h *Held) SendImmediate(ep Endpoint, d Dispatch, header, data []byte) error {
	c := h.c
	// A message that fits a slot goes as the holder's Send of one does,
	// checks and write in one call (sendSmall accepts nothing above
	// ImmediateMax); the rest, and what it declines, as below.
	if c.sendSmall(ep, d, header, data, nil) {
		return nil
	}
	idx, err := c.immediateTo(ep, d, header, data)
	if err != nil {
		return err
	}
	if !c.closed.Load() && c.injectOwned(idx, d, header, data) {
		return nil
	}
	return c.postImmediate(idx, d, header, data)
}

// SendInline writes a message that travels inline (header and data within
// Config.InlineMax) into ep's descriptor buffer at once, and reports
// whether it did. When it did, header and data were copied and may be
// reused at once: no callback follows, on every adapter, where Send's done
// over a link that still moves the bytes (TCP, libfabric) waits for the
// peer to take the descriptor. When it did not (a larger message, a peer
// not connected yet, instructions queued before it, no room in the FIFO or
// the descriptor buffer, a failed peer, a message that goes announced
// while the peer has not taken what was sent before it: above the link's
// transport.Link.InlineBusyMax, or in the mid-size range while announced
// measured faster, mid.go) nothing was sent and the holder sends the
// message with Send. It is SendImmediate's way for messages above
// ImmediateMax, which the queue cannot copy.
func (h *Held) SendInline(ep Endpoint, d Dispatch, header, data []byte) (bool, error) {
	c := h.c
	idx, err := c.sendTo(ep, d, header)
	if err != nil {
		return false, err
	}
	if len(header)+len(data) > c.cfg.InlineMax || c.closed.Load() {
		return false, nil
	}
	return c.injectOwned(idx, d, header, data), nil
}

// Send is Context.Send for the holder: a message that travels inline is
// written into ep's descriptor buffer at once, without taking the context
// (the holder owns it), unless instructions posted earlier still wait in
// the queue or behind a full FIFO; its done callback runs inside the
// holder's next Advance or Wait, as every callback does. A larger one is
// announced at once on the same condition (or queued at its peer behind a
// full FIFO, as the next Advance would); any other Send is queued, and the
// holder's next Advance or Wait injects it.
//
// # Why
//
// A window of large Sends was queued whole before the holder's Wait
// injected its first announcement, so the receiver started on the window
// some 4 us late (64 messages of 32 KiB, the AMD host's slow state, where
// a window takes some 55 us), and each message went through the queue.
// Announced at once, windows of 32-256 KiB moved 0.99-1.06x as much in
// the slow state and 1.01-1.02x in the fast one, of 16 KiB fetched
// (AMIGO_INLINE_MAX=8704) 1.08x in the fast one (interleaved runs of 4-6
// rounds).
func (h *Held) Send(ep Endpoint, d Dispatch, header, data []byte, done func(error)) error {
	c := h.c
	if traceOn {
		return c.tracedSend(ep, d, header, data, done, nil)
	}
	if c.sendSmall(ep, d, header, data, done) {
		return nil
	}
	idx, err := c.sendTo(ep, d, header)
	if err != nil {
		return err
	}
	if len(header)+len(data) <= c.cfg.InlineMax && c.injectOwnedDone(idx, d, header, data, done) {
		return nil
	}
	if p := c.owned(idx); p != nil {
		if n := len(header) + len(data); n > c.cfg.InlineMax || p.busyFor(n, len(data) > 0) {
			c.sendHeld(idx, d, header, data, done)
			return nil
		}
	}
	return c.postSend(idx, d, header, data, done, nil)
}

// sendHeld injects the holder's message to peer idx on the calling
// goroutine, or queues it. Its callbacks run in the next Advance or Wait,
// even those due at once (callNow, failInst): the peer may have taken
// what was sent before it since Send looked, so that the message goes
// inline after all and is complete when written.
func (c *Context) sendHeld(idx int32, d Dispatch, header, data []byte, done func(error)) {
	// The instruction is the context's own (heldInst): as a literal it
	// cleared some 400 bytes a message, 175 instructions of the sender's
	// 2,900 (callgrind, windows of 32 KiB fetched). execute copies it
	// where it queues it, and writes none of it.
	in := &c.heldInst
	in.kind, in.dest, in.disp, in.hdr, in.data, in.done = instSend, idx, uint16(d), header, data, done
	c.holderSend = true
	c.execute(in)
	c.holderSend = false
	in.hdr, in.data, in.done = nil, nil, nil
}

// WaitCounter is Context.WaitCounter for the holder.
func (h *Held) WaitCounter(ctx context.Context, k *Counter) error {
	if err := h.c.wait(ctx, k.zero); err != nil {
		return err
	}
	return k.Err()
}

// Atomic is Context.Atomic for the holder: an operation that can be
// performed at once is, on the calling goroutine (its done callback runs
// in the next Advance or Wait); otherwise it is posted.
func (h *Held) Atomic(p *AtomicParams) error {
	_, err := h.c.atomic(p, false, true)
	return err
}

// AtomicNow is Context.AtomicNow for the holder: an operation that can be
// performed at once is, on the calling goroutine, without taking the
// context (the holder owns it); otherwise it is posted behind the
// instructions before it and the next Advance or Wait carries it on.
func (h *Held) AtomicNow(p *AtomicParams) (done bool, err error) {
	return h.c.atomic(p, true, true)
}
