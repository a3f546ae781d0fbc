package mpi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"

	"github.com/amigo-hpc/amigo"
)

// Wildcards and special values, as MPI names them.
const (
	// AnySource, as the source of a receive or probe, matches any rank.
	AnySource = -1
	// AnyTag, as the tag of a receive or probe, matches any tag.
	AnyTag = -1
	// Undefined, as the color of Split, leaves the rank out of every new
	// communicator; Waitany returns it when every request is null.
	Undefined = -1
	// TagUB is the largest tag.
	TagUB = math.MaxInt32
	// ProcNull, as the destination of a send or the source of a receive or
	// probe, is no rank (MPI_PROC_NULL): the operation completes at once
	// and moves nothing; a receive's status has Source ProcNull, Tag
	// AnyTag and Count 0.
	ProcNull = -2
)

// procNullStatus is the status of a receive from ProcNull.
var procNullStatus = Status{Source: ProcNull, Tag: AnyTag}

// idWords sizes the set of communicator context ids: 64 per word.
const idWords = 32

// Comm is a communicator: an ordered group of ranks and a context that
// isolates its messages from every other communicator's. Messages match on
// (communicator, source, tag); collectives run in a context of their own, so
// they never match point-to-point messages. Any goroutine may use a Comm
// (see the package doc, Goroutines).
type Comm struct {
	e          *engine
	id         int
	p2p, coll  uint32 // context ids of point-to-point and collective traffic
	rank, size int
	eps        []amigo.Endpoint // endpoint of each rank
	seq        uint32           // collectives started, which tags their messages
	freed      bool
	cart       *cart // the Cartesian topology, if any (topo.go)
	// inflight counts the operations on c not yet completed; a Free
	// while some are sets freeing, and the last to complete gives the
	// context id back.
	inflight int
	freeing  bool
	ft       commFT // failures and revocation (ft.go)
	// shm is the segment of the collectives through shared memory, in
	// state shmState, or the error that made it shmBroken (coll_shm.go).
	shm      *shmColl
	shmState uint8
	shmErr   error
}

func (c *Comm) setID(id int) {
	c.id = id
	c.p2p = uint32(2 * id)
	c.coll = uint32(2*id + 1)
	c.e.register(c)
}

// Rank returns the calling rank's rank in c.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks in c.
func (c *Comm) Size() int { return c.size }

// WorldRank returns the rank in the world (the job) of rank r of c, or -1
// if r is out of range.
func (c *Comm) WorldRank(r int) int {
	if r < 0 || r >= c.size {
		return -1
	}
	return c.eps[r].Rank
}

// Context returns the amigo context the communicator runs on.
func (c *Comm) Context() *amigo.Context { return c.e.ac }

// Stats returns the counters of the mpi layer of c's context, shared by all
// communicators on it.
func (c *Comm) Stats() Stats {
	c.e.lock()
	defer c.e.unlock()
	return c.e.stats
}

// checkLocked is check with the engine locked, for calls that lock it only
// around their own steps.
func (c *Comm) checkLocked() error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return c.check()
}

func (c *Comm) check() error {
	switch {
	case c == nil:
		return fmt.Errorf("%w: nil", ErrComm)
	case c.freed:
		return fmt.Errorf("%w: freed", ErrComm)
	case c.e.closed:
		return ErrClosed
	}
	return nil
}

// Dup returns a communicator with the same group as c and a new context:
// collective over c.
func (c *Comm) Dup(ctx context.Context) (*Comm, error) {
	if err := c.checkLocked(); err != nil {
		return nil, err
	}
	id, err := c.agreeID(ctx, true)
	if err != nil {
		return nil, err
	}
	d := &Comm{e: c.e, rank: c.rank, size: c.size, eps: slices.Clone(c.eps), cart: c.cart}
	d.setID(id)
	return d, nil
}

// Split partitions c into one communicator per color: the ranks that pass
// the same color form one, ranked by key and then by their rank in c. A rank
// that passes Undefined gets nil. Collective over c.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	if err := c.checkLocked(); err != nil {
		return nil, err
	}
	if color < 0 && color != Undefined {
		return nil, fmt.Errorf("%w: Split color %d: want non-negative or Undefined", ErrCount, color)
	}
	mine := []int64{int64(color), int64(key)}
	all := make([]int64, 2*c.size)
	if err := Allgather(ctx, c, mine, all); err != nil {
		return nil, errorf("mpi: Split: %w", err)
	}
	id, err := c.agreeID(ctx, color != Undefined)
	if err != nil {
		return nil, err
	}
	if color == Undefined {
		return nil, nil
	}
	var members []int
	for r := 0; r < c.size; r++ {
		if all[2*r] == int64(color) {
			members = append(members, r)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int {
		ka, kb := all[2*a+1], all[2*b+1]
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return a - b
	})
	s := &Comm{e: c.e, size: len(members), eps: make([]amigo.Endpoint, len(members))}
	for i, r := range members {
		s.eps[i] = c.eps[r]
		if r == c.rank {
			s.rank = i
		}
	}
	s.setID(id)
	return s, nil
}

