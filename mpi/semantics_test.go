package mpi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// mixedSize returns the size of message i in a stream that mixes messages
// sent by SendImmediate, inline Sends and announced ones (rendezvous).
func mixedSize(i int) int {
	switch i % 5 {
	case 0:
		return 0
	case 1:
		return 8
	case 2:
		return 3000
	case 3:
		return 20000 + i
	}
	return 150
}

// Messages from one sender with one tag are received in the order they were
// sent, whatever their sizes and whether the receives were posted before or
// after the messages arrived; the same holds for wildcard receives.
func TestNonOvertaking(t *testing.T) {
	for _, mode := range []string{"posted first", "unexpected first", "wildcards"} {
		t.Run(mode, func(t *testing.T) {
			run(t, 2, nonOvertaking(mode))
		})
	}
}

// Wildcard receives take the earliest message that fits, and report its
// source and tag; a specific receive posted before a wildcard one gets the
// message both fit.
func TestWildcards(t *testing.T) {
	run(t, 4, wildcards)
}

// Probe reports a message's size before it is received, so that the
// receiver can size the buffer.
func TestProbe(t *testing.T) {
	run(t, 3, probe)
}

// A receive buffer too small is an error and nothing beyond it is written,
// whether the receive was posted before the message arrived or after, and
// whether the message travelled inline or was announced.
func TestTruncation(t *testing.T) {
	for _, n := range []int{100, 5000, 100000} {
		for _, order := range []string{"posted", "unexpected"} {
			t.Run(fmt.Sprintf("%d/%s", n, order), func(t *testing.T) {
				run(t, 2, truncation(n, order))
			})
		}
	}
}

// A rank sends to itself, small and large, blocking and not.
func TestSelf(t *testing.T) {
	run(t, 2, self)
}

// Communicators isolate traffic: the same source and tag on a duplicate
// communicator, on split ones, and in collectives never match a receive of
// another communicator.
func TestCommIsolation(t *testing.T) {
	run(t, 6, commIsolation)
}

// Thousands of nonblocking sends and receives outstanding at once, posted
// in different random orders on the two sides (only the order within one
// (peer, tag) stream is kept, which MPI's ordering rule makes meaningful),
// with mixed sizes and tags, among several ranks.
func TestManyOutstanding(t *testing.T) {
	run(t, 3, manyOutstanding)
}

