//go:build ofi

package ofi

import (
	"fmt"
	"log"
	"os"
	"time"

	"github.com/amigo-hpc/amigo/internal/ring"
)

// Options configure an adapter. The zero value of every field selects its
// default. Through package amigo, the AMIGO_OFI_* variables named in the
// comments override them.
type Options struct {
	// Provider is the libfabric provider, as fi_info names it
	// (AMIGO_OFI_PROVIDER): "tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "cxi",
	// "efa". Empty: DefaultProvider.
	Provider string
	// Addr is the local address the endpoints bind to, for providers that
	// address by IP (AMIGO_OFI_ADDR; tcp, sockets, udp, verbs). Empty:
	// the local address of the route to the launcher, where the rank was
	// launched over the network, else the provider's choice.
	Addr string
	// Contexts is the number of contexts each rank opens: one endpoint is
	// made and published for each (default 1).
	Contexts int
	// RingSlots is the number of 64-byte slots of each link's descriptor
	// buffer (default 1024). A packet's slots are given back once the
	// target acknowledged it, so the buffer bounds what a link has in
	// flight; the largest packet is half of it.
	RingSlots int
	// RDMASlots is the number of descriptors of each link's RDMA FIFO
	// (default 256).
	RDMASlots int
	// RecvBuffers is the number of receive buffers each endpoint keeps
	// posted, each large enough for the largest packet (default 64).
	RecvBuffers int
	// Timeout bounds how long a link may wait for its peer (an
	// acknowledgement, an RDMA completion, an answer) before the peer
	// counts as dead and the link fails (AMIGO_OFI_TIMEOUT, default 10s).
	Timeout time.Duration
	// RDMAPiece is the largest GET or PUT the adapter takes in one
	// descriptor; the AMI splits larger ones (default 1 MiB).
	RDMAPiece int
	// SingleRecv posts one receive buffer per message even where the
	// provider has multi-receive buffers (FI_MULTI_RECV), which the
	// adapter uses otherwise; for tests of that path.
	SingleRecv bool
	// RegisterLocal registers the local buffers of GET and PUT even when
	// the provider does not ask for it (FI_MR_LOCAL), to exercise that
	// path on providers that do not need it.
	RegisterLocal bool
	// CgoCalls makes every call into libfabric through cgo. Otherwise,
	// on a port whose looks at its completion queues read memory (it
	// spins on them: shm), the message path's two calls (that look, the
	// injection of a small packet) run on a stack of the port's own,
	// without cgo's hand-over to the scheduler (package cstack), on the
	// platforms that have it (linux/amd64) (AMIGO_OFI_CGOCALLS=1).
	CgoCalls bool
	// Logf receives one line per failed link and per packet refused;
	// nil logs to standard error.
	Logf func(format string, args ...any)
}

// Defaults for Options' zero values.
const (
	DefaultProvider    = "tcp;ofi_rxm"
	DefaultRingSlots   = 1024
	DefaultRDMASlots   = 256
	DefaultRecvBuffers = 64
	DefaultTimeout     = 10 * time.Second
	DefaultRDMAPiece   = 1 << 20
)

// Validate returns o with the defaults filled in, or the reason it is
// refused.
func (o Options) Validate() (Options, error) {
	if o.Provider == "" {
		o.Provider = DefaultProvider
	}
	if o.Contexts == 0 {
		o.Contexts = 1
	}
	if o.RingSlots == 0 {
		o.RingSlots = DefaultRingSlots
	}
	if o.RDMASlots == 0 {
		o.RDMASlots = DefaultRDMASlots
	}
	if o.RecvBuffers == 0 {
		o.RecvBuffers = DefaultRecvBuffers
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.RDMAPiece == 0 {
		o.RDMAPiece = DefaultRDMAPiece
	}
	if o.Logf == nil {
		l := log.New(os.Stderr, "amigo ofi: ", log.LstdFlags|log.Lmicroseconds)
		o.Logf = l.Printf
	}
	switch {
	case o.Contexts < 1 || o.Contexts > 1<<10:
		return o, fmt.Errorf("ofi: Contexts %d: want 1 to 1024", o.Contexts)
	case o.RingSlots < 16 || o.RingSlots > ring.MaxSlots || o.RingSlots&(o.RingSlots-1) != 0:
		return o, fmt.Errorf("ofi: RingSlots %d: want a power of two in [16, %d]", o.RingSlots, ring.MaxSlots)
	case o.RDMASlots < 1 || o.RDMASlots > 1<<14 || o.RDMASlots&(o.RDMASlots-1) != 0:
		return o, fmt.Errorf("ofi: RDMASlots %d: want a power of two up to 16384", o.RDMASlots)
	case o.RecvBuffers < 2 || o.RecvBuffers > 4096:
		return o, fmt.Errorf("ofi: RecvBuffers %d: want 2 to 4096", o.RecvBuffers)
	case o.Timeout < 10*time.Millisecond:
		return o, fmt.Errorf("ofi: Timeout %v: want at least 10ms", o.Timeout)
	case o.RDMAPiece < 4096:
		return o, fmt.Errorf("ofi: RDMAPiece %d: want at least 4096", o.RDMAPiece)
	}
	return o, nil
}
