package amigo_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/amigo-hpc/amigo"
)

// atomicTargets are the kinds of memory a remote atomic reaches: a shared
// allocation (AllocAll; over shm the initiator's own atomic instruction on
// its mapping) and Go memory (RegisterAll; over shm the owner performs it).
var atomicTargets = []string{"alloc", "go"}

func globalRegion(ctx context.Context, c *amigo.Client, mem string, n int) (*amigo.GlobalRegion, error) {
	if mem == "alloc" {
		return c.AllocAll(ctx, n)
	}
	return c.RegisterAll(ctx, make([]byte, n))
}

func word64(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }
func word32(b []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

// Ranks × iterations fetch-adds on one word of rank 0 end at exactly their
// number, and every old value from 0 to that number minus one is fetched
// exactly once: no add is lost or doubled, whatever the adapter and memory.
func TestAtomicFetchAddCount(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, mem := range atomicTargets {
			t.Run(over+"/"+mem, func(t *testing.T) {
				n, iters := 8, 10000
				if over == "tcp" || raceEnabled {
					iters = 2000
				}
				const window = 32
				cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
				seen := make([]atomic.Int32, n*iters)
				everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
					x := c.Context(0)
					g, err := globalRegion(ctx, c, mem, 64)
					if err != nil {
						return err
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					olds := make([]int64, window)
					var bad error
					posted, done := 0, 0
					for done < iters {
						for posted < iters && posted-done < window {
							i := posted % window
							err := x.FetchAdd(amigo.EndpointOf(0), g.Key(0), 8, 1, &olds[i], func(err error) {
								if err != nil && bad == nil {
									bad = err
								}
								old := olds[i]
								if old < 0 || old >= int64(n*iters) {
									bad = fmt.Errorf("fetched %d, outside [0, %d)", old, n*iters)
								} else {
									seen[old].Add(1)
								}
								done++
							})
							if err != nil {
								return err
							}
							posted++
						}
						if err := x.Wait(ctx, func() bool { return done == iters || posted < iters && posted-done < window }); err != nil {
							return err
						}
						if bad != nil {
							return bad
						}
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 0 {
						if got := atomic.LoadUint64(word64(g.Local.Bytes(), 8)); got != uint64(n*iters) {
							return fmt.Errorf("word ends at %d, want %d", got, n*iters)
						}
						if w := binary.LittleEndian.Uint64(g.Local.Bytes()[0:]) | binary.LittleEndian.Uint64(g.Local.Bytes()[16:]); w != 0 {
							return fmt.Errorf("the words beside it changed: %#x", w)
						}
					}
					return c.Barrier(ctx)
				})
				for v := range seen {
					if k := seen[v].Load(); k != 1 {
						t.Fatalf("old value %d fetched %d times", v, k)
					}
				}
			})
		}
	}
}

