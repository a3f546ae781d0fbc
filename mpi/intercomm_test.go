package mpi_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/mpi"
)

// evenOdd splits w into its even and odd ranks and joins the halves in an
// intercommunicator, led by each half's first rank, over w. It returns the
// intercommunicator and whether the calling rank is even.
func evenOdd(ctx context.Context, w *mpi.Comm) (*mpi.Intercomm, *mpi.Comm, bool, error) {
	even := w.Rank()%2 == 0
	half, err := w.Split(ctx, w.Rank()%2, w.Rank())
	if err != nil {
		return nil, nil, false, err
	}
	remoteLeader := 1 // the odd half's first rank, in w
	if !even {
		remoteLeader = 0
	}
	ic, err := mpi.IntercommCreate(ctx, half, 0, w, remoteLeader, 77)
	return ic, half, even, err
}

// Intercommunicators of the even and odd ranks of 2, 3, 4, 5 and 7 ranks,
// over loop, shm and tcp: sizes and groups, point-to-point between the
// groups with statuses naming remote ranks, every collective MPI defines
// on intercommunicators with values that say where they came from, Dup
// isolating its messages, and Merge ordering the groups by high.
func TestIntercomm(t *testing.T) {
	jobs := []struct {
		over string
		n    []int
	}{
		{"loop", []int{2, 3, 4, 5, 7}},
		{"shm", []int{2, 5}},
		{"tcp", []int{4}},
	}
	for _, j := range jobs {
		for _, n := range j.n {
			t.Run(fmt.Sprintf("%s/%d", j.over, n), func(t *testing.T) {
				cfg := amigo.Config{SpinIterations: 50, YieldIterations: 50}
				amigotest.Run(t, n, amigotest.Options{Config: cfg, Timeout: time.Minute, Over: j.over}, func(r *amigotest.Rank) error {
					w, err := mpi.World(r.Deadline, r.Ctx, nil)
					if err != nil {
						return err
					}
					defer w.Free()
					return intercommChecks(r.Deadline, w)
				})
			})
		}
	}
}

