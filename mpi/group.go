package mpi

import (
	"context"
	"fmt"
	"slices"

	"github.com/amigo-hpc/amigo"
)

// Groups (MPI chapter "Groups, Contexts, Communicators"). A Group is an
// ordered set of the job's ranks, named by their rank in the world; it is
// a plain value, made and combined locally, with no communication. Comm.Create
// and Comm.CreateGroup make a communicator of a group.

// Group is an ordered set of ranks of the job. The calling rank's place in
// it is Rank. Groups are immutable: every operation returns a new one.
type Group struct {
	world []int // world rank of each member, in group order
	me    int   // the calling rank's world rank
}

// Results of Compare, as MPI names them.
const (
	// Ident: the same members in the same order.
	Ident = iota
	// Similar: the same members in another order.
	Similar
	// Unequal: other members.
	Unequal
	// Congruent (for communicators): the same group in the same order
	// and another context.
	Congruent
)

// Group returns the group of c's ranks, in c's order (MPI_Comm_group).
func (c *Comm) Group() (*Group, error) {
	if err := c.checkLocked(); err != nil {
		return nil, err
	}
	g := &Group{world: make([]int, c.size), me: c.e.rank}
	for i, ep := range c.eps {
		g.world[i] = ep.Rank
	}
	return g, nil
}

// Size returns the number of ranks in g.
func (g *Group) Size() int { return len(g.world) }

// Rank returns the calling rank's rank in g, or Undefined if it is not a
// member.
func (g *Group) Rank() int { return g.indexOf(g.me) }

// WorldRank returns the world rank of rank r of g, or -1 if r is out of
// range.
func (g *Group) WorldRank(r int) int {
	if r < 0 || r >= len(g.world) {
		return -1
	}
	return g.world[r]
}

func (g *Group) indexOf(world int) int {
	for i, w := range g.world {
		if w == world {
			return i
		}
	}
	return Undefined
}

func (g *Group) check() error {
	if g == nil {
		return fmt.Errorf("%w: nil group", ErrComm)
	}
	return nil
}

func (g *Group) derive(world []int) *Group { return &Group{world: world, me: g.me} }

// Incl returns the group of ranks[i] of g, in that order (MPI_Group_incl).
// A rank out of range or named twice is an error.
func (g *Group) Incl(ranks []int) (*Group, error) {
	if err := g.checkRanks(ranks); err != nil {
		return nil, err
	}
	out := make([]int, len(ranks))
	for i, r := range ranks {
		out[i] = g.world[r]
	}
	return g.derive(out), nil
}

// Excl returns g without ranks, the others keeping their order
// (MPI_Group_excl). A rank out of range or named twice is an error.
func (g *Group) Excl(ranks []int) (*Group, error) {
	if err := g.checkRanks(ranks); err != nil {
		return nil, err
	}
	drop := make([]bool, len(g.world))
	for _, r := range ranks {
		drop[r] = true
	}
	var out []int
	for i, w := range g.world {
		if !drop[i] {
			out = append(out, w)
		}
	}
	return g.derive(out), nil
}

func (g *Group) checkRanks(ranks []int) error {
	if err := g.check(); err != nil {
		return err
	}
	seen := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		if r < 0 || r >= len(g.world) {
			return fmt.Errorf("%w: rank %d of a group of %d", ErrRank, r, len(g.world))
		}
		if seen[r] {
			return fmt.Errorf("%w: rank %d named twice", ErrRank, r)
		}
		seen[r] = true
	}
	return nil
}

// Union returns the members of a, in a's order, followed by the members of
// b not in a, in b's order (MPI_Group_union).
func Union(a, b *Group) (*Group, error) {
	if err := errorsOf(a, b); err != nil {
		return nil, err
	}
	out := slices.Clone(a.world)
	for _, w := range b.world {
		if a.indexOf(w) == Undefined {
			out = append(out, w)
		}
	}
	return a.derive(out), nil
}

