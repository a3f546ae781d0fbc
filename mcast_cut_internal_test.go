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

// lostOrigin runs a store-and-forward multicast from rank 0 to the chain
// 1, 2, 3 whose first target holds the request while the paths from the
// origin to the targets in cut break; the middle target, rank 2, reaches
// everyone. The origin calls the multicast off, and its call-off reaches
// rank 2 before the request does (the request comes the long way, through
// rank 1, which forwards it only then). If notice, rank 3 learns of its
// broken path before the request comes. It returns the targets' outcomes
// once rank 2's receive has ended, which without word from a target that
// lost the origin it never would: the origin, having called the multicast
// off, waits for the last target's return of the request (MCGO) to call
// it off again, and that return cannot reach it. With the word, rank 2
// tells the origin, which calls it off again for rank 2, naming the
// target that lost it.
func lostOrigin(t *testing.T, cut []int, notice bool) [4]mcTarget {
	j := newCalloffJob(t, 4)
	var x [4]mcTarget
	j.ctx(1).SetDispatch(1, x[1].receive(true))
	for r := 2; r <= 3; r++ {
		j.ctx(r).SetDispatch(1, x[r].receive(false))
	}
	sent, sentErr := j.startHeld([]int{1, 2, 3}, &x[1])
	for _, r := range cut {
		j.cut(0, r)
	}
	j.until("the origin calls the multicast off", func() bool { return *sent }, 0)
	if *sentErr == nil || !errors.Is(*sentErr, ErrMulticast) {
		t.Fatalf("origin: %v", *sentErr)
	}
	// Rank 2 reads the call-off of a multicast it has not heard of.
	j.ctx(2).Advance()
	if x[2].handled {
		t.Fatal("rank 2 got the request before rank 1 forwarded it")
	}
	if notice {
		// Rank 3 looks at its link to the origin, as any operation with
		// the origin would have it do, and fails the peer.
		c := j.ctx(3)
		idx, err := c.peerIndex(EndpointOf(0))
		if err != nil {
			t.Fatal(err)
		}
		c.activate(c.peer(idx))
		j.until("rank 3 fails its path to the origin", func() bool { return c.peer(idx).failed != nil }, 3)
	}
	// Rank 1 takes the request before it polls: it forwards it to rank 2,
	// then reads the call-off.
	if err := j.ctx(1).Accept(x[1].deferred, make([]byte, 4096), func(err error) { x[1].err, x[1].done = err, true }); err != nil {
		t.Fatal(err)
	}
	j.until("rank 2's receive ends", func() bool { return x[2].done }, 0, 1, 2, 3)
	if !x[2].handled || x[2].err == nil || !errors.Is(x[2].err, ErrMulticast) || !errors.Is(x[2].err, errOriginLost) {
		t.Fatalf("rank 2: handled %v, err %v; want its receive called off by a target that lost the origin", x[2].handled, x[2].err)
	}
	j.until("rank 1's receive ends", func() bool { return x[1].done }, 1)
	if x[1].err == nil {
		t.Fatal("rank 1 completed a multicast called off")
	}
	if x[3].handled {
		j.until("rank 3's receive ends", func() bool { return x[3].done }, 3)
		if x[3].err == nil {
			t.Fatal("rank 3 completed a multicast called off")
		}
	}
	return x
}

// The last target has failed its path to the origin when the request
// comes: it drops the request and calls the multicast off along the
// chain (onMCRTS).
func TestMulticastLastTargetLostOrigin(t *testing.T) {
	x := lostOrigin(t, []int{3}, true)
	if err := namesRankInternal(x[2].err, 3); err != nil {
		t.Fatalf("rank 2: %v", err)
	}
	if x[3].handled {
		t.Fatal("rank 3 took the request of an origin it had failed")
	}
}

// The first and the last target lose their paths to the origin after the
// request came: each, failing its part with the origin, calls the
// multicast off along the chain (failMcastPeer).
func TestMulticastTargetsLostOrigin(t *testing.T) {
	x := lostOrigin(t, []int{1, 3}, false)
	if namesRankInternal(x[2].err, 1) != nil && namesRankInternal(x[2].err, 3) != nil {
		t.Fatalf("rank 2: %v names neither rank 1 nor rank 3", x[2].err)
	}
	if !x[3].handled {
		t.Fatal("rank 3 dropped the request: it had not looked at its path to the origin")
	}
}
