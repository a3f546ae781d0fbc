package mpi

import (
	"context"
	"fmt"
)

// The v-variants and the block reduce-scatter on intercommunicators. The
// vector collectives move each block straight between the ranks that own
// it, in one step of the collective's sends and receives (xfer): the
// counts differ from rank to rank, so there is nothing for a leader to
// gather first. As in MPI, results come from the remote group; in a rooted
// one the root passes Root, its group mates ProcNull (and move nothing),
// the other group the root's rank in it.

// vBlocks checks counts and displacements of n blocks in a buffer of size
// elements.
func vBlocks(what string, size int, counts, displs []int, n int) error {
	if len(counts) != n || len(displs) != n {
		return fmt.Errorf("%w: %s: %d counts and %d displacements for %d ranks", ErrCount, what, len(counts), len(displs), n)
	}
	for j := range n {
		if counts[j] < 0 || displs[j] < 0 || displs[j] > size || counts[j] > size-displs[j] {
			return fmt.Errorf("%w: %s: block %d (%d elements at %d) outside a buffer of %d", ErrCount, what, j, counts[j], displs[j], size)
		}
	}
	return nil
}

// InterGatherv gathers the send buffers of the other group's ranks into
// recv at the root (root Root): rank j's counts[j] elements at displs[j]
// (MPI_Gatherv on an intercommunicator; counts and displs have RemoteSize
// entries and count only at the root).
func InterGatherv[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, counts, displs []int, root int) error {
	t, isRoot, rootGroup, err := ic.rooted(ctx, root)
	if err != nil {
		return err
	}
	switch {
	case isRoot:
		if err = vBlocks("InterGatherv", len(recv), counts, displs, ic.x.size); err != nil {
			return err
		}
		recvs := make([]xmsg, ic.x.size)
		for j := range recvs {
			recvs[j] = xmsg{Bytes(recv[displs[j] : displs[j]+counts[j]]), j}
		}
		err = ic.xfer(ctx, t, nil, recvs)
	case rootGroup:
	default:
		err = ic.xfer(ctx, t, []xmsg{{Bytes(send), root}}, nil)
	}
	if err != nil {
		return errorf("mpi: InterGatherv: %w", err)
	}
	return nil
}

// InterScatterv sends counts[j] elements of the root's send buffer at
// displs[j] to rank j of the other group, into its recv (MPI_Scatterv on
// an intercommunicator).
func InterScatterv[T Numeric](ctx context.Context, ic *Intercomm, send []T, counts, displs []int, recv []T, root int) error {
	t, isRoot, rootGroup, err := ic.rooted(ctx, root)
	if err != nil {
		return err
	}
	switch {
	case isRoot:
		if err = vBlocks("InterScatterv", len(send), counts, displs, ic.x.size); err != nil {
			return err
		}
		sends := make([]xmsg, ic.x.size)
		for j := range sends {
			sends[j] = xmsg{Bytes(send[displs[j] : displs[j]+counts[j]]), j}
		}
		err = ic.xfer(ctx, t, sends, nil)
	case rootGroup:
	default:
		err = ic.xfer(ctx, t, nil, []xmsg{{Bytes(recv), root}})
	}
	if err != nil {
		return errorf("mpi: InterScatterv: %w", err)
	}
	return nil
}

// InterAllgatherv leaves in recv, on every rank of each group, the send
// buffers of the other group's ranks: rank j's counts[j] elements at
// displs[j] (RemoteSize entries) (MPI_Allgatherv on an intercommunicator).
func InterAllgatherv[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, counts, displs []int) error {
	if err := ic.check(); err != nil {
		return err
	}
	p := ic.x.size
	if err := vBlocks("InterAllgatherv", len(recv), counts, displs, p); err != nil {
		return err
	}
	t := ic.next(ctx)
	sends, recvs := make([]xmsg, p), make([]xmsg, p)
	for j := range p {
		sends[j] = xmsg{Bytes(send), j}
		recvs[j] = xmsg{Bytes(recv[displs[j] : displs[j]+counts[j]]), j}
	}
	if err := ic.xfer(ctx, t, sends, recvs); err != nil {
		return errorf("mpi: InterAllgatherv: %w", err)
	}
	return nil
}