// agreeID finds a context id free on every rank of c, by a bitwise-and
// Allreduce of the sets of free ids, and takes it if take is set.
//
// Goroutines may create communicators from different communicators at
// once; the ids a rank offers must not be taken by another agreement
// before its own ends. So one agreement at a time offers the rank's free
// ids, and the others offer none, which makes their result empty on every
// rank: they all try again (an extra word, set only by ranks that offered,
// tells "none free" from "not offered"). Among the agreements that had to
// wait, the one on the communicator of the lowest id goes next, so two
// ranks cannot keep handing the offer to different agreements.
func (c *Comm) agreeID(ctx context.Context, take bool) (int, error) {
	var id [1]int
	err := c.agreeIDs(ctx, take, id[:], nil)
	return id[0], err
}

// agreeIDs is agreeID for len(ids) ids at once. If cross is given, it is
// called on every rank of c with the set c agreed on, and must leave in it
// the set every rank of a second group agreed on as well (the two groups
// of an intercommunicator): the ids are then free on both.
func (c *Comm) agreeIDs(ctx context.Context, take bool, ids []int, cross func(ctx context.Context, mask []uint64) error) error {
	e := c.e
	for {
		var mask [idWords + 1]uint64
		e.lock()
		owner := !e.idOwned && (e.idNext < 0 || e.idNext >= c.id)
		if owner {
			e.idOwned = true
			if e.idNext == c.id {
				e.idNext = -1
			}
			copy(mask[:], e.ids[:])
			mask[idWords] = 1
		} else if e.idNext < 0 || c.id < e.idNext {
			e.idNext = c.id
		}
		e.unlock()
		err := Allreduce(ctx, c, nil, mask[:], Band)
		if err == nil && cross != nil {
			err = cross(ctx, mask[:])
		}
		e.lock()
		if owner {
			e.idOwned = false
		}
		if err != nil {
			if e.idNext == c.id {
				e.idNext = -1
			}
			e.unlock()
			return errorf("mpi: agreeing on a context id: %w", err)
		}
		found := 0
		for w := 0; w < idWords && found < len(ids); w++ {
			for free := mask[w]; free != 0 && found < len(ids); free &= free - 1 {
				ids[found] = w*64 + bits.TrailingZeros64(free)
				found++
			}
		}
		if found == len(ids) {
			if take {
				for _, id := range ids {
					e.ids[id/64] &^= 1 << (id % 64)
				}
			}
			e.unlock()
			return nil
		}
		e.unlock()
		if mask[idWords] != 0 {
			return ErrContextIDs
		}
		runtime.Gosched()
	}
}

// track counts r as an operation on c in flight, until it completes.
func (c *Comm) track(r *request) {
	r.counted = c
	c.inflight++
}

// untrack ends an operation on c; the last of a freed communicator gives
// its context id back.
func (c *Comm) untrack() {
	c.inflight--
	if c.inflight == 0 && c.freeing {
		c.freeing = false
		c.releaseID()
	}
}

func (c *Comm) releaseID() { c.e.ids[c.id/64] |= 1 << (c.id % 64) }

// Finalize ends the mpi layer of a rank: collective over the world w, it
// returns once every rank called it and every message this rank sent has
// been taken by its receiver, so that the process may close its amigo client
// and exit at once. Then it frees w (see Free).
func Finalize(ctx context.Context, w *Comm) error {
	if w == nil {
		return w.check()
	}
	w.e.lock()
	defer w.e.unlock()
	if err := w.check(); err != nil {
		return err
	}
	if w.id != 0 {
		return fmt.Errorf("%w: Finalize of a communicator other than the world", ErrComm)
	}
	if w.ft.nfailed == 0 && !w.ft.revoked {
		s := w.e.newSched(w)
		s.sync = true
		s.barrier()
		err := w.run(ctx, s)
		if err != nil && !errors.Is(err, ErrProcFailed) && !errors.Is(err, ErrRevoked) {
			return errorf("mpi: Finalize: %w", err)
		}
		if err == nil {
			return w.free()
		}
	}
	// Ranks failed: the survivors meet in an agreement instead, which
	// waits for every rank not known failed (ft.go).
	if _, err := w.e.agree(ctx, w, []uint64{1}); err != nil {
		return errorf("mpi: Finalize: %w", err)
	}
	return w.free()
}

// Free releases a communicator made by Dup or Split, and its context id.
// Operations on it must have completed. Freeing the world communicator
// detaches the mpi layer from its amigo context: every later message for the
// layer is dropped, and World may be called again.
func (c *Comm) Free() error {
	if c == nil {
		return c.check()
	}
	c.e.lock()
	defer c.e.unlock()
	return c.free()
}

func (c *Comm) free() error {
	if err := c.check(); err != nil {
		return err
	}
	c.freed = true
	c.e.deregister(c)
	c.freeShared()
	if c.id != 0 {
		if c.inflight > 0 {
			// MPI_Comm_free: the operations in flight complete; the
			// context id is given back after the last.
			c.freeing = true
			return nil
		}
		c.releaseID()
		return nil
	}
	c.e.closed = true
	c.e.unregister()
	return nil
}
