package amigo_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/bootstrap"
)

// shmPair opens a job of two ranks in this process whose clients reach each
// other through the shared-memory adapter, as ranks in two processes do:
// each maps the other's segment through /proc.
func shmPair(t testing.TB, cfg amigo.Config) []*amigo.Client {
	t.Helper()
	cfg.Transport = "shm"
	jobs := bootstrap.NewLocal(2)
	cl := make([]*amigo.Client, 2)
	errs := make([]error, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl[r], errs[r] = amigo.OpenJob(ctx, jobs[r], cfg)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range cl {
			if c != nil {
				c.Close()
			}
		}
		for _, j := range jobs {
			j.Close()
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cl {
		if !slices.Contains(c.Adapters(), "shm") {
			t.Fatalf("rank %d uses adapters %v, want shm", c.Rank(), c.Adapters())
		}
	}
	return cl
}

// Messages of every size and one-sided operations on allocated memory
// travel between two ranks over shared memory, with each large-transfer way.
func TestShmMessages(t *testing.T) {
	for _, way := range []string{"auto", "segment", "cma", "copy"} {
		t.Run(way, func(t *testing.T) {
			cl := shmPair(t, amigo.Config{Shm: amigo.ShmConfig{RDMA: way}})
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			// Messages arrive in the order sent, but large ones may complete
			// out of it: each keeps the place of its arrival.
			var got [][]byte
			landed := 0
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				if m.Inline() {
					got = append(got, bytes.Clone(m.Data))
					landed++
					return
				}
				at := len(got)
				got = append(got, nil)
				buf := make([]byte, m.Size())
				if way == "segment" {
					// Only memory in shared segments moves this way.
					r, err := c.Client().AllocMemory(m.Size())
					if err != nil {
						panic(err)
					}
					buf = r.Bytes()
				}
				m.Receive(buf, func(err error) {
					if err != nil {
						panic(err)
					}
					got[at] = buf
					landed++
				})
			})
			var sizes []int
			for s := 1; s <= 4<<20; s *= 4 {
				sizes = append(sizes, s, s+13)
			}
			send := func(i, size int) []byte {
				b := make([]byte, size)
				if way == "segment" {
					r, err := cl[0].AllocMemory(size)
					if err != nil {
						t.Fatal(err)
					}
					b = r.Bytes()
				}
				for j := range b {
					b[j] = byte(i + j*7)
				}
				return b
			}
			var want [][]byte
			k := amigo.NewCounter()
			for i, s := range sizes {
				b := send(i, s)
				want = append(want, b)
				k.Add(1)
				if err := c0.Send(amigo.EndpointOf(1), 1, nil, b, k.Done()); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			// Rank 1 advances on its own goroutine until it has every message.
			done := make(chan error, 1)
			go func() { done <- c1.Wait(ctx, func() bool { return landed == len(want) }) }()
			if err := c0.WaitCounter(ctx, k); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("received %d messages, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("message %d of %d bytes differs (got %d bytes)", i, len(want[i]), len(got[i]))
				}
			}
			// Put and Get on allocated memory, advancing rank 1 here too.
			reg, err := cl[1].AllocMemory(3 << 20)
			if err != nil {
				t.Fatal(err)
			}
			src := send(99, 3<<20)
			dst := send(98, 3<<20)
			clear(dst)
			k.Add(1)
			c0.Put(amigo.EndpointOf(1), src, reg.Key(), 0, k.Done())
			for k.Pending() > 0 {
				c0.Advance()
				c1.Advance()
			}
			k.Add(1)
			c0.Get(amigo.EndpointOf(1), dst, reg.Key(), 0, k.Done())
			for k.Pending() > 0 {
				c0.Advance()
				c1.Advance()
			}
			if err := k.Err(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(reg.Bytes(), src) || !bytes.Equal(dst, src) {
				t.Fatal("put or get moved the wrong bytes")
			}
		})
	}
}

// Sending an immediate message over shared memory and receiving it
// allocate nothing.
func TestShmZeroAllocs(t *testing.T) {
	cl := shmPair(t, amigo.Config{})
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	recvd := 0
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { recvd++ })
	c0.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { recvd++ })
	hdr, data := []byte("hdr"), make([]byte, 150)
	want := 0
	f := func() {
		want++
		if err := c0.SendImmediate(amigo.EndpointOf(1), 1, hdr, data[:8]); err != nil {
			t.Fatal(err)
		}
		for recvd < want {
			c0.Advance()
			c1.Advance()
		}
		want++
		if err := c1.SendImmediate(amigo.EndpointOf(0), 2, hdr, data); err != nil {
			t.Fatal(err)
		}
		for recvd < want {
			c1.Advance()
			c0.Advance()
		}
	}
	for i := 0; i < 100; i++ {
		f()
	}
	if n := testing.AllocsPerRun(1000, f); n != 0 {
		t.Errorf("%v allocations per round trip over shared memory, want 0", n)
	}
	// Sends with a done callback, and Puts, on shared memory.
	reg, err := cl[1].AllocMemory(4096)
	if err != nil {
		t.Fatal(err)
	}
	k := amigo.NewCounter()
	g := func() {
		k.Add(2)
		if err := c0.Send(amigo.EndpointOf(1), 1, hdr, data, k.Done()); err != nil {
			t.Fatal(err)
		}
		if err := c0.Put(amigo.EndpointOf(1), data[:64], reg.Key(), 128, k.Done()); err != nil {
			t.Fatal(err)
		}
		for k.Pending() > 0 {
			c0.Advance()
			c1.Advance()
		}
	}
	for i := 0; i < 100; i++ {
		g()
	}
	if n := testing.AllocsPerRun(1000, g); n != 0 {
		t.Errorf("%v allocations per Send and Put over shared memory, want 0", n)
	}
	if err := k.Err(); err != nil {
		t.Fatal(err)
	}
}

