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