// Misuse is reported as an error, never a panic.
func TestBadInput(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		buf := make([]byte, 8)
		checks := []struct {
			name string
			err  error
			want error
		}{
			{"send to rank 2", w.Send(ctx, buf, 2, 0), mpi.ErrRank},
			{"send to AnySource", w.Send(ctx, buf, mpi.AnySource, 0), mpi.ErrRank},
			{"send with AnyTag", w.Send(ctx, buf, 1, mpi.AnyTag), mpi.ErrTag},
			{"send with tag -5", w.Send(ctx, buf, 1, -5), mpi.ErrTag},
			{"Bcast root 9", mpi.Bcast(ctx, w, buf, 9), mpi.ErrRank},
			{"Band on floats", mpi.Allreduce(ctx, w, []float64{1}, []float64{0}, mpi.Band), mpi.ErrOp},
			{"Max on complex", mpi.Allreduce(ctx, w, []complex128{1}, []complex128{0}, mpi.Max), mpi.ErrOp},
			{"user op of another type", mpi.Allreduce(ctx, w, []int64{1}, []int64{0}, MatMul), mpi.ErrOp},
			{"zero op", mpi.Allreduce(ctx, w, []int64{1}, []int64{0}, mpi.Op{}), mpi.ErrOp},
			{"lengths differ", mpi.Allreduce(ctx, w, []int64{1, 2}, []int64{0}, mpi.Sum), mpi.ErrCount},
			{"overlap", mpi.Allreduce(ctx, w, buf[:4], buf[2:6], mpi.Bor), mpi.ErrCount},
			{"Allgather short", mpi.Allgather(ctx, w, []int32{1, 2}, []int32{0, 0, 0}), mpi.ErrCount},
			{"Alltoallv blocks", mpi.Alltoallv(ctx, w, buf, []int{4, 5}, []int{0, 4}, buf[:0], []int{0, 0}, []int{0, 0}), mpi.ErrCount},
			{"Gatherv at root", mpi.Gatherv(ctx, w, buf, make([]byte, 4), []int{8, 8}, []int{0, 8}, w.Rank()), mpi.ErrCount},
			{"ReduceScatter counts", mpi.ReduceScatter(ctx, w, buf, buf[:1], []int{1}, mpi.Sum), mpi.ErrCount},
			{"Split color", func() error { _, err := w.Split(ctx, -7, 0); return err }(), mpi.ErrCount},
		}
		var nilComm *mpi.Comm
		checks = append(checks, struct {
			name string
			err  error
			want error
		}{"nil comm", nilComm.Send(ctx, buf, 0, 0), mpi.ErrComm})
		for _, c := range checks {
			if !errors.Is(c.err, c.want) {
				return fmt.Errorf("%s: %v, want %v", c.name, c.err, c.want)
			}
		}
		// A request handle used after Wait released it.
		q, err := w.Isend(buf, w.Rank(), 3)
		if err != nil {
			return err
		}
		copyOf := q
		if _, err := w.Recv(ctx, buf, w.Rank(), 3); err != nil {
			return err
		}
		if _, err := q.Wait(ctx); err != nil {
			return err
		}
		if !q.Null() {
			return errors.New("Wait left the handle non-null")
		}
		if _, err := q.Wait(ctx); err != nil {
			return fmt.Errorf("Wait on a null request: %v", err)
		}
		if _, err := copyOf.Wait(ctx); !errors.Is(err, mpi.ErrRequest) {
			return fmt.Errorf("Wait on a stale copy: %v, want ErrRequest", err)
		}
		// A freed communicator.
		d, err := w.Dup(ctx)
		if err != nil {
			return err
		}
		if err := d.Free(); err != nil {
			return err
		}
		if err := d.Barrier(ctx); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("Barrier on a freed communicator: %v", err)
		}
		return w.Barrier(ctx)
	})
}

// A wait on a peer that never answers ends with the context; a peer that
// goes away fails the operations in flight with it instead of hanging.
func TestBoundedWaits(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 1 {
			if err := w.Barrier(ctx); err != nil {
				return err
			}
			// Leave: close this rank's client with a large message from
			// rank 0 announced and not received.
			for w.Stats().Unexpected == 0 {
				if _, _, err := w.Iprobe(0, 1); err != nil {
					return err
				}
			}
			return w.Context().Client().Close()
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := w.Recv(short, make([]byte, 4), 1, 99); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("Recv from a silent rank: %v, want the deadline", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			return fmt.Errorf("Recv took %v to give up", d)
		}
		if err := w.Barrier(ctx); err != nil {
			return err
		}
		err := w.Send(ctx, make([]byte, 1<<20), 1, 1)
		var pe *amigo.PeerError
		if err == nil || !errors.As(err, &pe) {
			return fmt.Errorf("Send to a rank that closed: %v, want a PeerError", err)
		}
		// The collective on a world with a closed rank fails or times out,
		// but returns.
		short2, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel2()
		if err := w.Barrier(short2); err == nil {
			return errors.New("Barrier with a closed rank succeeded")
		}
		return nil
	})
}

// Nonblocking collectives overlap with each other and with point-to-point
// traffic.
func TestNonblockingCollectives(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprint(p), func(t *testing.T) {
			run(t, p, nonblockingCollectives)
		})
	}
}

// Every predefined op on every element type, against a plain loop.
func TestOps(t *testing.T) {
	run(t, 3, ops)
}

type realNum interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

func opsOn[T realNum](ctx context.Context, w *mpi.Comm, r int, integer bool) error {
	const n = 9
	val := func(rank, i int) T { return T((rank*5 + i*3) % 7) }
	ops := []mpi.Op{mpi.Sum, mpi.Prod, mpi.Min, mpi.Max, mpi.Land, mpi.Lor}
	if integer {
		ops = append(ops, mpi.Band, mpi.Bor, mpi.Bxor)
	}
	for _, op := range ops {
		buf := make([]T, n)
		for i := range buf {
			buf[i] = val(r, i)
		}
		if err := mpi.Allreduce(ctx, w, nil, buf, op); err != nil {
			return fmt.Errorf("%v on %T: %w", op, buf[0], err)
		}
		for i := range buf {
			want := val(0, i)
			for q := 1; q < w.Size(); q++ {
				want = apply(op, want, val(q, i))
			}
			if buf[i] != want {
				return fmt.Errorf("%v on %T: element %d is %v, want %v", op, buf[0], i, buf[i], want)
			}
		}
	}
	return nil
}