// A spin lock built on compare-and-swap gives mutual exclusion: inside it,
// each rank reads a plain counter of rank 0 by Get and writes it back plus
// one by Put, and a fetch-add on an occupancy word always finds it empty.
// Release is Fence then Swap, so the Put lands before the next holder reads.
func TestAtomicLock(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, mem := range atomicTargets {
			t.Run(over+"/"+mem, func(t *testing.T) {
				const n, iters = 4, 40
				const lockW, countW, inW = 0, 8, 16
				cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
				everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
					x := c.Context(0)
					g, err := globalRegion(ctx, c, mem, 64)
					if err != nil {
						return err
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					me := uint64(c.Rank() + 1)
					owner, key := amigo.EndpointOf(0), g.Key(0)
					var bad error
					check := func(err error) {
						if err != nil && bad == nil {
							bad = err
						}
					}
					// do posts one operation and waits for it.
					do := func(post func(done func(error)) error) error {
						fin := false
						if err := post(func(err error) { check(err); fin = true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return fin }); err != nil {
							return err
						}
						return bad
					}
					buf := make([]byte, 8)
					for i := 0; i < iters; i++ {
						for {
							var old uint64
							if err := do(func(d func(error)) error { return x.CompareAndSwap(owner, key, lockW, 0, me, &old, d) }); err != nil {
								return err
							}
							if old == 0 {
								break
							}
							if old > n {
								return fmt.Errorf("lock word holds %d", old)
							}
						}
						var in int64
						if err := do(func(d func(error)) error { return x.FetchAdd(owner, key, inW, 1, &in, d) }); err != nil {
							return err
						}
						if in != 0 {
							return fmt.Errorf("entered the lock with %d others inside", in)
						}
						if err := do(func(d func(error)) error { return x.Get(owner, buf, key, countW, d) }); err != nil {
							return err
						}
						binary.LittleEndian.PutUint64(buf, binary.LittleEndian.Uint64(buf)+1)
						if err := do(func(d func(error)) error { return x.Put(owner, buf, key, countW, d) }); err != nil {
							return err
						}
						if err := do(func(d func(error)) error { return x.FetchAdd(owner, key, inW, -1, nil, d) }); err != nil {
							return err
						}
						if err := x.Fence(owner, check); err != nil {
							return err
						}
						var held uint64
						if err := do(func(d func(error)) error {
							return x.Atomic(&amigo.AtomicParams{Dest: owner, Remote: key, Offset: lockW, Op: amigo.AtomicSwap, Type: amigo.Uint64, Operand: 0, Result: &held, Done: d})
						}); err != nil {
							return err
						}
						if held != me {
							return fmt.Errorf("released a lock held by %d", held)
						}
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 0 {
						if got := binary.LittleEndian.Uint64(g.Local.Bytes()[countW:]); got != n*iters {
							return fmt.Errorf("counter ends at %d, want %d", got, n*iters)
						}
					}
					return c.Barrier(ctx)
				})
			})
		}
	}
}

