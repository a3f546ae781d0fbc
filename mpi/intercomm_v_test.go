package mpi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/mpi"
)

// The vector collectives and the block reduce-scatter on the
// intercommunicator of the even and odd ranks of 2, 3, 4, 5 and 7 ranks,
// over loop, shm and tcp: blocks of different lengths per rank, at
// displacements that leave gaps (which must stay untouched), with values
// that say which rank sent them to whom; rooted ones with a root in each
// group in turn.
func TestIntercommV(t *testing.T) {
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
					return intercommVChecks(r.Deadline, w)
				})
			})
		}
	}
}

// gapped returns counts[j] = f(j) and displacements that leave one
// element between blocks, and the buffer's length.
func gapped(n int, f func(j int) int) (counts, displs []int, size int) {
	counts, displs = make([]int, n), make([]int, n)
	for j := range n {
		counts[j], displs[j] = f(j), size+1
		size += f(j) + 1
	}
	return counts, displs, size + 1
}

func filled(n int, v int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = v
	}
	return s
}

const gap = -7 // what the gaps hold, before and after

func intercommVChecks(ctx context.Context, w *mpi.Comm) error {
	me := w.Rank()
	ic, half, even, err := evenOdd(ctx, w)
	if err != nil {
		return err
	}
	defer half.Free()
	defer ic.Free()
	l, rsize := ic.Rank(), ic.RemoteSize()
	// worldOf names a remote rank by its world rank.
	worldOf := func(r int) int {
		if even {
			return 2*r + 1
		}
		return 2 * r
	}
	// checkBlocks checks recv: block j (from remote rank j) holds want(j,
	// i) at each i, gaps hold gap.
	checkBlocks := func(what string, recv []int64, counts, displs []int, want func(j, i int) int64) error {
		in := make([]bool, len(recv))
		for j := range counts {
			for i := 0; i < counts[j]; i++ {
				in[displs[j]+i] = true
				if got, w := recv[displs[j]+i], want(j, i); got != w {
					return fmt.Errorf("%s: block %d element %d = %d, want %d", what, j, i, got, w)
				}
			}
		}
		for k, v := range recv {
			if !in[k] && v != gap {
				return fmt.Errorf("%s: gap element %d = %d, written", what, k, v)
			}
		}
		return nil
	}

	// Gatherv and Scatterv, rooted at rank 0 of each group in turn.
	for _, rootEven := range []bool{true, false} {
		root := mpi.ProcNull
		switch {
		case even == rootEven && l == 0:
			root = mpi.Root
		case even != rootEven:
			root = 0
		}
		counts, displs, size := gapped(rsize, func(j int) int { return j + 1 })
		var recv []int64
		if root == mpi.Root {
			recv = filled(size, gap)
		}
		send := make([]int64, l+1)
		for i := range send {
			send[i] = int64(me*1000 + i)
		}
		if err := mpi.InterGatherv(ctx, ic, send, recv, counts, displs, root); err != nil {
			return err
		}
		if root == mpi.Root {
			if err := checkBlocks("InterGatherv", recv, counts, displs, func(j, i int) int64 { return int64(worldOf(j)*1000 + i) }); err != nil {
				return err
			}
		}
		scounts, sdispls, ssize := gapped(rsize, func(j int) int { return j + 2 })
		var ssend []int64
		if root == mpi.Root {
			ssend = filled(ssize, gap)
			for j := range rsize {
				for i := 0; i < scounts[j]; i++ {
					ssend[sdispls[j]+i] = int64(me*10000 + worldOf(j)*100 + i)
				}
			}
		}
		srecv := filled(l+2, gap)
		if err := mpi.InterScatterv(ctx, ic, ssend, scounts, sdispls, srecv, root); err != nil {
			return err
		}
		if root == 0 {
			rootWorld := worldOf(0)
			for i, v := range srecv {
				if want := int64(rootWorld*10000 + me*100 + i); v != want {
					return fmt.Errorf("InterScatterv from world rank %d: element %d = %d, want %d", rootWorld, i, v, want)
				}
			}
		} else if srecv[0] != gap {
			return fmt.Errorf("InterScatterv wrote the recv of a rank of the root's group")
		}
	}

	// Allgatherv: rank r of a group sends r+1 elements.
	{
		counts, displs, size := gapped(rsize, func(j int) int { return j + 1 })
		send := make([]int64, l+1)
		for i := range send {
			send[i] = int64(me*1000 + i)
		}
		recv := filled(size, gap)
		if err := mpi.InterAllgatherv(ctx, ic, send, recv, counts, displs); err != nil {
			return err
		}
		if err := checkBlocks("InterAllgatherv", recv, counts, displs, func(j, i int) int64 { return int64(worldOf(j)*1000 + i) }); err != nil {
			return err
		}
	}

	// Alltoallv: local rank a sends (a+b)%3+1 elements to remote rank b.
	{
		sc, sd, ssize := gapped(rsize, func(j int) int { return (l+j)%3 + 1 })
		rc, rd, rsz := gapped(rsize, func(j int) int { return (j+l)%3 + 1 })
		send := filled(ssize, gap)
		for j := range rsize {
			for i := 0; i < sc[j]; i++ {
				send[sd[j]+i] = int64(me*10000 + worldOf(j)*100 + i)
			}
		}
		recv := filled(rsz, gap)
		if err := mpi.InterAlltoallv(ctx, ic, send, sc, sd, recv, rc, rd); err != nil {
			return err
		}
		if err := checkBlocks("InterAlltoallv", recv, rc, rd, func(j, i int) int64 { return int64(worldOf(j)*10000 + me*100 + i) }); err != nil {
			return err
		}
	}

	// ReduceScatterBlock: block j of rank w's send is w + j*10 + k; rank
	// j of the other group gets the sum over this group.
	{
		const m = 3
		send := make([]int64, m*rsize)
		for j := range rsize {
			for k := range m {
				send[j*m+k] = int64(me + j*10 + k)
			}
		}
		recv := filled(m, gap)
		if err := mpi.InterReduceScatterBlock(ctx, ic, send, recv, mpi.Sum); err != nil {
			return err
		}
		var sumWorld int64
		for r := range rsize {
			sumWorld += int64(worldOf(r))
		}
		for k, v := range recv {
			if want := sumWorld + int64(rsize*(l*10+k)); v != want {
				return fmt.Errorf("InterReduceScatterBlock element %d = %d, want %d", k, v, want)
			}
		}
		if err := mpi.InterReduceScatterBlock(ctx, ic, send[:m*rsize-1], recv, mpi.Sum); err == nil {
			return fmt.Errorf("InterReduceScatterBlock of a short send: no error")
		}
	}

	// ReduceScatter: each group's counts, one per rank (the first none),
	// add up to the same total in both groups; element i of rank w's send
	// is w*100 + i, and rank j of the other group gets, after its block,
	// elements the scatter must not touch.
	{
		const total = 10
		counts := irsCounts(ic.Size(), total)
		send := make([]int64, total)
		for i := range send {
			send[i] = int64(me*100 + i)
		}
		recv := filled(counts[l]+2, gap)
		if err := mpi.InterReduceScatter(ctx, ic, send, recv, counts, mpi.Sum); err != nil {
			return err
		}
		if err := checkIRS(recv, counts, l, rsize, worldOf); err != nil {
			return err
		}
		if err := mpi.InterReduceScatter(ctx, ic, send[:total-1], recv, counts, mpi.Sum); err == nil {
			return fmt.Errorf("InterReduceScatter of a short send: no error")
		}
		if err := mpi.InterReduceScatter(ctx, ic, send, recv, counts[1:], mpi.Sum); err == nil {
			return fmt.Errorf("InterReduceScatter with a count missing: no error")
		}
	}
	return ic.Barrier(ctx)
}