func apply[T realNum](op mpi.Op, a, b T) T {
	truth := func(x bool) T {
		if x {
			return 1
		}
		return 0
	}
	switch op.String() {
	case "Sum":
		return a + b
	case "Prod":
		return a * b
	case "Min":
		return min(a, b)
	case "Max":
		return max(a, b)
	case "Land":
		return truth(a != 0 && b != 0)
	case "Lor":
		return truth(a != 0 || b != 0)
	case "Band":
		return T(uint64(a) & uint64(b))
	case "Bor":
		return T(uint64(a) | uint64(b))
	}
	return T(uint64(a) ^ uint64(b))
}

// A rank that completes a collective and then stops calling the layer (it
// computes, or leaves) must not hold back the messages the others still
// need: whatever it posted has left by the time the collective returns.
func TestLeaveAfterCollective(t *testing.T) {
	for _, p := range []int{2, 3, 4, 7} {
		for iter := 0; iter < 20; iter++ {
			clients, err := amigo.NewLocal(p, amigo.Config{SpinIterations: 50, YieldIterations: 50})
			if err != nil {
				t.Fatal(err)
			}
			errs := make(chan error, p)
			for _, cl := range clients {
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					w, err := mpi.World(ctx, cl.Context(0), nil)
					if err != nil {
						errs <- err
						return
					}
					v := []int32{int32(w.Rank())}
					if err := mpi.Allreduce(ctx, w, nil, v, mpi.Sum); err != nil {
						errs <- err
						return
					}
					// The last rank to get here stops advancing at once.
					errs <- w.Barrier(ctx)
				}()
			}
			for range clients {
				if err := <-errs; err != nil {
					t.Fatalf("%d ranks, iteration %d: %v", p, iter, err)
				}
			}
			for _, cl := range clients {
				cl.Close()
			}
		}
	}
}

func nonOvertaking(mode string) func(ctx context.Context, w *mpi.Comm) error {
	const n = 200
	return func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 0 {
			if mode == "unexpected first" {
				// Let the receiver post nothing until all arrived.
				if err := w.Barrier(ctx); err != nil {
					return err
				}
			}
			reqs := make([]mpi.Request, n)
			for i := range reqs {
				var err error
				if reqs[i], err = w.Isend(pattern(mixedSize(i), i), 1, 5); err != nil {
					return err
				}
			}
			if err := mpi.Waitall(ctx, reqs, nil); err != nil {
				return err
			}
			if mode != "unexpected first" {
				return w.Barrier(ctx)
			}
			return nil
		}
		src, tag := 0, 5
		if mode == "wildcards" {
			src, tag = mpi.AnySource, mpi.AnyTag
		}
		if mode == "unexpected first" {
			if err := w.Barrier(ctx); err != nil {
				return err
			}
			// Wait until everything is queued unexpected (small) or
			// announced (large).
			for w.Stats().Unexpected < n {
				if _, _, err := w.Iprobe(0, 99); err != nil {
					return err
				}
			}
		}
		bufs := make([][]byte, n)
		reqs := make([]mpi.Request, n)
		for i := range reqs {
			bufs[i] = make([]byte, 30000)
			var err error
			if reqs[i], err = w.Irecv(bufs[i], src, tag); err != nil {
				return err
			}
		}
		sts := make([]mpi.Status, n)
		if err := mpi.Waitall(ctx, reqs, sts); err != nil {
			return err
		}
		for i := range reqs {
			size := mixedSize(i)
			if sts[i].Count != size || sts[i].Source != 0 || sts[i].Tag != 5 {
				return fmt.Errorf("message %d: status %+v, want %d bytes from 0 tag 5", i, sts[i], size)
			}
			if !bytes.Equal(bufs[i][:size], pattern(size, i)) {
				return fmt.Errorf("message %d: wrong data (overtaken?)", i)
			}
		}
		if mode != "unexpected first" {
			return w.Barrier(ctx)
		}
		// The small messages' data was held until its receive and is
		// all handed over now.
		if s := w.Stats(); s.UnexpectedBytes != 0 || s.UnexpectedPeak == 0 {
			return fmt.Errorf("unexpected data held %d bytes, peaked at %d: want 0 held after a nonzero peak", s.UnexpectedBytes, s.UnexpectedPeak)
		}
		return nil
	}
}