// InterAlltoallv sends sendCounts[j] elements of send at sendDispls[j] to
// rank j of the other group and receives recvCounts[j] elements from it
// into recv at recvDispls[j] (RemoteSize entries each) (MPI_Alltoallv on
// an intercommunicator).
func InterAlltoallv[T Numeric](ctx context.Context, ic *Intercomm, send []T, sendCounts, sendDispls []int, recv []T, recvCounts, recvDispls []int) error {
	if err := ic.check(); err != nil {
		return err
	}
	p := ic.x.size
	if err := vBlocks("InterAlltoallv send", len(send), sendCounts, sendDispls, p); err != nil {
		return err
	}
	if err := vBlocks("InterAlltoallv recv", len(recv), recvCounts, recvDispls, p); err != nil {
		return err
	}
	t := ic.next(ctx)
	sends, recvs := make([]xmsg, p), make([]xmsg, p)
	for j := range p {
		sends[j] = xmsg{Bytes(send[sendDispls[j] : sendDispls[j]+sendCounts[j]]), j}
		recvs[j] = xmsg{Bytes(recv[recvDispls[j] : recvDispls[j]+recvCounts[j]]), j}
	}
	if err := ic.xfer(ctx, t, sends, recvs); err != nil {
		return errorf("mpi: InterAlltoallv: %w", err)
	}
	return nil
}

// InterReduceScatterBlock combines with op, element by element, the send
// buffers of this group's ranks and scatters the result over the other
// group, block j of len(recv) elements to its rank j; recv receives this
// rank's block of the other group's combination (MPI_Reduce_scatter_block
// on an intercommunicator). Every send holds RemoteSize blocks.
func InterReduceScatterBlock[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, op Op) error {
	if err := ic.check(); err != nil {
		return err
	}
	n := len(recv)
	if len(send) != n*ic.x.size {
		return fmt.Errorf("%w: InterReduceScatterBlock: send of %d elements for blocks of %d to each of %d remote ranks", ErrCount, len(send), n, ic.x.size)
	}
	t := ic.next(ctx)
	acc := make([]T, len(send))
	var theirs []T
	if ic.x.rank == ic.leader {
		theirs = make([]T, n*ic.local.size)
	}
	err := Reduce(ctx, ic.local, send, acc, op, ic.leader)
	if err == nil && ic.x.rank == ic.leader {
		err = ic.swap(ctx, t, Bytes(acc), Bytes(theirs))
	}
	if err == nil {
		err = Scatter(ctx, ic.local, theirs, recv, ic.leader)
	}
	if err != nil {
		return errorf("mpi: InterReduceScatterBlock: %w", err)
	}
	return nil
}

// InterReduceScatter combines with op, element by element, the send
// buffers of this group's ranks and scatters the result over the other
// group by that group's counts: its rank j receives counts[j] of its
// counts, the elements that follow those of its ranks below j. recv
// receives this rank's block of the other group's combination, counts[r]
// elements of this group's counts for rank r, and the rest of recv is left
// alone (MPI_Reduce_scatter on an intercommunicator). Within a group every
// rank passes the same counts, one per rank of the group; every send holds
// as many elements as the counts add up to, and the counts of both groups
// add up to the same total, as MPI requires.
func InterReduceScatter[T Numeric](ctx context.Context, ic *Intercomm, send, recv []T, counts []int, op Op) error {
	if err := ic.check(); err != nil {
		return err
	}
	p, r := ic.local.size, ic.local.rank
	if len(counts) != p {
		return fmt.Errorf("%w: InterReduceScatter: %d counts for a group of %d ranks", ErrCount, len(counts), p)
	}
	total := 0
	for _, n := range counts {
		if n < 0 {
			return fmt.Errorf("%w: InterReduceScatter: negative count", ErrCount)
		}
		if err := op.checkPairs(n); err != nil {
			return err
		}
		total += n
	}
	if len(send) != total || len(recv) < counts[r] {
		return fmt.Errorf("%w: InterReduceScatter: send of %d elements for counts totalling %d, recv of %d for %d", ErrCount, len(send), total, len(recv), counts[r])
	}
	if err := noOverlap(send, recv); err != nil {
		return err
	}
	if send == nil {
		send = []T{} // nothing to send; nil would mean in place at the leader
	}
	t := ic.next(ctx)
	var acc, theirs []T
	displs := make([]int, p)
	if ic.x.rank == ic.leader {
		acc, theirs = make([]T, total), make([]T, total)
		for j := 1; j < p; j++ {
			displs[j] = displs[j-1] + counts[j-1]
		}
	}
	err := Reduce(ctx, ic.local, send, acc, op, ic.leader)
	if err == nil && ic.x.rank == ic.leader {
		err = ic.swap(ctx, t, Bytes(acc), Bytes(theirs))
	}
	if err == nil {
		err = Scatterv(ctx, ic.local, theirs, counts, displs, recv[:counts[r]], ic.leader)
	}
	if err != nil {
		return errorf("mpi: InterReduceScatter: %w", err)
	}
	return nil
}
