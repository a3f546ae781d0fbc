package amigo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/tcp"
	"github.com/amigo-hpc/amigo/transport/tcp/tcptest"
)

// Every rank sends every other rank a stream of messages of mixed sizes over
// TCP, inline and by rendezvous (GET served by the sender's adapter); each
// arrives intact and in order.
func TestTCPAllToAll(t *testing.T) {
	const n, msgs = 4, 120
	sizes := []int{0, 1, 8, 100, 1000, 4000, 8000, 20000, 300000, 1 << 20}
	cfg := amigo.Config{RDMAChunk: 64 << 10}
	amigotest.Run(t, n, amigotest.Options{Config: cfg, Over: "tcp"}, func(r *amigotest.Rank) error {
		if !slices.Contains(r.Adapters(), "tcp") {
			return fmt.Errorf("adapters %v, want tcp", r.Adapters())
		}
		c := r.Ctx
		next := make([]int, n)
		var bad error
		fetched := 0
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			src := m.Source.Rank
			seq := int(binary.LittleEndian.Uint32(m.Header))
			if seq != next[src] && bad == nil {
				bad = fmt.Errorf("from %d: message %d, want %d", src, seq, next[src])
			}
			next[src]++
			want := fill(make([]byte, sizes[seq%len(sizes)]), src*1000+seq)
			if m.Inline() {
				if !bytes.Equal(m.Data, want) && bad == nil {
					bad = fmt.Errorf("from %d: message %d corrupt", src, seq)
				}
				fetched++
				return
			}
			buf := make([]byte, m.Size())
			if err := m.Receive(buf, func(err error) {
				if err == nil && !bytes.Equal(buf, want) {
					err = fmt.Errorf("from %d: message %d corrupt", src, seq)
				}
				if err != nil && bad == nil {
					bad = err
				}
				fetched++
			}); err != nil && bad == nil {
				bad = err
			}
		})
		if err := r.Barrier(); err != nil {
			return err
		}
		k := amigo.NewCounter()
		for seq := 0; seq < msgs; seq++ {
			for p := 0; p < n; p++ {
				if p == r.Rank() {
					continue
				}
				hdr := binary.LittleEndian.AppendUint32(nil, uint32(seq))
				data := fill(make([]byte, sizes[seq%len(sizes)]), r.Rank()*1000+seq)
				k.Add(1)
				if err := c.Send(amigo.EndpointOf(p), 1, hdr, data, k.Done()); err != nil {
					return err
				}
			}
		}
		if err := c.WaitCounter(r.Deadline, k); err != nil {
			return err
		}
		total := msgs * (n - 1)
		if err := c.Wait(r.Deadline, func() bool { return fetched == total || bad != nil }); err != nil {
			return fmt.Errorf("received %d/%d: %w", fetched, total, err)
		}
		if bad != nil {
			return bad
		}
		return r.Barrier()
	})
}

// Put and Get on a peer's registered memory over TCP move the bytes; a GET
// outside the region fails with an error naming the peer and touches
// nothing.
func TestTCPRMA(t *testing.T) {
	amigotest.Run(t, 2, amigotest.Options{Over: "tcp"}, func(r *amigotest.Rank) error {
		c := r.Ctx
		mem := make([]byte, 1<<20)
		fill(mem, r.Rank())
		reg, err := r.RegisterMemory(mem)
		if err != nil {
			return err
		}
		keys := make([]amigo.Key, 2)
		keys[r.Rank()] = reg.Key()
		c.SetDispatch(7, func(c *amigo.Context, m *amigo.Message) {
			keys[m.Source.Rank] = amigo.Key(binary.LittleEndian.Uint64(m.Data))
		})
		peer := 1 - r.Rank()
		if err := c.SendImmediate(amigo.EndpointOf(peer), 7, nil, binary.LittleEndian.AppendUint64(nil, uint64(reg.Key()))); err != nil {
			return err
		}
		if err := c.Wait(r.Deadline, func() bool { return keys[peer] != 0 }); err != nil {
			return err
		}
		if err := r.Barrier(); err != nil {
			return err
		}
		if r.Rank() == 0 {
			got := make([]byte, 300000)
			var getErr, putErr, outErr error
			done := 0
			c.Get(amigo.EndpointOf(1), got, keys[1], 400000, func(err error) { getErr = err; done++ })
			c.Put(amigo.EndpointOf(1), bytes.Repeat([]byte{0xAB}, 70000), keys[1], 5000, func(err error) { putErr = err; done++ })
			out := make([]byte, 100)
			for i := range out {
				out[i] = 0x5A
			}
			c.Get(amigo.EndpointOf(1), out, keys[1], 1<<20-50, func(err error) { outErr = err; done++ })
			if err := c.Wait(r.Deadline, func() bool { return done == 3 }); err != nil {
				return err
			}
			if getErr != nil || putErr != nil {
				return fmt.Errorf("get: %v, put: %v", getErr, putErr)
			}
			if want := fill(make([]byte, 1<<20), 1)[400000 : 400000+300000]; !bytes.Equal(got, want) {
				return errors.New("GET brought the wrong bytes")
			}
			var pe *amigo.PeerError
			if !errors.Is(outErr, transport.ErrBounds) || !errors.As(outErr, &pe) || pe.Addr.Rank != 1 {
				return fmt.Errorf("GET outside the region: %v, want a bounds error naming rank 1", outErr)
			}
			if !bytes.Equal(out, bytes.Repeat([]byte{0x5A}, 100)) {
				return errors.New("a refused GET wrote into the buffer")
			}
		}
		if err := r.Barrier(); err != nil {
			return err
		}
		if r.Rank() == 1 {
			want := fill(make([]byte, 1<<20), 1)
			copy(want[5000:], bytes.Repeat([]byte{0xAB}, 70000))
			if !bytes.Equal(mem, want) {
				return errors.New("PUT did not land where it should, or touched more")
			}
		}
		return r.Barrier()
	})
}

