package mpi

import (
	"context"
	"fmt"
	"slices"

	"github.com/amigo-hpc/amigo"
)

// Intercommunicators (MPI chapter "Groups, Contexts, Communicators",
// Inter-Communication). An Intercomm joins two disjoint groups, the local
// and the remote one: point-to-point operations name ranks of the remote
// group, and the collectives MPI defines on intercommunicators move data
// from one group to the other.
//
// An Intercomm runs in two context ids free on every rank of both groups:
// one carries the traffic between the groups (point-to-point in its
// point-to-point context, the collectives' messages in its collective
// context, tagged with the number of collectives the intercommunicator
// started, which every rank of both groups counts alike), the other is a
// private intracommunicator of the local group for the collectives' local
// steps. The two groups agree on them as an intracommunicator does
// (agreeID), with one step more: the leaders of the groups exchange the
// sets their groups agreed on, and each broadcasts the intersection in its
// group.

// Root, as the root argument of a collective on an intercommunicator, is
// the rank that is the root, in the root's group; the other ranks of that
// group pass ProcNull, and the ranks of the other group the root's rank in
// its group.
const Root = -3

// Intercomm is an intercommunicator. Any goroutine may use it, as a Comm.
type Intercomm struct {
	local *Comm // the local group, in a context of its own
	x     *Comm // rank: the local rank; ranks and endpoints: the remote group
	// leader and rleader are the ranks of the two groups' leaders in
	// their groups: they carry the collectives' steps between groups.
	leader, rleader int
	// first: the local group comes first in a Merge of equal high.
	first bool
	// nbTail is closed when the last nonblocking collective started on
	// ic is over (intercomm_nb.go); nil when none was. Under the
	// engine's lock.
	nbTail chan struct{}
}

// IntercommCreate makes an intercommunicator of the local group of local
// and a remote group (MPI_Intercomm_create). Collective over local and the
// remote group's communicator: the two leaders, localLeader of local and
// remoteLeader of peer, are both members of peer, and use it with tag to
// exchange their groups; the rest of peer takes no part. The groups must be
// disjoint.
func IntercommCreate(ctx context.Context, local *Comm, localLeader int, peer *Comm, remoteLeader, tag int) (*Intercomm, error) {
	if err := local.checkLocked(); err != nil {
		return nil, err
	}
	if localLeader < 0 || localLeader >= local.size {
		return nil, fmt.Errorf("%w: IntercommCreate: local leader %d of a communicator of %d", ErrRank, localLeader, local.size)
	}
	if err := checkTag(tag, false); err != nil {
		return nil, err
	}
	leader := local.rank == localLeader
	if leader {
		if err := peer.checkLocked(); err != nil {
			return nil, err
		}
		if err := peer.checkPeer(remoteLeader, false); err != nil {
			return nil, err
		}
		if remoteLeader == peer.rank {
			return nil, fmt.Errorf("%w: IntercommCreate: the remote leader is the calling rank", ErrRank)
		}
	}
	// The leaders exchange their groups' endpoints (rank and context of
	// each member) with the first world rank among them, which orders the
	// groups for Merge; each leader broadcasts what it received.
	mine := make([]int64, 2*local.size)
	for i, ep := range local.eps {
		mine[2*i], mine[2*i+1] = int64(ep.Rank), int64(ep.Context)
	}
	// Header: the remote group's size and its leader's rank in it.
	hdr := make([]int64, 2)
	if leader {
		theirs := []int64{int64(local.size), int64(localLeader)}
		if _, err := peer.Sendrecv(ctx, Bytes(theirs), remoteLeader, tag, Bytes(hdr), remoteLeader, tag); err != nil {
			return nil, errorf("mpi: IntercommCreate: exchanging with the remote leader: %w", err)
		}
	}
	if err := Bcast(ctx, local, hdr, localLeader); err != nil {
		return nil, errorf("mpi: IntercommCreate: %w", err)
	}
	rsize, rleader := int(hdr[0]), int(hdr[1])
	if rsize <= 0 || rleader < 0 || rleader >= rsize {
		return nil, fmt.Errorf("%w: IntercommCreate: the remote leader reported a group of %d led by its rank %d", ErrComm, rsize, rleader)
	}
	remote := make([]int64, 2*rsize)
	if leader {
		if _, err := peer.Sendrecv(ctx, Bytes(mine), remoteLeader, tag, Bytes(remote), remoteLeader, tag); err != nil {
			return nil, errorf("mpi: IntercommCreate: exchanging groups: %w", err)
		}
	}
	if err := Bcast(ctx, local, remote, localLeader); err != nil {
		return nil, errorf("mpi: IntercommCreate: %w", err)
	}
	reps := make([]amigo.Endpoint, rsize)
	for i := range reps {
		reps[i] = amigo.Endpoint{Rank: int(remote[2*i]), Context: int(remote[2*i+1])}
		for _, ep := range local.eps {
			if ep == reps[i] {
				return nil, fmt.Errorf("%w: IntercommCreate: %v is in both groups", ErrComm, ep)
			}
		}
	}
	ids, err := agreeAcross(ctx, local, 2, func(ctx context.Context, send, recv []byte) error {
		if !leader {
			return nil
		}
		_, err := peer.Sendrecv(ctx, send, remoteLeader, tag, recv, remoteLeader, tag)
		return err
	}, localLeader)
	if err != nil {
		return nil, errorf("mpi: IntercommCreate: %w", err)
	}
	ic := &Intercomm{leader: localLeader, rleader: rleader}
	ic.first = minRank(local.eps) < minRank(reps)
	ic.local = &Comm{e: local.e, rank: local.rank, size: local.size, eps: slices.Clone(local.eps)}
	ic.local.setID(ids[1])
	ic.x = &Comm{e: local.e, rank: local.rank, size: rsize, eps: reps}
	ic.x.setID(ids[0])
	return ic, nil
}

