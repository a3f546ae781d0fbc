package tcp

import (
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo/internal/ring"
)

// Options configure an adapter. The zero value of every field selects its
// default. Through package amigo, the AMIGO_TCP_* variables named in the
// comments override them (amigo.TCPConfig).
type Options struct {
	// Addr is the host or host:port the adapter listens on and publishes to
	// its peers (AMIGO_TCP_ADDR). Empty: all interfaces, published as the
	// address of the interface that routes to the launcher (PMI_PORT), or
	// 127.0.0.1 when every rank shares this host, or else the first
	// non-loopback IPv4 address of an interface that is up.
	Addr string
	// Advertise, if set, is the address published to the peers instead of
	// the listening one (AMIGO_TCP_ADVERTISE): "host:port" as is, or a host
	// alone, published with the listening port. It serves a rank reached
	// through something that forwards to its listener: a NAT or container
	// port mapping, an SSH tunnel, a fault-injecting proxy. The adapter
	// listens on Addr as without it; peers dial only the advertised
	// address, and the handshake authenticates the rank behind it.
	Advertise string
	// RingSlots is the number of 64-byte slots of each link's descriptor
	// buffer (default 1024: 64 KiB). A packet's slots are given back only
	// once the target acknowledged it, so the buffer must cover a round
	// trip for a stream to flow; the target keeps a reception ring of
	// twice the initiator's size per link.
	RingSlots int
	// RDMASlots is the number of descriptors of each link's RDMA FIFO
	// (default 256).
	RDMASlots int
	// Timeout bounds how long a peer may stay silent, while it has no
	// reason to, before its connection is failed; it also bounds connection
	// set-up and the handshake (AMIGO_TCP_TIMEOUT, default 10s). Idle
	// connections carry a ping every Timeout/4, and TCP keepalive probes a
	// silent host within Timeout.
	Timeout time.Duration
	// Handoff is how long a context may go without polling its adapter
	// before the adapter's own goroutines take its sockets over, serving
	// GET and PUT and delivering packets while the program computes
	// (AMIGO_TCP_HANDOFF, default 1ms). While a context polls, its own
	// goroutine does the socket I/O, without any goroutine hand-off.
	Handoff time.Duration
	// ReadSpin is how long a goroutine that took a socket over keeps
	// polling it after it went quiet before it parks on the network poller
	// (AMIGO_TCP_READ_SPIN, default 20µs; negative: park at once).
	ReadSpin time.Duration
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF of every connection; zero
	// leaves the kernel's autotuning on (AMIGO_TCP_SOCKBUF, bytes).
	SocketBuffer int
	// RDMAPiece is the largest GET or PUT the adapter takes in one
	// descriptor; the AMI splits larger ones (AMIGO_TCP_RDMA_PIECE, default
	// 512 KiB). Several pieces in flight keep the socket busy in both
	// directions, and each costs a request and its answer's header: over
	// loopback on an AMD 2-core host, windows of 256 KiB to 4 MiB
	// messages moved 1.22-1.33x as much in pieces of 512 KiB as of 128 KiB
	// (6 interleaved rounds; 512 KiB messages, whole either way, 1.08x),
	// of 1 MiB 1.04-1.10x, and a lone message of 128 KiB to 1 MiB took as
	// long (0.91-1.08x); an earlier host moved 1-4 MiB 1.15-1.25x faster
	// in pieces of 128 or 256 KiB than of 1 MiB.
	RDMAPiece int
	// Logf receives one line per refused connection and per failed
	// connection, saying why; nil logs to standard error.
	Logf func(format string, args ...any)
}

// Defaults for Options' zero values.
const (
	DefaultRingSlots = 1024
	DefaultRDMASlots = 256
	DefaultTimeout   = 10 * time.Second
	DefaultHandoff   = time.Millisecond
	DefaultReadSpin  = 20 * time.Microsecond
	DefaultRDMAPiece = 512 << 10
)

// maxContexts bounds the context index a peer may name.
const maxContexts = 1 << 16

// Validate returns o with the defaults filled in, or the reason it is
// refused.
func (o Options) Validate() (Options, error) {
	if o.RingSlots == 0 {
		o.RingSlots = DefaultRingSlots
	}
	if o.RDMASlots == 0 {
		o.RDMASlots = DefaultRDMASlots
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Handoff == 0 {
		o.Handoff = DefaultHandoff
	}
	if o.ReadSpin == 0 {
		o.ReadSpin = DefaultReadSpin
	}
	if o.RDMAPiece == 0 {
		o.RDMAPiece = DefaultRDMAPiece
	}
	if o.Logf == nil {
		l := log.New(os.Stderr, "amigo tcp: ", log.LstdFlags|log.Lmicroseconds)
		o.Logf = l.Printf
	}
	switch {
	case o.RingSlots < 16 || o.RingSlots > ring.MaxSlots || o.RingSlots&(o.RingSlots-1) != 0:
		return o, fmt.Errorf("tcp: RingSlots %d: want a power of two in [16, %d]", o.RingSlots, ring.MaxSlots)
	case o.RDMASlots < 1 || o.RDMASlots > 1<<16 || o.RDMASlots&(o.RDMASlots-1) != 0:
		return o, fmt.Errorf("tcp: RDMASlots %d: want a power of two up to 65536", o.RDMASlots)
	case o.Timeout < 10*time.Millisecond:
		return o, fmt.Errorf("tcp: Timeout %v: want at least 10ms", o.Timeout)
	case o.Handoff < 10*time.Microsecond || o.Handoff > o.Timeout/4:
		return o, fmt.Errorf("tcp: Handoff %v: want 10µs to Timeout/4", o.Handoff)
	case o.ReadSpin > time.Second:
		return o, fmt.Errorf("tcp: ReadSpin %v: want at most 1s", o.ReadSpin)
	case o.RDMAPiece < 4096:
		return o, fmt.Errorf("tcp: RDMAPiece %d: want at least 4096", o.RDMAPiece)
	case o.SocketBuffer < 0:
		return o, fmt.Errorf("tcp: SocketBuffer %d", o.SocketBuffer)
	}
	if o.Advertise != "" {
		if _, err := advertised(o.Advertise, 1); err != nil {
			return o, err
		}
	}
	return o, nil
}

// advertised returns the address to publish for Options.Advertise adv when
// the adapter listens on port.
func advertised(adv string, port int) (string, error) {
	host, p, err := net.SplitHostPort(adv)
	if err != nil {
		// A host alone (a bare IPv6 address too) takes the listening port.
		host, p = strings.Trim(adv, "[]"), strconv.Itoa(port)
	}
	if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("tcp: Advertise %q: want host or host:port with a port in [1, 65535]", adv)
	}
	if host == "" || strings.ContainsAny(host, " /[]") {
		return "", fmt.Errorf("tcp: Advertise %q: want host or host:port", adv)
	}
	return net.JoinHostPort(host, p), nil
}