func wildcards(ctx context.Context, w *mpi.Comm) error {
	r := w.Rank()
	if r != 0 {
		// Rank r sends tags 10r and 10r+1, then one more on tag 7.
		for _, tag := range []int{10 * r, 10*r + 1, 7} {
			if err := mpi.Send(ctx, w, []int64{int64(r), int64(tag)}, 0, tag); err != nil {
				return err
			}
		}
		return w.Barrier(ctx)
	}
	buf := make([]int64, 2)
	seen := map[[2]int]bool{}
	// A specific receive posted first, then a wildcard one: the message
	// from rank 2 tag 20 must go to the specific one.
	spec, err := mpi.Irecv(w, make([]int64, 2), 2, 20)
	if err != nil {
		return err
	}
	wild, err := mpi.Irecv(w, make([]int64, 2), mpi.AnySource, 20)
	if err != nil {
		return err
	}
	st, err := spec.Wait(ctx)
	if err != nil || st.Source != 2 || st.Tag != 20 {
		return fmt.Errorf("specific receive: %+v %v", st, err)
	}
	seen[[2]int{2, 20}] = true
	if ok, _, _ := wild.Test(); ok {
		return errors.New("wildcard receive on tag 20 matched, but only rank 2 sends tag 20")
	}
	if !wild.Cancel() {
		return errors.New("Cancel of an unmatched receive failed")
	}
	if _, err := wild.Wait(ctx); !errors.Is(err, mpi.ErrCanceled) {
		return fmt.Errorf("canceled receive: %v", err)
	}
	// Any source, any tag: 3*3-1 more messages.
	for len(seen) < 3*3 {
		st, err := mpi.Recv(ctx, w, buf, mpi.AnySource, mpi.AnyTag)
		if err != nil {
			return err
		}
		if int(buf[0]) != st.Source || int(buf[1]) != st.Tag || mpi.Elements[int64](st) != 2 {
			return fmt.Errorf("status %+v for message %v", st, buf)
		}
		key := [2]int{st.Source, st.Tag}
		if seen[key] {
			return fmt.Errorf("message %v twice", key)
		}
		// Per source, tag 7 comes last: non-overtaking.
		if st.Tag == 7 && (!seen[[2]int{st.Source, 10 * st.Source}] || !seen[[2]int{st.Source, 10*st.Source + 1}]) {
			return fmt.Errorf("rank %d's last message overtook its earlier ones", st.Source)
		}
		seen[key] = true
	}
	return w.Barrier(ctx)
}

func probe(ctx context.Context, w *mpi.Comm) error {
	sizes := []int{0, 13, 5000, 100000}
	r := w.Rank()
	if r != 0 {
		for i, n := range sizes {
			if err := w.Send(ctx, pattern(n+r, i), 0, 100+i); err != nil {
				return err
			}
		}
		return nil
	}
	got := 0
	for got < 2*len(sizes) {
		st, err := w.Probe(ctx, mpi.AnySource, mpi.AnyTag)
		if err != nil {
			return err
		}
		ok, st2, err := w.Iprobe(st.Source, st.Tag)
		if err != nil || !ok || st2 != st {
			return fmt.Errorf("Iprobe after Probe: %v %+v %v", ok, st2, err)
		}
		buf := make([]byte, st.Count)
		rst, err := w.Recv(ctx, buf, st.Source, st.Tag)
		if err != nil {
			return err
		}
		i := st.Tag - 100
		if rst != st || !bytes.Equal(buf, pattern(sizes[i]+st.Source, i)) {
			return fmt.Errorf("received %+v after probing %+v", rst, st)
		}
		got++
	}
	if ok, _, err := w.Iprobe(mpi.AnySource, mpi.AnyTag); ok || err != nil {
		return fmt.Errorf("Iprobe with nothing pending: %v %v", ok, err)
	}
	return nil
}

