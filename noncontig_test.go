package amigo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// A column of a row-major matrix goes by PutStrided into a column of the
// peer's matrix, and comes back by GetStrided into a contiguous buffer;
// every byte around the column (the other columns, the guards before and
// after the matrix) keeps its value. PutV gathers buffers of uneven sizes
// (some empty, some larger than the adapters' pieces) into one range, and
// GetV scatters it back.
func TestNonContiguous(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, elem := range []int{8, 24, 300 << 10} {
			t.Run(fmt.Sprintf("%s/%d", over, elem), func(t *testing.T) {
				const rows, cols, guard = 37, 5, 64
				rowBytes := cols * elem
				size := guard + rows*rowBytes + guard
				cl := openOver(t, 2, amigo.Config{}, over)
				everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
					x := c.Context(0)
					mem := bytes.Repeat([]byte{0xEE}, size)
					g, err := c.RegisterAll(ctx, mem)
					if err != nil {
						return err
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 0 {
						ep := amigo.EndpointOf(1)
						local := make([]byte, rows*rowBytes)
						for i := range local {
							local[i] = byte(i%251 + 1)
						}
						wait := func(post func(func(error)) error) error {
							fin := false
							var got error
							if err := post(func(err error) { got, fin = err, true }); err != nil {
								return err
							}
							if err := x.Wait(ctx, func() bool { return fin }); err != nil {
								return err
							}
							return got
						}
						// Column 1 of ours into column 3 of theirs.
						s := amigo.Strided{Count: rows, Block: elem, LocalStride: rowBytes, RemoteStride: rowBytes}
						if err := wait(func(d func(error)) error {
							return x.PutStrided(ep, local[elem:], s, g.Key(1), uint64(guard+3*elem), d)
						}); err != nil {
							return fmt.Errorf("PutStrided: %v", err)
						}
						// Back into a contiguous buffer.
						back := make([]byte, rows*elem)
						s.LocalStride = elem
						if err := wait(func(d func(error)) error {
							return x.GetStrided(ep, back, s, g.Key(1), uint64(guard+3*elem), d)
						}); err != nil {
							return fmt.Errorf("GetStrided: %v", err)
						}
						for r := 0; r < rows; r++ {
							if !bytes.Equal(back[r*elem:(r+1)*elem], local[r*rowBytes+elem:r*rowBytes+2*elem]) {
								return fmt.Errorf("row %d of the column came back wrong", r)
							}
						}
						// Bad layouts are refused at the call.
						for _, bad := range []amigo.Strided{
							{Count: 0, Block: 8, LocalStride: 8, RemoteStride: 8},
							{Count: 2, Block: 8, LocalStride: 4, RemoteStride: 8},
							{Count: 2, Block: 8, LocalStride: 8, RemoteStride: 7},
							{Count: rows + 1, Block: elem, LocalStride: elem, RemoteStride: elem},
						} {
							if err := x.GetStrided(ep, back, bad, g.Key(1), 0, nil); !errors.Is(err, amigo.ErrBadLayout) {
								return fmt.Errorf("layout %+v: %v, want ErrBadLayout", bad, err)
							}
						}
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == 1 {
						for i, b := range mem {
							off := i - guard
							r, col := off/rowBytes, off%rowBytes/elem
							inColumn := off >= 0 && r < rows && col == 3
							if !inColumn && b != 0xEE {
								return fmt.Errorf("byte %d (row %d, column %d) outside the column changed", i, r, col)
							}
							if inColumn && b != byte((r*rowBytes+elem+off%elem)%251+1) {
								return fmt.Errorf("byte %d of row %d of the column is %d", i, r, b)
							}
						}
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					// Vectors: rank 0 gathers into the start of rank 1's
					// region and scatters it back.
					if c.Rank() == 0 {
						ep := amigo.EndpointOf(1)
						sizes := []int{3, 0, elem, 1, 0, 2 * elem, 7}
						var vec, back [][]byte
						total := 0
						for i, n := range sizes {
							vec = append(vec, bytes.Repeat([]byte{byte(i + 1)}, n))
							back = append(back, make([]byte, n))
							total += n
						}
						fin, got := false, error(nil)
						if err := x.PutV(ep, vec, g.Key(1), guard, func(err error) { got, fin = err, true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return fin }); err != nil || got != nil {
							return fmt.Errorf("PutV: %v %v", err, got)
						}
						fin = false
						if err := x.GetV(ep, back, g.Key(1), guard, func(err error) { got, fin = err, true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return fin }); err != nil || got != nil {
							return fmt.Errorf("GetV: %v %v", err, got)
						}
						for i := range vec {
							if !bytes.Equal(vec[i], back[i]) {
								return fmt.Errorf("buffer %d of %d bytes came back wrong", i, sizes[i])
							}
						}
						var whole []byte
						for _, b := range vec {
							whole = append(whole, b...)
						}
						flat := make([]byte, total+1)
						fin = false
						if err := x.Get(ep, flat, g.Key(1), guard, func(err error) { got, fin = err, true }); err != nil {
							return err
						}
						if err := x.Wait(ctx, func() bool { return fin }); err != nil || got != nil {
							return fmt.Errorf("Get: %v %v", err, got)
						}
						if !bytes.Equal(flat[:total], whole) {
							return fmt.Errorf("PutV did not lay the buffers end to end")
						}
						if err := x.PutV(ep, [][]byte{nil, {}}, g.Key(1), 0, nil); !errors.Is(err, amigo.ErrNilBuffer) {
							return fmt.Errorf("PutV of nothing: %v", err)
						}
					}
					return c.Barrier(ctx)
				})
			})
		}
	}
}
