package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

// MinLoc and MaxLoc over value-index pairs with many ties (the smallest
// index wins), small and large enough for the algorithms that split
// vectors, by Allreduce, Reduce and Scan, on 3, 4 and 5 ranks; an odd
// length is an error.
func TestMinMaxLoc(t *testing.T) {
	for _, p := range []int{3, 4, 5} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			run(t, p, func(ctx context.Context, w *mpi.Comm) error {
				r := w.Rank()
				pair := func(rank, j int) (float64, float64) { return float64((rank*7 + j*3) % 5), float64(rank) }
				for _, pairs := range []int{1, 4, 5000} {
					send := make([]float64, 2*pairs)
					for j := 0; j < pairs; j++ {
						send[2*j], send[2*j+1] = pair(r, j)
					}
					for oi, op := range []mpi.Op{mpi.MinLoc, mpi.MaxLoc} {
						// want over ranks [0, upto]
						want := func(upto, j int) (float64, float64) {
							bv, bi := pair(0, j)
							for q := 1; q <= upto; q++ {
								v, i := pair(q, j)
								if oi == 0 && v < bv || oi == 1 && v > bv {
									bv, bi = v, i
								}
							}
							return bv, bi
						}
						all := make([]float64, 2*pairs)
						if err := mpi.Allreduce(ctx, w, send, all, op); err != nil {
							return err
						}
						red := make([]float64, 2*pairs)
						if err := mpi.Reduce(ctx, w, send, red, op, p-1); err != nil {
							return err
						}
						scan := make([]float64, 2*pairs)
						if err := mpi.Scan(ctx, w, send, scan, op); err != nil {
							return err
						}
						for j := 0; j < pairs; j++ {
							v, i := want(p-1, j)
							if all[2*j] != v || all[2*j+1] != i {
								return fmt.Errorf("%v Allreduce of %d pairs, pair %d: (%v, %v), want (%v, %v)", op, pairs, j, all[2*j], all[2*j+1], v, i)
							}
							if r == p-1 && (red[2*j] != v || red[2*j+1] != i) {
								return fmt.Errorf("%v Reduce pair %d: (%v, %v), want (%v, %v)", op, j, red[2*j], red[2*j+1], v, i)
							}
							if v, i := want(r, j); scan[2*j] != v || scan[2*j+1] != i {
								return fmt.Errorf("%v Scan pair %d: (%v, %v), want (%v, %v)", op, j, scan[2*j], scan[2*j+1], v, i)
							}
						}
					}
				}
				odd := make([]int32, 3)
				if err := mpi.Allreduce(ctx, w, odd, make([]int32, 3), mpi.MinLoc); !errors.Is(err, mpi.ErrCount) {
					return fmt.Errorf("MinLoc of 3 elements: %v", err)
				}
				if err := mpi.Allreduce(ctx, w, make([]complex128, 2), make([]complex128, 2), mpi.MaxLoc); !errors.Is(err, mpi.ErrOp) {
					return fmt.Errorf("MaxLoc on complex: %v", err)
				}
				return nil
			})
		})
	}
}
