package main

import (
	"time"

	"github.com/amigo-hpc/amigo"
)

// Point-to-point benchmarks after osu_latency, osu_bw, osu_bibw and
// osu_mbw_mr. Messages are active messages: data up to Config.InlineMax
// travels in the descriptor buffer and the handler copies it into the
// receive buffer, as MPI_Recv does; larger data goes by the eager/STOP
// protocol into the buffer the handler names.

func init() {
	register(Benchmark{Name: "latency", Doc: "one-way latency by ping-pong between ranks 0 and 1 (osu_latency)", Run: latency})
	register(Benchmark{Name: "bw", Doc: "bandwidth from rank 0 to rank 1, windows of 64 messages (osu_bw)", Run: bandwidth})
	register(Benchmark{Name: "am_bw", Doc: "bw whose handler leaves inline data in place instead of copying it out (ucx_perftest -t ucp_am_bw)", Run: amBandwidth})
	register(Benchmark{Name: "bibw", Doc: "bidirectional bandwidth between ranks 0 and 1 (osu_bibw)", Run: bibw})
	register(Benchmark{Name: "mbw_mr", Doc: "aggregate bandwidth and message rate of n/2 pairs (osu_mbw_mr)", Run: mbwMR})
}

// receiver counts messages arriving on a dispatch id, landing each in buf.
// Its callbacks are made once (newReceiver), so that receiving allocates
// nothing. The handler is one closure that counts an inline message
// itself: the receiver of a message rate run runs it for every message,
// and a method value and a callback per message added a third to the
// instructions amigo spends delivering one (callgrind).
type receiver struct {
	e       *Env
	buf     []byte
	got     int
	want    int
	every   int    // with onEvery set: call it after every every-th message
	left    int    // messages until the next onEvery
	onEvery func() // see every
	inPlace bool   // inline data is used where it lies, not copied into buf
	done    func(error)
	reached func() bool // got >= want
	handler amigo.Handler
}

func newReceiver(e *Env, buf []byte) *receiver {
	r := &receiver{e: e, buf: buf}
	r.done = r.arrived
	r.reached = func() bool { return r.got >= r.want }
	r.handler = func(c *amigo.Context, m *amigo.Message) {
		if !m.Inline() {
			if err := m.Receive(r.buf[:m.Size()], r.done); err != nil {
				r.e.Fail(err)
			}
			return
		}
		if !r.inPlace {
			m.CopyTo(r.buf)
		}
		r.got++
		if r.left--; r.left == 0 && r.onEvery != nil {
			r.left = r.every
			r.onEvery()
		}
	}
	return r
}

// setEvery makes the receiver call fn after every n-th message.
func (r *receiver) setEvery(n int, fn func()) {
	r.every, r.left, r.onEvery = n, n, fn
}

// arrived is the done callback of a message received into buf.
func (r *receiver) arrived(err error) {
	r.e.Fail(err)
	r.got++
	if r.left--; r.left == 0 && r.onEvery != nil {
		r.left = r.every
		r.onEvery()
	}
}

func latency(e *Env) error {
	sbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	rbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	rcv := newReceiver(e, rbuf)
	e.Ctx.SetDispatch(e.D(0), rcv.handler)
	e.Header("Latency Test", fLatency)
	if err := e.Barrier(); err != nil {
		return err
	}
	if e.Rank > 1 {
		return nil
	}
	peer := amigo.EndpointOf(1 - e.Rank)
	k := amigo.NewCounter()
	cond := rcv.reached
	inline := e.Client.Config().InlineMax
	for _, size := range e.Sizes(true) {
		iters, warm := e.Iters(size, latCounts)
		// A message that travels inline is copied when it is injected:
		// like MPI_Send's eager buffering, its buffer is free at once and
		// it needs no done callback. A larger one is done when the
		// receiver acknowledged it, before its reply comes back.
		done := k.Done()
		if size <= inline {
			done = nil
		}
		if err := e.Barrier2(); err != nil {
			return err
		}
		// Context.Send and Wait, not a held context as the message rate
		// loops use (streams): on a loaded machine the held ping-pong
		// measured no better in three A/B runs (bench/ab.sh), though
		// such runs differed as much between two fixed revisions.
		var start time.Time
		for i := 0; i < iters+warm; i++ {
			if i == warm {
				e.CountAllocs()
				start = time.Now()
			}
			rcv.want++
			if e.Rank == 0 {
				if done != nil {
					k.Add(1)
				}
				if err := e.Ctx.Send(peer, e.D(0), nil, sbuf[:size], done); err != nil {
					return err
				}
				if err := e.Wait(cond); err != nil {
					return err
				}
			} else {
				if err := e.Wait(cond); err != nil {
					return err
				}
				if done != nil {
					k.Add(1)
				}
				if err := e.Ctx.Send(peer, e.D(0), nil, sbuf[:size], done); err != nil {
					return err
				}
			}
		}
		elapsed := time.Since(start)
		e.AllocsPer(2 * iters)
		e.Row(size, us(elapsed)/float64(2*iters))
	}
	return e.Ctx.WaitCounter(e.Deadline, k)
}

