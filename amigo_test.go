package amigo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
)

// engines runs f once per in-process RDMA engine.
func engines(t *testing.T, base amigo.Config, f func(t *testing.T, cfg amigo.Config)) {
	for _, e := range []string{"inline", "async"} {
		t.Run(e, func(t *testing.T) {
			cfg := base
			cfg.LoopEngine = e
			f(t, cfg)
		})
	}
}

func fill(b []byte, seed int) []byte {
	for i := range b {
		b[i] = byte(seed*131 + i*7 + i>>8)
	}
	return b
}

// Every rank sends every other rank a stream of messages of mixed sizes,
// inline and by rendezvous, on two dispatch ids; each arrives intact and in
// the order it was sent.
func TestOrderingAllToAll(t *testing.T) {
	engines(t, amigo.Config{RingSlots: 64, InlineMax: 1024, RDMAChunk: 4096}, func(t *testing.T, cfg amigo.Config) {
		const n, msgs = 4, 200
		sizes := []int{0, 1, 8, 100, 1000, 1024, 1025, 5000, 20000}
		amigotest.Run(t, n, amigotest.Options{Config: cfg}, func(r *amigotest.Rank) error {
			c := r.Ctx
			next := make([][2]int, n) // next expected sequence per source and dispatch
			for i := range next {
				next[i] = [2]int{0, 1}
			}
			var bad error
			received, fetched := 0, 0
			for d := 0; d < 2; d++ {
				d := d
				c.SetDispatch(amigo.Dispatch(d), func(c *amigo.Context, m *amigo.Message) {
					src := m.Source.Rank
					seq := int(binary.LittleEndian.Uint32(m.Header))
					if seq != next[src][d] && bad == nil {
						bad = fmt.Errorf("from %d dispatch %d: message %d, want %d", src, d, seq, next[src][d])
					}
					next[src][d] += 2
					want := fill(make([]byte, sizes[seq%len(sizes)]), src*1000+seq)
					received++
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
			}
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
					if err := c.Send(amigo.EndpointOf(p), amigo.Dispatch(seq%2), hdr, data, k.Done()); err != nil {
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
	})
}

// A FIFO that fills up because its consumer does not advance leaves the
// instructions queued; Advance returns at once and goes on receiving from
// other peers. Once the consumer advances, everything arrives in order.
func TestFullFIFODoesNotBlockAdvance(t *testing.T) {
	cl, err := amigo.NewLocal(3, amigo.Config{RingSlots: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	c0, c1, c2 := cl[0].Context(0), cl[1].Context(0), cl[2].Context(0)
	var got []uint32
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		got = append(got, binary.LittleEndian.Uint32(m.Data))
	})
	fromTwo := 0
	c0.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { fromTwo++ })

	const msgs = 500
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := 0; i < msgs; i++ {
			if err := c0.SendImmediate(amigo.EndpointOf(1), 1, nil, binary.LittleEndian.AppendUint32(nil, uint32(i))); err != nil {
				t.Error(err)
				return
			}
			c0.Advance()
		}
		// Rank 1 never advanced: its FIFO is full and rank 0 queued the rest.
		if s := c0.Stats(); s.Queued == 0 {
			t.Errorf("no instruction was queued behind the full FIFO: %+v", s)
		}
		// Receptions go on meanwhile.
		for i := 0; i < 10; i++ {
			c2.SendImmediate(amigo.EndpointOf(0), 1, nil, []byte{1})
			c2.Advance()
			c0.Advance()
		}
		if fromTwo != 10 {
			t.Errorf("rank 0 received %d of 10 messages while its FIFO to rank 1 was full", fromTwo)
		}
	}()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("Advance blocked on a full FIFO")
	}
	advanceUntil(t, func() bool { return len(got) == msgs }, c0, c1)
	for i, v := range got {
		if v != uint32(i) {
			t.Fatalf("message %d arrived as %d-th", v, i)
		}
	}
}

// Put, Get, Rput and Rget, in one piece and in many, with local and remote
// completion; the data lands where it should and nowhere else.
func TestRMA(t *testing.T) {
	engines(t, amigo.Config{RDMAChunk: 4096, RDMASlots: 4}, func(t *testing.T, cfg amigo.Config) {
		amigotest.Run(t, 2, amigotest.Options{Config: cfg, Timeout: 10 * time.Second}, func(r *amigotest.Rank) error {
			c := r.Ctx
			const size = 100_000
			region, err := r.AllocMemory(size)
			if err != nil {
				return err
			}
			keys := make([]amigo.Key, 2)
			keys[r.Rank()] = region.Key()
			c.SetDispatch(5, func(c *amigo.Context, m *amigo.Message) {
				keys[m.Source.Rank] = amigo.Key(binary.LittleEndian.Uint64(m.Data))
			})
			c.SendImmediate(amigo.EndpointOf(1-r.Rank()), 5, nil, binary.LittleEndian.AppendUint64(nil, uint64(region.Key())))
			peer := amigo.EndpointOf(1 - r.Rank())
			if err := c.Wait(r.Deadline, func() bool { return keys[1-r.Rank()] != 0 }); err != nil {
				return err
			}
			if err := r.Barrier(); err != nil {
				return err
			}
			if r.Rank() == 0 {
				k := amigo.NewCounter()
				src := fill(make([]byte, 50_000), 1)
				k.Add(1)
				if err := c.Put(peer, src, keys[1], 1000, k.Done()); err != nil {
					return err
				}
				if err := c.WaitCounter(r.Deadline, k); err != nil {
					return err
				}
				back := make([]byte, 50_000)
				k.Add(2)
				var remote int
				p := &amigo.RMAParams{Dest: peer, Local: back, Remote: keys[1], Offset: 1000, Done: k.Done(), RemoteDone: func(err error) { remote++; k.Done()(err) }}
				if err := c.GetWith(p); err != nil {
					return err
				}
				if err := c.WaitCounter(r.Deadline, k); err != nil {
					return err
				}
				if !bytes.Equal(back, src) || remote != 1 {
					return fmt.Errorf("Get returned other bytes than Put wrote (remote done %d)", remote)
				}
				// Rput and Rget between registered regions, with remote completion.
				local := region.Bytes()
				fill(local[:30_000], 9)
				k.Add(1)
				if err := c.Rput(peer, region, 0, keys[1], 60_000, 30_000, k.Done()); err != nil {
					return err
				}
				if err := c.WaitCounter(r.Deadline, k); err != nil {
					return err
				}
				k.Add(1)
				if err := c.Rget(peer, region, 50_000, keys[1], 60_000, 30_000, k.Done()); err != nil {
					return err
				}
				if err := c.WaitCounter(r.Deadline, k); err != nil {
					return err
				}
				if !bytes.Equal(local[50_000:80_000], local[:30_000]) {
					return errors.New("Rget returned other bytes than Rput wrote")
				}
			}
			if err := r.Barrier(); err != nil {
				return err
			}
			if r.Rank() == 1 {
				mem := region.Bytes()
				want := make([]byte, size)
				copy(want[1000:], fill(make([]byte, 50_000), 1))
				copy(want[60_000:], fill(make([]byte, 30_000), 9))
				if !bytes.Equal(mem, want) {
					return errors.New("target region holds other bytes than the puts wrote")
				}
			}
			return r.Barrier()
		})
	})
}

// Bad input gets a clear error through the returned error or the done
// callback, never a panic, and the job goes on.
func TestBadInput(t *testing.T) {
	engines(t, amigo.Config{InlineMax: 256}, func(t *testing.T, cfg amigo.Config) {
		var asyncMu sync.Mutex
		var async []error
		cfg.OnError = func(err error) {
			asyncMu.Lock()
			async = append(async, err)
			asyncMu.Unlock()
		}
		amigotest.Run(t, 2, amigotest.Options{Config: cfg}, func(r *amigotest.Rank) error {
			c := r.Ctx
			peer := amigo.EndpointOf(1 - r.Rank())
			region, err := r.RegisterMemory(make([]byte, 1000))
			if err != nil {
				return err
			}
			gone, err := r.RegisterMemory(make([]byte, 1000))
			if err != nil {
				return err
			}
			var keys [2][2]amigo.Key
			keys[r.Rank()] = [2]amigo.Key{region.Key(), gone.Key()}
			c.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) {
				keys[m.Source.Rank][0] = amigo.Key(binary.LittleEndian.Uint64(m.Data))
				keys[m.Source.Rank][1] = amigo.Key(binary.LittleEndian.Uint64(m.Data[8:]))
			})
			good := 0
			c.SetDispatch(4, func(c *amigo.Context, m *amigo.Message) { good++ })
			// Receives into a short buffer, then declines.
			c.SetDispatch(6, func(c *amigo.Context, m *amigo.Message) {
				if err := m.Receive(make([]byte, m.Size()-1), nil); !errors.Is(err, amigo.ErrTooSmall) {
					panic(fmt.Sprintf("Receive into a short buffer: %v", err))
				}
			})
			msg := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, uint64(region.Key())), uint64(gone.Key()))
			c.SendImmediate(peer, 3, nil, msg)
			if err := c.Wait(r.Deadline, func() bool { return keys[1-r.Rank()][0] != 0 }); err != nil {
				return err
			}
			if err := r.Barrier(); err != nil {
				return err
			}
			if err := gone.Deregister(); err != nil {
				return err
			}
			if err := r.Barrier(); err != nil {
				return err
			}

			expect := func(what string, err error, target error) error {
				if !errors.Is(err, target) {
					return fmt.Errorf("%s: got %v, want %v", what, err, target)
				}
				return nil
			}
			// Returned at once.
			checks := []error{
				expect("unknown rank", c.SendImmediate(amigo.Endpoint{Rank: 7}, 1, nil, nil), amigo.ErrUnknownEndpoint),
				expect("unknown context", c.Send(amigo.Endpoint{Rank: 0, Context: 3}, 1, nil, nil, nil), amigo.ErrUnknownEndpoint),
				expect("negative rank", c.Put(amigo.Endpoint{Rank: -1}, []byte{1}, 1, 0, nil), amigo.ErrUnknownEndpoint),
				expect("dispatch out of range", c.SendImmediate(peer, amigo.MaxDispatch, nil, nil), amigo.ErrBadDispatch),
				expect("oversized immediate", c.SendImmediate(peer, 1, nil, make([]byte, amigo.ImmediateMax+1)), amigo.ErrTooLarge),
				expect("oversized header", c.Send(peer, 1, make([]byte, 300), nil, nil), amigo.ErrTooLarge),
				expect("nil put buffer", c.Put(peer, nil, region.Key(), 0, nil), amigo.ErrNilBuffer),
				expect("nil get buffer", c.Get(peer, []byte{}, region.Key(), 0, nil), amigo.ErrNilBuffer),
				expect("nil region", func() error { _, err := r.RegisterMemory(nil); return err }(), amigo.ErrNilBuffer),
				expect("Rput beyond local region", c.Rput(peer, region, 900, keys[1-r.Rank()][0], 0, 200, nil), amigo.ErrBounds),
				expect("deregister twice", gone.Deregister(), amigo.ErrBadKey),
			}
			if err := errors.Join(checks...); err != nil {
				return err
			}

			// Through the done callback.
			type result struct {
				name string
				err  error
				want error
				set  bool
			}
			results := []*result{
				{name: "get outside region", want: amigo.ErrBounds},
				{name: "put straddling region end", want: amigo.ErrBounds},
				{name: "get from deregistered region", want: amigo.ErrBadKey},
				{name: "put to forged key", want: amigo.ErrBadKey},
				{name: "send to unregistered dispatch (remote done)", want: amigo.ErrNoDispatch},
				{name: "rendezvous send to unregistered dispatch", want: amigo.ErrNoDispatch},
				{name: "rendezvous send into a short buffer", want: amigo.ErrDeclined},
			}
			cb := func(res *result) func(error) {
				return func(err error) { res.err, res.set = err, true }
			}
			pk := keys[1-r.Rank()]
			buf := make([]byte, 100)
			c.Get(peer, buf, pk[0], 950, cb(results[0]))
			c.Put(peer, buf, pk[0], 901, cb(results[1]))
			c.Get(peer, buf, pk[1], 0, cb(results[2]))
			c.Put(peer, buf, pk[0]^0xff00000000, 0, cb(results[3]))
			c.SendWith(&amigo.SendParams{Dest: peer, Dispatch: 99, Data: buf, RemoteDone: cb(results[4])})
			c.Send(peer, 99, nil, make([]byte, 1000), cb(results[5]))
			c.Send(peer, 6, nil, make([]byte, 1000), cb(results[6]))
			// An immediate to an unregistered dispatch has no callback: the
			// receiver reports it.
			c.SendImmediate(peer, 98, nil, []byte("lost"))
			if err := c.Wait(r.Deadline, func() bool {
				for _, res := range results {
					if !res.set {
						return false
					}
				}
				return true
			}); err != nil {
				return err
			}
			for _, res := range results {
				if !errors.Is(res.err, res.want) {
					return fmt.Errorf("%s: got %v, want %v", res.name, res.err, res.want)
				}
				var pe *amigo.PeerError
				if !errors.As(res.err, &pe) || int(pe.Addr.Rank) != peer.Rank {
					return fmt.Errorf("%s: error %v does not name peer %v", res.name, res.err, peer)
				}
			}
			// The rest of the job is undisturbed.
			if err := c.SendImmediate(peer, 4, nil, []byte("fine")); err != nil {
				return err
			}
			// The peer refused the immediate once its grace ended, and
			// told this rank.
			if err := c.Wait(r.Deadline, func() bool { return good == 1 && c.Stats().RefusedByPeer == 1 }); err != nil {
				return err
			}
			if err := r.Barrier(); err != nil {
				return err
			}
			if s := c.Stats(); s.NoDispatch != 3 {
				return fmt.Errorf("NoDispatch counted %d, want 3", s.NoDispatch)
			}
			return nil
		})
		asyncMu.Lock()
		defer asyncMu.Unlock()
		if len(async) != 4 {
			t.Fatalf("OnError got %d errors, want two unregistered-dispatch reports per rank (as receiver, as sender): %v", len(async), async)
		}
		for _, err := range async {
			var de *amigo.DispatchError
			if !errors.Is(err, amigo.ErrNoDispatch) || !errors.As(err, &de) || de.Dispatch != 98 || de.From == de.At {
				t.Fatalf("OnError got %v", err)
			}
		}
	})
}