// Every operation on every type computes what the processor's atomics
// compute, and fetches the old value.
func TestAtomicOps(t *testing.T) {
	type tc struct {
		op       amigo.AtomicOp
		typ      amigo.AtomicType
		init     uint64
		operand  uint64
		compare  uint64
		want     uint64
		wantOld  uint64
		describe string
	}
	f := math.Float64bits
	neg := func(v int64) uint64 { return uint64(v) }
	cases := []tc{
		{amigo.AtomicAdd, amigo.Int64, 5, neg(-7), 0, neg(-2), 5, "int64 add"},
		{amigo.AtomicAdd, amigo.Uint64, math.MaxUint64, 2, 0, 1, math.MaxUint64, "uint64 add wraps"},
		{amigo.AtomicAdd, amigo.Int32, 5, neg(-7), 0, uint64(uint32(0xfffffffe)), 5, "int32 add"},
		{amigo.AtomicAdd, amigo.Uint32, 0xffffffff, 3, 0, 2, 0xffffffff, "uint32 add wraps in 32 bits"},
		{amigo.AtomicAnd, amigo.Uint64, 0xff00ff00ff00ff00, 0x0ff00ff00ff00ff0, 0, 0x0f000f000f000f00, 0xff00ff00ff00ff00, "and"},
		{amigo.AtomicOr, amigo.Uint32, 0xf0f0, 0x0f0f, 0, 0xffff, 0xf0f0, "or"},
		{amigo.AtomicXor, amigo.Int64, 0b1100, 0b1010, 0, 0b0110, 0b1100, "xor"},
		{amigo.AtomicXor, amigo.Uint32, 0b1100, 0b1010, 0, 0b0110, 0b1100, "xor 32"},
		{amigo.AtomicSwap, amigo.Uint64, 11, 22, 0, 22, 11, "swap"},
		{amigo.AtomicSwap, amigo.Int32, 11, 22, 0, 22, 11, "swap 32"},
		{amigo.AtomicCAS, amigo.Uint64, 11, 22, 11, 22, 11, "cas hit"},
		{amigo.AtomicCAS, amigo.Uint64, 11, 22, 12, 11, 11, "cas miss"},
		{amigo.AtomicCAS, amigo.Uint32, 7, 9, 7, 9, 7, "cas 32 hit"},
		{amigo.AtomicAdd, amigo.Float64, f(1.5), f(2.25), 0, f(3.75), f(1.5), "float add"},
		{amigo.AtomicSwap, amigo.Float64, f(1.5), f(-0.5), 0, f(-0.5), f(1.5), "float swap"},
		{amigo.AtomicCAS, amigo.Float64, f(1.5), f(8), f(1.5), f(8), f(1.5), "float cas"},
	}
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, mem := range atomicTargets {
			t.Run(over+"/"+mem, func(t *testing.T) {
				cl := openOver(t, 2, amigo.Config{}, over)
				everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
					x := c.Context(0)
					g, err := globalRegion(ctx, c, mem, 64)
					if err != nil {
						return err
					}
					b := g.Local.Bytes()
					for i, k := range cases {
						// Rank 1 sets its word at 16, with guards beside it;
						// rank 0 operates on it.
						off := 16
						if c.Rank() == 1 {
							for j := range b {
								b[j] = 0xa5
							}
							if k.typ.Size() == 4 {
								*word32(b, off) = uint32(k.init)
							} else {
								*word64(b, off) = k.init
							}
						}
						if err := c.Barrier(ctx); err != nil {
							return err
						}
						if c.Rank() == 0 {
							old := uint64(0xdeadbeef)
							fin := false
							var opErr error
							if err := x.Atomic(&amigo.AtomicParams{Dest: amigo.EndpointOf(1), Remote: g.Key(1), Offset: uint64(off), Op: k.op, Type: k.typ,
								Operand: k.operand, Compare: k.compare, Result: &old, Done: func(err error) { opErr, fin = err, true }}); err != nil {
								return fmt.Errorf("%s: %v", k.describe, err)
							}
							if err := x.Wait(ctx, func() bool { return fin }); err != nil {
								return err
							}
							if opErr != nil {
								return fmt.Errorf("%s: %v", k.describe, opErr)
							}
							if old != k.wantOld {
								return fmt.Errorf("case %d %s: old %#x, want %#x", i, k.describe, old, k.wantOld)
							}
						}
						if err := c.Barrier(ctx); err != nil {
							return err
						}
						if c.Rank() == 1 {
							var got uint64
							if k.typ.Size() == 4 {
								got = uint64(*word32(b, off))
							} else {
								got = *word64(b, off)
							}
							if got != k.want {
								return fmt.Errorf("case %d %s: word %#x, want %#x", i, k.describe, got, k.want)
							}
							for j := range b {
								if (j < off || j >= off+k.typ.Size()) && b[j] != 0xa5 {
									return fmt.Errorf("case %d %s: byte %d beside the word changed", i, k.describe, j)
								}
							}
						}
					}
					return c.Barrier(ctx)
				})
			})
		}
	}
}

