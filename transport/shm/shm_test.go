package shm_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/shm"
	"github.com/amigo-hpc/amigo/transport/transporttest"
)

// ports opens context 0 of ranks 0 and 1 of ads.
func ports(t testing.TB, ads []*shm.Adapter) (p0, p1 transport.Port) {
	t.Helper()
	var err error
	if p0, err = ads[0].Open(0, transport.NewDoorbell()); err != nil {
		t.Fatal(err)
	}
	if p1, err = ads[1].Open(0, transport.NewDoorbell()); err != nil {
		t.Fatal(err)
	}
	return p0, p1
}

// world starts n adapters in this process, each as if it were a process of
// its own: each maps the others' segments through /proc, exactly as ranks
// in different processes do.
func world(t testing.TB, n int, opts shm.Options) ([]*shm.Adapter, []*transport.Regions) {
	t.Helper()
	jobs := bootstrap.NewLocal(n)
	ads := make([]*shm.Adapter, n)
	regs := make([]*transport.Regions, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			regs[r] = transport.NewRegions()
			a, err := shm.New(jobs[r], regs[r], opts)
			if err == nil {
				ads[r] = a
				err = jobs[r].Fence(ctx)
			}
			if err == nil {
				err = a.Start(ctx)
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, j := range jobs {
			_ = j.Close()
		}
	})
	if err := errors.Join(errs...); err != nil {
		for _, a := range ads {
			if a != nil {
				a.Close()
			}
		}
		t.Fatal(err)
	}
	return ads, regs
}

func factory(opts shm.Options, alloc bool) transporttest.Factory {
	return func(t *testing.T, n int) *transporttest.World {
		ads, regs := world(t, n, opts)
		w := &transporttest.World{Regions: regs}
		for _, a := range ads {
			w.Adapters = append(w.Adapters, a)
		}
		if alloc {
			w.Alloc = func(rank, n int) []byte {
				b, err := ads[rank].Alloc(n)
				if err != nil {
					t.Fatalf("Alloc(%d) on rank %d: %v", n, rank, err)
				}
				return b
			}
		}
		return w
	}
}

var small = shm.Options{RingSlots: 64, RDMASlots: 8}

func with(o shm.Options, f func(*shm.Options)) shm.Options {
	f(&o)
	return o
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, factory(small, false))
}

// Regions allocated in shared segments, in the automatic choice.
func TestConformanceAlloc(t *testing.T) {
	transporttest.Run(t, factory(small, true))
}

// Each way forced, so that each is known to work alone.
func TestConformanceSegment(t *testing.T) {
	transporttest.Run(t, factory(with(small, func(o *shm.Options) { o.Way = shm.WaySegment }), true))
}

func TestConformanceCMA(t *testing.T) {
	transporttest.Run(t, factory(with(small, func(o *shm.Options) { o.Way = shm.WayCMA }), false))
}

func TestConformanceCopy(t *testing.T) {
	transporttest.Run(t, factory(with(small, func(o *shm.Options) { o.Way = shm.WayCopy; o.Chunk = 4096; o.Chunks = 4 }), false))
}

// Without the owner's help, and without cross-memory attach (the fallback
// when the kernel refuses it).
func TestConformanceNoHelpNoCMA(t *testing.T) {
	transporttest.Run(t, factory(with(small, func(o *shm.Options) { o.HelpOff = true; o.CMA = "off" }), false))
}