// Intersection returns the members of a that are in b, in a's order
// (MPI_Group_intersection).
func Intersection(a, b *Group) (*Group, error) {
	if err := errorsOf(a, b); err != nil {
		return nil, err
	}
	var out []int
	for _, w := range a.world {
		if b.indexOf(w) != Undefined {
			out = append(out, w)
		}
	}
	return a.derive(out), nil
}

// Difference returns the members of a that are not in b, in a's order
// (MPI_Group_difference).
func Difference(a, b *Group) (*Group, error) {
	if err := errorsOf(a, b); err != nil {
		return nil, err
	}
	var out []int
	for _, w := range a.world {
		if b.indexOf(w) == Undefined {
			out = append(out, w)
		}
	}
	return a.derive(out), nil
}

func errorsOf(a, b *Group) error {
	if err := a.check(); err != nil {
		return err
	}
	return b.check()
}

// TranslateRanks returns the rank in b of each rank of a in ranks, or
// Undefined for one that is not in b; ProcNull stays ProcNull
// (MPI_Group_translate_ranks).
func TranslateRanks(a *Group, ranks []int, b *Group) ([]int, error) {
	if err := errorsOf(a, b); err != nil {
		return nil, err
	}
	out := make([]int, len(ranks))
	for i, r := range ranks {
		switch {
		case r == ProcNull:
			out[i] = ProcNull
		case r < 0 || r >= len(a.world):
			return nil, fmt.Errorf("%w: rank %d of a group of %d", ErrRank, r, len(a.world))
		default:
			out[i] = b.indexOf(a.world[r])
		}
	}
	return out, nil
}

// Compare compares two groups: Ident, Similar or Unequal
// (MPI_Group_compare).
func Compare(a, b *Group) (int, error) {
	if err := errorsOf(a, b); err != nil {
		return 0, err
	}
	switch {
	case slices.Equal(a.world, b.world):
		return Ident, nil
	case len(a.world) != len(b.world):
		return Unequal, nil
	}
	x, y := slices.Clone(a.world), slices.Clone(b.world)
	slices.Sort(x)
	slices.Sort(y)
	if slices.Equal(x, y) {
		return Similar, nil
	}
	return Unequal, nil
}

// Create makes a communicator of the ranks of g, which must be a subset of
// c's and the same on every rank of c (MPI_Comm_create): collective over c.
// Ranks of c not in g get nil.
func (c *Comm) Create(ctx context.Context, g *Group) (*Comm, error) {
	if err := c.checkLocked(); err != nil {
		return nil, err
	}
	eps, err := c.groupEndpoints(g)
	if err != nil {
		return nil, err
	}
	member := g.Rank() != Undefined
	id, err := c.agreeID(ctx, member)
	if err != nil {
		return nil, err
	}
	if !member {
		return nil, nil
	}
	n := &Comm{e: c.e, rank: g.Rank(), size: len(eps), eps: eps}
	n.setID(id)
	return n, nil
}

// groupEndpoints returns the endpoints of g's members, checking that they
// are all ranks of c.
func (c *Comm) groupEndpoints(g *Group) ([]amigo.Endpoint, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	eps := make([]amigo.Endpoint, len(g.world))
	for i, w := range g.world {
		j := slices.IndexFunc(c.eps, func(ep amigo.Endpoint) bool { return ep.Rank == w })
		if j < 0 {
			return nil, fmt.Errorf("%w: world rank %d of the group is not in the communicator", ErrRank, w)
		}
		eps[i] = c.eps[j]
	}
	return eps, nil
}

// createGroupTags is where CreateGroup's tags begin in the parent's
// collective context: above the tags of the parent's first 2^30
// collectives, 1024 tags for each tag of CreateGroup.
const (
	createGroupBase   = 1 << 30
	createGroupRounds = 1 << 10
	// CreateGroupTagMax is the largest tag of CreateGroup.
	CreateGroupTagMax = 1<<20 - 1
)

