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

// A handler names a list of buffers or a strided layout as the destination
// of a message, whatever way it travels (inline, announced and fetched,
// streamed): the data lands in order, and the bytes around the blocks and
// past the message keep their value.
func TestReceiveScatter(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, proto := range []string{"stop", "rendezvous"} {
			for _, size := range []int{100, 70 << 10, 1<<20 + 3} {
				t.Run(fmt.Sprintf("%s/%s/%d", over, proto, size), func(t *testing.T) {
					cl := openOver(t, 2, amigo.Config{Protocol: proto}, over)
					msg := make([]byte, size)
					for i := range msg {
						msg[i] = byte(i%253 + 1)
					}
					everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
						x := c.Context(0)
						const block, stride = 1000, 1500
						count := (size + block - 1) / block
						strided := bytes.Repeat([]byte{0xEE}, (count-1)*stride+block+64)
						// Uneven buffers, one empty, more room than needed.
						sizes := []int{size / 3, 0, 1, size, 50}
						var vec [][]byte
						for _, n := range sizes {
							vec = append(vec, bytes.Repeat([]byte{0xEE}, n))
						}
						got := 0
						var bad error
						x.SetDispatch(3, func(_ *amigo.Context, m *amigo.Message) {
							var err error
							if m.Header[0] == 0 {
								err = m.ReceiveV(vec, func(err error) { bad, got = err, got+1 })
							} else {
								err = m.ReceiveStrided(strided, amigo.Strided{Count: count, Block: block, LocalStride: stride}, func(err error) { bad, got = err, got+1 })
							}
							if err != nil {
								bad, got = err, got+1
							}
						})
						if err := c.Barrier(ctx); err != nil {
							return err
						}
						if c.Rank() == 0 {
							sent := 0
							for h := byte(0); h < 2; h++ {
								if err := x.Send(amigo.EndpointOf(1), 3, []byte{h}, msg, func(err error) {
									if err != nil {
										bad = err
									}
									sent++
								}); err != nil {
									return err
								}
								if err := x.Wait(ctx, func() bool { return sent == int(h)+1 }); err != nil {
									return err
								}
							}
							return c.Barrier(ctx)
						}
						if err := x.Wait(ctx, func() bool { return got == 2 }); err != nil {
							return err
						}
						if bad != nil {
							return bad
						}
						var flat []byte
						for _, b := range vec {
							flat = append(flat, b...)
						}
						if !bytes.Equal(flat[:size], msg) || bytes.Count(flat[size:], []byte{0xEE}) != len(flat)-size {
							return fmt.Errorf("the buffers of ReceiveV do not hold the message, then their old bytes")
						}
						for i, b := range strided {
							blk, in := i/stride, i%stride
							want := byte(0xEE)
							if in < block && blk*block+in < size {
								want = msg[blk*block+in]
							}
							if b != want {
								return fmt.Errorf("byte %d of the strided buffer (block %d, at %d): %#x, want %#x", i, blk, in, b, want)
							}
						}
						return c.Barrier(ctx)
					})
				})
			}
		}
	}
}

// SendV delivers its buffers as one message, inline (gathered into the
// descriptor) or larger, over every adapter.
func TestSendV(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			lims := cl[0].Limits()
			everyRank(t, cl, func(ctx context.Context, c *amigo.Client) error {
				x := c.Context(0)
				cases := [][]int{{1, 2, 3}, {0, 5, 0}, {lims.InlineMax - 10, 4}, {lims.InlineMax, 100 << 10, 7}, {}}
				var bad error
				got := 0
				want := func(i int) []byte {
					var b []byte
					for j, n := range cases[i] {
						b = append(b, bytes.Repeat([]byte{byte(10*i + j + 1)}, n)...)
					}
					return b
				}
				x.SetDispatch(5, func(_ *amigo.Context, m *amigo.Message) {
					i := int(m.Header[0])
					buf := make([]byte, m.Size())
					check := func(err error) {
						if err == nil && !bytes.Equal(buf, want(i)) {
							err = fmt.Errorf("case %d: the message is not the concatenation (%d bytes)", i, len(buf))
						}
						if err != nil && bad == nil {
							bad = err
						}
						got++
					}
					if err := m.Receive(buf, check); err != nil {
						check(err)
					}
				})
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if c.Rank() == 0 {
					sent := 0
					for i, sizes := range cases {
						var vec [][]byte
						for j, n := range sizes {
							vec = append(vec, bytes.Repeat([]byte{byte(10*i + j + 1)}, n))
						}
						if err := x.SendV(amigo.EndpointOf(1), 5, []byte{byte(i), 9, 9}, vec, func(err error) {
							if err != nil && bad == nil {
								bad = err
							}
							sent++
						}); err != nil {
							return err
						}
					}
					if err := x.Wait(ctx, func() bool { return sent == len(cases) || bad != nil }); err != nil {
						return err
					}
				} else if err := x.Wait(ctx, func() bool { return got == len(cases) || bad != nil }); err != nil {
					return err
				}
				if bad != nil {
					return bad
				}
				return c.Barrier(ctx)
			})
		})
	}
}
