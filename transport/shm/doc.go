// Package shm is amigo's adapter between the processes of one host: ranks
// exchange messages through descriptor buffers in shared memory, and move
// the data of GET and PUT by the fastest of three ways the host allows.
//
// # Segments
//
// Each rank makes one control segment, a memfd file of mode 0600 with no
// name in any file system, and publishes its pid and descriptor through the
// job's key-value space (New, before the job's fence). After the fence,
// Start maps every other local rank's segment by opening
// /proc/PID/fd/FD, checks its header (a token derived from the job's secret
// proves it belongs to the job), opens a pidfd on the process, and probes
// cross-memory attach toward it. A segment is freed by the kernel when the
// last process that mapped it exits, however it exits: nothing is ever left
// in /dev/shm, even after kill -9. layout.go gives the segment's layout;
// everything a peer computes from a header lies inside the mapping.
//
// # Messages
//
// A rank's segment holds, for each of its contexts, one descriptor buffer
// (package internal/ring, seed 003) per context of every other local rank:
// single producer, single consumer, written in place by the producer and read
// in place by the consumer's Port.Poll, small messages inline. The consumer
// learns of new rings through a generation word the producer bumps; a
// consumer that closes, or that finds a corrupt descriptor, marks the ring
// and bumps the producer's events word, so that the producer fails its link.
//
// # Sleeping
//
// Each context's doorbell is a word in its rank's segment (DoorbellProvider):
// a context that found nothing to do arms it, looks once more, and sleeps on
// a futex without FUTEX_PRIVATE_FLAG, so that producers in other processes
// wake it; producers load the word after they published and make the wake
// system call only when it says the consumer sleeps. Idle contexts yield the
// OS thread, and spin little when the host runs more ranks than it has
// processors (Oversubscribed).
//
// # GET and PUT
//
// An RDMA descriptor is performed by the initiator's Progress, a bounded
// piece at a time, in one of three ways (Way):
//
//   - segment: the target region lies in a segment the owner made with Alloc
//     (amigo's AllocMemory); the initiator maps it and copies, one memcpy,
//     without the owner;
//   - cma: the kernel copies between the initiator's buffer and the owner's
//     memory (process_vm_readv/writev), one copy, without the owner, on any
//     Go memory, where the kernel allows it;
//   - copy: the owner's engine copies between its memory and a ring of chunks
//     in its segment while the initiator copies on the other side, two
//     copies in parallel; it needs the owner to run, and serves the regions
//     the first two cannot. The chunk rings are a small pool of the owner's
//     (Options.ChunkRings, pool.go), drawn by the copies in flight, so a
//     host's shared memory grows with its ranks' transfers, not with the
//     square of its ranks: 3 MiB a rank at 32 ranks during an all-to-all
//     of 1 MiB (bench/shm_mem.sh), against a mebibyte per pair before.
//
// Between cma and copy, which both reach any Go memory, the automatic way
// chooses by measurement: each port times its transfers of 512 KiB and more
// by way and owner, keeps a moving average of the rate of the way in use,
// takes the faster and tries the other one transfer in 32 (in 4 at first,
// in 128 when it measured under two thirds of the faster), taking that
// trial's rate as the way's (choose.go). Which one wins depends on the
// kernel's page pinning, the caches, where the host placed the two
// processors, and whether the owner advances often enough to feed a
// pipeline: on one 2-core virtual machine the pipelined copy moved 30-35
// GB/s at 4 MiB in one hour and 6-7 in the next, when cross-memory attach
// moved 17-20 in both.
//
// Cross-memory attach pins the pages it copies, and Go's heap lies on
// small pages unless the host's transparent huge pages are "always": before
// it moves a large transfer of Go memory that way, the initiator asks the
// kernel to back the 2 MiB blocks under its buffer with huge pages, and an
// owner does the same for any region it registers, whose pages are the ones
// a peer's call pins (huge.go; 15 against 44-60 GB/s for one
// process_vm_readv stream on a 2-core machine).
//
// Small transfers by cross-memory attach are gathered: the GETs (or PUTs)
// queued one after the other toward one owner, each under 512 KiB, move in
// one vectored system call of up to 4 MiB (batch.go), since a call costs
// more than copying a few kilobytes. A window of messages that their
// receiver fetches (amigo's STOP, see stopWorth there) becomes a few calls.
// A batch of some 256 KiB or more (coopMin) is split with the owner
// (coop.go): the initiator moves the fronts of its descriptors in one call
// and the owner the backs, in one of its own, one request per batch; the
// owner's share (an eighth to 3/8 of each) follows which side finished
// first, and an owner that does not take its part in time leaves it to
// the initiator.
// These calls, like every cross-memory attach, are raw system calls
// (vmCopy): a rank bound to one core keeps its processor through them.
//
// To resolve a key without the owner, the owner mirrors its region table
// into its segment (transport.Mirror): see mirrorEntry for how an access and
// a deregistration exclude each other. A large segment or cma transfer is
// also offered to the owner as a cooperative copy: when the owner advances
// (or its engine runs), it copies pieces from the back while the initiator
// copies from the front, both cores at once (channel.go); a cma transfer of
// 256 to 512 KiB that is not batched (none queued next to it) in halves
// (helpPieceCMAMid). Options.Way forces
// one way, so that each is tested alone.
//
// # Peers that die
//
// A watcher goroutine polls the pidfds of the peers. When one exits, every
// link to it fails with an ExitError naming its rank and pid, its contexts
// are woken, and nothing waits for it any more: not a deregistration, not a
// transfer, not a cooperative copy. A rank killed mid-transfer thus makes its
// peers' operations complete with an error, and the survivors go on.
//
// # Memory ordering
//
// Every word that one process writes and another reads is accessed with
// sync/atomic, or stored with a release store of package internal/order
// (see package internal/ring for the doorbell barrier that makes those
// safe); the comments
// on ring.Control, linkHeader, mirrorEntry, channel and allocEntry say which
// side writes what, in which order, and why the reader cannot see a mix.
// Nothing read from a peer's segment is trusted: positions are checked
// against their rings, requests against the owner's region table (which
// checks bounds and keys), alloc entries against the files they name.
package shm