func truncation(n int, order string) func(ctx context.Context, w *mpi.Comm) error {
	return func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() == 0 {
			if order == "posted" {
				if err := w.Barrier(ctx); err != nil {
					return err
				}
			}
			q, err := w.Isend(pattern(n, 1), 1, 7)
			if err != nil {
				return err
			}
			if order == "unexpected" {
				if err := w.Barrier(ctx); err != nil {
					return err
				}
			}
			// A truncation is the receiver's error only: the send
			// completes, whatever the size.
			if _, err = q.Wait(ctx); err != nil {
				return fmt.Errorf("send of a truncated message: %v", err)
			}
			// The layer goes on working: the next message is
			// received whole.
			return w.Send(ctx, pattern(10, 2), 1, 8)
		}
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = 0xEE
		}
		var q mpi.Request
		var err error
		if order == "posted" {
			if q, err = w.Irecv(buf[:n/2], 0, 7); err != nil {
				return err
			}
			if err := w.Barrier(ctx); err != nil {
				return err
			}
		} else {
			if err := w.Barrier(ctx); err != nil {
				return err
			}
			if _, err := w.Probe(ctx, 0, 7); err != nil {
				return err
			}
			if q, err = w.Irecv(buf[:n/2], 0, 7); err != nil {
				return err
			}
		}
		st, err := q.Wait(ctx)
		var te *mpi.TruncateError
		if !errors.As(err, &te) || !errors.Is(err, mpi.ErrTruncate) || te.Size != n || te.Cap != n/2 {
			return fmt.Errorf("Recv: %v, want a TruncateError of %d into %d", err, n, n/2)
		}
		if st.Count != n/2 || !bytes.Equal(buf[:n/2], pattern(n, 1)[:n/2]) {
			return fmt.Errorf("truncated receive: count %d, want the first %d bytes", st.Count, n/2)
		}
		for i, b := range buf[n/2:] {
			if b != 0xEE {
				return fmt.Errorf("byte %d beyond the buffer overwritten", n/2+i)
			}
		}
		next := make([]byte, 10)
		if _, err := w.Recv(ctx, next, 0, 8); err != nil || !bytes.Equal(next, pattern(10, 2)) {
			return fmt.Errorf("next message after a truncation: %v", err)
		}
		return nil
	}
}

func self(ctx context.Context, w *mpi.Comm) error {
	me := w.Rank()
	for i, n := range []int{0, 5, 5000, 300000} {
		q, err := w.Isend(pattern(n, i), me, i)
		if err != nil {
			return err
		}
		buf := make([]byte, n)
		st, err := w.Recv(ctx, buf, me, i)
		if err != nil {
			return err
		}
		if st.Source != me || st.Count != n || !bytes.Equal(buf, pattern(n, i)) {
			return fmt.Errorf("self message of %d: %+v", n, st)
		}
		if _, err := q.Wait(ctx); err != nil {
			return err
		}
	}
	// Blocking send of a small message to itself returns before the
	// receive is posted (it is copied).
	if err := w.Send(ctx, []byte("hi"), me, 50); err != nil {
		return err
	}
	buf := make([]byte, 2)
	if _, err := w.Recv(ctx, buf, me, 50); err != nil || string(buf) != "hi" {
		return fmt.Errorf("self: %q %v", buf, err)
	}
	// A one-rank communicator's collectives.
	solo, err := w.Split(ctx, me, 0)
	if err != nil {
		return err
	}
	defer solo.Free()
	v := []int64{3, 4}
	if err := mpi.Allreduce(ctx, solo, nil, v, mpi.Prod); err != nil || v[0] != 3 || v[1] != 4 {
		return fmt.Errorf("one-rank Allreduce: %v %v", v, err)
	}
	return solo.Barrier(ctx)
}

