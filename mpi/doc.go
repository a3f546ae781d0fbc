// Package mpi is an MPI-style message-passing layer over amigo: communicators,
// point-to-point messages matched by source and tag, and collectives. It is
// the application messaging module of seed 002: it talks to the AMI only
// through amigo's public API — one dispatch id, active messages whose header
// carries the match data, and the AMI's rendezvous for large data.
//
//	w, err := mpi.World(ctx, client.Context(0), nil)
//	...
//	if w.Rank() == 0 {
//		err = mpi.Send(ctx, w, []float64{1, 2, 3}, 1, 7)
//	} else if w.Rank() == 1 {
//		buf := make([]float64, 3)
//		st, err := mpi.Recv(ctx, w, buf, 0, 7)
//	}
//	err = mpi.Allreduce(ctx, w, local, global, mpi.Sum)
//
// # Buffers and types
//
// Communicator methods take []byte. The generic functions (Send, Recv,
// Allreduce, ...) take slices of any Go numeric type and view them as bytes
// with unsafe.Slice, without copying and without reflection; reductions
// pick a kernel for the element type by a type switch on a nil pointer. A
// Status's Count is in bytes; Elements converts it.
//
// # Matching
//
// A message carries match data in its AMI header: the context id of its
// communicator (each communicator has one for point-to-point traffic and
// one for collectives), the sender's rank in the communicator, and the tag.
// A receive names a source or AnySource and a tag or AnyTag. The rules:
//
//  1. A message matches a receive of the same context id whose source and tag
//     are equal to its own or wildcards.
//  2. A message that arrives when receives fitting it are posted goes to the
//     one posted first.
//  3. A receive that is posted when messages fitting it have arrived takes
//     the one that arrived first.
//  4. Hence MPI's non-overtaking order: two messages from one sender that
//     both fit one receive are received in the order they were sent, since
//     the AMI delivers one context's messages to another in order, whatever
//     their size — the match is made when the message (or its announcement)
//     arrives, not when its data lands.
//  5. A message longer than the receive buffer fails the receive with a
//     *TruncateError (ErrTruncate) and writes nothing beyond the buffer; if
//     it travelled inline the buffer holds its first bytes, if it was
//     announced it is declined, which fails the sender's send as well.
//
// The posted queue holds receives that found no message; the pending
// (unexpected) queue holds messages that found no receive: a copy of their
// data if they travelled inline (in buffers kept for reuse, up to
// Options.UnexpectedRetain bytes), or the AMI's Deferred announcement if
// they were large, their data staying at the sender. Both queues hash exact
// match data into buckets and keep wildcards (and, for pending messages, the
// arrival order) in lists, so a receive or a message finds its match without
// walking unrelated traffic.
//
// # Data transfer
//
// A message of at most amigo.ImmediateMax minus the 16-byte header is
// copied when sent (SendImmediate): Send returns at once and Isend's
// request is complete. A larger one is handed to the AMI by reference
// (Send); the request completes when the AMI is done with the buffer. Up to
// amigo's InlineMax the data travels inline; beyond, the AMI announces it
// and the target administers the transfer, as seed 002 describes: when the
// announcement and a receive meet — in the handler if the receive was
// posted, in Irecv if the announcement was pending — the layer names the
// receive buffer (Message.Receive or Context.Accept), the AMI fetches the
// data by remote GET with a byte counter, acknowledges to the origin, and
// both sides' callbacks complete the two requests.
//
// # Progress
//
// The layer has no goroutine of its own. It runs on the goroutine that owns
// its amigo context (World's caller): every call must come from that
// goroutine, and the calls that wait (Send, Recv, Wait, Probe, the blocking
// collectives) advance the context while they wait, so every message,
// completion and collective schedule moves forward. Iprobe and Test advance
// it once. Nonblocking operations make progress only while some call
// advances the context — as in an MPI library without an asynchronous
// progress thread. Every waiting call takes a context.Context that bounds
// it: a peer that dies fails the AMI operations with it (a *amigo.PeerError
// comes back), and one that merely never sends ends the wait when ctx ends.
//
// # Collectives
//
// Every collective is a schedule: rounds of sends and receives in the
// communicator's collective context, tagged with the collective's sequence
// number, with local copies and reductions between rounds, driven by
// completion callbacks. Blocking collectives wait for their schedule;
// nonblocking ones (Ibarrier, Ibcast, Iallreduce, Ireduce, Iallgather,
// Ialltoall) return a Request. Algorithms are chosen by message size and
// rank count (see Options): recursive doubling for small Allreduce,
// reduce-scatter and allgather for large; a flat check-in and release for
// Barrier on up to 16 ranks, dissemination beyond; the root sending to
// each rank, binomial trees, pipelined chains and the AMI's multicast for
// Bcast; Bruck and rings for Allgather; and so on. Reductions
// with the predefined ops give every rank the same result; user ops made
// by NewOp may be non-commutative, and are then applied in rank order.
//
// # One-sided communication
//
// A window (WinCreate, WinAllocate) is memory every rank of a communicator
// exposes to the others' Put, Get and accumulates, which travel as the
// AMI's GET, PUT and remote atomics: the target's program takes no part.
// Access epochs are opened by Fence (active target) or Lock and LockAll
// (passive target, a lock word the initiators take with remote atomics);
// Flush, FlushAll and Unlock complete operations at their targets. See
// win.go.
package mpi