// openRouted opens an n-rank job over TCP inside this process in which rank
// 0's connections to rank 1 go through a proxy the test controls.
func openRouted(t *testing.T, n int, cfg amigo.Config) ([]*amigo.Client, *tcptest.Proxy) {
	t.Helper()
	cfg.Transport = "tcp"
	jobs := bootstrap.NewLocal(n)
	routed := tcptest.Route(jobs[0], 1)
	js := append([]bootstrap.Job{routed}, jobs[1:]...)
	cl := make([]*amigo.Client, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl[r], errs[r] = amigo.OpenJob(ctx, js[r], cfg)
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
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// The proxy exists once rank 0 looked its peer up (at open).
	return cl, routed.Proxy()
}

// drive advances c on a goroutine of its own until the returned stop is
// called.
func drive(c *amigo.Context) (stop func()) {
	var quit atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Wait(context.Background(), quit.Load)
	}()
	return func() {
		quit.Store(true)
		c.Do(func(*amigo.Context) {})
		<-done
	}
}

// failScenario streams messages from rank 0 to rank 1 while break breaks
// the path between them, and checks what a broken connection must do:
// every send completes, those that did not arrive with an error naming rank
// 1, within bound; rank 1 got an in-order prefix of the stream with no
// duplicate; and ranks 0 and 2 and ranks 1 and 2 go on exchanging.
func failScenario(t *testing.T, cfg amigo.Config, bound time.Duration, breakPath func(p *tcptest.Proxy), wantErr ...error) {
	cl, proxy := openRouted(t, 3, cfg)
	c0, c1, c2 := cl[0].Context(0), cl[1].Context(0), cl[2].Context(0)
	var got []uint32 // at rank 1, from rank 0
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		got = append(got, binary.LittleEndian.Uint32(m.Header))
	})
	echo := func(c *amigo.Context, m *amigo.Message) { c.SendImmediate(m.Source, 3, m.Header, nil) }
	c1.SetDispatch(2, echo)
	c2.SetDispatch(2, echo)
	var echoes atomic.Int64
	c0.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) { echoes.Add(1) })
	stop1, stop2 := drive(c1), drive(c2)
	defer stop2()
	stopped1 := false
	defer func() {
		if !stopped1 {
			stop1()
		}
	}()

	const msgs = 3000
	data := make([]byte, 8000)
	results := make([]error, msgs)
	doneN := 0
	var firstErr time.Time
	for i := 0; i < msgs; i++ {
		i := i
		hdr := binary.LittleEndian.AppendUint32(nil, uint32(i))
		if err := c0.Send(amigo.EndpointOf(1), 1, hdr, data, func(err error) {
			results[i] = err
			doneN++
			if err != nil && firstErr.IsZero() {
				firstErr = time.Now()
			}
		}); err != nil {
			t.Fatal(err)
		}
		if i == 300 {
			// Let the stream flow, then break the path under it.
			if err := c0.Wait(context.Background(), func() bool { return doneN >= 200 }); err != nil {
				t.Fatal(err)
			}
			breakPath(proxy)
		}
	}
	broke := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bound+10*time.Second)
	defer cancel()
	if err := c0.Wait(ctx, func() bool { return doneN == msgs }); err != nil {
		t.Fatalf("%d of %d sends completed: %v", doneN, msgs, err)
	}
	if firstErr.IsZero() {
		t.Fatal("no send failed")
	}
	if d := firstErr.Sub(broke); d > bound {
		t.Errorf("first failure %v after the path broke, want at most %v", d, bound)
	} else {
		t.Logf("first failure %v after the path broke", d.Round(time.Millisecond))
	}
	ok := 0
	for i, err := range results {
		if err == nil {
			ok++
			continue
		}
		var pe *amigo.PeerError
		if !errors.As(err, &pe) || pe.Addr.Rank != 1 {
			t.Fatalf("send %d: %v does not name rank 1", i, err)
		}
		matched := len(wantErr) == 0
		for _, w := range wantErr {
			matched = matched || errors.Is(err, w)
		}
		if !matched {
			t.Fatalf("send %d: %v, want one of %v", i, err, wantErr)
		}
	}
	// A send to rank 1 now fails at once, naming it.
	var late error
	lateDone := false
	c0.Send(amigo.EndpointOf(1), 1, nil, data, func(err error) { late, lateDone = err, true })
	if err := c0.Wait(ctx, func() bool { return lateDone }); err != nil || late == nil {
		t.Fatalf("a send after the failure completed with %v (%v)", late, err)
	}
	// Ranks 0 and 2 are unaffected.
	for i := 0; i < 200; i++ {
		want := echoes.Load() + 1
		if err := c0.Send(amigo.EndpointOf(2), 2, []byte{1}, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := c0.Wait(ctx, func() bool { return echoes.Load() == want }); err != nil {
			t.Fatalf("rank 0 ↔ rank 2 after the failure: %v", err)
		}
	}
	stop1()
	stopped1 = true
	// Rank 1 got a prefix of the stream, in order, without duplicates, at
	// least every send reported delivered.
	for i, s := range got {
		if s != uint32(i) {
			t.Fatalf("rank 1's message %d is %d", i, s)
		}
	}
	if ok > len(got) {
		t.Fatalf("%d sends reported delivered, rank 1 got %d", ok, len(got))
	}
	t.Logf("%d sends delivered and reported so, %d delivered, %d failed", ok, len(got), msgs-ok)
	// Ranks 1 and 2 are unaffected.
	c1.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) { echoes.Add(1) })
	for i := 0; i < 100; i++ {
		want := echoes.Load() + 1
		c1.Send(amigo.EndpointOf(2), 2, []byte{1}, nil, nil)
		if err := c1.Wait(ctx, func() bool { return echoes.Load() == want }); err != nil {
			t.Fatalf("rank 1 ↔ rank 2 after the failure: %v", err)
		}
	}
}