// Bad atomics are refused, before anything is sent when the caller can
// tell, and by the owner otherwise; nothing is touched.
func TestAtomicRefused(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, mem := range atomicTargets {
			t.Run(over+"/"+mem, func(t *testing.T) {
				cl := openOver(t, 2, amigo.Config{}, over)
				everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
					x := c.Context(0)
					g, err := globalRegion(ctx, c, mem, 64)
					if err != nil {
						return err
					}
					ro, err := c.RegisterMemoryPerm(make([]byte, 64), amigo.PermGet|amigo.PermPut)
					if err != nil {
						return err
					}
					wo, err := c.RegisterMemoryPerm(make([]byte, 64), amigo.PermPut)
					if err != nil {
						return err
					}
					keys := make([]uint64, 2)
					// Swap the keys of the limited regions by the region
					// every rank may write.
					b := g.Local.Bytes()
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 1 {
						binary.LittleEndian.PutUint64(b[32:], uint64(ro.Key()))
						binary.LittleEndian.PutUint64(b[40:], uint64(wo.Key()))
						for i := 0; i < 32; i++ {
							b[i] = byte(i)
						}
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 0 {
						fin := false
						var got error
						var rd [16]byte
						if err := x.Get(amigo.EndpointOf(1), rd[:], g.Key(1), 32, func(err error) { got, fin = err, true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return fin }); err != nil || got != nil {
							return fmt.Errorf("reading the keys: %v %v", err, got)
						}
						keys[0], keys[1] = binary.LittleEndian.Uint64(rd[:]), binary.LittleEndian.Uint64(rd[8:])
						ep := amigo.EndpointOf(1)
						base := amigo.AtomicParams{Dest: ep, Remote: g.Key(1), Offset: 8, Op: amigo.AtomicAdd, Type: amigo.Uint64, Operand: 1}
						// Refused at the call.
						for _, bad := range []struct {
							name string
							edit func(p *amigo.AtomicParams)
							want error
						}{
							{"misaligned", func(p *amigo.AtomicParams) { p.Offset = 4 }, amigo.ErrMisaligned},
							{"misaligned 32", func(p *amigo.AtomicParams) { p.Offset, p.Type = 2, amigo.Int32 }, amigo.ErrMisaligned},
							{"no type", func(p *amigo.AtomicParams) { p.Type = 0 }, amigo.ErrBadAtomic},
							{"no op", func(p *amigo.AtomicParams) { p.Op = 0 }, amigo.ErrBadAtomic},
							{"op 99", func(p *amigo.AtomicParams) { p.Op = 99 }, amigo.ErrBadAtomic},
							{"float and", func(p *amigo.AtomicParams) { p.Op, p.Type = amigo.AtomicAnd, amigo.Float64 }, amigo.ErrBadAtomic},
							{"unknown peer", func(p *amigo.AtomicParams) { p.Dest = amigo.EndpointOf(7) }, amigo.ErrUnknownEndpoint},
						} {
							p := base
							bad.edit(&p)
							called := false
							p.Done = func(error) { called = true }
							if err := x.Atomic(&p); !errors.Is(err, bad.want) {
								return fmt.Errorf("%s: Atomic returned %v, want %v", bad.name, err, bad.want)
							}
							if called {
								return fmt.Errorf("%s: refused, and done was called", bad.name)
							}
						}
						// Refused by the owner (or its mirror).
						for _, bad := range []struct {
							name string
							key  amigo.Key
							off  uint64
							want error
						}{
							{"out of bounds", g.Key(1), 64, amigo.ErrBounds},
							{"straddles the end", g.Key(1), 1 << 40, amigo.ErrBounds},
							{"unknown key", g.Key(1) ^ 1<<40, 0, amigo.ErrBadKey},
							{"no atomic permission", amigo.Key(keys[0]), 0, amigo.ErrPermission},
						} {
							p := base
							p.Remote, p.Offset = bad.key, bad.off
							old := uint64(77)
							p.Result = &old
							fin, got = false, nil
							p.Done = func(err error) { got, fin = err, true }
							if err := x.Atomic(&p); err != nil {
								return fmt.Errorf("%s: %v", bad.name, err)
							}
							if err := x.Wait(ctx, func() bool { return fin }); err != nil {
								return err
							}
							var ae *amigo.AccessError
							if !errors.Is(got, bad.want) || !errors.As(got, &ae) {
								return fmt.Errorf("%s: done got %v, want an *AccessError of %v", bad.name, got, bad.want)
							}
							if old != 77 {
								return fmt.Errorf("%s: the result word was written", bad.name)
							}
						}
						// Get needs PermGet, Put needs PermPut.
						fin, got = false, nil
						if err := x.Get(ep, rd[:], amigo.Key(keys[1]), 0, func(err error) { got, fin = err, true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return fin }); err != nil {
							return err
						}
						if !errors.Is(got, amigo.ErrPermission) {
							return fmt.Errorf("Get of a put-only region: %v, want ErrPermission", got)
						}
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 1 {
						for i := 0; i < 32; i++ {
							if b[i] != byte(i) {
								return fmt.Errorf("byte %d of the region changed", i)
							}
						}
						for i, v := range ro.Bytes() {
							if v != 0 {
								return fmt.Errorf("byte %d of the region without atomic permission changed", i)
							}
						}
					}
					return c.Barrier(ctx)
				})
			})
		}
	}
}