// Barrier2 synchronizes ranks 0 and 1 only.
func (e *Env) Barrier2() error {
	b := &e.bar
	return e.pairBarrier(b)
}

func (e *Env) pairBarrier(b *barrier) error {
	b.pair++
	ep := b.pair | 1<<31
	var hdr [4]byte
	hdr[0], hdr[1], hdr[2], hdr[3] = byte(ep), byte(ep>>8), byte(ep>>16), byte(ep>>24)
	k := amigo.NewCounter()
	k.Add(1)
	if err := e.Ctx.Send(amigo.EndpointOf(1-e.Rank), barrierDispatch, hdr[:], nil, k.Done()); err != nil {
		return err
	}
	err := e.Ctx.Wait(e.Deadline, func() bool { return b.counts[ep] >= 1 && k.Pending() == 0 })
	delete(b.counts, ep)
	return err
}

// held runs f with the context held by the calling goroutine (see
// amigo.Held) and returns what it returns.
func (e *Env) held(f func(h *amigo.Held) (time.Time, error)) (time.Time, error) {
	h := e.Ctx.Hold()
	defer h.Release()
	return f(h)
}

// waitHeld is Wait for the holder of the context.
func (e *Env) waitHeld(h *amigo.Held, cond func() bool) error {
	if err := h.Wait(e.Deadline, cond); err != nil {
		return err
	}
	return e.err
}

// window sends window messages of size bytes to peer and waits until they
// are done locally.
func (e *Env) window(peer amigo.Endpoint, d amigo.Dispatch, buf []byte, k *amigo.Counter) error {
	for j := 0; j < e.Opts.Window; j++ {
		k.Add(1)
		if err := e.Ctx.Send(peer, d, nil, buf, k.Done()); err != nil {
			return err
		}
	}
	return nil
}

// windowHeld is window for the holder of the context.
func (e *Env) windowHeld(h *amigo.Held, peer amigo.Endpoint, d amigo.Dispatch, buf []byte, k *amigo.Counter) error {
	for j := 0; j < e.Opts.Window; j++ {
		k.Add(1)
		if err := h.Send(peer, d, nil, buf, k.Done()); err != nil {
			return err
		}
	}
	return nil
}

func bandwidth(e *Env) error {
	return streams(e, "Bandwidth Test", false, e.Rank == 0, e.Rank == 1, fBW)
}

// amBandwidth is bw with the receive semantics of ucx_perftest's ucp_am_bw:
// its handler of an eager message only counts it (the data is used where
// the transport delivered it, and copied only with a flag the comparison
// does not set), while a message too large for eager delivery still lands
// in the receive buffer (UCX's rendezvous: ucp_am_recv_data_nbx). amigo's
// counterpart of the first is a message that travels inline, whose handler
// sees the data in place; a larger one is received into the buffer.
func amBandwidth(e *Env) error {
	return streams(e, "Active Message Bandwidth Test", true, e.Rank == 0, e.Rank == 1, fBW)
}

