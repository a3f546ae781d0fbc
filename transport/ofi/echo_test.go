//go:build ofi

package ofi

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/transport"
)

// The ping-pong between processes runs rank 1 as a child process that
// answers every packet: this test binary, started again with echoEnv
// naming the job's directory and echoModeEnv the way it answers
// ("adapter": its port's Progress and Poll, a handler writing the answer
// into its link; "floor": a loop in C on the same endpoint).
const (
	echoEnv     = "AMIGO_OFI_TEST_ECHO"
	echoModeEnv = "AMIGO_OFI_TEST_ECHO_MODE"
)

// echoer writes, on its link, a packet of the same size for every packet
// it receives; an empty one ends the ping-pong.
type echoer struct {
	l   *transport.Link
	tr  *fifo.Tracker
	end bool
}

func (e *echoer) Receive(from transport.Addr, pkt []byte) {
	if len(pkt) == 0 {
		e.end = true
		return
	}
	writePacket(nil, e.l, e.tr, len(pkt), func() { e.tr.Complete() })
}

// echoChild is rank 1 of the ping-pong.
func echoChild(dir, prov, mode string) error {
	job := &fileJob{dir: dir, rank: 1, size: 2}
	a, err := New(job, transport.NewRegions(), Options{Provider: prov, Timeout: time.Minute, Logf: func(string, ...any) {}})
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.Start(context.Background()); err != nil {
		return err
	}
	p, err := a.Open(0, transport.NewDoorbell())
	if err != nil {
		return err
	}
	l, err := p.Link(transport.Addr{Rank: 0})
	if err != nil {
		return err
	}
	if mode == "floor" {
		pp := p.(*port)
		pp.enter()
		defer pp.leave()
		_, err := pp.floorPingPong(transport.Addr{Rank: 0}, 1<<40, true)
		return err
	}
	e := &echoer{l: l, tr: fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil)}
	deadline := time.Now().Add(time.Hour)
	for k := 0; !e.end; k++ {
		p.Progress()
		p.Poll(e, 64)
		e.tr.Complete()
		if k&1023 == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("no end of the ping-pong")
			}
			if err := l.Err(); err != nil {
				return err
			}
		}
	}
	// Let the last acknowledgements leave.
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); {
		p.Progress()
		p.Poll(e, 64)
	}
	return nil
}

// BenchmarkProcessPingPong is a round trip of an 8-byte packet between
// two processes through the adapter alone, without the AMI: rank 0
// writes a packet into its link and advances its port until the child's
// answer arrives ("adapter"). Beside it, the same round trip on the same
// kind of endpoint, buffers and queues driven by a loop in C with no call
// from Go between messages ("floor"): what the provider costs as amigo
// configures it, for comparison with fi_pingpong and with the adapter.
// ns/op is a whole round trip; fi_pingpong's usec/xfer is half of one.
func BenchmarkProcessPingPong(b *testing.B) {
	for _, prov := range providers() {
		for _, mode := range []string{"adapter", "floor"} {
			b.Run(prov+"/"+mode, func(b *testing.B) { benchProcessPingPong(b, prov, mode) })
		}
	}
}

func benchProcessPingPong(b *testing.B, prov, mode string) {
	dir := b.TempDir()
	child := startChild(b, echoEnv+"="+dir, echoModeEnv+"="+mode, "AMIGO_OFI_PROVIDER="+prov)
	defer child.stop(10 * time.Second)
	a, err := New(&fileJob{dir: dir, rank: 0, size: 2}, transport.NewRegions(), Options{Provider: prov, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	p, err := a.Open(0, transport.NewDoorbell())
	if err != nil {
		b.Fatal(err)
	}
	peer := transport.Addr{Rank: 1}
	l, err := p.Link(peer)
	if err != nil {
		b.Fatal(err)
	}
	if mode == "floor" {
		pp := p.(*port)
		pp.enter()
		defer pp.leave()
		if _, err := pp.floorPingPong(peer, 1000, false); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		n, err := pp.floorPingPong(peer, int64(b.N), false)
		b.StopTimer()
		if err != nil || n != int64(b.N) {
			b.Fatalf("%d of %d round trips: %v", n, b.N, err)
		}
		if err := pp.endFloorPingPong(peer); err != nil {
			b.Fatal(err)
		}
		return
	}
	tr := fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil)
	var got cnt
	advance := func() {
		p.Progress()
		p.Poll(&got, 64)
		tr.Complete()
	}
	round := func(i int) {
		writePacket(b, l, tr, 8, advance)
		for k := 0; got.n < i; k++ {
			advance()
			if k&1023 == 1023 {
				if err := l.Err(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for i := 1; i <= 1000; i++ {
		round(i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round(1001 + i)
	}
	b.StopTimer()
	writePacket(b, l, tr, 0, advance)
	for k := 0; k < 1000; k++ {
		advance()
	}
}
