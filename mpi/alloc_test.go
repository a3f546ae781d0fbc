package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// echoPair starts a two-rank job whose rank 1 echoes every message on tag 1
// back to rank 0 (with size and source kept) until a message on tag 2, and
// returns rank 0's world.
func echoPair(t *testing.T) *mpi.Comm {
	t.Helper()
	cl, err := amigo.NewLocal(2, amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Add(1)
	var w1 *mpi.Comm
	var err1 error
	go func() {
		defer wg.Done()
		w1, err1 = mpi.World(ctx, cl[1].Context(0), nil)
	}()
	w0, err := mpi.World(ctx, cl[0].Context(0), nil)
	wg.Wait()
	if err != nil || err1 != nil {
		t.Fatal(err, err1)
	}
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<16)
		for {
			st, err := w1.Recv(ctx, buf, 0, mpi.AnyTag)
			if err != nil || st.Tag == 2 {
				done <- err
				return
			}
			if err := w1.Send(ctx, buf[:st.Count], 0, 1); err != nil {
				done <- err
				return
			}
		}
	}()
	t.Cleanup(func() {
		if err := w0.Send(ctx, nil, 1, 2); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
		w0.Free()
		w1.Free()
		for _, c := range cl {
			c.Close()
		}
	})
	return w0
}

func zeroAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	for i := 0; i < 100; i++ { // warm up: free lists fill, peers connect
		f()
	}
	if n := testing.AllocsPerRun(300, f); n != 0 {
		t.Errorf("%s: %v allocations per round trip (both ranks), want 0", name, n)
	}
}

// Small sends and receives allocate nothing on either rank, blocking or
// not, with the data copied at once (SendImmediate) or sent inline by
// reference; so does a message that waits in the unexpected queue.
func TestZeroAllocs(t *testing.T) {
	w := echoPair(t)
	ctx := context.Background()
	for _, size := range []int{8, 100, 4000} {
		out := make([]float64, size/8)
		in := make([]float64, size/8)
		zeroAllocs(t, "Send/Recv", func() {
			if err := mpi.Send(ctx, w, out, 1, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := mpi.Recv(ctx, w, in, 1, 1); err != nil {
				t.Fatal(err)
			}
		})
		zeroAllocs(t, "Isend/Irecv/Wait", func() {
			rq, err := mpi.Irecv(w, in, 1, mpi.AnyTag)
			if err != nil {
				t.Fatal(err)
			}
			sq, err := mpi.Isend(w, out, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sq.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := rq.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		})
		zeroAllocs(t, "Probe then Recv", func() {
			if err := mpi.Send(ctx, w, out, 1, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Probe(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := mpi.Recv(ctx, w, in, 1, 1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The small blocking collectives that run without a schedule allocate
// nothing on any rank: Barrier, Bcast, Reduce, Allreduce, Allgather and
// Alltoall of a few elements, on 2 ranks and on 4 (where messages from
// several peers meet in the unexpected queue).
func TestCollectivesZeroAllocs(t *testing.T) {
	for _, p := range []int{2, 4} {
		t.Run(fmt.Sprint(p), func(t *testing.T) { collectivesZeroAllocs(t, p) })
	}
}

func collectivesZeroAllocs(t *testing.T, p int) {
	cl, err := amigo.NewLocal(p, amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	ctx := context.Background()
	w := make([]*mpi.Comm, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w[r], errs[r] = mpi.World(ctx, cl[r].Context(0), nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	type bufs struct{ a, b, all, out []float64 }
	// 16 bytes a rank: every message of these fits a descriptor.
	round := func(c *mpi.Comm, x *bufs) error {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := mpi.Bcast(ctx, c, x.a, 0); err != nil {
			return err
		}
		if err := mpi.Reduce(ctx, c, x.a, x.b, mpi.Sum, 1); err != nil {
			return err
		}
		if err := mpi.Allreduce(ctx, c, x.a, x.b, mpi.Max); err != nil {
			return err
		}
		if err := mpi.Allgather(ctx, c, x.a, x.all); err != nil {
			return err
		}
		return mpi.Alltoall(ctx, c, x.all, x.out)
	}
	newBufs := func() *bufs {
		return &bufs{a: make([]float64, 2), b: make([]float64, 2), all: make([]float64, 2*p), out: make([]float64, 2*p)}
	}
	const warm, runs = 100, 200
	peers := make(chan error, p-1)
	for r := 1; r < p; r++ {
		go func() {
			x := newBufs()
			for i := 0; i < warm+runs+1; i++ { // AllocsPerRun calls once more
				if err := round(w[r], x); err != nil {
					peers <- err
					return
				}
			}
			peers <- nil
		}()
	}
	x := newBufs()
	var rerr error
	f := func() {
		if err := round(w[0], x); err != nil && rerr == nil {
			rerr = err
		}
	}
	for i := 0; i < warm; i++ {
		f()
	}
	n := testing.AllocsPerRun(runs, f)
	for r := 1; r < p; r++ {
		if err := <-peers; err != nil {
			t.Fatal(err)
		}
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	if n != 0 {
		t.Errorf("%v allocations per round of six collectives (all %d ranks), want 0", n, p)
	}
	for _, c := range w {
		c.Free()
	}
}
