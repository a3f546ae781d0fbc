package mpi

import (
	"context"
	"fmt"
	"slices"
)

// Cartesian topologies (MPI chapter "Process Topologies"): a communicator
// whose ranks are laid out on a grid of len(dims) dimensions, rank r at
// the coordinates of r in row-major order (the last dimension varies
// fastest), each dimension periodic or not; and the neighbourhood
// collectives, which exchange with the 2·len(dims) neighbours of that
// grid, in MPI's order: for each dimension, the neighbour below (-1), then
// the one above (+1). Beyond the edge of a dimension that is not periodic
// the neighbour is ProcNull: nothing is sent there, and the receive block
// of that neighbour is left as it was.

type cart struct {
	dims    []int
	periods []bool
	coords  []int // the calling rank's
}

// DimsCreate fills the zero entries of dims with a balanced factorization
// of nnodes (MPI_Dims_create): the product of dims becomes nnodes, the
// entries that were not zero are kept, and the ones filled are as close to
// each other as can be, in non-increasing order. A negative entry, or set
// entries whose product does not divide nnodes, is an error.
func DimsCreate(nnodes int, dims []int) error {
	if nnodes < 1 {
		return fmt.Errorf("%w: DimsCreate of %d nodes", ErrCount, nnodes)
	}
	fixed, free := 1, 0
	for _, d := range dims {
		switch {
		case d < 0:
			return fmt.Errorf("%w: DimsCreate: negative dimension %d", ErrCount, d)
		case d == 0:
			free++
		default:
			fixed *= d
		}
	}
	if nnodes%fixed != 0 {
		return fmt.Errorf("%w: DimsCreate: %d nodes are not a multiple of the set dimensions' %d", ErrCount, nnodes, fixed)
	}
	m := nnodes / fixed
	if free == 0 {
		if m != 1 {
			return fmt.Errorf("%w: DimsCreate: dimensions of %d nodes for %d", ErrCount, fixed, nnodes)
		}
		return nil
	}
	// The prime factors, largest first, each to the dimension that is
	// smallest so far.
	var primes []int
	for p := 2; p*p <= m; p++ {
		for m%p == 0 {
			primes = append(primes, p)
			m /= p
		}
	}
	if m > 1 {
		primes = append(primes, m)
	}
	slices.Reverse(primes)
	got := make([]int, free)
	for i := range got {
		got[i] = 1
	}
	for _, p := range primes {
		got[slices.Index(got, slices.Min(got))] *= p
	}
	slices.Sort(got)
	slices.Reverse(got)
	j := 0
	for i, d := range dims {
		if d == 0 {
			dims[i] = got[j]
			j++
		}
	}
	return nil
}

// CartCreate makes a communicator of c's first prod(dims) ranks laid out
// on a grid of dims, periodic in the dimensions whose periods entry is set
// (MPI_Cart_create; ranks keep their order, reorder is allowed and not
// used). Ranks beyond the grid get nil. Collective over c.
func (c *Comm) CartCreate(ctx context.Context, dims []int, periods []bool, reorder bool) (*Comm, error) {
	if err := c.checkLocked(); err != nil {
		return nil, err
	}
	if len(periods) != len(dims) {
		return nil, fmt.Errorf("%w: CartCreate: %d periods for %d dimensions", ErrCount, len(periods), len(dims))
	}
	n := 1
	for _, d := range dims {
		if d < 1 {
			return nil, fmt.Errorf("%w: CartCreate: dimension %d", ErrCount, d)
		}
		n *= d
		if n > c.size {
			break
		}
	}
	if n > c.size {
		return nil, fmt.Errorf("%w: CartCreate: a grid of %v on %d ranks", ErrCount, dims, c.size)
	}
	color := 0
	if c.rank >= n {
		color = Undefined
	}
	g, err := c.Split(ctx, color, c.rank)
	if err != nil || g == nil {
		return nil, err
	}
	g.cart = &cart{dims: slices.Clone(dims), periods: slices.Clone(periods)}
	g.cart.coords = g.cart.coordsOf(g.rank)
	return g, nil
}

