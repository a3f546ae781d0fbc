package amigo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// echoRank makes rank 1 send every message back, once it has landed in its
// buffer (named in the handler).
func echoRank(size int) func(c *amigo.Context) {
	return func(c *amigo.Context) {
		buf := make([]byte, size)
		var src amigo.Endpoint
		reply := func(error) { _ = c.Send(src, 1, nil, buf, nil) }
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			src = m.Source
			if m.Inline() {
				copy(buf, m.Data)
				reply(nil)
				return
			}
			_ = m.Receive(buf, reply)
		})
	}
}

// BenchmarkStopLatency compares the one-way latency of messages around the
// inline size under the STOP protocol and under pure eager streaming (the
// same packets, with receivers that named a buffer never stopping).
func BenchmarkStopLatency(b *testing.B) {
	for _, size := range []int{8, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10} {
		for _, proto := range []string{"eager", "stop", "stop-always", "stop-always-discard", "rendezvous"} {
			b.Run(fmt.Sprintf("%s/%s", sizeName(size), proto), func(b *testing.B) {
				cfg := amigo.Config{Protocol: proto}
				switch proto {
				case "stop-always":
					cfg = amigo.Config{Protocol: "stop", StopAbove: 1}
				case "stop-always-discard":
					cfg = amigo.Config{Protocol: "stop", StopAbove: 1, StopVariant: "discard"}
				}
				p := newPair(b, cfg, echoRank(size))
				defer p.close(b)
				buf := make([]byte, size)
				got := 0
				landed := func(error) { got++ }
				p.c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					if m.Inline() {
						copy(buf, m.Data)
						got++
						return
					}
					_ = m.Receive(buf, landed)
				})
				src := make([]byte, size)
				want := 0
				cond := func() bool { return got == want }
				ctx := context.Background()
				b.ReportAllocs()
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					want++
					if err := p.c0.Send(amigo.EndpointOf(1), 1, nil, src, nil); err != nil {
						b.Fatal(err)
					}
					if err := p.c0.Wait(ctx, cond); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2/1000, "us/one-way")
			})
		}
	}
}

// BenchmarkStopBandwidth streams windows of messages (osu_bw) under plain
// rendezvous and under each STOP variant, with a receiver that names its
// buffers as the announcements arrive (early) or only once the whole window
// was announced (late). One op is one window.
func BenchmarkStopBandwidth(b *testing.B) {
	sizes := []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}
	for _, size := range sizes {
		window := 64
		if size > 4<<20 {
			window = 8 // keeps a 64 MiB window under a second
		}
		for _, when := range []string{"early", "late"} {
			for _, proto := range []string{"rendezvous", "keep", "discard", "put"} {
				b.Run(fmt.Sprintf("%s/%s/%s", sizeName(size), when, proto), func(b *testing.B) {
					cfg := amigo.Config{Protocol: "stop", StopVariant: proto}
					if proto == "rendezvous" {
						cfg = amigo.Config{Protocol: "rendezvous"}
					}
					benchWindows(b, cfg, size, window, when == "late")
				})
			}
		}
	}
}

func benchWindows(b *testing.B, cfg amigo.Config, size, window int, late bool) {
	dst := make([]byte, size)
	recvd := 0
	p := newPair(b, cfg, func(c *amigo.Context) {
		var defd []amigo.Deferred
		var src amigo.Endpoint
		landed := func(err error) {
			if err != nil {
				panic(err)
			}
			recvd++
			if recvd%window == 0 {
				_ = c.SendImmediate(src, 2, nil, nil)
			}
		}
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			src = m.Source
			if !late {
				if err := m.Receive(dst, landed); err != nil {
					panic(err)
				}
				return
			}
			d, err := m.Defer()
			if err != nil {
				panic(err)
			}
			defd = append(defd, d)
			if len(defd) == window {
				for _, d := range defd {
					_ = c.Accept(d, dst, landed)
				}
				defd = defd[:0]
			}
		})
	})
	defer p.close(b)
	acks := 0
	p.c0.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { acks++ })
	src := make([]byte, size)
	fastFill(src, 1)
	k := amigo.NewCounter()
	ctx := context.Background()
	want := 0
	ackCond := func() bool { return acks == want }
	b.SetBytes(int64(size * window))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		want++
		for j := 0; j < window; j++ {
			k.Add(1)
			if err := p.c0.Send(amigo.EndpointOf(1), 1, nil, src, k.Done()); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.c0.WaitCounter(ctx, k); err != nil {
			b.Fatal(err)
		}
		if err := p.c0.Wait(ctx, ackCond); err != nil {
			b.Fatal(err)
		}
	}
}
