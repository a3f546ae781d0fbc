package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/mpi"
)

// A broadcast whose root and receivers disagree on the count fails every
// receiver, blocking or not, small or large, either way round, and leaves
// the root's send complete; the next broadcast works. (Two ranks for the
// large counts, where one message goes from the root to its receiver;
// three for the small, which go to each receiver directly.)
func TestBcastMismatchAnySize(t *testing.T) {
	for _, c := range []struct {
		p, root, other int
	}{
		{2, 5000, 10000}, {2, 10000, 5000}, {2, 1, 10}, {2, 10, 1},
		{2, 200000, 100000}, {2, 100000, 200000}, {3, 1, 10}, {3, 10, 1}, {3, 300, 200},
	} {
		for _, blocking := range []bool{true, false} {
			t.Run(fmt.Sprintf("p=%d/%d-to-%d/blocking=%v", c.p, c.root, c.other, blocking), func(t *testing.T) {
				run(t, c.p, func(ctx context.Context, w *mpi.Comm) error {
					n := c.other
					if w.Rank() == 0 {
						n = c.root
					}
					buf := make([]int32, n)
					var err error
					if blocking {
						err = mpi.Bcast(ctx, w, buf, 0)
					} else {
						var q mpi.Request
						if q, err = mpi.Ibcast(w, buf, 0); err == nil {
							_, err = q.Wait(ctx)
						}
					}
					switch {
					case w.Rank() == 0 && err != nil:
						return fmt.Errorf("root: %w", err)
					case w.Rank() != 0 && !errors.Is(err, mpi.ErrCount) && !errors.Is(err, mpi.ErrTruncate):
						return fmt.Errorf("rank %d: %v, want ErrCount or ErrTruncate", w.Rank(), err)
					}
					got := []int64{0, 0}
					if w.Rank() == 0 {
						got = []int64{4, 5}
					}
					if err := mpi.Bcast(ctx, w, got, 0); err != nil {
						return err
					}
					return check(got[0] == 4 && got[1] == 5, "after the mismatch: %v", got)
				})
			})
		}
	}
}

// Calls on a freed communicator, with ranks out of range, negative or
// mismatched counts and arrays of the wrong length return errors, on
// every chapter's calls.
func TestErrorsAtTheEdges(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		d, err := w.Dup(ctx)
		if err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		buf := make([]int32, 4)
		for name, err := range map[string]error{
			"Send":      d.Send(ctx, nil, 0, 0),
			"Ssend":     d.Ssend(ctx, nil, 0, 0),
			"Barrier":   d.Barrier(ctx),
			"Bcast":     mpi.Bcast(ctx, d, buf, 0),
			"Allreduce": mpi.Allreduce(ctx, d, buf, buf, mpi.Sum),
			"Free":      d.Free(),
			"Dup":       func() error { _, err := d.Dup(ctx); return err }(),
			"Group":     func() error { _, err := d.Group(); return err }(),
			"SendInit":  func() error { _, err := d.SendInit(nil, 0, 0); return err }(),
			"Improbe":   func() error { _, _, _, err := d.Improbe(0, 0); return err }(),
			"Idup":      func() error { _, _, err := d.Idup(); return err }(),
		} {
			if !errors.Is(err, mpi.ErrComm) {
				return fmt.Errorf("%s on a freed communicator: %v, want ErrComm", name, err)
			}
		}
		for name, err := range map[string]error{
			"Ssend rank 2":    w.Ssend(ctx, nil, 2, 0),
			"Issend rank -3":  func() error { _, err := w.Issend(nil, -3, 0); return err }(),
			"RecvInit rank 5": func() error { _, err := w.RecvInit(nil, 5, 0); return err }(),
			"Mprobe rank 2":   func() error { _, _, err := w.Mprobe(ctx, 2, 0); return err }(),
			"Bcast root 2":    mpi.Bcast(ctx, w, buf, 2),
		} {
			if !errors.Is(err, mpi.ErrRank) {
				return fmt.Errorf("%s: %v, want ErrRank", name, err)
			}
		}
		// The counts of Gatherv matter at its root only: each rank is
		// its own root here, and fails before any message leaves.
		me := w.Rank()
		for name, err := range map[string]error{
			"Gatherv counts":   mpi.Gatherv(ctx, w, buf, make([]int32, 8), []int{4}, []int{0, 4}, me),
			"Gatherv negative": mpi.Gatherv(ctx, w, buf, make([]int32, 8), []int{-1, 4}, []int{0, 4}, me),
			"Statuses":         mpi.Waitall(ctx, make([]mpi.Request, 3), make([]mpi.Status, 2)),
			"DimsCreate":       mpi.DimsCreate(-4, []int{0}),
			"CartCreate":       func() error { _, err := w.CartCreate(ctx, []int{3}, []bool{false}, false); return err }(),
		} {
			if !errors.Is(err, mpi.ErrCount) {
				return fmt.Errorf("%s: %v, want ErrCount", name, err)
			}
		}
		var q mpi.Request
		if err := q.Start(); !errors.Is(err, mpi.ErrRequest) {
			return fmt.Errorf("Start of the null request: %v", err)
		}
		var m mpi.Message
		if _, err := m.Recv(ctx, nil); !errors.Is(err, mpi.ErrRequest) {
			return fmt.Errorf("Recv of no message: %v", err)
		}
		// The failed calls left the ranks in step.
		sum := []int64{0}
		if err := mpi.Allreduce(ctx, w, []int64{int64(me + 1)}, sum, mpi.Sum); err != nil {
			return err
		}
		return check(sum[0] == 3, "Allreduce after the errors: %d", sum[0])
	})
}