func commIsolation(ctx context.Context, w *mpi.Comm) error {
	r := w.Rank()
	dup, err := w.Dup(ctx)
	if err != nil {
		return err
	}
	defer dup.Free()
	half, err := w.Split(ctx, r%2, -r) // reversed order within a half
	if err != nil {
		return err
	}
	defer half.Free()
	if half.Size() != 3 || half.Rank() != 2-r/2 {
		return fmt.Errorf("Split: rank %d of %d, want %d of 3", half.Rank(), half.Size(), 2-r/2)
	}
	if half.WorldRank(half.Rank()) != r {
		return fmt.Errorf("WorldRank(%d) = %d, want %d", half.Rank(), half.WorldRank(half.Rank()), r)
	}
	none, err := w.Split(ctx, map[bool]int{true: mpi.Undefined, false: 1}[r == 0], 0)
	if err != nil || (r == 0) != (none == nil) {
		return fmt.Errorf("Split with Undefined: %v %v", none, err)
	}
	if none != nil {
		defer none.Free()
	}
	// Everyone sends to its right neighbour, same tag, on each
	// communicator, with different payloads; and receives in the
	// reverse order of communicators.
	right, left := (r+1)%6, (r+5)%6
	hr, hl := (half.Rank()+1)%3, (half.Rank()+2)%3
	var reqs []mpi.Request
	for _, m := range []struct {
		c    *mpi.Comm
		dest int
		val  int64
	}{{w, right, 1}, {dup, right, 2}, {half, hr, 3}} {
		q, err := mpi.Isend(m.c, []int64{m.val*100 + int64(r)}, m.dest, 0)
		if err != nil {
			return err
		}
		reqs = append(reqs, q)
	}
	// A collective on dup while point-to-point messages are pending.
	sum := []int64{int64(r)}
	if err := mpi.Allreduce(ctx, dup, nil, sum, mpi.Sum); err != nil || sum[0] != 15 {
		return fmt.Errorf("Allreduce on dup: %v %v", sum, err)
	}
	for _, m := range []struct {
		c    *mpi.Comm
		src  int
		want int64
	}{{half, hl, 300 + int64(half.WorldRank(hl))}, {dup, left, 200 + int64(left)}, {w, left, 100 + int64(left)}} {
		got := []int64{0}
		if _, err := mpi.Recv(ctx, m.c, got, mpi.AnySource, mpi.AnyTag); err != nil {
			return err
		}
		if got[0] != m.want {
			return fmt.Errorf("received %d, want %d: traffic crossed communicators", got[0], m.want)
		}
	}
	if err := mpi.Waitall(ctx, reqs, nil); err != nil {
		return err
	}
	// Collectives on the two halves at once, and on the world.
	hs := []int64{int64(r)}
	if err := mpi.Allreduce(ctx, half, nil, hs, mpi.Sum); err != nil {
		return err
	}
	if want := int64(map[int]int{0: 0 + 2 + 4, 1: 1 + 3 + 5}[r%2]); hs[0] != want {
		return fmt.Errorf("Allreduce on a half: %d, want %d", hs[0], want)
	}
	return w.Barrier(ctx)
}

func manyOutstanding(ctx context.Context, w *mpi.Comm) error {
	const per = 1500 // messages each rank sends each other rank
	const tags = 17
	p, r := w.Size(), w.Rank()
	rng := rand.New(rand.NewPCG(uint64(r), 7))
	size := func(from, to, i int) int {
		if i%97 == 0 {
			return 10000 + i // announced
		}
		return (from*31 + to*7 + i) % 300
	}
	// order returns the messages (peer, i) exchanged with the other
	// ranks in a random interleaving of the streams (peer, i%tags),
	// each stream in increasing i.
	order := func() [][2]int {
		type stream struct{ peer, next int }
		var ss []*stream
		for q := 0; q < p; q++ {
			for tag := 0; tag < tags && q != r; tag++ {
				ss = append(ss, &stream{q, tag})
			}
		}
		var out [][2]int
		for len(ss) > 0 {
			k := rng.IntN(len(ss))
			st := ss[k]
			out = append(out, [2]int{st.peer, st.next})
			if st.next += tags; st.next >= per {
				ss[k] = ss[len(ss)-1]
				ss = ss[:len(ss)-1]
			}
		}
		return out
	}
	sendOrder, recvOrder := order(), order()
	recvs := make([]mpi.Request, 0, len(recvOrder))
	sends := make([]mpi.Request, 0, len(sendOrder))
	rbufs := make([][]byte, len(recvOrder))
	for k := range recvOrder {
		o := recvOrder[k]
		rbufs[k] = make([]byte, size(o[0], r, o[1]))
		q, err := w.Irecv(rbufs[k], o[0], o[1]%tags)
		if err != nil {
			return err
		}
		recvs = append(recvs, q)
		s := sendOrder[k]
		if q, err = w.Isend(pattern(size(r, s[0], s[1]), s[1]+1000*r), s[0], s[1]%tags); err != nil {
			return err
		}
		sends = append(sends, q)
	}
	// Complete some receives one at a time, then all.
	for k := 0; k < 200; k++ {
		if _, _, err := mpi.Waitany(ctx, recvs); err != nil {
			return fmt.Errorf("Waitany: %w", err)
		}
	}
	sts := make([]mpi.Status, len(recvs))
	if err := mpi.Waitall(ctx, recvs, sts); err != nil {
		return err
	}
	if err := mpi.Waitall(ctx, sends, nil); err != nil {
		return err
	}
	for k, buf := range rbufs {
		o := recvOrder[k]
		if !bytes.Equal(buf, pattern(len(buf), o[1]+1000*o[0])) {
			return fmt.Errorf("message %d from rank %d: wrong data", o[1], o[0])
		}
	}
	return w.Barrier(ctx)
}

