package mpi_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/mpi"
)

// Every collective against a sequential reference: every rank count from 1
// to 17 with small counts, and a few rank counts with large ones.

var (
	allRanks   = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
	smallCount = []int{0, 1, 7, 1000}
	largeRanks = []int{2, 3, 6}
	largeCount = []int{1 << 20}
)

// cases lists (ranks, counts) pairs: the full rank range with small counts,
// and the large counts on a few rank counts unless small is set (for runs
// that force an algorithm: at large counts the default picks the one for
// large messages anyway).
func cases(small bool) [][2]int {
	var out [][2]int
	for _, p := range allRanks {
		for _, n := range smallCount {
			out = append(out, [2]int{p, n})
		}
	}
	for _, p := range largeRanks {
		if small {
			break
		}
		for _, n := range largeCount {
			out = append(out, [2]int{p, n})
		}
	}
	return out
}

// byRanks groups cases by rank count, so that one job runs all counts.
func byRanks(cs [][2]int) map[int][]int {
	m := map[int][]int{}
	for _, c := range cs {
		m[c[0]] = append(m[c[0]], c[1])
	}
	return m
}

func forRanks(t *testing.T, j job, fn func(ctx context.Context, w *mpi.Comm, counts []int) error) {
	forRanksOf(t, j, false, fn)
}

func forRanksOf(t *testing.T, j job, small bool, fn func(ctx context.Context, w *mpi.Comm, counts []int) error) {
	m := byRanks(cases(small))
	ps := make([]int, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		counts := m[p]
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			runWith(t, p, j, func(ctx context.Context, w *mpi.Comm) error {
				return fn(ctx, w, counts)
			})
		})
	}
}

// Values of rank r's element i.
func ival(r, i int) int64   { return int64((r*7919+i*104729)%2001) - 1000 }
func fval(r, i int) float64 { return float64((r*31+i*17)%4099) - 2048 }
func mval(r, i int) uint64 {
	h := uint64(r*0x9e3779b9+i*0x85ebca6b) * 0xc2b2ae3d27d4eb4f
	return h ^ h>>29
}

// matmul multiplies 2x2 matrices of uint16 packed in a uint64 (a, b, c, d
// from the low lanes): associative, not commutative.
func matmul(x, y uint64) uint64 {
	lane := func(v uint64, k uint) uint64 { return v >> (16 * k) & 0xffff }
	a, b, c, d := lane(x, 0), lane(x, 1), lane(x, 2), lane(x, 3)
	e, f, g, h := lane(y, 0), lane(y, 1), lane(y, 2), lane(y, 3)
	return (a*e+b*g)&0xffff | ((a*f+b*h)&0xffff)<<16 | ((c*e+d*g)&0xffff)<<32 | ((c*f+d*h)&0xffff)<<48
}

// MatMul is the non-commutative user op: inout = in ∘ inout.
var MatMul = mpi.NewOp(func(in, inout []uint64) {
	for i := range inout {
		inout[i] = matmul(in[i], inout[i])
	}
}, false)

func ints(r, n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = ival(r, i)
	}
	return s
}

func floats(r, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = fval(r, i)
	}
	return s
}

func mats(r, n int) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = mval(r, i)
	}
	return s
}

// Reference reductions over ranks lo..hi-1 in rank order, element by
// element, computed on the fly so that checking a large result writes no
// memory (which matters under the race detector).
func refSum(lo, hi int) func(i int) int64 {
	return func(i int) int64 {
		var v int64
		for r := lo; r < hi; r++ {
			v += ival(r, i)
		}
		return v
	}
}

func refMax(lo, hi int) func(i int) float64 {
	return func(i int) float64 {
		v := fval(lo, i)
		for r := lo + 1; r < hi; r++ {
			v = max(v, fval(r, i))
		}
		return v
	}
}

