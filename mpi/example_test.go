package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// ranks runs fn on n ranks of an in-process job, each on its own goroutine
// with its world communicator, as a launched job runs one per process.
func ranks(n int, fn func(ctx context.Context, w *mpi.Comm)) {
	clients, err := amigo.NewLocal(n, amigo.Config{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := mpi.World(ctx, cl.Context(0), nil)
			if err != nil {
				panic(err)
			}
			fn(ctx, w)
			w.Barrier(ctx) // no rank leaves while others may need it
		}()
	}
	wg.Wait()
	for _, cl := range clients {
		cl.Close()
	}
}

// Point-to-point: rank 0 sends a slice of float64 to rank 1.
func Example() {
	ranks(2, func(ctx context.Context, w *mpi.Comm) {
		switch w.Rank() {
		case 0:
			mpi.Send(ctx, w, []float64{1.5, 2.5, 3.5}, 1, 7)
		case 1:
			buf := make([]float64, 8)
			st, err := mpi.Recv(ctx, w, buf, 0, mpi.AnyTag)
			fmt.Println(buf[:mpi.Elements[float64](st)], st.Source, st.Tag, err)
		}
	})
	// Output: [1.5 2.5 3.5] 0 7 <nil>
}

// Every rank contributes its rank; every rank gets the sum.
func ExampleAllreduce() {
	ranks(5, func(ctx context.Context, w *mpi.Comm) {
		sum := []int{w.Rank(), 1}
		mpi.Allreduce(ctx, w, nil, sum, mpi.Sum)
		if w.Rank() == 0 {
			fmt.Println(sum)
		}
	})
	// Output: [10 5]
}

// A user-defined, non-commutative op: keep the value of the lowest rank
// that has a nonzero one.
func ExampleNewOp() {
	first := mpi.NewOp(func(in, inout []int32) {
		for i := range inout {
			if in[i] != 0 {
				inout[i] = in[i]
			}
		}
	}, false)
	ranks(4, func(ctx context.Context, w *mpi.Comm) {
		v := []int32{int32(w.Rank()), int32(10 * w.Rank())}
		out := make([]int32, 2)
		if err := mpi.Reduce(ctx, w, v, out, first, 0); err != nil {
			fmt.Println(err)
		}
		if w.Rank() == 0 {
			fmt.Println(out)
		}
	})
	// Output: [1 10]
}

// Split the world into even and odd ranks; each half sums on its own.
func ExampleComm_Split() {
	ranks(6, func(ctx context.Context, w *mpi.Comm) {
		half, _ := w.Split(ctx, w.Rank()%2, w.Rank())
		defer half.Free()
		s := []int{w.Rank()}
		mpi.Allreduce(ctx, half, nil, s, mpi.Sum)
		if half.Rank() == 0 {
			// Print in a fixed order: the odd half waits for the even.
			if w.Rank() == 1 {
				w.Recv(ctx, nil, 0, 1)
			}
			fmt.Printf("ranks %%2 == %d: size %d, sum %d\n", w.Rank()%2, half.Size(), s[0])
			if w.Rank() == 0 {
				w.Send(ctx, nil, 1, 1)
			}
		}
	})
	// Output:
	// ranks %2 == 0: size 3, sum 6
	// ranks %2 == 1: size 3, sum 9
}

// A nonblocking allreduce overlapped with computation.
func ExampleIallreduce() {
	ranks(3, func(ctx context.Context, w *mpi.Comm) {
		x := []float64{float64(w.Rank() + 1)}
		req, _ := mpi.Iallreduce(w, nil, x, mpi.Max)
		work := 0
		for {
			if done, _, _ := req.Test(); done {
				break
			}
			work++ // something useful meanwhile
		}
		if w.Rank() == 0 {
			fmt.Println(x[0])
		}
	})
	// Output: 3
}

// Rank 2 of 4 goes (its client closes, as when its process dies): a
// collective fails on every survivor, naming it, and the survivors go on
// over a communicator of the three of them.
func ExampleComm_Shrink() {
	ranks(4, func(ctx context.Context, w *mpi.Comm) {
		if w.Rank() == 2 {
			for range 3 { // every rank is past World
				w.Recv(ctx, nil, mpi.AnySource, 1)
			}
			w.Context().Client().Close()
			return
		}
		w.Send(ctx, nil, 2, 1)
		err := w.Barrier(ctx)
		var pf *mpi.ProcFailedError
		if !errors.As(err, &pf) {
			panic(err)
		}
		failed := errors.Is(err, mpi.ErrProcFailed)
		s, err := w.Shrink(ctx)
		if err != nil {
			panic(err)
		}
		sum := []int{w.Rank()}
		mpi.Allreduce(ctx, s, nil, sum, mpi.Sum)
		if v, _ := s.Agree(ctx, 0b11); w.Rank() == 0 {
			fmt.Println(pf.WorldRank, failed, s.Size(), sum[0], v)
		}
	})
	// Output: 2 true 3 4 3
}

// Generalised active target: rank 0 exposes its window to ranks 1 and 2
// (Post), which each put their rank into their own slot (Start, Put,
// Complete); once Wait returns, rank 0's memory holds both.
func ExampleWin_Post() {
	ranks(3, func(ctx context.Context, w *mpi.Comm) {
		win, err := mpi.WinAllocate(ctx, w, 3*8, 8)
		if err != nil {
			panic(err)
		}
		all, _ := w.Group()
		if w.Rank() == 0 {
			origins, _ := all.Incl([]int{1, 2})
			win.Post(origins, 0)
			win.Wait(ctx)
			fmt.Println(mpi.View[int64](win.Memory()))
		} else {
			target, _ := all.Incl([]int{0})
			win.Start(ctx, target, 0)
			mpi.Put(win, []int64{int64(w.Rank())}, 0, w.Rank())
			win.Complete(ctx)
		}
		win.Free(ctx)
	})
	// Output: [0 1 2]
}

// A shared window: each rank of the host stores into its own part, and
// after Sync, Barrier, Sync reads its neighbour's part directly.
func ExampleWinAllocateShared() {
	ranks(2, func(ctx context.Context, w *mpi.Comm) {
		win, err := mpi.WinAllocateShared(ctx, w, 8, 8)
		if err != nil {
			panic(err)
		}
		mpi.View[int64](win.Memory())[0] = int64(100 + w.Rank())
		win.Sync()
		w.Barrier(ctx)
		win.Sync()
		other, _, _ := win.SharedQuery(1 - w.Rank())
		if w.Rank() == 0 {
			fmt.Println(mpi.View[int64](other)[0])
		}
		win.Free(ctx) // collective: no rank unmaps while another reads
	})
	// Output: 101
}
