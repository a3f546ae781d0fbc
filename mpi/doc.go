// Package mpi is an MPI-style message-passing layer over amigo: communicators,
// point-to-point messages matched by source and tag, and collectives. It is
// amigo's application messaging module: it talks to the AMI only through
// amigo's public API — one dispatch id, active messages whose header
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
//     *TruncateError (ErrTruncate); the buffer holds the message's first
//     bytes and nothing beyond it is written. It is the receiver's error
//     only: an announced message is fetched whole into scratch and its
//     first bytes copied, so that the sender's send completes. A
//     collective's receive expects its exact length: ranks that disagree
//     on a count get ErrCount (or ErrTruncate) rather than a buffer half
//     filled.
//  6. Goroutines of one rank that send in an order (one after the other,
//     or ordered by a channel or a lock) have their messages matched in
//     that order, as if one goroutine had sent them: every send is posted
//     to the AMI under the engine's lock (see Goroutines).
//
// Matched probes (Mprobe, Improbe) take the message they find out of the
// unexpected queue and hand it to the caller as a Message, which only
// Message.Recv or Irecv receives: goroutines that probe at once get
// distinct messages, where Probe leaves the message to any receive. A
// synchronous send (Ssend, Issend) carries a flag and a slot of its
// sender's; the receiver, when the message matches a receive, answers with
// an acknowledgement, and the send completes on it. ProcNull as a peer
// makes any point-to-point call complete at once, moving nothing.
// Persistent requests (SendInit, RecvInit, Start, Startall) name an
// operation once and are restarted without allocating.
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
// receive buffer (amigo's Message.Receive or Context.Accept), the AMI
// fetches the data by remote GET with a byte counter, acknowledges to the
// origin, and both sides' callbacks complete the two requests.
//
// # Progress
//
// The layer has no goroutine of its own: the calls that wait (Send, Recv,
// Wait, Probe, the blocking collectives) advance the amigo context while
// they wait, so every message, completion and collective schedule moves
// forward; Iprobe and Test advance it once. Nonblocking operations make
// progress only while some call advances the context — as in an MPI
// library without an asynchronous progress thread. Every waiting call
// takes a context.Context that bounds it: a peer that dies fails the
// operations that involve it (see Fault tolerance), and one that merely
// never sends ends the wait when ctx ends. The layer owns the amigo
// context World was called on: the program must not advance it itself.
//
// # Goroutines
//
// Any goroutine may call any function of the package at any time, on the
// same communicator or on different ones (MPI_THREAD_MULTIPLE). The model:
//
//  1. The layer of a context (its engine: queues, requests, schedules) is
//     guarded by one lock, which is the amigo context's hold
//     (amigo.Context.TryHold). Every call takes it for as long as it works
//     on the engine, and only the goroutine that holds it advances the
//     amigo context, so the handler and every completion run under it.
//  2. A call that waits takes the progress role if no goroutine has it: it
//     advances the context, holding the lock, until its own operation
//     completes. It gives way after its next Advance when another
//     goroutine wants the lock (that goroutine rings the context's
//     doorbell, so a driver asleep in amigo's Wait wakes at once), and
//     wakes the goroutines asleep on their own operations when an
//     operation completed or when it leaves the role.
//  3. A call that waits while another goroutine has the role sleeps on a
//     channel, without the lock, until the driver wakes it; it then finds
//     its operation complete, or takes the role itself. So blocking calls
//     from many goroutines all make progress, one at a time advancing the
//     context.
//  4. MPI's rules stay the caller's: the collectives of one communicator
//     are called in the same order on every rank (goroutines that run
//     collectives at once use a communicator each); a request is waited on
//     or tested by one goroutine at a time.
//
// What it costs a single goroutine: one compare-and-swap to take the lock
// and one store to give it back per call, what holding the context alone
// costs, and one atomic load per poll while it waits (BenchmarkAllreduceLockstep,
// which counts a small collective's instructions, measures it). Goroutines
// that contend pay for the hand-offs: BenchmarkMessageRate compares four
// goroutines per rank with one. A collective that runs without a schedule
// uses the engine's own scratch; while one runs, a collective started by
// another goroutine takes the schedule, whose messages are the same.
//
// # Collectives
//
// A collective is a schedule — rounds of sends and receives in the
// communicator's collective context, tagged with the collective's sequence
// number, with local copies and reductions between rounds, driven by
// completion callbacks — or, for the blocking collectives whose messages
// fit a descriptor (Barrier; Bcast, Reduce and Allreduce of small data;
// Allgather and Alltoall of small blocks), the same messages sent and
// received in a plain loop with the context held, without a schedule,
// request or buffer (coll.go, holdDirect). On a communicator whose ranks
// all run on one host, Barrier and Allreduce of up to
// Options.SharedCollMax bytes send no message: the ranks store their
// arrival and data into a shared-memory segment of the communicator and
// read each other's (coll_shm.go). Blocking collectives of other
// sizes wait for their schedule; nonblocking ones (Ibarrier, Ibcast,
// Iallreduce, Ireduce, Iallgather, Ialltoall, IneighborAllgather,
// IneighborAlltoall, Igather, Iscatter, their v forms, Iallgatherv,
// Ialltoallv, IreduceScatter, Iscan, Iexscan) return a Request, and the
// persistent collectives (AllreduceInit, BcastInit, ...) return a request
// each Start runs once. Algorithms are chosen by message
// size and rank count (see Options): recursive doubling for small Allreduce,
// reduce-scatter and allgather for large; a flat check-in and release for
// Barrier on up to 16 ranks, dissemination beyond; the root sending to
// each rank, binomial trees, pipelined chains and the AMI's multicast for
// Bcast; Bruck and rings for Allgather; and so on. Reductions
// with the predefined ops give every rank the same result; user ops made
// by NewOp may be non-commutative, and are then applied in rank order.
// MinLoc and MaxLoc reduce value-index pairs, kept whole.
//
// # Groups, communicators and topologies
//
// A Group is an ordered set of the job's ranks, made and combined locally
// (Incl, Excl, Union, Intersection, Difference, TranslateRanks, Compare).
// Communicators are made by Dup, Idup, Split, SplitType (SplitShared: the
// ranks of one host), Create (collective over the parent) and CreateGroup
// (collective over the group only); each takes a context id that every
// member agrees is free. CartCreate lays a communicator out on a grid;
// Coords, CartRank, Shift and CartSub work on it, and NeighborAllgather and
// NeighborAlltoall exchange with the grid's neighbours.
//
// IntercommCreate joins two disjoint groups in an Intercomm: its
// point-to-point calls name ranks of the other group, its collectives
// (Barrier, InterBcast, InterReduce, InterAllreduce, InterGather,
// InterScatter, InterAllgather, InterAlltoall) move data from one group to
// the other, with MPI's root convention (Root, ProcNull, or the root's rank
// in the other group), and Merge makes one intracommunicator of both. See
// intercomm.go.
//
// # One-sided communication
//
// A window (WinCreate, WinAllocate) is memory every rank of a communicator
// exposes to the others' Put, Get and accumulates, which travel as the
// AMI's GET, PUT and remote atomics: the target's program takes no part.
// An accumulate of many elements travels as one message the target's
// layer applies, plainly while no origin uses remote atomics on the
// window, else element by element with atomic instructions. Access epochs
// are opened by Fence or Post/Start (active target) or Lock and LockAll
// (passive target, a lock word the initiators take with remote atomics);
// Flush, FlushAll, Complete and Unlock complete operations at their
// targets, and Rput, Rget and Raccumulate return requests of their own.
// Target layouts may be strided (Vector). WinAllocateShared gives the
// ranks of a host one segment they load from and store to directly
// (SharedQuery); WinCreateDynamic a window whose memory each rank attaches
// and detaches alone. See win.go and the win_*.go files.
//
// # Fault tolerance
//
// A rank that fails — its process gone, its connection lost or silent
// beyond the adapter's timeout, its client closed, or lost by a launcher
// that lets the job go on (amirun --keep-going) — fails what involves it,
// within a bounded time, as the fault-tolerance chapter proposed for MPI
// (ULFM) has it: a receive from it, a send to it, a receive from AnySource
// while its failure is not acknowledged (FailureAck), a one-sided access
// to it, and every collective on a communicator that holds it, on every
// rank that survives, complete with a *ProcFailedError naming it
// (errors.Is(err, ErrProcFailed)). The survivors then agree (Agree, a
// fault-tolerant AND, uniform however many ranks fail during it), stop the
// others' pending operations (Revoke, ErrRevoked), and go on over a
// communicator of the ranks left (Shrink). A waiting rank asks the AMI
// once a millisecond about the ranks it waits for (the AMI fails the
// operations in flight with the others itself). World is not fault
// tolerant; Finalize is, once a failure is known. See ft.go.
//
// A wait that ends because its context.Context ended says what it waited
// for ("mpi: Recv from rank 1 tag 3: context deadline exceeded"), and
// wraps the context's error.
package mpi