// BenchmarkAtomicFetchAdd measures fetch-add round trips from rank 0 on a
// word of rank 1, rank 1 advancing on its own goroutine, over shared memory
// between ranks of this process (a shared allocation: rank 0's own atomic
// instruction) and over the in-process adapter.
func BenchmarkAtomicFetchAdd(b *testing.B) {
	for _, over := range []string{"shm", "loop"} {
		b.Run(over, func(b *testing.B) {
			cl := openOver(b, 2, amigo.Config{}, over)
			region, err := cl[1].AllocMemory(64)
			if err != nil {
				b.Fatal(err)
			}
			var stop atomic.Bool
			done1 := make(chan struct{})
			go func() {
				defer close(done1)
				_ = cl[1].Context(0).Wait(context.Background(), stop.Load)
			}()
			defer func() { stop.Store(true); _ = cl[1].Context(0).Do(func(*amigo.Context) {}); <-done1 }()
			x := cl[0].Context(0)
			k := amigo.NewCounter()
			var old uint64
			p := &amigo.AtomicParams{Dest: amigo.EndpointOf(1), Remote: region.Key(), Offset: 8, Op: amigo.AtomicAdd, Type: amigo.Int64, Operand: 1, Result: &old, Done: k.Done()}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				k.Add(1)
				if err := x.Atomic(p); err != nil {
					b.Fatal(err)
				}
				if err := x.WaitCounter(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if old != uint64(b.N-1) {
				b.Fatalf("fetched %d at the end of %d adds", old, b.N)
			}
		})
	}
}

// BenchmarkAtomicNow measures fetch-adds completed at once (AtomicNow) on a
// word of another rank's shared allocation, over shared memory between
// ranks of this process; the other rank does nothing.
func BenchmarkAtomicNow(b *testing.B) {
	cl := openOver(b, 2, amigo.Config{}, "shm")
	region, err := cl[1].AllocMemory(64)
	if err != nil {
		b.Fatal(err)
	}
	x := cl[0].Context(0)
	var old uint64
	// The first one connects the link, in an Advance.
	if err := x.FetchAdd(amigo.EndpointOf(1), region.Key(), 16, 1, nil, nil); err != nil {
		b.Fatal(err)
	}
	if err := x.Flush(amigo.EndpointOf(1), nil); err != nil {
		b.Fatal(err)
	}
	for x.Advance() > 0 {
	}
	p := &amigo.AtomicParams{Dest: amigo.EndpointOf(1), Remote: region.Key(), Offset: 8, Op: amigo.AtomicAdd, Type: amigo.Int64, Operand: 1, Result: &old}
	var adds uint64 // performed so far on the word at offset 8
	run := func(b *testing.B, now func(*amigo.AtomicParams) (bool, error)) {
		base := adds
		adds += uint64(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			done, err := now(p)
			if err != nil || !done {
				b.Fatalf("AtomicNow: done %v, %v", done, err)
			}
		}
		b.StopTimer()
		if old != base+uint64(b.N-1) {
			b.Fatalf("fetched %d at the end of %d adds from %d", old, b.N, base)
		}
	}
	// Each operation takes the context and gives it back.
	b.Run("context", func(b *testing.B) { run(b, x.AtomicNow) })
	// The goroutine holds the context across the loop.
	b.Run("held", func(b *testing.B) {
		h := x.Hold()
		defer h.Release()
		run(b, h.AtomicNow)
	})
}

// AtomicNow completes at once on a shared allocation of a peer of this host
// (and otherwise falls back to a callback): 4 ranks' fetch-adds on one word
// fetch every old value exactly once. A rank that deregisters the region
// while another hammers it sees no change to the word once Deregister
// returned, and the other rank's atomics are refused from then on.
func TestAtomicNow(t *testing.T) {
	for _, over := range []string{"shm", "loop", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const n, iters = 4, 3000
			cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			seen := make([]atomic.Int32, n*iters)
			var nowCount atomic.Int64
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				x := c.Context(0)
				g, err := c.AllocAll(ctx, 64)
				if err != nil {
					return err
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				var old uint64
				k := amigo.NewCounter()
				p := &amigo.AtomicParams{Dest: amigo.EndpointOf(0), Remote: g.Key(0), Offset: 0, Op: amigo.AtomicAdd, Type: amigo.Uint64, Operand: 1, Result: &old, Done: k.Done()}
				for i := 0; i < iters; i++ {
					k.Add(1)
					now, err := x.AtomicNow(p)
					if err != nil {
						return err
					}
					if now {
						k.Add(-1)
						nowCount.Add(1)
					} else if err := x.WaitCounter(ctx, k); err != nil {
						return err
					}
					if old >= n*iters {
						return fmt.Errorf("fetched %d", old)
					}
					seen[old].Add(1)
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				// Rank 1 hammers rank 2's word 8 while rank 2 deregisters it.
				switch c.Rank() {
				case 1:
					p := &amigo.AtomicParams{Dest: amigo.EndpointOf(2), Remote: g.Key(2), Offset: 8, Op: amigo.AtomicAdd, Type: amigo.Uint64, Operand: 1, Done: k.Done()}
					for refused := false; !refused; {
						k.Add(1)
						now, err := x.AtomicNow(p)
						if now {
							k.Add(-1)
						} else if err == nil {
							err = x.WaitCounter(ctx, k)
						}
						if err != nil {
							if !errors.Is(err, amigo.ErrBadKey) {
								return fmt.Errorf("after deregistration: %v, want ErrBadKey", err)
							}
							refused = true
						}
						if ctx.Err() != nil {
							return ctx.Err()
						}
					}
				case 2:
					w := word64(g.Local.Bytes(), 8)
					for atomic.LoadUint64(w) < 100 {
						if err := x.Wait(ctx, func() bool { return atomic.LoadUint64(w) >= 100 }); err != nil {
							return err
						}
					}
					if err := g.Local.Deregister(); err != nil {
						return err
					}
					v := atomic.LoadUint64(w)
					for i := 0; i < 2000; i++ {
						x.Advance()
						if got := atomic.LoadUint64(w); got != v {
							return fmt.Errorf("the word went from %d to %d after Deregister returned", v, got)
						}
					}
				}
				return c.Barrier(ctx)
			})
			for v := range seen {
				if k := seen[v].Load(); k != 1 {
					t.Fatalf("old value %d fetched %d times", v, k)
				}
			}
			if over == "shm" && nowCount.Load() == 0 {
				t.Fatal("no AtomicNow completed at once over shared memory")
			}
			if over == "tcp" && nowCount.Load() != 0 {
				t.Fatalf("%d AtomicNow completed at once over tcp", nowCount.Load())
			}
		})
	}
}