// CreateGroup makes a communicator of the ranks of g, a subset of c's
// (MPI_Comm_create_group): collective over the members of g only, which
// all pass the same g and tag (at most CreateGroupTagMax); calls that may
// run at once over overlapping groups take different tags. A rank not in g
// may not call it.
func (c *Comm) CreateGroup(ctx context.Context, g *Group, tag int) (*Comm, error) {
	if err := c.checkLocked(); err != nil {
		return nil, err
	}
	if tag < 0 || tag > CreateGroupTagMax {
		return nil, fmt.Errorf("%w: CreateGroup tag %d: want 0 to %d", ErrTag, tag, CreateGroupTagMax)
	}
	eps, err := c.groupEndpoints(g)
	if err != nil {
		return nil, err
	}
	me := g.Rank()
	if me == Undefined {
		return nil, fmt.Errorf("%w: CreateGroup called by a rank outside the group", ErrRank)
	}
	// The agreement runs over the group, in the parent's collective
	// context, on tags of its own.
	tmp := &Comm{e: c.e, id: c.id, p2p: c.p2p, coll: c.coll, rank: me, size: len(eps), eps: eps,
		seq: uint32(createGroupBase + tag*createGroupRounds)}
	id, err := tmp.agreeID(ctx, true)
	if err != nil {
		return nil, err
	}
	n := &Comm{e: c.e, rank: me, size: len(eps), eps: eps}
	n.setID(id)
	return n, nil
}

// SplitShared, as the type of SplitType, splits a communicator by host.
const SplitShared = 1

// SplitType partitions c by splitType (MPI_Comm_split_type): with
// SplitShared, one communicator of the ranks of each host (those that can
// share memory), ranked by key and then by their rank in c. Undefined
// gives nil. Collective over c.
func (c *Comm) SplitType(ctx context.Context, splitType, key int) (*Comm, error) {
	if err := c.checkLocked(); err != nil {
		return nil, err
	}
	color := Undefined
	switch splitType {
	case Undefined:
	case SplitShared:
		// The color of a host: the lowest rank of c on it.
		cl := c.e.ac.Client()
		for r, ep := range c.eps {
			pi, err := cl.Peer(ep.Rank)
			if err != nil {
				return nil, err
			}
			if ep.Rank == c.e.rank || pi.SameHost {
				color = r
				break
			}
		}
	default:
		return nil, fmt.Errorf("%w: split type %d", ErrComm, splitType)
	}
	return c.Split(ctx, color, key)
}

// Idup starts duplicating c (MPI_Comm_idup): it returns the new
// communicator, to be used only once the request completed, and the
// request. It is collective over c, ordered with c's other collectives as
// it is called. The agreement on a context id runs on a goroutine of its
// own until every rank of c called Idup (or a peer failed): Wait's ctx
// bounds the caller, not that goroutine.
func (c *Comm) Idup() (*Comm, Request, error) {
	if c == nil {
		return nil, Request{}, c.check()
	}
	e := c.e
	e.lock()
	defer e.unlock()
	if err := c.check(); err != nil {
		return nil, Request{}, err
	}
	// The agreement takes its tags from c's collectives now, so that it is
	// ordered with them on every rank, and runs on a goroutine of its own.
	tmp := &Comm{e: e, id: c.id, p2p: c.p2p, coll: c.coll, rank: c.rank, size: c.size, eps: c.eps, seq: c.seq}
	c.seq += createGroupRounds
	d := &Comm{e: e, rank: c.rank, size: c.size, eps: slices.Clone(c.eps)}
	r := e.allocReq(reqColl)
	q := Request{r: r, gen: r.gen}
	go func() {
		id, err := tmp.agreeID(context.Background(), true)
		e.lock()
		if err == nil {
			d.setID(id)
		}
		e.complete(r, err)
		e.wakeSleepers()
		e.unlock()
	}()
	return d, q, nil
}
