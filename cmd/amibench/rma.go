package main

import (
	"encoding/binary"
	"time"

	"github.com/amigo-hpc/amigo"
)

// One-sided benchmarks after osu_put_latency, osu_get_latency, osu_put_bw
// and osu_get_bw: rank 0 puts into or gets from a region of rank 1 that
// rank 1 allocated with AllocMemory (OSU's default window is
// MPI_Win_allocate); rank 1 takes no part but advancing. A put completes when
// its data is visible at the target (MPI_Win_flush).

func init() {
	register(Benchmark{Name: "put_latency", Doc: "latency of a Put with remote completion, rank 0 into rank 1 (osu_put_latency)", Run: func(e *Env) error { return rma(e, true, false) }})
	register(Benchmark{Name: "get_latency", Doc: "latency of a Get, rank 0 from rank 1 (osu_get_latency)", Run: func(e *Env) error { return rma(e, false, false) }})
	register(Benchmark{Name: "put_bw", Doc: "bandwidth of windows of 64 Puts, rank 0 into rank 1 (osu_put_bw)", Run: func(e *Env) error { return rma(e, true, true) }})
	register(Benchmark{Name: "get_bw", Doc: "bandwidth of windows of 64 Gets, rank 0 from rank 1 (osu_get_bw)", Run: func(e *Env) error { return rma(e, false, true) }})
}

func rma(e *Env, put, bw bool) error {
	var key amigo.Key
	haveKey := false
	e.Ctx.SetDispatch(e.D(0), func(c *amigo.Context, m *amigo.Message) {
		if len(m.Data) == 8 {
			key = amigo.Key(binary.LittleEndian.Uint64(m.Data))
			haveKey = true
		}
	})
	var local []byte
	switch e.Rank {
	case 0:
		b, err := e.Buffer(e.Opts.MaxSize)
		if err != nil {
			return err
		}
		local = b
	case 1:
		r, err := e.Client.AllocMemory(max(e.Opts.MaxSize, 1))
		if err != nil {
			return err
		}
		defer r.Deregister()
		key = r.Key()
	}
	title := map[[2]bool]string{
		{true, false}: "Put Latency Test", {false, false}: "Get Latency Test",
		{true, true}: "Put Bandwidth Test", {false, true}: "Get Bandwidth Test",
	}[[2]bool{put, bw}]
	if bw {
		e.Header(title, fBW)
	} else {
		e.Header(title, fLatency)
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
		// Keep the region until rank 0 is done with it.
		return e.Barrier()
	}
	err := rmaOrigin(e, put, bw, local, func() bool { return haveKey }, &key)
	if berr := e.Barrier(); err == nil {
		err = berr
	}
	return err
}

// rmaOrigin is rank 0's part of rma.
func rmaOrigin(e *Env, put, bw bool, local []byte, haveKey func() bool, keyp *amigo.Key) error {
	if err := e.Wait(haveKey); err != nil {
		return err
	}
	key := *keyp
	k := amigo.NewCounter()
	peer := amigo.EndpointOf(1)
	p := &amigo.RMAParams{Dest: peer, Remote: key, RemoteDone: k.Done()}
	post := func(size int) error {
		k.Add(1)
		p.Local = local[:size]
		if put {
			return e.Ctx.PutWith(p)
		}
		p.RemoteDone = nil
		p.Done = k.Done()
		return e.Ctx.GetWith(p)
	}
	for _, size := range e.Sizes(false) {
		if size == 0 {
			continue
		}
		c := latCounts
		if bw {
			c = bwCounts
		}
		iters, warm := e.Iters(size, c)
		var start time.Time
		for i := 0; i < iters+warm; i++ {
			if i == warm {
				e.CountAllocs()
				start = time.Now()
			}
			n := 1
			if bw {
				n = e.Opts.Window
			}
			for j := 0; j < n; j++ {
				if err := post(size); err != nil {
					return err
				}
			}
			if err := e.Ctx.WaitCounter(e.Deadline, k); err != nil {
				return err
			}
		}
		t := time.Since(start)
		if bw {
			e.AllocsPer(iters * e.Opts.Window)
		} else {
			e.AllocsPer(iters)
		}
		if bw {
			e.Row(size, float64(size)*float64(iters*e.Opts.Window)/t.Seconds()/1e6)
		} else {
			e.Row(size, us(t)/float64(iters))
		}
	}
	return nil
}