// A holder's AtomicNow performs what it can at once without taking the
// context, and never overtakes what was posted before it: with a Put to
// the same word still queued it posts instead, and fetches the Put's
// value. 4 ranks' held fetch-adds on one word fetch every old value once,
// and an operation performed at once allocates nothing.
func TestHeldAtomicNow(t *testing.T) {
	for _, over := range []string{"shm", "loop", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const n, iters = 4, 2000
			cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			seen := make([]atomic.Int32, n*iters)
			var nowCount atomic.Int64
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				x := c.Context(0)
				g, err := c.AllocAll(ctx, 64)
				if err != nil {
					return err
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				var old uint64
				k := amigo.NewCounter()
				p := &amigo.AtomicParams{Dest: amigo.EndpointOf(0), Remote: g.Key(0), Offset: 0, Op: amigo.AtomicAdd, Type: amigo.Uint64, Operand: 1, Result: &old, Done: k.Done()}
				h := x.Hold()
				for i := 0; i < iters; i++ {
					k.Add(1)
					now, err := h.AtomicNow(p)
					if err != nil {
						h.Release()
						return err
					}
					if now {
						k.Add(-1)
						nowCount.Add(1)
					} else if err := h.Wait(ctx, func() bool { return k.Pending() == 0 }); err != nil {
						h.Release()
						return err
					}
					if old >= n*iters {
						h.Release()
						return fmt.Errorf("fetched %d", old)
					}
					seen[old].Add(1)
				}
				// Each rank's own word 8+8*rank at rank 0: a Put, then
				// a fetch-add posted while the Put is still queued.
				val := make([]byte, 8)
				binary.LittleEndian.PutUint64(val, 1000+uint64(c.Rank()))
				off := uint64(8 + 8*c.Rank())
				putDone := false
				if err := x.Put(amigo.EndpointOf(0), val, g.Key(0), off, func(err error) { putDone = err == nil }); err != nil {
					h.Release()
					return err
				}
				k.Add(1)
				fa := &amigo.AtomicParams{Dest: amigo.EndpointOf(0), Remote: g.Key(0), Offset: off, Op: amigo.AtomicAdd, Type: amigo.Uint64, Operand: 1, Result: &old, Done: k.Done()}
				now, err := h.AtomicNow(fa)
				if err == nil && now {
					err = fmt.Errorf("a fetch-add behind a queued Put completed at once")
				}
				if err == nil {
					err = h.Wait(ctx, func() bool { return k.Pending() == 0 && putDone })
				}
				if err == nil && old != 1000+uint64(c.Rank()) {
					err = fmt.Errorf("the fetch-add behind a Put of %d fetched %d", 1000+c.Rank(), old)
				}
				if err == nil && over == "shm" && c.Rank() != 0 {
					// Performed at once again now that nothing is queued,
					// and without allocating.
					fa.Done = nil
					allocs := testing.AllocsPerRun(100, func() {
						if now, e := h.AtomicNow(fa); e != nil || !now {
							err = fmt.Errorf("AtomicNow with nothing queued: done %v, %v", now, e)
						}
					})
					if err == nil && allocs != 0 {
						err = fmt.Errorf("held AtomicNow allocates %.1f per call", allocs)
					}
				}
				h.Release()
				if err != nil {
					return err
				}
				return c.Barrier(ctx)
			})
			for v := range seen {
				if k := seen[v].Load(); k != 1 {
					t.Fatalf("old value %d fetched %d times", v, k)
				}
			}
			if over == "shm" && nowCount.Load() == 0 {
				t.Fatal("no held AtomicNow completed at once over shared memory")
			}
			if over == "tcp" && nowCount.Load() != 0 {
				t.Fatalf("%d held AtomicNow completed at once over tcp", nowCount.Load())
			}
		})
	}
}

