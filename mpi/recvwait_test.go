package mpi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/mpi"
)

// recvWhileWaiting runs Recv(buf, 0, tag) on rank 1 in a goroutine of its
// own, waits until that Recv waits in the engine's expected slot (the way
// of a blocking receive with neither wildcard and no posted receive that
// could take its messages), and then tells rank 0 so (tag goTag), so that
// rank 0's message arrives at a receive already waiting. It returns the
// Recv's status and error.
func recvWhileWaiting(ctx context.Context, w *mpi.Comm, buf []byte, tag int) (mpi.Status, error) {
	type result struct {
		st  mpi.Status
		err error
	}
	ch := make(chan result, 1)
	go func() {
		st, err := w.Recv(ctx, buf, 0, tag)
		ch <- result{st, err}
	}()
	for !mpi.RecvWaiting(w) {
		select {
		case r := <-ch:
			return r.st, fmt.Errorf("Recv returned (%v) before it waited", r.err)
		case <-ctx.Done():
			return mpi.Status{}, ctx.Err()
		default:
			time.Sleep(50 * time.Microsecond)
		}
	}
	if err := w.Send(ctx, nil, 0, goTag); err != nil {
		return mpi.Status{}, err
	}
	r := <-ch
	return r.st, r.err
}

const goTag = 99

// TestRecvWaiting checks the blocking Recv that waits without a request:
// each kind of message that may arrive at it (inline and fitting, inline
// and too long, announced for a fetch and fitting or too long, synchronous)
// ends it as a posted receive would end.
func TestRecvWaiting(t *testing.T) {
	cases := []struct {
		name  string
		n     int // bytes sent
		cap   int // the receive buffer
		ssend bool
	}{
		{"inline", 100, 200, false},
		{"inline-exact", 1000, 1000, false},
		{"inline-truncated", 100, 50, false},
		{"announced", 100000, 100000, false},
		{"announced-truncated", 100000, 50000, false},
		{"ssend", 100, 100, true},
		{"ssend-announced", 100000, 100000, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
				if w.Rank() == 0 {
					if _, err := w.Recv(ctx, nil, 1, goTag); err != nil {
						return err
					}
					if tc.ssend {
						if err := w.Ssend(ctx, pattern(tc.n, 3), 1, 5); err != nil {
							return err
						}
					} else if err := w.Send(ctx, pattern(tc.n, 3), 1, 5); err != nil {
						return err
					}
					// The layer goes on: the next message arrives whole.
					return w.Send(ctx, pattern(10, 4), 1, 6)
				}
				buf := make([]byte, max(tc.n, tc.cap))
				for i := range buf {
					buf[i] = 0xEE
				}
				st, err := recvWhileWaiting(ctx, w, buf[:tc.cap], 5)
				want := min(tc.n, tc.cap)
				if tc.n > tc.cap {
					var te *mpi.TruncateError
					if !errors.As(err, &te) || te.Size != tc.n || te.Cap != tc.cap {
						return fmt.Errorf("Recv: %v, want a TruncateError of %d into %d", err, tc.n, tc.cap)
					}
				} else if err != nil {
					return fmt.Errorf("Recv: %v", err)
				} else if st.Source != 0 || st.Tag != 5 {
					return fmt.Errorf("status %+v, want source 0, tag 5", st)
				}
				if st.Count != want && err == nil || !bytes.Equal(buf[:want], pattern(tc.n, 3)[:want]) {
					return fmt.Errorf("count %d, want the first %d bytes", st.Count, want)
				}
				for i, b := range buf[want:] {
					if b != 0xEE {
						return fmt.Errorf("byte %d beyond the message or the buffer written", want+i)
					}
				}
				next := make([]byte, 10)
				if st, err := w.Recv(ctx, next, 0, 6); err != nil || st.Count != 10 || !bytes.Equal(next, pattern(10, 4)) {
					return fmt.Errorf("next Recv: %v, count %d", err, st.Count)
				}
				return nil
			})
		})
	}
}

