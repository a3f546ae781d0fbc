// Package tcp is amigo's adapter between hosts: ranks in different
// processes, on one machine or many, connected by TCP.
//
// # What happens, in order
//
//  1. New listens (on Options.Addr, or an address it picks: the interface
//     that routes to the launcher, or loopback when every rank shares the
//     host) and publishes host:port under KVSKey through the job's
//     bootstrap, or Options.Advertise when something in front of the
//     listener (a port mapping, a tunnel, a proxy) is what peers must
//     dial. After the job's fence, Start reads every peer's address.
//  2. Port.Link, on first use of a link (a local context to a remote one),
//     returns at once and connects in the background; packets injected
//     meanwhile leave once the connection is up. The initiator (the link's
//     owner) sends packets and GET and PUT requests on the connection; the
//     target answers on the same connection. A pair of contexts has one
//     connection, which carries the links of both ways: a link takes the
//     connection its peer made to its context if there is one
//     (port.reusable), and when both sides connect at once the lower
//     address's connection wins (verdictReverse) and the other side's link
//     moves to it. The side that dialed learns that the connection carries
//     the peer's link too from the peer's first packet on it, which its
//     Poll looks for every few calls (port.readUnlisted), so that a
//     context that only polls hears the peer. Each side's TCP
//     acknowledgements then ride on its own packets: with a connection per
//     direction, every other packet a side received cost it a TCP
//     acknowledgement segment, sent from its read before it could answer
//     (a ping-pong 1.5 times as slow).
//  3. Before anything else, the two ends prove to each other that they hold
//     the job's secret (handshake.go): a challenge-response with HMAC-SHA256
//     under a key derived from the secret, nonces from both sides, a label
//     per role. The secret never crosses the wire; a stranger, a peer of
//     another job or a replayed handshake is refused, and the target logs
//     why (Options.Logf) and counts it (Stats.Refused). Handshakes are
//     bounded by Options.Timeout and limited in number.
//  4. The authenticated socket then leaves Go's network poller: the adapter
//     keeps a duplicate of its descriptor and does non-blocking system calls
//     on it itself (conn.go explains why: a socket on the runtime's poller
//     costs a thread wake-up per arriving segment as soon as anything in the
//     process waits on the poller or a timer).
//  5. While a context polls (Port.Progress and Port.Poll, from its Advance),
//     its own goroutine does the socket I/O: Progress writes the descriptors
//     of the link's descriptor buffer and RDMA FIFO in vectored writes
//     (small packets copied next to their frame header, others written from
//     the buffer in place), and reads acks and replies; Poll reads arrived
//     frames, copies packets into the link's reception ring, serves GET and
//     PUT requests from the rank's registered regions (keys and bounds
//     checked; GET data is written from the region, PUT data read into it,
//     without a copy), and hands packets to the receiver in place. A read
//     that drains the socket at a frame's end is the last of its poll, so
//     a ping-pong reads once per message. On an oversubscribed host
//     (Adapter.Oversubscribed: more ranks than the processors they may
//     run on together) the context asks its epoll set which sockets are
//     readable, at most once every few microseconds, rather than reading
//     each at every poll (port.go, oversubPollGap).
//  6. A context whose doorbell is the adapter's (Adapter.Doorbell, when no
//     shared-memory adapter provides one) sleeps in the kernel on its own
//     sockets and is woken by them (sleep.go). When the context stops
//     polling otherwise (its doorbell, another adapter's, is armed to sleep,
//     or the watcher sees no poll for Options.Handoff), the adapter's engine
//     goroutine (engine.go) reads its sockets as they become readable,
//     polling for Options.ReadSpin after each burst before it blocks in its
//     own epoll: requests are served and packets delivered to the ring while
//     the program computes, and the context's doorbell is rung. A write the
//     socket cannot take at once is finished by the engine too.
//  7. A packet's descriptor is given back to the AMI (the transfer counted
//     complete) once the target acknowledged it, which it does once its
//     context took the packet from the reception ring: a done callback
//     means delivered, and an initiator never has more in flight than its
//     descriptor buffer holds, so the target's reception ring (twice that)
//     never overflows and requests never wait behind packets. A target that
//     sends a packet back on its own link to the initiator carries the ack
//     in that packet's header (frame.go), so a ping-pong writes once per
//     message. GET and PUT descriptors complete, in order, with the
//     target's answer; an initiator has at most as many requests
//     unanswered as the target queues replies for, so a side that reads
//     the peer's requests never waits for reply room while the peer waits
//     for it to read its answers on the same connection. A packet
//     injected after requests held back so waits behind them: a packet
//     injected after a PUT (a PutNotify's notification) is read after
//     the PUT's data landed.
//  8. A connection that breaks, carries anything no correct peer sends, or
//     stays silent longer than Options.Timeout (idle connections carry a
//     ping every Timeout/4; TCP keepalive probes too) fails: every
//     descriptor in flight on it completes with a *transport.PeerError
//     naming the peer, the link reports it (Link.Err), the pair's other
//     connection is closed too, the context's doorbell is rung, and the AMI
//     fails what it still holds for that peer. Other peers are not touched.
//     Port.Close says goodbye on each connection after what was queued.
//
// # Wire format
//
// frame.go documents the frames; handshake.go the handshake. Every decoder
// validates everything it reads and has a fuzz target.
//
// # Concurrency
//
// conn.go documents the two try-locks of a connection and the hand-over
// rule that leaves no work behind; the reply queue and the counters shared
// between a connection's sides are single-writer atomics documented where
// they are declared; the engine's epoll interest is one-shot and re-armed
// under a per-connection mutex. Nothing on the small-message paths
// allocates or takes a lock (alloc_test.go asserts it).
//
// The mutexes, all on slow paths, are taken in this order: Adapter.mu, then
// port.mu or conn.armMu; conn.armMu, then engine.mu. None is held across a
// blocking system call.
package tcp
