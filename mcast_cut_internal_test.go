package amigo

import (
	"errors"
	"testing"
)

// errPathCut fails the path between two ranks in the tests below.
var errPathCut = errors.New("path cut by the test")

// cut breaks the path between ranks a and b, both ways, and no other, as
// a reset of the one connection between two hosts does: each of the two
// fails the other, and every other rank still reaches both.
func (j *calloffJob) cut(a, b int) {
	for _, e := range [][2]int{{a, b}, {b, a}} {
		c := j.ctx(e[0])
		idx, err := c.peerIndex(EndpointOf(e[1]))
		if err != nil {
			j.t.Fatal(err)
		}
		c.peer(idx).link.Fail(peerErr(EndpointOf(e[1]), errPathCut))
	}
}

var multicastWays = []struct {
	name string
	way  MulticastWay
}{{"forward", MulticastForward}, {"store-and-forward", MulticastStoreForward}}

// multicast posts a multicast of 4 KiB from rank 0 to targets and returns
// its sent flag and error.
func (j *calloffJob) multicast(way MulticastWay, targets ...int) (*bool, *error) {
	var eps []Endpoint
	for _, r := range targets {
		eps = append(eps, EndpointOf(r))
	}
	sent, sentErr := new(bool), new(error)
	if err := j.ctx(0).MulticastWith(&MulticastParams{Targets: eps, Dispatch: 1, Data: make([]byte, 4096),
		Way: way, Sent: func(err error) { *sent, *sentErr = true, err }}); err != nil {
		j.t.Fatal(err)
	}
	return sent, sentErr
}

// The path between two targets of a chain breaks once every target has
// the request and before the data moves; the origin reaches both. The
// target before the break tells the origin, which calls the multicast off
// for every target, the one after the break among them: it waited for
// data from the target before it for ever (the origin spared it the
// call-off, as failed).
func TestMulticastChainCutBetweenTargets(t *testing.T) {
	for _, w := range multicastWays {
		t.Run(w.name, func(t *testing.T) {
			j := newCalloffJob(t, 4)
			var x [4]mcTarget
			for r := 1; r <= 3; r++ {
				j.ctx(r).SetDispatch(1, x[r].receive(false))
			}
			sent, sentErr := j.multicast(w.way, 1, 2, 3)
			j.until("rank 1 has the request", func() bool { return x[1].handled }, 0, 1)
			// The origin rests: the data cannot move before the cut.
			j.until("rank 3 has the request", func() bool { return x[3].handled }, 1, 2, 3)
			j.cut(1, 2)
			j.until("the origin and every target end", func() bool {
				return *sent && x[1].done && x[2].done && x[3].done
			}, 0, 1, 2, 3)
			if !errors.Is(*sentErr, ErrMulticast) {
				t.Fatalf("origin: %v, want ErrMulticast", *sentErr)
			}
			for r := 1; r <= 3; r++ {
				var pe *PeerError
				if !errors.Is(x[r].err, ErrMulticast) || !errors.As(x[r].err, &pe) {
					t.Fatalf("rank %d: %v, want ErrMulticast naming a peer", r, x[r].err)
				}
			}
			if err := namesRankInternal(x[2].err, 1); err != nil {
				t.Fatalf("rank 2: %v", err)
			}
		})
	}
}

// A target whose path to the next target is broken when the request
// comes tells the origin, which reaches every target, rather than pass
// the request into nothing: in forward mode the origin waited for the
// next targets' check-ins for ever.
func TestMulticastRequestToCutTarget(t *testing.T) {
	for _, w := range multicastWays {
		t.Run(w.name, func(t *testing.T) {
			j := newCalloffJob(t, 4)
			var x [4]mcTarget
			for r := 1; r <= 3; r++ {
				j.ctx(r).SetDispatch(1, x[r].receive(false))
			}
			j.cut(1, 2)
			sent, sentErr := j.multicast(w.way, 1, 2, 3)
			j.until("the origin and rank 1 end", func() bool { return *sent && x[1].done }, 0, 1, 2, 3)
			if err := namesRankInternal(*sentErr, 2); err != nil || !errors.Is(*sentErr, ErrMulticast) {
				t.Fatalf("origin: %v (%v)", *sentErr, err)
			}
			if err := namesRankInternal(x[1].err, 2); err != nil || !errors.Is(x[1].err, ErrMulticast) {
				t.Fatalf("rank 1: %v (%v)", x[1].err, err)
			}
			for r := 2; r <= 3; r++ {
				if x[r].handled {
					t.Fatalf("rank %d had the request", r)
				}
			}
		})
	}
}
