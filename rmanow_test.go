package amigo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// PutNow and GetNow copy at once into and out of a peer's shared
// allocation over shared memory (and otherwise fall back to a callback):
// 4 ranks put their own 40 bytes into a slot of each rank's region, the
// bytes around every slot stay as they were, and each rank gets every
// slot back. An access outside the region is refused as Put's is, by the
// owner, touching nothing; a copy never overtakes a Put still queued to
// the same peer; over Go memory and TCP nothing completes at once; and a
// copy done at once allocates nothing.
func TestPutGetNow(t *testing.T) {
	for _, over := range []string{"shm", "loop", "tcp"} {
		for _, mem := range atomicTargets {
			t.Run(over+"/"+mem, func(t *testing.T) { testPutGetNow(t, over, mem) })
		}
	}
}

func testPutGetNow(t *testing.T, over, mem string) {
	const n, slot, data, big = 4, 64, 40, 1 << 20
	cl := openOver(t, n, amigo.Config{SpinIterations: 50, YieldIterations: 50}, over)
	var nowCount atomic.Int64
	everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
		x := c.Context(0)
		g, err := globalRegion(ctx, c, mem, n*slot+big)
		if err != nil {
			return err
		}
		me := c.Rank()
		// Guard bytes: every byte 0xee, slots included, before anyone
		// writes.
		for i := range g.Local.Bytes() {
			g.Local.Bytes()[i] = 0xee
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		k := amigo.NewCounter()
		done := k.Done()
		// wait finishes an operation PutNow or GetNow did not complete.
		wait := func(now bool, err error) error {
			if err != nil {
				return err
			}
			if now {
				nowCount.Add(1)
				return nil
			}
			k.Add(1)
			return x.WaitCounter(ctx, k)
		}
		mine := bytes.Repeat([]byte{byte(0x10 + me)}, data)
		for r := 0; r < n; r++ {
			ep := amigo.EndpointOf(r)
			// Into the middle of slot me, 8 bytes from its start.
			if err := wait(x.PutNow(ep, mine, g.Key(r), uint64(me*slot+8), done)); err != nil {
				return fmt.Errorf("PutNow to rank %d: %w", r, err)
			}
		}
		if err := x.FenceAll(nil); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		got := make([]byte, n*slot)
		for r := 0; r < n; r++ {
			if err := wait(x.GetNow(amigo.EndpointOf(r), got, g.Key(r), 0, done)); err != nil {
				return fmt.Errorf("GetNow from rank %d: %w", r, err)
			}
			for s := 0; s < n; s++ {
				part := got[s*slot : (s+1)*slot]
				for i, b := range part {
					want := byte(0xee)
					if i >= 8 && i < 8+data {
						want = byte(0x10 + s)
					}
					if b != want {
						return fmt.Errorf("rank %d's slot %d, byte %d: %#x, want %#x", r, s, i, b, want)
					}
				}
			}
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		// Outside the region: refused by its owner as a Put is, and
		// nothing moves.
		next := amigo.EndpointOf((me + 1) % n)
		size := uint64(n*slot + big)
		for _, off := range []uint64{size - 8, size, 1 << 40} {
			now, err := x.PutNow(next, mine, g.Key((me+1)%n), off, done)
			if err == nil && now {
				return fmt.Errorf("a PutNow at offset %d of a %d-byte region completed", off, size)
			}
			if err = wait(now, err); !errors.Is(err, amigo.ErrBounds) {
				return fmt.Errorf("PutNow at offset %d of a %d-byte region: %v, want ErrBounds", off, size, err)
			}
			now, err = x.GetNow(next, got[:16], g.Key((me+1)%n), off, done)
			if err = wait(now, err); !errors.Is(err, amigo.ErrBounds) {
				return fmt.Errorf("GetNow at offset %d of a %d-byte region: %v, want ErrBounds", off, size, err)
			}
		}
		// Behind a Put still queued to the same peer (posted, and no
		// Advance since), a PutNow to the same bytes is queued too and
		// lands second; the GetNow after them reads its bytes.
		first, second := bytes.Repeat([]byte{0xa1}, 8), bytes.Repeat([]byte{0xb2}, 8)
		at := uint64(me*slot + 8)
		k.Add(1)
		if err := x.Put(next, first, g.Key((me+1)%n), at, done); err != nil {
			return err
		}
		now, err := x.PutNow(next, second, g.Key((me+1)%n), at, done)
		if err == nil && now {
			return fmt.Errorf("a PutNow behind a queued Put completed at once")
		}
		if err := wait(now, err); err != nil {
			return err
		}
		if err := wait(x.GetNow(next, got[:8], g.Key((me+1)%n), at, done)); err != nil {
			return err
		}
		if !bytes.Equal(got[:8], second) {
			return fmt.Errorf("after a Put of %x and a PutNow of %x: %x", first, second, got[:8])
		}
		// Behind a large Put the engine has started and not finished
		// (one Advance moves a piece of it), the same.
		large := bytes.Repeat([]byte{0xc3}, big)
		k.Add(1)
		if err := x.Put(next, large, g.Key((me+1)%n), n*slot, done); err != nil {
			return err
		}
		x.Advance()
		now, err = x.PutNow(next, second, g.Key((me+1)%n), n*slot, done)
		if err == nil && now && k.Pending() > 0 {
			return fmt.Errorf("a PutNow behind a Put in flight completed at once")
		}
		if err := wait(now, err); err != nil {
			return err
		}
		if err := wait(x.GetNow(next, got[:16], g.Key((me+1)%n), n*slot, done)); err != nil {
			return err
		}
		if !bytes.Equal(got[:8], second) || got[8] != 0xc3 {
			return fmt.Errorf("after a Put of %d bytes %x and a PutNow of %x: %x", big, large[0], second, got[:16])
		}
		if over == "shm" && mem == "alloc" {
			var e error
			allocs := testing.AllocsPerRun(100, func() {
				if now, err := x.PutNow(next, second, g.Key((me+1)%n), at, nil); err != nil || !now {
					e = fmt.Errorf("PutNow with nothing queued: done %v, %v", now, err)
				}
				if now, err := x.GetNow(next, got[:8], g.Key((me+1)%n), at, nil); err != nil || !now {
					e = fmt.Errorf("GetNow with nothing queued: done %v, %v", now, err)
				}
			})
			if e != nil {
				return e
			}
			if allocs != 0 {
				return fmt.Errorf("PutNow and GetNow done at once: %v allocations", allocs)
			}
			// A holder's copies too, without taking the context.
			h := x.Hold()
			allocs = testing.AllocsPerRun(100, func() {
				if now, err := h.PutNow(next, first, g.Key((me+1)%n), at, nil); err != nil || !now {
					e = fmt.Errorf("held PutNow with nothing queued: done %v, %v", now, err)
				}
				if now, err := h.GetNow(next, got[:8], g.Key((me+1)%n), at, nil); err != nil || !now {
					e = fmt.Errorf("held GetNow with nothing queued: done %v, %v", now, err)
				}
			})
			h.Release()
			if e != nil {
				return e
			}
			if allocs != 0 {
				return fmt.Errorf("held PutNow and GetNow done at once: %v allocations", allocs)
			}
			if !bytes.Equal(got[:8], first) {
				return fmt.Errorf("held GetNow after PutNow of %x: %x", first, got[:8])
			}
		}
		return c.Barrier(ctx)
	})
	switch {
	case over == "shm" && mem == "alloc" && nowCount.Load() == 0:
		t.Fatal("no PutNow or GetNow completed at once into a shared allocation over shared memory")
	case (over == "tcp" || mem == "go") && nowCount.Load() != 0:
		t.Fatalf("%d PutNow or GetNow completed at once over %s into %s memory", nowCount.Load(), over, mem)
	}
}

