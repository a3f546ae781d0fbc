package amigo

import (
	"fmt"

	"github.com/amigo-hpc/amigo/transport"
)

// Limits are the sizes a program may rely on when it lays out its messages
// (PAMI_Context_query, ucp_context_query): they follow from the client's
// effective Config and hold for every peer.
type Limits struct {
	// ImmediateMax is the most header plus data SendImmediate and Reply
	// carry.
	ImmediateMax int
	// InlineMax is the most header plus data a Send carries in the
	// descriptor itself, copied at once: its done callback may run as
	// soon as the descriptor is written (over shared memory) and the
	// buffers are free on return. Larger sends are announced and fetched
	// or streamed (Config.Protocol).
	InlineMax int
	// HeaderMax is the most header bytes of any send.
	HeaderMax int
	// Dispatches is the number of dispatch ids: 0 to Dispatches-1.
	Dispatches int
	// Contexts is the number of contexts of every rank.
	Contexts int
}

// Limits returns the client's limits.
func (c *Client) Limits() Limits {
	return Limits{
		ImmediateMax: min(ImmediateMax, c.cfg.InlineMax),
		InlineMax:    c.cfg.InlineMax,
		HeaderMax:    min(c.cfg.InlineMax, 0xffff),
		Dispatches:   MaxDispatch,
		Contexts:     len(c.contexts),
	}
}

// PeerInfo says how this rank reaches another.
type PeerInfo struct {
	// Adapter names the adapter that carries the traffic: "loop" (this
	// process), "shm" (another process of this host), "tcp" (another
	// host, or any rank with AMIGO_TRANSPORT=tcp).
	Adapter string
	// SameProcess and SameHost say where the rank runs.
	SameProcess, SameHost bool
	// Atomics lists the remote atomic operations the peer performs: every
	// adapter has them all, on Int32, Uint32, Int64 and Uint64 words, and
	// Add, Swap and CAS on Float64 words.
	Atomics []AtomicOp
	// AtomicsByInitiator says that atomics on the peer's shared
	// allocations (AllocMemory, AllocAll) are this rank's own atomic
	// instructions on its mapping of them, with no message and no help
	// from the peer (shm, and loop); on the peer's other memory, and over
	// tcp, the peer performs them.
	AtomicsByInitiator bool
}

// Peer returns how this rank reaches rank.
func (c *Client) Peer(rank int) (PeerInfo, error) {
	if rank < 0 || rank >= c.size {
		return PeerInfo{}, fmt.Errorf("amigo: rank %d of %d: %w", rank, c.size, ErrUnknownEndpoint)
	}
	a := c.adapters[c.route[rank]]
	pi := PeerInfo{Adapter: a.Name(), Atomics: []AtomicOp{AtomicAdd, AtomicAnd, AtomicOr, AtomicXor, AtomicSwap, AtomicCAS}}
	switch pi.Adapter {
	case "loop":
		pi.SameProcess, pi.SameHost, pi.AtomicsByInitiator = true, true, true
	case "shm":
		pi.SameHost, pi.AtomicsByInitiator = true, true
	default:
		if h, ok := a.(transport.HostMapper); ok {
			pi.SameHost = h.SameHost(rank)
		}
	}
	return pi, nil
}