// irsCounts returns the counts of an InterReduceScatter over a group of p
// ranks adding up to total: rank j gets j elements, the last the rest.
func irsCounts(p, total int) []int {
	counts := make([]int, p)
	rest := total
	for j := 0; j < p-1; j++ {
		counts[j] = j
		rest -= j
	}
	counts[p-1] = rest
	return counts
}

// checkIRS checks the recv of an InterReduceScatter whose rank w sent
// w*100 + i as element i, Sum: local rank l's block of its group's counts
// holds the sum over the other group's rsize ranks (world ranks by
// worldOf), and the rest of recv the gap.
func checkIRS(recv []int64, counts []int, l, rsize int, worldOf func(int) int) error {
	var sumWorld int64
	for r := range rsize {
		sumWorld += int64(worldOf(r))
	}
	displ := 0
	for j := range l {
		displ += counts[j]
	}
	for k, v := range recv {
		want := int64(gap)
		if k < counts[l] {
			want = sumWorld*100 + int64(rsize*(displ+k))
		}
		if v != want {
			return fmt.Errorf("InterReduceScatter: element %d of rank %d's block of %d = %d, want %d", k, l, counts[l], v, want)
		}
	}
	return nil
}

// The nonblocking collectives on the intercommunicator of the even and
// odd ranks, all started at once, then a blocking one (which waits for
// them), then Waitall; every result checked, on 2 to 7 ranks over loop,
// shm and tcp.
func TestIntercommNonblocking(t *testing.T) {
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
					return intercommNBChecks(r.Deadline, w)
				})
			})
		}
	}
}