// Defer keeps an announcement; Accept fetches it later, Reject declines it.
func TestDeferAcceptReject(t *testing.T) {
	engines(t, amigo.Config{InlineMax: 64}, func(t *testing.T, cfg amigo.Config) {
		amigotest.Run(t, 2, amigotest.Options{Config: cfg}, func(r *amigotest.Rank) error {
			c := r.Ctx
			var deferred []amigo.Deferred
			var sizes []int
			c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				if m.Inline() {
					if _, err := m.Defer(); err == nil {
						panic("an inline message was deferred")
					}
					return
				}
				d, err := m.Defer()
				if err != nil {
					panic(err)
				}
				if _, err := m.Defer(); err == nil {
					panic("deferred twice")
				}
				deferred = append(deferred, d)
				sizes = append(sizes, m.Size())
			})
			if err := r.Barrier(); err != nil {
				return err
			}
			if r.Rank() == 0 {
				data := [][]byte{fill(make([]byte, 5000), 1), fill(make([]byte, 7000), 2)}
				errs := make([]error, 2)
				done := 0
				for i := range data {
					i := i
					c.Send(amigo.EndpointOf(1), 1, nil, data[i], func(err error) { errs[i] = err; done++ })
				}
				if err := c.Wait(r.Deadline, func() bool { return done == 2 }); err != nil {
					return err
				}
				if errs[0] != nil || !errors.Is(errs[1], amigo.ErrDeclined) {
					return fmt.Errorf("accepted send: %v; rejected send: %v", errs[0], errs[1])
				}
			} else {
				if err := c.Wait(r.Deadline, func() bool { return len(deferred) == 2 }); err != nil {
					return err
				}
				// Accept too small: an error, and the message stays deferred.
				var e1, e2 error
				n := 0
				c.Accept(deferred[0], make([]byte, 10), func(err error) { e1 = err; n++ })
				if err := c.Wait(r.Deadline, func() bool { return n == 1 }); err != nil {
					return err
				}
				if !errors.Is(e1, amigo.ErrTooSmall) {
					return fmt.Errorf("Accept into a short buffer: %v", e1)
				}
				buf := make([]byte, sizes[0])
				c.Accept(deferred[0], buf, func(err error) { e2 = err; n++ })
				c.Reject(deferred[1])
				if err := c.Wait(r.Deadline, func() bool { return n == 2 }); err != nil {
					return err
				}
				if e2 != nil || !bytes.Equal(buf, fill(make([]byte, 5000), 1)) {
					return fmt.Errorf("Accept: %v", e2)
				}
				// A handle used up is stale.
				var e3 error
				c.Accept(deferred[0], buf, func(err error) { e3 = err; n++ })
				if err := c.Wait(r.Deadline, func() bool { return n == 3 }); err != nil {
					return err
				}
				if !errors.Is(e3, amigo.ErrStale) {
					return fmt.Errorf("Accept of a used handle: %v", e3)
				}
			}
			return r.Barrier()
		})
	})
}

