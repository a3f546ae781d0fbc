// Package amigo is an active messaging interface for Go: the system messaging
// layer that moves a parallel program's messages and memory between its
// ranks, in one process, between processes on one host, or across hosts.
//
// A job is N ranks. Each rank holds a Client: its rank, the job's size, the
// adapters that reach its peers, and its registered memory. A Client opens
// one or more Contexts; a Context is a progress domain that owns injection
// FIFOs toward its peers, receives packets, and runs callbacks. An Endpoint
// (rank, context index) addresses a peer's context.
//
// Instructions are Send (header and data, a local done callback, optionally a
// remote-completion callback), SendImmediate (small, copied at once, no
// callback), Put and Get on a peer's registered memory (PutV, GetV,
// PutStrided and GetStrided for lists of buffers and strided layouts;
// PutNotify for a Put whose notification runs a handler at the target),
// remote atomics on its words (Atomic, FetchAdd, CompareAndSwap), Rput and
// Rget between registered regions, Fence and Flush, and Multicast. Active messages are delivered to
// the Handler registered for their dispatch id with SetDispatch.
//
// # The progress contract
//
// amigo never runs a callback behind the program's back. Everything happens in
// this order:
//
//  1. Any goroutine may post an instruction to a context (Send, Put, Do, ...).
//     Posting copies the instruction into the context's lock-free instruction
//     queue and returns at once; it never waits for the network. Buffers named
//     by the instruction belong to amigo until its done callback runs (a
//     SendImmediate's bytes are copied before it returns). A small active
//     message with no callback (SendImmediate, or an inline Send with no
//     done callback) skips the queue when nobody is inside Advance and
//     nothing waits in the queue: the posting goroutine takes the context
//     for the few stores that write it into the peer's descriptor buffer,
//     which keeps each goroutine's messages in the order posted.
//  2. One goroutine at a time owns the context and calls Advance (directly,
//     through Wait, or through a Driver). Calling Advance from two goroutines
//     at once, or from inside a callback, is a programming error and panics.
//  3. Advance first moves posted instructions into the injection FIFO of
//     their peer. Small sends are written inline, descriptor and data, into
//     the peer's descriptor buffer; larger sends are announced by a SEND that
//     carries the key of the registered send buffer (one registration, shared
//     by the sends in flight from the same buffer: sendreg.go), and their
//     data follows at once as eager packets (stop.go: the receiver may answer STOP and
//     fetch the rest by RDMA); Put, Get and atomics become RDMA
//     descriptors (an atomic the adapter can perform at once, on a shared
//     allocation of a peer of this host, is performed by the posting
//     goroutine instead, and its callback is due at once, in the next
//     Advance). An instruction's done callback is listed in the FIFO's
//     pending callback list, in the entry of the slot its descriptor took.
//     An inline send over a link whose descriptor buffer the peer reads in
//     place (in-process, shared memory) is complete once written: its done
//     callback runs at once, unless an earlier callback of that FIFO is
//     still pending, in which case it keeps its turn in the list.
//     When a FIFO is full the instruction stays queued, in order, behind the
//     peer's other instructions: Advance does not wait for room.
//  4. Advance lets adapters whose engine is software run it (the in-process
//     adapter's GET/PUT engine, by default).
//  5. Advance runs the completion check of every FIFO with listed callbacks:
//     it takes a snapshot of the FIFO's transfer counter, which the adapter's
//     engine increments asynchronously after each descriptor it finished, and
//     calls, in injection order, the callbacks of the descriptors the snapshot
//     counts complete. Then it retries the instructions queued in step 3,
//     since completed slots are free again.
//  6. Advance polls the adapters for arrived packets and runs each handler.
//     A handler sees the header and, for an inline message, the data in place
//     (valid until it returns); for an announced one it names a receive buffer
//     (Message.Receive), keeps the announcement (Message.Defer), or declines.
//     Eager packets land in the named buffer, or, while none is named, in the
//     context's bounded unexpected-data budget; what they do not bring is
//     fetched by RDMA GET from the sender's registered buffer (or PUT by the
//     sender, in the "put" STOP variant). Once the byte counter reaches zero
//     the receiver acknowledges to the sender and calls its own done
//     callback; the ACK makes the sender call its done callback.
//  7. Advance runs the local completions handlers produced, then injects the
//     instructions that handlers posted, so a reply leaves in the same
//     Advance.
//  8. Advance returns the number of events it handled. Zero means it found
//     nothing to do.
//
// A goroutine that sends and then waits for the answer can hold the context
// across both (Context.Hold): it takes the context once, before its message
// leaves, its sends are written straight into the peers' descriptor buffers,
// and it waits without taking the context again. Package mpi holds the
// context for each blocking collective.
//
// Descriptors are published with release stores, not fences (package
// internal/order): a consumer about to sleep arms its doorbell and then
// issues a barrier across processors before it looks for work a last time.
//
// Wait advances until a condition holds or a context.Context ends: it spins
// on Advance (while nothing but an arrival can end the wait, three idle
// rounds of four only poll the ports), then yields the processor, then
// sleeps until the context's
// doorbell is rung by a peer that delivered a packet, an engine that
// completed a transfer, or a goroutine that posted an instruction. Every
// sleep is bounded (Config.SleepMax). A Driver is a goroutine that owns a
// context and does the same for programs that never call Advance.
//
// On a host that runs more ranks than it has processors (an adapter between
// processes says so, counting the processors the host's ranks may run on
// together, the union of their affinity masks), a waiting context does not
// spin: after every Advance
// that found nothing it gives the processor to another process
// (sched_yield), and the rank runs
// its Go code on one thread (Config.OversubscribedProcs): the peer it waits
// for may be waiting for the processor it would spin on.
//
// # Errors
//
// Errors that concern an instruction's arguments are returned when it is
// posted. Everything that happens later comes to its done callback, which
// always receives an error (nil on success); errors that involve a peer are
// a *PeerError naming it. A peer that closes or dies fails every operation in
// flight with it; the rest of the job goes on. Errors that belong to no
// operation go to Config.OnError and are counted in Stats.
//
// Close is an orderly goodbye: a context first sends the acknowledgements
// it owes (bounded by a second), and its adapters tell each peer they are
// leaving after what they queued for it, so a peer that is still running
// completes what the closing rank received and logs no failure.
//
// # Ordering
//
// Messages from one context to another arrive in the order they were posted.
// Nothing is lost or duplicated; a failure is reported, never silent.
//
// # Handlers and messages that come first
//
// A peer may send the moment its Open returned, before this rank's program
// reached SetDispatch. Nothing is lost to that race, and no barrier is
// needed between registering handlers and sending:
//
//  1. Handlers given in Config.Handlers are registered on every context
//     before its adapters can deliver anything to it.
//  2. A message for a dispatch id with no handler is held, inside Advance,
//     within the context's unexpected-data budget (Config.UnexpectedBudget;
//     a held SEND's eager data counts as for a deferred message, and a large
//     one is stopped at once). Once SetDispatch registers a handler for its
//     id, the next Advance delivers it, before later messages for that id,
//     which wait behind it; messages for other ids are not held up.
//  3. A message still without a handler Config.DispatchGrace after it
//     arrived (default 1s), or one that finds the budget full, is refused.
//     A send that waits for the receiver (a rendezvous or streamed Send, a
//     Send with RemoteDone) completes with ErrNoDispatch. An inline message
//     that asked for no acknowledgement (SendImmediate, or a Send whose done
//     callback is its local completion) is reported at both ends: the
//     receiver passes a *DispatchError to its Config.OnError, and tells the
//     sender, which passes the same error to its own ("amigo: dispatch 5
//     from rank 0 at rank 1: no handler registered") and counts it in
//     Stats.RefusedByPeer. The sender's done callback is not delayed for
//     it: an inline Send is complete once its data left, and waiting for
//     the receiver's verdict would cost every small message a round trip;
//     a program that must know asks for remote completion.
//
// Multicast announcements are not held: a target with no handler declines
// at once.
//
// # Eager SEND with receiver-driven STOP (stop.go)
//
// A Send too large to travel inline is announced by a SEND packet (message
// id, total size, key of the registered send buffer) and its data streamed
// at once as EAGER packets of increasing size, from the top (offset 0) of the
// send buffer down. The sender keeps no eager limit and no credits; a full
// injection FIFO only pauses the stream until there is room.
//
// The receiver decides from data-flow conditions. If its handler named a
// buffer and the data still to come is small (Config.StopAbove), the eager
// packets land in it and the receiver acknowledges once the byte counter
// reaches zero. If no buffer is named yet (the handler deferred the message),
// eager packets are kept in the context's unexpected-data budget
// (Config.UnexpectedBudget) as long as it has room. Otherwise, or when a
// buffer is named for a large remainder, the receiver answers STOP, in one of
// three variants (Config.StopVariant):
//
//   - discard: the receiver drops the eager data and, once it has a buffer,
//     GETs the whole send buffer; ACK.
//   - keep: the receiver keeps the eager data (from the top) and at once GETs
//     from the bottom; the sender answers STOP with a CTS giving the bytes it
//     streamed; the receiver GETs the untransferred middle; ACK.
//   - put: the STOP carries the key of the registered receive buffer (a
//     second STOP does, if the first went out before there was a buffer); the
//     sender PUTs what it did not stream and sends FIN.
//
// A message the receiver would stop as soon as it named a buffer (above the
// stop threshold, or above the link's lower one while other messages to the
// peer stream: a window) is announced with FlagHold, and its sender streams
// nothing until the receiver says GO. A receiver that fetches it needs no
// STOP (discard); one that defers it, has no handler for it yet, or would
// not stop it, answers GO, and the message streams as above. The first
// message of a window, which looked alone when it was sent, streams its
// first packet at once and holds the rest once others are announced behind
// it; the receiver stops it, or says GO, when it sees the second
// announcement.
//
// Every packet about the message carries the sender's message id; the
// receiver finds its own state by (peer, id). EAGER, CTS and FIN travel on the
// same FIFO as the SEND, so they arrive in order: when a CTS or FIN arrives,
// every eager packet sent before it has arrived. An eager packet that finds the
// receiver unable to keep it in order (it dropped one before) is dropped; the
// receiver's contiguous count then says where RDMA must start.
//
// # RDMA multicast (mcast.go)
//
// The origin announces the data (length, storage reference) to the targets
// with a request to send, in one of two ways:
//
//   - MulticastForward: the request travels along the targets unprocessed:
//     each target forwards it to the next before its handler runs, then, once
//     the handler named a buffer, checks in with the origin (CTS, carrying the
//     key of the registered buffer). The origin's check-in counter starts at
//     the number of targets and goes down with each CTS.
//   - MulticastStoreForward: each target's handler names a buffer first; the
//     target adds the buffer's key to the request and forwards it; the last
//     target returns the request, with every target's key, to the origin,
//     which serves as the acknowledgement of all.
//
// A target's "received" callback (the done of its Receive) runs once all the
// data is in its buffer and it has passed every piece on to the next target:
// after it, the target may stop advancing or close without holding up the
// chain.
//
// At zero, the origin sends the data once: it PUTs it, piece by piece, into
// the first target's buffer, and after each piece tells the first target it
// was deposited (MCDATA); each target forwards each piece the same way to the
// next, pipelined, so the origin's outbound bytes are about the data's size
// whatever the number of targets. The first MCDATA carries the chain of
// targets and keys. The last target tells the origin when it has everything;
// then the origin's "sent" callback runs.
//
// A target that declines (its handler names no buffer), or that dies, or
// whose forwarding fails, fails the multicast: the origin calls it off at
// every other target (MCABORT) and completes "sent" with an error naming the
// target; the other targets complete "received" with that error.
//
// # Seeing inside a job
//
// Three environment variables, read when a process opens its first client,
// show what the library does; unset, they cost nothing on the message
// paths. AMIGO_METRICS_ADDR (MetricsAddrEnv) serves every context's Stats
// over HTTP in the Prometheus text format, and they are published through
// expvar as "amigo" in any case. AMIGO_TRACE (TraceEnv) makes sends,
// handlers, receives, Put, Get and Barrier regions and tasks of the Go
// execution tracer, for go tool trace. AMIGO_LOG (LogEnv) logs set-up,
// connections and peer failures through log/slog, with rank and peer as
// attributes.
package amigo