func refMat(lo, hi int) func(i int) uint64 {
	return func(i int) uint64 {
		v := mval(lo, i)
		for r := lo + 1; r < hi; r++ {
			v = matmul(v, mval(r, i))
		}
		return v
	}
}

// expect checks got[i] == want(i) for every i.
func expect[T comparable](what string, got []T, n int, want func(int) T) error {
	if len(got) != n {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), n)
	}
	for i, g := range got {
		if w := want(i); g != w {
			return fmt.Errorf("%s: element %d of %d is %v, want %v", what, i, n, g, w)
		}
	}
	return nil
}

func shift[T any](f func(int) T, off int) func(int) T { return func(i int) T { return f(i + off) } }

func same[T comparable](what string, got, want []T) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: element %d of %d is %v, want %v", what, i, len(got), got[i], want[i])
		}
	}
	return nil
}

// The checks: each runs one collective on w for every count, with every
// test op where it reduces (Sum on int64, Max on float64, the
// non-commutative MatMul on uint64), and compares with the reference. They
// run on ranks as goroutines here and as processes in proc_test.go.
var collChecks = []struct {
	name string
	fn   func(ctx context.Context, w *mpi.Comm, counts []int) error
}{
	{"Allreduce", checkAllreduce}, {"Reduce", checkReduce}, {"Bcast", checkBcast},
	{"Barrier", checkBarrier}, {"GatherScatter", checkGatherScatter},
	{"GathervScatterv", checkGathervScatterv}, {"Allgather", checkAllgather},
	{"Allgatherv", checkAllgatherv}, {"Alltoall", checkAlltoall},
	{"Alltoallv", checkAlltoallv}, {"ReduceScatter", checkReduceScatter}, {"Scan", checkScan},
}

func TestAllreduce(t *testing.T) {
	for _, alg := range []struct {
		name  string
		short int
	}{{"auto", 0}, {"doubling", mpi.Never}, {"rsag", -1}} {
		t.Run(alg.name, func(t *testing.T) {
			j := job{opts: &mpi.Options{AllreduceShortMax: alg.short}}
			forRanksOf(t, j, alg.name != "auto", checkAllreduce)
		})
	}
}