func nonblockingCollectives(ctx context.Context, w *mpi.Comm) error {
	p := w.Size()
	r := w.Rank()
	const k = 6
	sums := make([][]int64, k)
	bc := make([][]float64, k)
	var reqs []mpi.Request
	for i := 0; i < k; i++ {
		n := []int{1, 7, 3000, 40000, 0, 100}[i]
		sums[i] = ints(r, n)
		q, err := mpi.Iallreduce(w, nil, sums[i], mpi.Sum)
		if err != nil {
			return err
		}
		reqs = append(reqs, q)
		bc[i] = make([]float64, n)
		if r == i%p {
			bc[i] = floats(i, n)
		}
		if q, err = mpi.Ibcast(w, bc[i], i%p); err != nil {
			return err
		}
		reqs = append(reqs, q)
		if q, err = w.Ibarrier(); err != nil {
			return err
		}
		reqs = append(reqs, q)
	}
	// Point-to-point around a ring meanwhile.
	got := make([]int64, 1)
	rq, err := mpi.Irecv(w, got, (r+p-1)%p, 0)
	if err != nil {
		return err
	}
	if err := mpi.Send(ctx, w, []int64{int64(r)}, (r+1)%p, 0); err != nil {
		return err
	}
	if _, err := rq.Wait(ctx); err != nil || got[0] != int64((r+p-1)%p) {
		return fmt.Errorf("ring: %v %v", got, err)
	}
	// Complete them in reverse.
	for i := len(reqs) - 1; i >= 0; i-- {
		if _, err := reqs[i].Wait(ctx); err != nil {
			return err
		}
	}
	for i := 0; i < k; i++ {
		n := len(sums[i])
		if err := expect(fmt.Sprintf("Iallreduce %d", i), sums[i], n, refSum(0, p)); err != nil {
			return err
		}
		if err := same(fmt.Sprintf("Ibcast %d", i), bc[i], floats(i, n)); err != nil {
			return err
		}
	}
	// Test polls one to completion.
	q, err := w.Ibarrier()
	if err != nil {
		return err
	}
	for {
		done, _, err := q.Test()
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	return nil
}

func ops(ctx context.Context, w *mpi.Comm) error {
	r := w.Rank()
	if err := opsOn[int8](ctx, w, r, true); err != nil {
		return err
	}
	if err := opsOn[uint16](ctx, w, r, true); err != nil {
		return err
	}
	if err := opsOn[int32](ctx, w, r, true); err != nil {
		return err
	}
	if err := opsOn[uint64](ctx, w, r, true); err != nil {
		return err
	}
	if err := opsOn[int](ctx, w, r, true); err != nil {
		return err
	}
	if err := opsOn[float32](ctx, w, r, false); err != nil {
		return err
	}
	if err := opsOn[float64](ctx, w, r, false); err != nil {
		return err
	}
	type celsius float64 // a defined type
	if err := opsOn[celsius](ctx, w, r, false); err != nil {
		return err
	}
	// Complex: Sum and Prod.
	z := []complex128{complex(float64(r), 1)}
	if err := mpi.Allreduce(ctx, w, nil, z, mpi.Prod); err != nil {
		return err
	}
	if want := complex(0, 1) * complex(1, 1) * complex(2, 1); z[0] != want {
		return fmt.Errorf("complex Prod: %v, want %v", z[0], want)
	}
	return nil
}

// Ranks that disagree on the count of a small Allreduce get an error, not
// each other's bytes read as the wrong number of elements, and the
// communicator stays usable.
func TestAllreduceCountMismatch(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		n := 8
		if w.Rank() == 1 {
			n = 4
		}
		recv := make([]float64, n)
		err := mpi.Allreduce(ctx, w, make([]float64, n), recv, mpi.Sum)
		if !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("rank %d: %v, want ErrCount", w.Rank(), err)
		}
		got := make([]int64, 3)
		if err := mpi.Allreduce(ctx, w, []int64{1, 2, int64(w.Rank())}, got, mpi.Sum); err != nil {
			return err
		}
		if got[0] != 2 || got[1] != 4 || got[2] != 1 {
			return fmt.Errorf("after the mismatch: %v", got)
		}
		return nil
	})
}

