package amigo

import "time"

// Stats counts what a context did. Read it with Context.Stats from the
// goroutine that owns the context.
type Stats struct {
	SentInline         uint64 // active messages injected with their data inline
	SentAtOnce         uint64 // of those, sent by the adapter at once, not through the descriptor buffer (transport.Link.SendNow)
	SentRendezvous     uint64 // sends announced by RTS for the receiver to fetch
	ReceivedInline     uint64 // inline active messages delivered to handlers
	Announced          uint64 // RTS announcements delivered to handlers
	ReceivedRendezvous uint64 // announced messages fetched completely
	Deferred           uint64 // announcements kept by Defer
	Declined           uint64 // announcements declined (no buffer named, or Reject)
	Puts               uint64 // Put and Rput operations started
	Gets               uint64 // Get and Rget operations started
	Atomics            uint64 // remote atomic operations started
	AcksSent           uint64
	AckPackets         uint64 // packets that carried AcksSent: an ACK each, or the ACKs of a pass's completed receives from one peer together
	AcksReceived       uint64
	Queued             uint64        // instructions that waited for room in a FIFO
	NoDispatch         uint64        // messages refused for an unregistered dispatch id
	HeldForDispatch    uint64        // messages held until their handler was registered or their grace ended
	RefusedByPeer      uint64        // inline messages with no ACK that a peer refused for want of a handler
	Malformed          uint64        // packets that did not decode
	StaleAcks          uint64        // acknowledgements of no live operation
	Errors             uint64        // errors reported to Config.OnError
	Sleeps             uint64        // times a waiting goroutine slept
	SleepTimeouts      uint64        // sleeps that ran to their bound (Config.SleepMax; 1 ms on a shared doorbell) without a ring
	SleepTime          time.Duration // time waiting goroutines slept
	PeerFailures       uint64        // peers whose link failed (died, unreachable, broken): not those that closed in order
	PeerGoodbyes       uint64        // peers that closed in order (said goodbye) while this context was open

	// Eager SEND with receiver-driven STOP.
	SentEager         uint64 // sends announced by SEND and streamed
	ReceivedEager     uint64 // streamed messages received completely
	EagerBytesSent    uint64 // bytes streamed in eager packets
	EagerBytesKept    uint64 // eager bytes the receiver kept
	EagerBytesDropped uint64 // eager bytes the receiver dropped (discarded, over budget, after STOP)
	Stops             uint64 // streams stopped: by a STOP packet, or by no word to a SEND whose sender waits for GO
	Gos               uint64 // GO packets sent: SENDs whose sender waited for the word, let stream
	StopsReceived     uint64 // STOP packets a sender read for its streams
	FetchedBytes      uint64 // bytes the receiver fetched by GET
	PutBytes          uint64 // bytes the sender PUT after a STOP that named a buffer
	UnexpectedPeak    int    // most bytes held for messages with no buffer yet
	SendKeysShared    uint64 // sends by announcement that took the registration of a send in flight from the same buffer

	// A window's mid-size sends (Config.MidWay), in epochs of 4 MiB.
	MidInline    uint64 // epochs sent inline
	MidAnnounced uint64 // epochs announced for the receiver to fetch

	// Inline messages of 2 KiB or more that arrived over shared memory, in
	// epochs of 4 MiB, by how the slots of those whose handler did not
	// copy their data out were given back to the sender (Config.Shm.Keep
	// "auto" or "on").
	KeepZeroed uint64 // epochs whose slots were zeroed
	KeepKept   uint64 // epochs whose slots were left as they were

	MulticastsSent      uint64 // multicasts started as origin
	MulticastsReceived  uint64 // multicast announcements received as target
	MulticastsDelivered uint64 // multicasts whose data a target received whole
	MulticastBytesPut   uint64 // bytes deposited into the next buffer of a chain
	MulticastsDropped   uint64 // multicast requests dropped unseen: their origin had failed here
}
