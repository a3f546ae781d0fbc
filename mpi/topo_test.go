package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

func TestDimsCreate(t *testing.T) {
	for _, c := range []struct {
		n         int
		dims, out []int
		bad       bool
	}{
		{6, []int{0, 0}, []int{3, 2}, false},
		{7, []int{0, 0}, []int{7, 1}, false},
		{64, []int{0, 0, 0}, []int{4, 4, 4}, false},
		{12, []int{0, 3, 0}, []int{2, 3, 2}, false},
		{24, []int{0, 0, 0}, []int{4, 3, 2}, false},
		{1, []int{0}, []int{1}, false},
		{8, []int{3, 0}, nil, true},
		{6, []int{-1, 0}, nil, true},
		{6, []int{2, 3}, []int{2, 3}, false},
		{6, []int{2, 2}, nil, true},
		{0, []int{0}, nil, true},
	} {
		dims := slices.Clone(c.dims)
		err := mpi.DimsCreate(c.n, dims)
		if c.bad {
			if !errors.Is(err, mpi.ErrCount) {
				t.Errorf("DimsCreate(%d, %v): %v, want ErrCount", c.n, c.dims, err)
			}
			continue
		}
		if err != nil || !slices.Equal(dims, c.out) {
			t.Errorf("DimsCreate(%d, %v) = %v %v, want %v", c.n, c.dims, dims, err, c.out)
		}
	}
}

// A 3x2 grid periodic in its first dimension: coordinates, ranks, shifts
// with ProcNull at the open edges, sub-grids, and both neighbourhood
// collectives, blocking and not, on it, on its rows, and on a periodic
// ring of 2 and of 1 (where a rank's two neighbours are one rank).
func TestCartesian(t *testing.T) {
	run(t, 7, func(ctx context.Context, w *mpi.Comm) error {
		c, err := w.CartCreate(ctx, []int{3, 2}, []bool{true, false}, false)
		if err != nil {
			return err
		}
		if w.Rank() == 6 {
			if c != nil {
				return errors.New("rank beyond the grid got a communicator")
			}
			return nil
		}
		defer c.Free()
		r := c.Rank()
		coords, err := c.Coords(r)
		if err != nil || !slices.Equal(coords, []int{r / 2, r % 2}) {
			return fmt.Errorf("Coords(%d) = %v %v", r, coords, err)
		}
		if back, err := c.CartRank([]int{coords[0] + 3, coords[1]}); back != r || err != nil {
			return fmt.Errorf("CartRank wrapping the periodic dimension: %d %v", back, err)
		}
		if _, err := c.CartRank([]int{0, 2}); !errors.Is(err, mpi.ErrRank) {
			return fmt.Errorf("CartRank beyond an open edge: %v", err)
		}
		src, dest, err := c.Shift(0, 1)
		if err != nil || src != (r+4)%6 || dest != (r+2)%6 {
			return fmt.Errorf("Shift(0, 1) = %d %d %v", src, dest, err)
		}
		src, dest, _ = c.Shift(1, 1)
		wantSrc, wantDest := r-1, mpi.ProcNull
		if r%2 == 0 {
			wantSrc, wantDest = mpi.ProcNull, r+1
		}
		if src != wantSrc || dest != wantDest {
			return fmt.Errorf("Shift(1, 1) = %d %d, want %d %d", src, dest, wantSrc, wantDest)
		}
		// Neighbours in MPI's order: below and above in dimension 0,
		// then in dimension 1.
		nb := []int{(r + 4) % 6, (r + 2) % 6, wantSrc, wantDest}
		if err := checkNeighbors(ctx, c, nb); err != nil {
			return fmt.Errorf("3x2: %w", err)
		}
		// The columns (dimension 0 kept): rings of 3.
		col, err := c.CartSub(ctx, []bool{true, false})
		if err != nil {
			return err
		}
		defer col.Free()
		dims, periods, cc, err := col.Cart()
		if err != nil || !slices.Equal(dims, []int{3}) || !slices.Equal(periods, []bool{true}) || cc[0] != r/2 || col.Size() != 3 {
			return fmt.Errorf("CartSub: %v %v %v %v size %d", dims, periods, cc, err, col.Size())
		}
		cr := col.Rank()
		if err := checkNeighbors(ctx, col, []int{(cr + 2) % 3, (cr + 1) % 3}); err != nil {
			return fmt.Errorf("column: %w", err)
		}
		// The rows: open lines of 2; and periodic rings of 2 and 1.
		row, err := c.CartSub(ctx, []bool{false, true})
		if err != nil {
			return err
		}
		defer row.Free()
		rowNb := []int{mpi.ProcNull, 1}
		if row.Rank() == 1 {
			rowNb = []int{0, mpi.ProcNull}
		}
		if err := checkNeighbors(ctx, row, rowNb); err != nil {
			return fmt.Errorf("row: %w", err)
		}
		ring2, err := row.CartCreate(ctx, []int{2}, []bool{true}, false)
		if err != nil {
			return err
		}
		defer ring2.Free()
		other := 1 - ring2.Rank()
		if err := checkNeighbors(ctx, ring2, []int{other, other}); err != nil {
			return fmt.Errorf("ring of 2: %w", err)
		}
		self, err := c.Split(ctx, c.Rank(), 0)
		if err != nil {
			return err
		}
		defer self.Free()
		ring1, err := self.CartCreate(ctx, []int{1}, []bool{true}, false)
		if err != nil {
			return err
		}
		defer ring1.Free()
		if err := checkNeighbors(ctx, ring1, []int{0, 0}); err != nil {
			return fmt.Errorf("ring of 1: %w", err)
		}
		// No topology, wrong lengths: errors.
		if _, _, err := w.Shift(0, 1); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("Shift without a topology: %v", err)
		}
		if err := mpi.NeighborAllgather(ctx, c, []int32{1}, make([]int32, 3)); !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("NeighborAllgather, short recv: %v", err)
		}
		return nil
	})
}

