//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// benchPair is two adapters of one job in this process, each with its
// port and its link to the other, driven by one goroutine the way the AMI
// drives a port: Progress, then Poll.
type benchPair struct {
	ads   []*Adapter
	ports [2]transport.Port
	links [2]*transport.Link
	trs   [2]*fifo.Tracker
	got   [2]cnt
	// calibrated is each port's spin as it opened, before the pair set
	// it to 0.
	calibrated [2]int
}

func newBenchPair(b testing.TB, prov string) *benchPair {
	return newBenchPairOpts(b, Options{Provider: prov, Timeout: time.Minute})
}

// newBenchPairOpts is newBenchPair with the adapters' options.
func newBenchPairOpts(b testing.TB, opts Options) *benchPair {
	ads, _ := newWorld(b, 2, opts)
	bp := &benchPair{ads: ads}
	b.Cleanup(func() { ads[0].Close(); ads[1].Close() })
	for r := range 2 {
		p, err := ads[r].Open(0, transport.NewDoorbell())
		if err != nil {
			b.Fatal(err)
		}
		// One goroutine drives both ports: a port that spins waiting for
		// its peer would wait for nothing, and add its spin to the work
		// measured. (Taken, as the adapter's watcher reads it.)
		pp := p.(*port)
		pp.enter()
		bp.calibrated[r] = int(pp.spin)
		pp.spin = 0
		pp.leave()
		bp.ports[r] = p
	}
	for r := range 2 {
		l, err := bp.ports[r].Link(transport.Addr{Rank: int32(1 - r)})
		if err != nil {
			b.Fatal(err)
		}
		bp.links[r] = l
		bp.trs[r] = fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil)
	}
	return bp
}

// advance is one Advance of rank r's port.
func (bp *benchPair) advance(r int) {
	bp.ports[r].Progress()
	bp.ports[r].Poll(&bp.got[r], 64)
	bp.trs[r].Complete()
}

// send writes one packet of size bytes into rank r's link.
func (bp *benchPair) send(b testing.TB, r, size int) {
	writePacket(b, bp.links[r], bp.trs[r], size, func() {
		bp.advance(0)
		bp.advance(1)
	})
}

// writePacket writes one packet of size bytes into link l, whose ring
// tracker is tr, calling advance while the ring has no room.
func writePacket(b testing.TB, l *transport.Link, tr *fifo.Tracker, size int, advance func()) {
	k := ring.SlotsFor(size)
	var deadline time.Time
	for !tr.Space(l.Msg.PadFor(tr.Tail(), k) + k) {
		advance()
		if deadline.IsZero() {
			deadline = time.Now().Add(time.Minute)
		} else if time.Now().After(deadline) {
			b.Fatal("no room in the link")
		}
	}
	tail := tr.Tail()
	if pad := l.Msg.PadFor(tail, k); pad > 0 {
		l.Msg.WritePad(tail, pad)
		tr.Inject(pad, nil)
		tail += uint64(pad)
	}
	l.Msg.Seal(tail, size)
	tr.Inject(k, nil)
	l.Msg.Publish(tr.Tail())
}

// wait advances both ports until rank r received want packets.
func (bp *benchPair) wait(b testing.TB, r, want int) {
	var deadline time.Time
	for k := 1; bp.got[r].n < want; k++ {
		bp.advance(1 - r)
		bp.advance(r)
		if k%1024 != 0 {
			continue
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(time.Minute)
		} else if time.Now().After(deadline) {
			b.Fatalf("rank %d: %d of %d packets", r, bp.got[r].n, want)
		}
	}
}

// BenchmarkPingPong is the adapter's work for a round trip of an 8-byte
// packet: both ranks driven by one goroutine, so ns/op is the processor
// time of both sides' Progress and Poll, and the provider's under them,
// with no waiting (a floor for amibench's latency over ofi, which is half
// a round trip).
func BenchmarkPingPong(b *testing.B) {
	for _, prov := range providers() {
		b.Run(prov, func(b *testing.B) {
			bp := newBenchPair(b, prov)
			round := func(i int) {
				bp.send(b, 0, 8)
				bp.wait(b, 1, i)
				bp.send(b, 1, 8)
				bp.wait(b, 0, i)
			}
			for i := 1; i <= 100; i++ {
				round(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				round(101 + i)
			}
		})
	}
}

// BenchmarkIdleAdvance is the cost of one Progress and Poll of a port
// with a link and nothing to do: how often a waiting rank looks at its
// completion queues.
func BenchmarkIdleAdvance(b *testing.B) {
	for _, prov := range providers() {
		b.Run(prov, func(b *testing.B) {
			bp := newBenchPair(b, prov)
			bp.send(b, 0, 8)
			bp.wait(b, 1, 1)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				bp.advance(0)
			}
		})
	}
}