func (t *cart) coordsOf(rank int) []int {
	coords := make([]int, len(t.dims))
	for i := len(t.dims) - 1; i >= 0; i-- {
		coords[i] = rank % t.dims[i]
		rank /= t.dims[i]
	}
	return coords
}

// rankOf returns the rank at coords, wrapping periodic dimensions, or
// ProcNull beyond the edge of one that is not.
func (t *cart) rankOf(coords []int) int {
	r := 0
	for i, x := range coords {
		d := t.dims[i]
		if x < 0 || x >= d {
			if !t.periods[i] {
				return ProcNull
			}
			x = (x%d + d) % d
		}
		r = r*d + x
	}
	return r
}

func (c *Comm) topo() (*cart, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if c.cart == nil {
		return nil, fmt.Errorf("%w: no Cartesian topology", ErrComm)
	}
	return c.cart, nil
}

// Cart returns c's grid, periods and the calling rank's coordinates
// (MPI_Cart_get); a communicator without a Cartesian topology is an error.
func (c *Comm) Cart() (dims []int, periods []bool, coords []int, err error) {
	t, err := c.topoLocked()
	if err != nil {
		return nil, nil, nil, err
	}
	return slices.Clone(t.dims), slices.Clone(t.periods), slices.Clone(t.coords), nil
}

func (c *Comm) topoLocked() (*cart, error) {
	if c == nil {
		return nil, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return c.topo()
}

// Coords returns the coordinates of rank r of c (MPI_Cart_coords).
func (c *Comm) Coords(r int) ([]int, error) {
	t, err := c.topoLocked()
	if err != nil {
		return nil, err
	}
	if r < 0 || r >= c.size {
		return nil, fmt.Errorf("%w: rank %d of a communicator of %d", ErrRank, r, c.size)
	}
	return t.coordsOf(r), nil
}

// CartRank returns the rank at coords (MPI_Cart_rank): coordinates beyond
// a periodic dimension wrap around; beyond one that is not, they are an
// error.
func (c *Comm) CartRank(coords []int) (int, error) {
	t, err := c.topoLocked()
	if err != nil {
		return 0, err
	}
	if len(coords) != len(t.dims) {
		return 0, fmt.Errorf("%w: %d coordinates for %d dimensions", ErrCount, len(coords), len(t.dims))
	}
	r := t.rankOf(coords)
	if r == ProcNull {
		return 0, fmt.Errorf("%w: coordinates %v outside the grid %v", ErrRank, coords, t.dims)
	}
	return r, nil
}

// Shift returns the ranks a shift by disp along dimension dir exchanges
// with (MPI_Cart_shift): src, the rank disp below the calling rank, and
// dest, the rank disp above; ProcNull beyond the edge of a dimension that
// is not periodic.
func (c *Comm) Shift(dir, disp int) (src, dest int, err error) {
	t, err := c.topoLocked()
	if err != nil {
		return 0, 0, err
	}
	if dir < 0 || dir >= len(t.dims) {
		return 0, 0, fmt.Errorf("%w: Shift along dimension %d of %d", ErrCount, dir, len(t.dims))
	}
	at := slices.Clone(t.coords)
	at[dir] = t.coords[dir] - disp
	src = t.rankOf(at)
	at[dir] = t.coords[dir] + disp
	dest = t.rankOf(at)
	return src, dest, nil
}

// CartSub partitions c into the sub-grids that keep the dimensions whose
// remain entry is set (MPI_Cart_sub): the ranks that share their
// coordinates in the other dimensions form one communicator, with the
// Cartesian topology of the kept dimensions. Collective over c.
func (c *Comm) CartSub(ctx context.Context, remain []bool) (*Comm, error) {
	t, err := c.topoLocked()
	if err != nil {
		return nil, err
	}
	if len(remain) != len(t.dims) {
		return nil, fmt.Errorf("%w: CartSub: %d entries for %d dimensions", ErrCount, len(remain), len(t.dims))
	}
	color, key := 0, 0
	sub := &cart{}
	for i, d := range t.dims {
		if remain[i] {
			key = key*d + t.coords[i]
			sub.dims = append(sub.dims, d)
			sub.periods = append(sub.periods, t.periods[i])
		} else {
			color = color*d + t.coords[i]
		}
	}
	s, err := c.Split(ctx, color, key)
	if err != nil {
		return nil, err
	}
	if len(sub.dims) == 0 {
		// Every dimension dropped: a grid of one rank with no dimension.
		sub.dims, sub.periods = []int{}, []bool{}
	}
	s.cart = sub
	sub.coords = sub.coordsOf(s.rank)
	return s, nil
}

// neighbors returns the ranks of c's neighbours in MPI's order.
func (t *cart) neighbors() []int {
	out := make([]int, 0, 2*len(t.dims))
	at := slices.Clone(t.coords)
	for i := range t.dims {
		at[i] = t.coords[i] - 1
		out = append(out, t.rankOf(at))
		at[i] = t.coords[i] + 1
		out = append(out, t.rankOf(at))
		at[i] = t.coords[i]
	}
	return out
}

// NeighborAllgather sends send to each of the 2·len(dims) neighbours of
// the calling rank on c's Cartesian topology and receives each
// neighbour's into its block of recv, in neighbour order
// (MPI_Neighbor_allgather); recv holds 2·len(dims) blocks of len(send).
func NeighborAllgather[T Numeric](ctx context.Context, c *Comm, send, recv []T) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := neighborSched(c, Bytes(send), Bytes(recv), false)
	if err != nil {
		return err
	}
	return c.run(ctx, s)
}