// A connection cut (reset both ways) in the middle of a stream of
// messages.
func TestTCPCutMidMessage(t *testing.T) {
	failScenario(t, amigo.Config{}, 2*time.Second, func(p *tcptest.Proxy) {
		// Wherever this falls in a stream of 8 KiB packets with their
		// headers: mid-message.
		p.CutAfter(p.Forwarded() + 100000 + 4321)
	}, tcp.ErrConnLost)
}

// A peer that goes silent (a hung host, a network that drops everything):
// its operations fail once the configured timeout passed.
func TestTCPSilentPeer(t *testing.T) {
	timeout := time.Second
	cfg := amigo.Config{TCP: amigo.TCPConfig{Timeout: timeout}}
	// Detection takes between Timeout and 1.25 Timeout (the silence is
	// checked every Timeout/4); the rest is slack for a loaded machine.
	failScenario(t, cfg, 2*timeout+time.Second, func(p *tcptest.Proxy) { p.Silence() }, tcp.ErrSilent, tcp.ErrConnLost)
}

// With several contexts per rank, each pair of contexts has links of its
// own over TCP: every context of each rank sends every context of the other
// rank a stream, on goroutines of their own, and each arrives in order.
func TestTCPContexts(t *testing.T) {
	const ctxs, msgs = 3, 300
	cl := openOver(t, 2, amigo.Config{Contexts: ctxs}, "tcp")
	var wg sync.WaitGroup
	errs := make(chan error, 2*ctxs)
	for r := 0; r < 2; r++ {
		for i := 0; i < ctxs; i++ {
			wg.Add(1)
			go func(c *amigo.Context) {
				defer wg.Done()
				next := make([]int, ctxs)
				got := 0
				c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					from := m.Source.Context
					seq := int(binary.LittleEndian.Uint32(m.Data))
					if seq != next[from] {
						errs <- fmt.Errorf("%v from %v: message %d, want %d", c.Endpoint(), m.Source, seq, next[from])
					}
					next[from]++
					got++
				})
				peer := 1 - c.Client().Rank()
				k := amigo.NewCounter()
				for seq := 0; seq < msgs; seq++ {
					for j := 0; j < ctxs; j++ {
						k.Add(1)
						if err := c.Send(amigo.Endpoint{Rank: peer, Context: j}, 1, nil, binary.LittleEndian.AppendUint32(make([]byte, 0, 600), uint32(seq))[:4+seq%500], k.Done()); err != nil {
							errs <- err
							return
						}
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := c.Wait(ctx, func() bool { return got == msgs*ctxs && k.Pending() == 0 }); err != nil {
					errs <- fmt.Errorf("%v: received %d of %d: %w", c.Endpoint(), got, msgs*ctxs, err)
				}
			}(cl[r].Context(i))
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A rank that stops advancing (it computes) still serves GET and PUT on its
// registered memory: the adapter's engine takes its sockets over once it has
// not polled for the hand-off time, as a DMA engine would.
func TestTCPServesWhileComputing(t *testing.T) {
	cl := openOver(t, 2, amigo.Config{}, "tcp")
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	mem := fill(make([]byte, 4<<20), 9)
	reg, err := cl[1].RegisterMemory(mem)
	if err != nil {
		t.Fatal(err)
	}
	var key amigo.Key
	c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { key = amigo.Key(binary.LittleEndian.Uint64(m.Data)) })
	sent := false
	c1.Send(amigo.EndpointOf(0), 1, nil, binary.LittleEndian.AppendUint64(nil, uint64(reg.Key())), func(error) { sent = true })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go c1.Wait(ctx, func() bool { return sent })
	if err := c0.Wait(ctx, func() bool { return key != 0 }); err != nil {
		t.Fatal(err)
	}
	// Rank 1's goroutine is gone from its context from now on.
	time.Sleep(20 * time.Millisecond)
	for round := 0; round < 3; round++ {
		buf := make([]byte, len(mem))
		var getErr error
		done := false
		start := time.Now()
		if err := c0.Get(amigo.EndpointOf(1), buf, key, 0, func(err error) { getErr, done = err, true }); err != nil {
			t.Fatal(err)
		}
		if err := c0.Wait(ctx, func() bool { return done }); err != nil {
			t.Fatal(err)
		}
		if getErr != nil || !bytes.Equal(buf, mem) {
			t.Fatalf("GET from a computing rank: %v", getErr)
		}
		t.Logf("4 MiB GET from a rank that does not advance: %v", time.Since(start).Round(time.Microsecond))
		put := bytes.Repeat([]byte{byte(round)}, 1000)
		done = false
		if err := c0.Put(amigo.EndpointOf(1), put, key, 5000, func(err error) { getErr, done = err, true }); err != nil {
			t.Fatal(err)
		}
		if err := c0.Wait(ctx, func() bool { return done }); err != nil || getErr != nil {
			t.Fatalf("PUT to a computing rank: %v %v", err, getErr)
		}
	}
}

// AMIGO_TCP_ADVERTISE sets the published address; a malformed one makes the
// configuration refused, naming the setting.
func TestTCPAdvertiseSetting(t *testing.T) {
	t.Setenv("AMIGO_TCP_ADVERTISE", " 10.0.0.7:4100 ")
	set, err := amigo.Settings(amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range set {
		if s.Name == "AMIGO_TCP_ADVERTISE" {
			found = true
			if s.Value != "10.0.0.7:4100" {
				t.Errorf("AMIGO_TCP_ADVERTISE = %q, want 10.0.0.7:4100", s.Value)
			}
		}
	}
	if !found {
		t.Fatal("AMIGO_TCP_ADVERTISE is not a setting")
	}
	t.Setenv("AMIGO_TCP_ADVERTISE", "10.0.0.7:0")
	if _, err := amigo.Settings(amigo.Config{}); err == nil || !strings.Contains(err.Error(), "Advertise") {
		t.Fatalf("port 0 advertised: got %v, want it refused", err)
	}
}
