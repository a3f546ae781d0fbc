package amigo_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// pair is a two-rank in-process job whose rank 1 runs on its own goroutine,
// advancing until stopped.
type pair struct {
	c0, c1 *amigo.Context
	cl     []*amigo.Client
	stop   atomic.Bool
	wg     sync.WaitGroup
}

func newPair(tb testing.TB, cfg amigo.Config, setup1 func(c *amigo.Context)) *pair {
	tb.Helper()
	cl, err := amigo.NewLocal(2, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	p := &pair{c0: cl[0].Context(0), c1: cl[1].Context(0), cl: cl}
	setup1(p.c1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.c1.Wait(context.Background(), p.stop.Load)
	}()
	return p
}

func (p *pair) close(tb testing.TB) {
	p.stop.Store(true)
	// Ring rank 1's doorbell so a sleeping Wait sees stop at once.
	_ = p.c1.Do(func(*amigo.Context) {})
	p.wg.Wait()
	for _, c := range p.cl {
		if err := c.Close(); err != nil {
			tb.Error(err)
		}
	}
}

var sizes8 = []byte("01234567")

// BenchmarkPingPong measures one-way latency of an 8-byte message between two
// goroutines: amigo's ping-pong (SendImmediate, answered from the handler
// with Reply, or with SendImmediate as "amigo-sendimm") next to a Go channel
// ping-pong. ns/op is one round trip; the one-way metric is half of it.
func BenchmarkPingPong(b *testing.B) {
	b.Run("amigo/8B", func(b *testing.B) { benchPingPong(b, true) })
	b.Run("amigo-sendimm/8B", func(b *testing.B) { benchPingPong(b, false) })
	benchPingPongFloors(b)
}

func benchPingPong(b *testing.B, reply bool) {
	p := newPair(b, amigo.Config{}, func(c *amigo.Context) {
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			if reply {
				_ = m.Reply(1, nil, m.Data)
			} else {
				_ = c.SendImmediate(m.Source, 1, nil, m.Data)
			}
		})
	})
	defer p.close(b)
	got := 0
	p.c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got++ })
	peer := amigo.EndpointOf(1)
	want := 0
	cond := func() bool { return got == want }
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(8)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want++
		if err := p.c0.SendImmediate(peer, 1, nil, sizes8); err != nil {
			b.Fatal(err)
		}
		if err := p.c0.Wait(ctx, cond); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/one-way")
}