// A call after the world was freed fails with ErrClosed, which is also
// amigo's ErrClosed, and says so once.
func TestErrClosedWrapsAmigo(t *testing.T) {
	amigotest.Run(t, 2, amigotest.Options{Timeout: time.Minute}, func(r *amigotest.Rank) error {
		w, err := mpi.World(r.Deadline, r.Ctx, nil)
		if err != nil {
			return err
		}
		if err := w.Barrier(r.Deadline); err != nil {
			return err
		}
		// A second communicator outlives the world's Free.
		d, err := w.Dup(r.Deadline)
		if err != nil {
			return err
		}
		if err := mpi.Finalize(r.Deadline, w); err != nil {
			return err
		}
		err = d.Barrier(r.Deadline)
		if !errors.Is(err, mpi.ErrClosed) || !errors.Is(err, amigo.ErrClosed) {
			return fmt.Errorf("Barrier after Finalize: %v, want mpi.ErrClosed wrapping amigo.ErrClosed", err)
		}
		if got := err.Error(); got != "mpi: closed" {
			return fmt.Errorf("Barrier after Finalize says %q", got)
		}
		return nil
	})
}

// Every error of the package names it once, at the front, even when it
// wraps another of the package's errors (Dup's agreement on a context id
// fails in the Allreduce under it when its context ends), and still
// matches what it wraps.
func TestErrorPrefixOnce(t *testing.T) {
	run(t, 4, func(ctx context.Context, w *mpi.Comm) error {
		half, err := w.Split(ctx, w.Rank()%2, 0)
		if err != nil {
			return err
		}
		defer half.Free()
		leader := 1 - w.Rank()%2 // the other half's first rank in w
		ic, err := mpi.IntercommCreate(ctx, half, 0, w, leader, 5)
		if err != nil {
			return err
		}
		if err := ic.Free(); err != nil {
			return err
		}
		var errs []error
		errs = append(errs, mpi.InterBcast(ctx, ic, []int32{1}, mpi.ProcNull))
		errs = append(errs, ic.Barrier(ctx))
		_, err = w.Split(ctx, -5, 0)
		errs = append(errs, err)
		errs = append(errs, w.Send(ctx, nil, 9, 0))
		var dupErr error
		if w.Rank() == 0 {
			// Alone in a collective whose context has ended: it fails
			// in the Allreduce under the agreement.
			done, cancel := context.WithCancel(ctx)
			cancel()
			_, dupErr = w.Dup(done)
			errs = append(errs, dupErr)
		}
		for i, err := range errs {
			if err == nil {
				return fmt.Errorf("call %d: no error", i)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "mpi: ") || strings.Count(msg, "mpi: ") != 1 {
				return fmt.Errorf("call %d: %q does not name the package once, at the front", i, msg)
			}
		}
		if !errors.Is(errs[0], mpi.ErrComm) || !errors.Is(errs[1], mpi.ErrComm) {
			return fmt.Errorf("the errors of a freed intercommunicator do not wrap ErrComm: %v; %v", errs[0], errs[1])
		}
		if w.Rank() == 0 && !errors.Is(dupErr, context.Canceled) {
			return fmt.Errorf("Dup with an ended context: %v, want context.Canceled wrapped", dupErr)
		}
		return nil
	})
}