// TestRecvWaitingOrder checks MPI's matching order with a blocking Recv
// that may wait without a request: a receive posted before it that could
// take the same message takes the first one (the Recv is posted behind
// it), and one posted while it waits takes the second.
func TestRecvWaitingOrder(t *testing.T) {
	for _, first := range []string{"exact", "any-source", "any-tag", "after"} {
		t.Run(first, func(t *testing.T) {
			run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
				if w.Rank() == 0 {
					if _, err := w.Recv(ctx, nil, 1, goTag); err != nil {
						return err
					}
					for i := 1; i <= 2; i++ {
						if err := w.Send(ctx, []byte{byte(i)}, 1, 5); err != nil {
							return err
						}
					}
					return nil
				}
				early := make([]byte, 1)
				later := make([]byte, 1)
				var q mpi.Request
				var err error
				src, tag := 0, 5
				switch first {
				case "any-source":
					src = mpi.AnySource
				case "any-tag":
					tag = mpi.AnyTag
				}
				if first != "after" {
					// Posted first: takes the first message.
					if q, err = w.Irecv(early, src, tag); err != nil {
						return err
					}
					if err := w.Send(ctx, nil, 0, goTag); err != nil {
						return err
					}
					if _, err := w.Recv(ctx, later, 0, 5); err != nil {
						return err
					}
				} else {
					// The Recv waits first; an Irecv posted meanwhile
					// takes the second message.
					done := make(chan error, 1)
					go func() {
						_, err := w.Recv(ctx, early, 0, 5)
						done <- err
					}()
					for !mpi.RecvWaiting(w) {
						time.Sleep(50 * time.Microsecond)
					}
					if q, err = w.Irecv(later, 0, 5); err != nil {
						return err
					}
					if err := w.Send(ctx, nil, 0, goTag); err != nil {
						return err
					}
					if err := <-done; err != nil {
						return err
					}
					if _, err := q.Wait(ctx); err != nil {
						return err
					}
					return check(early[0] == 1 && later[0] == 2, "the waiting Recv got %d, the Irecv posted while it waited %d", early[0], later[0])
				}
				if _, err := q.Wait(ctx); err != nil {
					return err
				}
				return check(early[0] == 1 && later[0] == 2, "the Irecv posted first got %d, the Recv after it %d", early[0], later[0])
			})
		})
	}
}

// TestRecvWaitingCanceled checks that a Recv waiting without a request
// whose context ends returns the context's error and leaves the message
// that comes later to the next receive.
func TestRecvWaitingCanceled(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 0 {
			if _, err := w.Recv(ctx, nil, 1, goTag); err != nil {
				return err
			}
			return w.Send(ctx, pattern(100, 5), 1, 5)
		}
		short, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := w.Recv(short, make([]byte, 100), 0, 5)
			done <- err
		}()
		for !mpi.RecvWaiting(w) {
			time.Sleep(50 * time.Microsecond)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			return fmt.Errorf("canceled Recv: %v, want context.Canceled", err)
		}
		if mpi.RecvWaiting(w) {
			return fmt.Errorf("the canceled Recv still waits")
		}
		if err := w.Send(ctx, nil, 0, goTag); err != nil {
			return err
		}
		buf := make([]byte, 100)
		if st, err := w.Recv(ctx, buf, 0, 5); err != nil || st.Count != 100 || !bytes.Equal(buf, pattern(100, 5)) {
			return fmt.Errorf("Recv after the canceled one: %v, count %d", err, st.Count)
		}
		return nil
	})
}

// TestRecvWaitingCollective checks that collectives another goroutine of
// the rank runs while a Recv waits without a request leave that Recv's
// wait alone (the small ones otherwise wait for their own messages in the
// same place), and complete.
func TestRecvWaitingCollective(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		small := []int64{int64(w.Rank() + 1)}
		sum := []int64{0}
		b := make([]byte, 8)
		if w.Rank() == 0 {
			if _, err := w.Recv(ctx, nil, 1, goTag); err != nil {
				return err
			}
			copy(b, "collects")
			if err := mpi.Bcast(ctx, w, b, 0); err != nil {
				return err
			}
			if err := mpi.Allreduce(ctx, w, small, sum, mpi.Sum); err != nil {
				return err
			}
			return w.Send(ctx, pattern(100, 6), 1, 5)
		}
		done := make(chan error, 1)
		buf := make([]byte, 100)
		go func() {
			_, err := w.Recv(ctx, buf, 0, 5)
			done <- err
		}()
		for !mpi.RecvWaiting(w) {
			time.Sleep(50 * time.Microsecond)
		}
		if err := w.Send(ctx, nil, 0, goTag); err != nil {
			return err
		}
		if err := mpi.Bcast(ctx, w, b, 0); err != nil {
			return err
		}
		if err := mpi.Allreduce(ctx, w, small, sum, mpi.Sum); err != nil {
			return err
		}
		if string(b) != "collects" || sum[0] != 3 {
			return fmt.Errorf("Bcast %q, Allreduce %d while a Recv waited", b, sum[0])
		}
		if err := <-done; err != nil || !bytes.Equal(buf, pattern(100, 6)) {
			return fmt.Errorf("the waiting Recv: %v", err)
		}
		return nil
	})
}