func ExampleShmConfig() {
	s, _ := amigo.Settings(amigo.Config{Shm: amigo.ShmConfig{RDMA: "copy"}})
	for _, v := range s {
		if v.Name == "AMIGO_SHM_RDMA" {
			fmt.Println(v.Name, v.Value)
		}
	}
	// Output: AMIGO_SHM_RDMA copy
}

// BenchmarkShmPingPong measures one-way latency over shared memory between
// two ranks of this process (each mapping the other's segment), next to the
// in-process adapter.
func BenchmarkShmPingPong(b *testing.B) {
	for _, tr := range []string{"shm", "loop"} {
		for _, size := range []int{8, 16 << 10, 256 << 10} {
			b.Run(fmt.Sprintf("%s/%d", tr, size), func(b *testing.B) {
				var cl []*amigo.Client
				if tr == "shm" {
					cl = shmPair(b, amigo.Config{})
				} else {
					var err error
					if cl, err = amigo.NewLocal(2, amigo.Config{}); err != nil {
						b.Fatal(err)
					}
					defer func() { cl[0].Close(); cl[1].Close() }()
				}
				c0, c1 := cl[0].Context(0), cl[1].Context(0)
				buf0, buf1 := make([]byte, size), make([]byte, size)
				got0, got1 := 0, 0
				c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					if m.Inline() {
						got1++
						c.Send(m.Source, 1, nil, buf1, nil)
						return
					}
					m.Receive(buf1, func(error) { got1++; c.Send(m.Source, 1, nil, buf1, nil) })
				})
				c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					if m.Inline() {
						got0++
						return
					}
					m.Receive(buf0, func(error) { got0++ })
				})
				stop := make(chan struct{})
				done := make(chan struct{})
				go func() {
					defer close(done)
					c1.Wait(context.Background(), func() bool {
						select {
						case <-stop:
							return true
						default:
							return false
						}
					})
				}()
				ctx := context.Background()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					want := got0 + 1
					c0.Send(amigo.EndpointOf(1), 1, nil, buf0, nil)
					c0.Wait(ctx, func() bool { return got0 == want })
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/2, "ns/one-way")
				close(stop)
				c1.Do(func(*amigo.Context) {})
				<-done
			})
		}
	}
}

// With several contexts per rank, every pair of contexts has its own
// descriptor buffer, and every context its own doorbell.
func TestShmContexts(t *testing.T) {
	cl := shmPair(t, amigo.Config{Contexts: 3})
	got := make([]int, 3)
	for i := range 3 {
		x := cl[1].Context(i)
		x.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			if m.Inline() {
				got[c.Index()]++
				return
			}
			buf := make([]byte, m.Size())
			m.Receive(buf, func(err error) {
				if err == nil && buf[len(buf)-1] == byte(m.Size()) {
					got[c.Index()]++
				}
			})
		})
	}
	k := amigo.NewCounter()
	big := make([]byte, 300_000)
	big[len(big)-1] = byte(len(big))
	for from := range 3 {
		for to := range 3 {
			k.Add(2)
			cl[0].Context(from).Send(amigo.Endpoint{Rank: 1, Context: to}, 1, nil, []byte("small"), k.Done())
			cl[0].Context(from).Send(amigo.Endpoint{Rank: 1, Context: to}, 1, nil, big, k.Done())
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for k.Pending() > 0 || got[0]+got[1]+got[2] < 18 {
		if time.Now().After(deadline) {
			t.Fatalf("pending %d, got %v", k.Pending(), got)
		}
		for i := range 3 {
			cl[0].Context(i).Advance()
			cl[1].Context(i).Advance()
		}
	}
	if err := k.Err(); err != nil {
		t.Fatal(err)
	}
	if got[0] != 6 || got[1] != 6 || got[2] != 6 {
		t.Fatalf("contexts of rank 1 got %v messages, want 6 each", got)
	}
}

// Large messages and Gets of Go memory over shared memory, which move by
// cross-memory attach once their pages were collapsed onto huge pages
// (AMIGO_SHM_HUGE), allocate nothing once warm either.
func TestShmLargeZeroAllocs(t *testing.T) {
	cl := shmPair(t, amigo.Config{Shm: amigo.ShmConfig{RDMA: "cma"}})
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	const n = 1 << 20
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i * 5)
	}
	k := amigo.NewCounter()
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		k.Add(1)
		if err := m.Receive(dst[:m.Size()], k.Done()); err != nil {
			t.Error(err)
		}
	})
	reg, err := cl[1].RegisterMemory(src)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, n)
	f := func() {
		k.Add(2)
		if err := c0.Send(amigo.EndpointOf(1), 1, nil, src, k.Done()); err != nil {
			t.Fatal(err)
		}
		if err := c0.Get(amigo.EndpointOf(1), got, reg.Key(), 0, k.Done()); err != nil {
			t.Fatal(err)
		}
		for k.Pending() > 0 {
			c0.Advance()
			c1.Advance()
		}
	}
	for i := 0; i < 20; i++ {
		f()
	}
	if err := k.Err(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) || !bytes.Equal(got, src) {
		t.Fatal("a large send or get moved the wrong bytes")
	}
	if n := testing.AllocsPerRun(50, f); n != 0 {
		t.Errorf("%v allocations per 1 MiB Send and Get over shared memory, want 0", n)
	}
}
