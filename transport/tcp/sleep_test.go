package tcp

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// A context asleep on the doorbell the adapter provides is woken by its
// socket: a packet sent while it sleeps ends the sleep without a ring and
// long before its bound, and is there to poll. The sender waits until the
// consumer is known to be asleep (its doorbell armed and a sleep entered)
// before it sends, every round.
func TestSleepWokenBySocket(t *testing.T) {
	// A Handoff of a minute: no goroutine of the adapter takes the
	// sockets over, and a sleep's bound (half of it) is 30 s.
	ads, _, _ := newWorld(t, 2, Options{Handoff: time.Minute, Timeout: 10 * time.Minute})
	t.Cleanup(func() {
		for _, a := range ads {
			a.Close()
		}
	})
	bell, err := ads[1].Doorbell(0)
	if err != nil {
		t.Fatal(err)
	}
	if !bell.Waits() {
		t.Fatal("the adapter's doorbell does not sleep on the sockets")
	}
	dst, err := ads[1].Open(0, bell)
	if err != nil {
		t.Fatal(err)
	}
	// The consumer polls before the connection exists: a connection
	// accepted for a context that has not polled yet is read by the
	// engine until the context's first poll, and once more at the next
	// event after it, which could ring a later round.
	var first countingReceiver
	dst.Poll(&first, 64)
	src, err := ads[0].Open(0, transport.NewDoorbell())
	if err != nil {
		t.Fatal(err)
	}
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{l: l}
	const rounds = 50
	type result struct {
		timedOut bool
		took     time.Duration
		got      int
	}
	results := make(chan result, rounds)
	go func() {
		var sink countingReceiver
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for i := 0; i < rounds; i++ {
			for {
				bell.Arm()
				if dst.Poll(&sink, 64) > 0 { // the first round connects
					bell.Disarm()
					continue
				}
				break
			}
			t0 := time.Now()
			timedOut := bell.Sleep(nil, timer, time.Minute)
			took := time.Since(t0)
			for dst.Poll(&sink, 64) == 0 && time.Since(t0) < 20*time.Second {
			}
			dst.Progress()
			results <- result{timedOut, took, sink.n}
		}
	}()
	msg := make([]byte, 8)
	// Round 0 connects: until the connection is up and the context has
	// polled it, the adapter's engine may read the socket for the context
	// and ring it. From round 1 on only the socket may wake it.
	var base uint64
	for i := 0; i < rounds; i++ {
		if i == 1 {
			base = bell.Rings()
		}
		// Send only once the consumer is asleep.
		for deadline := time.Now().Add(20 * time.Second); !(bell.Armed() && bell.Sleeping() > uint64(i)); {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the consumer never went to sleep", i)
			}
			time.Sleep(50 * time.Microsecond)
		}
		for !p.send(msg) {
			src.Progress()
		}
		src.Progress()
		var r result
		select {
		case r = <-results:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the consumer never woke", i)
		}
		if r.timedOut || r.took > 10*time.Second || r.got != i+1 {
			t.Fatalf("round %d: sleep timed out %v after %v, %d packets delivered", i, r.timedOut, r.took, r.got)
		}
		for src.Progress() > 0 {
		}
	}
	if rings := bell.Rings() - base; rings != 0 {
		t.Fatalf("%d rings after the first round: the sleeps should have ended by the socket alone", rings)
	}
}

// A context that polls again after a quiet spell, injects, and stops
// polling has its packet written by the adapter within a few
// Options.Handoff, not at the watcher's keepalive pace (a quarter of
// Options.Timeout, 15 s here), which the quiet spell had slowed it to.
func TestHandoffAfterQuietSpell(t *testing.T) {
	ads, _, _ := newWorld(t, 2, Options{Timeout: time.Minute})
	ports := openAll(t, ads)
	l, err := ports[0].Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	p := &producer{l: l}
	var sink countingReceiver
	msg := make([]byte, 8)
	deliver := func(want int, poll0 bool) time.Duration {
		t.Helper()
		start := time.Now()
		for sink.n < want {
			if time.Since(start) > 10*time.Second {
				t.Fatalf("packet %d not delivered in 10 s", want)
			}
			if poll0 {
				ports[0].Progress()
			}
			ports[1].Poll(&sink, 64)
			ports[1].Progress()
		}
		return time.Since(start)
	}
	for !p.send(msg) {
		ports[0].Progress()
	}
	deliver(1, true) // connected, one packet through
	// Quiet: rank 0 polls nothing while the watcher looks several times.
	time.Sleep(20 * DefaultHandoff)
	ports[0].Progress() // it polls again...
	for !p.send(msg) {
		ports[0].Progress()
	}
	// ...and stops before writing: the adapter must.
	if d := deliver(2, false); d > 5*time.Second {
		t.Fatalf("the packet left %v after its context stopped polling", d)
	}
}