func minRank(eps []amigo.Endpoint) int {
	m := eps[0].Rank
	for _, ep := range eps[1:] {
		m = min(m, ep.Rank)
	}
	return m
}

// agreeAcross agrees on n context ids free on every rank of local and
// of the remote group: swap, called on every rank of local, exchanges the
// set local agreed on with the remote group's (a leader's part; the other
// ranks do nothing), and the leader broadcasts the intersection.
func agreeAcross(ctx context.Context, local *Comm, n int, swap func(ctx context.Context, send, recv []byte) error, leader int) ([]int, error) {
	ids := make([]int, n)
	err := local.agreeIDs(ctx, true, ids, func(ctx context.Context, mask []uint64) error {
		theirs := make([]uint64, len(mask))
		if local.rank == leader {
			if err := swap(ctx, Bytes(mask), Bytes(theirs)); err != nil {
				return err
			}
			for i := range mask {
				mask[i] &= theirs[i]
			}
		}
		return Bcast(ctx, local, mask, leader)
	})
	return ids, err
}

func (ic *Intercomm) check() error {
	if ic == nil || ic.x == nil {
		return fmt.Errorf("%w: nil intercommunicator", ErrComm)
	}
	return ic.x.checkLocked()
}

// Rank returns the calling rank's rank in the local group.
func (ic *Intercomm) Rank() int { return ic.x.rank }

// Size returns the size of the local group (MPI_Comm_size).
func (ic *Intercomm) Size() int { return ic.local.size }

// RemoteSize returns the size of the remote group
// (MPI_Comm_remote_size).
func (ic *Intercomm) RemoteSize() int { return ic.x.size }

// Group returns the local group.
func (ic *Intercomm) Group() (*Group, error) { return ic.local.Group() }

// RemoteGroup returns the remote group (MPI_Comm_remote_group).
func (ic *Intercomm) RemoteGroup() (*Group, error) { return ic.x.Group() }

// Send sends buf to rank dest of the remote group (see Comm.Send).
func (ic *Intercomm) Send(ctx context.Context, buf []byte, dest, tag int) error {
	return ic.x.Send(ctx, buf, dest, tag)
}

// Isend starts a send to rank dest of the remote group.
func (ic *Intercomm) Isend(buf []byte, dest, tag int) (Request, error) {
	return ic.x.Isend(buf, dest, tag)
}

// Ssend is Send that completes once the receive is matched.
func (ic *Intercomm) Ssend(ctx context.Context, buf []byte, dest, tag int) error {
	return ic.x.Ssend(ctx, buf, dest, tag)
}

// Recv receives from rank src of the remote group (or AnySource); the
// status names the source by its rank in the remote group.
func (ic *Intercomm) Recv(ctx context.Context, buf []byte, src, tag int) (Status, error) {
	return ic.x.Recv(ctx, buf, src, tag)
}

// Irecv starts a receive from rank src of the remote group.
func (ic *Intercomm) Irecv(buf []byte, src, tag int) (Request, error) {
	return ic.x.Irecv(buf, src, tag)
}

// Sendrecv sends to dest and receives from src, both of the remote group.
func (ic *Intercomm) Sendrecv(ctx context.Context, sendbuf []byte, dest, sendtag int, recvbuf []byte, src, recvtag int) (Status, error) {
	return ic.x.Sendrecv(ctx, sendbuf, dest, sendtag, recvbuf, src, recvtag)
}