// A peer that closes fails every operation in flight with it, with an error
// naming it; traffic among the other ranks goes on.
func TestPeerClose(t *testing.T) {
	engines(t, amigo.Config{InlineMax: 64, RingSlots: 16}, func(t *testing.T, cfg amigo.Config) {
		cl, err := amigo.NewLocal(3, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			for _, c := range cl {
				c.Close()
			}
		}()
		c0, c1, c2 := cl[0].Context(0), cl[1].Context(0), cl[2].Context(0)
		announced := 0
		c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			if !m.Inline() {
				announced++
				m.Defer() // never accepted: the sender waits for the ACK
			}
		})
		got2 := 0
		c2.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got2++ })
		region, err := cl[1].RegisterMemory(make([]byte, 1<<20))
		if err != nil {
			t.Fatal(err)
		}

		var errs []error
		rec := func(err error) { errs = append(errs, err) }
		ep1 := amigo.EndpointOf(1)
		c0.Send(ep1, 1, nil, make([]byte, 4096), rec) // rendezvous, deferred by rank 1
		advanceUntil(t, func() bool { return announced == 1 }, c0, c1)
		for i := 0; i < 40; i++ { // more than the ring holds: some stay queued
			c0.Send(ep1, 1, nil, []byte{byte(i)}, rec)
		}
		c0.Advance()
		// Close rank 1 with all that in flight.
		if err := cl[1].Close(); err != nil {
			t.Fatal(err)
		}
		c0.Get(ep1, make([]byte, 100), region.Key(), 0, rec)
		advanceUntil(t, func() bool { return len(errs) == 42 }, c0)
		for i, err := range errs {
			var pe *amigo.PeerError
			if !errors.As(err, &pe) || pe.Addr.Rank != 1 || !errors.Is(err, amigo.ErrClosed) {
				t.Fatalf("operation %d: %v, want an error naming rank 1", i, err)
			}
		}
		if err := c0.Send(ep1, 1, nil, nil, nil); err != nil {
			// Posting to a closed peer is accepted; the failure comes through done.
			t.Fatal(err)
		}
		// Ranks 0 and 2 still talk.
		for i := 0; i < 100; i++ {
			c0.SendImmediate(amigo.EndpointOf(2), 1, nil, []byte{1})
		}
		advanceUntil(t, func() bool { return got2 == 100 }, c0, c2)
	})
}