func intercommNBChecks(ctx context.Context, w *mpi.Comm) error {
	me := w.Rank()
	ic, half, even, err := evenOdd(ctx, w)
	if err != nil {
		return err
	}
	defer half.Free()
	defer ic.Free()
	l, rsize := ic.Rank(), ic.RemoteSize()
	worldOf := func(r int) int {
		if even {
			return 2*r + 1
		}
		return 2 * r
	}
	// rootIn gives the root argument of a collective rooted at rank 0 of
	// the even (or odd) group.
	rootIn := func(evenRoot bool) int {
		switch {
		case even == evenRoot && l == 0:
			return mpi.Root
		case even == evenRoot:
			return mpi.ProcNull
		}
		return 0
	}
	var reqs []mpi.Request
	add := func(q mpi.Request, err error) error {
		reqs = append(reqs, q)
		return err
	}
	if err := add(ic.Ibarrier()); err != nil {
		return err
	}
	bcast := filled(5, gap)
	if rootIn(true) == mpi.Root {
		for i := range bcast {
			bcast[i] = int64(4242 + i)
		}
	}
	if err := add(mpi.InterIbcast(ic, bcast, rootIn(true))); err != nil {
		return err
	}
	red := []int64{int64(me), int64(me + 1)}
	redOut := filled(2, gap)
	if err := add(mpi.InterIreduce(ic, red, redOut, mpi.Sum, rootIn(false))); err != nil {
		return err
	}
	all := filled(1, gap)
	if err := add(mpi.InterIallreduce(ic, []int64{int64(me)}, all, mpi.Sum)); err != nil {
		return err
	}
	var gathered []int64
	if rootIn(true) == mpi.Root {
		gathered = filled(2*rsize, gap)
	}
	if err := add(mpi.InterIgather(ic, []int64{int64(me), int64(2 * me)}, gathered, rootIn(true))); err != nil {
		return err
	}
	var scatter []int64
	if rootIn(false) == mpi.Root {
		scatter = make([]int64, 2*rsize)
		for j := range rsize {
			scatter[2*j], scatter[2*j+1] = int64(worldOf(j)*3), int64(worldOf(j)*3+1)
		}
	}
	scattered := filled(2, gap)
	if err := add(mpi.InterIscatter(ic, scatter, scattered, rootIn(false))); err != nil {
		return err
	}
	ag := filled(rsize, gap)
	if err := add(mpi.InterIallgather(ic, []int64{int64(me)}, ag)); err != nil {
		return err
	}
	a2aSend, a2a := make([]int64, rsize), filled(rsize, gap)
	for j := range rsize {
		a2aSend[j] = int64(me*100 + worldOf(j))
	}
	if err := add(mpi.InterIalltoall(ic, a2aSend, a2a)); err != nil {
		return err
	}
	counts := irsCounts(ic.Size(), 10)
	irsSend := make([]int64, 10)
	for i := range irsSend {
		irsSend[i] = int64(me*100 + i)
	}
	irs := filled(counts[l]+2, gap)
	if err := add(mpi.InterIreduceScatter(ic, irsSend, irs, counts, mpi.Sum)); err != nil {
		return err
	}
	rsbSend, rsb := make([]int64, 2*rsize), filled(2, gap)
	for j := range rsize {
		rsbSend[2*j], rsbSend[2*j+1] = int64(me+j*10), int64(me+j*10+1)
	}
	if err := add(mpi.InterIreduceScatterBlock(ic, rsbSend, rsb, mpi.Sum)); err != nil {
		return err
	}
	// A blocking collective after them: it waits for them to be over.
	sum := make([]int64, 1)
	if err := mpi.InterAllreduce(ctx, ic, []int64{1}, sum, mpi.Sum); err != nil {
		return err
	}
	if err := mpi.Waitall(ctx, reqs, nil); err != nil {
		return err
	}
	if sum[0] != int64(rsize) {
		return fmt.Errorf("InterAllreduce after the nonblocking ones: %d, want %d", sum[0], rsize)
	}
	var remoteWorlds int64
	for r := range rsize {
		remoteWorlds += int64(worldOf(r))
	}
	switch {
	case !even:
		for i, v := range bcast {
			if v != int64(4242+i) {
				return fmt.Errorf("InterIbcast element %d = %d", i, v)
			}
		}
	case l != 0 && bcast[0] != gap:
		return fmt.Errorf("InterIbcast wrote the buffer of a rank of the root's group")
	}
	if rootIn(false) == mpi.Root && (redOut[0] != remoteWorlds || redOut[1] != remoteWorlds+int64(rsize)) {
		return fmt.Errorf("InterIreduce: %v, want [%d %d]", redOut, remoteWorlds, remoteWorlds+int64(rsize))
	}
	if all[0] != remoteWorlds {
		return fmt.Errorf("InterIallreduce: %d, want %d", all[0], remoteWorlds)
	}
	if gathered != nil {
		for j := range rsize {
			if gathered[2*j] != int64(worldOf(j)) || gathered[2*j+1] != int64(2*worldOf(j)) {
				return fmt.Errorf("InterIgather: %v", gathered)
			}
		}
	}
	if even && (scattered[0] != int64(me*3) || scattered[1] != int64(me*3+1)) {
		return fmt.Errorf("InterIscatter: %v, want [%d %d]", scattered, me*3, me*3+1)
	}
	for j, v := range ag {
		if v != int64(worldOf(j)) {
			return fmt.Errorf("InterIallgather: %v", ag)
		}
	}
	for j, v := range a2a {
		if v != int64(worldOf(j)*100+me) {
			return fmt.Errorf("InterIalltoall block %d = %d, want %d", j, v, worldOf(j)*100+me)
		}
	}
	if err := checkIRS(irs, counts, l, rsize, worldOf); err != nil {
		return fmt.Errorf("nonblocking: %w", err)
	}
	if want := remoteWorlds + int64(rsize*l*10); rsb[0] != want || rsb[1] != want+int64(rsize) {
		return fmt.Errorf("InterIreduceScatterBlock: %v, want [%d %d]", rsb, want, want+int64(rsize))
	}
	return ic.Barrier(ctx)
}