// checkNeighbors runs the neighbourhood collectives on c, whose neighbours
// in order are nb, and checks every block: from a rank, its data; from
// ProcNull, the block as it was.
func checkNeighbors(ctx context.Context, c *mpi.Comm, nb []int) error {
	r, k := c.Rank(), len(nb)
	const bs = 3
	val := func(from, to, j int) int32 { return int32(from*1000 + to*10 + j) }
	for _, blocking := range []bool{true, false} {
		send := []int32{int32(r), int32(r + 100), int32(r + 200)}
		recv := slices.Repeat([]int32{-1}, k*bs)
		var err error
		if blocking {
			err = mpi.NeighborAllgather(ctx, c, send, recv)
		} else {
			var q mpi.Request
			if q, err = mpi.IneighborAllgather(c, send, recv); err == nil {
				_, err = q.Wait(ctx)
			}
		}
		if err != nil {
			return err
		}
		for i, n := range nb {
			want := []int32{int32(n), int32(n + 100), int32(n + 200)}
			if n == mpi.ProcNull {
				want = []int32{-1, -1, -1}
			}
			if got := recv[i*bs : (i+1)*bs]; !slices.Equal(got, want) {
				return fmt.Errorf("allgather block %d from %d: %v, want %v", i, n, got, want)
			}
		}
		// Alltoall: block i goes to neighbour i; what rank n sends toward
		// its neighbour slot j is val(n, j). A rank's block i comes from
		// nb[i], which sent it from its slot i^1 (the opposite direction).
		a2a := make([]int32, k*bs)
		for i := range k {
			for j := range bs {
				a2a[i*bs+j] = val(r, i, j)
			}
		}
		recv = slices.Repeat([]int32{-1}, k*bs)
		if blocking {
			err = mpi.NeighborAlltoall(ctx, c, a2a, recv)
		} else {
			var q mpi.Request
			if q, err = mpi.IneighborAlltoall(c, a2a, recv); err == nil {
				_, err = q.Wait(ctx)
			}
		}
		if err != nil {
			return err
		}
		for i, n := range nb {
			want := []int32{-1, -1, -1}
			if n != mpi.ProcNull {
				for j := range bs {
					want[j] = val(n, i^1, j)
				}
			}
			if got := recv[i*bs : (i+1)*bs]; !slices.Equal(got, want) {
				return fmt.Errorf("alltoall block %d from %d: %v, want %v", i, n, got, want)
			}
		}
	}
	return nil
}