// On an oversubscribed host, small Allreduces on 5 to 16 ranks gather at
// rank 0 and come back from it (Options.AllreduceFlatRanks); blocking and
// nonblocking, in rank order for the non-commutative op.
func TestAllreduceFlat(t *testing.T) {
	for _, p := range []int{3, 4, 5, 7, 8, 16} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			runWith(t, p, job{}, func(ctx context.Context, w *mpi.Comm) error {
				mpi.AssumeOversubscribed(w)
				r := w.Size()
				if err := checkAllreduce(ctx, w, []int{1, 3, 8}); err != nil {
					return err
				}
				for _, n := range []int{1, 5} {
					gm := make([]uint64, n)
					q, err := mpi.Iallreduce(w, mats(w.Rank(), n), gm, MatMul)
					if err != nil {
						return err
					}
					if _, err := q.Wait(ctx); err != nil {
						return err
					}
					if err := expect(fmt.Sprintf("Iallreduce MatMul n=%d", n), gm, n, refMat(0, r)); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

func TestReduce(t *testing.T) {
	for _, alg := range []struct {
		name  string
		short int
	}{{"auto", 0}, {"binomial", mpi.Never}, {"rsg", -1}} {
		t.Run(alg.name, func(t *testing.T) {
			j := job{opts: &mpi.Options{ReduceShortMax: alg.short}}
			forRanksOf(t, j, alg.name != "auto", checkReduce)
		})
	}
}

// rootsFor returns roots(p) for small counts, and one root for large ones.
func rootsFor(p, n int) []int {
	if n >= 1<<16 {
		return []int{p / 2}
	}
	return roots(p)
}

// roots returns the roots worth testing at p ranks: first, last, middle.
func roots(p int) []int {
	out := []int{0}
	if p > 1 {
		out = append(out, p-1)
	}
	if p > 2 {
		out = append(out, p/2)
	}
	return out
}

func TestBcast(t *testing.T) {
	for _, alg := range []struct {
		name  string
		short int
		seg   int
		mcast int
		flat  int
	}{{"auto", 0, 0, 0, 0}, {"flat", 0, 0, mpi.Never, mpi.Never}, {"binomial", mpi.Never, 0, mpi.Never, -1},
		{"chain", -1, 1000, mpi.Never, -1}, {"multicast", 0, 0, -1, 0}} {
		t.Run(alg.name, func(t *testing.T) {
			j := job{opts: &mpi.Options{BcastShortMax: alg.short, BcastSegment: alg.seg, BcastMulticastMin: alg.mcast,
				BcastFlatMax: alg.flat, BcastFlatRanks: max(alg.flat, 0)}}
			forRanksOf(t, j, alg.name != "auto", checkBcast)
		})
	}
}

func TestBarrier(t *testing.T) {
	for _, alg := range []struct {
		name  string
		ranks int
	}{{"auto", 0}, {"flat", mpi.Never}, {"dissemination", -1}} {
		t.Run(alg.name, func(t *testing.T) {
			forRanksOf(t, job{opts: &mpi.Options{BarrierFlatRanks: alg.ranks}}, alg.name != "auto", checkBarrier)
		})
	}
}

// blockCount turns a test count into the block of one rank in gathers:
// the total stays at most the count (at least 1 element a block if count is
// not 0).
func blockCount(n, p int) int {
	if n == 0 {
		return 0
	}
	return max(1, n/p)
}

func TestGatherScatter(t *testing.T) {
	for _, alg := range []struct {
		name  string
		short int
	}{{"auto", 0}, {"binomial", mpi.Never}, {"linear", -1}} {
		t.Run(alg.name, func(t *testing.T) {
			j := job{opts: &mpi.Options{GatherShortMax: alg.short}}
			forRanksOf(t, j, alg.name != "auto", checkGatherScatter)
		})
	}
}

// vblocks gives rank q of p a block of (q*3+n)%(n+1)... elements: uneven,
// some empty.
func vblocks(p, n int) (counts, displs []int, total int) {
	counts = make([]int, p)
	displs = make([]int, p)
	for q := range counts {
		counts[q] = (q*5 + n) % (n + 1)
		if q%3 == 2 {
			counts[q] = 0
		}
	}
	// Leave gaps between blocks, in reverse order, to exercise displs.
	for q := p - 1; q >= 0; q-- {
		displs[q] = total
		total += counts[q] + 1
	}
	return counts, displs, total
}

func TestGathervScatterv(t *testing.T) {
	forRanks(t, job{}, checkGathervScatterv)
}

func TestAllgather(t *testing.T) {
	for _, alg := range []struct {
		name  string
		short int
	}{{"auto", 0}, {"bruck", mpi.Never}, {"ring", -1}} {
		t.Run(alg.name, func(t *testing.T) {
			j := job{opts: &mpi.Options{AllgatherShortMax: alg.short}}
			forRanksOf(t, j, alg.name != "auto", checkAllgather)
		})
	}
}

func TestAllgatherv(t *testing.T) {
	forRanks(t, job{}, checkAllgatherv)
}

// a2a is the element rank `from` sends rank `to` at index i.
func a2a(from, to, i int) int64 { return int64(from*1000003 + to*1009 + i) }

func TestAlltoall(t *testing.T) {
	for _, alg := range []struct {
		name  string
		short int
	}{{"auto", 0}, {"all-at-once", mpi.Never}, {"pairwise", -1}} {
		t.Run(alg.name, func(t *testing.T) {
			j := job{opts: &mpi.Options{AlltoallShortMax: alg.short}}
			forRanksOf(t, j, alg.name != "auto", checkAlltoall)
		})
	}
}

func TestAlltoallv(t *testing.T) {
	forRanks(t, job{}, checkAlltoallv)
}

func TestReduceScatter(t *testing.T) {
	forRanks(t, job{}, checkReduceScatter)
}

func TestScan(t *testing.T) {
	forRanks(t, job{}, checkScan)
}

func checkAllreduce(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		gi := make([]int64, n)
		if err := mpi.Allreduce(ctx, w, ints(r, n), gi, mpi.Sum); err != nil {
			return err
		}
		if err := expect(fmt.Sprintf("Sum n=%d", n), gi, n, refSum(0, p)); err != nil {
			return err
		}
		gf := floats(r, n) // in place
		if err := mpi.Allreduce(ctx, w, nil, gf, mpi.Max); err != nil {
			return err
		}
		if err := expect(fmt.Sprintf("Max n=%d", n), gf, n, refMax(0, p)); err != nil {
			return err
		}
		gm := make([]uint64, n)
		if err := mpi.Allreduce(ctx, w, mats(r, n), gm, MatMul); err != nil {
			return err
		}
		if err := expect(fmt.Sprintf("MatMul n=%d", n), gm, n, refMat(0, p)); err != nil {
			return err
		}
	}
	return nil
}

func checkReduce(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		for _, root := range rootsFor(p, n) {
			var gi []int64
			if r == root {
				gi = make([]int64, n)
			}
			if err := mpi.Reduce(ctx, w, ints(r, n), gi, mpi.Sum, root); err != nil {
				return err
			}
			gm := mats(r, n)
			if r != root {
				err := mpi.Reduce(ctx, w, gm, nil, MatMul, root)
				if err != nil {
					return err
				}
			} else if err := mpi.Reduce(ctx, w, nil, gm, MatMul, root); err != nil {
				return err
			}
			if r != root {
				continue
			}
			if err := expect(fmt.Sprintf("Sum n=%d root=%d", n, root), gi, n, refSum(0, p)); err != nil {
				return err
			}
			if err := expect(fmt.Sprintf("MatMul n=%d root=%d", n, root), gm, n, refMat(0, p)); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkBcast(ctx context.Context, w *mpi.Comm, counts []int) error {
	r := w.Size()
	_ = r
	for _, n := range counts {
		for _, root := range rootsFor(w.Size(), n) {
			buf := make([]float64, n)
			if w.Rank() == root {
				buf = floats(root, n)
			}
			if err := mpi.Bcast(ctx, w, buf, root); err != nil {
				return err
			}
			if err := same(fmt.Sprintf("n=%d root=%d", n, root), buf, floats(root, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkBarrier: in round i rank i%p enters late; no rank may leave before
// every rank entered. Entry and exit times are the host's wall clock, which
// ranks as goroutines and as processes of one host share.
func checkBarrier(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	times := make([]int64, 2*p)
	for i := 0; i < 5; i++ {
		if r == i%p {
			time.Sleep(2 * time.Millisecond)
		}
		in := time.Now().UnixNano()
		if err := w.Barrier(ctx); err != nil {
			return err
		}
		out := time.Now().UnixNano()
		if err := mpi.Allgather(ctx, w, []int64{in, out}, times); err != nil {
			return err
		}
		last := int64(0)
		for q := 0; q < p; q++ {
			last = max(last, times[2*q])
		}
		for q := 0; q < p; q++ {
			if times[2*q+1] < last {
				return fmt.Errorf("barrier round %d: rank %d left %v before rank %d entered", i, q, time.Duration(last-times[2*q+1]), i%p)
			}
		}
	}
	return nil
}

func checkGatherScatter(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		b := blockCount(n, p)
		for _, root := range rootsFor(p, n) {
			var all []int64
			if r == root {
				all = make([]int64, p*b)
			}
			if err := mpi.Gather(ctx, w, ints(r, b), all, root); err != nil {
				return err
			}
			if r == root {
				want := make([]int64, 0, p*b)
				for q := 0; q < p; q++ {
					want = append(want, ints(q, b)...)
				}
				if err := same(fmt.Sprintf("Gather n=%d root=%d", b, root), all, want); err != nil {
					return err
				}
			}
			// Scatter back rank q's block as the root's data.
			var src []int64
			if r == root {
				src = make([]int64, 0, p*b)
				for q := 0; q < p; q++ {
					src = append(src, ints(q+root, b)...)
				}
			}
			mine := make([]int64, b)
			if err := mpi.Scatter(ctx, w, src, mine, root); err != nil {
				return err
			}
			if err := same(fmt.Sprintf("Scatter n=%d root=%d", b, root), mine, ints(r+root, b)); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkGathervScatterv(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		n = blockCount(n, p)
		cnt, dis, total := vblocks(p, n)
		root := p / 2
		var all []int64
		if r == root {
			all = make([]int64, total)
		}
		if err := mpi.Gatherv(ctx, w, ints(r, cnt[r]), all, cnt, dis, root); err != nil {
			return err
		}
		if r == root {
			for q := 0; q < p; q++ {
				if err := same(fmt.Sprintf("Gatherv n=%d block %d", n, q), all[dis[q]:dis[q]+cnt[q]], ints(q, cnt[q])); err != nil {
					return err
				}
			}
		}
		var src []int64
		if r == root {
			src = make([]int64, total)
			for q := 0; q < p; q++ {
				copy(src[dis[q]:], ints(q+7, cnt[q]))
			}
		}
		mine := make([]int64, cnt[r])
		if err := mpi.Scatterv(ctx, w, src, cnt, dis, mine, root); err != nil {
			return err
		}
		if err := same(fmt.Sprintf("Scatterv n=%d", n), mine, ints(r+7, cnt[r])); err != nil {
			return err
		}
	}
	return nil
}

func checkAllgather(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		b := blockCount(n, p)
		want := make([]float64, 0, p*b)
		for q := 0; q < p; q++ {
			want = append(want, floats(q, b)...)
		}
		all := make([]float64, p*b)
		if err := mpi.Allgather(ctx, w, floats(r, b), all); err != nil {
			return err
		}
		if err := same(fmt.Sprintf("n=%d", b), all, want); err != nil {
			return err
		}
		// In place.
		all = make([]float64, p*b)
		copy(all[r*b:], floats(r, b))
		if err := mpi.Allgather(ctx, w, nil, all); err != nil {
			return err
		}
		if err := same(fmt.Sprintf("in place n=%d", b), all, want); err != nil {
			return err
		}
	}
	return nil
}

func checkAllgatherv(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		n = blockCount(n, p)
		cnt, dis, total := vblocks(p, n)
		all := make([]int64, total)
		if err := mpi.Allgatherv(ctx, w, ints(r, cnt[r]), all, cnt, dis); err != nil {
			return err
		}
		for q := 0; q < p; q++ {
			if err := same(fmt.Sprintf("n=%d block %d", n, q), all[dis[q]:dis[q]+cnt[q]], ints(q, cnt[q])); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkAlltoall(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		b := blockCount(n, p)
		send := make([]int64, p*b)
		for to := 0; to < p; to++ {
			for i := 0; i < b; i++ {
				send[to*b+i] = a2a(r, to, i)
			}
		}
		recv := make([]int64, p*b)
		if err := mpi.Alltoall(ctx, w, send, recv); err != nil {
			return err
		}
		for from := 0; from < p; from++ {
			for i := 0; i < b; i++ {
				if got, want := recv[from*b+i], a2a(from, r, i); got != want {
					return fmt.Errorf("n=%d: element %d from rank %d is %d, want %d", b, i, from, got, want)
				}
			}
		}
	}
	return nil
}

func checkAlltoallv(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		n = blockCount(n, p)
		// Rank `from` sends rank `to` size(from, to) elements.
		size := func(from, to int) int { return (from*3 + to*5 + n) % (n + 1) }
		sc, sd, rc, rd := make([]int, p), make([]int, p), make([]int, p), make([]int, p)
		st, rt := 0, 0
		for q := p - 1; q >= 0; q-- {
			sc[q], sd[q] = size(r, q), st
			st += sc[q] + 2
			rc[q], rd[q] = size(q, r), rt
			rt += rc[q] + 1
		}
		send, recv := make([]int64, st), make([]int64, rt)
		for q := 0; q < p; q++ {
			for i := 0; i < sc[q]; i++ {
				send[sd[q]+i] = a2a(r, q, i)
			}
		}
		if err := mpi.Alltoallv(ctx, w, send, sc, sd, recv, rc, rd); err != nil {
			return err
		}
		for q := 0; q < p; q++ {
			for i := 0; i < rc[q]; i++ {
				if got, want := recv[rd[q]+i], a2a(q, r, i); got != want {
					return fmt.Errorf("n=%d: element %d from rank %d is %d, want %d", n, i, q, got, want)
				}
			}
		}
	}
	return nil
}

func checkReduceScatter(ctx context.Context, w *mpi.Comm, counts []int) error {
	p, r := w.Size(), w.Rank()
	for _, n := range counts {
		cnt := make([]int, p)
		total := 0
		for q := range cnt {
			cnt[q] = (n/p + q) % (n/p + 2) // uneven
			total += cnt[q]
		}
		off := 0
		for q := 0; q < r; q++ {
			off += cnt[q]
		}
		gi := make([]int64, cnt[r])
		if err := mpi.ReduceScatter(ctx, w, ints(r, total), gi, cnt, mpi.Sum); err != nil {
			return err
		}
		if err := expect(fmt.Sprintf("Sum n=%d", total), gi, cnt[r], shift(refSum(0, p), off)); err != nil {
			return err
		}
		gm := make([]uint64, cnt[r])
		if err := mpi.ReduceScatter(ctx, w, mats(r, total), gm, cnt, MatMul); err != nil {
			return err
		}
		if err := expect(fmt.Sprintf("MatMul n=%d", total), gm, cnt[r], shift(refMat(0, p), off)); err != nil {
			return err
		}
	}
	return nil
}

func checkScan(ctx context.Context, w *mpi.Comm, counts []int) error {
	r := w.Rank()
	for _, n := range counts {
		// Large counts: the non-commutative Scan and the commutative Exscan
		// only, to keep the race detector's run short.
		large := n >= 1<<16
		if !large {
			gi := make([]int64, n)
			if err := mpi.Scan(ctx, w, ints(r, n), gi, mpi.Sum); err != nil {
				return err
			}
			if err := expect(fmt.Sprintf("Scan Sum n=%d", n), gi, n, refSum(0, r+1)); err != nil {
				return err
			}
		}
		gm := mats(r, n)
		if err := mpi.Scan(ctx, w, nil, gm, MatMul); err != nil {
			return err
		}
		if err := expect(fmt.Sprintf("Scan MatMul n=%d", n), gm, n, refMat(0, r+1)); err != nil {
			return err
		}
		ex := make([]int64, n)
		if err := mpi.Exscan(ctx, w, ints(r, n), ex, mpi.Sum); err != nil {
			return err
		}
		if r > 0 {
			if err := expect(fmt.Sprintf("Exscan Sum n=%d", n), ex, n, refSum(0, r)); err != nil {
				return err
			}
		}
		if large {
			continue
		}
		em := make([]uint64, n)
		if err := mpi.Exscan(ctx, w, mats(r, n), em, MatMul); err != nil {
			return err
		}
		if r > 0 {
			if err := expect(fmt.Sprintf("Exscan MatMul n=%d", n), em, n, refMat(0, r)); err != nil {
				return err
			}
		}
	}
	return nil
}