// Iprobe reports whether a message from src of the remote group waits.
func (ic *Intercomm) Iprobe(src, tag int) (bool, Status, error) {
	return ic.x.Iprobe(src, tag)
}

// Probe waits for a message from src of the remote group.
func (ic *Intercomm) Probe(ctx context.Context, src, tag int) (Status, error) {
	return ic.x.Probe(ctx, src, tag)
}

// Dup returns an intercommunicator of the same groups in new contexts:
// collective over both groups.
func (ic *Intercomm) Dup(ctx context.Context) (*Intercomm, error) {
	if err := ic.check(); err != nil {
		return nil, err
	}
	t := ic.next(ctx)
	ids, err := agreeAcross(ctx, ic.local, 2, func(ctx context.Context, send, recv []byte) error {
		return ic.swap(ctx, t, send, recv)
	}, ic.leader)
	if err != nil {
		return nil, errorf("mpi: Intercomm.Dup: %w", err)
	}
	d := &Intercomm{leader: ic.leader, rleader: ic.rleader, first: ic.first}
	d.local = &Comm{e: ic.local.e, rank: ic.local.rank, size: ic.local.size, eps: slices.Clone(ic.local.eps)}
	d.local.setID(ids[1])
	d.x = &Comm{e: ic.x.e, rank: ic.x.rank, size: ic.x.size, eps: slices.Clone(ic.x.eps)}
	d.x.setID(ids[0])
	return d, nil
}

// Merge makes an intracommunicator of both groups (MPI_Intercomm_merge):
// the group whose ranks pass high false comes first; if both pass the same,
// the group holding the lower world rank does. Collective over both
// groups.
func (ic *Intercomm) Merge(ctx context.Context, high bool) (*Comm, error) {
	if err := ic.check(); err != nil {
		return nil, err
	}
	t := ic.next(ctx)
	var h, rh [1]int64
	if high {
		h[0] = 1
	}
	if ic.x.rank == ic.leader {
		if err := ic.swap(ctx, t, Bytes(h[:]), Bytes(rh[:])); err != nil {
			return nil, errorf("mpi: Intercomm.Merge: %w", err)
		}
	}
	if err := Bcast(ctx, ic.local, rh[:], ic.leader); err != nil {
		return nil, errorf("mpi: Intercomm.Merge: %w", err)
	}
	first := ic.first
	if (h[0] != 0) != (rh[0] != 0) {
		first = !high
	}
	t = ic.next(ctx)
	ids, err := agreeAcross(ctx, ic.local, 1, func(ctx context.Context, send, recv []byte) error {
		return ic.swap(ctx, t, send, recv)
	}, ic.leader)
	if err != nil {
		return nil, errorf("mpi: Intercomm.Merge: %w", err)
	}
	m := &Comm{e: ic.local.e, size: ic.local.size + ic.x.size}
	if first {
		m.eps = append(slices.Clone(ic.local.eps), ic.x.eps...)
		m.rank = ic.local.rank
	} else {
		m.eps = append(slices.Clone(ic.x.eps), ic.local.eps...)
		m.rank = ic.x.size + ic.local.rank
	}
	m.setID(ids[0])
	return m, nil
}

// Free releases the intercommunicator and its contexts.
func (ic *Intercomm) Free() error {
	if err := ic.check(); err != nil {
		return err
	}
	if err := ic.x.Free(); err != nil {
		return err
	}
	return ic.local.Free()
}

// next counts a collective on ic, as every rank of both groups does, and
// returns its tag. A collective called while nonblocking ones run first
// waits for them (intercomm_nb.go), so that every rank counts them in the
// order it called them; ctx ends the wait.
func (ic *Intercomm) next(ctx context.Context) uint32 {
	e := ic.x.e
	e.lock()
	tail := ic.nbTail
	e.unlock()
	if tail != nil && ctx.Value(nbTurn{}) == nil {
		select {
		case <-tail:
		case <-ctx.Done():
		}
	}
	e.lock()
	defer e.unlock()
	t := ic.x.seq
	ic.x.seq++
	return t
}

// xmsg is one message of a collective's step between the groups: to or
// from rank peer of the remote group.
type xmsg struct {
	buf  []byte
	peer int
}

