package mpi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>9)
	}
	return b
}

func TestSendRecvSizes(t *testing.T) {
	sizes := []int{0, 1, 100, 176, 177, 1000, 8176, 8177, 9000, 1 << 16, 1<<20 + 3}
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		for i, n := range sizes {
			if w.Rank() == 0 {
				if err := w.Send(ctx, pattern(n, i), 1, i); err != nil {
					return err
				}
				continue
			}
			buf := make([]byte, n+5)
			st, err := w.Recv(ctx, buf, 0, i)
			if err != nil {
				return fmt.Errorf("size %d: %w", n, err)
			}
			if st.Source != 0 || st.Tag != i || st.Count != n {
				return fmt.Errorf("size %d: status %+v", n, st)
			}
			if !bytes.Equal(buf[:n], pattern(n, i)) {
				return fmt.Errorf("size %d: data differ", n)
			}
		}
		return nil
	})
}

func TestTruncate(t *testing.T) {
	for _, n := range []int{100, 5000, 100000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
				if w.Rank() == 0 {
					// A truncation is the receiver's error only: the
					// send completes, whatever the size.
					return w.Send(ctx, pattern(n, 1), 1, 7)
				}
				buf := make([]byte, n)
				guard := buf[n/2:]
				for i := range guard {
					guard[i] = 0xEE
				}
				st, err := w.Recv(ctx, buf[:n/2], 0, 7)
				var te *mpi.TruncateError
				if !errors.As(err, &te) || !errors.Is(err, mpi.ErrTruncate) || te.Size != n || te.Cap != n/2 {
					return fmt.Errorf("Recv: %v, want a TruncateError of %d into %d", err, n, n/2)
				}
				for i, b := range guard {
					if b != 0xEE {
						return fmt.Errorf("byte %d beyond the buffer overwritten", n/2+i)
					}
				}
				if st.Count != n/2 || !bytes.Equal(buf[:n/2], pattern(n, 1)[:n/2]) {
					return fmt.Errorf("truncated receive: count %d, want the first %d bytes", st.Count, n/2)
				}
				return nil
			})
		})
	}
}
