package mpi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

// A synchronous send completes only once a receive matched it, whatever
// its size, whether the receive was posted before the message arrived or
// after; rank 1 posts its receive only after rank 0 said so, so rank 0's
// Tests before that must all find the send pending.
func TestSsend(t *testing.T) {
	for _, n := range []int{0, 8, 3000, 20000} {
		for _, posted := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/posted=%v", n, posted), func(t *testing.T) {
				run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
					if w.Rank() == 1 {
						buf := make([]byte, n)
						var q mpi.Request
						if posted {
							var err error
							if q, err = w.Irecv(buf, 0, 5); err != nil {
								return err
							}
						}
						if _, err := w.Recv(ctx, nil, 0, 6); err != nil { // go
							return err
						}
						if posted {
							// Posted before the message left rank 0: it
							// matches on arrival.
							if _, err := q.Wait(ctx); err != nil {
								return err
							}
						} else if _, err := w.Recv(ctx, buf, 0, 5); err != nil {
							return err
						}
						if !bytes.Equal(buf, pattern(n, 3)) {
							return errors.New("data differ")
						}
						return w.Send(ctx, nil, 0, 7)
					}
					if posted {
						// Rank 1's receive is posted once it answers.
						if err := w.Send(ctx, nil, 1, 6); err != nil {
							return err
						}
						if err := w.Ssend(ctx, pattern(n, 3), 1, 5); err != nil {
							return err
						}
						_, err := w.Recv(ctx, nil, 1, 7)
						return err
					}
					q, err := w.Issend(pattern(n, 3), 1, 5)
					if err != nil {
						return err
					}
					for i := 0; i < 200; i++ {
						done, _, err := q.Test()
						if err != nil || done {
							return fmt.Errorf("Issend complete (%v) before its receive was posted", err)
						}
					}
					if err := w.Send(ctx, nil, 1, 6); err != nil {
						return err
					}
					if _, err := q.Wait(ctx); err != nil {
						return err
					}
					_, err = w.Recv(ctx, nil, 1, 7)
					return err
				})
			})
		}
	}
}

// Every point-to-point call with ProcNull completes at once and moves
// nothing; a receive's status says ProcNull, AnyTag, 0 bytes.
func TestProcNull(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		null := mpi.Status{Source: mpi.ProcNull, Tag: mpi.AnyTag}
		buf := []byte{42}
		if err := w.Send(ctx, buf, mpi.ProcNull, 1); err != nil {
			return err
		}
		if err := w.Ssend(ctx, buf, mpi.ProcNull, 1); err != nil {
			return err
		}
		st, err := w.Recv(ctx, buf, mpi.ProcNull, 1)
		if err != nil || st != null || buf[0] != 42 {
			return fmt.Errorf("Recv from ProcNull: %+v %v %v", st, err, buf)
		}
		sq, err := w.Isend(buf, mpi.ProcNull, 1)
		if err != nil {
			return err
		}
		rq, err := w.Irecv(buf, mpi.ProcNull, mpi.AnyTag)
		if err != nil {
			return err
		}
		sts := make([]mpi.Status, 2)
		if err := mpi.Waitall(ctx, []mpi.Request{sq, rq}, sts); err != nil || sts[1] != null {
			return fmt.Errorf("Waitall: %+v %v", sts, err)
		}
		if ok, st, err := w.Iprobe(mpi.ProcNull, 1); !ok || st != null || err != nil {
			return fmt.Errorf("Iprobe(ProcNull): %v %+v %v", ok, st, err)
		}
		if st, err := w.Probe(ctx, mpi.ProcNull, 1); st != null || err != nil {
			return fmt.Errorf("Probe(ProcNull): %+v %v", st, err)
		}
		m, st, err := w.Mprobe(ctx, mpi.ProcNull, 1)
		if err != nil || st != null {
			return fmt.Errorf("Mprobe(ProcNull): %+v %v", st, err)
		}
		if st, err := m.Recv(ctx, buf); err != nil || st != null {
			return fmt.Errorf("Mrecv of ProcNull: %+v %v", st, err)
		}
		// A shift at the edge of a non-periodic line: ranks exchange with
		// ProcNull beyond the ends.
		right, left := w.Rank()+1, w.Rank()-1
		if right == w.Size() {
			right = mpi.ProcNull
		}
		if left < 0 {
			left = mpi.ProcNull
		}
		out, in := []int32{int32(w.Rank())}, []int32{-7}
		st, err = mpi.Sendrecv(ctx, w, out, right, 3, in, left, 3)
		if err != nil {
			return err
		}
		if left == mpi.ProcNull {
			return check(in[0] == -7 && st == null, "rank 0 shift: %v %+v", in, st)
		}
		return check(in[0] == int32(left) && st.Source == left, "shift: %v %+v", in, st)
	})
}

