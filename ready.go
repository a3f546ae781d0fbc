package amigo

import (
	"time"
)

// Waiting without spinning, for programs that do not own a progress loop:
// Ready hands the context's sleep to a goroutine of amigo's that wakes a
// channel, and AdvanceWait sleeps on the calling goroutine. Both sleep on
// the context's doorbell, which every source of work rings: a peer that
// delivered a packet into shared memory (a futex wake), a socket that became
// readable (the TCP adapter's epoll set), an engine that completed a
// transfer, a goroutine that posted an instruction. An idle context costs
// no processor time: the doorbell's sleep is in the kernel, bounded by
// readyBound.

// readyBound bounds one sleep of the goroutine behind Ready; when it runs
// out the channel fires anyway (once a second at most, for an idle
// context), so a lost wake-up, which the doorbell's handshake rules out,
// could never stall a program.
const readyBound = time.Second

// Ready advances the context once, as Advance does, and returns a channel
// that receives when the context may have work: at once if that Advance
// handled anything, else when a packet arrives, a transfer completes, or an
// instruction is posted (Send from another goroutine, Do). Call it from the
// goroutine that owns the context; after a receive,
// Advance until it returns 0 and call Ready again. It lets that goroutine
// select on amigo and on anything else at once (a net.Listener, timers,
// channels); while it waits, the context uses no processor.
//
// A receive may be spurious (nothing to do once Advance looks); it is never
// missed: the context arms its doorbell, advances once more and only then
// hands the sleep over, the order Wait follows.
func (c *Context) Ready() <-chan struct{} {
	c.enter()
	defer c.leave()
	if c.ready == nil {
		c.ready = make(chan struct{}, 1)
		c.readyReq = make(chan struct{}, 1)
		c.readyDone = make(chan struct{})
		go c.watchReady(c.ready, c.readyReq, c.readyDone)
	}
	select { // a receive the program did not take
	case <-c.ready:
	default:
	}
	if c.closed.Load() {
		c.fireReady()
		return c.ready
	}
	c.bell.Arm()
	if c.advance() > 0 || c.closed.Load() {
		c.bell.Disarm()
		c.fireReady()
		return c.ready
	}
	select {
	case c.readyReq <- struct{}{}:
	default: // the watcher has a request queued: it serves this one too
	}
	return c.ready
}

// fireReady makes Ready's channel ready. The goroutine behind it may have
// fired it already (its wake-up and the owner's advance can both see the same
// work): one token is as good as two.
func (c *Context) fireReady() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// watchReady is the goroutine behind Ready: for each request it sleeps on
// the doorbell the owner armed, then fires ready. It ends when the context
// closes.
func (c *Context) watchReady(ready, req, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for range req {
		// The word is cleared by a ring, and by the end of a sleep; the
		// owner may have armed it again, advanced, and queued this request
		// while an earlier sleep ended. A cleared word may hide a ring:
		// fire without sleeping, and the owner looks.
		if c.bell.Armed() && !c.closed.Load() {
			c.bell.Sleep(nil, t, readyBound)
		}
		select {
		case ready <- struct{}{}:
		default:
		}
		if c.closed.Load() {
			return
		}
	}
}

// AdvanceWait advances the context; if that handled nothing, it sleeps until
// the context may have work (as Ready's channel would fire) or timeout
// elapses, and advances again. It returns the events handled, 0 when the
// timeout ran out with nothing to do. Call it from the goroutine that owns
// the context; it never spins.
func (c *Context) AdvanceWait(timeout time.Duration) int {
	c.enter()
	defer c.leave()
	if n := c.advance(); n > 0 || timeout <= 0 {
		return n
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 || c.closed.Load() {
			return 0
		}
		c.bell.Arm()
		if n := c.advance(); n > 0 {
			c.bell.Disarm()
			return n
		}
		if c.bell.Sleep(nil, c.timer, left) {
			c.stats.SleepTimeouts++
		}
		c.stats.Sleeps++
		if n := c.advance(); n > 0 {
			return n
		}
	}
}