func intercommChecks(ctx context.Context, w *mpi.Comm) error {
	n, me := w.Size(), w.Rank()
	ic, half, even, err := evenOdd(ctx, w)
	if err != nil {
		return err
	}
	defer half.Free()
	defer ic.Free()
	nEven, nOdd := (n+1)/2, n/2
	lsize, rsize := nEven, nOdd
	if !even {
		lsize, rsize = nOdd, nEven
	}
	// worldOf names a remote rank by its world rank.
	worldOf := func(r int) int {
		if even {
			return 2*r + 1
		}
		return 2 * r
	}
	if ic.Size() != lsize || ic.RemoteSize() != rsize || ic.Rank() != me/2 {
		return fmt.Errorf("rank %d: size %d remote %d rank %d, want %d %d %d", me, ic.Size(), ic.RemoteSize(), ic.Rank(), lsize, rsize, me/2)
	}
	rg, err := ic.RemoteGroup()
	if err != nil {
		return err
	}
	for r := range rsize {
		if rg.WorldRank(r) != worldOf(r) {
			return fmt.Errorf("remote group rank %d is world %d, want %d", r, rg.WorldRank(r), worldOf(r))
		}
	}
	if rg.Rank() != mpi.Undefined {
		return fmt.Errorf("the calling rank is in the remote group at %d", rg.Rank())
	}

	// Point-to-point: every rank sends its world rank and the receiver's
	// remote rank to every remote rank, and receives from each.
	var reqs []mpi.Request
	in := make([][]byte, rsize)
	for r := range rsize {
		out := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, uint32(me)), uint32(r))
		q, err := ic.Isend(out, r, 5)
		if err != nil {
			return err
		}
		in[r] = make([]byte, 8)
		p, err := ic.Irecv(in[r], r, 5)
		if err != nil {
			return err
		}
		reqs = append(reqs, q, p)
	}
	st := make([]mpi.Status, len(reqs))
	if err := mpi.Waitall(ctx, reqs, st); err != nil {
		return err
	}
	for r := range rsize {
		from, to := binary.LittleEndian.Uint32(in[r]), binary.LittleEndian.Uint32(in[r][4:])
		if int(from) != worldOf(r) || int(to) != ic.Rank() || st[2*r+1].Source != r || st[2*r+1].Tag != 5 {
			return fmt.Errorf("from remote %d: world %d for local %d, status %+v", r, from, to, st[2*r+1])
		}
	}
	// AnySource names the remote rank in the status.
	if ic.Rank() == 0 {
		if err := ic.Send(ctx, []byte{byte(me)}, rsize-1, 6); err != nil {
			return err
		}
	}
	// Every group's rank 0 sent to the other group's last rank, which
	// receives from any source.
	if ic.Rank() == lsize-1 {
		b := make([]byte, 1)
		s, err := ic.Recv(ctx, b, mpi.AnySource, 6)
		if err != nil {
			return err
		}
		if s.Source != 0 || int(b[0]) != worldOf(0) {
			return fmt.Errorf("AnySource: status %+v byte %d, want source 0 world %d", s, b[0], worldOf(0))
		}
	}

	if err := ic.Barrier(ctx); err != nil {
		return err
	}

	// Bcast from the even group's last rank to the odd group.
	root := nEven - 1
	buf := make([]int64, 300)
	switch {
	case even && ic.Rank() == root:
		for i := range buf {
			buf[i] = int64(1000*me + i)
		}
		err = mpi.InterBcast(ctx, ic, buf, mpi.Root)
	case even:
		err = mpi.InterBcast(ctx, ic, buf, mpi.ProcNull)
	default:
		err = mpi.InterBcast(ctx, ic, buf, root)
	}
	if err != nil {
		return err
	}
	if !even {
		for i, v := range buf {
			if v != int64(1000*2*root+i) {
				return fmt.Errorf("InterBcast: element %d is %d", i, v)
			}
		}
	}

	// Allreduce: each group gets the sum of the other's world ranks and
	// the other's size.
	sum := func(r int) (s int64) {
		for i := range r {
			s += int64(worldOf(i))
		}
		return s
	}
	ar := make([]int64, 2)
	if err := mpi.InterAllreduce(ctx, ic, []int64{int64(me), 1}, ar, mpi.Sum); err != nil {
		return err
	}
	if ar[0] != sum(rsize) || ar[1] != int64(rsize) {
		return fmt.Errorf("InterAllreduce: %v, want [%d %d]", ar, sum(rsize), rsize)
	}

	// Reduce to the odd group's rank 0, Gather to it, Scatter from it.
	red := make([]int64, 1)
	gat := make([]int32, 2*nEven)
	sc := make([]int32, 2)
	if even {
		oddRoot := 0
		if err := mpi.InterReduce(ctx, ic, []int64{int64(me)}, nil, mpi.Sum, oddRoot); err != nil {
			return err
		}
		if err := mpi.InterGather(ctx, ic, []int32{int32(me), -int32(me)}, nil, oddRoot); err != nil {
			return err
		}
		if err := mpi.InterScatter(ctx, ic, nil, sc, oddRoot); err != nil {
			return err
		}
		if sc[0] != int32(ic.Rank()) || sc[1] != 7 {
			return fmt.Errorf("InterScatter: got %v at even rank %d", sc, ic.Rank())
		}
	} else {
		rootArg := mpi.ProcNull
		if ic.Rank() == 0 {
			rootArg = mpi.Root
		}
		if err := mpi.InterReduce(ctx, ic, nil, red, mpi.Sum, rootArg); err != nil {
			return err
		}
		if err := mpi.InterGather(ctx, ic, nil, gat, rootArg); err != nil {
			return err
		}
		var send []int32
		if ic.Rank() == 0 {
			for i := range nEven {
				send = append(send, int32(i), 7)
			}
		}
		if err := mpi.InterScatter(ctx, ic, send, nil, rootArg); err != nil {
			return err
		}
		if ic.Rank() == 0 {
			if red[0] != sum(nEven) {
				return fmt.Errorf("InterReduce: %d, want %d", red[0], sum(nEven))
			}
			for i := range nEven {
				if gat[2*i] != int32(2*i) || gat[2*i+1] != -int32(2*i) {
					return fmt.Errorf("InterGather: %v", gat)
				}
			}
		}
	}

	// Allgather and Alltoall.
	ag := make([]int32, rsize)
	if err := mpi.InterAllgather(ctx, ic, []int32{int32(me)}, ag); err != nil {
		return err
	}
	for r := range rsize {
		if ag[r] != int32(worldOf(r)) {
			return fmt.Errorf("InterAllgather: %v", ag)
		}
	}
	sa, ra := make([]int32, 2*rsize), make([]int32, 2*rsize)
	for r := range rsize {
		sa[2*r], sa[2*r+1] = int32(me), int32(worldOf(r))
	}
	if err := mpi.InterAlltoall(ctx, ic, sa, ra); err != nil {
		return err
	}
	for r := range rsize {
		if ra[2*r] != int32(worldOf(r)) || ra[2*r+1] != int32(me) {
			return fmt.Errorf("InterAlltoall: %v", ra)
		}
	}

	// A Dup's messages do not match the original's: rank 0 of each group
	// sends on ic and then on d with the same tag; the remote rank 0
	// receives from d first.
	d, err := ic.Dup(ctx)
	if err != nil {
		return err
	}
	defer d.Free()
	if ic.Rank() == 0 {
		if err := ic.Send(ctx, []byte("ic"), 0, 9); err != nil {
			return err
		}
		if err := d.Send(ctx, []byte("dup"), 0, 9); err != nil {
			return err
		}
		b := make([]byte, 3)
		if s, err := d.Recv(ctx, b, 0, 9); err != nil || string(b[:s.Count]) != "dup" {
			return fmt.Errorf("Dup: %q %v", b, err)
		}
		if s, err := ic.Recv(ctx, b, 0, 9); err != nil || string(b[:s.Count]) != "ic" {
			return fmt.Errorf("Dup's original: %q %v", b, err)
		}
	}

	// Merge: the odd group asks to be first (high false).
	m, err := ic.Merge(ctx, even)
	if err != nil {
		return err
	}
	defer m.Free()
	want := ic.Rank()
	if even {
		want += nOdd
	}
	if m.Size() != n || m.Rank() != want {
		return fmt.Errorf("Merge: rank %d of %d, want %d of %d", m.Rank(), m.Size(), want, n)
	}
	order := make([]int64, n)
	if err := mpi.Allgather(ctx, m, []int64{int64(me)}, order); err != nil {
		return err
	}
	var wantOrder []int64
	for r := 1; r < n; r += 2 {
		wantOrder = append(wantOrder, int64(r))
	}
	for r := 0; r < n; r += 2 {
		wantOrder = append(wantOrder, int64(r))
	}
	if !slices.Equal(order, wantOrder) {
		return fmt.Errorf("Merge order %v, want %v", order, wantOrder)
	}
	// Same high on both sides: the group of world rank 0 first.
	m2, err := d.Merge(ctx, true)
	if err != nil {
		return err
	}
	defer m2.Free()
	if want := me/2 + map[bool]int{true: 0, false: nEven}[even]; m2.Rank() != want {
		return fmt.Errorf("Merge(true, true): rank %d, want %d", m2.Rank(), want)
	}
	return nil
}