// A region deregistered while a peer puts into it at once sees no change
// once Deregister returned, and the peer's copies are refused from then
// on, with ErrBadKey.
func TestPutNowDeregister(t *testing.T) {
	cl := openOver(t, 2, amigo.Config{SpinIterations: 50, YieldIterations: 50}, "shm")
	everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
		x := c.Context(0)
		g, err := c.AllocAll(ctx, 64)
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		switch c.Rank() {
		case 0:
			k := amigo.NewCounter()
			val := make([]byte, 8)
			for i := uint64(1); ; i++ {
				val[0], val[1] = byte(i), byte(i>>8)|1
				now, err := x.PutNow(amigo.EndpointOf(1), val, g.Key(1), 8, k.Done())
				if err == nil && !now {
					k.Add(1)
					err = x.WaitCounter(ctx, k)
				}
				if err != nil {
					if !errors.Is(err, amigo.ErrBadKey) {
						return fmt.Errorf("after deregistration: %v, want ErrBadKey", err)
					}
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		case 1:
			w := g.Local.Bytes()[8:16]
			if err := x.Wait(ctx, func() bool { return atomic.LoadUint64(word64(w, 0)) > 1000 }); err != nil {
				return err
			}
			if err := g.Local.Deregister(); err != nil {
				return err
			}
			v := atomic.LoadUint64(word64(w, 0))
			for i := 0; i < 2000; i++ {
				x.Advance()
				if got := atomic.LoadUint64(word64(w, 0)); got != v {
					return fmt.Errorf("the bytes went from %#x to %#x after Deregister returned", v, got)
				}
			}
		}
		return c.Barrier(ctx)
	})
}
