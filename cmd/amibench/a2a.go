package main

import (
	"time"

	"github.com/amigo-hpc/amigo"
)

// a2a is the all-to-all pattern of osu_alltoall built from point-to-point
// active messages: in each iteration every rank sends a message of the size
// to every other rank and waits for the one from each. It is what the
// oversubscription comparison runs (16 ranks on a 2-core host).

func init() {
	register(Benchmark{Name: "a2a", Doc: "all-to-all of point-to-point messages among all ranks (pattern of osu_alltoall)", Run: a2a})
}

func a2a(e *Env) error {
	sbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	rbufs := make([][]byte, e.Size)
	for r := range rbufs {
		if rbufs[r], err = e.Buffer(e.Opts.MaxSize); err != nil {
			return err
		}
	}
	got := 0
	done := func(err error) { e.Fail(err); got++ }
	e.Ctx.SetDispatch(e.D(0), func(c *amigo.Context, m *amigo.Message) {
		buf := rbufs[m.Source.Rank]
		if m.Inline() {
			m.CopyTo(buf)
			done(nil)
			return
		}
		if err := m.Receive(buf[:m.Size()], done); err != nil {
			e.Fail(err)
		}
	})
	e.Header("All-to-All Personalized Exchange Latency Test", fAvgLat, fMaxLat)
	if err := e.Barrier(); err != nil {
		return err
	}
	k := amigo.NewCounter()
	want := 0
	cond := func() bool { return got >= want && k.Pending() == 0 }
	for _, size := range e.Sizes(true) {
		iters, warm := e.Iters(size, collCounts)
		if err := e.Barrier(); err != nil {
			return err
		}
		var start time.Time
		for i := 0; i < iters+warm; i++ {
			if i == warm {
				e.CountAllocs()
				start = time.Now()
			}
			for j := 1; j < e.Size; j++ {
				p := (e.Rank + j) % e.Size
				k.Add(1)
				if err := e.Ctx.Send(amigo.EndpointOf(p), e.D(0), nil, sbuf[:size], k.Done()); err != nil {
					return err
				}
			}
			want += e.Size - 1
			if err := e.Wait(cond); err != nil {
				return err
			}
			if err := k.Err(); err != nil {
				return err
			}
		}
		avg := us(time.Since(start)) / float64(iters)
		e.AllocsPer(2 * iters * (e.Size - 1))
		all, err := e.Gather(avg)
		if err != nil {
			return err
		}
		if e.Rank == 0 {
			sum, mx := 0.0, 0.0
			for _, v := range all {
				sum += v
				mx = max(mx, v)
			}
			e.Row(size, sum/float64(len(all)), mx)
		}
	}
	return nil
}