// A small Bcast whose receiver passes a buffer of another length gets
// ErrCount and loses nothing; the next Bcast works.
func TestBcastCountMismatch(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		n := 8
		if w.Rank() == 1 {
			n = 4
		}
		buf := make([]float64, n)
		err := mpi.Bcast(ctx, w, buf, 0)
		if w.Rank() == 1 && !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("rank 1: %v, want ErrCount", err)
		}
		if w.Rank() == 0 && err != nil {
			return err
		}
		got := []int64{0, 0, 0}
		if w.Rank() == 0 {
			got = []int64{7, 8, 9}
		}
		if err := mpi.Bcast(ctx, w, got, 0); err != nil {
			return err
		}
		if got[0] != 7 || got[1] != 8 || got[2] != 9 {
			return fmt.Errorf("after the mismatch: %v", got)
		}
		return nil
	})
}

// A small Reduce whose contributions differ in length: the root gets
// ErrCount and loses nothing; the next Reduce works.
func TestReduceCountMismatch(t *testing.T) {
	run(t, 2, func(ctx context.Context, w *mpi.Comm) error {
		n := 8
		if w.Rank() == 1 {
			n = 4
		}
		var recv []float64
		if w.Rank() == 0 {
			recv = make([]float64, n)
		}
		err := mpi.Reduce(ctx, w, make([]float64, n), recv, mpi.Sum, 0)
		if w.Rank() == 0 && !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("root: %v, want ErrCount", err)
		}
		if w.Rank() == 1 && err != nil {
			return err
		}
		got := make([]int64, 3)
		if err := mpi.Reduce(ctx, w, []int64{1, 2, int64(w.Rank())}, got, mpi.Sum, 0); err != nil {
			return err
		}
		if w.Rank() == 0 && (got[0] != 2 || got[1] != 4 || got[2] != 1) {
			return fmt.Errorf("after the mismatch: %v", got)
		}
		return nil
	})
}

// Collectives on a nil communicator are an ErrComm, not a panic, on every
// path (the blocking small ones run without a schedule).
func TestNilComm(t *testing.T) {
	ctx := context.Background()
	var c *mpi.Comm
	b := make([]float64, 4)
	for name, err := range map[string]error{
		"Barrier":   c.Barrier(ctx),
		"Bcast":     mpi.Bcast(ctx, c, b, 0),
		"Reduce":    mpi.Reduce(ctx, c, b, make([]float64, 4), mpi.Sum, 0),
		"Allreduce": mpi.Allreduce(ctx, c, b, make([]float64, 4), mpi.Sum),
		"Allgather": mpi.Allgather(ctx, c, b, make([]float64, 8)),
		"Alltoall":  mpi.Alltoall(ctx, c, b, make([]float64, 4)),
	} {
		if !errors.Is(err, mpi.ErrComm) {
			t.Errorf("%s on a nil communicator: %v, want ErrComm", name, err)
		}
	}
}
