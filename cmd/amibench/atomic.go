package main

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Remote atomic benchmarks after ucx_perftest's ucp_fadd and ucp_add:
// rank 0 operates on an int64 word of rank 1, which takes no part but
// advancing. The word lies in memory rank 1 allocated with AllocMemory
// (--atomic-target shared, the default: over shared memory rank 0's own
// atomic instruction on its mapping) or registered Go memory
// (--atomic-target heap: rank 1 performs each atomic for rank 0).
//
//	atomic_lat   fetch-add round trips, one at a time: microseconds each
//	atomic_rate  windows of --window adds without fetch: operations a second
//
// Each operation is posted with AtomicNow: one that completes at once is
// not waited for, as ucx_perftest does with ucp's immediate completion;
// the others are counted and waited for.

func init() {
	register(Benchmark{Name: "atomic_lat", Doc: "latency of a fetch-add on a word of rank 1 (ucx_perftest -t ucp_fadd)", Run: func(e *Env) error { return atomicBench(e, false) }})
	register(Benchmark{Name: "atomic_rate", Doc: "rate of windows of adds on a word of rank 1 (ucx_perftest -t ucp_add)", Run: func(e *Env) error { return atomicBench(e, true) }})
}

func atomicBench(e *Env, rate bool) error {
	var key amigo.Key
	haveKey := false
	e.Ctx.SetDispatch(e.D(0), func(c *amigo.Context, m *amigo.Message) {
		if len(m.Data) == 8 {
			key = amigo.Key(binary.LittleEndian.Uint64(m.Data))
			haveKey = true
		}
	})
	if e.Rank == 1 {
		var r *amigo.MemRegion
		var err error
		if e.Opts.AtomicTarget == "heap" {
			r, err = e.Client.RegisterMemory(make([]byte, 64))
		} else {
			r, err = e.Client.AllocMemory(64)
		}
		if err != nil {
			return err
		}
		defer r.Deregister()
		key = r.Key()
	}
	if rate {
		e.Header(fmt.Sprintf("Atomic Add Rate Test (%s word)", e.Opts.AtomicTarget), fMsgRate)
	} else {
		e.Header(fmt.Sprintf("Atomic Fetch-Add Latency Test (%s word)", e.Opts.AtomicTarget), fLatency)
	}
	if err := e.Barrier(); err != nil {
		return err
	}
	if e.Rank == 1 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(key))
		if err := e.Ctx.SendImmediate(amigo.EndpointOf(0), e.D(0), nil, b[:]); err != nil {
			return err
		}
	}
	if e.Rank != 0 {
		return e.Barrier()
	}
	err := atomicOrigin(e, rate, func() bool { return haveKey }, &key)
	if berr := e.Barrier(); err == nil {
		err = berr
	}
	return err
}

// atomicOrigin is rank 0's part of atomicBench.
func atomicOrigin(e *Env, rate bool, haveKey func() bool, keyp *amigo.Key) error {
	if err := e.Wait(haveKey); err != nil {
		return err
	}
	k := amigo.NewCounter()
	var old uint64
	p := &amigo.AtomicParams{Dest: amigo.EndpointOf(1), Remote: *keyp, Offset: 8, Op: amigo.AtomicAdd, Type: amigo.Int64, Operand: 1, Done: k.Done()}
	if !rate {
		p.Result = &old
	}
	iters, warm := e.Iters(8, latCounts)
	if e.Opts.Iterations == 0 {
		iters *= 10
	}
	n := 1
	if rate {
		n = e.Opts.Window
		iters /= 10
	}
	var adds int64
	var start time.Time
	// The loop holds the context, as a PGAS runtime's progress owner
	// does: an operation that can be performed at once is, without taking
	// and giving back the context around each one.
	h := e.Ctx.Hold()
	pending := func() bool { return k.Pending() == 0 }
	for i := 0; i < iters+warm; i++ {
		if i == warm {
			e.CountAllocs()
			start = time.Now()
		}
		for j := 0; j < n; j++ {
			// As ucx_perftest does: an operation that completed at once
			// (AtomicNow, ucp's UCS_OK) is not waited for.
			now, err := h.AtomicNow(p)
			if err != nil {
				h.Release()
				return err
			}
			if !now {
				k.Add(1)
			}
			adds++
		}
		if k.Pending() > 0 {
			if err := h.Wait(e.Deadline, pending); err != nil {
				h.Release()
				return err
			}
		}
		if !rate && old != uint64(adds-1) {
			h.Release()
			return fmt.Errorf("fetch-add %d fetched %d", adds, old)
		}
	}
	t := time.Since(start)
	h.Release()
	e.AllocsPer(iters * n)
	// Every add landed once.
	var final int64
	done := false
	if err := e.Ctx.FetchAdd(amigo.EndpointOf(1), *keyp, 8, 0, &final, func(error) { done = true }); err != nil {
		return err
	}
	if err := e.Wait(func() bool { return done }); err != nil {
		return err
	}
	if final != adds {
		return fmt.Errorf("the word holds %d after %d adds", final, adds)
	}
	if rate {
		e.Row(8, float64(iters*n)/t.Seconds())
	} else {
		e.Row(8, us(t)/float64(iters))
	}
	return nil
}
