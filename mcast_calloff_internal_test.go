package amigo

import (
	"errors"
	"fmt"
	"testing"
)

// calloffJob is a job of ranks in one process whose contexts the test
// advances one at a time, so that packets cross in the order it chooses.
type calloffJob struct {
	t  *testing.T
	cl []*Client
}

func newCalloffJob(t *testing.T, n int) *calloffJob {
	cl, err := NewLocal(n, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cl {
			_ = c.Close()
		}
	})
	return &calloffJob{t: t, cl: cl}
}

func (j *calloffJob) ctx(r int) *Context { return j.cl[r].Context(0) }

// until advances the contexts of ranks until cond holds, a bounded number
// of times.
func (j *calloffJob) until(what string, cond func() bool, ranks ...int) {
	j.t.Helper()
	for i := 0; i < 10000 && !cond(); i++ {
		for _, r := range ranks {
			j.ctx(r).Advance()
		}
	}
	if !cond() {
		j.t.Fatalf("%s: not after 10000 rounds of Advance", what)
	}
}

// mcTarget records how a target's part of a multicast ended.
type mcTarget struct {
	handled, done bool
	err           error
	deferred      Deferred
}

// receive has the target take the multicast at once, or hold it (Defer).
func (m *mcTarget) receive(hold bool) Handler {
	return func(c *Context, msg *Message) {
		m.handled = true
		if hold {
			d, err := msg.Defer()
			if err != nil {
				m.err, m.done = err, true
			}
			m.deferred = d
			return
		}
		if err := msg.Receive(make([]byte, msg.Size()), func(err error) { m.err, m.done = err, true }); err != nil {
			m.err, m.done = err, true
		}
	}
}

// startHeld multicasts from rank 0 to targets by store and forward and
// brings the request to the first target, which holds it. It returns the
// origin's sent flag and error.
func (j *calloffJob) startHeld(targets []int, first *mcTarget) (*bool, *error) {
	var eps []Endpoint
	for _, r := range targets {
		eps = append(eps, EndpointOf(r))
	}
	sent, sentErr := false, error(nil)
	if err := j.ctx(0).MulticastWith(&MulticastParams{Targets: eps, Dispatch: 1, Data: make([]byte, 4096),
		Way: MulticastStoreForward, Sent: func(err error) { sent, sentErr = true, err }}); err != nil {
		j.t.Fatal(err)
	}
	j.until("the first target holds the request", func() bool { return first.handled }, 0, targets[0])
	return &sent, &sentErr
}

// A store-and-forward multicast called off before its request reached the
// last target (the origin's call-off overtook the request, on another
// link): the last target returns the request to the origin (MCGO), and the
// origin calls it off again for every target, instead of leaving the last
// one waiting for data for ever. Ranks 1, 2, 3 are the chain; rank 1 fails
// after it forwarded; rank 2 forwards only after rank 3 read the call-off.
func TestMulticastCalledOffBeforeLastTarget(t *testing.T) {
	j := newCalloffJob(t, 4)
	var w, v, b mcTarget
	j.ctx(1).SetDispatch(1, w.receive(false))
	j.ctx(2).SetDispatch(1, v.receive(true))
	j.ctx(3).SetDispatch(1, b.receive(false))
	sent, sentErr := j.startHeld([]int{1, 2, 3}, &w)
	j.until("rank 2 holds the request", func() bool { return v.handled }, 1, 2)
	if err := j.cl[1].Close(); err != nil {
		t.Fatal(err)
	}
	j.until("the origin calls the multicast off", func() bool { return *sent }, 0)
	if err := namesRankInternal(*sentErr, 1); err != nil {
		t.Fatalf("origin: %v", err)
	}
	// Rank 3 reads the call-off of a multicast it has not heard of.
	j.ctx(3).Advance()
	if b.handled {
		t.Fatal("rank 3 got the request before rank 2 forwarded it")
	}
	// Rank 2's Accept runs before its Advance polls: it forwards the
	// request, then reads its own call-off.
	if err := j.ctx(2).Accept(v.deferred, make([]byte, 4096), func(err error) { v.err, v.done = err, true }); err != nil {
		t.Fatal(err)
	}
	j.ctx(2).Advance()
	j.until("rank 3's receive ends", func() bool { return b.done }, 3, 0, 2)
	if !b.handled || b.err == nil {
		t.Fatalf("rank 3: handled %v, err %v; want its receive failed", b.handled, b.err)
	}
	if err := namesRankInternal(b.err, 1); err != nil || !errors.Is(b.err, ErrMulticast) {
		t.Fatalf("rank 3: %v (%v)", b.err, err)
	}
	j.until("rank 2's receive ends", func() bool { return v.done }, 2)
	if v.err == nil {
		t.Fatal("rank 2 completed a multicast called off")
	}
}

// A target of a store-and-forward multicast whose next target has failed
// tells the origin rather than forward the request into nothing; the
// origin, which called the multicast off before that target had the
// request, calls it off again for it. Ranks 1, 2, 3 are the chain; rank 3
// fails; rank 1 forwards only after rank 2 read the call-off.
func TestMulticastForwardToFailedTarget(t *testing.T) {
	j := newCalloffJob(t, 4)
	var v, b, x mcTarget
	j.ctx(1).SetDispatch(1, v.receive(true))
	j.ctx(2).SetDispatch(1, b.receive(false))
	j.ctx(3).SetDispatch(1, x.receive(false))
	sent, sentErr := j.startHeld([]int{1, 2, 3}, &v)
	if err := j.cl[3].Close(); err != nil {
		t.Fatal(err)
	}
	j.until("the origin calls the multicast off", func() bool { return *sent }, 0)
	if err := namesRankInternal(*sentErr, 3); err != nil {
		t.Fatalf("origin: %v", err)
	}
	j.ctx(2).Advance()
	if err := j.ctx(1).Accept(v.deferred, make([]byte, 4096), func(err error) { v.err, v.done = err, true }); err != nil {
		t.Fatal(err)
	}
	j.ctx(1).Advance()
	j.until("rank 2's receive ends", func() bool { return b.done }, 2, 0)
	if !b.handled || b.err == nil {
		t.Fatalf("rank 2: handled %v, err %v; want its receive failed", b.handled, b.err)
	}
	if err := namesRankInternal(b.err, 3); err != nil || !errors.Is(b.err, ErrMulticast) {
		t.Fatalf("rank 2: %v (%v)", b.err, err)
	}
}

func namesRankInternal(err error, rank int) error {
	var pe *PeerError
	if err == nil {
		return errors.New("no error")
	}
	if !errors.As(err, &pe) || int(pe.Addr.Rank) != rank {
		return fmt.Errorf("%v does not name rank %d", err, rank)
	}
	return nil
}