// The automatic choice uses the segment for regions in shared segments; for
// the others it measures both cross-memory attach and the pipelined copy on
// large transfers; the owner helps with large ones.
func TestWays(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  shm.Options
		alloc bool
		check func(s0, s1 shm.Stats) bool
	}{
		{"segment", shm.Options{}, true, func(s0, s1 shm.Stats) bool { return s0.Segment > 0 && s0.CMA == 0 && s0.Pipe == 0 }},
		{"measured", shm.Options{}, false, func(s0, s1 shm.Stats) bool { return s0.CMA > 0 && s0.Pipe > 0 && s0.Segment == 0 }},
		{"cma", shm.Options{Way: shm.WayCMA}, false, func(s0, s1 shm.Stats) bool { return s0.CMA > 0 && s0.Segment == 0 && s0.Pipe == 0 }},
		{"copy", shm.Options{Way: shm.WayCopy}, false, func(s0, s1 shm.Stats) bool { return s0.Pipe > 0 && s0.CMA == 0 }},
		{"helped", shm.Options{}, true, func(s0, s1 shm.Stats) bool { return s1.Helped > 0 }},
		// Before cross-memory attach moves 4 MiB of Go memory, the
		// initiator asks for huge pages under its buffer, and the owner
		// under the region it registered.
		{"huge", shm.Options{Way: shm.WayCMA}, false, func(s0, s1 shm.Stats) bool { return s0.HugeAsked > 0 && s1.HugeAsked > 0 }},
		{"huge off", shm.Options{Way: shm.WayCMA, HugeOff: true}, false, func(s0, s1 shm.Stats) bool { return s0.CMA > 0 && s0.HugeAsked == 0 && s1.HugeAsked == 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shm.ForgetHuge()
			ads, regs := world(t, 2, tc.opts)
			defer ads[0].Close()
			defer ads[1].Close()
			// The owner helps only when it gets to advance during a
			// transfer; on a busy machine that may take a few.
			moveMiB(t, ads, regs, tc.alloc, true, func() bool { return tc.check(ads[0].Stats(), ads[1].Stats()) })
			if s0, s1 := ads[0].Stats(), ads[1].Stats(); !tc.check(s0, s1) {
				t.Fatalf("stats of rank 0 %+v, rank 1 %+v", s0, s1)
			}
		})
	}
}

// A pipelined copy needs the owner: when its contexts never advance, its
// engine serves the copy, woken by the initiator.
func TestEngineServesIdleOwner(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{Way: shm.WayCopy})
	defer ads[0].Close()
	defer ads[1].Close()
	moveMiB(t, ads, regs, false, false, func() bool { return true })
	if s := ads[0].Stats(); s.Pipe == 0 {
		t.Fatalf("stats of rank 0 %+v: no pipelined copy", s)
	}
}

// moveMiB gets and puts 4 MiB between rank 0 and a region of rank 1 a few
// times (more, up to a few seconds, until enough says so), rank 1 advancing
// on its own goroutine if advance is set, and checks the bytes.
func moveMiB(t *testing.T, ads []*shm.Adapter, regs []*transport.Regions, alloc, advance bool, enough func() bool) {
	t.Helper()
	const n = 4 << 20
	p0, p1 := ports(t, ads)
	l, err := p0.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	buf := func(a *shm.Adapter) []byte {
		if !alloc {
			return make([]byte, n)
		}
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mem, local := buf(ads[1]), buf(ads[0])
	for i := range mem {
		mem[i] = byte(i * 3)
	}
	key, err := regs[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for advance && !stop.Load() {
			p1.Progress()
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	q := l.RDMA
	var tail uint64
	do := func(kind transport.RDMAKind) {
		op := q.Slot(tail)
		op.Kind, op.Local, op.Key, op.Off = kind, local, key, 0
		tail++
		q.Publish(tail)
		deadline := time.Now().Add(30 * time.Second)
		for q.TransferCounter().Load() != tail {
			if time.Now().After(deadline) {
				t.Fatal("transfer did not complete")
			}
			p0.Progress()
		}
		if err := q.Status(tail - 1); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().Add(5 * time.Second)
	for i := 0; i < 8 || !enough() && time.Now().Before(until); i++ {
		clear(local)
		do(transport.Get)
		if !bytes.Equal(local, mem) {
			t.Fatal("get moved the wrong bytes")
		}
	}
	for i := range local {
		local[i] = byte(i * 5)
	}
	do(transport.Put)
	if !bytes.Equal(local, mem) {
		t.Fatal("put moved the wrong bytes")
	}
}

// An owner asks for a huge page under a region of any size it registers for
// peers that reach it by cross-memory attach: a peer fetching a window of
// small messages from it pins those pages once per message. With HugeOff it
// asks for none.
func TestHugeSmallRegion(t *testing.T) {
	for _, off := range []bool{false, true} {
		shm.ForgetHuge()
		ads, regs := world(t, 2, shm.Options{Way: shm.WayCMA, HugeOff: off})
		mem := make([]byte, 16<<10)
		key, err := regs[1].Register(mem)
		if err != nil {
			t.Fatal(err)
		}
		if asked := ads[1].Stats().HugeAsked; off && asked != 0 || !off && asked == 0 {
			t.Errorf("HugeOff %v: the owner of a 16 KiB region asked for %d huge pages", off, asked)
		}
		if err := regs[1].Deregister(key); err != nil {
			t.Fatal(err)
		}
		ads[0].Close()
		ads[1].Close()
	}
}