// An atomic posted into an instruction slot that last held a strided Get
// is an atomic: it does not inherit the layout. Every slot of the queue
// holds a strided Get first, then an atomic.
func TestAtomicAfterStrided(t *testing.T) {
	for _, over := range []string{"loop", "tcp"} {
		t.Run(over, func(t *testing.T) {
			const rounds = 4096
			cl := openOver(t, 2, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				x := c.Context(0)
				g, err := globalRegion(ctx, c, "go", 64)
				if err != nil {
					return err
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if c.Rank() == 0 {
					local := make([]byte, 12)
					s := amigo.Strided{Count: 3, Block: 4, LocalStride: 4, RemoteStride: 16}
					for i := 0; i < rounds; i++ {
						done := false
						if err := x.GetStrided(amigo.EndpointOf(1), local, s, g.Key(1), 0, func(err error) { done = true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return done }); err != nil {
							return err
						}
					}
					var old int64
					for i := 0; i < rounds; i++ {
						var aerr error
						done := false
						if err := x.FetchAdd(amigo.EndpointOf(1), g.Key(1), 8, 1, &old, func(err error) { aerr, done = err, true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return done }); err != nil {
							return err
						}
						if aerr != nil || old != int64(i) {
							return fmt.Errorf("atomic %d fetched %d: %v", i, old, aerr)
						}
					}
				}
				return c.Barrier(ctx)
			})
		})
	}
}