// SendrecvReplace around a ring: each rank sends its buffer's content and
// finds its left neighbour's in the same buffer; sizes inline and
// announced.
func TestSendrecvReplace(t *testing.T) {
	run(t, 3, func(ctx context.Context, w *mpi.Comm) error {
		r, p := w.Rank(), w.Size()
		for _, n := range []int{0, 16, 4000, 50000} {
			buf := pattern(n, r)
			st, err := w.SendrecvReplace(ctx, buf, (r+1)%p, 9, (r-1+p)%p, 9)
			if err != nil {
				return err
			}
			if !bytes.Equal(buf, pattern(n, (r-1+p)%p)) || st.Count != n {
				return fmt.Errorf("n=%d: status %+v, data not the left neighbour's", n, st)
			}
		}
		return nil
	})
}

// A canceled receive completes with ErrCanceled and takes no message: the
// message sent after goes to the next receive.
func TestCancelRecv(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 1 {
			if _, err := w.Recv(ctx, nil, 0, 1); err != nil { // rank 0 canceled
				return err
			}
			return w.Send(ctx, []byte{7}, 0, 2)
		}
		buf := []byte{0}
		q, err := w.Irecv(buf, 1, 2)
		if err != nil {
			return err
		}
		if !q.Cancel() {
			return errors.New("Cancel of a posted receive reported false")
		}
		if _, err := q.Wait(ctx); !errors.Is(err, mpi.ErrCanceled) {
			return fmt.Errorf("canceled receive: %v", err)
		}
		if err := w.Send(ctx, nil, 1, 1); err != nil {
			return err
		}
		st, err := w.Recv(ctx, buf, 1, 2)
		return errors.Join(err, check(buf[0] == 7 && st.Count == 1, "after cancel: %v %+v", buf, st))
	})
}

// Testany, Testall, Testsome and Waitsome over receives of which rank 1
// sends only some, in steps rank 0 controls: before a step nothing new can
// have completed.
func TestTestAndWaitSome(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 1 {
			for _, tag := range [][]int{{2}, {0, 3}, {1}} {
				if _, err := w.Recv(ctx, nil, 0, 9); err != nil { // next step
					return err
				}
				for _, g := range tag {
					if err := w.Send(ctx, []byte{byte(g)}, 0, g); err != nil {
						return err
					}
				}
			}
			return nil
		}
		bufs := make([][]byte, 4)
		reqs := make([]mpi.Request, 4)
		for i := range reqs {
			bufs[i] = []byte{99}
			var err error
			if reqs[i], err = w.Irecv(bufs[i], 1, i); err != nil {
				return err
			}
		}
		if i, ok, _, err := mpi.Testany(reqs); ok || err != nil {
			return fmt.Errorf("Testany before any send: %d %v %v", i, ok, err)
		}
		if ok, err := mpi.Testall(reqs, nil); ok || err != nil {
			return fmt.Errorf("Testall before any send: %v %v", ok, err)
		}
		if idx, _, _, err := mpi.Testsome(reqs, nil, nil, nil); len(idx) != 0 || err != nil {
			return fmt.Errorf("Testsome before any send: %v %v", idx, err)
		}
		if err := w.Send(ctx, nil, 1, 9); err != nil {
			return err
		}
		idx, sts, _, err := mpi.Waitsome(ctx, reqs, nil, []mpi.Status{}, nil)
		if err != nil || len(idx) != 1 || idx[0] != 2 || sts[0].Tag != 2 || !reqs[2].Null() || bufs[2][0] != 2 {
			return fmt.Errorf("Waitsome after step 1: %v %+v %v", idx, sts, err)
		}
		if err := w.Send(ctx, nil, 1, 9); err != nil {
			return err
		}
		got := 0
		for got < 2 {
			idx, _, _, err := mpi.Testsome(reqs, nil, nil, nil)
			if err != nil {
				return err
			}
			for _, i := range idx {
				if i != 0 && i != 3 {
					return fmt.Errorf("step 2 completed request %d", i)
				}
			}
			got += len(idx)
		}
		if err := w.Send(ctx, nil, 1, 9); err != nil {
			return err
		}
		for {
			i, ok, st, err := mpi.Testany(reqs)
			if err != nil {
				return err
			}
			if ok {
				if i != 1 || st.Tag != 1 || bufs[1][0] != 1 {
					return fmt.Errorf("Testany after step 3: %d %+v", i, st)
				}
				break
			}
		}
		// All null now.
		if i, ok, _, _ := mpi.Testany(reqs); i != mpi.Undefined || !ok {
			return fmt.Errorf("Testany of null requests: %d %v", i, ok)
		}
		if ok, err := mpi.Testall(reqs, nil); !ok || err != nil {
			return fmt.Errorf("Testall of null requests: %v %v", ok, err)
		}
		return nil
	})
}

