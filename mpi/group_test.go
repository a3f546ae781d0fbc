package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/amigo-hpc/amigo/mpi"
)

func worldRanks(g *mpi.Group) []int {
	out := make([]int, g.Size())
	for i := range out {
		out[i] = g.WorldRank(i)
	}
	return out
}

// Group operations, set by set, on a world of 6 with rank 2 calling.
func TestGroupOps(t *testing.T) {
	run(t, 6, func(ctx context.Context, w *mpi.Comm) error {
		if w.Rank() != 2 {
			return nil
		}
		g, err := w.Group()
		if err != nil {
			return err
		}
		a, err := g.Incl([]int{5, 2, 0, 3})
		if err != nil {
			return err
		}
		b, err := g.Excl([]int{0, 1})
		if err != nil {
			return err
		}
		u, _ := mpi.Union(a, b)
		in, _ := mpi.Intersection(a, b)
		d, _ := mpi.Difference(a, b)
		for _, c := range []struct {
			name      string
			got, want []int
		}{
			{"Incl", worldRanks(a), []int{5, 2, 0, 3}},
			{"Excl", worldRanks(b), []int{2, 3, 4, 5}},
			{"Union", worldRanks(u), []int{5, 2, 0, 3, 4}},
			{"Intersection", worldRanks(in), []int{5, 2, 3}},
			{"Difference", worldRanks(d), []int{0}},
		} {
			if !slices.Equal(c.got, c.want) {
				return fmt.Errorf("%s: %v, want %v", c.name, c.got, c.want)
			}
		}
		if a.Rank() != 1 || d.Rank() != mpi.Undefined {
			return fmt.Errorf("Rank: %d in a, %d in d", a.Rank(), d.Rank())
		}
		tr, err := mpi.TranslateRanks(a, []int{0, 1, 2, 3, mpi.ProcNull}, b)
		if err != nil || !slices.Equal(tr, []int{3, 0, mpi.Undefined, 1, mpi.ProcNull}) {
			return fmt.Errorf("TranslateRanks: %v %v", tr, err)
		}
		rev, _ := g.Incl([]int{5, 4, 3, 2, 1, 0})
		for _, c := range []struct {
			x, y *mpi.Group
			want int
		}{{g, g, mpi.Ident}, {g, rev, mpi.Similar}, {a, b, mpi.Unequal}, {in, a, mpi.Unequal}} {
			if got, err := mpi.Compare(c.x, c.y); got != c.want || err != nil {
				return fmt.Errorf("Compare(%v, %v) = %d %v, want %d", worldRanks(c.x), worldRanks(c.y), got, err, c.want)
			}
		}
		// Bad input: clear errors.
		for _, err := range []error{
			func() error { _, err := g.Incl([]int{6}); return err }(),
			func() error { _, err := g.Incl([]int{1, 1}); return err }(),
			func() error { _, err := g.Excl([]int{-1}); return err }(),
			func() error { _, err := mpi.TranslateRanks(a, []int{4}, b); return err }(),
		} {
			if !errors.Is(err, mpi.ErrRank) {
				return fmt.Errorf("bad rank: %v", err)
			}
		}
		if _, err := mpi.Union(nil, a); !errors.Is(err, mpi.ErrComm) {
			return fmt.Errorf("nil group: %v", err)
		}
		return nil
	})
}

// family returns the communicators a collective is checked on, built from
// w with every constructor: w itself, a Dup, a Split in reverse order, the
// halves, each rank alone, the even ranks (Group.Incl, Create), the world
// without its last 1 to 3 ranks (Group.Excl, CreateGroup), an Idup and
// the ranks of this host (SplitType). A rank outside one gets nil.
func family(ctx context.Context, w *mpi.Comm) (names []string, comms []*mpi.Comm, err error) {
	add := func(name string, c *mpi.Comm, e error) {
		names, comms = append(names, name), append(comms, c)
		err = errors.Join(err, e)
	}
	p, r := w.Size(), w.Rank()
	add("world", w, nil)
	d, e := w.Dup(ctx)
	add("dup", d, e)
	rev, e := w.Split(ctx, 0, p-r)
	add("reversed", rev, e)
	half, e := w.Split(ctx, 2*r/p, r)
	add("halves", half, e)
	self, e := w.Split(ctx, r, 0)
	add("self", self, e)
	g, e := w.Group()
	if e != nil {
		return nil, nil, e
	}
	var evens []int
	for i := 0; i < p; i += 2 {
		evens = append(evens, i)
	}
	ge, e := g.Incl(evens)
	if e != nil {
		return nil, nil, e
	}
	even, e := w.Create(ctx, ge)
	add("evens", even, e)
	for k := 1; k <= 3 && k < p; k++ {
		var last []int
		for i := p - k; i < p; i++ {
			last = append(last, i)
		}
		gx, e := g.Excl(last)
		if e != nil {
			return nil, nil, e
		}
		var c *mpi.Comm
		if r < p-k {
			c, e = w.CreateGroup(ctx, gx, k)
		}
		add(fmt.Sprintf("minus%d", k), c, e)
	}
	id, q, e := w.Idup()
	if e == nil {
		_, e = q.Wait(ctx)
	}
	add("idup", id, e)
	host, e := w.SplitType(ctx, mpi.SplitShared, r)
	add("host", host, e)
	return names, comms, err
}

// Every collective over the communicator family, at 1, 2, 3, 4, 7 and 8
// ranks, against the sequential reference; then the sizes and orders the
// constructors promise.
func TestCollectivesOnCommFamily(t *testing.T) {
	for _, p := range []int{1, 2, 3, 4, 7, 8} {
		t.Run(fmt.Sprintf("p=%d", p), func(t *testing.T) {
			run(t, p, func(ctx context.Context, w *mpi.Comm) error {
				names, comms, err := family(ctx, w)
				if err != nil {
					return err
				}
				r := w.Rank()
				for i, c := range comms {
					if c == nil {
						continue
					}
					if err := familyShape(names[i], w, c); err != nil {
						return err
					}
					for _, cc := range collChecks {
						if err := cc.fn(ctx, c, []int{1, 7, 300}); err != nil {
							return fmt.Errorf("rank %d, %s on %s: %w", r, cc.name, names[i], err)
						}
					}
				}
				for i, c := range comms {
					if c != nil && c != w {
						if err := c.Free(); err != nil {
							return fmt.Errorf("free %s: %w", names[i], err)
						}
					}
				}
				return nil
			})
		})
	}
}

// familyShape checks the size and the order of the ranks of c, the member
// of the family called name, against w.
func familyShape(name string, w, c *mpi.Comm) error {
	p, r := w.Size(), w.Rank()
	want := map[string][2]int{ // size, rank
		"world": {p, r}, "dup": {p, r}, "idup": {p, r}, "host": {p, r},
		"reversed": {p, p - 1 - r}, "self": {1, 0}, "evens": {(p + 1) / 2, r / 2},
		"minus1": {p - 1, r}, "minus2": {p - 2, r}, "minus3": {p - 3, r},
	}
	if name == "halves" {
		lo := (p + 1) / 2 // the ranks with 2r < p
		if 2*r/p == 0 {
			return check(c.Size() == lo && c.Rank() == r, "halves: size %d rank %d", c.Size(), c.Rank())
		}
		return check(c.Size() == p-lo && c.Rank() == r-lo, "halves: size %d rank %d", c.Size(), c.Rank())
	}
	w2 := want[name]
	return check(c.Size() == w2[0] && c.Rank() == w2[1], "%s: size %d rank %d, want %v", name, c.Size(), c.Rank(), w2)
}
