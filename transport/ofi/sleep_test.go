//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// A context asleep on the adapter's doorbell over tcp;ofi_rxm is woken by
// its completion queues' file descriptors: a packet sent while it sleeps
// ends the sleep without a ring, long before its bound, and is there to
// poll. The descriptors are in the waiter's epoll set only while it
// sleeps (watchQueues); this checks that one added while its queue is
// already ready, or becomes ready later, still wakes it. The consumer
// holds its port while it sleeps, as a context at work would, so that the
// adapter's watcher, which progresses the ports of contexts that stopped
// polling and rings them, stays out: only the descriptors can end the
// sleep. The sender waits, every round, until the consumer is asleep.
func TestSleepWokenByQueues(t *testing.T) {
	const prov = "tcp;ofi_rxm"
	ads, _ := newWorld(t, 2, Options{Provider: prov, Timeout: 10 * time.Minute})
	t.Cleanup(func() { ads[0].Close(); ads[1].Close() })
	bell, err := ads[1].Doorbell(0)
	if err != nil {
		t.Fatal(err)
	}
	if !bell.Waits() {
		t.Fatalf("%s: the adapter's doorbell does not sleep on the completion queues", prov)
	}
	dst, err := ads[1].Open(0, bell)
	if err != nil {
		t.Fatal(err)
	}
	src, err := ads[0].Open(0, transport.NewDoorbell())
	if err != nil {
		t.Fatal(err)
	}
	l, err := src.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr := fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil)
	send := func() {
		k := ring.SlotsFor(8)
		for !tr.Space(l.Msg.PadFor(tr.Tail(), k) + k) {
			src.Progress()
			tr.Complete()
		}
		tail := tr.Tail()
		if pad := l.Msg.PadFor(tail, k); pad > 0 {
			l.Msg.WritePad(tail, pad)
			tr.Inject(pad, nil)
			tail += uint64(pad)
		}
		l.Msg.Seal(tail, 8)
		tr.Inject(k, nil)
		l.Msg.Publish(tr.Tail())
		src.Progress()
	}
	dp := dst.(*port)

	const rounds = 30
	type result struct {
		timedOut bool
		took     time.Duration
		got      int
	}
	results := make(chan result, rounds)
	go func() {
		var sink cnt
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		for i := 0; i < rounds; i++ {
			bell.Arm()
			for dst.Poll(&sink, 64) > 0 {
			}
			dp.enter()
			t0 := time.Now()
			timedOut := bell.Sleep(nil, timer, time.Minute)
			took := time.Since(t0)
			dp.leave()
			for dst.Poll(&sink, 64) == 0 && time.Since(t0) < 20*time.Second {
				dst.Progress()
			}
			results <- result{timedOut, took, sink.n}
		}
	}()
	base := bell.Rings()
	for i := 0; i < rounds; i++ {
		for deadline := time.Now().Add(20 * time.Second); !(bell.Armed() && bell.Sleeping() > uint64(i)); {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the consumer never went to sleep", i)
			}
			time.Sleep(50 * time.Microsecond)
		}
		send()
		var r result
		select {
		case r = <-results:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the consumer never woke", i)
		}
		if r.timedOut || r.took > 10*time.Second || r.got != i+1 {
			t.Fatalf("round %d: sleep timed out %v after %v, %d packets delivered", i, r.timedOut, r.took, r.got)
		}
		for k := 0; k < 100 && tr.Complete() == 0; k++ {
			src.Progress()
		}
	}
	if rings := bell.Rings() - base; rings != 0 {
		t.Fatalf("%d rings: the sleeps should have ended by the queues' descriptors alone", rings)
	}
}