// xfer runs one step of the collective tagged t between the groups: the
// sends and receives, all at once, in ic's collective context.
func (ic *Intercomm) xfer(ctx context.Context, t uint32, sends, recvs []xmsg) error {
	x := ic.x
	e := x.e
	e.lock()
	defer e.unlock()
	if err := x.check(); err != nil {
		return err
	}
	s := e.newSched(x)
	x.seq-- // newSched counted it; next already had
	s.tag = int32(t & TagUB)
	for _, m := range recvs {
		s.recv(m.buf, m.peer)
	}
	for _, m := range sends {
		s.send(m.buf, m.peer)
	}
	s.end()
	return x.run(ctx, s)
}

// swap exchanges send for recv between the leaders, in the collective
// tagged t.
func (ic *Intercomm) swap(ctx context.Context, t uint32, send, recv []byte) error {
	return ic.xfer(ctx, t, []xmsg{{send, ic.rleader}}, []xmsg{{recv, ic.rleader}})
}

// rooted begins a rooted collective on ic: it checks ic and root, and
// counts the collective (next), returning its tag and the caller's part.
func (ic *Intercomm) rooted(ctx context.Context, root int) (t uint32, isRoot, rootGroup bool, err error) {
	if err = ic.check(); err != nil {
		return 0, false, false, err
	}
	if isRoot, rootGroup, err = ic.interRoot(root); err != nil {
		return 0, false, false, err
	}
	return ic.next(ctx), isRoot, rootGroup, nil
}

// interRoot checks root, a collective's root argument on an
// intercommunicator, and says whether the calling rank is the root, in the
// root's group, or in the other group.
func (ic *Intercomm) interRoot(root int) (isRoot, rootGroup bool, err error) {
	switch {
	case root == Root:
		return true, true, nil
	case root == ProcNull:
		return false, true, nil
	case root >= 0 && root < ic.x.size:
		return false, false, nil
	}
	return false, false, fmt.Errorf("%w: root %d of an intercommunicator with a remote group of %d (Root, ProcNull or a remote rank)", ErrRank, root, ic.x.size)
}

// Barrier returns once every rank of both groups has entered it.
func (ic *Intercomm) Barrier(ctx context.Context) error {
	if err := ic.check(); err != nil {
		return err
	}
	t := ic.next(ctx)
	if err := ic.local.Barrier(ctx); err != nil {
		return errorf("mpi: Intercomm.Barrier: %w", err)
	}
	if ic.x.rank == ic.leader {
		if err := ic.swap(ctx, t, nil, nil); err != nil {
			return errorf("mpi: Intercomm.Barrier: %w", err)
		}
	}
	return ic.local.Barrier(ctx)
}

// InterBcast broadcasts buf from the root (root Root) to every rank of the
// other group, which pass the root's rank; the root's group mates pass
// ProcNull and move nothing (MPI_Bcast on an intercommunicator).
func InterBcast[T Numeric](ctx context.Context, ic *Intercomm, buf []T, root int) error {
	t, isRoot, rootGroup, err := ic.rooted(ctx, root)
	if err != nil {
		return err
	}
	b := Bytes(buf)
	switch {
	case isRoot:
		err = ic.xfer(ctx, t, []xmsg{{b, ic.rleader}}, nil)
	case rootGroup:
	default:
		if ic.x.rank == ic.leader {
			err = ic.xfer(ctx, t, nil, []xmsg{{b, root}})
		}
		if err == nil {
			err = Bcast(ctx, ic.local, buf, ic.leader)
		}
	}
	if err != nil {
		return errorf("mpi: InterBcast: %w", err)
	}
	return nil
}

// InterReduce combines with op the send buffers of the ranks of the group
// that does not hold the root, into recv at the root (root Root); the
// root's group mates pass ProcNull and the other group the root's rank.
func InterReduce[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, op Op, root int) error {
	t, isRoot, rootGroup, err := ic.rooted(ctx, root)
	if err != nil {
		return err
	}
	switch {
	case isRoot:
		err = ic.xfer(ctx, t, nil, []xmsg{{Bytes(recv), ic.rleader}})
	case rootGroup:
	default:
		acc := make([]T, len(send))
		if err = Reduce(ctx, ic.local, send, acc, op, ic.leader); err == nil && ic.x.rank == ic.leader {
			err = ic.xfer(ctx, t, []xmsg{{Bytes(acc), root}}, nil)
		}
	}
	if err != nil {
		return errorf("mpi: InterReduce: %w", err)
	}
	return nil
}

