package mpi_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

// Every nonblocking collective that has a blocking twin, all started at
// once on one communicator and completed by one Waitall, gives what the
// blocking one gives afterwards, at 1, 3 and 4 ranks, with variable counts
// where the call takes them.
func TestNonblockingMatchesBlocking(t *testing.T) {
	for _, p := range []int{1, 3, 4} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			run(t, p, func(ctx context.Context, w *mpi.Comm) error {
				r := w.Rank()
				const n = 5
				// Rank i contributes i+1 elements to the v-forms.
				counts, displs := make([]int, p), make([]int, p)
				total := 0
				for i := range counts {
					counts[i], displs[i] = i+1, total
					total += i + 1
				}
				send := make([]int64, n*p)
				for i := range send {
					send[i] = ival(r, i)
				}
				type result struct {
					name string
					nb   []int64
					bl   func(out []int64) error
				}
				var reqs []mpi.Request
				var res []result
				start := func(name string, size int, nb func(out []int64) (mpi.Request, error), bl func(out []int64) error) error {
					out := slices.Repeat([]int64{-99}, size)
					q, err := nb(out)
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					reqs = append(reqs, q)
					res = append(res, result{name, out, bl})
					return nil
				}
				root := p - 1
				mine := send[:counts[r]]
				steps := []error{
					start("Igather", n*p, func(o []int64) (mpi.Request, error) { return mpi.Igather(w, send[:n], o, root) },
						func(o []int64) error { return mpi.Gather(ctx, w, send[:n], o, root) }),
					start("Igatherv", total, func(o []int64) (mpi.Request, error) { return mpi.Igatherv(w, mine, o, counts, displs, root) },
						func(o []int64) error { return mpi.Gatherv(ctx, w, mine, o, counts, displs, root) }),
					start("Iscatter", n, func(o []int64) (mpi.Request, error) { return mpi.Iscatter(w, send, o, 0) },
						func(o []int64) error { return mpi.Scatter(ctx, w, send, o, 0) }),
					start("Iscatterv", counts[r], func(o []int64) (mpi.Request, error) { return mpi.Iscatterv(w, send[:total], counts, displs, o, 0) },
						func(o []int64) error { return mpi.Scatterv(ctx, w, send[:total], counts, displs, o, 0) }),
					start("Iallgatherv", total, func(o []int64) (mpi.Request, error) { return mpi.Iallgatherv(w, mine, o, counts, displs) },
						func(o []int64) error { return mpi.Allgatherv(ctx, w, mine, o, counts, displs) }),
					start("Ialltoallv", total, func(o []int64) (mpi.Request, error) {
						return mpi.Ialltoallv(w, send[:p*counts[r]], sameCounts(p, counts[r]), strided(p, counts[r]), o, counts, displs)
					}, func(o []int64) error {
						return mpi.Alltoallv(ctx, w, send[:p*counts[r]], sameCounts(p, counts[r]), strided(p, counts[r]), o, counts, displs)
					}),
					start("IreduceScatter", counts[r], func(o []int64) (mpi.Request, error) { return mpi.IreduceScatter(w, send[:total], o, counts, mpi.Sum) },
						func(o []int64) error { return mpi.ReduceScatter(ctx, w, send[:total], o, counts, mpi.Sum) }),
					start("Iscan", n, func(o []int64) (mpi.Request, error) { return mpi.Iscan(w, send[:n], o, mpi.Sum) },
						func(o []int64) error { return mpi.Scan(ctx, w, send[:n], o, mpi.Sum) }),
					start("Iexscan", n, func(o []int64) (mpi.Request, error) { return mpi.Iexscan(w, send[:n], o, mpi.Max) },
						func(o []int64) error { return mpi.Exscan(ctx, w, send[:n], o, mpi.Max) }),
				}
				for _, err := range steps {
					if err != nil {
						return err
					}
				}
				if err := mpi.Waitall(ctx, reqs, nil); err != nil {
					return err
				}
				for _, x := range res {
					want := slices.Repeat([]int64{-99}, len(x.nb))
					if err := x.bl(want); err != nil {
						return fmt.Errorf("%s (blocking): %w", x.name, err)
					}
					if !slices.Equal(x.nb, want) {
						return fmt.Errorf("rank %d %s: %v, blocking gives %v", r, x.name, x.nb, want)
					}
				}
				return nil
			})
		})
	}
}

func sameCounts(p, n int) []int { return slices.Repeat([]int{n}, p) }

func strided(p, n int) []int {
	d := make([]int, p)
	for i := range d {
		d[i] = i * n
	}
	return d
}