// A context driven by a Driver: other goroutines post, callbacks run on the
// driver, Do reaches it.
func TestDriver(t *testing.T) {
	cl, err := amigo.NewLocal(2, amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	c0, c1 := cl[0].Context(0), cl[1].Context(0)
	var mu sync.Mutex
	got := 0
	c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		mu.Lock()
		got++
		mu.Unlock()
	})
	d0, d1 := c0.Drive(), c1.Drive()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if err := c0.SendImmediate(amigo.EndpointOf(1), 1, nil, []byte{1}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	ran := make(chan int, 1)
	c1.Do(func(c *amigo.Context) { ran <- c.Index() })
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("Do did not run")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := got
		mu.Unlock()
		if n == 2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("received %d of 2000", n)
		}
		time.Sleep(time.Millisecond)
	}
	d0.Stop()
	d1.Stop()
	// After Stop the context can be advanced by its new owner.
	c0.Advance()
}

// Several contexts per rank: each is its own progress domain, addressed by
// (rank, context), and may be advanced by its own goroutine.
func TestContexts(t *testing.T) {
	const n, ctxs, msgs = 3, 3, 300
	cl, err := amigo.NewLocal(n, amigo.Config{Contexts: ctxs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n*ctxs)
	for r := 0; r < n; r++ {
		for i := 0; i < ctxs; i++ {
			c := cl[r].Context(i)
			got := 0
			c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				if int(m.Data[0]) != c.Index() || m.Source.Context != c.Index() {
					errs <- fmt.Errorf("context %d got a message for context %d from %v", c.Index(), m.Data[0], m.Source)
				}
				got++
			})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := 0; p < n; p++ {
					for j := 0; j < msgs; j++ {
						if err := c.SendImmediate(amigo.Endpoint{Rank: p, Context: c.Index()}, 1, nil, []byte{byte(c.Index())}); err != nil {
							errs <- err
							return
						}
					}
				}
				if err := c.Wait(ctx, func() bool { return got == n*msgs }); err != nil {
					errs <- fmt.Errorf("rank %d context %d: got %d: %w", c.Client().Rank(), c.Index(), got, err)
				}
				// Keep serving until every context is done.
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestConfig(t *testing.T) {
	if _, err := amigo.NewLocal(2, amigo.Config{RingSlots: 100}); err == nil {
		t.Fatal("RingSlots 100 accepted")
	}
	if _, err := amigo.NewLocal(2, amigo.Config{InlineMax: 1 << 20}); err == nil {
		t.Fatal("InlineMax beyond half the ring accepted")
	}
	t.Setenv("AMIGO_RING_SLOTS", "256")
	t.Setenv("AMIGO_INLINE_MAX", "zzz")
	if _, err := amigo.NewLocal(1, amigo.Config{}); err == nil {
		t.Fatal("AMIGO_INLINE_MAX=zzz accepted")
	}
	t.Setenv("AMIGO_INLINE_MAX", "512")
	cl, err := amigo.NewLocal(1, amigo.Config{RingSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer cl[0].Close()
	if got := cl[0].Config(); got.RingSlots != 256 || got.InlineMax != 512 {
		t.Fatalf("environment did not override: %+v", got)
	}
	set, err := amigo.Settings(amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, s := range set {
		seen[s.Name] = s.Value
	}
	if seen["AMIGO_RING_SLOTS"] != "256" || seen["AMIGO_CONTEXTS"] != "1" {
		t.Fatalf("Settings: %v", seen)
	}
}

// AMIGO_YIELD=0 (YieldIterations -1) turns yielding off: a waiting
// goroutine sleeps right after its spin, where by default it yields 200
// times first.
func TestConfigNoYield(t *testing.T) {
	waitSleeps := func(env string) (amigo.Config, uint64) {
		t.Helper()
		if env != "" {
			t.Setenv("AMIGO_YIELD", env)
		}
		cl, err := amigo.NewLocal(1, amigo.Config{SpinIterations: 1, SleepMax: 50 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		defer cl[0].Close()
		c := cl[0].Context(0)
		before := c.Stats().Sleeps
		calls := 0
		if err := c.Wait(context.Background(), func() bool { calls++; return calls > 6 }); err != nil {
			t.Fatal(err)
		}
		return cl[0].Config(), c.Stats().Sleeps - before
	}
	cfg, sleeps := waitSleeps("")
	if cfg.YieldIterations != 200 || sleeps != 0 {
		t.Fatalf("default: YieldIterations %d, %d sleeps in 6 idle rounds; want 200 and none", cfg.YieldIterations, sleeps)
	}
	for _, env := range []string{"0", "-1"} {
		cfg, sleeps := waitSleeps(env)
		if cfg.YieldIterations != -1 || sleeps < 4 {
			t.Fatalf("AMIGO_YIELD=%s: YieldIterations %d, %d sleeps in 6 idle rounds; want -1 and a sleep each round after the first", env, cfg.YieldIterations, sleeps)
		}
	}
	t.Setenv("AMIGO_YIELD", "-2")
	if _, err := amigo.NewLocal(1, amigo.Config{}); err == nil {
		t.Fatal("AMIGO_YIELD=-2 accepted")
	}
}