func benchPingPongFloors(b *testing.B) {
	// The floor of any cross-core exchange: two goroutines spinning on
	// atomic words, one cache line each way.
	b.Run("atomic/8B", func(b *testing.B) {
		var ping, pong struct {
			v atomic.Uint64
			_ [56]byte
		}
		n := uint64(b.N)
		go func() {
			for i := uint64(1); i <= n; i++ {
				for ping.v.Load() != i {
				}
				pong.v.Store(i)
			}
		}()
		b.ReportAllocs()
		b.SetBytes(8)
		b.ResetTimer()
		for i := uint64(1); i <= n; i++ {
			ping.v.Store(i)
			for pong.v.Load() != i {
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/one-way")
	})
	b.Run("chan/8B", func(b *testing.B) {
		ping := make(chan [8]byte)
		pong := make(chan [8]byte)
		go func() {
			for v := range ping {
				pong <- v
			}
		}()
		var v [8]byte
		copy(v[:], sizes8)
		b.ReportAllocs()
		b.SetBytes(8)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ping <- v
			v = <-pong
		}
		b.StopTimer()
		close(ping)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/one-way")
	})
}

var bwSizes = []int{64 << 10, 1 << 20, 4 << 20}

// BenchmarkBandwidth measures streaming bandwidth from one goroutine rank to
// another: windows of 64 Sends, each received into the same buffer, then an
// acknowledgement, as osu_bw does. Next to it, copy() of the same sizes
// between two buffers, the bound for moving bytes in one address space.
func BenchmarkBandwidth(b *testing.B) {
	const window = 64
	for _, size := range bwSizes {
		b.Run(fmt.Sprintf("amigo/%s", sizeName(size)), func(b *testing.B) {
			dst := make([]byte, size)
			recvd := 0
			p := newPair(b, amigo.Config{}, func(c *amigo.Context) {
				done := func(err error) {
					if err != nil {
						panic(err)
					}
					recvd++
					if recvd%window == 0 {
						_ = c.SendImmediate(amigo.EndpointOf(0), 2, nil, nil)
					}
				}
				c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					if err := m.Receive(dst, done); err != nil {
						panic(err)
					}
				})
			})
			defer p.close(b)
			acks := 0
			p.c0.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { acks++ })
			src := make([]byte, size)
			for i := range src {
				src[i] = byte(i)
			}
			k := amigo.NewCounter()
			peer := amigo.EndpointOf(1)
			ctx := context.Background()
			wantAcks := 0
			ackCond := func() bool { return acks == wantAcks }
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for sent := 0; sent < b.N; {
				n := min(window, b.N-sent)
				if n < window {
					n = window // whole windows only; the extra is counted below
				}
				for j := 0; j < n; j++ {
					k.Add(1)
					if err := p.c0.Send(peer, 1, nil, src, k.Done()); err != nil {
						b.Fatal(err)
					}
				}
				sent += n
				wantAcks++
				if err := p.c0.WaitCounter(ctx, k); err != nil {
					b.Fatal(err)
				}
				if err := p.c0.Wait(ctx, ackCond); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			// Report bytes actually moved (whole windows).
			moved := float64(wantAcks*window) * float64(size)
			b.ReportMetric(moved/b.Elapsed().Seconds()/1e6, "MB/s-moved")
		})
		b.Run(fmt.Sprintf("copy/%s", sizeName(size)), func(b *testing.B) {
			src := make([]byte, size)
			dst := make([]byte, size)
			for i := range src {
				src[i] = byte(i)
			}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
			b.StopTimer()
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s-moved")
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkLockstep is a round trip of an 8-byte message between two
// in-process ranks that one goroutine advances in turn: no second core, so
// it measures amigo's own instructions per message (two sends, two
// receptions and the Advance calls between them), not the hardware's
// cross-core latency.
func BenchmarkLockstep(b *testing.B) {
	for _, over := range []string{"loop", "shm"} {
		b.Run(over, func(b *testing.B) { benchLockstep(b, over) })
	}
}

func benchLockstep(b *testing.B, over string) {
	cl := openOver(b, 2, amigo.Config{}, over)
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	got0, got1 := 0, 0
	c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got0++ })
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got1++ })
	e0, e1 := amigo.EndpointOf(0), amigo.EndpointOf(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := c0.SendImmediate(e1, 1, nil, sizes8); err != nil {
			b.Fatal(err)
		}
		for got1 <= i {
			c1.Advance()
			c0.Advance() // injects the message if it was queued
		}
		if err := c1.SendImmediate(e0, 1, nil, sizes8); err != nil {
			b.Fatal(err)
		}
		for got0 <= i {
			c0.Advance()
			c1.Advance()
		}
	}
}

// BenchmarkLockstepWindow is osu_mbw_mr's window of 64 8-byte messages
// between two in-process ranks over shared memory that one goroutine
// advances in turn: the sender holds its context and sends the window with
// a done callback each (MPI_Isend's), the receiver's handler copies each
// message out and counts it, then the sender waits for the callbacks. One
// op is one message; with no second core it counts amigo's instructions a
// message on both sides (bench/SMALL_PATH.md), not the cores' overlap.
func BenchmarkLockstepWindow(b *testing.B) {
	const window = 64
	cl := openOver(b, 2, amigo.Config{}, "shm")
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	buf := make([]byte, 8)
	got := 0
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		copy(buf, m.Data)
		got++
	})
	e1 := amigo.EndpointOf(1)
	k := amigo.NewCounter()
	kd := k.Done()
	ctx := context.Background()
	b.ReportAllocs()
	for sent := 0; sent < b.N; sent += window {
		h := c0.Hold()
		for j := 0; j < window; j++ {
			k.Add(1)
			if err := h.Send(e1, 1, nil, sizes8, kd); err != nil {
				b.Fatal(err)
			}
		}
		if err := h.WaitCounter(ctx, k); err != nil {
			b.Fatal(err)
		}
		h.Release()
		for got < sent+window {
			c1.Advance()
		}
	}
}

// BenchmarkAdvanceIdle is one Advance of a context with nothing to do: the
// cost of a turn of a waiting rank's loop, which bounds how soon it sees a
// message.
func BenchmarkAdvanceIdle(b *testing.B) {
	for _, over := range []string{"loop", "shm"} {
		b.Run(over, func(b *testing.B) {
			cl := openOver(b, 2, amigo.Config{}, over)
			c := cl[0].Context(0)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c.Advance()
			}
		})
	}
}