// InterAllreduce leaves in recv, on every rank of each group, the
// combination with op of the other group's send buffers.
func InterAllreduce[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, op Op) error {
	if err := ic.check(); err != nil {
		return err
	}
	if len(send) != len(recv) {
		return fmt.Errorf("%w: InterAllreduce: recv of %d elements for send of %d", ErrCount, len(recv), len(send))
	}
	t := ic.next(ctx)
	acc := make([]T, len(send))
	err := Reduce(ctx, ic.local, send, acc, op, ic.leader)
	if err == nil && ic.x.rank == ic.leader {
		err = ic.swap(ctx, t, Bytes(acc), Bytes(recv))
	}
	if err == nil {
		err = Bcast(ctx, ic.local, recv, ic.leader)
	}
	if err != nil {
		return errorf("mpi: InterAllreduce: %w", err)
	}
	return nil
}

// InterGather gathers the send buffers of the other group's ranks, in
// their order, into recv at the root (root Root; RemoteSize blocks).
func InterGather[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, root int) error {
	t, isRoot, rootGroup, err := ic.rooted(ctx, root)
	if err != nil {
		return err
	}
	switch {
	case isRoot:
		if len(recv)%ic.x.size != 0 {
			return fmt.Errorf("%w: InterGather: recv of %d elements for a remote group of %d", ErrCount, len(recv), ic.x.size)
		}
		err = ic.xfer(ctx, t, nil, []xmsg{{Bytes(recv), ic.rleader}})
	case rootGroup:
	default:
		var all []T
		if ic.x.rank == ic.leader {
			all = make([]T, len(send)*ic.local.size)
		}
		if err = Gather(ctx, ic.local, send, all, ic.leader); err == nil && ic.x.rank == ic.leader {
			err = ic.xfer(ctx, t, []xmsg{{Bytes(all), root}}, nil)
		}
	}
	if err != nil {
		return errorf("mpi: InterGather: %w", err)
	}
	return nil
}

// InterScatter sends block i of the root's send buffer (root Root;
// RemoteSize blocks) to rank i of the other group, into its recv.
func InterScatter[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, root int) error {
	t, isRoot, rootGroup, err := ic.rooted(ctx, root)
	if err != nil {
		return err
	}
	switch {
	case isRoot:
		if len(send)%ic.x.size != 0 {
			return fmt.Errorf("%w: InterScatter: send of %d elements for a remote group of %d", ErrCount, len(send), ic.x.size)
		}
		err = ic.xfer(ctx, t, []xmsg{{Bytes(send), ic.rleader}}, nil)
	case rootGroup:
	default:
		var all []T
		if ic.x.rank == ic.leader {
			all = make([]T, len(recv)*ic.local.size)
			err = ic.xfer(ctx, t, nil, []xmsg{{Bytes(all), root}})
		}
		if err == nil {
			err = Scatter(ctx, ic.local, all, recv, ic.leader)
		}
	}
	if err != nil {
		return errorf("mpi: InterScatter: %w", err)
	}
	return nil
}

// InterAllgather leaves in recv, on every rank of each group, the send
// buffers of the other group's ranks in their order (RemoteSize blocks).
func InterAllgather[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T) error {
	if err := ic.check(); err != nil {
		return err
	}
	if len(recv) != len(send)*ic.x.size {
		return fmt.Errorf("%w: InterAllgather: recv of %d elements for %d from each of %d remote ranks", ErrCount, len(recv), len(send), ic.x.size)
	}
	t := ic.next(ctx)
	var all []T
	if ic.x.rank == ic.leader {
		all = make([]T, len(send)*ic.local.size)
	}
	err := Gather(ctx, ic.local, send, all, ic.leader)
	if err == nil && ic.x.rank == ic.leader {
		err = ic.swap(ctx, t, Bytes(all), Bytes(recv))
	}
	if err == nil {
		err = Bcast(ctx, ic.local, recv, ic.leader)
	}
	if err != nil {
		return errorf("mpi: InterAllgather: %w", err)
	}
	return nil
}

// InterAlltoall sends block j of send to rank j of the other group and
// receives into block j of recv from it (RemoteSize blocks each).
func InterAlltoall[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T) error {
	if err := ic.check(); err != nil {
		return err
	}
	p := ic.x.size
	if len(send) != len(recv) || len(send)%p != 0 {
		return fmt.Errorf("%w: InterAlltoall: send of %d and recv of %d elements for a remote group of %d", ErrCount, len(send), len(recv), p)
	}
	t := ic.next(ctx)
	sb, rb := Bytes(send), Bytes(recv)
	bs := len(sb) / p
	sends, recvs := make([]xmsg, p), make([]xmsg, p)
	for j := range p {
		sends[j] = xmsg{sb[j*bs : (j+1)*bs], j}
		recvs[j] = xmsg{rb[j*bs : (j+1)*bs], j}
	}
	if err := ic.xfer(ctx, t, sends, recvs); err != nil {
		return errorf("mpi: InterAlltoall: %w", err)
	}
	return nil
}