// NeighborAlltoall sends block k of send to neighbour k and receives
// neighbour k's into block k of recv (MPI_Neighbor_alltoall); send and
// recv hold 2·len(dims) blocks of the same length.
func NeighborAlltoall[T Numeric](ctx context.Context, c *Comm, send, recv []T) error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := neighborSched(c, Bytes(send), Bytes(recv), true)
	if err != nil {
		return err
	}
	return c.run(ctx, s)
}

// IneighborAllgather starts a NeighborAllgather.
func IneighborAllgather[T Numeric](c *Comm, send, recv []T) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := neighborSched(c, Bytes(send), Bytes(recv), false)
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

// IneighborAlltoall starts a NeighborAlltoall.
func IneighborAlltoall[T Numeric](c *Comm, send, recv []T) (Request, error) {
	if c == nil {
		return Request{}, c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	s, err := neighborSched(c, Bytes(send), Bytes(recv), true)
	if err != nil {
		return Request{}, err
	}
	return c.start(s), nil
}

// neighborSched exchanges with the neighbours one dimension and one
// direction at a time: first every rank sends toward -1 and receives from
// +1, then the reverse. So the two messages a rank may get from one
// neighbour (a periodic dimension of 1 or 2 ranks, where the neighbour
// below is the one above) arrive in different rounds and land in the
// right blocks.
func neighborSched(c *Comm, send, recv []byte, alltoall bool) (*sched, error) {
	t, err := c.topo()
	if err != nil {
		return nil, err
	}
	k := 2 * len(t.dims)
	bs := len(send)
	if alltoall {
		if k == 0 || len(send)%k != 0 {
			return nil, fmt.Errorf("%w: send of %d bytes for %d neighbours", ErrCount, len(send), k)
		}
		bs = len(send) / k
	}
	if len(recv) != k*bs {
		return nil, fmt.Errorf("%w: recv of %d bytes for %d neighbours of %d", ErrCount, len(recv), k, bs)
	}
	if err := noOverlap(send, recv); err != nil {
		return nil, err
	}
	nb := t.neighbors()
	s := c.e.newSched(c)
	block := func(b []byte, i int) []byte {
		if !alltoall {
			return b // Allgather sends the whole of send to each
		}
		return b[i*bs : (i+1)*bs]
	}
	for d := range t.dims {
		for _, dir := range [2]int{0, 1} { // toward -1, then toward +1
			to, from := 2*d+dir, 2*d+1-dir
			if nb[to] != ProcNull && bs > 0 {
				s.send(block(send, to), nb[to])
			}
			if nb[from] != ProcNull && bs > 0 {
				s.recv(recv[from*bs:(from+1)*bs], nb[from])
			}
			s.end()
		}
	}
	return s, nil
}
