// Command amibench measures amigo with the methodology of the OSU
// micro-benchmarks: one-way latency by ping-pong, and bandwidth by windows of
// 64 messages acknowledged as a whole, for message sizes from 0 bytes to 4 MiB.
//
// Run bare, it starts the ranks itself inside this process, over the
// in-process adapter.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo"
)

type options struct {
	benchmarks []string
	minSize    int
	maxSize    int
	iterations int
	warmup     int
	window     int
	json       bool
	transport  string
}

func main() {
	var o options
	var bench string
	flag.StringVar(&bench, "b", "latency,bw", "benchmarks to run: latency, bw")
	flag.IntVar(&o.minSize, "min-size", 0, "smallest message size in bytes")
	flag.IntVar(&o.maxSize, "max-size", 4<<20, "largest message size in bytes")
	flag.IntVar(&o.iterations, "iterations", 0, "iterations per size (0: OSU's defaults)")
	flag.IntVar(&o.window, "window", 64, "messages per bandwidth window")
	flag.BoolVar(&o.json, "json", false, "print one JSON object per line")
	flag.StringVar(&o.transport, "transport", "loop", "adapter: loop (ranks as goroutines of this process)")
	n := flag.Int("n", 2, "ranks")
	flag.Parse()
	o.benchmarks = strings.Split(bench, ",")
	if err := run(os.Stdout, *n, o); err != nil {
		fmt.Fprintln(os.Stderr, "amibench:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, n int, o options) error {
	if o.transport != "loop" {
		return fmt.Errorf("transport %q: this build runs ranks in-process only (loop)", o.transport)
	}
	if n < 2 {
		return fmt.Errorf("-n %d: point-to-point benchmarks need 2 ranks", n)
	}
	cl, err := amigo.NewLocal(n, amigo.Config{})
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	for _, b := range o.benchmarks {
		switch strings.TrimSpace(b) {
		case "latency":
			if err := latency(w, cl[0].Context(0), cl[1].Context(0), o); err != nil {
				return err
			}
		case "bw":
			if err := bandwidth(w, cl[0].Context(0), cl[1].Context(0), o); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown benchmark %q", b)
		}
	}
	return nil
}

func sizes(o options) []int {
	var out []int
	if o.minSize == 0 {
		out = append(out, 0)
	}
	for s := 1; s <= o.maxSize; s *= 2 {
		if s >= o.minSize {
			out = append(out, s)
		}
	}
	return out
}

// osuIterations returns OSU's iteration and warm-up counts for a size.
func osuIterations(size int, o options, small, large, warmSmall, warmLarge int) (int, int) {
	iters, warm := small, warmSmall
	if size > 8192 {
		iters, warm = large, warmLarge
	}
	if o.iterations > 0 {
		iters = o.iterations
	}
	return iters, warm
}

// peer runs rank 1's context on its own goroutine until stop.
func peer(c *amigo.Context) (stop func()) {
	done := make(chan struct{})
	quit := false
	var finished = make(chan struct{})
	go func() {
		defer close(finished)
		_ = c.Wait(context.Background(), func() bool {
			select {
			case <-done:
				quit = true
			default:
			}
			return quit
		})
	}()
	return func() {
		close(done)
		_ = c.Do(func(*amigo.Context) {})
		<-finished
	}
}

func latency(w io.Writer, c0, c1 *amigo.Context, o options) error {
	buf1 := make([]byte, o.maxSize)
	recv := func(c *amigo.Context, m *amigo.Message, buf []byte, reply func()) {
		if m.Inline() {
			reply()
			return
		}
		_ = m.Receive(buf[:m.Size()], func(err error) { reply() })
	}
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		size := m.Size()
		recv(c, m, buf1, func() { _ = c.Send(m.Source, 1, nil, buf1[:size], nil) })
	})
	stop := peer(c1)
	defer stop()
	buf0 := make([]byte, o.maxSize)
	got := 0
	c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		recv(c, m, buf0, func() { got++ })
	})
	ctx := context.Background()
	if !o.json {
		fmt.Fprintf(w, "# amigo latency test (ranks as goroutines, in-process adapter)\n# %-10s %15s\n", "Size", "Latency (us)")
	}
	ep := amigo.EndpointOf(1)
	for _, size := range sizes(o) {
		iters, warm := osuIterations(size, o, 10000, 1000, 100, 10)
		var start time.Time
		for i := 0; i < iters+warm; i++ {
			if i == warm {
				start = time.Now()
			}
			want := got + 1
			if err := c0.Send(ep, 1, nil, buf0[:size], nil); err != nil {
				return err
			}
			if err := c0.Wait(ctx, func() bool { return got == want }); err != nil {
				return err
			}
		}
		us := float64(time.Since(start).Nanoseconds()) / 1e3 / float64(iters) / 2
		if o.json {
			out, _ := json.Marshal(map[string]any{"benchmark": "latency", "size": size, "latency_us": round(us)})
			fmt.Fprintln(w, string(out))
		} else {
			fmt.Fprintf(w, "%-12d %15.2f\n", size, us)
		}
	}
	return nil
}

func bandwidth(w io.Writer, c0, c1 *amigo.Context, o options) error {
	buf1 := make([]byte, o.maxSize)
	recvd := 0
	c1.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) {
		count := func(error) {
			recvd++
			if recvd%o.window == 0 {
				_ = c.SendImmediate(m.Source, 3, nil, nil)
			}
		}
		if m.Inline() {
			copy(buf1, m.Data)
			count(nil)
			return
		}
		_ = m.Receive(buf1[:m.Size()], count)
	})
	stop := peer(c1)
	defer stop()
	acks := 0
	c0.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) { acks++ })
	src := make([]byte, o.maxSize)
	for i := range src {
		src[i] = byte(i)
	}
	k := amigo.NewCounter()
	ctx := context.Background()
	ep := amigo.EndpointOf(1)
	if !o.json {
		fmt.Fprintf(w, "# amigo bandwidth test (ranks as goroutines, in-process adapter)\n# %-10s %15s\n", "Size", "Bandwidth (MB/s)")
	}
	for _, size := range sizes(o) {
		if size == 0 {
			continue
		}
		iters, warm := osuIterations(size, o, 100, 20, 10, 2)
		var start time.Time
		for i := 0; i < iters+warm; i++ {
			if i == warm {
				start = time.Now()
			}
			want := acks + 1
			for j := 0; j < o.window; j++ {
				k.Add(1)
				if err := c0.Send(ep, 2, nil, src[:size], k.Done()); err != nil {
					return err
				}
			}
			if err := c0.WaitCounter(ctx, k); err != nil {
				return err
			}
			if err := c0.Wait(ctx, func() bool { return acks == want }); err != nil {
				return err
			}
		}
		mbs := float64(size) * float64(iters*o.window) / time.Since(start).Seconds() / 1e6
		if o.json {
			out, _ := json.Marshal(map[string]any{"benchmark": "bw", "size": size, "mb_per_s": round(mbs)})
			fmt.Fprintln(w, string(out))
		} else {
			fmt.Fprintf(w, "%-12d %15.2f\n", size, mbs)
		}
	}
	return nil
}

func round(v float64) float64 {
	return float64(int64(v*1000+0.5)) / 1000
}
