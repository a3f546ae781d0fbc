// Package ofi is amigo's adapter over libfabric (OpenFabrics Interfaces):
// ranks on different hosts connected by a fabric with RDMA — InfiniBand
// and RoCE (verbs;ofi_rxm), HPE Slingshot (cxi), AWS EFA (efa), Omni-Path
// (psm2, opx) — or, for testing, by TCP (tcp;ofi_rxm) and shared memory
// (shm).
//
// The adapter is compiled only with the build tag ofi, through cgo against
// libfabric 1.17 or later (Debian: libfabric-dev). Without the tag the
// package holds only Compiled, false, and a build of amigo stays pure Go.
//
// # What happens, in order
//
//  1. New picks the provider Options.Provider names (fi_getinfo) and
//     checks what amigo needs of it: reliable-datagram endpoints
//     (FI_EP_RDM), messages and RMA, sends delivered in the order they
//     were posted (FI_ORDER_SAS, which keeps a link's packets in order),
//     and the provider managing its resources (FI_RM_ENABLED: a message
//     to a receiver with no buffer posted waits, it is not dropped). It
//     accepts providers that ask for FI_CONTEXT or FI_CONTEXT2 and for the
//     memory-registration modes FI_MR_LOCAL, FI_MR_VIRT_ADDR,
//     FI_MR_ALLOCATED, FI_MR_PROV_KEY and FI_MR_ENDPOINT, and honours
//     them. It makes one endpoint per context, each with a transmit and a
//     receive completion queue (with a file descriptor to sleep on where
//     the provider has one), and publishes the endpoints' names under
//     KVSKey (over shm, whose endpoints are files in /dev/shm, first
//     removing the files that killed processes of this pid namespace
//     left there). After the job's fence, Start reads every peer's names; a
//     peer's addresses enter the address vector on first use. Providers
//     that address by IP (tcp, sockets, udp, verbs) bind their endpoints
//     to Options.Addr, or else to the local address of the route to the
//     launcher, the address through which the job's hosts reach each
//     other (a host with several networks would otherwise publish one
//     the others cannot reach).
//  2. Port.Link returns a link whose descriptor buffer lives in pinned Go
//     memory the provider reads in place. Progress posts each packet the
//     AMI wrote: with fi_inject when it fits the provider's inject size
//     (nothing to wait for), else with fi_sendv of the link's 16-byte
//     header and the packet where it lies in the ring. A message of one
//     slot with no done callback on a link with nothing in flight (every
//     packet taken by the target, the ring empty) is injected at once
//     without the ring (transport.Link.SendNow), and counted transferred
//     once the target took it. Every message carries its sender
//     (wire.go), since a reliable-datagram endpoint does not say who
//     sent.
//  3. Each endpoint keeps room for Options.RecvBuffers of the largest
//     packets (half a link's ring) posted: where the provider has
//     multi-receive buffers (FI_MULTI_RECV), in a few large buffers that
//     take messages one after the other and go back to the provider once
//     it released them and every message in them was handled; otherwise
//     one buffer per message. Poll reads the receive queue, hands packets
//     to the receiver in place, reposts the buffers, posts the packets the
//     handlers wrote (a reply leaves from the Poll that ran its handler)
//     and acknowledges to each sender how many of its packets the context
//     took — on a packet of its own to that sender when one leaves before
//     the next Poll (a reply), else by a message. A packet's slots go back to the AMI (its
//     transfer counted) only once it was acknowledged: a done callback
//     means delivered, and a link never has more in flight than its ring
//     holds (and the one packet sent at once ahead of them) — the flow
//     control that keeps a slow receiver from being flooded, with the
//     provider's managed resources behind it. A peer's goodbye is
//     handled after the packets it sent before it.
//  4. GET and PUT are fi_read and fi_write. The first access to a key
//     asks its owner where the region is (a request its owner's Poll
//     answers): the owner registers the region with fi_mr_reg then, once
//     (bound to the endpoint where the provider wants it; the Go memory
//     under it pinned while registered) and answers with its address
//     (FI_MR_VIRT_ADDR) or none, its length, its permissions and the
//     provider's key. A packet of the AMI that announces a buffer for the
//     peer to GET from (RTS, a SEND above 64 KiB) or PUT into (a STOP of
//     the put variant) goes out behind that answer, unasked, so that the
//     peer's access to it does not wait a round trip. The initiator keeps
//     the answer in a cache of the
//     link's keys, checks every access against the region's bounds and
//     permissions before anything reaches the wire, and posts the
//     operation from the caller's buffer, pinned until its completion
//     (and registered, where the provider asks for FI_MR_LOCAL: once per
//     buffer, kept in the port's bounded cache, regcache.go).
//     Deregistering closes the region's registrations. Descriptors
//     complete in the FIFO's order.
//  5. Remote atomics are performed by the owner's Poll on the word's
//     memory (transport.ApplyAtomic), as on TCP, and answered.
//  6. A port that waits for its peer (an acknowledgement, an answer, a
//     completion) and has nothing to deliver reads its receive queue
//     again within the same call to C, in Poll, for up to 0.5 us (as many
//     reads as the port timed to fit when it opened: dozens over shm,
//     none where a read is a system call), so that an arriving message is
//     seen within a read of the queue rather than within a pass of the
//     AMI's progress loop, and goes to its handler from that same Poll.
//     Progress then leaves the receive queue to the Poll that follows it
//     (it reads it only where no Poll came since its last call: the
//     watcher, a closing context); it posts the links' packets and RDMA
//     and reads the transmit queue while something completes there.
//     Where a read is a system call, Progress reads both queues in one
//     call after it posted, and Poll only what that left. A context
//     sleeps on its completion queues (sleep.go), whose file descriptors
//     join its epoll set only for the sleep.
//  7. A provider error on an operation toward a peer, a goodbye from a
//     closing peer, or a link left waiting for its peer longer than
//     Options.Timeout fails the link with a *transport.PeerError naming
//     the peer; the AMI fails what it holds for it. Silence means death
//     only of a process: the adapter's watcher of a context that has not
//     polled for a quarter of the timeout (its program computes) tells
//     every peer that sent to it that it lives (kindAlive), at most once a
//     quarter timeout; the watcher also answers requests for keys and
//     atomics without the program.
//
// # Threading
//
// The endpoint of a context is used by the goroutine that owns the
// context; the domain, the address vector and the region table are
// shared, so the adapter asks for FI_THREAD_SAFE. The adapter's mutex
// guards its tables and is taken on slow paths only.
//
// A call into the provider holds its goroutine's P for as long as it
// lasts, which may be tens of microseconds (shm copies a large GET inside
// fi_read). In a process with a single P (a rank bound to one core), the
// Go runtime takes the P from such a call and keeps its monitor thread
// waking every 20 us on the rank's core; so Start raises GOMAXPROCS from
// 1 to 2 on a host that is not oversubscribed, unless the environment set
// GOMAXPROCS, and the last adapter to close gives the 1 back (procs.go).
package ofi