// streams runs osu_bw between senders and receivers, pairing rank r with
// rank r+pairs. A sender sends windows of messages and waits after each for
// the receiver's acknowledgement; the time is the senders' slowest. With
// inPlace, the receiver's handler does not copy inline data out.
func streams(e *Env, title string, inPlace, sender, recv bool, fields ...Field) error {
	pairs := 1
	if len(fields) > 1 {
		pairs = e.Size / 2
	}
	sbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	rbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	acks, wantAcks := 0, 0
	acked := func() bool { return acks >= wantAcks }
	rcv := newReceiver(e, rbuf)
	rcv.inPlace = inPlace
	var peer amigo.Endpoint
	if sender {
		peer = amigo.EndpointOf(e.Rank + pairs)
	} else if recv {
		peer = amigo.EndpointOf(e.Rank - pairs)
		// An acknowledgement after every window: counted down rather
		// than by a division per message.
		rcv.setEvery(e.Opts.Window, func() {
			e.Fail(e.Ctx.SendImmediate(peer, e.D(1), nil, nil))
		})
	}
	e.Ctx.SetDispatch(e.D(0), rcv.handler)
	e.Ctx.SetDispatch(e.D(1), func(c *amigo.Context, m *amigo.Message) { acks++ })
	e.Header(title, fields...)
	if err := e.Barrier(); err != nil {
		return err
	}
	k := amigo.NewCounter()
	for _, size := range e.Sizes(false) {
		if size == 0 {
			continue
		}
		iters, warm := e.Iters(size, bwCounts)
		if err := e.Barrier(); err != nil {
			return err
		}
		var start time.Time
		if sender {
			start, err = e.held(func(h *amigo.Held) (time.Time, error) {
				var start time.Time
				for i := 0; i < iters+warm; i++ {
					if i == warm {
						e.CountAllocs()
						start = time.Now()
					}
					if err := e.windowHeld(h, peer, e.D(0), sbuf[:size], k); err != nil {
						return start, err
					}
					wantAcks++
					if err := h.WaitCounter(e.Deadline, k); err != nil {
						return start, err
					}
					if err := e.waitHeld(h, acked); err != nil {
						return start, err
					}
				}
				return start, nil
			})
			if err != nil {
				return err
			}
		} else if recv {
			rcv.want += (iters + warm) * e.Opts.Window
			if err := e.Wait(rcv.reached); err != nil {
				return err
			}
		}
		var elapsed float64
		if sender {
			elapsed = time.Since(start).Seconds()
			e.AllocsPer(iters * (e.Opts.Window + 1))
		}
		all, err := e.Gather(elapsed)
		if err != nil {
			return err
		}
		if e.Rank == 0 {
			tmax := 0.0
			for r := 0; r < pairs; r++ {
				tmax = max(tmax, all[r])
			}
			msgs := float64(pairs * iters * e.Opts.Window)
			mbs := float64(size) * msgs / tmax / 1e6
			if len(fields) > 1 {
				e.Row(size, mbs, msgs/tmax)
			} else {
				e.Row(size, mbs)
			}
		}
	}
	return nil
}

func mbwMR(e *Env) error {
	pairs := e.Size / 2
	return streams(e, "Multiple Bandwidth / Message Rate Test", false, e.Rank < pairs, e.Rank >= pairs && e.Rank < 2*pairs, fMBs, fMsgRate)
}

func bibw(e *Env) error {
	sbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	rbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	rcv := newReceiver(e, rbuf)
	e.Ctx.SetDispatch(e.D(0), rcv.handler)
	e.Header("Bi-Directional Bandwidth Test", fBW)
	if err := e.Barrier(); err != nil {
		return err
	}
	if e.Rank > 1 {
		return nil
	}
	peer := amigo.EndpointOf(1 - e.Rank)
	k := amigo.NewCounter()
	for _, size := range e.Sizes(false) {
		if size == 0 {
			continue
		}
		iters, warm := e.Iters(size, bwCounts)
		if err := e.Barrier2(); err != nil {
			return err
		}
		start, err := e.held(func(h *amigo.Held) (time.Time, error) {
			var start time.Time
			for i := 0; i < iters+warm; i++ {
				if i == warm {
					e.CountAllocs()
					start = time.Now()
				}
				if err := e.windowHeld(h, peer, e.D(0), sbuf[:size], k); err != nil {
					return start, err
				}
				rcv.want += e.Opts.Window
				if err := h.WaitCounter(e.Deadline, k); err != nil {
					return start, err
				}
				if err := e.waitHeld(h, rcv.reached); err != nil {
					return start, err
				}
			}
			return start, nil
		})
		if err != nil {
			return err
		}
		t := time.Since(start).Seconds()
		e.AllocsPer(2 * iters * e.Opts.Window)
		e.Row(size, float64(size)*2*float64(iters*e.Opts.Window)/t/1e6)
	}
	return nil
}