// GetStatus looks at a request without releasing it: pending until the
// message is sent, then complete with the receive's status, again and
// again, until Wait releases it.
func TestGetStatus(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 1 {
			if _, err := w.Recv(ctx, nil, 0, 1); err != nil {
				return err
			}
			return w.Send(ctx, []byte{1, 2, 3}, 0, 2)
		}
		buf := make([]byte, 8)
		q, err := w.Irecv(buf, 1, 2)
		if err != nil {
			return err
		}
		if done, _, err := q.GetStatus(); done || err != nil {
			return fmt.Errorf("GetStatus before the send: %v %v", done, err)
		}
		if err := w.Send(ctx, nil, 1, 1); err != nil {
			return err
		}
		var st mpi.Status
		for done := false; !done; {
			if done, st, err = q.GetStatus(); err != nil {
				return err
			}
		}
		if again, st2, _ := q.GetStatus(); !again || st2 != st || q.Null() || st.Count != 3 {
			return fmt.Errorf("GetStatus after completion: %v %+v %+v null=%v", again, st, st2, q.Null())
		}
		st3, err := q.Wait(ctx)
		return errors.Join(err, check(st3 == st && q.Null(), "Wait after GetStatus: %+v", st3))
	})
}

// Free with a receive still pending marks the communicator for freeing:
// calls on it fail, the pending receive completes when its message comes,
// and only then is the context id given back (a Dup made while the
// receive is pending takes another id, so it does not take that message).
func TestFreeWithPending(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		d, err := w.Dup(ctx)
		if err != nil {
			return err
		}
		if w.Rank() == 1 {
			if _, err := w.Recv(ctx, nil, 0, 1); err != nil { // rank 0 freed d
				return err
			}
			if err := d.Send(ctx, []byte{5}, 0, 3); err != nil {
				return err
			}
			d2, err := w.Dup(ctx)
			if err != nil {
				return err
			}
			if err := d2.Send(ctx, []byte{6}, 0, 3); err != nil {
				return err
			}
			return errors.Join(d.Free(), d2.Free())
		}
		buf := []byte{0}
		q, err := d.Irecv(buf, 1, 3)
		if err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		if err := d.Send(ctx, nil, 1, 3); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("Send on a freed communicator: %v", err)
		}
		if err := w.Send(ctx, nil, 1, 1); err != nil {
			return err
		}
		d2, err := w.Dup(ctx)
		if err != nil {
			return err
		}
		defer d2.Free()
		if _, err := q.Wait(ctx); err != nil || buf[0] != 5 {
			return fmt.Errorf("pending receive after Free: %v, got %d", err, buf[0])
		}
		got := []byte{0}
		if _, err := d2.Recv(ctx, got, 1, 3); err != nil || got[0] != 6 {
			return fmt.Errorf("receive on the new communicator: %v, got %d", err, got[0])
		}
		return nil
	})
}