// Bad arguments are refused with the error that names them, and nothing
// is sent.
func TestIntercommErrors(t *testing.T) {
	run(t, 4, func(ctx context.Context, w *mpi.Comm) error {
		half, err := w.Split(ctx, w.Rank()%2, 0)
		if err != nil {
			return err
		}
		defer half.Free()
		if _, err := mpi.IntercommCreate(ctx, half, 5, w, 1, 0); !errors.Is(err, mpi.ErrRank) {
			return fmt.Errorf("local leader 5 of 2: %v", err)
		}
		if _, err := mpi.IntercommCreate(ctx, half, 0, w, 1, -4); !errors.Is(err, mpi.ErrTag) {
			return fmt.Errorf("tag -4: %v", err)
		}
		if w.Rank() < 2 {
			if _, err := mpi.IntercommCreate(ctx, half, 0, w, w.Rank(), 0); !errors.Is(err, mpi.ErrRank) {
				return fmt.Errorf("remote leader is the caller: %v", err)
			}
		}
		ic, _, _, err := evenOdd(ctx, w)
		if err != nil {
			return err
		}
		defer ic.Free()
		if err := mpi.InterBcast(ctx, ic, []int32{1}, 2); !errors.Is(err, mpi.ErrRank) {
			return fmt.Errorf("InterBcast root 2 of a remote group of 2: %v", err)
		}
		if err := mpi.InterAllgather(ctx, ic, []int32{1}, make([]int32, 3)); !errors.Is(err, mpi.ErrCount) {
			return fmt.Errorf("InterAllgather recv of 3: %v", err)
		}
		if err := ic.Send(ctx, nil, 2, 0); !errors.Is(err, mpi.ErrRank) {
			return fmt.Errorf("Send to remote rank 2 of 2: %v", err)
		}
		var nilIC *mpi.Intercomm
		if err := nilIC.Barrier(ctx); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("nil Barrier: %v", err)
		}
		// The refused calls moved nothing: the intercommunicator still
		// works.
		return ic.Barrier(ctx)
	})
}
