package mpi_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

// Goroutines that Mprobe the same source and tag at once each get a
// message of their own: every message is received exactly once, whole,
// by Mrecv or Imrecv, sizes inline and announced.
func TestMprobeGoroutines(t *testing.T) {
	const perG, gs = 16, 4
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 0 {
			var reqs []mpi.Request
			for i := 0; i < perG*gs; i++ {
				n := []int{4, 300, 20000}[i%3]
				b := pattern(n, i)
				b[0] = byte(i)
				q, err := w.Isend(b, 1, 3)
				if err != nil {
					return err
				}
				reqs = append(reqs, q)
			}
			return mpi.Waitall(ctx, reqs, nil)
		}
		var mu sync.Mutex
		seen := make(map[int]int)
		err := goroutines(gs, func(g int) error {
			buf := make([]byte, 20000)
			for k := 0; k < perG; k++ {
				m, st, err := w.Mprobe(ctx, 0, 3)
				if err != nil {
					return err
				}
				if k%2 == 0 {
					st, err = m.Recv(ctx, buf[:st.Count])
				} else {
					q, qerr := m.Irecv(buf[:st.Count])
					if qerr != nil {
						return qerr
					}
					st, err = q.Wait(ctx)
				}
				if err != nil {
					return err
				}
				i := int(buf[0])
				want := pattern(st.Count, i)
				want[0] = byte(i)
				if string(buf[:st.Count]) != string(want) || st.Count != []int{4, 300, 20000}[i%3] {
					return fmt.Errorf("message %d: wrong data or size %d", i, st.Count)
				}
				if _, err := m.Recv(ctx, buf); err == nil {
					return fmt.Errorf("a Message received twice")
				}
				mu.Lock()
				seen[i]++
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i := 0; i < perG*gs; i++ {
			if seen[i] != 1 {
				return fmt.Errorf("message %d received %d times", i, seen[i])
			}
		}
		// Improbe finds nothing left.
		_, ok, _, err := w.Improbe(mpi.AnySource, mpi.AnyTag)
		return check(!ok && err == nil, "Improbe after all: %v %v", ok, err)
	})
}
