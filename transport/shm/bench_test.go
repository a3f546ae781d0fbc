package shm_test

import (
	"sync/atomic"
	"testing"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/shm"
)

type countRecv struct {
	n atomic.Int64
	_ [56]byte
}

func (c *countRecv) Receive(from transport.Addr, pkt []byte) { c.n.Add(1) }

// BenchmarkRingPingPong is the adapter's own floor: an 8-byte descriptor
// each way through the rings of two adapters (as two processes would map
// them), polled by two goroutines, with no messaging layer above. ns/op is a
// round trip.
func BenchmarkRingPingPong(b *testing.B) {
	ads, _ := world(b, 2, shm.Options{})
	defer ads[0].Close()
	defer ads[1].Close()
	var ports [2]transport.Port
	var links [2]*transport.Link
	for r := range 2 {
		p, err := ads[r].Open(0, transport.NewDoorbell())
		if err != nil {
			b.Fatal(err)
		}
		ports[r] = p
	}
	for r := range 2 {
		l, err := ports[r].Link(transport.Addr{Rank: int32(1 - r)})
		if err != nil {
			b.Fatal(err)
		}
		links[r] = l
	}
	var tails [2]struct {
		t uint64
		_ [56]byte
	}
	send := func(r int) {
		l := links[r]
		t := tails[r].t
		// The consumer releases as it goes; the ring never fills here
		// beyond a pad.
		k := ring.SlotsFor(8)
		if pad := l.Msg.PadFor(t, k); pad > 0 {
			l.Msg.WritePad(t, pad)
			t += uint64(pad)
		}
		copy(l.Msg.Payload(t, 8), "01234567")
		l.Msg.Seal(t, 8)
		t += uint64(k)
		l.Msg.Publish(t)
		l.MsgBell.Ring()
		tails[r].t = t
	}
	var rc [2]countRecv
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for want := int64(1); ; want++ {
			for rc[1].n.Load() < want {
				select {
				case <-stop:
					return
				default:
				}
				ports[1].Poll(&rc[1], 16)
			}
			send(1)
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := int64(1); i <= int64(b.N); i++ {
		send(0)
		for rc[0].n.Load() < i {
			ports[0].Poll(&rc[0], 16)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/one-way")
	close(stop)
	<-done
}
