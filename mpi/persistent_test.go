package mpi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

// A persistent send and receive started again and again carry each start's
// data, inline and announced; a start of an active request is refused;
// Wait on an inactive one returns at once; Free ends them.
func TestPersistent(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		for _, n := range []int{8, 3000, 40000} {
			buf := make([]byte, n)
			peer := 1 - w.Rank()
			var q mpi.Request
			var err error
			if w.Rank() == 0 {
				q, err = w.SendInit(buf, peer, 4)
			} else {
				q, err = w.RecvInit(buf, peer, 4)
			}
			if err != nil {
				return err
			}
			if st, err := q.Wait(ctx); err != nil || st != (mpi.Status{}) {
				return fmt.Errorf("Wait of an inactive request: %+v %v", st, err)
			}
			for i := 0; i < 30; i++ {
				if w.Rank() == 0 {
					copy(buf, pattern(n, i))
				}
				if err := q.Start(); err != nil {
					return err
				}
				if i == 0 {
					if err := q.Start(); !errors.Is(err, mpi.ErrRequest) {
						return fmt.Errorf("Start of an active request: %v", err)
					}
				}
				st, err := q.Wait(ctx)
				if err != nil {
					return err
				}
				if q.Null() {
					return errors.New("Wait made a persistent request null")
				}
				if w.Rank() == 1 && (st.Count != n || !bytes.Equal(buf, pattern(n, i))) {
					return fmt.Errorf("n=%d start %d: status %+v, data of another start", n, i, st)
				}
			}
			if err := q.Free(); err != nil || !q.Null() {
				return fmt.Errorf("Free: %v", err)
			}
			if err := q.Start(); err == nil {
				return errors.New("Start of a freed request succeeded")
			}
		}
		// Startall over a send and a receive, on a ring of 2; and ProcNull.
		out, in := []int64{0}, []int64{0}
		s, err := w.SendInit(mpi.Bytes(out), 1-w.Rank(), 8)
		if err != nil {
			return err
		}
		r, err := w.RecvInit(mpi.Bytes(in), 1-w.Rank(), 8)
		if err != nil {
			return err
		}
		n, err := w.RecvInit(nil, mpi.ProcNull, 8)
		if err != nil {
			return err
		}
		reqs := []mpi.Request{r, s, n}
		for i := 0; i < 20; i++ {
			out[0] = int64(100*w.Rank() + i)
			if err := mpi.Startall(reqs); err != nil {
				return err
			}
			sts := make([]mpi.Status, 3)
			if err := mpi.Waitall(ctx, reqs, sts); err != nil {
				return err
			}
			if in[0] != int64(100*(1-w.Rank())+i) || sts[2].Source != mpi.ProcNull {
				return fmt.Errorf("Startall round %d: got %d, %+v", i, in[0], sts[2])
			}
			// Inactive persistent requests are passed over.
			if i, _, err := mpi.Waitany(ctx, reqs); i != mpi.Undefined || err != nil {
				return fmt.Errorf("Waitany of inactive requests: %d %v", i, err)
			}
		}
		return errors.Join(reqs[0].Free(), reqs[1].Free(), reqs[2].Free())
	})
}

// A persistent send and receive restarted 1000 times allocate nothing
// after the first start, on either rank (rank 1 echoes).
func TestPersistentZeroAllocs(t *testing.T) {
	w := echoPair(t)
	ctx := context.Background()
	out, in := make([]byte, 64), make([]byte, 64)
	s, err := w.SendInit(out, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.RecvInit(in, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []mpi.Request{r, s}
	round := func() {
		out[0]++
		if err := mpi.Startall(reqs); err != nil {
			t.Fatal(err)
		}
		if err := mpi.Waitall(ctx, reqs, nil); err != nil {
			t.Fatal(err)
		}
		if in[0] != out[0] {
			t.Fatalf("echo %d, sent %d", in[0], out[0])
		}
	}
	round()
	if n := testing.AllocsPerRun(1000, round); n != 0 {
		t.Errorf("%v allocations per restart of a persistent send and receive, want 0", n)
	}
}

// Persistent collectives started again and again, with new data each
// time and a blocking collective between starts, give what the blocking
// collectives give, on 3 and 4 ranks.
func TestPersistentCollectives(t *testing.T) {
	for _, p := range []int{3, 4} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			run(t, p, func(ctx context.Context, w *mpi.Comm) error {
				r := w.Rank()
				const n = 6
				in, sum := make([]int64, n), make([]int64, n)
				bc := make([]int32, 3)
				gat := make([]int64, n*p)
				scan := make([]int64, n)
				reqs := make([]mpi.Request, 0, 5)
				for _, mk := range []func() (mpi.Request, error){
					func() (mpi.Request, error) { return mpi.AllreduceInit(w, in, sum, mpi.Sum) },
					func() (mpi.Request, error) { return mpi.BcastInit(w, bc, 1) },
					w.BarrierInit,
					func() (mpi.Request, error) { return mpi.GatherInit(w, in, gat, 0) },
					func() (mpi.Request, error) { return mpi.ScanInit(w, in, scan, mpi.Max) },
				} {
					q, err := mk()
					if err != nil {
						return err
					}
					reqs = append(reqs, q)
				}
				for it := 0; it < 20; it++ {
					for i := range in {
						in[i] = ival(r, i+it)
					}
					if r == 1 {
						bc[0], bc[1], bc[2] = int32(it), int32(it+1), int32(it+2)
					}
					if err := mpi.Startall(reqs); err != nil {
						return err
					}
					if err := mpi.Waitall(ctx, reqs, nil); err != nil {
						return err
					}
					for i := range sum {
						var want, mx int64
						for q := 0; q < p; q++ {
							want += ival(q, i+it)
						}
						mx = ival(0, i+it)
						for q := 1; q <= r; q++ {
							mx = max(mx, ival(q, i+it))
						}
						if sum[i] != want || scan[i] != mx {
							return fmt.Errorf("start %d element %d: sum %d want %d, scan %d want %d", it, i, sum[i], want, scan[i], mx)
						}
						if r == 0 {
							for q := 0; q < p; q++ {
								if gat[q*n+i] != ival(q, i+it) {
									return fmt.Errorf("start %d: gather block %d element %d: %d", it, q, i, gat[q*n+i])
								}
							}
						}
					}
					if bc[0] != int32(it) || bc[2] != int32(it+2) {
						return fmt.Errorf("start %d: bcast %v", it, bc)
					}
					// A blocking collective between starts keeps its turn.
					one := []int64{0}
					if err := mpi.Allreduce(ctx, w, []int64{1}, one, mpi.Sum); err != nil || one[0] != int64(p) {
						return fmt.Errorf("Allreduce between starts: %d %v", one[0], err)
					}
				}
				for i := range reqs {
					if err := reqs[i].Free(); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
