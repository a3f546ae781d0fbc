package main

import (
	"time"

	"github.com/amigo-hpc/amigo"
)

// Benchmarks of the large-message protocol and of multicast. Run the STOP
// variants side by side with bench/stop.sh, which sets AMIGO_PROTOCOL and
// AMIGO_STOP_VARIANT per run.
func init() {
	register(Benchmark{Name: "bw_late", Doc: "osu_bw with a late receiver: it names its buffers only once a whole window was announced", Run: bwLate})
	register(Benchmark{Name: "mcast", Doc: "multicast from rank 0 to every other rank: time until every target has the data", Run: mcastBench})
}

func bwLate(e *Env) error {
	sbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	rbuf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	sender, recv := e.Rank == 0, e.Rank == 1
	acks, got, seen := 0, 0, 0
	var defd []amigo.Deferred
	var src amigo.Endpoint
	landed := func(err error) {
		e.Fail(err)
		got++
		if got%e.Opts.Window == 0 {
			e.Fail(e.Ctx.SendImmediate(src, e.D(1), nil, nil))
		}
	}
	// The window's messages that arrive inline are copied at once, the
	// others deferred until the window's last message arrived: within
	// Config.InlineMax, a window over shared memory has its first message
	// inline and the rest announced.
	e.Ctx.SetDispatch(e.D(0), func(c *amigo.Context, m *amigo.Message) {
		src = m.Source
		seen++
		if m.Inline() {
			m.CopyTo(rbuf)
			landed(nil)
		} else {
			d, err := m.Defer()
			if err != nil {
				e.Fail(err)
				return
			}
			defd = append(defd, d)
		}
		if seen == e.Opts.Window {
			for _, d := range defd {
				e.Fail(c.Accept(d, rbuf, landed))
			}
			defd = defd[:0]
			seen = 0
		}
	})
	e.Ctx.SetDispatch(e.D(1), func(c *amigo.Context, m *amigo.Message) { acks++ })
	e.Header("Bandwidth Test, late receiver", fBW)
	if err := e.Barrier(); err != nil {
		return err
	}
	k := amigo.NewCounter()
	want := 0
	peer := amigo.EndpointOf(1)
	for _, size := range e.Sizes(false) {
		if size == 0 {
			continue
		}
		iters, warm := e.Iters(size, bwCounts)
		if err := e.Barrier(); err != nil {
			return err
		}
		var start time.Time
		switch {
		case sender:
			for i := 0; i < iters+warm; i++ {
				if i == warm {
					start = time.Now()
				}
				if err := e.window(peer, e.D(0), sbuf[:size], k); err != nil {
					return err
				}
				want++
				if err := e.Ctx.WaitCounter(e.Deadline, k); err != nil {
					return err
				}
				if err := e.Wait(func() bool { return acks >= want }); err != nil {
					return err
				}
			}
		case recv:
			want += (iters + warm) * e.Opts.Window
			if err := e.Wait(func() bool { return got >= want }); err != nil {
				return err
			}
		}
		if sender {
			e.Row(size, float64(size)*float64(iters*e.Opts.Window)/time.Since(start).Seconds()/1e6)
		}
	}
	return nil
}

// mcastBench times multicasts from rank 0 to every other rank: from the
// call until every target has the data (the origin's sent callback).
func mcastBench(e *Env) error {
	buf, err := e.Buffer(e.Opts.MaxSize)
	if err != nil {
		return err
	}
	got := 0
	e.Ctx.SetDispatch(e.D(0), func(c *amigo.Context, m *amigo.Message) {
		if err := m.Receive(buf[:m.Size()], func(err error) { e.Fail(err); got++ }); err != nil {
			e.Fail(err)
		}
	})
	targets := make([]amigo.Endpoint, 0, e.Size-1)
	for r := 1; r < e.Size; r++ {
		targets = append(targets, amigo.EndpointOf(r))
	}
	e.Header("Multicast Latency Test", fLatency)
	if err := e.Barrier(); err != nil {
		return err
	}
	want := 0
	for _, size := range e.Sizes(false) {
		iters, warm := e.Iters(size, bwCounts)
		if err := e.Barrier(); err != nil {
			return err
		}
		if e.Rank != 0 {
			want += iters + warm
			if err := e.Wait(func() bool { return got >= want }); err != nil {
				return err
			}
			continue
		}
		var start time.Time
		for i := 0; i < iters+warm; i++ {
			if i == warm {
				start = time.Now()
			}
			done := false
			if err := e.Ctx.Multicast(targets, e.D(0), nil, buf[:size], func(err error) { e.Fail(err); done = true }); err != nil {
				return err
			}
			if err := e.Wait(func() bool { return done }); err != nil {
				return err
			}
		}
		e.Row(size, float64(time.Since(start).Nanoseconds())/1e3/float64(iters))
	}
	return nil
}
